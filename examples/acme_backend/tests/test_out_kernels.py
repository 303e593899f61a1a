"""acme's out= matmul kernels (`bool k_mm_out(...)`: kernels/linalg.cpp).

Compiled graphs call mm, addmm and bmm with out= into buffers Inductor planned.
acme writes those directly when `out` is exactly what the functional kernel would
allocate (shape, dtype, contiguous, no shared memory with an operand) and declines
the rest, which the generated wrapper computes, resizes and copies. These check
which path ran (a declined call costs one aten::copy_) and that declined calls
still give CPU's answer.
"""

import pytest
import torch
from test_inplace_kernels import CopyCounter

OPS = {  # op: (operand shapes, call writing into out)
    "mm": ([(33, 17), (17, 9)], lambda out, a, b: torch.mm(a, b, out=out)),
    "bmm": ([(3, 33, 17), (3, 17, 9)], lambda out, a, b: torch.bmm(a, b, out=out)),
    "addmm": ([(9,), (33, 17), (17, 9)],
              lambda out, c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0, out=out)),
}


def operands(op, dtype):
    torch.manual_seed(0)
    return [torch.randn(shape).to(dtype) for shape in OPS[op][0]]


def result_shape(op):
    shapes = OPS[op][0]
    return (*shapes[-2][:-1], shapes[-1][-1])


def tolerance(dtype):
    return {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", sorted(OPS))
def test_planned_out_is_written_without_a_copy(op, dtype):
    cpu = operands(op, dtype)
    dev = [t.to("acme") for t in cpu]
    out = torch.full(result_shape(op), float("nan"), dtype=dtype, device="acme")
    call = OPS[op][1]
    with CopyCounter() as copies:
        got = call(out, *dev)
    assert got is out
    assert copies.count == 0, f"{op}: declined a planned out= buffer"
    want = call(torch.empty(result_shape(op), dtype=dtype), *cpu)
    torch.testing.assert_close(out.cpu(), want, **tolerance(dtype))


def declined_out(op, case):
    shape = result_shape(op)
    if case == "needs resizing":
        return torch.empty(0, device="acme")
    if case == "transposed":
        return torch.empty(tuple(reversed(shape)), device="acme").transpose(0, -1)
    # CPU refuses an out= of another dtype for matmuls; flsdk's generated out= path
    # casts into it, as it does for every op (known difference, more permissive)
    return torch.empty(shape, dtype=torch.float64, device="acme")


@pytest.mark.parametrize("case", ["needs resizing", "transposed", "another dtype"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_declined_out_still_gives_cpus_answer(op, case):
    cpu = operands(op, torch.float32)
    dev = [t.to("acme") for t in cpu]
    out = declined_out(op, case)
    call = OPS[op][1]
    with CopyCounter() as copies:
        call(out, *dev)
    assert copies.count >= 1, f"{op}: expected the generated compute-and-copy path for {case}"
    want = call(torch.empty(0), *cpu)
    torch.testing.assert_close(out.cpu(), want.to(out.dtype), atol=1e-4, rtol=1e-4)


def test_out_aliasing_the_bias_declines_and_matches_cpu():
    c, a, b = operands("addmm", torch.float32)
    c = c.expand(33, 9).contiguous()
    want = torch.addmm(c.clone(), a, b, beta=0.5, alpha=2.0)
    dc, da, db = c.to("acme"), a.to("acme"), b.to("acme")
    with CopyCounter() as copies:
        torch.addmm(dc, da, db, beta=0.5, alpha=2.0, out=dc)  # out *is* self
    assert copies.count >= 1
    torch.testing.assert_close(dc.cpu(), want, atol=1e-4, rtol=1e-4)


def test_operand_errors_are_the_functional_kernels():
    a, b = torch.randn(3, 4, device="acme"), torch.randn(5, 6, device="acme")
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(a, b, out=torch.empty(3, 6, device="acme"))
