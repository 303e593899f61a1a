"""torch_fl.get_optimized_graph() with Inductor's caches on, as users have them
(issue 27 item 10): a second run of the same program is served by the FX graph
cache / AOTAutograd cache, no compile runs, and the graph API must still answer,
with the same graph the cold run reported.

Each run is its own process (a cache hit across processes is what users get), with
one temporary TORCHINDUCTOR_CACHE_DIR shared by the runs and the caches left on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.usefixtures("acme_backend")

# A tiny training step: a forward graph with a device kernel call (the linear's mm)
# and a fused pointwise kernel, then its backward graph.
SCRIPT = textwrap.dedent("""
    import json
    import torch
    import torch_fl
    from torch._dynamo.utils import counters
    from torch_fl import graph as fl_graph

    seen = []  # every graph published, in order
    fl_graph.add_graph_observer(seen.append)

    def describe(g):
        return {"device": g.device, "kernels": [[k.name, list(k.ops)] for k in g.kernels],
                "extern": list(g.extern_calls), "fusion": g.op_fusion,
                "nodes": [[n.op, str(n.target)] for n in g.nodes],
                "vals": sum(1 for n in g.nodes if "val" in n.meta),
                "code": g.graph_module.code if g.graph_module is not None else None}

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to("acme")
    def step(x):
        return (model(x) * 2 + 1).relu().sum()

    x = torch.randn(5, 4, device="acme")
    loss = torch.compile(step)(x)
    loss.backward()
    out = {"fxgraph": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"]),
           "observed": [describe(g) for g in seen]}
    try:
        out["last"] = describe(torch_fl.get_optimized_graph())
    except RuntimeError as exc:
        out["error"] = str(exc)
    # the same process again, after torch._dynamo.reset(): served by the cache entry
    # this process wrote (or read); the graph API asked to compile and run it itself
    torch._dynamo.reset()
    counters.clear()
    again = torch_fl.get_optimized_graph(torch.compile(step), x)  # the forward graph
    out["again"] = {"graph": describe(again), "fxgraph": dict(counters["inductor"])}
    print("RESULT " + json.dumps(out))
""")


def _run(cache_dir, **extra_env):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir), **extra_env)
    for name in ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FX_GRAPH_CACHE",
                 "TORCHINDUCTOR_AUTOGRAD_CACHE"):
        if name not in extra_env:
            env.pop(name, None)  # the caches as users have them: on
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=600, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


# The default caches (AOTAutograd on) run by default; the FX-cache-only path is slow.
@pytest.mark.parametrize("aot_cache", ["aot_autograd_cache",
                                       pytest.param("fx_graph_cache_only", marks=pytest.mark.slow)])
def test_get_optimized_graph_after_a_warm_cache_hit(tmp_path, aot_cache):
    extra = {} if aot_cache == "aot_autograd_cache" else {"TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    cold = _run(tmp_path, **extra)
    assert "error" not in cold, cold["error"]
    assert cold["fxgraph"].get("fxgraph_cache_miss", 0) >= 2, cold["fxgraph"]

    warm = _run(tmp_path, **extra)
    # it really was served by the cache: nothing compiled
    assert warm["fxgraph"].get("fxgraph_cache_miss", 0) == 0, warm["fxgraph"]
    if aot_cache == "aot_autograd_cache":
        assert warm["aot"].get("autograd_cache_hit", 0) >= 1, warm["aot"]
    else:
        assert warm["fxgraph"].get("fxgraph_cache_hit", 0) >= 2, warm["fxgraph"]

    assert "error" not in warm, warm["error"]
    # the same graphs as the cold run, forward and backward, each observed once
    assert warm["observed"] == cold["observed"]
    assert warm["last"] == cold["last"] == cold["observed"][-1]
    forward = warm["observed"][0]
    assert forward["device"] == "acme" and forward["fusion"] is True
    assert forward["extern"] and forward["kernels"], forward
    assert any(op == "call_function" for op, _ in forward["nodes"])
    assert forward["vals"] > 0  # nodes keep their metadata (fake tensors)
    # in one process, a recompile after torch._dynamo.reset() hits the cache as well
    for run in (cold, warm):
        assert run["again"]["fxgraph"].get("fxgraph_cache_miss", 0) == 0, run["again"]
        assert run["again"]["graph"] == forward
