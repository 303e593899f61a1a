"""Two gaps a model engineer hits (issue 37): deterministic mode fills uninitialized
memory as CPU and CUDA do, through the device's fill path; sparse COO tensors on the
device answer values(), indices(), coalesce(), torch.sparse.sum, .t() and
torch.sparse.mm forward and backward (natively or on the CPU fallback)."""

import pytest
import torch

import torch_fl


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(before)
    torch.utils.deterministic.fill_uninitialized_memory = fill


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64,
                                   torch.int32, torch.uint8, torch.bool, torch.complex64])
def test_empty_is_filled_like_cpu_in_deterministic_mode(deterministic, dtype):
    for make in (lambda d: torch.empty(5, 3, dtype=dtype, device=d),
                 lambda d: torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=d),
                 lambda d: torch.empty_like(torch.zeros(7, dtype=dtype, device=d))):
        expected, got = make("cpu"), make("acme").cpu()
        torch.testing.assert_close(got, expected, equal_nan=True)


def test_resize_fills_the_grown_part(deterministic):
    t = torch.arange(4.0, device="acme")
    t.resize_(10)
    host = t.cpu()
    assert host[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch.isnan(host[4:]).all()


def test_fill_off_keeps_empty_cheap(deterministic):
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch_fl.reset_host_syncs()
    x = torch.empty(1000, device="acme")
    torch.acme.synchronize()
    assert x.numel() == 1000


def _coo():
    i = torch.tensor([[0, 1, 1, 2], [2, 0, 2, 1]])
    v = torch.tensor([3.0, 4.0, 5.0, 6.0])
    return torch.sparse_coo_tensor(i, v, (3, 3))


def test_sparse_coo_accessors_and_ops_match_cpu():
    s_cpu = _coo()
    s = s_cpu.to("acme")
    assert s.device.type == "acme" and s.layout == torch.sparse_coo
    c, c_cpu = s.coalesce(), s_cpu.coalesce()
    torch.testing.assert_close(c.values().cpu(), c_cpu.values())
    torch.testing.assert_close(c.indices().cpu(), c_cpu.indices())
    assert c.values().device.type == "acme"
    torch.testing.assert_close(torch.sparse.sum(s).cpu(), torch.sparse.sum(s_cpu))
    torch.testing.assert_close(torch.sparse.sum(s, dim=0).to_dense().cpu(),
                               torch.sparse.sum(s_cpu, dim=0).to_dense())
    torch.testing.assert_close(s.t().to_dense().cpu(), s_cpu.t().to_dense())
    d = torch.randn(3, 2)
    torch.testing.assert_close(torch.sparse.mm(s, d.to("acme")).cpu(), torch.sparse.mm(s_cpu, d))
    # structured ops (their generic kernel is for strided tensors) reach the sparse fallback too
    torch.testing.assert_close((s * 2 + s).to_dense().cpu(), (s_cpu * 2 + s_cpu).to_dense())


def test_sparse_mm_backward_matches_cpu():
    def grads(device):
        s = _coo().to(device).coalesce().requires_grad_(True)
        d = torch.arange(6.0).reshape(3, 2).to(device).requires_grad_(True)
        torch.sparse.mm(s, d).square().sum().backward()
        return s.grad.to_dense().cpu(), d.grad.cpu()
    for got, expected in zip(grads("acme"), grads("cpu")):
        torch.testing.assert_close(got, expected)


def _csr_case():
    torch.manual_seed(0)
    mask = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]).to_sparse_csr()
    return mask, torch.randn(2, 4), torch.randn(4, 3)


def test_sparse_csr_sampled_addmm_and_mm_reduce_forward_and_backward_on_the_fallback():
    def run(device):
        mask, a, b = _csr_case()
        a, b = a.to(device).requires_grad_(True), b.to(device).requires_grad_(True)
        out = torch.sparse.sampled_addmm(mask.to(device), a, b, beta=0.5, alpha=2.0)
        out.to_dense().square().sum().backward()
        csr = mask.to(device).requires_grad_(True)
        reduced = torch.sparse.mm(csr, b.detach().T.contiguous().requires_grad_(True), "amax")
        reduced.square().sum().backward()
        return [out.to_dense().cpu(), a.grad.cpu(), b.grad.cpu(), reduced.detach().cpu(),
                csr.grad.to_dense().cpu()]
    torch_fl.clear_fallback_log()
    for got, expected in zip(run("acme"), run("cpu")):
        torch.testing.assert_close(got, expected)
    ops = {e["op"] for e in torch_fl.get_fallback_log()}
    assert {"sparse_sampled_addmm", "_sparse_mm_reduce_impl", "_sparse_mm_reduce_impl_backward"} <= ops


@pytest.mark.slow
def test_opinfo_sparse_csr_cases_pass_on_the_fallback():
    pytest.importorskip("expecttest")
    from torch_fl.testing import opinfo

    report = opinfo.run_opinfo("acme:0", phases=["forward", "grad"],
                               ops=["sparse.sampled_addmm", "sparse.mm.reduce"], progress=False)
    for row in report.rows:
        for phase in ("forward", "grad"):
            assert row[phase]["status"] == "pass", (row["op"], phase, row[phase].get("detail"))
            assert row[phase]["native"] is False  # they run on the CPU fallback
