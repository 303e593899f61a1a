"""Helpers of the tests that scaffold and build a backend (`zeta`)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path


def flsdk(*args, cwd=None) -> str:
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def build_into(root: Path, site: Path) -> None:
    """Build the backend at `root` into a wheel and extract it into `site`."""
    wheels = root.parent / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "-w", str(wheels), str(root)],
        capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheel = sorted(wheels.glob("torch_fl_zeta-*.whl"), key=os.path.getmtime)[-1]
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)


def site_env(site: Path, **extra: str) -> dict:
    # Autoload off: the test venv has acme installed, and one process holds
    # one PrivateUse1 backend. The autoload path is tested on acme's wheel.
    # The site goes first; what the test run itself had on PYTHONPATH stays after it.
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, TORCH_DEVICE_BACKEND_AUTOLOAD="0", **extra)
