"""Warnings about a backend that loads but is probably not what was meant.

`check_backend(root)` loads the backend (SpecErrors propagate; custom op schemas
are also given to PyTorch's own parser) and returns
human-readable warnings, each `file:line: message`, for things that are
legal yet suspicious: nothing here stops code generation.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .adapter_versions import check_descriptor
from .errors import SpecErrors
from .loader import check_schemas_with_torch, load_backend


def check_backend(root: str | Path, canonical: Iterable[str | Path] | None = None) -> list[str]:
    """Load the backend at `root` and return warnings (raises SpecErrors on errors).

    `canonical` as in load_backend."""
    backend = load_backend(root, canonical)
    check_schemas_with_torch(backend.all_ops)
    desc = backend.descriptor
    # the adapter headers' versions vs the ones the backend's adapters were written for
    warnings, version_errors = check_descriptor(desc)
    if version_errors:
        raise SpecErrors(version_errors)

    stems: set[tuple[str, str]] = set()
    for spec in backend.all_ops:
        stem = Path(spec.file).stem
        if spec.family != stem and (spec.file, spec.family) not in stems:
            stems.add((spec.file, spec.family))
            warnings.append(f"{spec.file}:1: family {spec.family!r} differs from the file name {stem!r}")

    for spec in backend.ops:
        where = f"{spec.file}:{spec.line}"
        common = backend.dtypes_for(spec)
        if not common:
            warnings.append(f"{where}: {spec.op}: no dtype in common with the device "
                            f"({', '.join(spec.dtypes)} vs {', '.join(desc.dtypes)}); it always falls back to CPU")
        if spec.autocast == "lower_precision_fp" and not desc.amp_dtypes:
            warnings.append(f"{where}: {spec.op}: autocast lower_precision_fp but the device has no amp_dtypes")
        if spec.skip_conformance:
            warnings.append(f"{where}: {spec.op}: conformance skipped: {spec.skip_conformance}")
        elif not spec.samples:
            warnings.append(f"{where}: {spec.op}: no samples, conformance tests cannot exercise it")

    fb = desc.fallback
    if fb.mode == "deny" and fb.deny:
        warnings.append(f"{desc.file}: fallback.deny has no effect in mode deny (only `allow` is used)")
    if fb.mode == "allow" and fb.allow:
        warnings.append(f"{desc.file}: fallback.allow has no effect in mode allow (only `deny` is used)")
    native_names = {spec.op for spec in backend.ops}
    native_names.update(v for spec in backend.ops for v in spec.variant_ops.values())
    for entry in fb.deny if fb.mode == "allow" else ():
        if entry in native_names:
            warnings.append(f"{desc.file}: fallback.deny lists {entry!r}, which has a native kernel anyway")
    return warnings
