"""torch_fl.quantization: calibration, fake-quant execution, sensitivity, mixed plans.

CPU tests always run (CPU is the reference and has no descriptor limits); acme
tests skip only when acme is not installed (outside CI); a broken acme fails them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from torch_fl import quantization as Q

# ------------------------------------------------------------------ fixtures

def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def _outlier_model_and_data():
    """An MLP whose first layer is hypersensitive to per-tensor int8 inputs.

    Input feature 0 is 300x larger than the others, so a per-tensor input scale
    covering it rounds the informative features to a few levels; its weight column
    is tiny, so the outlier carries little of the output. Quantizing layer "0" is
    by far the most harmful, which a mixed plan must find.
    """
    model = _mlp(1).eval()
    with torch.no_grad():
        model[0].weight[:, 0] *= 1e-3
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(128, 8, generator=gen)
    x[:, 0] *= 300.0
    return model, [x[:64], x[64:]]


def _trained_classifier():
    """A small classifier trained to high accuracy on separable synthetic data."""
    gen = torch.Generator().manual_seed(3)
    centers = torch.randn(4, 8, generator=gen) * 3
    y = torch.randint(0, 4, (512,), generator=gen)
    x = centers[y] + 0.5 * torch.randn(512, 8, generator=gen)
    model = _mlp(4)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only contend on a loaded machine
    try:
        for _ in range(40):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval(), x, y


# Skips only when acme is not installed (and not required); a broken acme fails
# (the acme_backend fixture, tests/support/required_backend.py).
needs_acme = pytest.mark.usefixtures("acme_backend")


# ------------------------------------------------------------------ fake quant numerics

def test_fake_quantize_matches_torch_per_tensor_and_per_channel():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * 5
    ours = Q.fake_quantize(x, 0.037, -3, -128, 127)
    ref = torch.fake_quantize_per_tensor_affine(x, 0.037, -3, -128, 127)
    assert torch.equal(ours, ref)
    w = torch.randn(16, 3, 3, 3, generator=gen)
    scale = torch.rand(16, generator=gen) * 0.05 + 0.005
    zp = torch.randint(-5, 5, (16,), generator=gen)
    ours = Q.fake_quantize(w, scale, zp, -128, 127, axis=0)
    ref = torch.fake_quantize_per_channel_affine(w, scale, zp.int(), 0, -128, 127)
    assert torch.equal(ours, ref)
    # values outside the representable range clamp to it
    big = Q.fake_quantize(torch.tensor([1e6, -1e6]), 0.1, 0, -128, 127)
    assert big.tolist() == pytest.approx([12.7, -12.8])


# ------------------------------------------------------------------ calibrate

def test_calibrate_per_tensor_params_cover_weights_and_inputs():
    model, data = _outlier_model_and_data()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calib = Q.calibrate(model, data, "cpu", scheme="per_tensor")
    assert calib.layer_names == ["0", "2", "4"]
    assert calib.scheme == "per_tensor_affine" and calib.dtype is torch.int8
    for name, q in calib.layers.items():
        w = model.get_submodule(name).weight.detach()
        assert q.weight_axis is None and q.weight_scale.dim() == 0
        assert (q.quant_min, q.quant_max) == (-128, 127)
        # MinMax affine: the range [min(w,0), max(w,0)] spread over 255 steps
        expect = (w.max().clamp(min=0) - w.min().clamp(max=0)) / 255
        assert float(q.weight_scale) == pytest.approx(float(expect), rel=1e-5)
        # every weight is representable within half a step
        fq = Q.fake_quantize(w, q.weight_scale, q.weight_zero_point, -128, 127)
        assert (fq - w).abs().max() <= float(q.weight_scale) / 2 + 1e-7
    # the first layer's input is the data: its range spans the data's range
    x = torch.cat(data)
    q0 = calib.layers["0"]
    span = q0.input_scale * 255
    assert span == pytest.approx(float(x.max().clamp(min=0) - x.min().clamp(max=0)), rel=1e-4)
    # calibration ran on a copy: the model is untouched and has no hooks left
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(not m._forward_pre_hooks for m in model.modules())


def test_calibrate_per_channel_and_histogram():
    model, data = _outlier_model_and_data()
    calib = Q.calibrate(model, data, "cpu", scheme="per_channel", observer="histogram")
    assert calib.scheme == "per_channel_affine" and calib.observer == "histogram"
    for name, q in calib.layers.items():
        w = model.get_submodule(name).weight.detach()
        assert q.weight_axis == 0 and q.weight_scale.shape == (w.shape[0],)
        fq = Q.fake_quantize(w, q.weight_scale, q.weight_zero_point, -128, 127, axis=0)
        assert ((fq - w).abs() <= q.weight_scale[:, None] / 2 + 1e-7).all()
        assert q.input_scale > 0
    # layer "0" had its column 0 shrunk: per-channel scales differ per row
    assert calib.layers["0"].weight_scale.unique().numel() > 1
    d = calib.to_dict()
    assert d["scheme"] == "per_channel_affine" and len(d["layers"]["0"]["weight_scale"]) == 32


def test_per_channel_beats_per_tensor_when_one_channel_is_huge():
    model = _mlp(5).eval()
    with torch.no_grad():
        model[2].weight[0] *= 100.0   # one output channel dwarfs the others
    x = [torch.randn(64, 8, generator=torch.Generator().manual_seed(6))]
    per_tensor = Q.evaluate(model, Q.calibrate(model, x, "cpu", scheme="per_tensor"), x,
                            sensitivity=False)
    per_channel = Q.evaluate(model, Q.calibrate(model, x, "cpu", scheme="per_channel"), x,
                             sensitivity=False)
    assert per_channel.drop < per_tensor.drop / 2, (per_channel.drop, per_tensor.drop)


def test_calibrate_errors():
    model, data = _outlier_model_and_data()
    with pytest.raises(Q.QuantizationNotSupported, match="unknown quantization scheme 'per_row'"):
        Q.calibrate(model, data, "cpu", scheme="per_row")
    with pytest.raises(Q.QuantizationNotSupported, match="unsupported quantization dtype"):
        Q.calibrate(model, data, "cpu", dtype=torch.int16)
    with pytest.raises(KeyError, match="nope"):
        Q.calibrate(model, data, "cpu", layers=["nope"])
    with pytest.raises(ValueError, match="no batch"):
        Q.calibrate(model, [], "cpu")
    with pytest.raises(ValueError, match="layer 'unused' was never called"):
        Q.calibrate(_Unused(), data, "cpu")


class _Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(8, 2)
        self.unused = nn.Linear(8, 2)

    def forward(self, x):
        return self.used(x)


def test_descriptor_limits_are_enforced(monkeypatch):
    """The refusal path, driven by a descriptor (no real backend needed)."""
    from torch_fl import _backends

    fake = SimpleNamespace(NAME="meta", DESCRIPTOR={
        "quantization_schemes": ["per_tensor_affine"], "quantization_dtypes": ["int8"]})
    monkeypatch.setattr(_backends, "backend", lambda device=None: fake)
    assert Q.supported("meta") == {"schemes": ["per_tensor_affine"], "dtypes": ["int8"]}
    model, data = _outlier_model_and_data()
    with pytest.raises(Q.QuantizationNotSupported,
                       match=r"device 'meta' does not support quantization scheme 'per_channel'"
                             r".*allows: per_tensor_affine"):
        Q.calibrate(model, data, "meta", scheme="per_channel")
    with pytest.raises(Q.QuantizationNotSupported,
                       match=r"device 'meta' does not support quantization dtype uint8.*allows: int8"):
        Q.calibrate(model, data, "meta", dtype=torch.uint8)
    fake.DESCRIPTOR = {}
    with pytest.raises(Q.QuantizationNotSupported, match="allows: none"):
        Q.calibrate(model, data, "meta")


# ------------------------------------------------------------------ evaluate / plans

def test_evaluate_accuracy_on_trained_classifier():
    model, x, y = _trained_classifier()
    batches = [(x[:256], y[:256]), (x[256:], y[256:])]   # DataLoader-style (inputs, labels)
    calib = Q.calibrate(model, batches, "cpu", scheme="per_channel")
    report = Q.evaluate(model, calib, batches)
    assert report.metric == "accuracy"
    assert report.float_score > 0.9
    assert report.drop == pytest.approx(report.float_score - report.quant_score)
    assert abs(report.drop) <= 0.03          # int8 barely hurts a well-separated task
    assert set(report.sensitivity) == {"0", "2", "4"}
    # explicit labels give the same answer; a custom metric is used as given
    same = Q.evaluate(model, calib, [x[:256], x[256:]], [y[:256], y[256:]], sensitivity=False)
    assert same.quant_score == pytest.approx(report.quant_score)
    neg_mse = Q.evaluate(model, calib, [x], [y], sensitivity=False,
                         metric=lambda out, lab: -float(out.pow(2).mean()))
    assert neg_mse.metric == "<lambda>" and neg_mse.float_score < 0
    with pytest.raises(ValueError, match="needs labels"):
        Q.evaluate(model, calib, [x], metric="accuracy")


def test_sensitivity_finds_the_fragile_layer_and_mixed_plan_reduces_the_drop():
    model, data = _outlier_model_and_data()
    calib = Q.calibrate(model, data, "cpu", scheme="per_tensor")
    report = Q.evaluate(model, calib, data)
    assert report.metric == "output_error" and report.float_score == 0.0
    assert report.drop > 0.05                                  # all-int8 is visibly wrong
    assert report.most_sensitive(1) == ["0"]
    assert report.sensitivity["0"] > 5 * max(report.sensitivity["2"], report.sensitivity["4"])

    plan = Q.mixed_plan(report, budget=1)
    assert plan.float_layers == ["0"] and plan.quantized == ["2", "4"]
    mixed = Q.evaluate(model, calib, data, plan=plan, sensitivity=False)
    assert mixed.quantized_layers == ["2", "4"]
    assert mixed.drop < report.drop / 4, (mixed.drop, report.drop)

    by_threshold = Q.mixed_plan(report, threshold=report.sensitivity["0"] / 2)
    assert by_threshold.float_layers == ["0"]


def test_mixed_plan_rules():
    sens = {"a": 0.1, "b": 0.5, "c": 0.02}
    assert Q.mixed_plan(sens, budget=2) == Q.MixedPlan(quantized=["c"], float_layers=["b", "a"])
    assert Q.mixed_plan(sens, budget=0).float_layers == []
    assert Q.mixed_plan(sens, threshold=0.05).quantized == ["c"]
    with pytest.raises(ValueError, match="exactly one"):
        Q.mixed_plan(sens)
    with pytest.raises(ValueError, match="exactly one"):
        Q.mixed_plan(sens, budget=1, threshold=0.1)
    with pytest.raises(ValueError, match="empty sensitivity"):
        Q.mixed_plan({}, budget=1)


def test_fake_quantize_model_leaves_the_original_alone():
    model, data = _outlier_model_and_data()
    calib = Q.calibrate(model, data, "cpu")
    qmodel = Q.fake_quantize_model(model, calib, ["2"])
    assert isinstance(qmodel[2], Q.FakeQuantized)
    assert isinstance(qmodel[0], nn.Linear) and isinstance(model[2], nn.Linear)
    assert not torch.equal(qmodel[2].layer.weight, model[2].weight)
    with pytest.raises(KeyError, match="not in the calibration"):
        Q.fake_quantize_model(model, calib, ["9"])


def test_resnet18_tiny_input_cpu():
    from torch_fl.models import resnet18

    torch.manual_seed(0)
    model = resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 16, 16)
    calib = Q.calibrate(model, [x], "cpu", scheme="per_channel")
    assert len(calib.layers) == 21 and "fc" in calib.layers
    report = Q.evaluate(model, calib, [x], sensitivity=False)
    assert 0 < report.drop < 0.2


# ------------------------------------------------------------------ acme

@needs_acme
def test_acme_descriptor_limits():
    assert Q.supported("acme") == {"schemes": ["per_tensor_affine", "per_channel_affine"],
                                   "dtypes": ["int8"]}
    model, data = _outlier_model_and_data()
    with pytest.raises(Q.QuantizationNotSupported,
                       match=r"device 'acme' does not support quantization scheme "
                             r"'per_tensor_symmetric'.*per_tensor_affine, per_channel_affine"):
        Q.calibrate(model, data, "acme", scheme="per_tensor_symmetric")
    with pytest.raises(Q.QuantizationNotSupported, match=r"'acme'.*dtype uint8.*allows: int8"):
        Q.calibrate(model, data, "acme", dtype=torch.uint8)


@needs_acme
def test_acme_calibration_and_fake_quant_match_cpu():
    model, data = _outlier_model_and_data()
    on_cpu = Q.calibrate(model, data, "cpu", scheme="per_channel")
    on_acme = Q.calibrate(model, data, "acme", scheme="per_channel")
    assert on_acme.device == "acme"
    for name in on_cpu.layers:
        a, c = on_acme.layers[name], on_cpu.layers[name]
        assert torch.allclose(a.weight_scale, c.weight_scale)
        assert torch.equal(a.weight_zero_point, c.weight_zero_point)
        assert a.input_scale == pytest.approx(c.input_scale, rel=1e-5)
    qmodel = Q.fake_quantize_model(model, on_acme, device="acme")
    assert qmodel[0].layer.weight.device.type == "acme"
    with torch.no_grad():
        out = qmodel(data[0].to("acme"))
        ref = Q.fake_quantize_model(model, on_cpu)(data[0])
    assert out.device.type == "acme"
    torch.testing.assert_close(out.cpu(), ref, atol=1e-4, rtol=1e-4)


@needs_acme
def test_acme_sensitivity_and_mixed_plan():
    model, data = _outlier_model_and_data()
    calib = Q.calibrate(model, data, "acme", scheme="per_tensor")
    report = Q.evaluate(model, calib, data)
    cpu_report = Q.evaluate(model, Q.calibrate(model, data, "cpu"), data, sensitivity=False)
    assert report.drop == pytest.approx(cpu_report.drop, rel=1e-3, abs=1e-5)
    assert report.most_sensitive(1) == ["0"]
    mixed = Q.evaluate(model, calib, data, plan=Q.mixed_plan(report, budget=1), sensitivity=False)
    assert mixed.drop < report.drop / 4


@needs_acme
def test_acme_resnet18_tiny_input():
    from torch_fl.models import resnet18

    torch.manual_seed(0)
    model = resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 16, 16)
    calib = Q.calibrate(model, [x], "acme", scheme="per_channel")
    report = Q.evaluate(model, calib, [x], sensitivity=False)
    cpu = Q.evaluate(model, Q.calibrate(model, [x], "cpu", scheme="per_channel"), [x],
                     sensitivity=False)
    assert 0 < report.drop < 0.2
    assert report.drop == pytest.approx(cpu.drop, rel=0.05, abs=1e-3)


@needs_acme
def test_acme_refuses_running_a_cpu_calibration_it_cannot_execute():
    model, data = _outlier_model_and_data()
    calib = Q.calibrate(model, data, "cpu", scheme="per_channel_symmetric")
    with pytest.raises(Q.QuantizationNotSupported, match="device 'acme'.*per_channel_symmetric"):
        Q.evaluate(model, calib, data, device="acme")
    ok = Q.calibrate(model, data, "cpu", scheme="per_channel")   # acme lists this one
    report = Q.evaluate(model, ok, data, device="acme", sensitivity=False)
    assert report.drop > 0
