"""Rules for a backend's name.

The name becomes the torch device type string ("acme" in
`torch.device("acme")`), a C++ namespace, the attribute `torch.<name>` and the
package `torch_fl_<name>`; it must be valid in all of them and must not take
a device type or `torch` attribute that already exists.
"""

from __future__ import annotations

import functools
import importlib.util
import keyword
import re
from pathlib import Path

# torch device type strings (c10/core/DeviceType.h and its parser).
TORCH_DEVICE_TYPES = frozenset({
    "cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla",
    "vulkan", "metal", "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu", "mtia",
    "privateuseone",
})

CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
char16_t char32_t class compl concept const consteval constexpr constinit const_cast
continue co_await co_return co_yield decltype default delete do double dynamic_cast
else enum explicit export extern false float for friend goto if inline int long
mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
public register reinterpret_cast requires return short signed sizeof static
static_assert static_cast struct switch template this thread_local throw true try
typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
xor_eq
""".split())

# Namespaces/packages the generated code already uses.
TAKEN = frozenset({"torch", "aten", "at", "c10", "std", "caffe2", "torchgen", "flsdk", "torch_fl"})

# torch.distributed backends that exist without any plugin; registering one
# of these names again fails at import of the backend.
BUILTIN_COMM_BACKENDS = frozenset({"gloo", "nccl", "mpi", "ucc", "xccl", "fake", "undefined"})

# PyTorch parses a device string as letters and underscores, then an optional
# ":index" (c10/core/Device.cpp): "qlx7" would be accepted by
# rename_privateuse1_backend and then refused by torch.device("qlx7").
_NAME_RE = re.compile(r"^[a-z][a-z_]*$")


@functools.lru_cache(maxsize=1)
def _torch_toplevel() -> frozenset[str]:
    """Names of torch's top-level modules (`torch.nn`, `torch.cuda`, ...),
    found on disk so that checking a name does not import torch."""
    spec = importlib.util.find_spec("torch")
    names: set[str] = set()
    for location in (spec.submodule_search_locations or []) if spec else []:
        for entry in Path(location).iterdir():
            stem = entry.name.split(".")[0]
            if entry.is_dir() or entry.suffix == ".py":
                names.add(stem)
    return frozenset(n for n in names if not n.startswith("_"))


def backend_name_problem(name: str) -> str | None:
    """Why `name` cannot be a backend name, or None if it can."""
    if not _NAME_RE.match(name):
        if re.match(r"^[a-z][a-z0-9_]*$", name):
            return (f"{name!r} has a digit: PyTorch device strings are letters and _ only "
                    f"(torch.device({name!r}) would be refused)")
        return f"{name!r} is not a lowercase name of letters and _"
    if name in TORCH_DEVICE_TYPES:
        return f"{name!r} is a torch device type already"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"{name!r} is a Python keyword"
    if name in CPP_KEYWORDS:
        return f"{name!r} is a C++ keyword"
    if name in TAKEN:
        return f"{name!r} is used by torch or flsdk"
    if name in _torch_toplevel():
        return f"{name!r} would clash with the module torch.{name}"
    return None
