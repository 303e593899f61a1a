"""acme's compute units (device.yaml `compute_units`, runtime/compute_units.h):
kernels split their loops over them, and the result does not depend on how many
run: pointwise results are bitwise equal with 1 unit and with several, and
results stay correct against CPU (including the vector-math kernels' tails,
special values and non-contiguous layouts)."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_fl_acme._C as native

N = 300_007  # not a multiple of any grain or vector width: ragged chunks and tails



def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, generator=g) * 3
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 88.5])
    pos = torch.rand(N, generator=g) * 20 + 1e-3
    unit = torch.rand(N, generator=g) * 1.98 - 0.99
    return x, pos, unit


UNARY = {  # name: (fn, input kind)
    **{n: (getattr(torch, n), "x") for n in (
        "exp", "exp2", "expm1", "sin", "cos", "tan", "atan", "sinh", "cosh", "tanh", "asinh",
        "erf", "erfc", "sigmoid", "abs", "neg", "floor", "round", "relu", "sign")},
    **{n: (getattr(torch, n), "pos") for n in (
        "sqrt", "rsqrt", "log", "log2", "log10", "log1p", "reciprocal", "lgamma", "acosh")},
    **{n: (getattr(torch, n), "unit") for n in ("asin", "acos", "atanh", "erfinv")},
    "gelu": (F.gelu, "x"),
    "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), "x"),
    "silu": (F.silu, "x"),
    "mish": (F.mish, "x"),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.1), "x"),
    "softplus": (lambda t: F.softplus(t, beta=2.0, threshold=10.0), "x"),
    "pow_2.5": (lambda t: torch.pow(t, 2.5), "pos"),
    "atan2": (lambda t: torch.atan2(t, t.flip(0) if t.dim() == 1 else t.t().flip(0).t()), "x"),
    "div": (lambda t: torch.div(t, t.flip(0) if t.dim() == 1 else t.t().flip(0).t()), "x"),
}


def _run_all(dtype=torch.float32, layout="flat"):
    x, pos, unit = _inputs()
    src = {"x": x, "pos": pos, "unit": unit}
    out = {}
    for name, (fn, kind) in UNARY.items():
        t = src[kind].to(dtype)
        if layout == "transposed":  # dense but not contiguous: the flat vector path
            t = t[: 500 * 600].reshape(500, 600).t()
        elif layout == "strided":  # not dense: the iterator's path
            t = t[::3]
        out[name] = fn(t.to("acme")).cpu()
    a, b = x.to(dtype).to("acme"), pos.to(dtype).to("acme")
    out["add"] = (a + b).cpu()
    out["mul_broadcast"] = (a.reshape(-1, 1)[:3000] * b[:400]).cpu()
    out["gelu_backward"] = torch.ops.aten.gelu_backward(b, a).cpu()
    out["silu_backward"] = torch.ops.aten.silu_backward(b, a).cpu()
    out["to_half"] = a.to(torch.float16).cpu()
    return out


@pytest.mark.parametrize("dtype,layout", [
    (torch.float32, "flat"), (torch.float32, "transposed"), (torch.float32, "strided"),
    (torch.bfloat16, "flat"), (torch.float64, "flat"),
])
def test_pointwise_results_do_not_depend_on_unit_count(units, dtype, layout):
    units(1)
    one = _run_all(dtype, layout)
    units(4)
    four = _run_all(dtype, layout)
    for name in one:
        assert one[name].dtype == four[name].dtype and one[name].shape == four[name].shape, name
        assert torch.equal(_bits(one[name]), _bits(four[name])), name  # bitwise, NaNs too


def _bits(t):
    return t.reshape(-1).view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("layout", ["flat", "transposed", "strided"])
def test_vector_math_matches_cpu(units, layout, each_isa):
    units(4)
    got = _run_all(torch.float32, layout)
    x, pos, unit = _inputs()
    src = {"x": x, "pos": pos, "unit": unit}
    for name, (fn, kind) in UNARY.items():
        t = src[kind]
        if layout == "transposed":
            t = t[: 500 * 600].reshape(500, 600).t()
        elif layout == "strided":
            t = t[::3]
        want = fn(t.double()).float()
        assert got[name].shape == want.shape and got[name].stride() == fn(t).stride(), name
        # relative 1e-5 (Sleef u10/u35 and acme's scalar kernels are well inside),
        # absolute 1e-6 near zero; inf/nan where CPU has them
        torch.testing.assert_close(got[name], want, rtol=1e-5, atol=1e-6, equal_nan=True,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_large_and_tiny_tensors_and_tails(units):
    units(4)
    for n in (0, 1, 15, 16, 17, 8191, 8192, 8193, 65537):
        x = torch.linspace(-5, 5, n)
        torch.testing.assert_close(torch.sin(x.to("acme")).cpu(), torch.sin(x), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(torch.exp(x.to("acme")).cpu(), torch.exp(x), rtol=1e-6, atol=0)


def test_units_follow_torch_threads_and_option(units):
    units(3)
    assert native.runtime_get_option("compute_units") == "3"
    with pytest.raises(RuntimeError, match=r"compute_units='0' is not a unit count.*1\.\.1024 or 'auto'"):
        native.runtime_set_option("compute_units", "0")
    assert native.runtime_get_option("compute_units") == "3"  # unchanged
    native.runtime_set_option("compute_units", "auto")
    assert int(native.runtime_get_option("compute_units")) >= 1


def test_streams_run_parallel_kernels_concurrently(units):
    """Kernels on two acme streams at once (each stream's worker thread runs
    its loops, one of them on the pool, the other inline) stay correct."""
    units(4)
    x = torch.randn(1 << 18)
    want_sin, want_exp = torch.sin(x), torch.exp(x)
    xa = x.to("acme")
    s1, s2 = torch.Stream("acme"), torch.Stream("acme")
    outs = []
    for _ in range(10):
        with s1:
            a = torch.sin(xa)
        with s2:
            b = torch.exp(xa)
        outs.append((a, b))
    torch.accelerator.synchronize()
    for a, b in outs:
        torch.testing.assert_close(a.cpu(), want_sin, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(b.cpu(), want_exp, rtol=1e-6, atol=0)


@pytest.mark.parametrize("value,ok", [("2", True), ("auto", True), ("0", False), ("many", False)])
def test_environment_variable(value, ok):
    code = ("import torch, torch_fl_acme._C as n; torch.ones(1, device='acme'); "
            "print(n.runtime_get_option('compute_units'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ACME_COMPUTE_UNITS": value})
    if ok:
        assert proc.returncode == 0, proc.stderr
        got = int(proc.stdout.strip().splitlines()[-1])
        assert got == 2 if value == "2" else got >= 1
    else:
        assert proc.returncode != 0
        assert f"ACME_COMPUTE_UNITS='{value}' is not a compute unit count" in proc.stderr
        assert "1..1024 or 'auto'" in proc.stderr


def _reductions():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1_000_003, generator=g).to("acme")
    m = torch.randn(300, 2_001, generator=g).to("acme")
    c = torch.randn(64, 9, 1_025, generator=g).to("acme")
    return {
        "sum": x.sum(), "mean": x.mean(), "var": x.var(), "std_mean": torch.std_mean(x)[0],
        "max": x.max(), "argmax": x.argmax(), "logsumexp": torch.logsumexp(x, 0),
        "norm": torch.linalg.vector_norm(x), "all": (x > -10).all(),
        "sum_rows": m.sum(1), "sum_cols": m.sum(0), "amax_cols": m.amax(0),
        "sum_mid": c.sum(1), "var_mid": c.var(1), "mean_outer": c.mean((0, 2)),
    }


def test_reductions_do_not_depend_on_unit_count(units):
    units(1)
    one = {k: v.cpu() for k, v in _reductions().items()}
    units(4)
    four = {k: v.cpu() for k, v in _reductions().items()}
    for name in one:
        assert torch.equal(_bits(one[name]), _bits(four[name])), name
    # and they are right
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1_000_003, generator=g).double()
    torch.testing.assert_close(four["sum"].double(), x.sum(), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(four["var"].double(), x.var(), rtol=1e-5, atol=0)
    assert four["argmax"].item() == x.argmax().item()



def _softmaxes(device):
    """Softmax and log-softmax, forward and backward, over the last dim
    (contiguous rows) and a middle one (strided rows), float32 and float64,
    rows of odd length: {name: (output, input gradient)} on the CPU."""
    g = torch.Generator().manual_seed(2)
    out = {}
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(61, 7, 67, generator=g, dtype=dtype)
        go = torch.randn(61, 7, 67, generator=g, dtype=dtype)
        for dim in (-1, 1):
            for fn in (torch.softmax, torch.log_softmax):
                xd = x.to(device).requires_grad_()
                y = fn(xd, dim)
                (gx,) = torch.autograd.grad(y, xd, go.to(device))
                out[f"{fn.__name__} dim {dim} {dtype}"] = (y.detach().cpu(), gx.cpu())
    return out


def test_softmax_rows_do_not_depend_on_unit_count(units, each_isa):
    """Softmax rows are split over the units: the same bits on 1 and 4 units,
    CPU's values."""
    units(1)
    one = _softmaxes("acme")
    units(4)
    four = _softmaxes("acme")
    cpu = _softmaxes("cpu")
    for name in one:
        for a, b, c in zip(one[name], four[name], cpu[name]):
            assert torch.equal(_bits(a), _bits(b)), f"{name}: 1 and 4 units differ"
            torch.testing.assert_close(b, c, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("value", ["scalar", "auto", "sse9"])
def test_isa_environment_variable(value):
    """ACME_ISA forces acme's kernels onto a vector instruction set (every machine
    can run the scalar loops); an unknown one stops the device from starting with
    a message naming the variable."""
    code = ("import torch, torch_fl_acme._C as n; x = torch.linspace(-3, 3, 1001); "
            "y = torch.exp(x.to('acme')).cpu(); "
            "torch.testing.assert_close(y, torch.exp(x), rtol=1e-6, atol=0); "
            "print(n.runtime_get_option('isa'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ACME_ISA": value})
    if value == "sse9":
        assert proc.returncode != 0
        assert "ACME_ISA=sse9: acme: isa: unknown instruction set 'sse9'" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.strip().splitlines()[-1]
    assert got == ("scalar" if value == "scalar" else native.runtime_get_option("isa"))
