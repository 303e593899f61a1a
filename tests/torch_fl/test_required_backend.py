"""Tests that need acme fail, not skip, when acme is broken, and in CI when it is
missing (issue 27 item 13): tests/support/required_backend.py and its users."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import required_backend
from required_backend import AcmeUnavailable, acme_skip_reason

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _missing(_name):
    return None


def _found(_name):
    return object()


def _loads():
    return None


def _broken():
    raise ImportError("libtorch_fl_acme.so: undefined symbol: _ZN3c10...")


@pytest.mark.parametrize("env", [{}, {"CI": ""}, {"CI": "false"}, {"CI": "0"}, {"FLSDK_REQUIRE_ACME": "0"}])
def test_not_installed_and_not_required_skips(env):
    reason = acme_skip_reason(find_spec=_missing, load=_loads, env=env)
    assert reason and "not installed" in reason


@pytest.mark.parametrize("env", [{"CI": "true"}, {"CI": "1"}, {"FLSDK_REQUIRE_ACME": "1"}])
def test_not_installed_where_required_fails(env):
    with pytest.raises(AcmeUnavailable, match="not installed.*required here"):
        acme_skip_reason(find_spec=_missing, load=_loads, env=env)


@pytest.mark.parametrize("env", [{}, {"CI": "true"}])
def test_installed_but_broken_always_fails_with_the_cause(env):
    with pytest.raises(AcmeUnavailable, match="installed but does not load: ImportError: .*undefined symbol"):
        acme_skip_reason(find_spec=_found, load=_broken, env=env)


def test_installed_and_loading_runs():
    assert acme_skip_reason(find_spec=_found, load=_loads, env={"CI": "true"}) is None


def test_ci_and_run_test_require_acme():
    # .ci/run is what CI runs: it must mark the run as CI (so a missing acme fails);
    # ./run test builds acme first, so it requires it too.
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^export CI=", ci, re.M), ci
    run = (ROOT / "run").read_text()
    assert "FLSDK_REQUIRE_ACME=1" in run
    assert required_backend.required({"CI": "true"}) and not required_backend.required({})


def test_no_test_detects_acme_by_hand():
    # acme detection goes through required_backend: importorskip turns an ImportError
    # of a broken build into a skip, a bare except turns anything into one.
    offenders = []
    for path in sorted(HERE.parent.rglob("*.py")):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text()
        if re.search(r"importorskip\(\s*[\"']torch_fl_acme", text) or "_acme_reason" in text:
            offenders.append(path.name)
    assert not offenders, offenders


def test_a_broken_acme_fails_the_tests_that_need_it(tmp_path):
    """An installed acme that does not import: every test needing it errors at
    setup with the cause; none is skipped."""
    fake = tmp_path / "torch_fl_acme"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('torch_fl_acme/_C.so: undefined symbol: broken_build')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
               TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.pop("CI", None)
    env.pop("FLSDK_REQUIRE_ACME", None)
    modules = ["test_torch_fl_article.py", "test_torch_fl_readiness.py", "test_torch_fl_quantization.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--setup-only",
                           "--run-slow", *(str(HERE / m) for m in modules)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert "skipped" not in out.splitlines()[-1], out[-3000:]
    errors = int(re.search(r"(\d+) errors?", out.splitlines()[-1]).group(1))
    assert errors >= 20, out[-3000:]
    assert "installed but does not load" in out and "broken_build" in out, out[-3000:]
