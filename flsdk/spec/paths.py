"""Where the canonical op specs and JSON Schemas live.

In the source tree (and an editable install) they are the repository's
`opspec/` directory next to the `flsdk` package; a wheel force-includes that
directory as `flsdk/_opspec` (see pyproject.toml), because the repository
root does not exist once flsdk is installed.
"""

from __future__ import annotations

from pathlib import Path

from .errors import SpecError

_PACKAGE = Path(__file__).resolve().parent.parent  # .../flsdk


def opspec_dir() -> Path:
    """The directory holding the canonical `*.yaml` op specs and `schema/`."""
    installed = _PACKAGE / "_opspec"
    if (installed / "schema").is_dir():
        return installed
    source = _PACKAGE.parent / "opspec"
    if (source / "schema").is_dir():
        return source
    raise SpecError(str(installed), None, "",
                    "flsdk installation is incomplete: no opspec directory with schema/",
                    f"{installed} (wheel) or {source} (source tree)")


def schema_dir() -> Path:
    """The directory of `opspec.schema.json` and `device.schema.json`."""
    return opspec_dir() / "schema"


def canonical_opspec_files() -> list[Path]:
    """The canonical op spec files, sorted by name (empty while none exist)."""
    return sorted(p for p in opspec_dir().glob("*.yaml") if p.is_file())
