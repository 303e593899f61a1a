"""A freshly scaffolded backend builds with scikit-build-core and runs tensor ops;
filling one kernel makes it native. This is the vendor's first hour, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scaffold import build_into, flsdk, site_env

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
import copy, json, torch, torch_fl, torch_fl_zeta
import torch_fl_zeta._C as native
torch_fl_zeta.load()
x = torch.ones(4, device="zeta")
added = (x + 1).cpu().tolist()
native.clear_fallback_log()
r = torch.relu(torch.tensor([-1.0, 2.0, -3.0, 4.0]).to("zeta")).cpu().tolist()
fallback = sorted(e["op"] for e in native.fallback_log())

# Ops CPU has no kernel for: convolution_overrideable runs as CPU's convolution,
# the fused LSTM cell as a composite; forward and backward match CPU.
def step(module, inp, device):
    module = copy.deepcopy(module).to(device)
    inp = inp.detach().to(device).requires_grad_()
    out = module(inp)
    out = out[0] if isinstance(out, tuple) else out
    out.square().sum().backward()
    return [t.detach().cpu() for t in (out, inp.grad, *(p.grad for p in module.parameters()))]

def max_diff(module, inp):
    return max(float((a - b).abs().max()) for a, b in
               zip(step(module, inp, "cpu"), step(module, inp, "zeta")))

torch.manual_seed(0)
native.clear_fallback_log()
conv_diff = max_diff(torch.nn.Conv2d(3, 4, 3), torch.randn(2, 3, 8, 8))
lstm_diff = max_diff(torch.nn.LSTM(5, 6, batch_first=True), torch.randn(2, 4, 5))
gru_diff = max_diff(torch.nn.GRU(5, 6, batch_first=True), torch.randn(2, 4, 5))
device_only = sorted(e["op"] for e in native.fallback_log())
try:  # what nn.SyncBatchNorm calls; CPU has no kernel for it
    torch.batch_norm_stats(torch.ones(2, 3, 4, device="zeta"), 1e-5)
    must_be_native = ""
except NotImplementedError as e:
    must_be_native = str(e).splitlines()[0]
# record_stream is glue: the caching allocator honours it
y = torch.ones(2, device="zeta")
y.record_stream(torch.Stream(device="zeta"))
report = torch_fl.check_ops(torch.nn.Conv2d(3, 4, 3), torch.randn(1, 3, 8, 8), "zeta", backward=True)
print(json.dumps({"added": added, "relu": r, "fallback": fallback,
                  "conv_diff": conv_diff, "lstm_diff": lstm_diff, "gru_diff": gru_diff,
                  "device_only_log": device_only, "must_be_native": must_be_native,
                  "check_ops": {u.op: [u.status, u.note] for u in report.ops}}))
"""


def _run(site: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", RUN_ON_DEVICE], env=site_env(site),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_scaffold_build_run_then_fill_a_kernel(zeta_first_build, tmp_path):
    root, site1 = zeta_first_build
    first = _run(site1)
    assert first["added"] == [2.0, 2.0, 2.0, 2.0]
    assert first["relu"] == [0.0, 2.0, 0.0, 4.0]
    assert "relu" in first["fallback"], "an unfilled stub must run on the CPU fallback"
    statuses = json.loads(flsdk("ops", "--format", "json", cwd=root))
    by_op = {r["op"]: r for r in statuses["ops"]}
    assert by_op["relu"]["status"] == "stub"

    # A fresh backend runs a convolution, LSTM and GRU (forward and backward).
    assert first["conv_diff"] < 1e-4 and first["lstm_diff"] < 1e-4 and first["gru_diff"] < 1e-4, first
    for op in ("convolution_overrideable", "convolution_backward_overrideable",
               "_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl",
               "_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward"):
        assert op in first["device_only_log"], (op, first["device_only_log"])
    assert "convolution_overrideable" not in first["fallback"]
    # torch_fl.check_ops and flsdk ops say how: CPU's convolution on the fallback.
    assert first["check_ops"]["convolution_overrideable"][0] == "fallback", first["check_ops"]
    assert "aten::convolution" in first["check_ops"]["convolution_overrideable"][1]
    assert "aten::convolution" in by_op["convolution_overrideable"]["note"]
    assert by_op["_thnn_fused_lstm_cell"]["status"] == "composite"
    # An op with no CPU kernel and no composite: reported, and calling it says what to do.
    assert by_op["batch_norm_stats"]["status"] == "must-be-native"
    for needle in ("batch_norm_stats", "zeta", "must be implemented natively", "op spec"):
        assert needle in first["must_be_native"], (needle, first["must_be_native"])
    check = subprocess.run([sys.executable, "-m", "flsdk.cli", "check"], cwd=root,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "aten::batch_norm_stats must be native" in check.stdout, check.stdout

    (root / "kernels" / "relu.cpp").write_text(RELU_KERNEL)
    flsdk("gen", cwd=root)
    statuses = json.loads(flsdk("ops", "--format", "json", cwd=root))
    assert {r["op"]: r["status"] for r in statuses["ops"]}["relu"] == "native"
    build_into(root, tmp_path / "site2")
    second = _run(tmp_path / "site2")
    assert second["relu"] == [0.0, 2.0, 0.0, 4.0]
    assert "relu" not in second["fallback"], "a filled kernel must run natively"
