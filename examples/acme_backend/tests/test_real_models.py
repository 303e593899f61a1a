"""Architectures nobody in this repo wrote (torchvision, timm, Hugging Face
transformers, torch.nn RNNs; random weights, built from configs; see
real_model_zoo.py) take one training step on acme with zero CPU fallbacks and
agree with the same step on CPU, in float32 and under bf16 autocast.

What is asserted, per model and precision:
* the CPU fallback log is empty after the step;
* the loss: float32 within 1e-4 relative of CPU's float32 loss; under
  torch.autocast("acme", bfloat16) within 3e-2 of the same step under
  torch.autocast("cpu", bfloat16) (both round to bf16, in different places);
* the gradients, per parameter, judged against the same step on CPU in float64:
  acme's error (norm of the difference over norm of the gradient) may be at
  most 4x CPU's own error at that precision, plus 1e-2. Float32 rounding alone
  gives ~1e-5..1e-4 here, but ReLU is discontinuous: an activation within
  rounding of zero goes to the other side on one device and changes 1/sqrt(N)
  of the gradient of every layer below it (measured: RegNet-Y, one such flip
  in block4-1 puts 7e-3 on all earlier parameters on acme; CPU's oneDNN
  convolutions flip others, 2.6e-3). Matching CPU's rounding would be the wrong
  test; a wrong kernel is off by O(1), and the loss is held to 1e-4;
* the SGD step on acme moved every parameter by exactly -lr * its own gradient.

Failures that other work in progress fixes are xfail(strict=True) with the
cause, so they fail here (XPASS) as soon as the fix lands: remove the mark then.
Heavier models are marked slow (--run-slow). The file's default run takes about
2.5 minutes on 2 cores.
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
import real_model_zoo as zoo

DEVICE = "acme"
PRECISIONS = {"float32": None, "bf16-autocast": torch.bfloat16}

# The causes found first (bf16 conv bias under autocast, _index_put_impl_ on the
# fallback, fused RNN cells, 3-d convolution) are fixed; what is left is below.
# (model, precision) -> every cause that makes it fail today (a run reports the
# first it hits; the mark stays until all are fixed).
KNOWN_FAILURES: dict[tuple[str, str], list[str]] = {}

# acme's autocast is CUDA's policy (issue #8); CPU's autocast casts fewer ops to
# bf16, so a model whose step is sensitive to that differs by more than the
# comparison allows. Measured 2026-12-01: EfficientNet-B0 loss 3.896 vs 4.040 on CPU
# (3.6 %); MaxViT's relative-position MLP bias gradient 1.0e-2 off float64 on acme
# vs 2e-15 on CPU (CPU keeps that path in float32).
POLICY_DIFFERS = ("acme follows CUDA's autocast policy, CPU autocast keeps more ops in float32: "
                  "the bf16 step differs beyond the comparison's tolerance")


def _known(names, precisions, cause):
    for name in names:
        for precision in precisions:
            KNOWN_FAILURES.setdefault((name, precision), []).append(cause)


_known(["tv-efficientnet_b0", "timm-maxvit_pico"], ["bf16-autocast"], POLICY_DIFFERS)


def _params():
    for name, case in zoo.CASES.items():
        for precision in PRECISIONS:
            marks = [pytest.mark.slow] if case.slow else []
            causes = KNOWN_FAILURES.get((name, precision))
            if causes:
                marks.append(pytest.mark.xfail(strict=True, reason="; and ".join(causes)))
            yield pytest.param(name, precision, id=f"{name}-{precision}", marks=marks)


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    """CPU's OpenMP threads spin-wait; on a loaded 2-core machine the CPU
    reference steps get ~10x slower with 2 threads than with 1."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


_reference_cache: dict[str, tuple] = {}


def _model_and_reference(case):
    """The model and its float64 CPU step, kept for the next test of the same
    model only (both precisions of a model run one after the other)."""
    if case.name not in _reference_cache:
        _reference_cache.clear()
        model = zoo.make_model(case)
        _reference_cache[case.name] = (model, zoo.float64_reference(case, model))
    return _reference_cache[case.name]


@pytest.mark.parametrize("name,precision", list(_params()))
def test_real_model_trains_natively_and_matches_cpu(name, precision):
    case = zoo.CASES[name]
    try:
        zoo.import_package(case.package)
    except ImportError as e:
        pytest.skip(f"{case.package} is not importable: {e}")
    autocast = PRECISIONS[precision]
    model, reference = _model_and_reference(case)

    torch_fl.clear_fallback_log()
    dev = zoo.train_step(case, model, DEVICE, autocast)
    log = torch_fl.get_fallback_log()
    assert log == [], f"{name} ({precision}) fell back to CPU: " + ", ".join(
        f"{e['op']} x{e['count']}" for e in log)
    try:
        cpu = zoo.train_step(case, model, "cpu", autocast)
    except RuntimeError as e:
        if "could not create a primitive" not in str(e):
            raise
        # acme's step ran (and fell back nowhere); CPU's own reference does not
        # (oneDNN has no bf16 LSTM primitive on CPUs without bf16 instructions)
        pytest.skip(f"the CPU reference step fails on this CPU, nothing to compare with: {e}")

    rel = 3e-2 if autocast else 1e-4
    assert abs(dev.loss - cpu.loss) <= rel * max(1.0, abs(cpu.loss)), (
        f"loss {dev.loss} on acme vs {cpu.loss} on CPU")

    assert dev.grads.keys() == cpu.grads.keys()
    floor = 1e-2
    err_dev = zoo.grad_errors(dev.grads, reference.grads)
    err_cpu = zoo.grad_errors(cpu.grads, reference.grads)
    bad = {n: (err_dev[n], err_cpu[n]) for n in err_dev if not err_dev[n] <= 4 * err_cpu[n] + floor}
    assert not bad, "gradient error vs float64 (acme, cpu): " + ", ".join(
        f"{n}: {a:.2e} vs {c:.2e}" for n, (a, c) in sorted(bad.items())[:5])

    before = dict(model.named_parameters())
    for n, p in dev.params.items():
        if n in dev.grads:
            expected = before[n].detach().float() - zoo.LR * dev.grads[n]
            torch.testing.assert_close(p, expected, rtol=1e-6, atol=1e-7, msg=f"SGD step of {n}")


def test_known_failures_name_real_cases():
    """A misspelt entry would leave its xfail mark on nothing and hide nothing."""
    assert {name for name, _ in KNOWN_FAILURES} <= set(zoo.CASES)
    assert {precision for _, precision in KNOWN_FAILURES} <= set(PRECISIONS)
