"""Finding the vendor's kernels under kernels/: native, stub, or missing.

flsdk never parses C++ for real; it looks for definitions by name. A kernel
`k_add_Tensor` is defined where a line reads `... k_add_Tensor(...) {`.
A file carrying `// flsdk:stub` markers is a stub file: it is not compiled,
and the kernels it defines are stubs (their ops run on the CPU fallback).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

STUB_MARKER = "flsdk:stub"
DEFINITION_RE = re.compile(r"\b(k_[A-Za-z0-9_]+)\s*\(([^;{}]*)\)\s*(?:const\s*)?\{")
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx")


@dataclass
class KernelScan:
    native: dict[str, str] = field(default_factory=dict)   # kernel -> file defining it
    stubs: dict[str, str] = field(default_factory=dict)    # kernel -> stub file
    compiled_files: list[str] = field(default_factory=list)
    stub_files: list[str] = field(default_factory=list)
    # stub file -> the compiled file that now defines its kernel (safe to delete)
    superseded: dict[str, str] = field(default_factory=dict)

    def status(self, kernel: str) -> str:
        if kernel in self.native:
            return "native"
        if kernel in self.stubs:
            return "stub"
        return "missing"


def scan_kernels(root: Path) -> KernelScan:
    scan = KernelScan()
    kernels_dir = Path(root) / "kernels"
    if not kernels_dir.is_dir():
        return scan
    for path in sorted(kernels_dir.rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        text = path.read_text(errors="replace")
        defined = {m.group(1) for m in DEFINITION_RE.finditer(text)}
        if STUB_MARKER in text:
            scan.stub_files.append(rel)
            for name in defined:
                scan.stubs.setdefault(name, rel)
        else:
            scan.compiled_files.append(rel)
            for name in defined:
                scan.native[name] = rel
    # A kernel defined in a compiled file is native even if a stub file remains.
    for name in list(scan.stubs):
        if name in scan.native:
            scan.superseded[scan.stubs.pop(name)] = scan.native[name]
    return scan


@dataclass(frozen=True)
class DeviceSource:
    """A kernel file in the device's own language (device.yaml device_code), embedded
    by flsdk gen into generated/device_sources.cpp for the driver to compile at run time."""

    path: str        # relative to the backend root, with /: "kernels/pointwise.cl"
    text: str
    sha256: str
    delimiter: str   # of the C++ raw string literal holding `text` (one it never contains)


def scan_device_sources(root: Path, suffixes: tuple[str, ...]) -> list[DeviceSource]:
    """Every file under kernels/ ending in one of `suffixes`, sorted by path."""
    import hashlib

    kernels_dir = Path(root) / "kernels"
    if not suffixes or not kernels_dir.is_dir():
        return []
    found = []
    for path in sorted(kernels_dir.rglob("*")):
        if not path.is_file() or not path.name.endswith(tuple(suffixes)):
            continue
        data = path.read_bytes()
        text = data.decode("utf-8", errors="strict")
        delimiter, n = "flsdk", 0
        while f"){delimiter}\"" in text:  # a raw string ends at )delim": pick one the text lacks
            n += 1
            delimiter = f"flsdk{n}"
        found.append(DeviceSource(path=path.relative_to(root).as_posix(), text=text,
                                  sha256=hashlib.sha256(data).hexdigest(), delimiter=delimiter))
    return found
