"""torch.compile conformance: a few small graphs compiled with the default backend
(Inductor) on a device, compared with eager on the same device.

Every backend's generated conformance suite runs these (`tests/generated/
test_<name>_compile.py`, from flsdk's template), so a backend's `compile:`
section is exercised however it is configured: `codegen: cpp` runs Inductor's
C++ kernels on the device memory, `triton` the vendor's Triton, `none` the
aot_eager fallback. Caches are disabled: a warm cache would hide a broken
registration (issue #10, trap d). Each case is one small graph (a compile costs
tens of seconds of C++ compilation on a small machine); together they cover
fused pointwise ops, reductions, indexed loads, and a training step whose
matmuls stay the device's own kernels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

__all__ = ["CASES", "check", "fresh_compile"]


@contextlib.contextmanager
def fresh_compile():
    """Dynamo reset, Inductor's caches off, for the duration of the block."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    try:
        with inductor_config.patch(force_disable_caches=True):
            yield
    finally:
        torch._dynamo.reset()


def _close(got, want, atol, rtol, what):
    torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), atol=atol, rtol=rtol,
                               msg=lambda m: f"compiled vs eager, {what}: {m}")


def pointwise_reductions_indexing(device: str, codegen: str) -> None:
    """GELU chain (fuses into one loop nest), softmax and layer_norm (reductions),
    and a gather by an index tensor (indirect loads), in one graph. With C++ codegen,
    torch_fl's graph record must show the graph on the device with fused kernels."""
    def f(x, idx):
        y = torch.nn.functional.gelu(x * 2 + 1).sin() * x
        return (torch.softmax(y, -1)[idx] + torch.nn.functional.layer_norm(x, x.shape[-1:])[idx],
                y.sum(0))

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 40, generator=gen).to(device)
    idx = torch.tensor([3, 0, 15, 7]).to(device)
    got, want = torch.compile(f)(x, idx), f(x, idx)
    for g, w, what in zip(got, want, ("softmax+layer_norm gathered", "gelu chain summed")):
        assert g.device == w.device, f"compiled result on {g.device}, eager on {w.device}"
        _close(g, w, 1e-5, 1e-5, what)
    if codegen == "cpp":
        import torch_fl

        graph = torch_fl.get_optimized_graph()
        assert graph is not None and graph.device == torch.device(device).type, graph
        assert graph.fused_kernels >= 1, graph.summary()


def train_step(device: str, codegen: str) -> None:
    """Forward and backward (two compiled graphs) of a small MLP with a loss:
    the loss and every parameter gradient match eager; with C++ codegen the matmuls
    are left to the device's kernels."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 3)).to(device)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 12, generator=gen).to(device)
    target = torch.randint(0, 3, (8,), generator=gen).to(device)

    def loss_of(m):
        return torch.nn.functional.cross_entropy(m(x), target)

    eager_loss = loss_of(model)
    eager_loss.backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    compiled_loss = loss_of(torch.compile(model))
    compiled_loss.backward()
    _close(compiled_loss, eager_loss, 1e-5, 1e-5, "loss")
    for (name, p), g in zip(model.named_parameters(), eager_grads):
        assert p.grad is not None, f"compiled backward left {name}.grad empty"
        _close(p.grad, g, 1e-5, 1e-4, f"{name}.grad")
    if codegen == "cpp":  # matmuls are extern kernels: the device's own, not generated C++
        import torch_fl

        graph = torch_fl.get_optimized_graph()  # the backward graph
        assert any("mm" in name for name in graph.extern_calls), graph.summary()


CASES: dict[str, Callable[[str, str], None]] = {
    "pointwise_reductions_indexing": pointwise_reductions_indexing,
    "train_step": train_step,
}


def check(case: str, device: str, codegen: str) -> None:
    """Run one case on `device` (whose device.yaml says `compile: {codegen: ...}`) with a
    fresh compile; raises AssertionError on a mismatch."""
    if case not in CASES:
        raise KeyError(f"no compile case {case!r}; known: {', '.join(CASES)}")
    with fresh_compile():
        CASES[case](device, codegen)
