"""Random ops are checked statistically on the backend under test (issue 27 item 12).

* every backend's generated conformance suite samples its random ops (and their
  registered variants) on its device, instead of listing them as "not compared";
* torch_fl.testing.conformance.compare_statistics compares many draws of the device
  with CPU's as distributions, and fails for a wrong sampler: each deliberately
  biased sampler below (on CPU, then on acme) must be caught, while the right one
  passes (tests/spec/test_opspec_samples.py runs every random op spec CPU vs CPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torch_fl.testing import conformance as conf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- the generated suite ------------------------------------------------------------

def test_generated_suite_samples_random_ops_on_the_device():
    from flsdk.codegen.context import RANDOM_SKIP, conformance_cases
    from flsdk.spec import load_backend

    backend = load_backend(ROOT / "examples" / "acme_backend")
    random_ops = {s.op for s in backend.ops if s.skip_conformance == RANDOM_SKIP}
    assert {"multinomial", "exponential_", "random_.to", "bernoulli.p", "normal_"} <= random_ops
    registered = [s.op for s in backend.ops] + ["bernoulli_.float", "multinomial.out"]
    cases = conformance_cases(backend, registered)
    assert not random_ops & set(cases["skipped"]), "random ops must be compared, not skipped"
    sampled = {op for _, op, _, _ in cases["random"]}
    assert sampled == random_ops
    assert ("multinomial-bfloat16-s1", "multinomial", ["T(5)+", 32, True], "bfloat16") in cases["random"]
    assert {(kind, variant) for _, kind, variant, *_ in cases["random_variants"]} == \
        {("inplace", "bernoulli_.float"), ("out", "multinomial.out")}
    # an unregistered random op (its kernel still a stub) is a visible skip, as any other
    cases = conformance_cases(backend, [op for op in registered if op != "multinomial"])
    assert "multinomial" in cases["skipped"] and "multinomial" not in {c[1] for c in cases["random"]}


def test_generated_template_runs_the_statistical_check():
    template = (ROOT / "flsdk" / "templates" / "tests" / "test_conformance.py.j2").read_text()
    assert "RANDOM_CASES = {{ random_py }}" in template
    assert "compare_statistics(op, sample, getattr(torch, dtype), DEVICE)" in template
    assert "variant=(kind, variant)" in template


# --- biased samplers, on CPU ---------------------------------------------------------

def _biased(monkeypatch, change):
    """compare_statistics alternates CPU and device draws, CPU first: every second
    run_op call is the "device" one; `change(result, args)` biases it in place
    (so the arguments an in-place op writes are biased too)."""
    calls = []
    real = conf.run_op

    def fake(op_name, args, kwargs, device=None):
        result = real(op_name, args, kwargs, device)
        calls.append(op_name)
        if len(calls) % 2 == 0:
            change(result, args)
        return result

    monkeypatch.setattr(conf, "run_op", fake)


def _set(t: torch.Tensor, values: torch.Tensor) -> None:
    t.copy_(values.to(t.dtype))


def _same_mean_and_variance_other_shape(r, _):
    # uniform [0,1) has mean 1/2 and variance 1/12; so has this two-point distribution
    _set(r, 0.5 + torch.where(r < 0.5, -1.0, 1.0) * (1 / 12) ** 0.5)


def _p_per_element_reversed(r, args):
    # bernoulli_(self, p) drawing element i with p of element n-1-i: same overall mean
    p = args[1].flatten().flip(0).reshape(args[1].shape)
    _set(r, (torch.rand(r.shape) < p).double())


def _repeats_itself():
    """Every device draw gives the first draw's values again."""
    state = {}

    def change(r, _):
        state.setdefault("first", r.clone())
        _set(r, state["first"])
    return change


BIASES = {
    "uniform skewed": ("uniform_", ["T(8,8)"], "float32", lambda r, _: _set(r, r.double() ** 1.15)),
    "uniform same mean and variance, other shape": ("uniform_", ["T(8,8)"], "float32",
                                                    _same_mean_and_variance_other_shape),
    "normal std 10% too large": ("normal_", ["T(8,8)", 1.0, 2.0], "float32",
                                 lambda r, _: _set(r, 1.0 + (r.double() - 1.0) * 1.1)),
    "normal mean off by 0.1 std": ("normal_", ["T(8,8)"], "float32", lambda r, _: _set(r, r + 0.1)),
    "bernoulli p 0.55 for 0.5": ("bernoulli.p", ["T(8,8)", 0.5], "float32",
                                 lambda r, _: _set(r, (torch.rand(r.shape) < 0.55).double())),
    "bernoulli p of another element": ("bernoulli_.Tensor", ["T(8,8)", "T(8,8)[0,1]"], "float32",
                                       _p_per_element_reversed),
    "exponential rate 10% off": ("exponential_", ["T(8,8)", 2.0], "float32",
                                 lambda r, _: _set(r, r.double() / 1.1)),
    "random_ never draws the top value": ("random_.to", ["T(8,8)", 10], "int64",
                                          lambda r, _: _set(r, r.remainder(9))),
    "multinomial swaps two categories": ("multinomial", ["T(5)+", 32, True], "float32",
                                         lambda r, _: _set(r, torch.where(r == 0, 1, torch.where(r == 1, 0, r)))),
    "randperm always the identity": ("randperm.generator_out", [10, {"generator": None, "out": "T(0)"}],
                                     "int64", lambda r, _: _set(r, torch.arange(10))),
    "dropout keeps 60% for 50%": ("native_dropout", ["T(8,8)", 0.5, True], "float32",
                                  lambda r, args: (_set(r[1], torch.rand(r[1].shape) < 0.6),
                                                   _set(r[0], args[0] * r[1] * 2))),
    "generator repeats itself": ("normal_", ["T(8,8)"], "bfloat16", None),
}


@pytest.mark.parametrize("bias", list(BIASES))
def test_a_biased_sampler_fails(monkeypatch, bias):
    op, sample, dtype, change = BIASES[bias]
    conf.compare_statistics(op, sample, dtype, "cpu")  # the right sampler passes
    _biased(monkeypatch, change or _repeats_itself())
    with pytest.raises(AssertionError, match=r"mean|spread|distribution"):
        conf.compare_statistics(op, sample, dtype, "cpu")


def test_fixed_seed_makes_the_check_reproducible():
    a = conf.compare_statistics("exponential_", ["T(8,8)"], "float32", "cpu")
    state = torch.get_rng_state()
    b = conf.compare_statistics("exponential_", ["T(8,8)"], "float32", "cpu")
    assert a == b and a.max_abs_err > 0
    assert torch.equal(torch.get_rng_state(), state), "the global generator is left as it was"


def test_deterministic_output_must_match_exactly(monkeypatch):
    # dropout in eval mode (train=False) returns its input: no spread, compared as values
    _biased(monkeypatch, lambda r, _: _set(r[0], r[0] + 1e-3))
    with pytest.raises(AssertionError, match="element"):
        conf.compare_statistics("native_dropout", ["T(8,8)", 0.1, False], "float32", "cpu")


# --- on the backend under test (acme) -------------------------------------------------

def _biased_on_device(monkeypatch, device_type, change):
    real = conf.run_op

    def fake(op_name, args, kwargs, device=None):
        result = real(op_name, args, kwargs, device)
        if device is not None and torch.device(device).type == device_type:
            change(result)
        return result

    monkeypatch.setattr(conf, "run_op", fake)


@pytest.mark.usefixtures("acme_backend")
@pytest.mark.parametrize("op,sample,dtype", [
    ("multinomial", ["T(3,5)+", 2], "float32"), ("exponential_", ["T(8,8)"], "bfloat16"),
    ("random_.from", ["T(8,8)", 0, 10], "int32"), ("bernoulli_.Tensor", ["T(8,8)", "T(8,8)[0,1]"], "float16"),
    ("normal_", ["T(8,8)", 1.0, 2.0], "float32"), ("native_dropout", ["T(8,8)", 0.5, True], "float32")])
def test_acme_samples_each_distribution_right(op, sample, dtype):
    import torch_fl_acme._C as native

    native.clear_fallback_log()
    res = conf.compare_statistics(op, sample, dtype, "acme")
    assert res.compared >= 1
    assert not native.fallback_log(), "sampled on the CPU fallback, not on acme"


@pytest.mark.usefixtures("acme_backend")
def test_a_biased_acme_sampler_fails(monkeypatch):
    """acme's results, biased after the kernel ran on acme: each is caught."""
    conf.compare_statistics("exponential_", ["T(8,8)"], "float32", "acme")
    _biased_on_device(monkeypatch, "acme", lambda r: r.mul_(1.1))  # rate 10% too low
    with pytest.raises(AssertionError, match=r"exponential_ .*on acme.*(mean|spread|distribution)"):
        conf.compare_statistics("exponential_", ["T(8,8)"], "float32", "acme")


@pytest.mark.usefixtures("acme_backend")
def test_an_acme_generator_that_repeats_itself_fails(monkeypatch):
    """A device generator whose offset does not advance (every launch draws the same
    numbers): acme reseeded before each draw. Each draw alone looks right; every
    element keeps its value over the draws."""
    real = conf.run_op

    def reseeded(op_name, args, kwargs, device=None):
        if device is not None and torch.device(device).type == "acme":
            torch.acme.manual_seed(1234)
        return real(op_name, args, kwargs, device)

    monkeypatch.setattr(conf, "run_op", reseeded)
    with pytest.raises(AssertionError, match="element|spread"):
        conf.compare_statistics("uniform_", ["T(8,8)"], "float32", "acme")


@pytest.mark.usefixtures("acme_backend")
def test_sampling_on_the_cpu_instead_of_the_device_fails(monkeypatch):
    real = conf.run_op

    def on_cpu(op_name, args, kwargs, device=None):
        if device is not None and torch.device(device).type == "acme":
            return real(op_name, [a.cpu() if isinstance(a, torch.Tensor) else a for a in args], kwargs, "cpu")
        return real(op_name, args, kwargs, device)

    monkeypatch.setattr(conf, "run_op", on_cpu)
    with pytest.raises(AssertionError, match="not sample on the device"):
        conf.compare_statistics("bernoulli.p", ["T(8,8)", 0.5], "float32", "acme")
