"""Helpers of the tests that scaffold and build a backend (`zeta`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path


def flsdk(*args, cwd=None) -> str:
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def build_into(root: Path, site: Path, log: Path | None = None, **env: str) -> None:
    """Build the backend at `root` into a wheel and extract it into `site`. With
    `log`, the build is verbose (pip -v: everything CMake and the compilers print)
    and its output is kept there; `env` adds environment variables."""
    wheels = root.parent / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v" if log else "-q",
         "-w", str(wheels), str(root)],
        capture_output=True, text=True, timeout=1500, env=dict(os.environ, **env))
    if log:
        log.write_text(proc.stdout + proc.stderr)
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


def guide_kernel(root: Path) -> str:
    """The kernel of the scaffold's docs/writing-a-kernel.md (its first C++
    block, `kernels/relu.cpp`), as a vendor copies it."""
    guide = (root / "docs" / "writing-a-kernel.md").read_text()
    code = re.search(r"```cpp\n(// kernels/relu\.cpp\n.*?)```", guide, re.S)
    assert code, "docs/writing-a-kernel.md has no kernels/relu.cpp example"
    return code.group(1)


def run_discrete_cases(site: Path, device: str = "zeta") -> tuple[dict, str]:
    """tests/support/discrete_cases.py in a child with the backend at `site` loaded:
    ({case: "ok" | error}, stderr). A crash (a host read of device memory) fails."""
    code = (f"import sys, runpy, torch_fl_{device}; torch_fl_{device}.load(); "
            f"sys.argv = ['discrete_cases', '{device}']; "
            f"runpy.run_path({str(Path(__file__).parent / 'discrete_cases.py')!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], env=site_env(site), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr
