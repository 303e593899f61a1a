"""What torch.profiler costs on acme, and the picture of a profiled training step.

    python benchmarks/bench_profiler.py [--steps 10] [--rounds 3] [--smoke] [--json out.json]
                                        [--trace step.json] [--svg step.svg] [--picture-only]

Measures, in one process, rounds taken in turn so that the machine's drift is shared:

* a ResNet-18 training step (the README demo's: batch 8, 3x32x32, SGD with momentum)
  with the profiler off, inside torch.profiler.profile(activities=[CPU]) (PyTorch's
  own cost), inside profile(activities=[CPU, PrivateUse1]) (with the device's
  activity), and with profile_memory=True as well (the step only: the profile's start
  and its post-processing are reported apart);
* the host time of a tiny op (add on 8 elements), off and inside both profiles;
* the profile's own fixed costs: entering it, and turning it into key_averages().

--trace writes the Chrome trace of one profiled step (open it in
https://ui.perfetto.dev); --svg draws that trace's lanes as an SVG picture (the one in
docs/profiling.md): host threads on top, the device's stream below, flow arrows
from each launch to its device work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def resnet_step(device: str):
    import torch
    from torch.nn import functional as F

    from torch_fl.models import resnet18

    torch.manual_seed(0)
    model = resnet18(num_classes=10).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 32, 32, generator=g).to(device)
    y = torch.randint(0, 10, (8,), generator=g).to(device)

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.accelerator.synchronize()

    return step


def timed_steps(step, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        out.append(time.perf_counter() - start)
    return out


def measure_steps(steps: int, rounds: int) -> dict:
    """Median step seconds: off, profiled, profiled with memory; and the profile's
    own costs (enter, post-processing)."""
    from torch.profiler import ProfilerActivity, profile

    step = resnet_step("acme")
    for _ in range(3):
        step()  # warm-up: the allocator's cache, momentum buffers
    device = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    variants = (("profiled_cpu_only", [ProfilerActivity.CPU], False), ("profiled", device, False),
                ("profiled_memory", device, True))
    times = {"off": [], **{key: [] for key, _, _ in variants}}
    enter, process = [], []
    for _ in range(rounds):
        times["off"] += timed_steps(step, steps)
        for key, activities, memory in variants:
            t0 = time.perf_counter()
            prof = profile(activities=activities, profile_memory=memory)
            prof.__enter__()
            enter.append(time.perf_counter() - t0)
            times[key] += timed_steps(step, steps)
            prof.__exit__(None, None, None)
            if key == "profiled":
                t0 = time.perf_counter()
                prof.key_averages()
                process.append((time.perf_counter() - t0) / steps)
    out = {k: statistics.median(v) for k, v in times.items()}
    out["profile_enter_s"] = statistics.median(enter)
    out["post_processing_per_step_s"] = statistics.median(process)
    return out


def measure_tiny_op(calls: int = 2000) -> dict:
    """Host seconds per call of add on 8 elements (bench_acme.py's host time: the
    calls return without waiting for the device), one intra-op thread."""
    import torch
    from bench_acme import host_time
    from torch.profiler import ProfilerActivity, profile

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    x = torch.ones(8, device="acme")
    out = {"off": [], "profiled_cpu_only": [], "profiled": []}
    try:
        for _ in range(3):  # in turn: the machine's drift is shared
            out["off"].append(host_time(lambda: x + 1, "acme", calls, 5))
            with profile(activities=[ProfilerActivity.CPU]):
                out["profiled_cpu_only"].append(host_time(lambda: x + 1, "acme", calls, 5))
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
                out["profiled"].append(host_time(lambda: x + 1, "acme", calls, 5))
    finally:
        torch.set_num_threads(threads)
    return {k: statistics.median(v) for k, v in out.items()}


def write_trace(path: str) -> dict:
    """One profiled training step's Chrome trace at `path`; returns its JSON."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    from torch.nn import functional as F

    from torch_fl.models import resnet18

    model = resnet18(num_classes=10).to("acme").train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(8, 3, 32, 32).to("acme")
    y = torch.randint(0, 10, (8,)).to("acme")

    def step():
        with record_function("forward"):
            loss = F.cross_entropy(model(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.accelerator.synchronize()

    step()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
    prof.export_chrome_trace(path)
    return json.loads(Path(path).read_text())


# ---- the picture -------------------------------------------------------------

COLORS = {"cpu_op": "#4e79a7", "user_annotation": "#59a14f", "privateuse1_runtime": "#f28e2c",
          "kernel": "#e15759", "gpu_memcpy": "#76b7b2", "gpu_memset": "#edc949",
          "gpu_user_annotation": "#59a14f"}
HOST_CATS = ("cpu_op", "user_annotation", "privateuse1_runtime")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def _rows(events):
    """Nesting depth of each event of one lane (by time containment)."""
    placed, stack = [], []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        placed.append((len(stack), e))
        stack.append(e["ts"] + e["dur"])
    return placed


def trace_svg(trace: dict, width: int = 1400) -> str:
    """The lanes of a Chrome trace as SVG: each host thread (ops nested by depth, up
    to four levels), then each device stream (record_function spans above its work),
    and a faint arrow from each launch to its device work."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e
              and e.get("cat") in HOST_CATS + DEVICE_CATS]
    meta = [e for e in trace["traceEvents"] if e.get("ph") == "M"]
    threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    lanes: dict = {}
    for e in events:
        lanes.setdefault((e["cat"] in DEVICE_CATS, str(e["pid"]), str(e["tid"])), []).append(e)
    t0 = min(e["ts"] for e in events)
    t1 = max(e["ts"] + e["dur"] for e in events)
    left, row_h, gap = 170, 14, 12
    scale = (width - left - 10) / (t1 - t0)
    body, lane_y, y = [], {}, 30
    for (device, _, _), lane in sorted(lanes.items()):
        pid, tid = lane[0]["pid"], lane[0]["tid"]
        if device:  # record_function spans on a row above the work
            placed = [(0 if e["cat"] == "gpu_user_annotation" else 1, e) for e in lane]
            label = f"{processes.get(pid, pid)} {threads.get((pid, tid), tid)}"
        else:
            placed = _rows(lane)
            label = threads.get((pid, tid), f"thread {tid}")
        depth = min(4, max(d for d, _ in placed) + 1)
        lane_y[(pid, tid)] = (y, device)
        body.append(f'<text x="4" y="{y + 11}" font-size="11" font-family="sans-serif">{label}</text>')
        body.append(f'<rect x="{left}" y="{y - 2}" width="{width - left - 10}" '
                    f'height="{depth * row_h + 4}" fill="#f4f4f4"/>')
        for d, e in placed:
            if d >= depth:
                continue
            x = left + (e["ts"] - t0) * scale
            w = max(e["dur"] * scale, 0.6)
            body.append(f'<rect x="{x:.1f}" y="{y + d * row_h}" width="{w:.1f}" height="{row_h - 2}" '
                        f'fill="{COLORS[e["cat"]]}"><title>{e["name"]} ({e["dur"]:.0f} us)</title></rect>')
            if w > 5.5 * len(e["name"]):
                body.append(f'<text x="{x + 2:.1f}" y="{y + d * row_h + 10}" font-size="9" '
                            f'font-family="sans-serif" fill="white">{e["name"]}</text>')
        y += depth * row_h + gap
    flows = [e for e in trace["traceEvents"] if e.get("cat") == "ac2g"]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    arrows = []
    for end in (e for e in flows if e["ph"] == "f"):
        start = starts.get(end["id"])
        if start is None or (start["pid"], start["tid"]) not in lane_y or (end["pid"], end["tid"]) not in lane_y:
            continue
        x1, x2 = left + (start["ts"] - t0) * scale, left + (end["ts"] - t0) * scale
        y1 = lane_y[(start["pid"], start["tid"])][0] + row_h / 2
        y2 = lane_y[(end["pid"], end["tid"])][0] + 1.5 * row_h
        arrows.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                      f'stroke="#333" stroke-opacity="0.12" stroke-width="0.6"/>')
    head = [f'<text x="{left}" y="16" font-size="11" font-family="sans-serif">0 ms</text>',
            f'<text x="{width - 70}" y="16" font-size="11" font-family="sans-serif">'
            f'{(t1 - t0) / 1000:.1f} ms</text>']
    x = left + 60
    for cat in ("cpu_op", "user_annotation", "privateuse1_runtime", "kernel", "gpu_memcpy", "gpu_memset"):
        head.append(f'<rect x="{x}" y="6" width="10" height="10" fill="{COLORS[cat]}"/>'
                    f'<text x="{x + 13}" y="15" font-size="10" font-family="sans-serif">{cat}</text>')
        x += 20 + 6 * len(cat)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 10}" '
            f'viewBox="0 0 {width} {y + 10}">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(head + body + arrows) + "\n</svg>\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument("--trace", help="write one profiled step's Chrome trace here")
    parser.add_argument("--svg", help="draw that trace as SVG here (needs --trace)")
    parser.add_argument("--picture-only", action="store_true", help="only --trace / --svg")
    parser.add_argument("--smoke", action="store_true",
                        help="one step per round, one round, short tiny-op rounds (checks it runs)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.rounds = 1, 1
    import torch  # noqa: F401  (loads acme)

    results = {}
    if not args.picture_only:
        steps = measure_steps(args.steps, args.rounds)
        tiny = measure_tiny_op(100 if args.smoke else 2000)
        results = {"resnet18_step": steps, "tiny_add": tiny}
        off = steps["off"]
        print(f"ResNet-18 training step on acme (batch 8, 3x32x32), median of {args.rounds}x{args.steps}:")
        print(f"  profiler off                 {off * 1e3:8.1f} ms")
        for key, label in (("profiled_cpu_only", "profiled (CPU only)"),
                           ("profiled", "profiled (CPU + device)"),
                           ("profiled_memory", "profiled + profile_memory")):
            print(f"  {label:<28} {steps[key] * 1e3:8.1f} ms  ({steps[key] / off:.2f}x)")
        print(f"  entering a profile           {steps['profile_enter_s'] * 1e3:8.1f} ms (once per profile)")
        print(f"  key_averages() per step      {steps['post_processing_per_step_s'] * 1e3:8.1f} ms "
              f"(after the profile)")
        print(f"host time of add on 8 elements: {tiny['off'] * 1e6:.2f} us off, "
              f"{tiny['profiled_cpu_only'] * 1e6:.2f} us profiled (CPU only), "
              f"{tiny['profiled'] * 1e6:.2f} us profiled (CPU + device)")
    if args.trace:
        trace = write_trace(args.trace)
        print(f"trace of one step: {args.trace}")
        if args.svg:
            Path(args.svg).write_text(trace_svg(trace))
            print(f"picture: {args.svg}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
