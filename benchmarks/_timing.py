"""Timing helper shared by the benchmarks: median seconds per call, with the
device synchronized so queued work is counted. Benchmarks report ratios of two
such medians taken in the same run; they never pass or fail on a time."""

from __future__ import annotations

import statistics
import time

import torch


def sync(device: str) -> None:
    if device != "cpu":
        torch.accelerator.synchronize()


def measure(fn, device: str, min_time: float, repeats: int = 5) -> float:
    """Median seconds per call over `repeats` rounds of at least `min_time` each
    (one warm-up call first)."""
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
