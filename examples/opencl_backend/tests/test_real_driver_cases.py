"""Cases real models met on the OpenCL device that the op specs' samples do not
reach: histc counting integer expert indices over the data's own range (the
mixture-of-experts router of transformers' Mixtral, which the CPU fallback
cannot run: CPU's histc takes no integers), and lazy conjugate / negative views
moved off the device (a backend without a native clone used to recurse until
SIGSEGV)."""

import pytest
import torch
import torch_fl_ocl._C as native


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.float32])
def test_histc_counts_experts_natively_over_the_datas_range(dtype):
    torch.manual_seed(0)
    experts = torch.randint(0, 8, (64, 2)).to(dtype)
    native.clear_fallback_log()
    got = torch.histc(experts.to("ocl"), bins=8, min=0, max=0).cpu()
    # CPU's histc on float64 (it refuses integers), as the op spec's reference
    want = torch.histc(experts.double(), bins=8, min=0, max=0).to(dtype)
    assert torch.equal(got, want)
    assert int(got.sum()) == experts.numel()
    assert [e["op"] for e in native.fallback_log()] == []


def test_histc_refuses_a_range_that_is_not_finite_naming_the_op():
    with pytest.raises(RuntimeError, match=r"ocl: histc: range of \[nan, nan\] is not finite"):
        torch.histc(torch.tensor([1.0, float("nan")], device="ocl"))


def test_conjugate_and_negative_views_copy_back_as_viewed():
    x = torch.randn(4, 3, dtype=torch.complex64)
    d = x.to("ocl")
    assert torch.equal(d.conj().cpu(), x.conj().resolve_conj())
    assert torch.equal(d.conj().clone().cpu(), x.conj().resolve_conj())
    assert torch.equal(d._neg_view().cpu(), -x)
    r = torch.randn(5)
    assert torch.equal(r.to("ocl")._neg_view().clone().cpu(), -r)
