"""Kernels that use acme's own approximations (no libm) stay accurate over the
whole input range, not only on the conformance samples."""

import torch


def test_gelu_and_its_backward_match_float64_everywhere():
    x = torch.linspace(-12, 12, 240001)
    ones = torch.ones_like(x)
    ref = torch.nn.functional.gelu(x.double())
    ref_grad = torch.ops.aten.gelu_backward(ones.double(), x.double())
    out = torch.nn.functional.gelu(x.to("acme")).cpu().double()
    grad = torch.ops.aten.gelu_backward(ones.to("acme"), x.to("acme")).cpu().double()
    assert (out - ref).abs().max() < 1e-6
    assert (grad - ref_grad).abs().max() < 1e-6
    # far tails: gelu is 0 and x, its slope 0 and 1, to float32 precision
    assert out[0] == 0 and out[-1] == 12 and abs(grad[0]) < 1e-30 and grad[-1] == 1
