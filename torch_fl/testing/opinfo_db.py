"""Where the OpInfos come from: PyTorch's own `op_db` from the installed torch,
or a vendor's list (a Python file defining a list of OpInfo objects, given as
"path/to/file.py:NAME"; NAME defaults to OPS)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .opinfo_check import opinfo_id

__all__ = ["load_op_db"]


def load_op_db(source: str | None = None) -> list[tuple[str, object]]:
    """[(op id, OpInfo)] in op_db order; ids are unique ("name.variant")."""
    if source is None:
        try:
            from torch.testing._internal.common_methods_invocations import op_db
        except ImportError as exc:
            raise RuntimeError(
                f"cannot import PyTorch's OpInfo database ({exc}); it needs numpy and "
                "expecttest: pip install numpy expecttest") from exc
        ops = op_db
    else:
        path, _, name = source.partition(":")
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"op_db file {file} does not exist")
        spec = importlib.util.spec_from_file_location(f"_flsdk_op_db_{file.stem}", file)
        if spec is None or spec.loader is None:  # not a .py file: importlib finds no loader
            raise ValueError(f"op_db file {file} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        try:
            ops = getattr(module, name or "OPS")
        except AttributeError:
            raise ValueError(f"{file} defines no list {name or 'OPS'!r} of OpInfos") from None
    out: list[tuple[str, object]] = []
    seen: set[str] = set()
    for op in ops:
        oid = opinfo_id(op)
        if oid in seen:
            raise ValueError(f"two OpInfos share the id {oid!r} (name.variant_test_name)")
        seen.add(oid)
        out.append((oid, op))
    return out
