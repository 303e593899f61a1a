"""The release path a scaffolded backend (and acme) gets: scripts/release.py builds a
manylinux wheel with torch's libraries left out, pinned to the torch it was built
for, and checks it autoloads in a fresh venv holding only torch; the torch pin,
the generated loader and torch_fl's compat check agree."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
import torch

from torch_fl import compat

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "cookiecutter-backend" / "{{cookiecutter.name}}"
ACME = REPO / "examples" / "acme_backend"


def _scaffold(tmp_path: Path, name: str = "zeta") -> Path:
    root = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "new-backend", name, "--out", str(root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def _release(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "scripts" / "release.py"), *args],
                          cwd=root, capture_output=True, text=True, timeout=timeout)


def _pins(root: Path) -> tuple[str, str, list[str]]:
    """(torch pin of pyproject.toml, TORCH_VERSION of the generated loader, test extra)."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    pin = [d.split("==", 1)[1] for d in project["dependencies"] if d.startswith("torch==")]
    package = project["name"].replace("-", "_")
    text = (root / package / "_generated" / "backend.py").read_text()
    generated = re.search(r'^TORCH_VERSION = "([^"]+)"$', text, re.M).group(1)
    assert len(pin) == 1, project["dependencies"]
    return pin[0], generated, project["optional-dependencies"]["test"]


def _admits(spec: str, version: str) -> bool:
    """Whether the compatible-release requirement `flsdk~=X.Y.Z` admits `version`."""
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(spec.split("flsdk", 1)[1]).contains(version, prereleases=True)


@pytest.mark.parametrize("which", ["scaffold", "acme"])
def test_torch_pin_generated_loader_and_compat_check_agree(tmp_path, which):
    root = _scaffold(tmp_path) if which == "scaffold" else ACME
    pin, generated, test_extra = _pins(root)
    # The wheel's pin, what load() and compat_matrix compare with the running torch,
    # and the torch here are one release.
    assert pin == compat._base(generated) == compat._base(torch.__version__)
    # torch_fl (in the flsdk distribution) is declared for the tests, and the
    # requirement admits exactly the releases torch_fl's compat check accepts.
    flsdk_req = [r for r in test_extra if r.startswith("flsdk")]
    assert flsdk_req == ["flsdk~=0.1.0"], test_extra
    assert {"pytest>=7", "numpy", "expecttest"} <= set(test_extra), "the OpInfo suite needs numpy, expecttest"
    import torch_fl

    assert _admits(flsdk_req[0], torch_fl.__version__)
    for version, same_release in (("0.1.7", True), ("0.2.0", False), ("1.1.0", False)):
        assert _admits(flsdk_req[0], version) == same_release, version
        assert (compat._release(version) == compat._release(torch_fl.__version__)) == same_release


def test_acme_uses_the_scaffold_release_script():
    # One release script for every backend (it reads pyproject.toml): acme's copy
    # is the scaffold's, so what acme runs is what a vendor gets.
    assert (ACME / "scripts" / "release.py").read_text() == \
        (TEMPLATE / "scripts" / "release.py").read_text()
    # Libraries of other wheels acme depends on are left out of the repair.
    release = tomllib.loads((ACME / "pyproject.toml").read_text())["tool"]["flsdk"]["release"]
    assert release["exclude"] == ["libscipy_openblas.so"]


def test_build_refuses_a_pin_the_generated_loader_disagrees_with(tmp_path):
    root = _scaffold(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('dependencies = ["torch==2.13.0"]',
                                                       'dependencies = ["torch==2.12.0"]'))
    proc = _release(root, "build")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "torch versions disagree" in proc.stderr
    assert "pyproject.toml pin 2.12.0" in proc.stderr and "generated/ (flsdk gen) 2.13.0" in proc.stderr
    assert not (root / "dist" / "raw").exists() or not list((root / "dist" / "raw").iterdir()), \
        "nothing may be built after a refusal"


def test_workflow_template_builds_tests_and_publishes(tmp_path):
    import yaml

    root = _scaffold(tmp_path)
    flow = yaml.safe_load((root / ".github" / "workflows" / "release.yml").read_text())
    assert flow["env"] == {"DEVICE": "zeta", "FLSDK": "flsdk~=0.1.0"}
    wheels, test, publish = (flow["jobs"][k] for k in ("wheels", "test", "publish"))
    assert wheels["strategy"]["matrix"]["tag"] == ["cp310-cp310", "cp311-cp311", "cp312-cp312",
                                                   "cp313-cp313"]
    assert "manylinux_2_28" in wheels["container"]
    runs = "\n".join(s.get("run", "") for s in wheels["steps"] + test["steps"])
    for needle in ("scripts/release.py pin", "flsdk gen --check", "scripts/release.py build",
                   "scripts/release.py check", "pytest", "flsdk\" conformance --opinfo"):
        assert needle in runs, needle
    assert "torch==2.13.0" not in runs, "the pin is read from pyproject.toml, not repeated"
    assert publish["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert publish["needs"] == "test"


def _runpath(so_bytes: bytes) -> str:
    import io

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(so_bytes))
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                    return tag.runpath if tag.entry.d_tag == "DT_RUNPATH" else tag.rpath
    return ""


# Slow (5 min on 2 cores: a release build, auditwheel, a fresh venv): the default run
# builds and loads scaffolds in test_scaffold_build / test_first_day instead.
@pytest.mark.slow
@pytest.mark.build
def test_release_builds_a_manylinux_wheel_that_autoloads_in_a_fresh_venv(tmp_path):
    root = _scaffold(tmp_path)
    proc = _release(root, "build", timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list((root / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert re.fullmatch(rf"torch_fl_zeta-0\.1\.0-{tag}-{tag}-manylinux_2_\d+_x86_64\.whl", wheel.name), \
        wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        # torch's libraries are not grafted (nothing is, for the scaffold)
        assert not [n for n in names if ".libs/" in n], names
        ext = [n for n in names if re.fullmatch(r"torch_fl_zeta/_C\..*\.so", n)]
        assert len(ext) == 1, names
        # RPATH policy: torch's libraries through the installed torch package only
        assert _runpath(zf.read(ext[0])) == "$ORIGIN/../torch/lib"
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        loader = zf.read("torch_fl_zeta/_generated/backend.py").decode()
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert "Requires-Dist: torch==2.13.0" in requires
    assert 'Requires-Dist: flsdk~=0.1.0; extra == "test"' in requires, requires
    assert re.search(r'^TORCH_VERSION = "2\.13\.0', loader, re.M)

    proc = _release(root, "check", str(wheel), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["autoloaded"] and report["loaded"] and report["error"] is None, report
    assert report["result"] == [2.0] * 4 and report["device"] == "zeta:0"
    assert report["module"].startswith(report["venv"]), "imported from the fresh venv"
    assert not Path(report["venv"]).exists(), "the check's own venv is removed afterwards"


def test_compat_check_reads_the_wheel_pin_and_flags_a_disagreeing_one(monkeypatch):
    import importlib.metadata
    import types
    import warnings

    from torch_fl import _backends

    def fake(name, built_for):
        mod = types.ModuleType(f"fake_{name}")
        mod.NAME, mod.PACKAGE, mod.TORCH_VERSION = name, f"torch_fl_{name}", built_for
        mod.FLSDK_VERSION = compat._torch_fl_version()
        return _backends.BackendEntry(name, f"torch_fl_{name}._generated.backend",
                                      f"torch-fl-{name}", module=mod)

    pins = {"torch-fl-good": ["torch==2.13.0", 'flsdk~=0.1.0; extra == "test"'],
            "torch-fl-bad": ["torch==2.12.0"], "torch-fl-gone": ["torch==2.13.0"]}
    monkeypatch.setattr(importlib.metadata, "requires", lambda dist: pins[dist])
    gone = _backends.BackendEntry("gone", "torch_fl_gone._generated.backend", "torch-fl-gone",
                                  import_error="cannot import torch_fl_gone: ModuleNotFoundError")
    monkeypatch.setattr(_backends, "_entries", [fake("good", "2.13.0+cpu"), fake("bad", "2.13.0+cpu"), gone])
    rows = {r["name"]: r for r in compat.compat_matrix(load=False)}
    assert rows["gone"]["pin_ok"], "a backend that cannot be imported has nothing to compare"
    assert rows["good"]["pinned"] == "2.13.0" and rows["good"]["pin_ok"]
    assert rows["bad"]["pinned"] == "2.12.0" and not rows["bad"]["pin_ok"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = compat.warn_if_incompatible()
    assert problems == ["torch_fl_bad requires torch==2.12.0 but was built for torch 2.13.0+cpu: "
                        "a broken release; rebuild it with scripts/release.py, which refuses such a wheel"]
    assert [str(w.message) for w in caught] == problems


def _fake_wheel(tmp_path: Path, rpath: str, requires: str = "torch==2.13.0") -> Path:
    """A linux_x86_64 wheel of torch_fl_zeta whose extension is a tiny C library
    linked with the given RPATH (what a vendor's cmake/vendor.cmake could add)."""
    import base64
    import hashlib
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    so = tmp_path / "_C.cpython-311-x86_64-linux-gnu.so"
    tmp_path.mkdir(parents=True)
    src = tmp_path / "c.c"
    src.write_text("int zeta_answer(void) { return 42; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src), f"-Wl,-rpath,{rpath}"],
                   check=True)
    files = {
        "torch_fl_zeta/_C.cpython-311-x86_64-linux-gnu.so": so.read_bytes(),
        "torch_fl_zeta-0.1.0.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: torch-fl-zeta\nVersion: 0.1.0\nRequires-Dist: {requires}\n".encode(),
        "torch_fl_zeta-0.1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("torch_fl_zeta-0.1.0.dist-info/RECORD,,")
    wheel = tmp_path / "raw" / "torch_fl_zeta-0.1.0-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("torch_fl_zeta-0.1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_repair_refuses_a_build_machine_rpath_and_leaves_no_wheel(tmp_path):
    root = _scaffold(tmp_path)
    good = _release(root, "repair", str(_fake_wheel(tmp_path / "a", "$ORIGIN/../torch/lib")),
                    "-w", str(tmp_path / "ok"))
    assert good.returncode == 0, good.stdout + good.stderr
    (made,) = (tmp_path / "ok").glob("*.whl")
    assert made.name.startswith("torch_fl_zeta-0.1.0-cp311-cp311-manylinux"), made.name

    bad = _release(root, "repair", str(_fake_wheel(tmp_path / "b", "/opt/build/lib:$ORIGIN/../torch/lib")),
                   "-w", str(tmp_path / "out"))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "searches ['/opt/build/lib'] at run time: a path of the build machine" in bad.stderr
    assert not list((tmp_path / "out").glob("*.whl")), "a refused wheel is removed"

    unpinned = _release(root, "repair", str(_fake_wheel(tmp_path / "c", "$ORIGIN/../torch/lib", "torch")),
                        "-w", str(tmp_path / "out"))
    assert unpinned.returncode == 1 and "expected torch==2.13.0" in unpinned.stderr, unpinned.stderr
