"""The benchmark script runs end to end (numbers are reported, never asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_smoke_run_reports_every_row(tmp_path, acme_backend):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_acme.py"), "--smoke",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    names = {r["name"] for r in rows}
    assert {"add (8 elems)", "matmul 1024x1024", "ResNet-18 train step (8x3x32x32, SGD)", "sin",
            "gelu", "hf-gpt2 train step", "tv-resnet18 train step", "nn-gru train step"} <= names
    assert {r["kind"] for r in rows} == {"tiny", "op", "pointwise", "train", "train_mt", "host", "models",
                                         "rnn", "kernels"}
    assert all(r["cpu_s"] > 0 and r["acme_s"] > 0 for r in rows)
    # The asynchronous picture: host waits per train step, by reason, for the two
    # train steps and the real-model set.
    syncs = {r["name"]: r for r in json.loads(out.read_text())["host_syncs"]}
    assert {"GPT train step (8x32 tokens, AdamW)", "hf-llama train step"} <= set(syncs), syncs
    assert all(r["syncs_per_step"] >= 0 for r in syncs.values()), syncs
    assert "host waits for the device per train step" in proc.stdout
    assert all(r["threads"] == 1 for r in rows if r["kind"] != "train_mt")
    assert "| group | benchmark | threads | CPU | acme |" in proc.stdout


def test_benchmark_busy_option_stops_its_process(tmp_path, acme_backend):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_acme.py"), "--smoke", "--busy",
                           "--only", "tiny", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "a busy process runs beside the measurements" in proc.stderr
    data = json.loads(out.read_text())
    assert data["busy_process"] is True and {r["kind"] for r in data["rows"]} == {"tiny"}
    pid = int(proc.stderr.split("(pid ")[1].split(")")[0])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), \
        f"the busy process {pid} outlived the benchmark"


def test_import_benchmark_reports_both_settings(tmp_path, acme_backend):
    out = tmp_path / "import.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_import.py"), "--runs", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert rows["acme installed (autoload)"]["acme_loaded"]
    assert not rows["without acme (autoload off)"]["acme_loaded"]
    assert all(r["heavy_modules"] == [] for r in rows.values()), rows  # lazy compile registration


@pytest.mark.slow
def test_zoo_group_runs_every_real_model_and_prints_median_and_worst(tmp_path, acme_backend):
    out = tmp_path / "zoo.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_acme.py"), "--smoke", "--only", "zoo",
                           "--json", str(out)], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    sys.path.insert(0, str(ROOT / "examples" / "acme_backend" / "tests"))
    import real_model_zoo

    assert {r["name"] for r in rows} == {f"{name} train step" for name in real_model_zoo.CASES}
    assert f"zoo: {len(real_model_zoo.CASES)} architectures, median " in proc.stdout, proc.stdout[-2000:]


@pytest.mark.slow
def test_compile_benchmark_quick_run(tmp_path, acme_backend):
    out = tmp_path / "compile.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_compile.py"), "--quick",
                           "--only", "pointwise chain", "--json", str(out)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    transcendental, arithmetic = json.loads(out.read_text())["rows"]
    for row in (transcendental, arithmetic):
        assert row["speedup"] > 0 and row["compiled_vs_cpu"] > 0
    assert transcendental["fusion_bound"] > 1 and "fusion_bound" not in arithmetic
    assert "fusion's bound" in proc.stdout


@pytest.mark.slow
def test_comm_benchmark_smoke_run_reports_every_mode(tmp_path, acme_backend):
    """benchmarks/bench_comm.py runs end to end: every collective in every mode
    (native, staged, gloo on CPU), memcpy, and the DDP/FSDP2 scaling rows."""
    out = tmp_path / "comm.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_comm.py"), "--smoke",
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = data["bandwidth"]["rows"]
    assert {(r["mode"], r["op"]) for r in rows} == {
        (m, o) for m in ("native", "staged", "gloo-cpu")
        for o in ("all_reduce", "all_gather", "reduce_scatter")}
    assert all(r["bus_gbps"] > 0 for r in rows) and data["bandwidth"]["memcpy_gbps"] > 0
    assert {"ddp_resnet18", "fsdp2_gpt", "ddp_resnet18_comm", "fsdp2_gpt_comm"} <= set(
        data["scaling"]["ranks"])
    assert "training steps, 1 rank vs 2 ranks" in proc.stdout
def test_profiler_benchmark_reports_and_draws(tmp_path, acme_backend):
    """bench_profiler.py (issue 37): the profiler's cost on a ResNet-18 step and a tiny
    op, and the picture of a profiled step (an SVG with the host and device lanes)."""
    out, trace, svg = tmp_path / "prof.json", tmp_path / "step.json", tmp_path / "step.svg"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_profiler.py"), "--smoke",
                           "--json", str(out), "--trace", str(trace), "--svg", str(svg)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert set(data["resnet18_step"]) >= {"off", "profiled_cpu_only", "profiled", "profiled_memory"}
    assert all(v > 0 for v in data["tiny_add"].values())
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"kernel", "cpu_op", "ac2g"} <= {e.get("cat") for e in events}
    picture = svg.read_text()
    assert picture.startswith("<svg") and "stream 0 (default)" in picture and "(python)" in picture
