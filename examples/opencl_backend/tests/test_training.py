"""A small classifier trains on the OpenCL device as on the CPU: same losses and
parameters after several SGD steps with momentum, no op of the step on the CPU
fallback, and no host wait inside a step (everything is queued)."""

import torch
import torch_fl_ocl._C as native

import torch_fl


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 64), torch.nn.Sigmoid(),
        torch.nn.Linear(64, 10))


def _train(model, x, y, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses  # read later: a float() here would be a host wait per step


def test_mlp_trains_as_on_cpu_without_fallback_or_host_waits():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 32, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    cpu = _model()
    dev = _model().to("ocl")
    xd, yd = x.to("ocl"), y.to("ocl")
    cpu_losses = [float(v) for v in _train(cpu, x, y, 10)]
    native.clear_fallback_log()
    with torch_fl.count_host_syncs() as waits:
        dev_losses = _train(dev, xd, yd, 10)
        dev_params = [p.detach() for p in dev.parameters()]
    dev_losses = [float(v) for v in dev_losses]
    assert native.fallback_log() == [], native.fallback_log()
    implicit = {k: v for k, v in waits.items() if v and k not in ("synchronize", "event")}
    assert implicit == {}, f"host waits inside the training steps: {implicit}"
    assert all(abs(a - b) < 1e-5 for a, b in zip(cpu_losses, dev_losses)), (cpu_losses, dev_losses)
    assert cpu_losses[-1] < cpu_losses[0]
    for a, b in zip(cpu.parameters(), dev_params):
        assert torch.allclose(a.detach(), b.cpu(), atol=1e-5, rtol=1e-5)
