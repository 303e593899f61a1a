"""torch.compile (Inductor) on acme: compiled vs eager, and compiled acme vs compiled CPU.

    python benchmarks/bench_compile.py [--quick] [--json out.json] [--only NAME]

Every ratio is measured in this run (eager and compiled, acme and CPU, one
intra-op thread each so the comparison is per core), the four measured in turn
round by round so a shared machine's drift does not enter the ratios. Compile
time is reported separately and excluded from the step times (the first calls
are warm-up). Nothing here fails on a timing.
The transcendental chain also reports fusion's bound, measured in the same run:
its eager time over the eager time of its three transcendental ops alone, which a
fused kernel computes as well.
Train steps compile the model (forward and, through AOTAutograd, backward);
the optimizer step stays eager, except in the GPT row that compiles it too
(torch.compile(opt.step), as PyTorch's tutorials do).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from _timing import measure_interleaved
from _timing import sync as _sync

DEVICE = "acme"


# ---------------------------------------------------------------- workloads
# Each maker returns step(compiled: bool) -> a zero-argument callable, building fresh
# state on `device` so eager and compiled runs do not share parameters.

def pointwise_chain(device):
    """Transcendental: compute-bound (erf, exp, tanh per element); fusion saves the
    memory passes between ops, the math costs the same fused or not. `make.math_only`
    runs the chain's three transcendental ops eagerly on their own inputs: a fused
    kernel computes them too, so eager chain / math_only bounds what fusion can gain."""
    F = torch.nn.functional
    x = torch.randn(1024, 1024, device=device)

    def chain(t):
        return (F.gelu(t * 1.5 + 0.5) * torch.sigmoid(t)).tanh() + t

    def make(compiled):
        f = torch.compile(chain) if compiled else chain
        return lambda: f(x)

    gelu_in = x * 1.5 + 0.5
    tanh_in = F.gelu(gelu_in) * torch.sigmoid(x)

    def math_only():
        return F.gelu(gelu_in), torch.sigmoid(x), tanh_in.tanh()
    make.math_only = math_only
    return make


def arithmetic_chain(device):
    """Arithmetic on 16 MB: memory-bound; eager reads and writes every intermediate,
    the fused kernel reads x once and writes the result once."""
    x = torch.randn(4096, 1024, device=device)

    def chain(t):
        return ((t * 1.5 + 0.5).clamp(-1, 1) * t - 0.25).abs()

    def make(compiled):
        f = torch.compile(chain) if compiled else chain
        return lambda: f(x)
    return make


def transformer_block_forward(device):
    from torch_fl.models.gpt import Block, GPTConfig

    cfg = GPTConfig(n_embd=128, n_head=4, block_size=64, dropout=0.0)
    x = torch.randn(8, 64, 128, device=device)

    def make(compiled):
        torch.manual_seed(0)
        block = Block(cfg).to(device).eval()
        f = torch.compile(block) if compiled else block

        def step():
            with torch.no_grad():
                return f(x)
        return step
    return make


def gpt_train_step(device, compile_optimizer=False, dropout=0.0):
    from torch_fl.models import GPT, GPTConfig

    cfg = GPTConfig(dropout=dropout)
    tokens = torch.randint(0, cfg.vocab_size, (8, cfg.block_size + 1)).to(device)

    def make(compiled):
        torch.manual_seed(0)
        model = GPT(cfg).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        f = torch.compile(model) if compiled else model
        opt_step = torch.compile(opt.step) if compiled and compile_optimizer else opt.step

        def step():
            opt.zero_grad(set_to_none=True)
            _, loss = f(tokens[:, :-1], tokens[:, 1:])
            loss.backward()
            opt_step()
        return step
    return make


def gpt_train_step_optimizer_compiled(device):
    return gpt_train_step(device, compile_optimizer=True)


def gpt_train_step_with_dropout(device):
    """The model's default config (dropout 0.1, as GPT-2 trains and bench_acme.py
    runs it): compiled, the dropout masks are drawn inside the fused kernels."""
    return gpt_train_step(device, dropout=0.1)


def resnet18_train_step(device):
    from torch_fl.models import resnet18

    images = torch.randn(8, 3, 32, 32).to(device)
    labels = torch.randint(0, 10, (8,)).to(device)

    def make(compiled):
        torch.manual_seed(0)
        model = resnet18(num_classes=10).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        f = torch.compile(model) if compiled else model

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(f(images), labels)
            loss.backward()
            opt.step()
        return step
    return make


WORKLOADS = {
    "pointwise chain, transcendental (1024x1024, 7 ops)": pointwise_chain,
    "pointwise chain, arithmetic (4096x1024, 6 ops)": arithmetic_chain,
    "transformer block forward (8x64x128)": transformer_block_forward,
    "GPT train step (8x32 tokens, AdamW)": gpt_train_step,
    "GPT train step, optimizer compiled too": gpt_train_step_optimizer_compiled,
    "GPT train step, dropout 0.1": gpt_train_step_with_dropout,
    "ResNet-18 train step (8x3x32x32, SGD)": resnet18_train_step,
}
GOALS = {  # from issue #10; reported, never asserted
    "pointwise chain, transcendental (1024x1024, 7 ops)": 4.0,
    "pointwise chain, arithmetic (4096x1024, 6 ops)": 4.0,
    "GPT train step (8x32 tokens, AdamW)": 1.25,
    "GPT train step, optimizer compiled too": 1.25,
    "GPT train step, dropout 0.1": 1.25,
    "ResNet-18 train step (8x3x32x32, SGD)": 1.0,
}


def run(quick: bool, only: str | None) -> list[dict]:
    torch.set_num_threads(1)
    min_time, repeats = (0.1, 3) if quick else (1.0, 5)
    rows = []
    for name, workload in WORKLOADS.items():
        if only and only.lower() not in name.lower():
            continue
        row = {"name": name}
        torch._dynamo.reset()
        steps = {}
        for device in (DEVICE, "cpu"):
            make = workload(device)
            steps[f"{device}_eager_s"] = (make(False), device)
            compiled = make(True)
            start = time.perf_counter()
            compiled()
            compiled()  # a train step compiles forward, then backward
            _sync(device)
            row[f"{device}_compile_s"] = time.perf_counter() - start
            steps[f"{device}_compiled_s"] = (compiled, device)
            if device == DEVICE and hasattr(make, "math_only"):
                steps[f"{device}_math_only_s"] = (make.math_only, device)
        # all four in turn, so the machine's drift does not enter the ratios
        row.update(measure_interleaved(steps, min_time, repeats))
        print(f"  measured {name}", file=sys.stderr, flush=True)
        row["speedup"] = row[f"{DEVICE}_eager_s"] / row[f"{DEVICE}_compiled_s"]
        row["compiled_vs_cpu"] = row[f"{DEVICE}_compiled_s"] / row["cpu_compiled_s"]
        row["goal"] = GOALS.get(name)
        if f"{DEVICE}_math_only_s" in row:
            row["fusion_bound"] = row[f"{DEVICE}_eager_s"] / row[f"{DEVICE}_math_only_s"]
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    def fmt(s: float) -> str:
        return f"{s * 1e6:.0f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"

    out = [f"| workload | {DEVICE} eager | {DEVICE} compiled | speedup (goal) | CPU compiled "
           f"| {DEVICE} / CPU compiled (goal ≤ 1.2×) | compile time {DEVICE} |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        bound = f", fusion's bound {r['fusion_bound']:.2f}×" if "fusion_bound" in r else ""
        goal = f" (≥ {r['goal']}×{bound})" if r["goal"] else ""
        out.append(f"| {r['name']} | {fmt(r[f'{DEVICE}_eager_s'])} | {fmt(r[f'{DEVICE}_compiled_s'])} "
                   f"| {r['speedup']:.2f}×{goal} | {fmt(r['cpu_compiled_s'])} | {r['compiled_vs_cpu']:.2f}× "
                   f"| {r[f'{DEVICE}_compile_s']:.0f} s |")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (smoke run)")
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--only", help="run only workloads whose name contains this")
    args = parser.parse_args(argv)
    import torch_fl_acme

    torch_fl_acme.load()
    rows = run(args.quick, args.only)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"torch": torch.__version__, "threads": 1,
                       "caches_disabled": os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") == "1",
                       "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
