"""The torch-fl-acme wheel as a user gets it.

Builds the wheel (incrementally: scikit-build-core reuses build/ in the
backend, under the shared build lock), installs it with torch==2.13.0 into a
FRESH venv that has no flsdk and no source tree, and checks that:
* `import torch; torch.ones(2, device="acme")` works without importing the
  backend package (autoload through the `torch.backends` entry point);
* a broken backend never breaks `import torch`, and load_error() says why;
* a second PrivateUse1 claimant gets a BackendLoadError naming both.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.build

BACKEND = Path(__file__).resolve().parents[1]
BUILD_LOCK = "/tmp/acme_build.lock"


def run(cmd, timeout, env=None, cwd=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({proc.returncode})\n"
        f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheelhouse")
    run(["flock", BUILD_LOCK, sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
         "--no-deps", "-q", "-w", str(out), str(BACKEND)], timeout=1500)
    wheels = list(out.glob("torch_fl_acme-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def fresh_python(wheel, tmp_path_factory):
    """A new venv with torch==2.13.0 (a local wheel), the acme wheel and its deps."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0", str(wheel)], timeout=900)
    return python


def user_env(**extra):
    """The environment of a user of the wheel: nothing from this repo or venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACME_", "TORCH_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def run_user(python, code, tmp_path, timeout=180, **env):
    return subprocess.run([str(python), "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=user_env(**env), cwd=tmp_path)


def test_wheel_metadata(wheel):
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = zf.read(meta).decode()
        requires = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.startswith("torch_fl_acme/_C.") and n.endswith(".so") for n in names), names
    assert "[torch.backends]" in entry_points and "torch_fl_acme:_autoload" in entry_points
    assert "[torch_fl.backends]" in entry_points
    assert "Requires-Dist: torch==2.13.0" in requires, requires


def test_fresh_venv_autoloads_the_device(fresh_python, tmp_path):
    proc = run_user(fresh_python, """
        import sys
        import torch
        x = torch.ones(2, device="acme")
        assert x.device.type == "acme", x.device
        assert torch.equal((x + 1).cpu(), torch.full((2,), 2.0))
        assert torch.accelerator.current_accelerator().type == "acme"
        assert torch.acme.device_count() == 2
        # the user never imported it: torch's autoloader did
        assert "torch_fl_acme" in sys.modules
        import torch_fl_acme
        assert torch_fl_acme.load_error() is None
        assert "flsdk" not in sys.modules and "torch_fl" not in sys.modules
        print("USER OK", torch_fl_acme.__file__)
        """, tmp_path)
    assert proc.returncode == 0 and "USER OK" in proc.stdout, proc.stderr[-3000:]
    assert "/work/main/examples" not in proc.stdout  # the installed copy, not the tree


@pytest.mark.parametrize("env, cause", [
    ({"ACME_DEVICE_COUNT": "abc"}, "ACME_DEVICE_COUNT"),
    ({"ACME_MEMORY_CAPACITY": "lots"}, "ACME_MEMORY_CAPACITY"),
])
def test_broken_backend_never_breaks_import_torch(fresh_python, tmp_path, env, cause):
    proc = run_user(fresh_python, """
        import torch
        print("IMPORT OK", flush=True)
        assert torch.ones(2).sum().item() == 2.0        # CPU torch is fine
        import torch_fl_acme
        error = torch_fl_acme.load_error()
        print("LOAD ERROR", error)
        try:
            torch.ones(2, device="acme")
        except Exception as e:                          # a clear error, not a crash
            print("DEVICE ERROR", type(e).__name__, e)
        try:
            torch_fl_acme.load()
        except torch_fl_acme._generated.backend.BackendLoadError as e:
            print("LOAD RAISES", e)
        """, tmp_path, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "IMPORT OK" in proc.stdout
    lines = {line.split(" ", 2)[0] + " " + line.split(" ", 2)[1]: line
             for line in proc.stdout.splitlines() if line.count(" ") >= 1}
    assert cause in lines.get("LOAD ERROR", ""), proc.stdout
    assert cause in lines.get("DEVICE ERROR", ""), proc.stdout
    assert cause in lines.get("LOAD RAISES", ""), proc.stdout


def test_second_privateuse1_claimant_gets_a_clear_error(fresh_python, tmp_path):
    proc = run_user(fresh_python, """
        import torch
        torch.utils.rename_privateuse1_backend("other")
        import torch_fl_acme
        from torch_fl_acme._generated.backend import BackendLoadError
        try:
            torch_fl_acme.load()
        except BackendLoadError as e:
            print("REFUSED", e)
        else:
            raise SystemExit("a second PrivateUse1 backend was loaded")
        assert torch._C._get_privateuse1_backend_name() == "other"
        print("ERROR", torch_fl_acme.load_error())
        """, tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused = next(line for line in proc.stdout.splitlines() if line.startswith("REFUSED"))
    assert "'other'" in refused and "'acme'" in refused, refused
    assert "TORCH_FL_BACKEND=acme" in refused, refused   # and what to do about it
    assert "ERROR PyTorch's PrivateUse1 slot" in proc.stdout


def test_missing_vendor_library_never_breaks_import_torch(fresh_python, tmp_path):
    """Last in this file: it uninstalls the BLAS wheel the native module links."""
    run([str(fresh_python), "-m", "pip", "uninstall", "-y", "-q", "scipy-openblas32"], timeout=120)
    proc = run_user(fresh_python, """
        import torch
        print("IMPORT OK", torch.ones(1).item(), flush=True)
        import torch_fl_acme
        print("LOAD ERROR", torch_fl_acme.load_error())
        """, tmp_path)
    assert proc.returncode == 0 and "IMPORT OK 1.0" in proc.stdout, proc.stderr[-3000:]
    error = next(line for line in proc.stdout.splitlines() if line.startswith("LOAD ERROR"))
    assert "openblas" in error.lower() and "ImportError" in error, error
