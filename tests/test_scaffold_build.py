"""A freshly scaffolded backend builds with scikit-build-core and runs tensor ops;
filling one kernel makes it native. This is the vendor's first hour, end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scaffold import build_into, flsdk, guide_kernel, run_discrete_cases, site_env

pytestmark = pytest.mark.build

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

    # The kernel of the scaffold's guide, copied as a vendor would (issue #27 item 4:
    # it must pass relu's tests in every dtype the spec lists).
    (root / "kernels" / "relu.cpp").write_text(guide_kernel(root))
    flsdk("gen", cwd=root)
    statuses = json.loads(flsdk("ops", "--format", "json", cwd=root))
    assert {r["op"]: r["status"] for r in statuses["ops"]}["relu"] == "native"
    build_into(root, tmp_path / "site2")
    second = _run(tmp_path / "site2")
    assert second["relu"] == [0.0, 2.0, 0.0, 4.0]
    assert "relu" not in second["fallback"], "a filled kernel must run natively"
    # The backend's generated conformance suite: relu against CPU in its 9 dtypes,
    # its in-place and out= variants, and what stays on the fallback, said so.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(root / "tests" / "generated")], cwd=tmp_path,
                          env=site_env(tmp_path / "site2"), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", proc.stdout).group(1))
    assert passed >= 36, proc.stdout[-2000:]


def test_discrete_scaffold_runs_everyday_work_with_no_kernels(zeta_first_build):
    """A fresh discrete scaffold (memory the host cannot read, no native kernel
    at all) runs what users do every day and matches the CPU: factories, casts,
    contiguous copies of views, item/tolist/print, save/load, pinned copies with
    an event, Linear, an MLP and a CNN trained, bf16 autocast, index_put_, cat,
    where. The glue moves every byte through the runtime (copies within the
    device that change dtype go through host memory: its copy_strided takes
    same-dtype copies only)."""
    _, site = zeta_first_build
    results, stderr = run_discrete_cases(site)
    failed = {name: why for name, why in results.items() if why != "ok"}
    assert not failed, (failed, stderr[-3000:])
    assert len(results) >= 18


def test_a_host_read_of_discrete_device_memory_crashes(zeta_first_build):
    """The scaffold's discrete device is discrete: host code reading a device
    address dies at once, from any thread, instead of silently working."""
    _, site = zeta_first_build
    code = ("import ctypes, threading, torch, torch_fl_zeta; torch_fl_zeta.load()\n"
            "x = torch.ones(4, device='zeta'); print('made', x.cpu().tolist(), flush=True)\n"
            "t = threading.Thread(target=lambda: ctypes.c_float.from_address(x.data_ptr()).value)\n"
            "t.start(); t.join(); print('SURVIVED', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=site_env(site), capture_output=True,
                          text=True, timeout=300)
    assert "made [1.0, 1.0, 1.0, 1.0]" in proc.stdout, proc.stderr[-2000:]
    assert "SURVIVED" not in proc.stdout and proc.returncode == -11, (proc.returncode, proc.stderr[-1000:])
