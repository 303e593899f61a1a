"""acme's convolutions split their batch over the compute units when their GEMMs
are too small for BLAS threads (kernels/conv.cpp, conv_blocks): forward, input
gradient and weight gradient must be bitwise equal whatever the unit count (the
weight gradient sums per-chunk partials in chunk order) and close to CPU.

Every case has several image blocks (images_per_gemm packs ~512 GEMM columns per
block) with small GEMMs, so the split happens, and a batch that leaves the last
block or chunk short."""

import pytest
import torch
import torch.nn.functional as F

import torch_fl_acme._C as native



# name: (conv, input shape, weight shape, kwargs); blocks = images per block x count
CASES = {
    # P=298 columns: 2 images per block, 4 blocks (2, 2, 2, 1)
    "conv1d": (F.conv1d, (7, 3, 300), (5, 3, 3), {}),
    # P=256: 2 images per block, 11 blocks (the last of 1 image), 6 chunks of 2 blocks (last 1)
    "conv2d": (F.conv2d, (21, 4, 16, 16), (6, 4, 3, 3), {"padding": 1}),
    # P=8x8x8=512: 1 image per block, 7 blocks
    "conv3d": (F.conv3d, (7, 2, 8, 8, 8), (4, 2, 3, 3, 3), {"padding": 1}),
    # P=256, 4 groups: 2 images per block, 5 blocks (2, 2, 2, 2, 1)
    "conv2d_grouped": (F.conv2d, (9, 8, 16, 16), (12, 2, 3, 3), {"padding": 1, "groups": 4}),
    # strided 3x3: P=12x12=144, 4 images per block, 3 blocks (4, 4, 1)
    "conv2d_strided": (F.conv2d, (9, 3, 24, 24), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
    # 1x1 on 24x24 (P=576): one image per block, GEMMs straight on the images
    "conv2d_1x1": (F.conv2d, (5, 6, 24, 24), (4, 6, 1, 1), {}),
    # transposed: its forward is the input-gradient kernel and vice versa
    "conv_transpose2d": (F.conv_transpose2d, (9, 6, 16, 16), (6, 3, 3, 3), {"padding": 1}),
}


def _run(case, device, dtype=torch.float32):
    conv, xs, ws, kw = CASES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g, dtype=dtype).to(device).requires_grad_()
    w = torch.randn(ws, generator=g, dtype=dtype).to(device).requires_grad_()
    out = conv(x, w, **kw)
    go = torch.randn(out.shape, generator=g, dtype=dtype).to(device)
    gx, gw = torch.autograd.grad(out, (x, w), go)
    return [t.detach().cpu() for t in (out, gx, gw)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_conv_does_not_depend_on_unit_count(units, case, dtype):
    units(1)
    native.clear_fallback_log()
    one = _run(case, "acme", dtype)
    assert native.fallback_log() == [], f"conv fell back to CPU: {native.fallback_log()}"
    for n in (2, 3):
        units(n)
        for name, a, b in zip(("output", "input grad", "weight grad"), one, _run(case, "acme", dtype)):
            assert torch.equal(a, b), f"{case} {name}: 1 unit and {n} units differ"
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for a, c in zip(one, _run(case, "cpu", dtype)):
        torch.testing.assert_close(a, c, **tol)
