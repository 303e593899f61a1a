"""Which installed backends fit the running torch.

A backend is compiled against one exact torch (its C++ ABI is not stable), and
its generated `load()` refuses any other torch with a BackendLoadError. This
module shows that per backend without needing to load anything, and turns a
refusal into one clear message.

    >>> print(torch_fl.compat_report())
    backend  package        built for   running     status
    acme     torch_fl_acme  2.13.0+cpu  2.13.0+cpu  ok
"""

from __future__ import annotations

from typing import Any

from . import _backends

__all__ = ["compat_matrix", "compat_report", "check_compat", "IncompatibleBackendError"]


class IncompatibleBackendError(RuntimeError):
    """The backend cannot run with the installed torch (or failed to load)."""


def _base(version: str | None) -> str | None:
    return version.split("+", 1)[0] if version else None


def compat_matrix(load: bool = True) -> list[dict[str, Any]]:
    """One row per installed backend: {name, package, built_for, running,
    version_ok, loaded, error}. version_ok compares the torch release the
    backend was built for with the running one (local tags like '+cpu' are
    ignored, as the generated loader does). With load=True each backend is also
    loaded, and `error` holds its refusal or failure message (None if it loaded)."""
    import torch

    running = torch.__version__
    rows = []
    for entry in _backends.entries():
        built_for = getattr(entry.module, "TORCH_VERSION", None)
        row = {
            "name": entry.name,
            "package": _backends.package_of(entry),
            "built_for": built_for,
            "running": running,
            "version_ok": built_for is not None and _base(built_for) == _base(running),
            "loaded": False,
            "error": entry.import_error,
        }
        if entry.module is not None:
            if load:
                row["loaded"], row["error"] = _backends.try_load(entry)
            elif not row["version_ok"]:
                row["error"] = (f"built for torch {built_for}, running {running}")
        rows.append(row)
    return rows


def compat_report(load: bool = True) -> str:
    """compat_matrix() as a table, with the reason of every failure below it."""
    rows = compat_matrix(load)
    if not rows:
        return "no flsdk backend installed (no 'torch_fl.backends' entry point)"
    header = ("backend", "package", "built for", "running", "status")
    table = []
    for r in rows:
        if r["error"]:
            status = "REFUSED" if not r["version_ok"] else "BROKEN"
        else:
            status = "ok" if r["version_ok"] else "MISMATCH"
        table.append((r["name"], r["package"], r["built_for"] or "?", r["running"], status))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()
             for row in [header, *table]]
    for r in rows:
        if r["error"]:
            lines.append(f"{r['name']}: {r['error']}")
    return "\n".join(lines)


def check_compat(name: str | None = None) -> None:
    """Raise IncompatibleBackendError with the backend's own reason when `name`
    (or, with None, any installed backend) cannot be used with this torch."""
    rows = compat_matrix(load=True)
    if name is not None:
        rows = [r for r in rows if r["name"] == name]
        if not rows:
            raise IncompatibleBackendError(f"no installed flsdk backend named '{name}'")
    bad = [r for r in rows if r["error"] or not r["version_ok"]]
    if bad:
        raise IncompatibleBackendError("; ".join(
            f"{r['name']} ({r['package']}): " + (r["error"] or
                                                  f"built for torch {r['built_for']}, running "
                                                  f"{r['running']}")
            for r in bad))
