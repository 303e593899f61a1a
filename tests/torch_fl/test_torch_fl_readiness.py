"""torch_fl.readiness / `flsdk readiness` (the article's production checklist),
the version-compatibility matrix, and device-start failures naming their cause
(acme's runtime simulates each one through ACME_SIMULATE_INIT_FAILURE)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import checklist
from torch_fl.testing.fallback_probe import FALLBACK_PROBE

# acme, loaded; skipped only when not installed (tests/support/required_backend.py)
pytestmark = pytest.mark.usefixtures("acme_backend")
ROOT = Path(__file__).resolve().parents[2]
DEVICE = "acme:0"


def _tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 64, 4))


class _FallbackLayer(torch.nn.Module):
    """A layer no backend has a kernel for (a CPU-only op): the CPU fallback runs it."""

    def forward(self, x):
        from torch_fl.testing.fallback_probe import fallback_probe

        return fallback_probe()(x)


def test_readiness_on_a_small_model(tmp_path):
    record = tmp_path / "lock.json"
    report = torch_fl.readiness(DEVICE, _tiny_model(), torch.randn(2, 3, 8, 8), record=record,
                                bandwidth_sizes=(1 << 12, 1 << 16), min_bandwidth_gbps=0.0)
    assert [c.id for c in report.checks] == ["versions_pinned", "versions_recorded", "precision",
                                             "memory", "fallback", "bandwidth", "error_handling"]
    assert report.status == "pass", report.table()
    assert report.ok
    # 1: the runtime reports what it was built with
    pinned = report["versions_pinned"].evidence
    assert pinned["driver_version"] == pinned["built_driver_version"] == "1.4.0"
    # 2: the record file has every version
    written = json.loads(record.read_text())["versions"]
    assert written["torch"] == torch.__version__ and written["torch_fl"] == torch_fl.__version__
    assert written["backend_package"] == "torch_fl_acme" and written["runtime_version"] == "1.4.0"
    # 3: layer by layer
    prec = report["precision"].evidence
    assert prec["layers"] >= 5 and prec["gradients"] >= 6 and prec["first_divergent"] is None
    # 4: a real peak, below the limit
    mem = report["memory"].evidence
    assert 0 < mem["peak_reserved"] <= mem["limit"] <= mem["capacity"]
    # 6: the sweep ran on two devices
    sweep = report["bandwidth"].evidence["sweep"]
    assert [r["bytes"] for r in sweep] == [1 << 12, 1 << 16] and all(r["bus_gbps"] > 0
                                                                      for r in sweep)
    # 7: the injected faults were seen and survived
    err = report["error_handling"].evidence
    assert "out of memory" in err["oom"].lower() and "injected" in err["injected_oom"]
    assert "device 0 was lost" in err["device_lost"]
    assert torch.ones(2, device=DEVICE).sum().item() == 2  # device back after the check
    # a second run compares with the record
    again = torch_fl.readiness(DEVICE, record=record, bandwidth=False, faults=False)
    assert again["versions_recorded"].status == "pass"
    assert again["precision"].status == "warn" and "no model" in again["precision"].summary
    assert again.status == "warn" and again.ok


def test_readiness_reports_fallback_share_and_changed_versions(tmp_path):
    record = tmp_path / "lock.json"
    record.write_text(json.dumps({"versions": {"torch": "2.0.0"}}))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), _FallbackLayer())
    report = torch_fl.readiness(DEVICE, model, torch.randn(4, 8), record=record,
                                bandwidth=False, faults=False)
    fb = report["fallback"]
    assert fb.status == "warn" and FALLBACK_PROBE in fb.summary
    (entry,) = fb.evidence["fallback_ops"]
    assert entry["op"] == FALLBACK_PROBE and entry["count"] >= 1 and 0 < entry["share"] <= 1
    rec = report["versions_recorded"]
    assert rec.status == "warn" and "torch 2.0.0 -> " in rec.summary
    assert json.loads(record.read_text())["versions"] == {"torch": "2.0.0"}  # not overwritten


def test_fallback_on_conv_or_matmul_is_a_fail():
    step = {"seconds": 1.0, "fallback_log": [
        {"op": "convolution_overrideable", "count": 2, "time_s": 0.5, "bytes_copied": 10},
        {"op": "logcumsumexp", "count": 1, "time_s": 0.1, "bytes_copied": 10}]}
    check = checklist._check_fallback(step, [])
    assert check.status == "fail" and check.evidence["critical"] == ["convolution_overrideable"]
    assert check.evidence["fallback_share"] == pytest.approx(0.6)
    assert checklist._check_fallback({"seconds": 1.0, "fallback_log": []}, ["mm"]).status == "fail"
    assert checklist._check_fallback({"seconds": 1.0, "fallback_log": []}, []).status == "pass"


def test_memory_limits_fail():
    dev = torch.device(DEVICE)
    capacity = torch.accelerator.get_memory_info(0)[1]
    over = checklist._check_memory({"peak_reserved": capacity + 1, "peak_allocated": 1}, dev, 0.2)
    assert over.status == "fail" and "does not fit" in over.summary
    tight = checklist._check_memory({"peak_reserved": int(capacity * 0.9), "peak_allocated": 1},
                                    dev, 0.2)
    assert tight.status == "warn" and "headroom" in tight.summary


def test_bandwidth_below_the_minimum_fails(monkeypatch):
    rows = [{"bytes": 1 << 20, "seconds": 0.01, "bus_gbps": 0.1}]
    result = {"rows": rows, "name": "acmeccl", "engine": "native"}
    monkeypatch.setattr(checklist, "_measure_bandwidth", lambda *a, **k: result)
    low = checklist._check_bandwidth(torch.device(DEVICE), 5.0, (1 << 20,), True)
    assert low.status == "fail" and "best 0.1 vs minimum 5" in low.summary
    assert "(acmeccl, native)" in low.summary and low.evidence["engine"] == "native"
    assert checklist._check_bandwidth(torch.device(DEVICE), 0.05, (1 << 20,), True).status == \
        "pass"


def test_readiness_cli_in_process(tmp_path, capsys):
    from flsdk.cli import build_parser
    from torch_fl.commands import run_readiness

    args = build_parser().parse_args(["readiness", "--model", "none", "--json", "--no-bandwidth",
                                      "--record", str(tmp_path / "lock.json")])
    assert run_readiness(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "warn" and len(data["checks"]) == 7
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses["error_handling"] == "pass" and statuses["bandwidth"] == "warn"
    (tmp_path / "lock.json").write_text("{not json")  # a broken record is a fail: exit 1
    args.json = False
    assert run_readiness(args) == 1
    assert "[FAIL] versions_recorded" in capsys.readouterr().out


def test_flsdk_readiness_exits_1_on_a_fail(tmp_path):
    (tmp_path / "lock.json").write_text("{not json")
    cmd = [sys.executable, "-m", "flsdk.cli", "readiness", "--model", "none", "--no-bandwidth",
           "--no-faults", "--record", str(tmp_path / "lock.json")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[FAIL] versions_recorded" in out.stdout and "[WARN] bandwidth" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "gpt"])
def test_flsdk_readiness_on_the_reference_models(model, tmp_path):
    cmd = [sys.executable, "-m", "flsdk.cli", "readiness", "--model", model,
           "--record", str(tmp_path / "lock.json")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"with {model}: PASS" in out.stdout, out.stdout


# ------------------------------------------------------------ compatibility

def test_compat_matrix_has_torch_torch_fl_backend_and_runtime():
    (row,) = [r for r in torch_fl.compat_matrix() if r["name"] == "acme"]
    assert row["version_ok"] and row["torch_fl_ok"] and row["loaded"]
    assert row["flsdk"] == torch_fl.__version__ and row["backend_version"]
    assert row["driver"] == row["built_driver"] == "1.4.0" and row["runtime"] == "1.4.0"
    table = torch_fl.compat_report()
    assert "torch_fl" in table.splitlines()[0] and "ok" in table.splitlines()[1]


def test_import_warns_on_a_torch_fl_mismatch(monkeypatch):
    from torch_fl import compat

    monkeypatch.setattr(compat, "_torch_fl_version", lambda: "9.9.0")
    with pytest.warns(torch_fl.CompatWarning, match="generated by flsdk .* but torch_fl 9.9.0"):
        problems = compat.warn_if_incompatible()
    assert problems
    monkeypatch.setattr(compat, "compat_matrix", lambda load: 1 / 0)
    assert compat.warn_if_incompatible() == []  # never raises


# One process walks every start failure (a failed init can be retried, and
# acme's runtime reads the environment at each init), then starts for real
# with a newer driver of the same major version. `import torch` must work
# throughout.
_CAUSE_PROBE = r"""
import contextlib, io, json, os
assert os.environ["ACME_SIMULATE_INIT_FAILURE"] == "version_mismatch"
import torch                      # its autoloader meets the failure and must not raise
assert torch.ones(2).sum().item() == 2
import torch_fl
from flsdk.cli import main as flsdk
from torch_fl.compat import compat_matrix

def attempt(**env):
    os.environ.update(env)
    try:
        torch_fl.init_device("acme:0")
        error = None
    except Exception as exc:
        error = str(exc)
    (row,) = [r for r in compat_matrix() if r["name"] == "acme"]
    doctor = io.StringIO()
    with contextlib.redirect_stdout(doctor):
        code = flsdk(["doctor"])
    return {"error": error, "cause": row["cause"], "doctor": doctor.getvalue(), "code": code}

out = {}
for cause in ("version_mismatch", "library_path", "device_busy", "bogus"):
    out[cause] = attempt(ACME_SIMULATE_INIT_FAILURE=cause)
out["driver_major"] = attempt(ACME_SIMULATE_INIT_FAILURE="none", ACME_DRIVER_VERSION="2.0.1")
out["driver_minor"] = attempt(ACME_DRIVER_VERSION="1.5.2")
pinned = torch_fl.readiness("acme:0", record=None, bandwidth=False, faults=False)
out["pinned"] = [pinned["versions_pinned"].status, pinned["versions_pinned"].summary]
out["works"] = torch.ones(3, device="acme:0").sum().item()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def start_failures() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACME_")}
    env["ACME_SIMULATE_INIT_FAILURE"] = "version_mismatch"
    out = subprocess.run([sys.executable, "-c", _CAUSE_PROBE], env=env, capture_output=True,
                         text=True, timeout=180, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("cause, phrase", [
    ("version_mismatch", "driver/runtime version mismatch"),
    ("library_path", "runtime library path not configured"),
    ("device_busy", "device held by another process"),
])
def test_device_init_failure_names_its_cause(start_failures, cause, phrase):
    result = start_failures[cause]
    assert result["cause"] == cause
    assert phrase in result["error"] and "ACME_SIMULATE_INIT_FAILURE" in result["error"]
    assert result["code"] == 1 and f"cannot start: {phrase}" in result["doctor"]


def test_installed_driver_of_another_major_is_a_version_mismatch(start_failures):
    result = start_failures["driver_major"]
    assert result["cause"] == "version_mismatch"
    assert "the installed acme driver is 2.0.1" in result["error"]


def test_unknown_simulated_failure_is_refused_clearly(start_failures):
    assert "ACME_SIMULATE_INIT_FAILURE='bogus' is not one of" in start_failures["bogus"]["error"]


def test_newer_driver_of_the_same_major_starts_and_readiness_warns(start_failures):
    result = start_failures["driver_minor"]
    assert result["error"] is None and result["cause"] is None and result["code"] == 0
    assert "1.5.2 (1.4.0)" in result["doctor"] and "DRIVER DIFFERS" in result["doctor"]
    status, summary = start_failures["pinned"]
    assert status == "warn" and summary.startswith("installed driver 1.5.2 differs from the "
                                                   "1.4.0")
    assert start_failures["works"] == 3


def _versions(**runtime):
    base = {"torch": torch.__version__, "backend_built_for_torch": torch.__version__,
            "runtime_version": None, "driver_version": None, "built_driver_version": None}
    return {**base, **runtime}


def test_versions_pinned_for_a_driver_loaded_at_run_time_checks_the_api():
    # An OpenCL backend loads whichever ICD is installed: it is built against an
    # API (built_api_version), and the driver found must implement at least it.
    found = _versions(driver_version="6.0", api_version="OpenCL 3.0 PoCL HSTR: x86_64",
                      built_api_version="OpenCL 1.2")
    check = checklist._check_pinned(found)
    assert check.status == "pass", check.summary
    assert "OpenCL 3.0" in check.summary and "OpenCL 1.2" in check.summary and "6.0" in check.summary
    old = checklist._check_pinned({**found, "api_version": "OpenCL 1.1 Mesa"})
    assert old.status == "fail" and "older than the OpenCL 1.2" in old.summary, old.summary
    silent = checklist._check_pinned({**found, "api_version": None})
    assert silent.status == "warn" and "api_version" in silent.summary
    # a backend pinned to one driver keeps the exact comparison
    pinned = checklist._check_pinned(_versions(driver_version="1.4.0", built_driver_version="1.4.1"))
    assert pinned.status == "warn" and "differs" in pinned.summary
