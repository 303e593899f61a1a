"""`torch.<name>.memory`: the device's memory in the forms of `torch.cuda.memory`, so
the tools written for CUDA work on the device:

* `memory_stats()` with CUDA's keys (the caching allocator's statistics, plus the few
  keys torch.cuda has that torch.accelerator does not), `memory_summary()` as CUDA's
  table;
* `_record_memory_history()`, `_snapshot()`, `_dump_snapshot()`: the allocator's
  history and state in CUDA's snapshot format, with the Python (and C++) stacks of
  allocations, which `torch.cuda._memory_viz` and https://pytorch.org/memory_viz render.

`install_memory_module` makes it a module (`import torch.acme.memory` works) and hangs
it on the device module; DeviceModule's top-level memory functions call it.
"""

import pickle
import sys
import types

import torch

# Keys torch.cuda.memory_stats() has beyond torch.accelerator.memory_stats()'s.
_STAT_FIELDS = ("current", "peak", "allocated", "freed")
_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
             "num_device_free", "num_oom_rejections")


class DeviceMemory:
    """The functions of `torch.<name>.memory` for the device module `module`
    (a DeviceModule: its `name`, `native` and `index()`)."""

    EXPORTS = (
        "memory_stats", "memory_summary", "memory_snapshot", "memory_allocated",
        "max_memory_allocated", "memory_reserved", "max_memory_reserved",
        "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache",
        "mem_get_info", "_record_memory_history", "_snapshot", "_dump_snapshot",
    )

    def __init__(self, module):
        self.module = module

    # ---- statistics -------------------------------------------------------------

    def memory_stats(self, device=None):
        """torch.cuda.memory_stats' dict for the device: allocated/active/reserved/
        requested/inactive-split bytes and counts per pool, the event counters,
        max_split_size and the oversize counts."""
        index = self.module.index(device)
        stats = dict(torch.accelerator.memory_stats(index))
        for counter in _COUNTERS:
            stats.setdefault(counter, 0)
        config = self.module.native.get_memory_config()
        split_mb = config.get("max_split_size_mb", -1)
        stats.setdefault("max_split_size", -1 if split_mb < 0 else int(split_mb * 2**20))
        for metric in ("oversize_allocations", "oversize_segments"):
            for field in _STAT_FIELDS:
                stats.setdefault(f"{metric}.{field}", 0)
        return dict(sorted(stats.items()))

    def memory_allocated(self, device=None):
        return torch.accelerator.memory_allocated(self.module.index(device))

    def max_memory_allocated(self, device=None):
        return torch.accelerator.max_memory_allocated(self.module.index(device))

    def memory_reserved(self, device=None):
        return torch.accelerator.memory_reserved(self.module.index(device))

    def max_memory_reserved(self, device=None):
        return torch.accelerator.max_memory_reserved(self.module.index(device))

    def reset_peak_memory_stats(self, device=None):
        torch.accelerator.reset_peak_memory_stats(self.module.index(device))

    def reset_accumulated_memory_stats(self, device=None):
        torch.accelerator.reset_accumulated_memory_stats(self.module.index(device))

    def empty_cache(self):
        self.module.native.empty_cache()

    def mem_get_info(self, device=None):
        return torch.accelerator.get_memory_info(self.module.index(device))

    def memory_summary(self, device=None, abbreviated=False):
        """The table torch.cuda.memory_summary() prints, for this device: per metric
        (allocated, active, requested, reserved, non-releasable bytes; allocations,
        active allocs, segments, non-releasable allocs) current, peak, total
        allocated and total freed, split by pool unless `abbreviated`."""
        index = self.module.index(device)
        stats = self.memory_stats(index)
        rule, double = "-" * 75, "=" * 75
        title = f"PyTorch {self.module.name.upper()} memory summary, device ID {index}"
        lines = [double, f" {title:^73} ", rule,
                 f"  {self.module.name.upper()} OOMs: {stats['num_ooms']:<12d} | "
                 f"device malloc retries: {stats['num_alloc_retries']:<8d}".ljust(75),
                 double,
                 "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
        rows = (("allocated_bytes", "Allocated memory", _size), ("active_bytes", "Active memory", _size),
                ("requested_bytes", "Requested memory", _size),
                ("reserved_bytes", "Reserved memory", _size),
                ("inactive_split_bytes", "Non-releasable memory", _size),
                ("allocation", "Allocations", _count), ("active", "Active allocs", _count),
                ("segment", "Reserved segments", _count),
                ("inactive_split", "Non-releasable allocs", _count))
        pools = (("all", None),) if abbreviated else (
            ("all", None), ("large_pool", "      from large pool"), ("small_pool", "      from small pool"))
        for key, label, fmt in rows:
            lines.append(rule)
            scale = [stats[f"{key}.all.{f}"] for f in _STAT_FIELDS]
            for pool, pool_label in pools:
                values = [stats[f"{key}.{pool}.{f}"] for f in _STAT_FIELDS]
                cells = " | ".join(fmt(v, s) for v, s in zip(values, scale))
                lines.append(f" {(pool_label or label)[:21]:<21} | {cells} ")
        for key, label in (("oversize_allocations", "Oversize allocations"),
                           ("oversize_segments", "Oversize segments")):
            lines.append(rule)
            values = [stats[f"{key}.{f}"] for f in _STAT_FIELDS]
            cells = " | ".join(_count(v, v) for v in values)
            lines.append(f" {label[:21]:<21} | {cells} ")
        lines.append(double)
        return "|" + "|\n|".join(lines) + "|\n"

    # ---- history and snapshots ----------------------------------------------------

    def _record_memory_history(self, enabled="all", context="all", stacks="all",
                               max_entries=sys.maxsize, device=None, clear_history=False,
                               compile_context=False, global_record_annotations=False):
        """As torch.cuda.memory._record_memory_history: `enabled` None (off), "state"
        (remember the stack of each live block) or "all" (also a trace of every alloc,
        free and segment event, the last `max_entries`); `context` None, "state",
        "alloc" or "all" (stacks of frees too); `stacks` "python" or "all" (C++ frames
        too). The legacy form `_record_memory_history(True)` is "all". The history is
        the backend's (all its devices); `device` is accepted for CUDA's signature, and
        so are `compile_context` and `global_record_annotations` (CUDA-only: ignored)."""
        if isinstance(enabled, bool):
            enabled = "all" if enabled else None
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        if context not in (None, "state", "alloc", "all"):
            raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
        if not isinstance(max_entries, int) or max_entries < 0:
            raise ValueError(f"max_entries must be a non-negative int, got {max_entries!r}")
        if device is not None:
            self.module.index(device)  # checks it names this backend
        trace = enabled == "all"
        state = enabled is not None
        alloc_stacks = state and context in ("state", "alloc", "all")
        free_stacks = trace and context == "all"
        self.module.native.record_memory_history(trace, state, alloc_stacks, free_stacks,
                                                 stacks == "all", min(max_entries, 2**63 - 1),
                                                 bool(clear_history))

    def _snapshot(self, device=None):
        """The allocator's segments (with their blocks and the stacks that allocated
        them) and the recorded trace per device, as torch.cuda.memory._snapshot()."""
        return self.module.native.memory_history_snapshot()

    def _dump_snapshot(self, filename="dump_snapshot.pickle"):
        """_snapshot() pickled to `filename`, for https://pytorch.org/memory_viz."""
        with open(filename, "wb") as f:
            pickle.dump(self._snapshot(), f)

    def memory_snapshot(self):
        """torch.cuda.memory_snapshot(): the segments of the snapshot."""
        return self._snapshot()["segments"]


def _size(value, scale):
    for unit in ("B  ", "KiB", "MiB", "GiB", "TiB"):
        if scale < 768 * 1024 or unit == "TiB":
            return f"{int(value):6d} {unit}"
        value //= 1024
        scale /= 1024
    return ""


def _count(value, scale):
    for unit in (" ", "K", "M"):
        if scale < 750 * 1000 or unit == "M":
            return f"{int(value):7d} {unit} "
        value //= 1000
        scale /= 1000
    return ""


def install_memory_module(module):
    """Make `torch.<name>.memory` (also importable: `import torch.<name>.memory`) for
    the DeviceModule `module`; returns its DeviceMemory."""
    memory = DeviceMemory(module)
    mod = types.ModuleType(f"torch.{module.name}.memory",
                           f"The memory of the {module.name} device, as torch.cuda.memory.")
    for name in DeviceMemory.EXPORTS:
        setattr(mod, name, getattr(memory, name))
    sys.modules[mod.__name__] = mod
    return memory, mod
