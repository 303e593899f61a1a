"""Everyday cases on a backend whose memory the host cannot read, compared with
the CPU (issue #26's table, and more). Run in a child process with the backend
loaded:

    python discrete_cases.py <device>      # prints one JSON line: {case: "ok" | error}

Each case computes something on the device and on the CPU from the same inputs
and says whether they agree; an exception is recorded, not raised, so one run
reports every case. A host dereference of device memory would kill the process:
the caller sees a missing JSON line and the signal.
"""

from __future__ import annotations

import io
import json
import sys
import traceback

import torch
import torch.nn.functional as F

D = sys.argv[1] if len(sys.argv) > 1 else "zeta"
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def same(a, b, tol=0.0):
    a, b = a.detach().cpu(), b.detach().cpu()
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if tol:
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    else:
        assert torch.equal(a, b), (a, b)


def both(fn, tol=0.0):
    """fn(device) on both devices from the same seed; the results agree."""
    torch.manual_seed(0)
    want = fn("cpu")
    torch.manual_seed(0)
    got = fn(D)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        same(g, w, tol)


def x34(device):
    return torch.arange(12.0).reshape(3, 4).to(device)


@case
def arange_cpu_item_tolist():
    d = torch.arange(6.0, device=D)
    assert d.cpu().tolist() == [0, 1, 2, 3, 4, 5] and d[3].item() == 3.0 and d.tolist()[5] == 5.0


@case
def inplace_on_contiguous_view():
    both(lambda dev: x34(dev)[1].add_(1) * 1)


@case
def save_load():
    buf = io.BytesIO()
    torch.save({"x": x34(D)}, buf)
    buf.seek(0)
    same(torch.load(buf)["x"], x34("cpu"))


@case
def non_blocking_copy_to_host_with_event():
    d = x34(D) * 2
    host = torch.empty(3, 4, pin_memory=True)
    host.copy_(d, non_blocking=True)
    done = torch.Event(device=D)
    done.record()
    done.synchronize()
    same(host, x34("cpu") * 2)


@case
def factories():
    for dtype in (torch.float32, torch.int32, torch.float16, torch.bool):
        same(torch.ones(3, 5, device=D, dtype=dtype), torch.ones(3, 5, dtype=dtype))
        same(torch.zeros(7, device=D, dtype=dtype), torch.zeros(7, dtype=dtype))
    same(torch.full((2, 3), 2.5, device=D), torch.full((2, 3), 2.5))
    same(torch.full_like(x34(D), -1), torch.full_like(x34("cpu"), -1))


@case
def casts():
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.float64):
        same(x34(D).to(dtype), x34("cpu").to(dtype))


@case
def contiguous_of_views():
    both(lambda dev: x34(dev).t().contiguous())
    both(lambda dev: x34(dev)[:, 1:3].clone())
    both(lambda dev: x34(dev)[::2, ::3].contiguous())


@case
def strided_host_tensor_to_device():
    host = torch.randn(5, 4).t()
    same(host.to(D), host)
    same(host.to(D, torch.float16), host.to(torch.float16))


@case
def setitem_column():
    def f(dev):
        x = x34(dev)
        x[:, 1] = 7
        x[0, :] = torch.tensor([1.0, 2.0, 3.0, 4.0], device=dev)
        return x
    both(f)


@case
def copy_from_expanded():
    both(lambda dev: torch.empty(3, 4, device=dev).copy_(torch.arange(4.0, device=dev).expand(3, 4)))


@case
def print_tensor():
    assert str(x34(D).cpu()) in str(x34(D)).replace(f", device='{D}:0'", "")


@case
def linear_forward():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    same(lin.to(D)(x34(D)), lin.cpu()(x34("cpu")), tol=1e-5)


@case
def index_put_and_where_and_cat_of_views():
    def f(dev):
        x = x34(dev)
        x.index_put_((torch.tensor([0, 2], device=dev), torch.tensor([1, 3], device=dev)),
                      torch.tensor([-5.0, -6.0], device=dev))
        w = torch.where(x > 3, x, torch.zeros_like(x))
        c = torch.cat([x[:, :2], x.t()[:2].t()], dim=1)
        return x, w, c
    both(f)


@case
def mlp_training():
    def train(dev):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        data = torch.randn(32, 8).to(dev)
        target = torch.randint(0, 3, (32,)).to(dev)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return torch.stack(losses), *[p.detach() for p in model.parameters()]
    both(train, tol=1e-5)


@case
def cnn_training_step():
    def step(dev):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                    torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2)).to(dev)
        loss = model(torch.randn(2, 3, 8, 8).to(dev)).square().mean()
        loss.backward()
        return loss.detach(), *[p.grad for p in model.parameters()]
    both(step, tol=1e-4)


@case
def mse_loss_training_step():
    def step(dev):
        torch.manual_seed(0)
        lin = torch.nn.Linear(4, 2).to(dev)
        loss = F.mse_loss(lin(torch.randn(5, 4).to(dev)), torch.randn(5, 2).to(dev))
        loss.backward()
        return loss.detach(), lin.weight.grad
    both(step, tol=1e-5)


@case
def bf16_autocast():
    def f(dev):
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 4).to(dev)
        x = torch.randn(3, 8).to(dev)
        with torch.autocast(torch.device(dev).type, dtype=torch.bfloat16):
            y = lin(x)
        return y.float()
    both(f, tol=2e-2)


@case
def reductions_and_scalars():
    def f(dev):
        x = x34(dev)
        return x.sum(), x.mean(1), x.max(0).values, (x > 4).nonzero()
    both(f, tol=1e-6)


@case
def conjugate_and_negative_views():
    # Lazy views of device tensors moved, cloned and written into. With no native
    # clone, a conjugate view's .cpu() used to recurse until SIGSEGV (PyTorch's
    # math-bit fallback clones, the clone copies through _copy_from again).
    def f(dev):
        z = torch.complex(x34(dev), x34(dev).flip(0))
        r = x34(dev)
        into = torch.zeros(3, 4, dtype=torch.complex64, device=dev)
        into.conj().copy_(z)
        return z.conj(), z.conj().clone(), z._neg_view(), r._neg_view(), r._neg_view().clone(), into
    both(f)


def main() -> None:
    results = {}
    for name, fn in CASES.items():
        try:
            fn()
            results[name] = "ok"
        except Exception as e:  # noqa: BLE001 - reported per case
            results[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            traceback.print_exc(file=sys.stderr)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
