"""acme vs CPU, measured in the same run. Prints tables and writes JSON.

    python benchmarks/bench_acme.py [--quick | --smoke] [--only GROUP ...] [--json out.json]
                                    [--device NAME]

--device measures another flsdk backend's device against the CPU the same way
(the OpenCL example: --device ocl); the JSON keeps the key `acme_s` for the
device's time and names the device.

Groups: tiny (8-element ops), op (1M add, matmul, conv), pointwise (every
pointwise op at 1M float32 elements), train (ResNet-18 / GPT steps), models
(a training step of each of the real-model set: torchvision, timm,
transformers, diffusers and torch.nn architectures nobody here wrote; zoo,
run only when named: every architecture of that suite) -- all at
one intra-op thread, `torch.set_num_threads(1)`, which also makes acme use one
compute unit -- train_mt (the train steps at the default thread count:
CPU's intra-op threads against acme's compute units), and host (the asynchronous
picture: the time until an op's call returns to the caller, which on acme is
the host part only -- checks, output allocation, the launch -- while the device
works on its stream; on the CPU it is the whole op).

Every run also counts the host's waits for the device per train step
(`torch_fl.count_host_syncs`): an asynchronous backend waits only where a result
must reach the host.

Targets (ratios device/CPU, lower is better) are documented in
benchmarks/README.md; this script reports what is reached and never fails on
a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import measure_interleaved  # noqa: E402

TARGETS = {"tiny": 1.15, "train": 1.5, "pointwise": 1.5, "train_mt": 1.2, "host": 1.2, "models": 1.5,
           "rnn": 1.2, "kernels": 1.0}
N = 1 << 20


def tiny_ops(device):
    a = torch.randn(8, device=device)
    b = torch.randn(8, device=device)
    return {
        "add (8 elems)": lambda: torch.add(a, b),
        "mul (8 elems)": lambda: torch.mul(a, b),
        "view": lambda: a.view(2, 4),
        "relu (8 elems)": lambda: torch.relu(a),
    }


def big_ops(device):
    x = torch.randn(1 << 20, device=device)
    y = torch.randn(1 << 20, device=device)
    m1 = torch.randn(1024, 1024, device=device)
    m2 = torch.randn(1024, 1024, device=device)
    img = torch.randn(8, 64, 32, 32, device=device)
    w = torch.randn(64, 64, 3, 3, device=device)
    return {
        "add 1M elems": lambda: torch.add(x, y),
        "matmul 1024x1024": lambda: torch.mm(m1, m2),
        "conv2d 8x64x32x32, 3x3x64": lambda: torch.nn.functional.conv2d(img, w, padding=1),
    }


def pointwise_ops(device):
    """Every pointwise op acme implements that models use, on 1M float32
    elements, with inputs inside each op's domain."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, generator=g).to(device)
    y = torch.randn(N, generator=g).to(device)
    pos = (torch.rand(N, generator=g) * 10 + 0.01).to(device)
    unit = (torch.rand(N, generator=g) * 1.98 - 0.99).to(device)
    big = (torch.rand(N, generator=g) * 10 + 1).to(device)
    F = torch.nn.functional
    ops = {}
    for name in ("abs", "neg", "exp", "exp2", "expm1", "sin", "cos", "tan", "atan", "sinh", "cosh",
                 "tanh", "asinh", "erf", "erfc", "sigmoid", "floor", "round", "trunc", "sign"):
        ops[name] = (lambda f: lambda: f(x))(getattr(torch, name))
    for name in ("sqrt", "rsqrt", "log", "log2", "log10", "log1p", "reciprocal", "lgamma"):
        ops[name] = (lambda f: lambda: f(pos))(getattr(torch, name))
    for name in ("asin", "acos", "atanh", "erfinv"):
        ops[name] = (lambda f: lambda: f(unit))(getattr(torch, name))
    ops["acosh"] = lambda: torch.acosh(big)
    ops["relu"] = lambda: torch.relu(x)
    ops["gelu"] = lambda: F.gelu(x)
    ops["gelu (tanh)"] = lambda: F.gelu(x, approximate="tanh")
    ops["silu"] = lambda: F.silu(x)
    ops["softplus"] = lambda: F.softplus(x)
    ops["leaky_relu"] = lambda: F.leaky_relu(x)
    ops["add"] = lambda: torch.add(x, y)
    ops["sub"] = lambda: torch.sub(x, y)
    ops["mul"] = lambda: torch.mul(x, y)
    ops["div"] = lambda: torch.div(x, y)
    ops["maximum"] = lambda: torch.maximum(x, y)
    ops["pow (x, 2.5)"] = lambda: torch.pow(pos, 2.5)
    ops["atan2"] = lambda: torch.atan2(x, y)
    ops["mul_ (in place, scalar)"] = lambda: x.mul_(1.0)
    return {f"{k}": v for k, v in ops.items()}


def kernel_ops(device):
    """ViT-B/16-sized kernels (issue 39), what transformer train steps spend their
    time in: 4 images of 197 tokens of 768, 12 heads of 64, an MLP of 3072. Each
    forward, and the backward of the ones autograd calls a kernel of its own for."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)

    def rand(*shape, grad=False):
        t = torch.randn(*shape, generator=g).to(device)
        return t.requires_grad_() if grad else t

    x, w, b = rand(788, 768, grad=True), rand(3072, 768), rand(3072)
    a, m = rand(788, 768), rand(768, 3072)
    ln_x, ln_w, ln_b = rand(788, 768, grad=True), rand(768, grad=True), rand(768, grad=True)
    att = rand(48, 197, 197, grad=True)
    q, k, v = (rand(4, 12, 197, 64, grad=True) for _ in range(3))
    grads = {"linear": rand(788, 3072), "ln": rand(788, 768), "softmax": rand(48, 197, 197),
             "sdpa": rand(4, 12, 197, 64)}
    ln_out = F.layer_norm(ln_x, (768,), ln_w, ln_b)
    sm_out = att.softmax(-1)
    sdpa_out = F.scaled_dot_product_attention(q, k, v)
    lin_out = F.linear(x, w, b)

    return {
        "linear 788x768 -> 3072": lambda: F.linear(x.detach(), w, b),
        "mm 788x768 @ 768x3072": lambda: torch.mm(a, m),
        "bmm 48x197x64 @ 48x64x197": lambda: torch.bmm(q.detach().reshape(48, 197, 64),
                                                       k.detach().reshape(48, 197, 64).transpose(1, 2)),
        "layer_norm 788x768": lambda: F.layer_norm(ln_x.detach(), (768,), ln_w.detach(), ln_b.detach()),
        "softmax 48x197x197": lambda: att.detach().softmax(-1),
        "sdpa 4x12x197x64": lambda: F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach()),
        "linear backward": lambda: torch.autograd.grad(lin_out, [x], grads["linear"], retain_graph=True),
        "layer_norm backward": lambda: torch.autograd.grad(ln_out, [ln_x, ln_w, ln_b], grads["ln"],
                                                           retain_graph=True),
        "softmax backward": lambda: torch.autograd.grad(sm_out, [att], grads["softmax"], retain_graph=True),
        "sdpa backward": lambda: torch.autograd.grad(sdpa_out, [q, k, v], grads["sdpa"], retain_graph=True),
    }


def train_steps(device):
    from torch_fl.models import GPT, GPTConfig, resnet18

    torch.manual_seed(0)
    resnet = resnet18(num_classes=10).to(device)
    opt_r = torch.optim.SGD(resnet.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(8, 3, 32, 32).to(device)
    labels = torch.randint(0, 10, (8,)).to(device)

    def resnet_step():
        opt_r.zero_grad()
        loss = torch.nn.functional.cross_entropy(resnet(images), labels)
        loss.backward()
        opt_r.step()

    gpt = GPT(GPTConfig()).to(device)
    opt_g = torch.optim.AdamW(gpt.parameters(), lr=1e-3)
    tokens = torch.randint(0, GPTConfig().vocab_size, (8, GPTConfig().block_size + 1)).to(device)

    def gpt_step():
        opt_g.zero_grad()
        _, loss = gpt(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt_g.step()

    return {"ResNet-18 train step (8x3x32x32, SGD)": resnet_step,
            "GPT train step (8x32 tokens, AdamW)": gpt_step}


# The real-model set: one architecture per family of the real-model suite
# (examples/acme_backend/tests/real_model_zoo.py: built from configs with random
# weights, small inputs), the families a user's model most likely resembles.
REAL_MODELS = ("tv-resnet18", "tv-mobilenet_v3_small", "timm-deit_tiny", "hf-gpt2", "hf-bert",
               "hf-llama", "nn-lstm", "diffusers-unet2d")
ZOO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples", "acme_backend",
                       "tests")


def real_model_steps(device, names=REAL_MODELS):
    """One SGD-momentum training step of each model of `names` (the real-model
    set) on `device` (dropout off, as in the real-model suite). A model whose
    package is not installed is left out, and said so."""
    if ZOO_DIR not in sys.path:
        sys.path.insert(0, ZOO_DIR)
    import real_model_zoo as zoo

    steps = {}
    for name in names:
        case = zoo.CASES[name]
        try:
            model = zoo.make_model(case).to(device)
        except ImportError as e:
            print(f"  {name}: left out ({e})", file=sys.stderr)
            continue
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        batch = zoo.batch_to(case.batch(), device)

        def step(model=model, opt=opt, batch=batch, loss=case.loss):
            opt.zero_grad()
            loss(model, batch).backward()
            opt.step()

        steps[f"{name} train step"] = step
    return steps


def zoo_steps(device):
    """The real-model speed set (issue 39): a training step of every architecture
    of the real-model suite (real_model_zoo.CASES: torchvision, timm, transformers,
    diffusers and torch.nn, in float32). Run only when named (`--only zoo`): it
    takes minutes."""
    if ZOO_DIR not in sys.path:
        sys.path.insert(0, ZOO_DIR)
    import real_model_zoo as zoo

    return real_model_steps(device, tuple(zoo.CASES))


def rnn_steps(device):
    """Recurrent train steps (issue 39): the real-model set's RNN classifiers
    (embedding, 2-layer (bi)LSTM / GRU of 32, 9 steps, batch 2) and a larger
    LSTM layer stack (64 steps, batch 16, 2 layers of 128), SGD."""
    steps = real_model_steps(device, ("nn-lstm", "nn-bilstm", "nn-gru"))
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True).to(device)
    opt = torch.optim.SGD(lstm.parameters(), lr=0.01)
    x = torch.randn(16, 64, 64).to(device)

    def lstm_step():
        opt.zero_grad()
        out, _ = lstm(x)
        out.square().mean().backward()
        opt.step()

    steps["LSTM 2x128, 64 steps, batch 16, train step"] = lstm_step
    return steps


def host_ops(device):
    """Ops whose host time is measured (see host_time)."""
    ops = tiny_ops(device)
    x = torch.randn(N, device=device)
    y = torch.randn(N, device=device)
    return {"add (8 elems)": ops["add (8 elems)"], "relu (8 elems)": ops["relu (8 elems)"],
            "add 1M elems": lambda: torch.add(x, y), "exp 1M elems": lambda: torch.exp(x)}


def host_time(fn, device: str, calls: int, repeats: int) -> float:
    """Median seconds until `calls` calls of `fn` return, per call, without waiting
    for the device in between (it is waited for after each round, outside the
    timing). On the CPU this is the op's whole time."""
    import statistics
    import time

    from _timing import sync

    fn()
    sync(device)
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls)
        sync(device)
    return statistics.median(rounds)


def host_times_interleaved(cpu_fn, dev_fn, device: str, calls: int, repeats: int) -> tuple[float, float]:
    """host_time of the CPU's and the device's call, their rounds taken in turn:
    rounds of a few hundred microsecond calls are short, and the machine's speed
    drifts between them (measured one after the other, a quiet machine gave host
    ratios from 0.84x to 1.67x for the same build)."""
    import statistics

    cpu_rounds, dev_rounds = [], []
    for _ in range(repeats):
        cpu_rounds.append(host_time(cpu_fn, "cpu", calls, 1))
        dev_rounds.append(host_time(dev_fn, device, calls, 1))
    return statistics.median(cpu_rounds), statistics.median(dev_rounds)


def host_syncs_per_step(device: str, steps: int, models: bool) -> list[dict]:
    """Host waits for the device in one train step, by reason (the GPT and ResNet
    steps call no .item(): every wait counted there is one the backend chose; a
    real model's own code may ask for a value, e.g. a loss that reads a tensor)."""
    import torch_fl

    rows = []
    workloads = dict(train_steps(device))
    if models:
        workloads.update(real_model_steps(device))
    for name, step in workloads.items():
        step()  # warm-up: first-touch allocations are not a step's cost
        torch.accelerator.synchronize()
        with torch_fl.count_host_syncs() as waits:
            for _ in range(steps):
                step()
        per_step = {k: v / steps for k, v in waits.items() if v}
        rows.append({"name": name, "syncs_per_step": sum(per_step.values()), "by_reason": per_step})
    return rows


GROUPS = {  # name: (workloads, min seconds per round (full, quick), threads: 1 or default)
    "tiny": (tiny_ops, (0.3, 0.05), 1),
    "op": (big_ops, (0.5, 0.05), 1),
    "pointwise": (pointwise_ops, (0.2, 0.03), 1),
    "train": (train_steps, (2.0, 0.2), 1),
    "train_mt": (train_steps, (2.0, 0.3), None),
    "host": (host_ops, (None, None), 1),  # host_time(): counted in calls, not seconds
    "models": (real_model_steps, (1.0, 0.1), 1),
    "rnn": (rnn_steps, (1.0, 0.1), 1),
    "kernels": (kernel_ops, (0.5, 0.05), 1),
    "zoo": (zoo_steps, (0.5, 0.05), 1),
}
# Groups a run without --only leaves out (named with --only, they run).
OPT_IN_GROUPS = ("zoo",)


# Rounds per length: (min seconds per round: index into GROUPS' pair or 0, repeats,
# host_time (calls, repeats), train steps counted for host waits).
LENGTHS = {
    "full": (0, 5, (400, 41), 5),
    "quick": (1, 3, (50, 11), 2),
    # every workload once after its warm-up: proves the script runs, measures nothing
    "smoke": (None, 1, (5, 1), 1),
}


def run(length: str, only: list[str] | None = None, device: str = "acme") -> list[dict]:
    time_index, repeats, host_calls, _ = LENGTHS[length]
    default_threads = torch.get_num_threads()
    rows = []
    for kind, (make, times, threads) in GROUPS.items():
        if (only and kind not in only) or (not only and kind in OPT_IN_GROUPS):
            continue
        min_time = 0.0 if time_index is None else times[time_index]
        torch.set_num_threads(threads or default_threads)
        cpu_fns, dev_fns = make("cpu"), make(device)
        for name in cpu_fns:
            if kind == "host":
                calls, host_repeats = host_calls
                cpu_s, dev_s = host_times_interleaved(cpu_fns[name], dev_fns[name], device, calls,
                                                      host_repeats)
                rows.append({"kind": kind, "name": f"host time: {name}", "cpu_s": cpu_s, "acme_s": dev_s,
                             "ratio": dev_s / cpu_s, "target": TARGETS.get(kind),
                             "threads": torch.get_num_threads()})
                print(f"  measured host time of {name}", file=sys.stderr, flush=True)
                continue
            # CPU and acme rounds in turn: the machine's speed drifts over seconds
            # (CPU's own 2-thread ResNet step moved 28-37 ms between runs when
            # they were measured one after the other), and the drift must not
            # land in the ratio.
            times = measure_interleaved({"cpu": (cpu_fns[name], "cpu"),
                                         device: (dev_fns[name], device)},
                                        min_time, repeats)
            cpu_s, dev_s = times["cpu"], times[device]
            rows.append({"kind": kind, "name": name, "cpu_s": cpu_s, "acme_s": dev_s,
                         "ratio": dev_s / cpu_s, "target": TARGETS.get(kind),
                         "threads": torch.get_num_threads()})
            print(f"  measured {name}", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict], device: str = "acme") -> str:
    def fmt(s: float) -> str:
        return f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"

    out = [f"| group | benchmark | threads | CPU | {device} | {device} / CPU | target |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        target = f"≤ {r['target']}×" if r["target"] else "-"
        out.append(f"| {r['kind']} | {r['name']} | {r['threads']} | {fmt(r['cpu_s'])} | {fmt(r['acme_s'])} "
                   f"| {r['ratio']:.2f}× | {target} |")
    return "\n".join(out)


def model_summary(rows: list[dict]) -> list[str]:
    """Median and worst ratio of each real-model group that ran (the targets of
    issue 39 are on these)."""
    import statistics

    lines = []
    for kind in ("models", "zoo"):
        ratios = {r["name"]: r["ratio"] for r in rows if r["kind"] == kind}
        if not ratios:
            continue
        worst = max(ratios, key=ratios.get)
        lines.append(f"{kind}: {len(ratios)} architectures, median {statistics.median(ratios.values()):.2f}×, "
                     f"worst {ratios[worst]:.2f}× ({worst.removesuffix(' train step')})")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--quick", action="store_true", help="short rounds")
    length.add_argument("--smoke", action="store_true",
                        help="every workload once: checks the script runs end to end (numbers meaningless)")
    parser.add_argument("--only", nargs="+", choices=list(GROUPS), help="run only these groups")
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--device", default="acme",
                        help="the flsdk backend device measured against the CPU (default acme)")
    parser.add_argument("--busy", action="store_true",
                        help="run a busy-looping Python process beside the measurements (a shared "
                             "machine's other job: what the stream worker's wake-ups cost then)")
    args = parser.parse_args(argv)
    busy = None
    if args.busy:
        import subprocess

        busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
        print(f"  a busy process runs beside the measurements (pid {busy.pid})", file=sys.stderr)
    try:
        return _main(args)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def _main(args) -> int:
    import importlib

    device = args.device
    # explicit: fails clearly if the backend is not installed
    backend = importlib.import_module(f"torch_fl_{device}")
    backend.load()
    native = importlib.import_module(f"torch_fl_{device}._C")

    native.clear_fallback_log()
    length = "smoke" if args.smoke else "quick" if args.quick else "full"
    rows = run(length, args.only, device)
    print(table(rows, device))
    for line in model_summary(rows):
        print(line)
    syncs = []
    if not args.only or {"train", "train_mt", "models"} & set(args.only):
        syncs = host_syncs_per_step(device, LENGTHS[length][3],
                                    models=not args.only or "models" in args.only)
        print(f"\nhost waits for the device per train step ({device}):")
        for r in syncs:
            reasons = ", ".join(f"{k} {v:g}" for k, v in sorted(r["by_reason"].items())) or "none"
            print(f"  {r['name']}: {r['syncs_per_step']:g} ({reasons})")
    fallbacks = native.fallback_log()
    if fallbacks:
        print(f"\nops that ran on the CPU fallback during the benchmark (they slow {device} down):")
        for e in sorted(fallbacks, key=lambda e: -e["time_s"]):
            print(f"  {e['op']}: {e['count']} calls, {e['time_s'] * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"torch": torch.__version__, "device": device, "busy_process": args.busy, "rows": rows,
                       "host_syncs": syncs,
                       "fallbacks": fallbacks}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
