"""acme's mid-size GEMMs are cut into blocks of C for the compute units
(kernels/math/gemm.h, gemm_detail::cut): C's longer side in blocks whose length
depends on m, n, k only, one single-threaded BLAS call per block. Results must be
bitwise equal whatever the unit count and close to CPU.

The shapes take the split (2M..32M multiply-adds) with a short last block: tall
(rows cut) and short-wide (columns cut) mm, bmm and addmm, and convs whose batch
is one image block (so the conv's own block split does not apply) in all three
directions."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_fl_acme._C as native


def _rand(g, shape, dtype, device):
    return torch.randn(shape, generator=g, dtype=dtype).to(device)


def _mm(device, dtype, m, k, n):
    g = torch.Generator().manual_seed(0)
    a, b = _rand(g, (m, k), dtype, device), _rand(g, (k, n), dtype, device)
    return [torch.mm(a, b).cpu(), torch.mm(a.t().contiguous().t(), b).cpu()]  # B as is, A transposed


def _bmm(device, dtype, m, k, n):
    g = torch.Generator().manual_seed(1)
    a, b = _rand(g, (3, m, k), dtype, device), _rand(g, (3, k, n), dtype, device)
    return [torch.bmm(a, b).cpu()]


def _addmm(device, dtype, m, k, n):
    g = torch.Generator().manual_seed(2)
    bias, a = _rand(g, (n,), dtype, device), _rand(g, (m, k), dtype, device)
    b = _rand(g, (n, k), dtype, device).t()  # transposed B
    return [torch.addmm(bias, a, b, beta=0.5, alpha=2.0).cpu()]


def _conv(device, dtype, xs, ws):
    g = torch.Generator().manual_seed(3)
    x = _rand(g, xs, dtype, device).requires_grad_()
    w = _rand(g, ws, dtype, device).requires_grad_()
    out = F.conv2d(x, w, padding=1)
    go = _rand(g, out.shape, dtype, device)
    gx, gw = torch.autograd.grad(out, (x, w), go)
    return [t.detach().cpu() for t in (out, gx, gw)]


# name: (fn, args); C is m x n, k the inner size
CASES = {
    # C m x n, k; M = 2**20 multiply-adds
    # 2000 x 30, k 100 = 5.7M: rows cut (m >= n), 5 blocks of 408 rows, the last 368
    "mm_tall": (_mm, (2000, 100, 30)),
    # 37 x 1001, k 300 = 10.6M: columns cut, 7 blocks of 144, the last 137
    "mm_wide": (_mm, (37, 300, 1001)),
    # per batch 200 x 177, k 61 = 2.06M: 2 blocks of rows (120, 80)
    "bmm": (_bmm, (200, 61, 177)),
    # 700 x 50, k 90 = 3M: 3 blocks of rows (240, 240, 220); wide: of columns
    "addmm_tall": (_addmm, (700, 90, 50)),
    "addmm_wide": (_addmm, (50, 90, 700)),
    # one block of 3 images, P=100: fwd C 40 x 300 (k 288), input grad 288 x 300
    # (k 40): 3 blocks of columns (120, 120, 60); weight grad 40 x 288 (k 300): 3 x 96
    "conv_wide": (_conv, ((3, 32, 10, 10), (40, 32, 3, 3))),
    # one block of 2 images, P=25: fwd C 200 x 50 (k 864): 5 blocks of rows, the
    # last 8; input grad 864 x 50 (k 200): 8 blocks of rows, the last 24; weight
    # grad 200 x 864 (k 50): 8 blocks of columns, the last 24
    "conv_tall": (_conv, ((2, 96, 5, 5), (200, 96, 3, 3))),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_gemm_does_not_depend_on_unit_count(units, case, dtype, each_isa):
    fn, args = CASES[case]
    units(1)
    native.clear_fallback_log()
    one = fn("acme", dtype, *args)
    assert native.fallback_log() == [], f"fell back to CPU: {native.fallback_log()}"
    for n in (2, 3):
        units(n)
        for i, (a, b) in enumerate(zip(one, fn("acme", dtype, *args))):
            assert torch.equal(a, b), f"{case} result {i}: 1 unit and {n} units differ"
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for a, c in zip(one, fn("cpu", dtype, *args)):
        torch.testing.assert_close(a, c, **tol)


def _openblas():
    scipy_openblas32 = pytest.importorskip("scipy_openblas32")
    return ctypes.CDLL(f"{scipy_openblas32.get_lib_dir()}/lib{scipy_openblas32.get_library()}.so")


def _one_call(a, b):
    """a @ b (float32, contiguous) from one single-threaded OpenBLAS call: what
    acme computed before the split."""
    lib = _openblas()
    before = lib.scipy_openblas_get_num_threads()
    lib.scipy_openblas_set_num_threads(1)
    try:
        m, k = a.shape
        n = b.shape[1]
        c = torch.empty(m, n)
        ptr = ctypes.c_void_p
        lib.scipy_cblas_sgemm(101, 111, 111, m, n, k, ctypes.c_float(1.0), ptr(a.data_ptr()), k,
                              ptr(b.data_ptr()), n, ctypes.c_float(0.0), ptr(c.data_ptr()), n)
    finally:
        lib.scipy_openblas_set_num_threads(before)  # gemm.h's cached count stays true
    return c


def _fresh_process(code: str, **env) -> str:
    """Runs `code` (dedented) in a new interpreter from this folder, with env
    changes (None: unset); returns its stdout, failing on a non-zero exit."""
    environ = dict(os.environ)
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=environ,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# OpenBLAS kernels whose tiling the bit pattern below was measured on.
MEASURED_KERNELS = {"Haswell", "Zen"}


def test_split_happens():
    """The split is observable through OpenBLAS's own bits: float32 C cut in
    columns differs near the cuts from one BLAS call (OpenBLAS tiles that side
    by the whole width), so a short-wide acme mm that equals one call was not
    cut. Cut in rows (multiples of 24) it has the one call's bits: the split
    changes nothing there. Both facts belong to OpenBLAS's kernel for the CPU:
    on another kernel (SkylakeX tiles by 16) they are not known to hold.
    A fresh process with ACME_SGEMM=blas, so float32 goes to OpenBLAS on an
    AVX-512 host too (acme's own sgemm has the same bits cut or not:
    tests/test_sgemm_program.py)."""
    lib = _openblas()
    lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
    kernel = lib.scipy_openblas_get_corename().decode()
    if kernel not in MEASURED_KERNELS:
        pytest.skip(f"OpenBLAS kernel {kernel}: its tiling was not measured (only {sorted(MEASURED_KERNELS)})")
    out = _fresh_process("""
        import torch, torch_fl
        import torch_fl_acme._C as native
        from test_gemm_units import _one_call
        native.runtime_set_option("compute_units", "2")
        torch.set_num_threads(2)
        g = torch.Generator().manual_seed(0)
        # C 37 x 1001, k 300: columns cut
        a, b = torch.randn(37, 300, generator=g), torch.randn(300, 1001, generator=g)
        whole = _one_call(a, b)
        acme = torch.mm(a.to("acme"), b.to("acme")).cpu()
        torch.testing.assert_close(acme, whole, rtol=1e-4, atol=1e-4)
        assert not torch.equal(acme, whole), "short-wide mm has one BLAS call's bits: not cut"
        # C 2000 x 30, k 100: rows cut, same bits
        a, b = torch.randn(2000, 100, generator=g), torch.randn(100, 30, generator=g)
        assert torch.equal(torch.mm(a.to("acme"), b.to("acme")).cpu(), _one_call(a, b))
        print("checked")
    """, ACME_SGEMM="blas")
    assert "checked" in out


def test_large_gemms_stay_threaded_after_a_small_one():
    """gemm.h reads BLAS's own thread count once. Read after a small GEMM had set
    BLAS to 1 thread, it said 1, and no later GEMM in the process was threaded
    (a ResNet-18 step's first conv GEMM is small). A fresh process: a small mm,
    then a large one at 2 intra-op threads must leave BLAS at 2 threads."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: BLAS runs one thread anyway")
    _openblas()  # skips without the scipy_openblas32 wheel
    out = _fresh_process("""
        import ctypes, torch, torch_fl, scipy_openblas32
        lib = ctypes.CDLL(f"{scipy_openblas32.get_lib_dir()}/lib{scipy_openblas32.get_library()}.so")
        torch.set_num_threads(2)
        # float64: float32 runs acme's own sgemm on an AVX-512 host, not BLAS
        small = torch.randn(16, 16, device="acme", dtype=torch.float64)
        torch.mm(small, small)
        torch.acme.synchronize()  # the GEMM runs on the stream: wait for it
        assert lib.scipy_openblas_get_num_threads() == 1, "a small GEMM runs BLAS on 1 thread"
        big = torch.randn(512, 512, device="acme", dtype=torch.float64)
        torch.mm(big, big)  # 134M multiply-adds: BLAS-threaded
        torch.acme.synchronize()
        print(lib.scipy_openblas_get_num_threads())
    """, OPENBLAS_NUM_THREADS=None)
    assert out.split()[-1] == "2", f"BLAS threads after the large GEMM: {out!r}"


def test_backward_follows_set_num_threads_changed_after_the_first_backward():
    """torch keeps the intra-op thread count per thread, and the autograd engine
    runs acme's backward on a device thread started at the first backward, with
    the count of that moment. acme reads the count process-wide: after
    set_num_threads(1) -> backward -> set_num_threads(2), a large GEMM in the
    backward must run BLAS on 2 threads (it ran on 1, and so did every unit
    loop and acme's own sgemm: bench_acme's multi-thread group runs after its
    1-thread one)."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: BLAS runs one thread anyway")
    _openblas()  # skips without the scipy_openblas32 wheel
    out = _fresh_process("""
        import ctypes, threading, torch, torch_fl, scipy_openblas32
        lib = ctypes.CDLL(f"{scipy_openblas32.get_lib_dir()}/lib{scipy_openblas32.get_library()}.so")

        class BackwardThread(torch.autograd.Function):
            # identity whose backward notes the thread it runs on
            seen = set()
            @staticmethod
            def forward(ctx, x):
                return x.clone()
            @staticmethod
            def backward(ctx, g):
                BackwardThread.seen.add(threading.get_ident())
                return g

        # float64: float32 runs acme's own sgemm on an AVX-512 host, not BLAS
        a = torch.randn(512, 512, device="acme", dtype=torch.float64, requires_grad=True)
        b = torch.randn(512, 512, device="acme", dtype=torch.float64, requires_grad=True)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            # the mm's backward runs two 134M multiply-add GEMMs, the last BLAS calls
            BackwardThread.apply(torch.mm(a, b)).sum().backward()
            torch.acme.synchronize()  # the GEMMs run on the stream: wait for them
            print(threads, lib.scipy_openblas_get_num_threads())
        assert threading.get_ident() not in BackwardThread.seen, "backward ran on the caller's thread"
    """, OPENBLAS_NUM_THREADS=None)
    after = dict(line.split() for line in out.strip().splitlines())
    assert after == {"1": "1", "2": "2"}, f"BLAS threads after each backward: {after}"
