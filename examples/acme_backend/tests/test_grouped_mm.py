"""acme's _grouped_mm (kernels/linalg.cpp): the grouped forms the op spec's samples
cannot express (offs, an int32 tensor of group ends), compared with PyTorch's CPU
path in values and gradients, and the point of the kernel: no host wait per call
(transformers' Mixtral calls it 12 times in a training step)."""

from __future__ import annotations

import pytest
import torch

import torch_fl

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def _offs(*ends: int) -> torch.Tensor:
    return torch.tensor(ends, dtype=torch.int32)


# (self shape, mat2 shape, offs or None); the CPU needs 16-byte row strides
FORMS = {
    "2d x 3d": ((12, 8), (3, 8, 16), _offs(3, 7, 12)),
    "2d x 3d, an empty group": ((12, 8), (3, 8, 16), _offs(5, 5, 12)),
    "3d x 2d": ((3, 8, 8), (8, 24), _offs(8, 16, 24)),
    "2d x 2d": ((8, 16), (16, 8), _offs(4, 16)),
    "3d x 3d": ((3, 8, 8), (3, 8, 16), None),
}


def _run(form: str, dtype: torch.dtype, device: str, grad: bool = False):
    a_shape, b_shape, offs = FORMS[form]
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(a_shape, generator=gen).to(dtype)
    b = torch.randn(b_shape, generator=gen).to(dtype)
    a, b = a.to(device).requires_grad_(grad), b.to(device).requires_grad_(grad)
    out = torch._grouped_mm(a, b, None if offs is None else offs.to(device))
    if not grad:
        return out.cpu()
    out.square().sum().backward()
    return out.detach().cpu(), a.grad.cpu(), b.grad.cpu()


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("form", list(FORMS))
def test_grouped_mm_matches_the_cpu(form, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(_run(form, dtype, "acme"), _run(form, dtype, "cpu"), atol=tol, rtol=tol)


@pytest.mark.parametrize("form", list(FORMS))
def test_grouped_mm_gradients_match_the_cpu(form):
    for got, want in zip(_run(form, torch.float32, "acme", grad=True), _run(form, torch.float32, "cpu", grad=True)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_rows_no_group_covers_are_zero():
    a, b = torch.randn(12, 8, device="acme"), torch.randn(2, 8, 8, device="acme")
    out = torch._grouped_mm(a, b, _offs(3, 7).to("acme")).cpu()
    assert out[7:].eq(0).all()
    torch.testing.assert_close(out[:3], a[:3].cpu() @ b[0].cpu(), atol=1e-4, rtol=1e-4)


def test_no_host_wait():
    a, b = torch.randn(12, 8, device="acme"), torch.randn(3, 8, 16, device="acme")
    offs = _offs(3, 7, 12).to("acme")
    torch.acme.synchronize()
    with torch_fl.count_host_syncs() as waits:
        out = torch._grouped_mm(a, b, offs)
    assert not any(waits.values()), waits
    assert out.device.type == "acme"


@pytest.mark.parametrize("args,needle", [
    (lambda d: (torch.randn(12, 8, device=d), torch.randn(3, 8, 16, device=d)), "offs must be given"),
    (lambda d: (torch.randn(12, 8, device=d), torch.randn(3, 8, 16, device=d), torch.tensor([3, 7, 12], device=d)),
     "int32"),
    (lambda d: (torch.randn(12, 8, device=d), torch.randn(3, 8, 16, device=d), _offs(3, 12).to(d)), "2 entries"),
    (lambda d: (torch.randn(12, 8, device=d), torch.randn(3, 4, 16, device=d), _offs(3, 7, 12).to(d)),
     "cannot be multiplied"),
])
def test_bad_calls_name_the_op_and_what_is_wrong(args, needle):
    with pytest.raises(RuntimeError, match="_grouped_mm") as info:
        torch._grouped_mm(*args("acme"))
    assert needle in str(info.value)


def test_offsets_out_of_range_are_reported_by_the_device_part():
    a, b = torch.randn(12, 8, device="acme"), torch.randn(3, 8, 16, device="acme")
    with pytest.raises(RuntimeError, match="non-decreasing"):
        torch._grouped_mm(a, b, _offs(7, 3, 12).to("acme")).cpu()
    torch.acme.synchronize()  # the device stays usable
    assert (torch.ones(2, device="acme") + 1).cpu().tolist() == [2.0, 2.0]
