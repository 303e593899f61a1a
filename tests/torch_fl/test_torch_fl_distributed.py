"""torch_fl.distributed: the Torch-FL article's API (init_distributed,
set_comm_backend, comm_backend_for, register_comm_backend) over the device's C++
c10d process group that every flsdk backend registers when it loads.

The two-process scenario runs this file as a script in 2 subprocesses
(``python test_torch_fl_distributed.py acme <rank> <world> <rendezvous>``); each
worker asserts its own results and exits non-zero on failure. Every subprocess
has a hard timeout, so a hang fails the test instead of blocking CI. Plain
torchrun scripts (no torch_fl) are tests/torch_fl/test_distributed_torchrun.py.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from ranks import free_port, run_ranks

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
PROC_TIMEOUT = 40          # seconds for one 2-process scenario (typical: ~10 s); 2 x 40 < 90
PG_TIMEOUT = datetime.timedelta(seconds=20)  # a stuck collective errors before the kill


# ============================================================ worker side

def _check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def _close(a: torch.Tensor, b, what: str, atol: float = 1e-6) -> None:
    b = torch.as_tensor(b, dtype=a.dtype)
    _check(torch.allclose(a.cpu(), b, atol=atol), f"{what}: got {a.cpu().tolist()}, want {b.tolist()}")


def _collectives(device: torch.device, rank: int, world: int) -> None:
    """Every collective the brief asks for, on tensors of `device`; results checked."""
    f = dict(device=device, dtype=torch.float32)

    t = torch.tensor([1.0, 2.0, 3.0], **f) * (rank + 1)
    dist.all_reduce(t)
    _check(t.device == device, f"all_reduce moved the tensor to {t.device}")
    _close(t, [3.0, 6.0, 9.0], "all_reduce sum")

    t = torch.tensor([1.0, 2.0], **f) * (rank + 1)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    _close(t, [1.5, 3.0], "all_reduce avg")

    t = torch.tensor([float(rank), -float(rank)], **f)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    _close(t, [1.0, 0.0], "all_reduce max")

    if device.type != "cpu":  # torch's gloo has no integer AVG on CPU tensors
        t = torch.tensor([5, 7], device=device, dtype=torch.int64) * (rank + 1)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        _check(t.dtype == torch.int64, "integer avg changed dtype")
        _close(t, [7, 10], "all_reduce avg int64 (floor)")

    # A non-contiguous view: staged through a contiguous copy, written back in place.
    base = torch.zeros(3, 4, **f) + rank
    view = base.t()
    dist.all_reduce(view)
    _close(base, torch.ones(3, 4), "all_reduce of a transposed view")

    t = torch.full((4,), float(rank + 10), **f)
    dist.broadcast(t, src=1)
    _close(t, [11.0] * 4, "broadcast from rank 1")

    outs = [torch.empty(2, **f) for _ in range(world)]
    dist.all_gather(outs, torch.full((2,), float(rank), **f))
    for r, o in enumerate(outs):
        _check(o.device == device, "all_gather output moved")
        _close(o, [float(r)] * 2, f"all_gather slot {r}")

    out = torch.empty(2 * world, **f)
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank), **f))
    _close(out, [0.0, 0.0, 1.0, 1.0], "all_gather_into_tensor")

    out = torch.empty(2, **f)
    dist.reduce_scatter(out, [torch.full((2,), float(rank + 10 * j), **f) for j in range(world)])
    _close(out, [20.0 * rank + 1.0] * 2, "reduce_scatter")

    out = torch.empty(2, **f)
    dist.reduce_scatter_tensor(out, torch.arange(4.0, **f) + rank)
    _close(out, [[1.0, 3.0], [5.0, 7.0]][rank], "reduce_scatter_tensor")

    out = torch.empty(2, **f)
    dist.reduce_scatter_tensor(out, torch.arange(4.0, **f) * (rank + 1), op=dist.ReduceOp.AVG)
    _close(out, [[0.0, 1.5], [3.0, 4.5]][rank], "reduce_scatter_tensor avg")

    t = torch.tensor([1.0 + rank], **f)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    _close(t, [3.0], "async all_reduce after wait()")

    dist.barrier()

    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    _check(objs == [{"rank": r} for r in range(world)], f"all_gather_object: {objs}")


def _more_collectives(device: torch.device, rank: int, world: int) -> None:
    """The rest of the c10d surface the docs claim: reduce, gather, scatter,
    all_to_all, send/recv, subgroups."""
    f = dict(device=device, dtype=torch.float32)

    t = torch.tensor([1.0, 2.0], **f) * (rank + 1)
    dist.reduce(t, dst=0)
    if rank == 0:
        _close(t, [3.0, 6.0], "reduce to rank 0")

    gathered = [torch.empty(2, **f) for _ in range(world)] if rank == 1 else None
    dist.gather(torch.full((2,), float(rank), **f), gathered, dst=1)
    if rank == 1:
        _close(torch.stack(gathered), [[0.0, 0.0], [1.0, 1.0]], "gather to rank 1")

    out = torch.empty(3, **f)
    pieces = [torch.full((3,), float(10 + r), **f) for r in range(world)] if rank == 0 else None
    dist.scatter(out, pieces, src=0)
    _close(out, [10.0 + rank] * 3, "scatter from rank 0")

    out = torch.empty(world, **f)
    dist.all_to_all_single(out, torch.tensor([10.0 * rank, 10.0 * rank + 1], **f))
    _close(out, [float(rank), 10.0 + rank], "all_to_all_single")

    outs = [torch.empty(1, **f) for _ in range(world)]
    dist.all_to_all(outs, [torch.tensor([100.0 * rank + j], **f) for j in range(world)])
    _close(torch.cat(outs), [float(rank), 100.0 + rank], "all_to_all")

    if rank == 0:
        dist.send(torch.tensor([42.0, 43.0], **f), dst=1)
    else:
        got = torch.zeros(2, **f)
        dist.recv(got, src=0)
        _close(got, [42.0, 43.0], "send/recv")

    sub = dist.new_group([0, 1])
    t = torch.tensor([float(rank)], **f)
    dist.all_reduce(t, group=sub)
    _close(t, [1.0], "all_reduce on a subgroup")


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _ddp_matches_single_process(device: torch.device, rank: int, world: int) -> None:
    """DDP over `world` ranks, each on its shard, == one process on the full batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps, batch = 3, 8
    gen = torch.Generator().manual_seed(1234)
    data = [(torch.randn(batch, 6, generator=gen), torch.randint(0, 3, (batch,), generator=gen))
            for _ in range(steps)]

    def train(model, shards):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for x, y in shards:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()

    # Different seeds per rank: DDP's initial broadcast must make them equal.
    torch.manual_seed(100 + rank)
    ddp = DDP(_mlp().to(device))
    per = batch // world
    train(ddp, [(x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]) for x, y in data])

    torch.manual_seed(100)  # rank 0's init, which DDP broadcast to everybody
    single = _mlp().to(device)
    train(single, data)
    for (name, p), q in zip(ddp.module.named_parameters(), single.parameters()):
        _check(p.device == device, f"{name} left {device}")
        _check(torch.allclose(p.detach().cpu(), q.detach().cpu(), atol=1e-5, rtol=1e-4),
               f"DDP parameter {name} differs from single-process training by "
               f"{(p.detach().cpu() - q.detach().cpu()).abs().max().item():.3g}")
    # and the ranks agree with each other
    flat = torch.cat([p.detach().reshape(-1) for p in ddp.module.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    _check(torch.equal(gathered[0].cpu(), gathered[1].cpu()), "ranks ended with different parameters")


def _worker(scenario: str, rank: int, world: int, rendezvous: str) -> None:
    from torch_fl import distributed as fld

    if scenario != "acme":
        raise SystemExit(f"unknown scenario {scenario}")
    device = fld.init_distributed("acme", rank, world, init_method=rendezvous, timeout=PG_TIMEOUT)
    _check(device == torch.device("acme", rank), f"rank {rank} got {device}")
    backend = dist.group.WORLD._get_backend(device)
    _check(backend.name() == "acmeccl", f"backend {backend.name()}")
    _check(dist.get_backend() == "cpu:gloo,acme:acmeccl", f"dist.get_backend() = {dist.get_backend()}")
    # One process pair runs everything: starting Python + torch and DDP's import of
    # torch._dynamo cost ~10 s per pair on a loaded 2-core machine.
    _collectives(device, rank, world)
    _more_collectives(device, rank, world)
    # CPU tensors of the same group go through gloo (init_distributed's "cpu:gloo,...").
    _collectives(torch.device("cpu"), rank, world)
    _ddp_matches_single_process(device, rank, world)
    dist.destroy_process_group()
    print(f"rank {rank}: {scenario} ok", flush=True)


# ============================================================ pytest side

def _run_2_procs(scenario: str, rendezvous: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("ACME_SLOW_DEVICE", "200")  # a missing wait on the device gives a wrong answer
    env.setdefault("OMP_NUM_THREADS", "1")  # 2 processes on a small shared machine
    outputs = run_ranks([[sys.executable, str(HERE), scenario, str(r), "2", rendezvous] for r in range(2)],
                        env=env, timeout=PROC_TIMEOUT, label=scenario, cwd=str(ROOT))
    for r, out in enumerate(outputs):
        assert f"rank {r}: {scenario} ok" in out, out


def _acme_available() -> str | None:
    """None if acme can be used, else why not (the skip reason). Only a missing
    package (outside CI) or too few devices skip: an installed acme that fails to
    load or to allocate is a failure (tests/support/required_backend.py)."""
    from required_backend import acme_skip_reason

    reason = acme_skip_reason()
    if reason:
        return reason
    count = torch.accelerator.device_count()
    if count < 2:
        return f"acme has {count} device(s); the test needs 2 (ACME_DEVICE_COUNT)"
    return None


def test_acme_collectives_and_ddp_two_processes():
    """Rank r on acme:r: every collective on acme tensors (and CPU ones), then 2-rank
    DDP == one process on the full batch. TCP store on a free loopback port (the
    CPU test covers the file store)."""
    import pytest

    reason = _acme_available()
    if reason:
        pytest.skip(reason)
    _run_2_procs("acme", f"tcp://127.0.0.1:{free_port()}")


def test_register_comm_backend_rules():
    import pytest

    reason = _acme_available()
    if reason:
        pytest.skip(reason)
    from torch_fl import distributed as fld

    name = fld.register_comm_backend("FLTestRules", "acme")
    assert name == "fltestrules"
    assert fld.register_comm_backend("fltestrules", "acme") == "fltestrules"  # idempotent
    registered = fld.registered_comm_backends()
    assert registered["fltestrules"] == "acme" and registered["acmeccl"] == "acme"
    # c10d got a list of devices, not a string, and a CUSTOM backend type
    assert dist.Backend.backend_capability["fltestrules"] == ["acme"]
    assert dist.Backend.backend_type_map["fltestrules"] == dist.ProcessGroup.BackendType.CUSTOM
    with pytest.raises(ValueError, match="is a torch.distributed backend already"):
        fld.register_comm_backend("gloo", "acme")
    with pytest.raises(ValueError, match="CPU uses torch's gloo"):
        fld.register_comm_backend("whatever", "cpu")
    with pytest.raises(ValueError, match="CPU uses gloo"):
        fld.set_comm_backend("whatever", "cpu")
    assert fld.comm_backend_for("cpu") == "gloo"


def test_single_process_group_in_process():
    """World size 1 in-process: the group object, Work and futures behave as c10d expects."""
    import pytest

    reason = _acme_available()
    if reason:
        pytest.skip(reason)
    import torch_fl_acme._C as native

    dist.init_process_group("acmeccl", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=PG_TIMEOUT)
    try:
        backend = dist.group.WORLD._get_backend(torch.device("acme:0"))
        assert isinstance(backend, native.ProcessGroup) and backend.name() == "acmeccl"
        assert isinstance(backend, torch._C._distributed_c10d.Backend)
        t = torch.arange(4.0, device="acme:0")
        work = dist.all_reduce(t, async_op=True)
        assert work.wait()
        value = work.get_future().wait()
        assert torch.equal(value[0].cpu(), torch.arange(4.0))
        assert torch.equal(t.cpu(), torch.arange(4.0))
        # the collective library's work shows in torch.profiler as a collective on
        # the group's communication stream
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            dist.all_reduce(t)
            torch.acme.synchronize()
        device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
        assert any(e.name == "all_reduce" for e in device_events), [e.name for e in device_events]
        t2 = torch.arange(4.0, device="acme:0") + 1
        dist.all_reduce(t2, op=dist.ReduceOp.AVG)
        assert torch.equal(t2.cpu(), torch.arange(4.0) + 1)
        dist.barrier()
        assert dist.get_backend() == "acmeccl"
        # "acmeccl" alone serves acme tensors, as "nccl" serves CUDA's
        with pytest.raises(RuntimeError, match=r"No backend type associated with device type cpu"):
            dist.all_reduce(torch.ones(2))
        with pytest.raises(RuntimeError, match=r"does not support reduce op"):
            dist.all_reduce(t2, op=dist.ReduceOp.BAND)
    finally:
        dist.destroy_process_group()


def test_acme_descriptor_names_acmeccl():
    import pytest

    reason = _acme_available()
    if reason:
        pytest.skip(reason)
    from torch_fl import distributed as fld

    assert fld.comm_backend_for("acme") == "acmeccl"
    assert fld.comm_backend_for("acme:1") == "acmeccl"
    try:
        assert fld.set_comm_backend("fltestacmealt", "acme") == "fltestacmealt"
        assert fld.comm_backend_for("acme:0") == "fltestacmealt"
        assert dist.get_default_backend_for_device("acme") == "fltestacmealt"
    finally:
        fld.set_comm_backend("acmeccl", "acme")
        fld._chosen.pop("acme", None)  # other tests expect the descriptor's choice
    assert fld.comm_backend_for("acme") == "acmeccl"
    assert dist.get_default_backend_for_device("acme") == "acmeccl"


def test_acme_mixed_backend_string_in_process():
    """'cpu:gloo,acme:acmeccl' also gives a working group (world size 1, in process)."""
    import pytest

    reason = _acme_available()
    if reason:
        pytest.skip(reason)
    dist.init_process_group("cpu:gloo,acme:acmeccl", store=dist.HashStore(), rank=0,
                            world_size=1, timeout=PG_TIMEOUT)
    try:
        for device in ("acme:1", "cpu"):
            t = torch.arange(3.0, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            assert t.device == torch.device(device)
            assert torch.equal(t.cpu(), torch.arange(3.0))
        out = torch.empty(3, device="acme:0")
        dist.all_gather_into_tensor(out, torch.tensor([1.0, 2.0, 3.0], device="acme:0"))
        assert out.cpu().tolist() == [1.0, 2.0, 3.0]
        dist.barrier()
        # PyTorch 2.13 leaves this group without a default backend type; the
        # backend's work-around sets CUSTOM (backend_glue/c10d_default_backend.py)
        assert dist.group.WORLD._get_backend_name() == "custom"
        assert dist.group.WORLD._get_backend(torch.device("acme:0")).name() == "acmeccl"
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
