"""acme vs CPU, measured in the same run. Prints a table and writes JSON.

    python benchmarks/bench_acme.py [--quick] [--json out.json]

Targets (ratios device/CPU, lower is better) are documented in
benchmarks/README.md; this script reports what is reached and never fails on
a timing. Both sides use one intra-op thread so the comparison is per core
(acme's kernels are single-threaded; a 2-core machine shared with other work
makes multi-threaded numbers noise).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

TARGETS = {"tiny": 1.15, "train": 1.5}


def _sync(device: str) -> None:
    if device != "cpu":
        torch.accelerator.synchronize()


def measure(fn, device: str, min_time: float, repeats: int = 5) -> float:
    """Median seconds per call over `repeats` rounds of at least `min_time` each."""
    fn()
    _sync(device)
    rounds = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if n % 8 == 0 or n < 8:
                _sync(device)
                elapsed = time.perf_counter() - start
                if elapsed >= min_time:
                    break
        rounds.append(elapsed / n)
    return statistics.median(rounds)


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


def run(quick: bool) -> list[dict]:
    torch.set_num_threads(1)
    device = "acme"
    rows = []
    groups = [("tiny", tiny_ops, 0.05 if quick else 0.3), ("op", big_ops, 0.05 if quick else 0.5),
              ("train", train_steps, 0.2 if quick else 2.0)]
    for kind, make, min_time in groups:
        cpu_fns, dev_fns = make("cpu"), make(device)
        for name in cpu_fns:
            cpu_s = measure(cpu_fns[name], "cpu", min_time, 3 if quick else 5)
            dev_s = measure(dev_fns[name], device, min_time, 3 if quick else 5)
            rows.append({"kind": kind, "name": name, "cpu_s": cpu_s, "acme_s": dev_s,
                         "ratio": dev_s / cpu_s, "target": TARGETS.get(kind)})
            print(f"  measured {name}", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    def fmt(s: float) -> str:
        return f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"

    out = ["| benchmark | CPU | acme | acme / CPU | target |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        target = f"≤ {r['target']}×" if r["target"] else "-"
        out.append(f"| {r['name']} | {fmt(r['cpu_s'])} | {fmt(r['acme_s'])} | {r['ratio']:.2f}× | {target} |")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (smoke run)")
    parser.add_argument("--json", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    import torch_fl_acme  # noqa: F401  (explicit: fails clearly if acme is not installed)

    torch_fl_acme.load()
    import torch_fl_acme._C as native

    native.clear_fallback_log()
    rows = run(args.quick)
    print(table(rows))
    fallbacks = native.fallback_log()
    if fallbacks:
        print("\nops that ran on the CPU fallback during the benchmark (they slow acme down):")
        for e in sorted(fallbacks, key=lambda e: -e["time_s"]):
            print(f"  {e['op']}: {e['count']} calls, {e['time_s'] * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"torch": torch.__version__, "rows": rows, "fallbacks": fallbacks}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
