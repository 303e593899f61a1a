"""The OpInfo runner itself (torch_fl.testing.opinfo): status classification,
crash and hang isolation, report and baseline formats. It runs deliberately
misbehaving OpInfos (tests/support/fixtures/opinfo_fake_ops.py) on acme."""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal needs it

from torch_fl.testing import opinfo  # noqa: E402

FAKE_OPS = str(Path(__file__).parents[1] / "support" / "fixtures" / "opinfo_fake_ops.py") + ":OPS"


def _acme_or_skip():
    from torch_fl import _backends

    device = _backends.first_device()
    if device is None:
        pytest.skip("no flsdk backend device installed")
    return device


@pytest.fixture(scope="module")
def fake_report():
    """One run of every fake op, forward and grad (the crash and hang ops kill
    their worker, so this also shows the run goes on)."""
    device = _acme_or_skip()
    lines = []
    report = opinfo.run_opinfo(device, op_db=FAKE_OPS, phases=["forward", "grad"], workers=2,
                               timeout=10, progress=lines.append)
    return report, lines


def _row(report, name):
    (row,) = [r for r in report.rows if r["op"] == f"fake_{name}"]
    return row


def test_classifies_each_kind_of_outcome(fake_report):
    report, _ = fake_report
    expect = {  # op -> (forward status, grad status)
        "pass": ("pass", "pass"),
        "crash": ("crash", "skip"),
        "mismatch": ("mismatch", "pass"),  # x + 1 on the device: wrong values, right gradient
        "error": ("error", "error"),
        "hang": ("crash", "skip"),
        "cpu_error": ("skip", "skip"),
        "sample_error": ("skip", "skip"),
        "random": ("skip", "skip"),
        "no_grad": ("pass", "skip"),
        "grad_mismatch": ("pass", "mismatch"),
        "fallback": ("pass", "skip"),       # the probe op is called on a detached input: no gradient
        "no_autograd": ("pass", "skip"),
    }
    got = {name: (_row(report, name)["forward"]["status"], _row(report, name)["grad"]["status"])
           for name in expect}
    assert got == expect


def test_details_name_what_went_wrong(fake_report):
    report, _ = fake_report
    assert _row(report, "crash")["forward"]["detail"].startswith("worker killed by SIGSEGV")
    assert _row(report, "crash")["grad"]["detail"] == "not run: the forward crashed"
    assert "timed out after 10 s" in _row(report, "hang")["forward"]["detail"]
    error = _row(report, "error")["forward"]["detail"]
    assert error == "sample 0: RuntimeError: boom on the device"  # first line only
    assert "Tensor-likes are not close" in _row(report, "mismatch")["forward"]["detail"]
    assert "every sample raises on the CPU: ValueError" in _row(report, "cpu_error")["forward"]["detail"]
    assert "sample_inputs raises on the CPU" in _row(report, "sample_error")["forward"]["detail"]
    assert "random op" in _row(report, "random")["forward"]["detail"]
    assert "autograd" in _row(report, "no_grad")["grad"]["detail"]
    assert "does not support autograd" in _row(report, "no_autograd")["grad"]["detail"]


def test_native_or_fallback_from_the_backend_log(fake_report):
    report, _ = fake_report
    native = _row(report, "pass")["forward"]
    assert native["native"] is True and native["fallback_ops"] == []
    fallback = _row(report, "fallback")["forward"]
    assert fallback["native"] is False
    assert any("flsdk_probe::scale" in op for op in fallback["fallback_ops"]), fallback
    assert _row(report, "crash")["forward"]["native"] is None  # unknown


def test_summary_counts_and_shares(fake_report):
    report, lines = fake_report
    s = report.summary()["forward"]["float32"]
    assert s["ops"] == 12
    assert s["counts"] == {"pass": 5, "mismatch": 1, "error": 1, "crash": 2, "skip": 3}
    assert s["tested"] == 9
    assert s["pass_pct"] == round(100 * 5 / 9, 2)
    # ran without the fallback: pass, mismatch, error, no_grad, grad_mismatch, no_autograd
    assert s["native_pct"] == round(100 * 6 / 9, 2)
    assert any("12/12 ops done" in line for line in lines)
    assert any("fake_crash [float32]: forward crash" in line for line in lines)


def test_report_formats(fake_report, tmp_path):
    report, _ = fake_report
    path = tmp_path / "r.json"
    report.to_json(path)
    data = json.loads(path.read_text())
    assert data["suite"] == "opinfo" and data["phases"] == ["forward", "grad"]
    assert {r["op"] for r in data["ops"]} == {r["op"] for r in report.rows}
    assert set(data["ops"][0]["forward"]) >= {"status", "detail", "native", "fallback_ops",
                                              "samples", "seconds"}
    md = report.markdown()
    assert "| forward | float32 | 9 | 55.6% | 66.7% | 5 | 1 | 1 | 2 | 3 |" in md
    assert "| `fake_crash` | float32 | crash |" in md
    assert "| `fake_fallback` | float32 | pass | fallback: " in md
    failures = report.markdown(failures_only=True)
    assert "`fake_crash`" in failures and "`fake_pass`" not in failures


def test_baseline_regressions_and_improvements(fake_report):
    report, _ = fake_report
    baseline = opinfo.baseline_file(report)
    assert baseline["ops"]["fake_pass|float32|forward"] == {"status": "pass", "native": True}
    assert opinfo.compare_baseline(report, baseline) == ([], [])
    # the baseline says mismatch passed and pass was a mismatch; fallback was native
    baseline["ops"]["fake_mismatch|float32|forward"]["status"] = "pass"
    baseline["ops"]["fake_pass|float32|forward"]["status"] = "mismatch"
    baseline["ops"]["fake_fallback|float32|forward"]["native"] = True
    baseline["ops"]["fake_crash|float32|forward"]["status"] = "error"
    regressions, improvements = opinfo.compare_baseline(report, baseline)
    assert [r.split(":")[0] for r in regressions] == [
        "fake_crash|float32|forward", "fake_fallback|float32|forward",
        "fake_mismatch|float32|forward"]
    assert improvements == ["fake_pass|float32|forward: was mismatch, now pass"]


def test_op_selection_and_subset():
    ids = opinfo.list_opinfos(FAKE_OPS, ["fake_*rror"])
    assert ids == ["fake_error", "fake_cpu_error", "fake_sample_error"]
    with pytest.raises(ValueError, match="no OpInfo matches 'nope'"):
        opinfo.list_opinfos(FAKE_OPS, ["nope"])
    torch_ids = opinfo.list_opinfos()
    assert len(torch_ids) > 500 and "nn.functional.conv2d" in torch_ids
    sub = opinfo.stratified_subset(torch_ids, 10)
    assert len(torch_ids) // 12 < len(sub) < len(torch_ids) // 8
    for family in ("nn.functional.", "linalg.", "special.", "fft."):
        assert any(i.startswith(family) for i in sub), family


def test_cli_exit_codes_and_files(tmp_path, capsys):
    _acme_or_skip()
    from flsdk.cli import main

    out, base, md = tmp_path / "r.json", tmp_path / "base.json", tmp_path / "r.md"
    args = ["conformance", "--opinfo", "--op-db", FAKE_OPS, "--ops", "fake_pass",
            "--ops", "fake_fallback", "--quiet", "--workers", "1"]
    assert main(args + ["--json", str(out), "--write-baseline", str(base),
                        "--markdown", str(md)]) == 0
    printed = capsys.readouterr().out
    assert "forward float32       2 tested: pass 100.0%, native 50.0%" in printed
    assert json.loads(out.read_text())["summary"]["forward"]["float32"]["counts"]["pass"] == 2
    assert md.read_text().startswith("# OpInfo conformance: acme:0")
    # the same baseline: no regression; below a native floor: exit 1
    assert main(args + ["--baseline", str(base), "--min-native", "75"]) == 1
    printed = capsys.readouterr().out
    assert "0 regression(s)" in printed and "native 50.0% is below 75.0%" in printed
    assert main(["conformance"]) == 2
    assert "choose a suite: --opinfo" in capsys.readouterr().err


def test_cpu_twin_of_a_view_keeps_its_storage():
    """A sample that is a view into a larger storage (as_strided.partial_views:
    a slice read with an explicit storage_offset) must read the same memory on
    the CPU as on the device."""
    device = _acme_or_skip()
    from torch_fl.testing.opinfo_check import _cpu_twin

    x = torch.arange(20.0).to(device)[5:15]
    twin = _cpu_twin(x)
    assert twin.device.type == "cpu" and twin.storage_offset() == 5
    assert torch.equal(twin, x.cpu())
    assert torch.equal(torch.as_strided(twin, (2, 2), (1, 2), 0),
                       torch.as_strided(x, (2, 2), (1, 2), 0).cpu())
    plain = torch.randn(3, 4).to(device)
    assert _cpu_twin(plain).storage_offset() == 0 and torch.equal(_cpu_twin(plain), plain.cpu())


def test_ops_returning_uninitialized_memory_are_compared_by_shape_only():
    """torch.empty-style OpInfos return whatever the allocator held: comparing
    their values with the CPU flips between pass and mismatch from run to run."""
    from torch.testing._internal.common_methods_invocations import op_db

    from torch_fl.testing.opinfo_check import UNINITIALIZED

    empties = {o.name for o in op_db if o.name.startswith(("empty", "new_empty"))}
    assert empties and empties <= UNINITIALIZED
    device = _acme_or_skip()
    report = opinfo.run_opinfo(device, phases=["forward"], ops=sorted(empties), workers=1, progress=False)
    for row in report.rows:  # most of them the OpInfo itself skips; empty_strided is compared
        assert row["forward"]["status"] == "skip", row
        samples = row["forward"]["samples"]
        assert not samples or samples["random"] == samples["compared"] > 0, row


def _tie_op(name):
    from types import SimpleNamespace
    return SimpleNamespace(name=name)


def test_tie_order_differences_pass_and_wrong_indices_do_not():
    """sort/argsort/topk/mode may order equal values otherwise than the CPU
    (PyTorch leaves it unspecified); a wrong value, an index to an unequal
    value or a repeated index is still a mismatch."""
    from torch.testing._internal.opinfo.core import SampleInput

    from torch_fl.testing import opinfo_ties
    from torch_fl.testing.opinfo_check import _mismatch

    close = lambda a, e: _mismatch(a, e, None, None)  # noqa: E731
    x = torch.tensor([[1.0, 1.0, 2.0, float("nan")]])
    sort, sample = _tie_op("sort"), SampleInput(x, args=(1,))
    vals = torch.tensor([[1.0, 1.0, 2.0, float("nan")]])
    cpu = (vals, torch.tensor([[0, 1, 2, 3]]))
    same = lambda out, op=sort, s=sample: opinfo_ties.same_up_to_ties(op, s, out, cpu, "forward", close)  # noqa: E731
    assert opinfo_ties.applies(sort, sample)
    assert same((vals, torch.tensor([[1, 0, 2, 3]])))        # the two 1.0s swapped
    assert not same((vals, torch.tensor([[0, 2, 1, 3]])))    # 1.0 and 2.0 swapped
    assert not same((vals, torch.tensor([[0, 0, 2, 3]])))    # not a permutation
    assert not same((vals + 1, torch.tensor([[1, 0, 2, 3]])))  # other values
    assert not opinfo_ties.applies(sort, SampleInput(x, args=(1,), kwargs={"stable": True}))
    assert not opinfo_ties.applies(_tie_op("max"), sample)
    # mode without keepdim: indices lose the dim
    mode = _tie_op("mode")
    y = torch.tensor([[3.0, 5.0, 3.0], [4.0, 4.0, 1.0]])
    mode_cpu = (torch.tensor([3.0, 4.0]), torch.tensor([2, 1]))
    assert opinfo_ties.same_up_to_ties(mode, SampleInput(y), (mode_cpu[0], torch.tensor([0, 0])),
                                       mode_cpu, "forward", close)
    assert not opinfo_ties.same_up_to_ties(mode, SampleInput(y), (mode_cpu[0], torch.tensor([1, 0])),
                                           mode_cpu, "forward", close)
    # grad: a swap between equal inputs moves gradient between equal values only
    g_cpu = (torch.tensor([[0.5, -1.0, 2.0, 0.25]]),)
    grad = lambda g: opinfo_ties.same_up_to_ties(sort, sample, (torch.tensor([g]),), g_cpu, "grad", close)  # noqa: E731
    assert grad([-1.0, 0.5, 2.0, 0.25])
    assert not grad([0.5, 2.0, -1.0, 0.25])


def test_half_precision_ties_and_factories_on_real_opinfos():
    """OpInfo's float16 sort sample (8000 integers in float16: many ties) and
    linspace with dtype=float16: acme sorts stably (the CPU's unstable sort is
    not stable there) and computes linspace in double, rounding once (the CPU
    rounds every step in float16). Both pass, judged as the module doc says."""
    device = _acme_or_skip()
    report = opinfo.run_opinfo(device, dtypes=["float16"], phases=["forward", "grad"],
                               ops=["sort", "linspace"], workers=1, progress=False)
    rows = {r["op"]: r for r in report.rows}
    assert rows["sort"]["forward"]["status"] == "pass", rows["sort"]
    assert "order equal values" in rows["sort"]["forward"]["detail"]
    assert rows["sort"]["grad"]["status"] == "pass", rows["sort"]
    assert rows["linspace"]["forward"]["status"] == "pass", rows["linspace"]
    assert rows["linspace"]["forward"]["samples"]["passed_vs_float64"] > 0


def test_ops_takes_several_patterns_after_one_flag():
    """Issue 36 item 6: `flsdk conformance --opinfo --ops relu add sum` names three ops
    (it was refused: one pattern per flag); the repeated flag still works, and mixes."""
    from flsdk.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["conformance", "--opinfo", "--ops", "relu", "add", "sum"]).ops == ["relu", "add", "sum"]
    assert parse(["conformance", "--opinfo", "--ops", "relu", "--ops", "add", "sum"]).ops == ["relu", "add", "sum"]
    assert parse(["conformance", "--opinfo"]).ops is None
