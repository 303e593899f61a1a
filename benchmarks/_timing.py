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


def measure(fn, device: str, min_time: float, repeats: int = 5) -> float:
    """Median seconds per call of `fn` over `repeats` rounds of at least `min_time` each.

    One warm-up call first. The device is synchronized after each of the first 8
    calls of a round and then every 8th: for microsecond ops a sync per call would
    be measured instead of the op, and for long calls 8 is a small overshoot."""
    fn()
    sync(device)
    rounds = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if n % 8 == 0 or n < 8:
                sync(device)
                elapsed = time.perf_counter() - start
                if elapsed >= min_time:
                    break
        rounds.append(elapsed / n)
    return statistics.median(rounds)
