"""The benchmark script runs end to end (numbers are reported, never asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_benchmark_quick_run_reports_every_row(tmp_path):
    pytest.importorskip("torch_fl_acme")
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_acme.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    names = {r["name"] for r in rows}
    assert {"add (8 elems)", "matmul 1024x1024", "ResNet-18 train step (8x3x32x32, SGD)", "sin",
            "gelu"} <= names
    assert {r["kind"] for r in rows} == {"tiny", "op", "pointwise", "train", "train_mt"}
    assert all(r["cpu_s"] > 0 and r["acme_s"] > 0 for r in rows)
    assert all(r["threads"] == 1 for r in rows if r["kind"] != "train_mt")
    assert "| group | benchmark | threads | CPU | acme |" in proc.stdout
