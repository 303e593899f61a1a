"""What the last `flsdk gen` of a backend read and wrote, so a gen with nothing to
do returns at once.

A full gen loads device.yaml and every op spec (JSON Schema validation), imports
torch to parse custom schemas and torchgen's native_functions.yaml for the
signatures: seconds, though most runs change nothing (the build runs
`flsdk gen --check`, editors run it on save). Like make, the last successful gen
records a digest of everything it read and the content hash of everything it
wrote; when the inputs' digest is the same and every output still has its
recorded content, the outputs are what a full gen would write, so nothing runs.

What a gen reads: the backend's device.yaml, opspec/ and kernels/ (kernel scan,
signature check), the canonical op specs and schemas, flsdk's and torch_fl's
sources (templates, static glue, the Python glue, the tables and the code that
renders them) and the installed torch's version. Anything else (the state lost,
an output edited or deleted, a file in generated/ it did not write, `--force`)
takes the full path, which is always correct. The state lives in flsdk's cache directory (flsdk.spec.aten.cache_dir),
one file per backend root: never in the vendor's repository.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from pathlib import Path

from flsdk import __version__ as FLSDK_VERSION
from flsdk.spec.aten import cache_dir
from flsdk.spec.paths import opspec_dir

_FORMAT = 1
# The packages whose sources shape generated output (flsdk renders; torch_fl's
# backend_glue and _tables are copied or read).
_PACKAGES = (Path(__file__).resolve().parents[1], Path(__file__).resolve().parents[2] / "torch_fl")
_SOURCE_SUFFIXES = {".py", ".j2", ".cpp", ".h", ".hpp", ".cc", ".cmake", ".json", ".yaml", ".txt", ".md"}


def _files_under(folder: Path, suffixes: set[str] | None = _SOURCE_SUFFIXES) -> list[Path]:
    """Files under `folder` (with one of `suffixes`; None: every file)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and (suffixes is None or p.suffix in suffixes))


def inputs_digest(root: Path) -> str:
    """One hash of everything a gen of `root` reads (see the module docstring)."""
    h = hashlib.sha256()
    h.update(f"format {_FORMAT} flsdk {FLSDK_VERSION} torch {_torch_version()}\n".encode())
    # every file of the backend's own folders: kernels may be in any language the
    # device compiles (device.yaml device_code: .cl, ...), and gen embeds those
    backend_files = [root / "device.yaml"] + _files_under(root / "opspec", None) + \
        _files_under(root / "kernels", None)
    for base, files in [(root, backend_files), (opspec_dir(), _files_under(opspec_dir()))] + \
            [(package.parent, _files_under(package)) for package in _PACKAGES]:
        for path in files:
            try:
                data = path.read_bytes()
            except OSError:
                data = b"<unreadable>"
            h.update(f"{path.relative_to(base).as_posix()} {len(data)}\n".encode())
            h.update(data)
    return h.hexdigest()


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _state_path(root: Path) -> Path:
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:20]
    return cache_dir() / "gen-state" / f"{key}.json"


def content_hash(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def load(root: Path, digest: str) -> dict | None:
    """The recorded summary of the last gen when its inputs had `digest` and every
    output it recorded still has the content it wrote; None otherwise."""
    if os.environ.get("FLSDK_NO_CACHE"):
        return None
    try:
        state = json.loads(_state_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if state.get("format") != _FORMAT or state.get("root") != str(root.resolve()) \
            or state.get("digest") != digest:
        return None
    outputs = state.get("outputs", {})
    if not outputs or any(content_hash(root / rel) != sha for rel, sha in outputs.items()):
        return None
    # a file in generated/ the last gen did not write may be one an older gen wrote
    # (the full path removes those) or the vendor's own (it keeps them)
    try:
        present = {f"generated/{name}" for name in os.listdir(root / "generated")
                   if (root / "generated" / name).is_file()}
    except OSError:
        return None
    if not present <= set(outputs):
        return None
    return state


def save(root: Path, digest: str, outputs: list[str], summary: dict) -> None:
    """Record a successful gen. A state that cannot be written costs speed only."""
    hashes = {rel: content_hash(root / rel) for rel in sorted(outputs)}
    if any(sha is None for sha in hashes.values()):
        return
    state = {"format": _FORMAT, "root": str(root.resolve()), "digest": digest, "outputs": hashes,
             "summary": summary}
    target = _state_path(root)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".gen-state-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f)
        os.replace(tmp, target)
    except OSError:
        pass


def forget(root: Path) -> None:
    try:
        _state_path(root).unlink()
    except OSError:
        pass
