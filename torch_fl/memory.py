"""Device memory: the caching allocator's configuration and statistics.

Statistics come from torch.accelerator (which reads the backend's generated
caching allocator); this file adds configuration with validation, a readable
summary, and device resolution ("acme:1", "acme", None).

    >>> torch_fl.set_memory_config("acme:0", {"max_split_size_mb": 64})
    >>> print(torch_fl.memory_summary("acme:0"))
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from . import _backends

__all__ = ["MEMORY_CONFIG_KEYS", "ARTICLE_MEMORY_KEYS", "set_memory_config", "get_memory_config", "memory_stats",
           "memory_summary", "empty_cache", "memory_allocated", "memory_reserved",
           "reset_peak_memory_stats"]

_MIB = 1024 * 1024


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"memory config {key} needs a finite number, got {value!r}")
    return float(value)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _round_size(value: Any) -> str:
    v = _number("round_size", value)
    if not (1 <= v <= 64 * _MIB) or not v.is_integer():
        raise ValueError(f"memory config round_size must be an integer number of bytes in "
                         f"1..{64 * _MIB}, got {value!r}")
    return _fmt(v)


def _mb_or_unlimited(key: str):
    def check(value: Any) -> str:
        if value is None or value == "unlimited":
            return "unlimited"
        v = _number(key, value)
        if v <= 0:
            raise ValueError(f"memory config {key} must be > 0 MiB (or None for unlimited), "
                             f"got {value!r}")
        return _fmt(v)
    return check


def _gc_threshold(value: Any) -> str:
    v = _number("garbage_collection_threshold", value)
    if not 0 <= v < 1:
        raise ValueError("memory config garbage_collection_threshold must be in [0, 1) "
                         f"(fraction of capacity; 0 disables), got {value!r}")
    return _fmt(v)


# key -> (description, validator returning the text the allocator parses)
MEMORY_CONFIG_KEYS = {
    "round_size": ("allocation sizes are rounded up to a multiple of this (bytes)", _round_size),
    "max_split_size_mb": ("cached blocks larger than this are never split (MiB; None: no limit)",
                          _mb_or_unlimited("max_split_size_mb")),
    "garbage_collection_threshold": ("free cached blocks when reserved memory exceeds this "
                                     "fraction of capacity (0: off)", _gc_threshold),
    "pool_limit_mb": ("cap on memory the allocator reserves (MiB; None: no cap)",
                      _mb_or_unlimited("pool_limit_mb")),
}


# The Torch-FL article's keys, mapped onto the allocator keys above (each
# article key sets exactly one allocator key; docs/torch_fl.md has the table).
# enable_fragmentation_avoid=True stops the allocator from splitting cached
# blocks larger than this, so a big free block is not carved into small pieces
# that later large requests cannot use (PyTorch's max_split_size_mb remedy).
FRAGMENTATION_AVOID_SPLIT_MB = 64
_MAX_ALIGNMENT = 64 * _MIB


def _pool_size(value: Any) -> tuple[str, str]:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"memory config pool_size must be a positive integer number of bytes "
                         f"(e.g. 4 * 1024**3), got {value!r}")
    return "pool_limit_mb", _fmt(value / _MIB)


def _fragmentation_avoid(value: Any) -> tuple[str, str]:
    if not isinstance(value, bool):
        raise ValueError(f"memory config enable_fragmentation_avoid must be True or False, "
                         f"got {value!r}")
    return "max_split_size_mb", _fmt(FRAGMENTATION_AVOID_SPLIT_MB) if value else "unlimited"


def _alignment(value: Any) -> tuple[str, str]:
    if (isinstance(value, bool) or not isinstance(value, int) or value < 1
            or value > _MAX_ALIGNMENT or value & (value - 1)):
        raise ValueError(f"memory config alignment must be a power of two number of bytes in "
                         f"1..{_MAX_ALIGNMENT}, got {value!r}")
    return "round_size", _fmt(value)


# article key -> (allocator key it sets, converter returning (allocator key, text))
ARTICLE_MEMORY_KEYS = {
    "pool_size": ("pool_limit_mb", _pool_size),
    "enable_fragmentation_avoid": ("max_split_size_mb", _fragmentation_avoid),
    "alignment": ("round_size", _alignment),
}


def _allocator_settings(config: dict[str, Any]) -> dict[str, str]:
    """{allocator key: text} for a config mixing allocator and article keys;
    ValueError (before anything changes) on unknown keys, bad values, or two
    keys setting the same allocator option."""
    settings: dict[str, str] = {}
    source: dict[str, str] = {}
    for key, value in config.items():
        if key in MEMORY_CONFIG_KEYS:
            target, text = key, MEMORY_CONFIG_KEYS[key][1](value)
        elif key in ARTICLE_MEMORY_KEYS:
            target, text = ARTICLE_MEMORY_KEYS[key][1](value)
        else:
            raise ValueError(f"unknown memory config key {key!r}; valid keys: "
                             + ", ".join([*MEMORY_CONFIG_KEYS, *ARTICLE_MEMORY_KEYS]))
        if target in source:
            raise ValueError(f"memory config keys {source[target]!r} and {key!r} both set the "
                             f"allocator's {target}; give one of them")
        settings[target], source[target] = text, key
    return settings


def _device_and_backend(device: Any):
    dev = _backends.resolve_device(device)
    if dev.type == "cpu":
        raise ValueError("memory functions are for backend devices (e.g. 'acme:0'), not cpu")
    return dev, _backends.backend(dev)


def set_memory_config(device: Any = None, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Configure the caching allocator of the device's backend. Keys:
    round_size, max_split_size_mb, garbage_collection_threshold, pool_limit_mb
    (see MEMORY_CONFIG_KEYS), or the Torch-FL article's pool_size (bytes ->
    pool_limit_mb), enable_fragmentation_avoid (True -> max_split_size_mb=64,
    False -> unlimited) and alignment (power of two bytes -> round_size). Unknown keys
    or bad values raise ValueError before anything changes. The configuration is per backend (all its devices share it).
    `set_memory_config({...})` uses the current device. Returns the new config."""
    if isinstance(device, dict) and config is None:
        device, config = None, device
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict of allocator options, got {type(config).__name__}")
    settings = _allocator_settings(config)
    dev, mod = _device_and_backend(device)
    if "pool_limit_mb" in settings and settings["pool_limit_mb"] != "unlimited":
        import torch

        capacity = torch.accelerator.get_memory_info(dev.index)[1]
        if float(settings["pool_limit_mb"]) * _MIB > capacity:
            warnings.warn(f"memory pool limit {float(settings['pool_limit_mb']):g} MiB exceeds "
                          f"{dev}'s capacity ({capacity / _MIB:g} MiB): the capacity is the "
                          f"effective limit", stacklevel=2)
    mod.native().set_memory_config(",".join(f"{k}:{v}" for k, v in settings.items()))
    return get_memory_config(device)


def get_memory_config(device: Any = None) -> dict[str, Any]:
    """The allocator configuration: {round_size: int, max_split_size_mb: float|None,
    garbage_collection_threshold: float, pool_limit_mb: float|None} (None = no limit)."""
    _, mod = _device_and_backend(device)
    raw = dict(mod.native().get_memory_config())
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "round_size":
            out[key] = int(value)
        elif key == "max_split_size_mb":
            out[key] = None if value < 0 else value
        elif key == "pool_limit_mb":
            out[key] = None if value == 0 else value
        else:
            out[key] = value
    return out


def memory_stats(device: Any = None) -> dict[str, Any]:
    """torch.accelerator.memory_stats of the device (flat 'allocated_bytes.all.current' keys)."""
    import torch

    dev, _ = _device_and_backend(device)
    return dict(torch.accelerator.memory_stats(dev.index))


def memory_allocated(device: Any = None) -> int:
    import torch

    dev, _ = _device_and_backend(device)
    return int(torch.accelerator.memory_allocated(dev.index))


def memory_reserved(device: Any = None) -> int:
    import torch

    dev, _ = _device_and_backend(device)
    return int(torch.accelerator.memory_reserved(dev.index))


def reset_peak_memory_stats(device: Any = None) -> None:
    import torch

    dev, _ = _device_and_backend(device)
    torch.accelerator.reset_peak_memory_stats(dev.index)


def empty_cache(device: Any = None) -> None:
    """Return the allocator's cached, unused blocks to the device (all devices of
    the backend; tensors still alive are not affected)."""
    _, mod = _device_and_backend(device)
    mod.native().empty_cache()


def _size(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def memory_summary(device: Any = None) -> str:
    """A readable table of the allocator's state on the device."""
    import torch

    dev, mod = _device_and_backend(device)
    s = memory_stats(dev)
    free, total = torch.accelerator.get_memory_info(dev.index)

    def g(key: str) -> float:
        return s.get(key, 0)

    rows = [
        ("allocated memory", _size(g("allocated_bytes.all.current")),
         _size(g("allocated_bytes.all.peak"))),
        ("active memory", _size(g("active_bytes.all.current")), _size(g("active_bytes.all.peak"))),
        ("reserved memory", _size(g("reserved_bytes.all.current")),
         _size(g("reserved_bytes.all.peak"))),
        ("inactive split memory", _size(g("inactive_split_bytes.all.current")),
         _size(g("inactive_split_bytes.all.peak"))),
        ("allocations", f"{int(g('allocation.all.current'))}", f"{int(g('allocation.all.peak'))}"),
        ("segments", f"{int(g('segment.all.current'))}", f"{int(g('segment.all.peak'))}"),
    ]
    cfg = get_memory_config(dev)
    lines = [f"memory summary of {dev} ({mod.DESCRIPTOR.get('display_name', dev.type)})",
             f"device memory: {_size(total - free)} used of {_size(total)} ({_size(free)} free)",
             f"{'':<22}  {'current':>12}  {'peak':>12}"]
    lines += [f"{name:<22}  {cur:>12}  {peak:>12}" for name, cur, peak in rows]
    lines += [
        f"{'allocs / frees':<22}  {int(g('allocation.all.allocated'))} / "
        f"{int(g('allocation.all.freed'))}",
        f"{'segment allocs/frees':<22}  {int(g('segment.all.allocated'))} / "
        f"{int(g('segment.all.freed'))}",
        f"{'OOMs':<22}  {int(g('num_ooms'))}",
        f"{'alloc retries':<22}  {int(g('num_alloc_retries'))}",
        "config: " + ", ".join(f"{k}={'unlimited' if v is None else v}" for k, v in cfg.items()),
    ]
    return "\n".join(lines)
