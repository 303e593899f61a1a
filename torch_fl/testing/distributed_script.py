"""A plain torchrun script, as a user writes one: it never imports torch_fl and never
names the device. `import torch` loads the installed flsdk backend (acme, or a
fresh scaffold), whose c10d backend registered itself; every scenario checks its
results against the same computation on the CPU in this process.

Run it by its path, not as a module (importing torch_fl.testing would import
torch_fl; torch_fl.testing.distributed does this for tests):

    torchrun --nproc-per-node 2 .../torch_fl/testing/distributed_script.py collectives ddp

Options (environment): DIST_INIT = "none" (init_process_group(), the default),
"device_id" (init_process_group(device_id=...)) or a backend string
("acmeccl", "cpu:gloo,acme:acmeccl"); DIST_TIMEOUT seconds (default 60);
DIST_STAGED=1 chooses the device's gloo path through torch_fl (the only import of
it, to test the staged engine on a backend that has a collective library).
Each rank prints "rank <r>: <scenario> ok" per scenario and exits 0.
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile
import warnings
from collections.abc import Iterable
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.nn as nn

# torch 2.13 renames all_gather_into_tensor & co.; users still call the old names
warnings.filterwarnings("ignore", category=FutureWarning)

# This rank's place, set by setup() from torchrun's environment (importing this
# file does nothing: run it by path).
RANK = WORLD = LOCAL_RANK = 0
DEVICE_TYPE = "cpu"
DEVICE = torch.device("cpu")


def setup() -> None:
    global RANK, WORLD, LOCAL_RANK, DEVICE_TYPE, DEVICE
    RANK = int(os.environ["RANK"])
    WORLD = int(os.environ["WORLD_SIZE"])
    LOCAL_RANK = int(os.environ.get("LOCAL_RANK", RANK))
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None:
        raise SystemExit("no accelerator: is the flsdk backend installed and loaded by import torch?")
    DEVICE_TYPE = accelerator.type
    DEVICE = torch.device(DEVICE_TYPE, LOCAL_RANK % torch.accelerator.device_count())


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"rank {RANK}: {what}")


def close(got: torch.Tensor, want, what: str, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    check(got.device == DEVICE or got.device.type == "cpu", f"{what}: result moved to {got.device}")
    want = torch.as_tensor(want, dtype=got.dtype) if not isinstance(want, torch.Tensor) else want
    g, w = got.detach().cpu(), want.detach().cpu().to(got.dtype)
    ok = torch.equal(g, w) if not g.is_floating_point() else torch.allclose(
        g.double(), w.double(), atol=atol, rtol=rtol)
    check(ok, f"{what}: got {g.flatten()[:8].tolist()} want {w.flatten()[:8].tolist()}")


def sum_of(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """sum() of tensors (of every rank: never empty) as a tensor."""
    out = sum(tensors)
    assert isinstance(out, torch.Tensor)
    return out


def init() -> None:
    torch.accelerator.set_device_index(DEVICE.index)
    how = os.environ.get("DIST_INIT", "none")
    timeout = datetime.timedelta(seconds=float(os.environ.get("DIST_TIMEOUT", "60")))
    if os.environ.get("DIST_STAGED") == "1":
        import torch_fl

        torch_fl.set_comm_backend("gloo", DEVICE_TYPE)
    if how == "none":
        dist.init_process_group(timeout=timeout)
    elif how == "device_id":
        dist.init_process_group(device_id=DEVICE, timeout=timeout)
    else:
        dist.init_process_group(how, timeout=timeout)
    world = dist.group.WORLD
    assert world is not None  # init_process_group set it
    backend = world._get_backend(DEVICE)
    print(f"rank {RANK}: {DEVICE} backend {backend.name()} native={getattr(backend, 'native', '?')} "
          f"get_backend={dist.get_backend()}", flush=True)


# ------------------------------------------------------------------ collectives

def scenario_collectives() -> None:
    """Every c10d collective on device tensors, reductions in every dtype the
    device has, in-place results, non-contiguous tensors, async Work."""
    f: dict[str, Any] = dict(device=DEVICE)
    r = RANK
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)

    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                  torch.int32, torch.int16, torch.int8, torch.uint8):
        t = (base + r).to(dtype).to(DEVICE)
        dist.all_reduce(t)
        want = sum_of((base + q).to(dtype).double() for q in range(WORLD)).to(dtype)
        close(t, want, f"all_reduce sum {dtype}", atol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6)
        for op, fold in ((dist.ReduceOp.MAX, torch.maximum), (dist.ReduceOp.MIN, torch.minimum)):
            t = ((base * (1 if r % 2 else -1)) + r).to(dtype).to(DEVICE) if dtype != torch.uint8 \
                else (base + r).to(dtype).to(DEVICE)
            dist.all_reduce(t, op=op)
            rows = [((base * (1 if q % 2 else -1)) + q).to(dtype) if dtype != torch.uint8
                    else (base + q).to(dtype) for q in range(WORLD)]
            want = rows[0]
            for row in rows[1:]:
                want = fold(want, row)
            close(t, want, f"all_reduce {op} {dtype}")
    t = torch.full((3,), 2.0, **f) + r
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    want = torch.ones(3)
    for q in range(WORLD):
        want = want * (2.0 + q)
    close(t, want, "all_reduce product")
    t = torch.tensor([1.0, 2.0], **f) * (r + 1)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    close(t, torch.tensor([1.0, 2.0]) * sum(q + 1 for q in range(WORLD)) / WORLD, "all_reduce avg")
    t = torch.tensor([5, 7, -3], dtype=torch.int64, **f) * (r + 1)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    total = torch.tensor([5, 7, -3]) * sum(q + 1 for q in range(WORLD))
    close(t, torch.div(total, WORLD, rounding_mode="floor"), "all_reduce avg int64 (floor)")
    t = torch.tensor([r == 0, False, True], **f)
    dist.all_reduce(t)  # bool sum: a logical or
    close(t, torch.tensor([True, False, True]), "all_reduce bool")

    # non-contiguous: reduced in place through a contiguous copy
    holder = torch.zeros(3, 4, **f) + r
    dist.all_reduce(holder.t())
    close(holder, torch.full((3, 4), float(sum(range(WORLD)))), "all_reduce of a transposed view")

    t = torch.full((4,), float(r + 10), **f)
    dist.broadcast(t, src=WORLD - 1)
    close(t, [float(WORLD - 1 + 10)] * 4, "broadcast")

    t = torch.tensor([1.0, 2.0], **f) * (r + 1)
    dist.reduce(t, dst=0)
    if r == 0:
        close(t, torch.tensor([1.0, 2.0]) * sum(q + 1 for q in range(WORLD)), "reduce")

    outs = [torch.empty(2, **f) for _ in range(WORLD)]
    dist.all_gather(outs, torch.full((2,), float(r), **f))
    for q, o in enumerate(outs):
        close(o, [float(q)] * 2, f"all_gather slot {q}")
    out = torch.empty(2 * WORLD, dtype=torch.bfloat16, **f)
    dist.all_gather_into_tensor(out, torch.full((2,), float(r), dtype=torch.bfloat16, **f))
    close(out, torch.arange(WORLD).repeat_interleave(2).float(), "all_gather_into_tensor bf16")

    out = torch.empty(2, **f)
    dist.reduce_scatter(out, [torch.full((2,), float(r + 10 * j), **f) for j in range(WORLD)])
    close(out, [sum(q + 10.0 * r for q in range(WORLD))] * 2, "reduce_scatter")
    out = torch.empty(2, **f)
    dist.reduce_scatter_tensor(out, torch.arange(2.0 * WORLD, **f) * (r + 1), op=dist.ReduceOp.AVG)
    mean = sum(q + 1 for q in range(WORLD)) / WORLD
    close(out, torch.arange(2.0 * r, 2.0 * r + 2) * mean, "reduce_scatter_tensor avg")

    # all_to_all_single with uneven splits: rank r sends q + 1 rows to rank q
    in_splits = [q + 1 for q in range(WORLD)]
    out_splits = [r + 1] * WORLD
    x = torch.cat([torch.full((q + 1, 2), 100.0 * r + q) for q in range(WORLD)]).to(DEVICE)
    y = torch.empty(sum(out_splits), 2, **f)
    dist.all_to_all_single(y, x, out_splits, in_splits)
    want = torch.cat([torch.full((r + 1, 2), 100.0 * q + r) for q in range(WORLD)])
    close(y, want, "all_to_all_single with splits")
    outs = [torch.empty(1, **f) for _ in range(WORLD)]
    dist.all_to_all(outs, [torch.tensor([100.0 * r + j], **f) for j in range(WORLD)])
    close(torch.cat(outs), [100.0 * q + r for q in range(WORLD)], "all_to_all lists")

    gathered = [torch.empty(2, **f) for _ in range(WORLD)] if r == 0 else None
    dist.gather(torch.full((2,), float(r), **f), gathered, dst=0)
    if r == 0:
        assert gathered is not None
        close(torch.stack(gathered), torch.arange(WORLD).float()[:, None].repeat(1, 2), "gather")
    out = torch.empty(3, **f)
    pieces = [torch.full((3,), float(10 + q), **f) for q in range(WORLD)] if r == 0 else None
    dist.scatter(out, pieces, src=0)
    close(out, [10.0 + r] * 3, "scatter")

    # point to point: a ring, both directions at once (batch_isend_irecv), then send/recv
    nxt, prv = (r + 1) % WORLD, (r - 1) % WORLD
    got_prev, got_next = torch.zeros(4, **f), torch.zeros(4, **f)
    ops = [dist.P2POp(dist.isend, torch.full((4,), float(r), **f), nxt),
           dist.P2POp(dist.isend, torch.full((4,), float(r) + 0.5, **f), prv),
           dist.P2POp(dist.irecv, got_prev, prv),
           dist.P2POp(dist.irecv, got_next, nxt)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    close(got_prev, [float(prv)] * 4, "batch_isend_irecv from the previous rank")
    close(got_next, [float(nxt) + 0.5] * 4, "batch_isend_irecv from the next rank")
    if r == 0:
        dist.send(torch.tensor([42.0, 43.0], **f), dst=1)
        got = torch.zeros(2, **f)
        dist.recv(got, src=1)
        close(got, [44.0, 45.0], "recv back")
    elif r == 1:
        got = torch.zeros(2, **f)
        dist.recv(got, src=0)
        close(got, [42.0, 43.0], "send/recv")
        dist.send(got + 2, dst=0)

    # asynchronous Work: wait() orders the current stream; the future serves comm hooks
    t = torch.full((1024,), 1.0 + r, **f)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda fut: fut.value()[0] * 2)
    work.wait()
    summed = float(sum(1.0 + q for q in range(WORLD)))
    close(t, [summed] * 1024, "async all_reduce after wait()")
    close(fut.wait(), [2 * summed] * 1024, "future.then of an all_reduce")
    check(work.is_completed() or True, "is_completed callable")

    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": r, "list": [r] * 3})
    check(objs == [{"rank": q, "list": [q] * 3} for q in range(WORLD)], f"all_gather_object {objs}")
    obj = [f"from {r}"]
    dist.broadcast_object_list(obj, src=0)
    check(obj == ["from 0"], f"broadcast_object_list {obj}")

    sub = dist.new_group([0, 1])
    if r in (0, 1):
        t = torch.tensor([float(r)], **f)
        dist.all_reduce(t, group=sub)
        close(t, [1.0], "all_reduce on a subgroup")
    dist.barrier()

    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD
    assert group is not None
    x = torch.arange(4.0, **f) + r
    red = funcol.all_reduce(x, "sum", group)
    gat = funcol.all_gather_tensor(x, 0, group)
    rs = funcol.reduce_scatter_tensor(torch.arange(2.0 * WORLD, **f) + r, "sum", 0, group)
    a2a = funcol.all_to_all_single(torch.arange(float(WORLD), **f) + 10 * r, None, None, group)
    close(funcol.wait_tensor(red), sum(torch.arange(4.0) + q for q in range(WORLD)), "funcol.all_reduce")
    close(gat, torch.cat([torch.arange(4.0) + q for q in range(WORLD)]), "funcol.all_gather_tensor")
    close(rs, sum_of(torch.arange(2.0 * WORLD) + q for q in range(WORLD))[2 * r:2 * r + 2],
          "funcol.reduce_scatter_tensor")
    close(a2a, torch.tensor([10.0 * q + r for q in range(WORLD)]), "funcol.all_to_all_single")


# ------------------------------------------------------------------------ DDP

def _mlp(seed: int, width: int = 16) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 3))


def _batches(steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1234)
    return [(torch.randn(batch, 6, generator=gen), torch.randint(0, 3, (batch,), generator=gen))
            for _ in range(steps)]


def _train(model: nn.Module, data, device, *, accumulate: int = 1) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for i, (x, y) in enumerate(data):
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        if (i + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad()


def _shard(data):
    per = data[0][0].shape[0] // WORLD
    return [(x[RANK * per:(RANK + 1) * per], y[RANK * per:(RANK + 1) * per]) for x, y in data]


def _same_params(a: nn.Module, b: nn.Module, what: str, atol: float = 1e-5) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        close(p.detach(), q.detach(), f"{what}: parameter {name}", atol=atol, rtol=1e-4)


def scenario_ddp() -> None:
    """DDP (several buckets, no_sync, find_unused_parameters, a comm hook,
    static_graph) == one CPU process on the full batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    data = _batches(4, 8)
    reference = _mlp(100)
    _train(reference, data, "cpu")
    for options in ({"bucket_cap_mb": 0.0005}, {"static_graph": True},
                    {"find_unused_parameters": True}):
        # Different inits per rank: DDP's first broadcast must give everybody rank 0's.
        model = DDP(_mlp(100 + RANK).to(DEVICE), **options)
        _train(model, _shard(data), DEVICE)
        _same_params(model.module, reference, f"DDP {options}")

    # no_sync: gradients of two micro-batches accumulate locally, synced on the second
    acc_ref = _mlp(100)
    _train(acc_ref, data, "cpu", accumulate=2)
    model = DDP(_mlp(100).to(DEVICE))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for i, (x, y) in enumerate(_shard(data)):
        ctx = model.no_sync() if i % 2 == 0 else _Null()
        with ctx:
            nn.functional.cross_entropy(model(x.to(DEVICE)), y.to(DEVICE)).backward()
        if i % 2 == 1:
            opt.step()
            opt.zero_grad()
    _same_params(model.module, acc_ref, "DDP no_sync")

    # a comm hook: fp16 compression of the gradients (all_reduce of a cast, its
    # future's then() casts back); torch's bf16 hook insists on CUDA
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model = DDP(_mlp(100).to(DEVICE))
    model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    _train(model, _shard(data), DEVICE)
    _same_params(model.module, reference, "DDP fp16 comm hook", atol=1e-2)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------- FSDP2

class _Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


class _Net(nn.Module):
    def __init__(self, width: int = 16, blocks: int = 3):
        super().__init__()
        self.inp = nn.Linear(6, width)
        self.blocks = nn.ModuleList(_Block(width) for _ in range(blocks))
        self.out = nn.Linear(width, 3)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def _net(seed: int) -> _Net:
    torch.manual_seed(seed)
    return _Net()


def scenario_fsdp2() -> None:
    """fully_shard per block and at the root (reshard_after_forward both ways), bf16
    MixedPrecisionPolicy, == one CPU process; a distributed checkpoint saved, the
    model changed, loaded back."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor

    mesh = init_device_mesh(DEVICE_TYPE, (WORLD,))
    data = _batches(3, 8)
    reference = _net(11)
    _train(reference, data, "cpu")
    for reshard, mp, atol in ((True, None, 1e-5), (False, None, 1e-5),
                              (True, MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                          reduce_dtype=torch.float32), 5e-2)):
        model = _net(11).to(DEVICE)
        kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard}
        if mp is not None:
            kwargs["mp_policy"] = mp
        for block in model.blocks:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        _train(model, _shard(data), DEVICE)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            full = cast(DTensor, p).full_tensor()  # fully_shard made every parameter a DTensor
            close(full, q, f"FSDP2 reshard={reshard} mp={mp is not None}: {name}", atol=atol, rtol=1e-2 if mp else 1e-4)

    import torch.distributed.checkpoint as dcp

    directory = [os.environ.get("DIST_TMP") or tempfile.mkdtemp()]
    dist.broadcast_object_list(directory, src=0)  # one folder for every rank
    path = os.path.join(directory[0], "dcp")
    state = {"model": model.state_dict()}
    dcp.save(state, checkpoint_id=path)
    saved = {k: v.full_tensor().cpu().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    loaded = {"model": model.state_dict()}
    dcp.load(loaded, checkpoint_id=path)
    for k, v in model.state_dict().items():
        close(v.full_tensor(), saved[k], f"distributed checkpoint round trip: {k}")


# ------------------------------------------------------------ DTensor and TP

def scenario_tp() -> None:
    """DeviceMesh 1-D (2-D with 4 ranks), DTensor distribute/redistribute/ops, tensor
    parallel (Colwise, Rowwise, SequenceParallel) == the same module on the CPU."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module

    mesh = init_device_mesh(DEVICE_TYPE, (WORLD,))
    torch.manual_seed(3)
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    da = distribute_tensor(a.to(DEVICE), mesh, [Shard(0)])
    db = distribute_tensor(b.to(DEVICE), mesh, [Replicate()])
    close(da.to_local(), a.chunk(WORLD)[RANK], "DTensor Shard(0) local piece")
    # DTensor ops return DTensors; torch's stubs type them as Tensor
    prod = cast(DTensor, da @ db).redistribute(mesh, [Replicate()]).to_local()
    close(prod, a @ b, "DTensor matmul then Replicate", atol=1e-5)
    dc = distribute_tensor(a.to(DEVICE), mesh, [Shard(1)])
    close(dc.redistribute(mesh, [Shard(0)]).to_local(), a.chunk(WORLD)[RANK], "Shard(1) -> Shard(0)")
    close(cast(DTensor, dc.sum()).full_tensor(), a.sum(), "DTensor sum", atol=1e-4)

    if WORLD == 4:
        mesh2 = init_device_mesh(DEVICE_TYPE, (2, 2), mesh_dim_names=("dp", "tp"))
        d2 = distribute_tensor(a.to(DEVICE), mesh2, [Shard(0), Shard(1)])
        close(d2.full_tensor(), a, "2-D mesh DTensor round trip")
        t = torch.tensor([float(RANK)], device=DEVICE)
        dist.all_reduce(t, group=mesh2.get_group("tp"))
        row = RANK // 2
        close(t, [float(2 * row + 2 * row + 1)], "all_reduce over the tp dimension")

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(8)
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)

        def forward(self, x):
            return self.down(torch.relu(self.up(self.norm(x))))

    torch.manual_seed(5)
    reference = Mlp()
    x = torch.randn(2, 2 * WORLD, 8)  # (batch, sequence, hidden)
    ref_out = reference(x)
    ref_out.sum().backward()
    model: nn.Module = Mlp()
    model.load_state_dict(reference.state_dict())
    # Megatron-style sequence parallel: each rank holds a slice of the sequence
    # around the tensor-parallel pair (all-gather in, reduce-scatter out).
    model = parallelize_module(model.to(DEVICE), mesh, {
        "norm": SequenceParallel(),
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1)),
    })
    local_x = x.chunk(WORLD, dim=1)[RANK].to(DEVICE)
    out = model(local_x)
    out = out.to_local() if hasattr(out, "to_local") else out
    close(out, ref_out.chunk(WORLD, dim=1)[RANK], "tensor parallel forward (this rank's sequence)",
          atol=1e-5)
    out.sum().backward()
    for name in ("up", "down"):
        grad = getattr(model, name).weight.grad
        close(grad.full_tensor(), getattr(reference, name).weight.grad,
              f"tensor parallel gradient of {name}.weight", atol=1e-5)


# ---------------------------------------------------------------- pipelining

def scenario_pipeline() -> None:
    """A two-stage GPipe schedule (send/recv between the stages) == one CPU process."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    check(WORLD == 2, "the pipeline scenario runs on 2 ranks")
    import copy

    torch.manual_seed(9)
    stages = [nn.Sequential(nn.Linear(6, 12), nn.ReLU()), nn.Sequential(nn.Linear(12, 3))]
    x = torch.randn(8, 6)
    target = torch.randn(8, 3)
    ref = copy.deepcopy(nn.Sequential(stages[0], stages[1]))
    loss_fn = nn.MSELoss(reduction="sum")
    loss_fn(ref(x), target).backward()

    module = copy.deepcopy(stages[RANK]).to(DEVICE)
    stage = PipelineStage(module, RANK, WORLD, DEVICE)
    # scale_grads=False: the gradients of the 4 micro-batch losses add up to the full one's
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss_fn, scale_grads=False)
    if RANK == 0:
        schedule.step(x.to(DEVICE))
    else:
        losses: list[torch.Tensor] = []
        schedule.step(target=target.to(DEVICE), losses=losses)
        ref_loss = loss_fn(ref(x), target).item()
        close(torch.stack(losses).sum(), torch.tensor(ref_loss), "pipeline loss", atol=1e-4)
    for p, q in zip(module.parameters(), ref[RANK].parameters()):
        assert p.grad is not None, "pipeline stage gradient missing"
        close(p.grad, q.grad, "pipeline stage gradient", atol=1e-4)


# ------------------------------------------------------------- torch.compile

def scenario_compile() -> None:
    """Functional collectives inside a compiled function (default torch.compile:
    Inductor puts them in its graph as extern kernels and waits): == eager."""
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD

    def f(x):
        y = torch.relu(x) * 2
        z = funcol.all_reduce(y, "sum", group)
        g = funcol.all_gather_tensor(z + 1, 0, group)
        return funcol.reduce_scatter_tensor(g * 3, "sum", 0, group) - 1

    x = torch.arange(8.0 * WORLD, device=DEVICE) - 3 + RANK
    close(torch.compile(f)(x), f(x), "compiled functional collectives == eager", atol=1e-5)


# --------------------------------------------------------------- failures

def _expect_failure(what: str, exit_code_ok: int = 0) -> None:
    """This rank's next collectives must raise (naming the collective and the
    group) within the group's timeout, never hang; then the process ends (the
    group is broken: no destroy_process_group)."""
    import time

    t = torch.ones(1 << 16, device=DEVICE)
    start = time.monotonic()
    try:
        for _ in range(3):
            dist.all_reduce(t)
        t.cpu()
        torch.accelerator.synchronize()
    except Exception as exc:  # noqa: BLE001 - any error type, its message is checked
        elapsed = time.monotonic() - start
        message = str(exc)
        print(f"rank {RANK}: error after {elapsed:.1f} s: {message[:400]}", flush=True)
        check("all_reduce" in message, f"the error names the collective: {message}")
        check("group" in message, f"the error names the group: {message}")
        limit = float(os.environ.get("DIST_TIMEOUT", "60")) + 10
        check(elapsed < limit, f"the error took {elapsed:.1f} s (timeout {limit - 10} s)")
        print(f"rank {RANK}: {what} ok", flush=True)
        sys.stdout.flush()
        os._exit(exit_code_ok)
    raise AssertionError(f"rank {RANK}: no error in the {what} scenario")


def scenario_kill() -> None:
    """The last rank exits in the middle of the job; the others must get an error
    naming the collective and the group within the timeout, never hang."""
    t = torch.ones(1 << 16, device=DEVICE)
    dist.all_reduce(t)
    torch.accelerator.synchronize()
    if RANK == WORLD - 1:
        os._exit(3)
    _expect_failure("kill")


def scenario_stall() -> None:
    """The last rank stops calling collectives (alive, busy elsewhere) for longer
    than the group's timeout: the others' watchdogs fail the collective they wait
    in, naming it, the group and the time, and abort the group."""
    import time

    t = torch.ones(1 << 16, device=DEVICE)
    dist.all_reduce(t)
    torch.accelerator.synchronize()
    if RANK == WORLD - 1:
        time.sleep(float(os.environ.get("DIST_TIMEOUT", "60")) + 3)
        os._exit(3)
    _expect_failure("stall")
def scenario_wrong_device() -> None:
    """A script that never sets the rank's device: its tensors and its first
    collective run on the rank's device, but object collectives (all_gather_object)
    use the current device, 0 on every rank. The rank whose devices differ must get
    an error naming both at once, not wait forever for a communicator no other rank
    makes; the process ends there (a rank on device 0 has nothing to check)."""
    t = torch.ones(4, device=DEVICE)
    dist.all_reduce(t)
    torch.accelerator.synchronize()
    torch.accelerator.set_device_index(0)  # what a script that never set it has
    if DEVICE.index != 0:
        gathered: list = [None] * WORLD
        try:
            dist.all_gather_object(gathered, {"rank": RANK})
        except Exception as exc:  # noqa: BLE001 - any error type, its message is checked
            message = str(exc)
            print(f"rank {RANK}: error: {message[:600]}", flush=True)
            check(str(DEVICE) in message and f"{DEVICE_TYPE}:0" in message,
                  f"the error names both devices: {message}")
            check("set_device_index" in message, f"the error says how to fix it: {message}")
        else:
            raise AssertionError(f"rank {RANK}: all_gather_object on a second device did not raise")
    print(f"rank {RANK}: wrong_device ok", flush=True)
    sys.stdout.flush()
    os._exit(0)


SCENARIOS = {
    "collectives": scenario_collectives,
    "ddp": scenario_ddp,
    "fsdp2": scenario_fsdp2,
    "tp": scenario_tp,
    "pipeline": scenario_pipeline,
    "compile": scenario_compile,
    "kill": scenario_kill,
    "stall": scenario_stall,
    "wrong_device": scenario_wrong_device,
}


def main(names: list[str]) -> None:
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; choose from {sorted(SCENARIOS)}")
    setup()
    init()
    for name in names:
        SCENARIOS[name]()
        print(f"rank {RANK}: {name} ok", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:] or ["collectives"])
