"""torch_fl precision on a real backend: autocast, GradScaler, compare_precision,
compare_model (finds a deliberately wrong kernel), flsdk compare."""

from __future__ import annotations

import json
import types

import pytest
import torch
from torch.nn import functional as F

import torch_fl
from torch_fl import _backends
from torch_fl.testing.perturb import perturbed_kernel

DEVICE = _backends.first_device()
pytestmark = pytest.mark.skipif(
    DEVICE is None, reason="no flsdk backend installed or loadable: "
    + "; ".join(f"{r['name']}: {r['error']}" for r in torch_fl.backend_reports()))
NAME = DEVICE.split(":")[0] if DEVICE else None


def test_get_supported_precision():
    p = torch_fl.get_supported_precision(DEVICE)
    amp = [getattr(torch, n) for n in _backends.backend(DEVICE).DESCRIPTOR["amp_dtypes"]]
    assert p["amp_dtypes"] == amp and p["autocast_dtype"] == amp[0]
    assert torch.float32 in p["dtypes"]
    assert p["bf16"] == (torch.bfloat16 in amp)


def test_autocast_matmul_is_bfloat16_and_switch_restores():
    a = torch.randn(8, 8, device=DEVICE)
    b = torch.randn(8, 8, device=DEVICE)
    assert (a @ b).dtype == torch.float32
    with torch_fl.set_auto_mixed_precision(True, dtype=torch.bfloat16):
        assert torch_fl.get_auto_mixed_precision() == {"enabled": True, "dtype": torch.bfloat16}
        c = a @ b
        assert c.dtype == torch.bfloat16 and c.device == a.device
        # fp32-policy ops stay float32 inside autocast
        assert torch.mm(a, b).sum().dtype in (torch.float32, torch.bfloat16)
        with torch_fl.set_auto_mixed_precision(False):
            assert (a @ b).dtype == torch.float32
        assert (a @ b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32
    assert not torch_fl.get_auto_mixed_precision()["enabled"]
    torch.testing.assert_close(c.float(), a @ b, atol=0.1, rtol=0.05)


def test_autocast_global_switch():
    a = torch.randn(4, 4, device=DEVICE)
    try:
        torch_fl.set_auto_mixed_precision(True)  # global, default dtype of the device
        assert (a @ a).dtype == torch_fl.get_supported_precision(DEVICE)["autocast_dtype"]
        torch_fl.set_auto_mixed_precision(True, dtype=torch.float16)  # replaces it
        assert (a @ a).dtype == torch.float16
    finally:
        torch_fl.set_auto_mixed_precision(False)
    assert (a @ a).dtype == torch.float32
    with pytest.raises(ValueError, match="does not support autocast"):
        torch_fl.set_auto_mixed_precision(True, dtype=torch.float64)


def test_grad_scaler_step_on_device():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(NAME, init_scale=1024.0)
    assert type(torch_fl.grad_scaler(DEVICE)) is type(scaler)
    x = torch.randn(16, 8, device=DEVICE)
    y = torch.randint(0, 2, (16,), device=DEVICE)
    w0 = model.weight.detach().cpu().clone()
    with torch_fl.set_auto_mixed_precision(True, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    scaled = scaler.scale(loss)
    assert float(scaled.detach().cpu()) == pytest.approx(1024.0 * float(loss.detach().cpu()),
                                                        rel=1e-2)
    scaled.backward()
    scaler.unscale_(opt)
    grad = model.weight.grad.detach().cpu()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1024.0  # finite grads: no backoff, growth not due yet
    # the step used unscaled gradients: w1 = w0 - lr * grad
    torch.testing.assert_close(model.weight.detach().cpu(), w0 - 0.1 * grad)
    # an inf gradient skips the step and halves the scale
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    model.weight.grad.fill_(float("inf"))
    w1 = model.weight.detach().cpu().clone()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 512.0
    torch.testing.assert_close(model.weight.detach().cpu(), w1)


def test_compare_precision_numbers():
    torch.manual_seed(0)
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    (d,) = torch_fl.compare_precision(torch.matmul, (a, b), "cpu", DEVICE).diffs
    assert d.shape == [32, 16] and d.ok
    assert d.max_abs < 1e-4 and d.cosine > 0.999999
    # bfloat16 on the device against float32 on the CPU: visibly less precise
    (lo,) = torch_fl.compare_precision(
        lambda x, y: (x.to(torch.bfloat16) @ y.to(torch.bfloat16)).float()
        if x.device.type != "cpu" else x @ y, (a, b), "cpu", DEVICE, atol=1e-5, rtol=1e-5).diffs
    assert lo.max_abs > 1e-3 and not lo.ok and 0.99 < lo.cosine < 1.0
    outs = torch_fl.compare_precision(lambda x: (x.relu(), x.sum(0)), (a,), "cpu",
                                      DEVICE).diffs
    assert [o.shape for o in outs] == [[32, 64], [64]]
    # default tolerances follow the output dtype: integers must be exact
    (idx,) = torch_fl.compare_precision(lambda x: x.argmax(1), (a,), "cpu", DEVICE).diffs
    assert idx.ok and idx.max_abs == 0 and idx.dtype_b == "int64"
    (off,) = torch_fl.compare_precision(
        lambda x: x.argmax(1) + (1 if x.device.type != "cpu" else 0), (a,), "cpu", DEVICE).diffs
    assert not off.ok and off.max_abs == 1


def _tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        # output 2x2: adaptive pooling to 1x1 would be computed with mean.dim
        torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(32, 4))


def test_compare_model_clean_then_finds_the_perturbed_kernel():
    model = _tiny_model()
    x = torch.randn(4, 3, 8, 8)
    clean = torch_fl.compare_model(model, (x,), "cpu", DEVICE)
    assert clean.first_divergent is None, clean.table(all_rows=False)
    assert clean.first_divergent_grad is None, clean.table(all_rows=False)
    # A wrong kernel for one op, on the device only: the layer using it is first.
    with perturbed_kernel("_adaptive_avg_pool2d", NAME, add=0.05):
        bad = torch_fl.compare_model(model, (x,), "cpu", DEVICE)
    assert bad.first_divergent == "3", bad.table()
    rows = {d.name: d for d in bad.forward}
    assert rows["0"].ok and rows["1"].ok and rows["2"].ok
    assert not rows["3"].ok and rows["3"].max_abs == pytest.approx(0.05, rel=1e-3)
    assert not rows["5"].ok  # later layers inherit the error
    # the error reaches the gradients of the layers after it: fc first in backward order
    assert bad.first_divergent_grad.startswith("5.")
    assert "first divergent layer (forward): 3" in bad.table()
    data = json.loads(bad.to_json())
    assert data["first_divergent"] == "3" and data["atol"] == 1e-3 and not data["ok"]
    # the registration is gone after the block: the device is exact again
    again = torch_fl.compare_model(model, (x,), "cpu", DEVICE)
    assert again.first_divergent is None


def test_compare_model_resnet18_perturbed_layer(tmp_path):
    from torch_fl.models import resnet18

    torch.manual_seed(0)
    model = resnet18(num_classes=10, width=16)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    # ResNet's AdaptiveAvgPool2d((1, 1)) is computed as mean.dim over H, W; no
    # other forward layer calls mean.dim on the device.
    with perturbed_kernel("mean.dim", NAME, scale=1.05):
        report = torch_fl.compare_model(model, (x,), "cpu", DEVICE, loss_fn=F.cross_entropy,
                                        targets=y)
    assert report.first_divergent == "avgpool", report.table(all_rows=False)
    assert all(d.ok for d in report.forward[:report.forward.index(
        next(d for d in report.forward if d.name == "avgpool"))])
    assert report.loss_a is not None and report.loss_a != report.loss_b
    path = tmp_path / "r.json"
    report.to_json(str(path))
    assert json.loads(path.read_text())["first_divergent"] == "avgpool"


def test_flsdk_compare_cli(tmp_path, capsys):
    from torch_fl.commands import run_compare

    out = tmp_path / "report.json"
    args = types.SimpleNamespace(model="gpt", device_a="cpu", device_b=None, json=str(out),
                                 atol=1e-3, rtol=1e-3)
    assert run_compare(args) == 0
    text = capsys.readouterr().out
    assert "vs cpu (reference)" in text and "first divergent layer" in text
    data = json.loads(out.read_text())
    assert data["device_b"] == DEVICE and data["model"] == "gpt"
    assert any(d["name"] == "lm_head" for d in data["forward"])


def _shallow_copy_compatible() -> bool:
    return bool(torch._has_compatible_shallow_copy_type(torch.ones(1),
                                                        torch.ones(1, device=DEVICE)))


def test_compare_model_reports_tied_weights_coming_apart():
    from torch_fl.models import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(dropout=0.0))
    assert model.lm_head.weight is model.wte.weight
    tok = torch.randint(0, 256, (2, 8))
    report = torch_fl.compare_model(model, (tok, tok.roll(-1, 1)), "cpu", DEVICE,
                                    loss_fn=lambda out: out[1])
    if _shallow_copy_compatible():
        assert report.warnings == [] and report.first_divergent_grad is None
    else:
        # model.to(device) gave lm_head and wte separate Parameters on the device:
        # the gradient of the tied weight then misses the lm_head part.
        assert "wte.weight = lm_head.weight" in report.warnings[0]
        assert report.first_divergent_grad in ("lm_head.weight", "wte.weight")
        assert not report.ok and "WARNING: parameter sharing differs" in report.table()


def test_module_to_device_keeps_tied_weights():
    if not _shallow_copy_compatible():
        pytest.xfail(f"{NAME} registers no PrivateUse1 kernel for "
                     "aten::_has_compatible_shallow_copy_type, so Module.to() unties weights")
    from torch_fl.models import GPT, GPTConfig

    model = GPT(GPTConfig()).to(DEVICE)
    assert model.lm_head.weight is model.wte.weight
