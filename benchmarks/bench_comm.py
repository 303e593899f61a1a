"""Collectives on acme against gloo on the CPU, and what they cost a training step.

    python benchmarks/bench_comm.py [--quick | --smoke] [--only bandwidth scaling]
                                    [--world 2] [--json out.json]

bandwidth: bus bandwidth (NCCL's definition: all_reduce 2(n-1)/n * bytes / time,
all_gather and reduce_scatter (n-1)/n * bytes / time, bytes = the larger buffer) of
all_reduce, all_gather_into_tensor and reduce_scatter_tensor from 4 KiB to 256 MiB
(--quick: to 32 MiB), on the same machine in the same run, for:
  * native: acme's device group over its collective library (acmeccl);
  * staged: the same group staged through pinned host memory over gloo (what a
    backend without a collective library gets; torch_fl.set_comm_backend("gloo"));
  * gloo-cpu: torch's gloo on CPU tensors, the baseline;
and the host's single-thread memcpy bandwidth, the limit of this machine.

scaling: a DDP ResNet-18 step and an FSDP2 GPT step, each rank with the same
batch, on `world` ranks against 1 rank; the extra time of the distributed step
against the time of its communication alone gives how much of it the step hides.

Ranks are processes started by this script (a FileStore rendezvous). Timings never
fail anything; the targets are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KIB, MIB = 1 << 10, 1 << 20
SIZES = {"full": [4 * KIB * 4 ** i for i in range(9)],  # 4 KiB .. 256 MiB
         "quick": [4 * KIB * 4 ** i for i in range(7)] + [32 * MIB],
         "smoke": [4 * KIB, 1 * MIB]}
OPS = ("all_reduce", "all_gather", "reduce_scatter")
MODES = ("native", "staged", "gloo-cpu")


# ----------------------------------------------------------------- rank side

def _bus_factor(op: str, world: int) -> float:
    return (2 * (world - 1) / world) if op == "all_reduce" else ((world - 1) / world)


def rank_bandwidth(rank: int, world: int, store_path: str, mode: str, sizes: list[int],
                   min_time: float) -> list[dict]:
    import datetime

    import torch
    import torch.distributed as dist

    if mode == "gloo-cpu":
        device = torch.device("cpu")
        dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=120))
    else:
        import torch_fl

        if mode == "staged":
            torch_fl.set_comm_backend("gloo", "acme")
        device = torch_fl.init_distributed("acme", rank, world,
                                           store=dist.FileStore(store_path, world),
                                           timeout=datetime.timedelta(seconds=120))

    def sync():
        if device.type != "cpu":
            torch.accelerator.synchronize(device.index)

    rows = []
    for size in sizes:
        n = max(world, size // 4 // world * world)  # float32 elements, divisible by world
        big = torch.ones(n, device=device)
        small = torch.empty(n // world, device=device)
        calls = {
            "all_reduce": lambda: dist.all_reduce(big),
            "all_gather": lambda: dist.all_gather_into_tensor(big, small),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(small, big),
        }
        for op, call in calls.items():
            call()  # warm-up (and the communicator's creation)
            sync()
            # Every rank runs the same count: rank 0 decides from its first round.
            iters = torch.tensor([1])
            start = time.perf_counter()
            call()
            sync()
            once = time.perf_counter() - start
            iters[0] = max(1, min(200, int(min_time / max(once, 1e-6))))
            dist.broadcast(iters, src=0)  # a CPU tensor: gloo (init_distributed's "cpu:gloo,...")
            dist.barrier()
            start = time.perf_counter()
            for _ in range(int(iters[0])):
                call()
            sync()
            seconds = (time.perf_counter() - start) / int(iters[0])
            rows.append({"mode": mode, "op": op, "bytes": n * 4, "seconds": seconds,
                         "bus_gbps": _bus_factor(op, world) * n * 4 / seconds / 1e9})
    dist.destroy_process_group()
    return rows


def rank_scaling(rank: int, world: int, store_path: str, steps: int) -> dict:
    """DDP ResNet-18 and FSDP2 GPT steps on this rank's batch; also the time of
    their communication alone."""
    import datetime

    import torch
    import torch.distributed as dist

    import torch_fl
    from torch_fl.models import GPT, GPTConfig, resnet18

    device = torch_fl.init_distributed("acme", rank, world, store=dist.FileStore(store_path, world),
                                       timeout=datetime.timedelta(seconds=300))

    def sync():
        torch.accelerator.synchronize(device.index)

    def timed(step, n):
        step()
        sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        return (time.perf_counter() - start) / n

    out = {}
    torch.manual_seed(0)
    resnet = resnet18(num_classes=10).to(device)
    images = torch.randn(8, 3, 32, 32).to(device)
    labels = torch.randint(0, 10, (8,)).to(device)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(resnet)
    else:
        model = resnet
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def resnet_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        opt.step()

    out["ddp_resnet18"] = timed(resnet_step, steps)
    if world > 1:
        # DDP's communication alone: an all_reduce of every gradient, in buckets as DDP
        # sends them (25 MiB; ResNet-18's 11M parameters are 2 buckets).
        grads = [p.grad for p in resnet.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        buckets = flat.split(25 * MIB // 4)
        out["ddp_resnet18_comm"] = timed(lambda: [dist.all_reduce(b) for b in buckets], steps)

    cfg = GPTConfig()
    gpt = GPT(cfg).to(device)
    tokens = torch.randint(0, cfg.vocab_size, (8, cfg.block_size + 1)).to(device)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("acme", (world,))
        for block in gpt.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(gpt, mesh=mesh)
    opt_g = torch.optim.AdamW(gpt.parameters(), lr=1e-3)

    def gpt_step():
        opt_g.zero_grad()
        _, loss = gpt(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt_g.step()

    out["fsdp2_gpt"] = timed(gpt_step, steps)
    if world > 1:
        # FSDP2's communication alone: per block an all-gather of its parameters in
        # forward and again in backward, and a reduce-scatter of its gradients.
        sizes = [sum(p.numel() for p in b.parameters()) for b in [*gpt.blocks, gpt]]
        shards = [torch.empty(-(-s // world), device=device) for s in sizes]
        fulls = [torch.empty(sh.numel() * world, device=device) for sh in shards]

        def fsdp_comm():
            for full, shard in zip(fulls, shards):
                dist.all_gather_into_tensor(full, shard)
                dist.all_gather_into_tensor(full, shard)
                dist.reduce_scatter_tensor(shard, full)

        out["fsdp2_gpt_comm"] = timed(fsdp_comm, steps)
    dist.destroy_process_group()
    return out


# --------------------------------------------------------------- launcher side

def _launch(world: int, args: list[str], timeout: float) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="bench_comm_") as tmp:
        store = os.path.join(tmp, "store")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world", str(world),
                                   "--store", store, *args], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(world)]
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=timeout))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
    for r, (p, (_out, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise RuntimeError(f"rank {r} failed (exit {p.returncode}):\n{err[-3000:]}")
    return [o for o, _ in outs]


def _result(stdout: str):
    return json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))[7:])


def memcpy_gbps(size: int = 256 * MIB, repeats: int = 5) -> float:
    """The host's single-thread copy bandwidth (bytes copied per second)."""
    import torch

    torch.set_num_threads(1)
    src = torch.ones(size // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return size / best / 1e9


def run_bandwidth(world: int, length: str) -> dict:
    sizes = SIZES[length]
    min_time = {"full": 0.3, "quick": 0.1, "smoke": 0.0}[length]
    rows = []
    for mode in MODES:
        out = _launch(world, ["bandwidth", "--mode", mode, "--sizes", json.dumps(sizes),
                              "--min-time", str(min_time)], timeout=1800)
        rows += _result(out[0])
    return {"memcpy_gbps": memcpy_gbps(), "rows": rows}


def run_scaling(world: int, length: str) -> dict:
    steps = {"full": 10, "quick": 4, "smoke": 1}[length]
    one = _result(_launch(1, ["scaling", "--steps", str(steps)], timeout=1800)[0])
    many = _result(_launch(world, ["scaling", "--steps", str(steps)], timeout=1800)[0])
    return {"world": world, "one_rank": one, "ranks": many}


def _fmt_bytes(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def report(bandwidth: dict | None, scaling: dict | None) -> str:
    lines = []
    if bandwidth:
        rows = bandwidth["rows"]
        memcpy = bandwidth["memcpy_gbps"]
        lines.append(f"host memcpy, 1 thread: {memcpy:.2f} GB/s\n")
        for op in OPS:
            lines.append(f"{op}: bus bandwidth GB/s")
            lines.append("| size | " + " | ".join(MODES) + " | native / gloo-cpu | staged / gloo-cpu |")
            lines.append("| --- " * (len(MODES) + 3) + "|")
            for size in sorted({r["bytes"] for r in rows if r["op"] == op}):
                got = {r["mode"]: r["bus_gbps"] for r in rows if r["op"] == op and r["bytes"] == size}
                base = got.get("gloo-cpu") or float("nan")
                lines.append(f"| {_fmt_bytes(size)} | " + " | ".join(f"{got.get(m, float('nan')):.3g}"
                                                                    for m in MODES)
                             + f" | {got.get('native', 0) / base:.2f}× | {got.get('staged', 0) / base:.2f}× |")
            lines.append("")
        ar = [r for r in rows if r["op"] == "all_reduce" and r["bytes"] == 32 * MIB]
        if ar:
            got = {r["mode"]: r["bus_gbps"] for r in ar}
            lines.append(f"all_reduce 32 MiB: native {got['native']:.2f} GB/s = "
                         f"{got['native'] / got['gloo-cpu']:.2f}× gloo-cpu (target ≥ 1.5×), "
                         f"{got['native'] / memcpy:.0%} of memcpy (target ≥ 40%); staged "
                         f"{got['staged'] / got['gloo-cpu']:.2f}× gloo-cpu (target ≥ 1.0×)\n")
    if scaling:
        one, many, world = scaling["one_rank"], scaling["ranks"], scaling["world"]
        lines.append(f"training steps, 1 rank vs {world} ranks (same batch per rank):")
        lines.append("| step | 1 rank | N ranks | N / 1 | its communication alone | hidden |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for name in ("ddp_resnet18", "fsdp2_gpt"):
            t1, tn, comm = one[name], many[name], many.get(name + "_comm", 0.0)
            hidden = 1 - max(0.0, tn - t1) / comm if comm else float("nan")
            lines.append(f"| {name} | {t1 * 1e3:.1f} ms | {tn * 1e3:.1f} ms | {tn / t1:.2f}× | "
                         f"{comm * 1e3:.1f} ms | {max(0.0, hidden):.0%} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--quick", action="store_true", help="sizes to 32 MiB, short rounds")
    length.add_argument("--smoke", action="store_true", help="every part once (numbers meaningless)")
    parser.add_argument("--only", nargs="+", choices=["bandwidth", "scaling"])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--json")
    # rank side (the script starts itself once per rank)
    parser.add_argument("part", nargs="?", choices=["bandwidth", "scaling"], help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    parser.add_argument("--min-time", type=float, default=0.3, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=10, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank is not None:
        if args.part == "bandwidth":
            result = rank_bandwidth(args.rank, args.world, args.store, args.mode,
                                    json.loads(args.sizes), args.min_time)
        else:
            result = rank_scaling(args.rank, args.world, args.store, args.steps)
        if args.rank == 0:
            print("RESULT " + json.dumps(result), flush=True)
        return 0
    which = "smoke" if args.smoke else "quick" if args.quick else "full"
    parts = args.only or ["bandwidth", "scaling"]
    bandwidth = run_bandwidth(args.world, which) if "bandwidth" in parts else None
    scaling = run_scaling(args.world, which) if "scaling" in parts else None
    print(report(bandwidth, scaling))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"bandwidth": bandwidth, "scaling": scaling}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
