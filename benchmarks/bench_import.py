"""What `import torch` costs with the acme backend installed, against the same
interpreter with backend autoload off (as if acme were not installed: torch then
never reads the `torch.backends` entry point), measured in this run.

    python benchmarks/bench_import.py [--runs N] [--json out.json] [--rejected-design]

Wall time on a loaded machine is mostly waiting for a core; the CPU time of the
importing process is the steadier number. Each sample is a fresh interpreter running `import torch` (the time is taken
inside it, around the import, so interpreter start-up is excluded). Runs alternate
between the two settings so machine load hits both alike; the median is reported.
It also lists which of the heavy compile modules (Dynamo, Inductor, torch_fl's
compile registration) the import pulled in: issue #10 requires none, since graph
mode registers on the first torch.compile. Nothing here fails on a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = r"""
import os, sys, time, json
start, cpu_start = time.perf_counter(), time.process_time()
import torch
if os.environ.get("BENCH_EAGER_REGISTER") == "1":   # what registering at import would cost
    import torch_fl.compile
    torch_fl.compile.register("acme")
seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
heavy = [m for m in ("torch._dynamo", "torch._inductor", "torch_fl", "torch_fl.compile")
         if m in sys.modules]
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "heavy": heavy,
                  "acme": "torch_fl_acme" in sys.modules}))
"""

# name -> (TORCH_DEVICE_BACKEND_AUTOLOAD, BENCH_EAGER_REGISTER). The third is the
# design issue #10 rejected (trap e), measured for comparison: it is not what ships.
SETTINGS = {"acme installed (autoload)": ("1", "0"),
            "without acme (autoload off)": ("0", "0")}
REJECTED = {"acme + compile registered at import (rejected design)": ("1", "1")}


def sample(setting: tuple[str, str]) -> dict:
    autoload, eager = setting
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload, BENCH_EAGER_REGISTER=eager)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"import torch failed (autoload={autoload}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(runs: int, rejected: bool = False) -> dict:
    settings = {**SETTINGS, **(REJECTED if rejected else {})}
    samples = {name: [] for name in settings}
    for _ in range(runs):
        for name, setting in settings.items():
            samples[name].append(sample(setting))
    rows = {}
    for name, got in samples.items():
        times = sorted(s["seconds"] for s in got)
        rows[name] = {"median_s": statistics.median(times), "min_s": times[0],
                      "max_s": times[-1], "runs": len(times),
                      "cpu_median_s": statistics.median(s["cpu_seconds"] for s in got),
                      "acme_loaded": all(s["acme"] for s in got),
                      "heavy_modules": sorted({m for s in got for m in s["heavy"]})}
    (with_acme, cpu_with), (without, cpu_without) = (
        (rows[name]["median_s"], rows[name]["cpu_median_s"]) for name in SETTINGS)
    result = {"rows": rows, "acme_cost_s": with_acme - without, "ratio": with_acme / without,
              "acme_cost_cpu_s": cpu_with - cpu_without}
    if rejected:
        eager = rows[next(iter(REJECTED))]
        result["eager_registration_cost_s"] = eager["median_s"] - with_acme
        result["eager_registration_cost_cpu_s"] = eager["cpu_median_s"] - cpu_with
    return result


def table(result: dict) -> str:
    out = ["| import torch | median wall | median CPU | min wall | max wall | runs | acme loaded "
           "| compile modules imported |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in result["rows"].items():
        out.append(f"| {name} | {r['median_s'] * 1e3:.0f} ms | {r['cpu_median_s'] * 1e3:.0f} ms "
                   f"| {r['min_s'] * 1e3:.0f} ms "
                   f"| {r['max_s'] * 1e3:.0f} ms | {r['runs']} | {r['acme_loaded']} "
                   f"| {', '.join(r['heavy_modules']) or 'none'} |")
    out.append(f"\nacme's share of `import torch`: {result['acme_cost_s'] * 1e3:+.0f} ms wall "
               f"({result['ratio']:.2f}×), {result['acme_cost_cpu_s'] * 1e3:+.0f} ms CPU")
    if "eager_registration_cost_s" in result:
        out.append(f"registering compile at import would add "
                   f"{result['eager_registration_cost_s'] * 1e3:+.0f} ms wall, "
                   f"{result['eager_registration_cost_cpu_s'] * 1e3:+.0f} ms CPU")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="samples per setting")
    parser.add_argument("--json", help="write the result as JSON here")
    parser.add_argument("--rejected-design", action="store_true",
                        help="also measure compile registered at import (what lazy registration avoids)")
    args = parser.parse_args(argv)
    result = run(args.runs, args.rejected_design)
    print(table(result))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
