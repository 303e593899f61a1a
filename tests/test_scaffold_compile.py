"""A freshly scaffolded backend (device.yaml `compile: {codegen: cpp}`) runs
torch.compile with the default backend: Inductor's C++ kernels on its memory.
Slow: it builds the scaffold's wheel and compiles a model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

pytestmark = [pytest.mark.build, pytest.mark.slow]

COMPILE_ON_DEVICE = """\
import json, torch, torch_fl_zeta
torch_fl_zeta.load()
import torch_fl
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                            torch.nn.Linear(16, 4)).to("zeta")
x = torch.randn(5, 8).to("zeta")
eager = model(x)
compiled = torch.compile(model)(x)
graph = torch_fl.get_optimized_graph()
print(json.dumps({"device": str(compiled.device),
                  "max_diff": (compiled.cpu() - eager.cpu()).abs().max().item(),
                  "graph_device": graph.device, "fused": graph.fused_kernels,
                  "extern": graph.extern_calls}))
"""


def test_scaffold_compiles_a_small_model(tmp_path):
    root = tmp_path / "zeta"
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "new-backend", "zeta", "--out", str(root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "compile: {codegen: cpp}" in (root / "device.yaml").read_text()
    wheels = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                           "-q", "-w", str(wheels), str(root)], capture_output=True, text=True,
                          timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    site = tmp_path / "site"
    with zipfile.ZipFile(next(wheels.glob("torch_fl_zeta-*.whl"))) as zf:
        zf.extractall(site)
    env = dict(os.environ, PYTHONPATH=str(site), TORCH_DEVICE_BACKEND_AUTOLOAD="0",
               TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    proc = subprocess.run([sys.executable, "-c", COMPILE_ON_DEVICE], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["device"] == "zeta:0" and result["graph_device"] == "zeta"
    assert result["max_diff"] < 1e-5
    assert result["fused"] >= 1 and any("mm" in e for e in result["extern"]), result
