"""Host waits: how often the host waited for the device, and why.

On an asynchronous accelerator an op queues its work and returns; the host
waits only where a result must reach it. Every such wait in a backend's glue
and kernels is counted, by reason:

    copy_to_host   x.cpu(), print(x), .tolist(): a copy into pageable memory
    copy_to_device x.to(device) without non_blocking=True: as on CUDA, the copy
                   is done when it returns (any stream may then use the result)
    item           x.item(), float(x), `if x:`
    kernel         an op whose output shape depends on data (nonzero, unique)
    fallback       the CPU fallback's copies to the host
    staging        a copy or fill the backend has no kernel or primitive for
    peer_copy      a copy between two devices
    allocator      the caching allocator giving memory back
    inline_kernel  kernel_launch: inline, a kernel waiting for its stream
    synchronize    torch.<device>.synchronize(), stream.synchronize()
    event          event.synchronize()

    >>> torch_fl.reset_host_syncs()
    >>> train_step()
    >>> torch_fl.host_syncs()          # {'copy_to_host': 0, 'item': 1, ...}

`torch.<device>.set_sync_debug_mode("warn" | "error")` reports or refuses the
waits the user did not ask for, as torch.cuda's does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from . import _backends

__all__ = ["host_syncs", "reset_host_syncs", "count_host_syncs"]


def host_syncs(device: Any = None) -> dict[str, int]:
    """Host waits since the last reset, by reason (the process's backend)."""
    return {k: int(v) for k, v in _backends.native(device).host_syncs().items()}


def reset_host_syncs(device: Any = None) -> None:
    _backends.native(device).reset_host_syncs()


@contextlib.contextmanager
def count_host_syncs(device: Any = None) -> Iterator[dict[str, int]]:
    """`with torch_fl.count_host_syncs() as waits: ...`: after the block, `waits`
    holds the block's host waits by reason (others' counts are left alone)."""
    before = host_syncs(device)
    waits: dict[str, int] = {}
    try:
        yield waits
    finally:
        after = host_syncs(device)
        waits.update({k: after[k] - before.get(k, 0) for k in after})
