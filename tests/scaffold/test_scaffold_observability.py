"""Issue 37's rows on a fresh scaffold (no kernels written, no profiling primitive):
torch.profiler says once that the backend records no device activity (never silently
nothing) and the legacy use_device path still times ops; device memory shows in the
profiler and in CUDA's snapshot format with stack frames; routing refuses ops without
a native kernel by name and TORCH_FL_OP_ROUTES warns instead of failing the load;
deterministic mode fills new memory like CPU; sparse COO tensors work on the fallback.
One child process on the session's scaffold build (tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scaffold import site_env

pytestmark = pytest.mark.build

CHILD = r"""
import json, pickle, warnings, torch, torch_fl, torch_fl_zeta
torch_fl_zeta.load()
import torch_fl_zeta._C as native
from torch.profiler import ProfilerActivity, profile
from torch.cuda import _memory_viz

out = {"records": native.profiler_records_device_activity}
x = torch.randn(16, 16).to("zeta")
caught = []
for _ in range(2):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
            (x + x).cpu()
    caught += [str(m.message) for m in w]
    out["device_events"] = [e.name for e in p.events() if e.device_type != torch.autograd.DeviceType.CPU]
    out["cpu_ops"] = sorted({e.name for e in p.events()} & {"aten::add", "aten::to"})
out["warnings"] = [m for m in caught if "records no device activity" in m]

with torch.autograd.profiler.profile(use_device="zeta", use_kineto=False) as legacy:
    x + x
    torch.zeta.synchronize()
out["legacy_add_device_us"] = next(e for e in legacy.key_averages() if e.key == "aten::add").device_time_total

try:
    torch_fl.set_op_route("aten::relu", "fallback")
    out["route_error"] = ""
except ValueError as e:
    out["route_error"] = str(e)
out["routes"] = torch_fl.get_op_routes()

def allocate_on_zeta():
    return torch.empty(1024, 1024, device="zeta")  # 4 MiB: a large segment of its own
torch.zeta.empty_cache()  # the allocation below takes a fresh segment
torch.zeta.memory._record_memory_history(max_entries=1000)
y = allocate_on_zeta()
snap = torch.zeta.memory._snapshot()
block = next(b for s in snap["segments"] for b in s["blocks"] if b["address"] == y.data_ptr())
out["block_frames"] = [f["name"] for f in block["frames"]]
out["trace_actions"] = sorted({e["action"] for e in snap["device_traces"][0]})
folded = _memory_viz.memory(snap, format_flamegraph=lambda lines: lines)  # no flamegraph.pl download
out["viz"] = "allocate_on_zeta" in folded and "MemoryViz.js" in _memory_viz.trace_plot(snap)
out["summary"] = "Allocated memory" in torch.zeta.memory_summary()
torch.zeta.memory._record_memory_history(None)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True) as p:
    z = torch.empty(1024, device="zeta"); del z
out["profiled_bytes"] = next(e for e in p.key_averages() if e.key == "aten::empty").device_memory_usage

torch.use_deterministic_algorithms(True)
out["deterministic"] = [str(torch.empty(3, device="zeta").cpu().tolist()),
                        torch.empty(2, dtype=torch.int32, device="zeta").cpu().tolist()]
torch.use_deterministic_algorithms(False)

i = torch.tensor([[0, 1, 1], [2, 0, 2]]); v = torch.tensor([3.0, 4.0, 5.0])
s = torch.sparse_coo_tensor(i, v, (2, 3)).to("zeta")
d = torch.ones(3, 2, device="zeta", requires_grad=True)
sc = s.coalesce().requires_grad_(True)
torch.sparse.mm(sc, d).sum().backward()
out["sparse"] = [s.coalesce().values().cpu().tolist(), torch.sparse.sum(s).item(),
                 s.t().to_dense().cpu().tolist(), d.grad.cpu().tolist()]
print(json.dumps(out))
"""


def test_scaffold_profiler_memory_routing_deterministic_sparse(zeta_first_build):
    root, site = zeta_first_build
    env = site_env(site, TORCH_FL_OP_ROUTES="aten::relu=fallback")
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          timeout=600, cwd=str(site))
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # profiler: no primitive, so no device events, and a notice exactly once
    assert out["records"] is False
    assert out["device_events"] == [] and out["cpu_ops"], out
    notices = out["warnings"] + [line for line in proc.stderr.splitlines() if "records no device activity" in line]
    assert len(notices) == 1, (out["warnings"], proc.stderr[-2000:])
    assert "zeta" in notices[0] and "runtime_primitives: profiling" in notices[0]
    assert out["legacy_add_device_us"] > 0
    # routing: a stub op has no native kernel to route away from; the variable warned at load
    assert "aten::relu has no native zeta kernel" in out["route_error"], out["route_error"]
    assert out["routes"] == {}
    assert "TORCH_FL_OP_ROUTES" in proc.stderr and "aten::relu" in proc.stderr
    # memory
    assert "allocate_on_zeta" in out["block_frames"], out["block_frames"]
    assert {"alloc", "segment_alloc"} <= set(out["trace_actions"])
    assert out["viz"] and out["summary"]
    assert out["profiled_bytes"] == 4096
    # deterministic fill: NaN for floats, the largest int32
    assert out["deterministic"] == ["[nan, nan, nan]", [2**31 - 1, 2**31 - 1]]
    # sparse on the fallback
    values, total, dense_t, grad = out["sparse"]
    assert values == [3.0, 4.0, 5.0] and total == 12.0
    assert dense_t == [[0.0, 4.0], [0.0, 0.0], [3.0, 5.0]]
    assert grad == [[4.0, 4.0], [0.0, 0.0], [8.0, 8.0]]
