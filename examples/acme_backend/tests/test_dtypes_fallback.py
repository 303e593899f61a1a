"""Dtypes acme cannot compute still live on the device: storage is bytes.

device.yaml's `dtypes` says what acme computes natively; tensors of any other
dtype (complex, uint64) are allocated, copied and viewed on acme like any
other, and their ops run on the logged CPU fallback. A native kernel is never
handed a dtype its op spec does not list: the generated wrapper sends such a
call to the fallback instead.
"""

import pytest
import torch

import torch_fl_acme._C as native
from torch_fl.testing.conformance import default_tolerance

pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


def _ops_in_log() -> set[str]:
    return {e["op"] for e in native.fallback_log()}


@pytest.fixture
def fallback_log():
    native.clear_fallback_log()
    yield _ops_in_log
    native.clear_fallback_log()


def _close(device_result, cpu_result):
    if isinstance(cpu_result, (tuple, list)):
        for d, c in zip(device_result, cpu_result):
            _close(d, c)
        return
    assert device_result.device.type == "acme"
    atol, rtol = default_tolerance(cpu_result.dtype)
    torch.testing.assert_close(device_result.cpu(), cpu_result, atol=atol * 10, rtol=rtol * 10)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.uint64])
def test_dtypes_the_device_does_not_compute_are_allocated_and_copied(dtype):
    cpu = (torch.arange(12, dtype=torch.float64) * 3 + 1).reshape(3, 4).to(dtype)
    if dtype.is_complex:
        cpu = cpu + 1j * cpu.real.flip(0)
    empty = torch.empty(3, 4, dtype=dtype, device="acme")
    assert empty.dtype == dtype and empty.device.type == "acme"
    on0 = cpu.to("acme")
    assert on0.dtype == dtype
    assert torch.equal(on0.cpu(), cpu)
    assert torch.equal(on0.t().contiguous().cpu(), cpu.t())       # strided copy on the device
    assert torch.equal(on0[:, 1:3].cpu(), cpu[:, 1:3])               # partial view read back
    on1 = on0.to("acme:1")                                          # between devices
    assert on1.device == torch.device("acme:1") and torch.equal(on1.cpu(), cpu)
    zeros = torch.zeros(2, dtype=dtype, device="acme")
    assert torch.equal(zeros.cpu(), torch.zeros(2, dtype=dtype))
    filled = torch.empty(2, dtype=dtype, device="acme").fill_(7)
    assert torch.equal(filled.cpu(), torch.full((2,), 7, dtype=dtype))
    assert on0[0, 0].item() == cpu[0, 0].item()
    # a cast on the device, into and out of the dtype
    assert torch.equal(on0.to(torch.float64).cpu(), cpu.to(torch.float64))
    assert torch.equal(cpu.to(torch.float32).to("acme").to(dtype).cpu(), cpu.to(torch.float32).to(dtype))


def test_complex_ops_run_on_the_fallback_and_match_cpu(fallback_log):
    gen = torch.Generator().manual_seed(0)
    signal = torch.randn(64, generator=gen)
    pairs = torch.randn(4, 5, 2, generator=gen)
    square = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    mag, phase = torch.rand(6, generator=gen) + 0.1, torch.randn(6, generator=gen)
    cases = {
        "fft.fft": (lambda x: torch.fft.fft(x), (signal,)),
        "fft.ifft(fft)": (lambda x: torch.fft.ifft(torch.fft.fft(x)), (signal,)),
        "fft.rfft": (lambda x: torch.fft.rfft(x), (signal,)),
        "stft": (lambda x: torch.stft(x, n_fft=16, hop_length=4, window=torch.hann_window(16, device=x.device),
                                      return_complex=True), (signal,)),
        "polar": (torch.polar, (mag, phase)),
        "view_as_complex": (lambda p: torch.view_as_complex(p) * 2, (pairs,)),
        "linalg.eigvals": (lambda a: torch.linalg.eigvals(a), (square,)),
        "abs/angle": (lambda p: (torch.view_as_complex(p).abs(), torch.view_as_complex(p).angle()), (pairs,)),
        "complex add/mul": (lambda p: torch.view_as_complex(p) * torch.view_as_complex(p) + 1, (pairs,)),
    }
    for _name, (fn, args) in cases.items():
        expected = fn(*args)
        got = fn(*(a.to("acme") for a in args))
        _close(got, expected)
    # linalg.eig: eigenvalues and A v = lambda v (eigenvector phases are not unique)
    values, vectors = torch.linalg.eig(square.to("acme"))
    assert values.device.type == "acme" and values.dtype == torch.complex128
    a = square.to(torch.complex128)
    v, w = vectors.cpu(), values.cpu()
    torch.testing.assert_close(a @ v, v * w, atol=1e-10, rtol=1e-10)
    logged = fallback_log()
    for op in ("_fft_c2c", "_fft_r2c", "polar", "abs", "angle", "linalg_eig"):
        assert any(entry.startswith(op) for entry in logged), (op, sorted(logged))
    # view_as_complex / view_as_real are glue: views of the same device bytes
    assert "view_as_complex" not in logged
    device_pairs = pairs.to("acme")
    as_complex = torch.view_as_complex(device_pairs)
    assert as_complex.data_ptr() == device_pairs.data_ptr()
    assert torch.view_as_real(as_complex).data_ptr() == device_pairs.data_ptr()
    assert torch.equal(as_complex.imag.cpu(), pairs[..., 1])


def test_a_native_kernel_is_never_handed_a_dtype_its_spec_does_not_list(fallback_log):
    # acme's abs and mul are native for real dtypes; complex goes to the fallback.
    x = torch.tensor([3 + 4j, -1j], dtype=torch.complex64)
    native.clear_fallback_log()
    real = torch.tensor([-2.0, 3.0], device="acme")
    assert torch.equal(real.abs().cpu(), torch.tensor([2.0, 3.0]))
    assert "abs" not in fallback_log()
    assert torch.equal(x.to("acme").abs().cpu(), x.abs())
    assert "abs" in fallback_log()
    # a complex Python scalar makes a real op complex: it must not reach the real kernel
    assert torch.equal((real * 1j).cpu(), real.cpu() * 1j)
    assert "mul.Tensor" in fallback_log()


def test_uint64_ops_run_on_the_fallback_and_match_cpu(fallback_log):
    cpu = torch.tensor([1, 2, 2**63 + 5], dtype=torch.uint64)
    x = cpu.to("acme")
    assert torch.equal((x * 2).cpu(), cpu * 2)
    assert torch.equal((x == x).cpu(), cpu == cpu)
    assert torch.equal(torch.sort(x, descending=True).values.cpu(), torch.sort(cpu, descending=True).values)
    assert "mul.Tensor" in fallback_log()
    # what CPU cannot do fails as on CPU, naming the dtype
    with pytest.raises(RuntimeError, match="UInt64"):
        x + x


def test_with_the_fallback_off_an_unlisted_dtype_fails_naming_op_device_and_dtype():
    x = torch.tensor([1 + 1j], dtype=torch.complex64).to("acme")
    native.set_fallback_enabled(False)
    try:
        with pytest.raises(NotImplementedError) as info:
            x.abs()
    finally:
        native.set_fallback_enabled(True)
    msg = str(info.value)
    for needle in ("abs", "acme:0", "ComplexFloat", "disabled"):
        assert needle in msg, (needle, msg)


def test_sparse_coo_tensors_live_on_the_device_and_their_ops_fall_back(fallback_log):
    dense = torch.tensor([[0.0, 2.0, 0.0], [3.0, 0.0, 4.0]])
    on_device = dense.to_sparse().to("acme")
    assert on_device.is_sparse and on_device.device.type == "acme"
    assert on_device._nnz() == 3 and on_device.sparse_dim() == 2
    assert on_device._values().device.type == "acme" and on_device._indices().device.type == "acme"
    back = on_device.cpu()
    assert back.is_sparse and torch.equal(back.to_dense(), dense)
    # sparse ops: on the CPU fallback, results back on the device
    assert torch.equal(on_device.to_dense().cpu(), dense)
    product = torch.sparse.mm(on_device, torch.ones(3, 2, device="acme"))
    assert product.device.type == "acme" and torch.equal(product.cpu(), dense @ torch.ones(3, 2))
    doubled = on_device * 2
    assert doubled.is_sparse and doubled.device.type == "acme"
    assert torch.equal(doubled.cpu().to_dense(), dense * 2)
    assert fallback_log(), "sparse ops are not native: they are in the fallback log"


def test_sparse_csr_tensors_live_on_the_device_and_copy_back(fallback_log):
    # CSR tensors are bookkeeping over dense device tensors: they live on the device and
    # copy back to the CPU. Other CSR ops run on the glue's own fallback for compressed
    # layouts (torch's cpu_fallback crashed on the SparseCsr path of sparse.mm.reduce's
    # backward), their results back on the device (issue 37).
    dense = torch.tensor([[0.0, 2.0, 0.0], [3.0, 0.0, 4.0]])
    on_device = dense.to_sparse_csr().to("acme")
    assert on_device.layout == torch.sparse_csr and on_device.device.type == "acme"
    assert on_device._nnz() == 3 and on_device.col_indices().device.type == "acme"
    assert torch.equal(on_device.crow_indices().cpu(), torch.tensor([0, 1, 3]))
    back = on_device.cpu()  # needs the layout's accessors on the device
    assert back.layout == torch.sparse_csr and torch.equal(back.to_dense(), dense)
    product = torch.sparse.mm(on_device, torch.ones(3, 2, device="acme"))
    assert product.device.type == "acme"
    assert torch.equal(product.cpu(), dense @ torch.ones(3, 2))
    assert "addmm" in _ops_in_log() or "mm" in _ops_in_log()


def test_record_stream_is_glue_and_checks_the_stream():
    # ATen implements record_stream for CUDA only; the glue forwards it to the allocator.
    x = torch.ones(1024, device="acme:0")
    stream = torch.Stream(device="acme:0")
    native.clear_fallback_log()
    x.record_stream(stream)
    assert "record_stream" not in _ops_in_log()
    with pytest.raises(RuntimeError, match="acme:1"):
        x.record_stream(torch.Stream(device="acme:1"))
    del x
    stream.synchronize()


@pytest.mark.parametrize("storage_offset", [None, 0, 10])
def test_as_strided_on_a_partial_view_matches_cpu_forward_and_backward(storage_offset):
    # OpInfo's as_strided "partial_views" samples: a view base[5:15] of a 20-element
    # storage, read from outside the view through an explicit storage offset.
    gen = torch.Generator().manual_seed(0)
    base_cpu = torch.randn(20, generator=gen)
    kwargs = {} if storage_offset is None else {"storage_offset": storage_offset}
    results = []
    for base in (base_cpu, base_cpu.to("acme")):
        view = base[5:15].requires_grad_()
        out = torch.as_strided(view, (2, 2), (1, 2), **kwargs)
        (grad,) = torch.autograd.grad(out, view, torch.arange(4.0, device=base.device).view(2, 2))
        results.append((out.detach().cpu(), grad.cpu(), view.storage_offset()))
    (out_cpu, grad_cpu, offset_cpu), (out_acme, grad_acme, offset_acme) = results
    assert offset_acme == offset_cpu == 5
    assert torch.equal(out_acme, out_cpu)
    assert torch.equal(grad_acme, grad_cpu)


def test_conjugate_views_run_on_the_fallback_without_recursing():
    # A conj view of a complex device tensor moved to the CPU used to recurse
    # (resolve on the device -> clone -> fallback -> resolve ...) until SIGSEGV.
    x = torch.randn(3, dtype=torch.complex64)
    d = x.to("acme:0")
    torch.testing.assert_close(d.conj().cpu(), x.conj())
    r = torch.randn(5, 6, 7)
    torch.testing.assert_close(torch.fft.ifft(r.to("acme:0"), n=10, dim=1).cpu(),
                               torch.fft.ifft(r, n=10, dim=1))


def _math_views(t):
    """The lazy views PyTorch makes without moving bytes: conjugate, negative, both."""
    views = {"neg": t._neg_view()}
    if t.is_complex():
        views.update({"conj": t.conj(), "conj+neg": t.conj()._neg_view()})
    return views


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_copies_of_conjugate_and_negative_views_apply_the_view(dtype):
    # Every direction of a copy with a lazy view on either side, through the
    # glue's _copy_from (copies.cpp): the copy moves bytes as stored and applies
    # the bits that differ; PyTorch's math-bit fallback would clone, which copies
    # through _copy_from again (a backend without a native clone recursed).
    x = torch.randn(4, 3, dtype=dtype)
    d = x.to("acme")
    for name, expected in _math_views(x).items():
        view = _math_views(d)[name]
        assert view.is_neg() or view.is_conj()
        assert torch.equal(view.cpu(), expected.resolve_conj().resolve_neg()), name
        assert torch.equal(_math_views(x)[name].to("acme").cpu(), expected.resolve_conj().resolve_neg()), name
        assert torch.equal(view.clone().cpu(), expected.resolve_conj().resolve_neg()), name
        assert torch.equal(view.t().contiguous().cpu(), expected.t().resolve_conj().resolve_neg()), name
        # into a view: the bytes stored are the inverse of the view
        target = torch.zeros(4, 3, dtype=dtype, device="acme")
        _math_views(target)[name].copy_(x)
        assert torch.equal(_math_views(target.cpu())[name].resolve_conj().resolve_neg(), x), name
        # non_blocking into pinned memory: the view is applied after the bytes land
        pinned = torch.empty(4, 3, dtype=dtype).pin_memory()
        pinned.copy_(view, non_blocking=True)
        torch.acme.synchronize()
        assert torch.equal(pinned, expected.resolve_conj().resolve_neg()), name


def test_a_native_kernel_is_never_handed_a_negative_view(fallback_log):
    # clone is on PyTorch's math-bit fallthrough lists (mm too, for conjugate
    # views): its kernel gets the view itself. acme's kernels read bytes as
    # stored, so the wrapper sends the call to the fallback, which resolves the
    # view (before: a silent wrong answer, the negation dropped). mm's negative
    # view is resolved by PyTorch's fallback, through that clone.
    x, w = torch.randn(5, 4), torch.randn(4, 3)
    d = x.to("acme")._neg_view()
    assert torch.equal(d.clone().cpu(), -x)
    torch.testing.assert_close(torch.mm(d, w.to("acme")).cpu(), torch.mm(-x, w))
    reasons = {(e["op"], e["reason"]) for e in native.fallback_log()}
    assert ("clone", "a conjugate or negative view, resolved on the CPU") in reasons, reasons
    # a plain tensor stays native
    native.clear_fallback_log()
    assert torch.equal(x.to("acme").clone().cpu(), x)
    assert fallback_log() == set()
