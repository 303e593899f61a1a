"""`python -m torch_fl.demo`, the README's main job, runs end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import torch_fl
from torch_fl import _backends

DEVICE = _backends.first_device()


@pytest.mark.skipif(DEVICE is None, reason="no flsdk backend installed or loadable")
def test_demo_trains_on_the_device_and_reports():
    out = subprocess.run([sys.executable, "-m", "torch_fl.demo"], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert f"training on {DEVICE}" in text
    steps = [line.split() for line in text.splitlines() if line[:4].strip() in ("1", "2", "3")
             and len(line.split()) == 4]
    assert len(steps) == 3, text
    for _, on_dev, on_cpu, _ in steps:
        # same weights and data: the device tracks the CPU closely
        assert abs(float(on_dev) - float(on_cpu)) < 1e-2 * max(1.0, abs(float(on_cpu)))
    assert "CPU fallback: on" in text
    assert "first divergent layer (forward):" in text


def test_demo_without_backend_exits_1_with_a_message(tmp_path):
    # Hide every installed backend: an empty entry point group.
    env = dict(os.environ)
    code = ("import torch_fl._backends as b; b._entries = []; "
            "b._privateuse1_owner = lambda: None; "
            "import sys, torch_fl.demo as d; sys.exit(d.main([]))")
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no flsdk device backend is installed" in out.stderr
    assert torch_fl.__version__ in out.stdout
