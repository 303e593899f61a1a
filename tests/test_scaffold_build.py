"""A freshly scaffolded backend builds with scikit-build-core and runs tensor ops;
filling one kernel makes it native. This is the vendor's first hour, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.build

RELU_KERNEL = """\
// relu for the zeta device: the vendor's first kernel.
#include "kernels.h"

#include <ATen/ops/empty.h>

namespace zeta::kernels {

at::Tensor k_relu(const at::Tensor & self) {
  TORCH_CHECK(self.scalar_type() == at::kFloat, "zeta: relu: dtype ", self.scalar_type(),
              " not supported on ", self.device(), " (float32 only)");
  at::Tensor src = self.contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options());
  const float* in = src.const_data_ptr<float>();
  float* result = out.data_ptr<float>();
  for (int64_t i = 0; i < src.numel(); ++i) result[i] = in[i] > 0.f ? in[i] : 0.f;
  return out;
}

}  // namespace zeta::kernels
"""

RUN_ON_DEVICE = """\
import json, torch, torch_fl_zeta
import torch_fl_zeta._C as native
torch_fl_zeta.load()
x = torch.ones(4, device="zeta")
added = (x + 1).cpu().tolist()
native.clear_fallback_log()
r = torch.relu(torch.tensor([-1.0, 2.0, -3.0, 4.0]).to("zeta")).cpu().tolist()
print(json.dumps({"added": added, "relu": r,
                  "fallback": sorted(e["op"] for e in native.fallback_log())}))
"""


def _flsdk(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _build_and_run(root: Path, site: Path) -> dict:
    wheels = root.parent / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "-w", str(wheels), str(root)],
        capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheel = sorted(wheels.glob("torch_fl_zeta-*.whl"), key=os.path.getmtime)[-1]
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    # Autoload off: the test venv has acme installed, and one process holds
    # one PrivateUse1 backend. The autoload path is tested on acme's wheel.
    env = dict(os.environ, PYTHONPATH=str(site), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", RUN_ON_DEVICE], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_scaffold_build_run_then_fill_a_kernel(tmp_path):
    root = tmp_path / "zeta"
    _flsdk("new-backend", "zeta", "--out", str(root))
    first = _build_and_run(root, tmp_path / "site1")
    assert first["added"] == [2.0, 2.0, 2.0, 2.0]
    assert first["relu"] == [0.0, 2.0, 0.0, 4.0]
    assert "relu" in first["fallback"], "an unfilled stub must run on the CPU fallback"
    statuses = json.loads(_flsdk("ops", "--format", "json", cwd=root))
    assert {r["op"]: r["status"] for r in statuses["ops"]}["relu"] == "stub"

    (root / "kernels" / "relu.cpp").write_text(RELU_KERNEL)
    _flsdk("gen", cwd=root)
    statuses = json.loads(_flsdk("ops", "--format", "json", cwd=root))
    assert {r["op"]: r["status"] for r in statuses["ops"]}["relu"] == "native"
    second = _build_and_run(root, tmp_path / "site2")
    assert second["relu"] == [0.0, 2.0, 0.0, 4.0]
    assert "relu" not in second["fallback"], "a filled kernel must run natively"
