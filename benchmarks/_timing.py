"""The timing helper every benchmark script shares (bench_acme.py, bench_compile.py,
bench_import.py): one definition of "seconds per call", so their ratios are
measured the same way."""

from __future__ import annotations

import statistics
import time


def sync(device: str) -> None:
    """Wait for the device's queued work (no-op on the CPU)."""
    if device != "cpu":
        import torch

        torch.accelerator.synchronize()


def _round(fn, device: str, min_time: float) -> float:
    """Seconds per call of `fn` over one round of at least `min_time`. The device is
    synchronized after each of the first 8 calls and then every 8th: for microsecond
    ops a sync per call would be measured instead of the op, and for long calls 8 is
    a small overshoot."""
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        if n % 8 == 0 or n < 8:
            sync(device)
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                return elapsed / n


def measure(fn, device: str, min_time: float, repeats: int = 5) -> float:
    """Median seconds per call of `fn` over `repeats` rounds of at least `min_time`
    each, after one warm-up call."""
    fn()
    sync(device)
    return statistics.median(_round(fn, device, min_time) for _ in range(repeats))


def measure_interleaved(fns: dict, min_time: float, repeats: int = 5) -> dict:
    """Median seconds per call of each `fns[name] = (fn, device)`, the rounds taken in
    turn (a round of each, `repeats` times), after one warm-up call of each.

    For ratios between them: on a shared machine the speed drifts over seconds, and
    measuring one callable after the other would put the drift into the ratio."""
    for fn, device in fns.values():
        fn()
        sync(device)
    rounds = {name: [] for name in fns}
    for _ in range(repeats):
        for name, (fn, device) in fns.items():
            rounds[name].append(_round(fn, device, min_time))
    return {name: statistics.median(times) for name, times in rounds.items()}
