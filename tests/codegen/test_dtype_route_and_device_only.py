"""The generated glue's answers for dtypes a kernel does not list and for ops
CPU has no kernel for, read off acme's generated files and flsdk's reports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from flsdk.cli import device_only_warnings, op_statuses
from flsdk.codegen.context import args_of_tested_dtype
from flsdk.codegen.signatures import native_functions
from flsdk.spec import load_backend
from flsdk.spec.device_only import DEVICE_ONLY_OPS

ACME = Path(__file__).resolve().parents[2] / "examples" / "acme_backend"


@pytest.fixture(scope="module")
def acme():
    return load_backend(ACME)


@pytest.fixture(scope="module")
def register_kernels() -> str:
    # the wrappers are sharded over register_kernels_<i>.cpp
    return "\n".join(p.read_text() for p in sorted((ACME / "generated").glob("register_kernels_*.cpp")))


def _wrapper(source: str, name: str) -> str:
    start = source.index(f" {name}(")
    return source[start:source.index("\n}\n", start)]


@pytest.mark.parametrize("op, tested", [
    ("where.self", {"self", "other"}),        # the condition is bool: any device dtype
    ("index_select", {"self"}),               # the index is int64
    ("add.Tensor", {"self", "other"}),
])
def test_tested_dtype_arguments_come_from_the_samples(acme, op, tested):
    assert args_of_tested_dtype(acme.op(op), native_functions()[op].func) == tested


def test_the_wrapper_sends_unlisted_dtypes_to_the_cpu_fallback(acme, register_kernels):
    body = _wrapper(register_kernels, "wrapper_where_self")
    listed = acme.dtypes_for(acme.op("where.self"))
    enums = re.search(r"op_dtypes = dtype_set\(\{([^}]*)\}\)", body).group(1)
    from flsdk.spec.dtypes import scalar_type
    assert enums == ", ".join(f"c10::ScalarType::{scalar_type(d)}" for d in listed)
    assert "computes(kDeviceDtypes, condition)" in body
    assert "computes(op_dtypes, self)" in body and "computes(op_dtypes, other)" in body
    assert 'run_on_cpu<decltype(wrapper_where_self)>("aten::where", "self", condition, self, other)' in body
    # the route comes before the kernel is called
    assert body.index("run_on_cpu") < body.index("kernels::k_where_self")


def test_an_out_buffer_is_not_checked_the_result_is_copied_into_it(register_kernels):
    body = _wrapper(register_kernels, "wrapper_add_out")
    assert "computes(op_dtypes, self)" in body
    dtype_check = next(line for line in body.splitlines() if "computes(" in line)
    assert ", out)" not in dtype_check, "out must not be dtype-checked"
    assert 'run_on_cpu<decltype(wrapper_add_out)>("aten::add", "out", self, other, alpha, out)' in body
    # a call routed to the CPU at run time (op_routes.h) writes out on the fallback too
    assert 'run_routed<decltype(wrapper_add_out)>("aten::add", "out", self, other, alpha, out)' in body


def test_device_only_ops_acme_lacks_get_glue_and_reports():
    fallback_cpp = (ACME / "generated" / "fallback_device_only.cpp").read_text()
    rows = {r["op"]: r for r in op_statuses(ACME)}
    for op, info in DEVICE_ONLY_OPS.items():
        registered = f'm.impl("{op}",' in fallback_cpp
        if rows[op]["status"] == "native":
            assert not registered, f"{op} is native on acme; the glue must not register it"
            continue
        assert registered, op
        assert rows[op]["status"] == {"cpu_reference": "fallback", "composite": "composite",
                                      "error": "must-be-native"}[info.runs_as]
        assert rows[op]["note"] == info.without_native
    assert rows["convolution_overrideable"]["status"] == "native"  # acme's own kernel
    # one line for all of them (issue 36 item 8: five SyncBatchNorm lines on every run)
    (warning,) = device_only_warnings(ACME)
    missing = [op for op, row in rows.items() if row["status"] == "must-be-native"]
    assert f"{len(missing)} op(s) must be native: no CPU kernel exists" in warning, warning
    assert all(f"aten::{op}" in warning for op in missing) and "nn.SyncBatchNorm: aten::" in warning, warning


def test_the_backend_package_says_what_runs_device_only_ops():
    import ast

    # The source tree's generated module, read rather than run: it imports the
    # backend's glue relatively, so it runs only inside its package.
    source = (ACME / "torch_fl_acme" / "_generated" / "backend.py").read_text()
    device_only = next(ast.literal_eval(node.value) for node in ast.parse(source).body
                       if isinstance(node, ast.Assign) and node.targets[0].id == "DEVICE_ONLY_OPS")
    assert "convolution_overrideable" not in device_only       # native on acme
    assert device_only["batch_norm_stats"]["runs_as"] == "error"
    assert "record_stream" not in device_only  # the glue implements it
    # acme's fused RNN cells are native; a backend without them gets the composite
    # (the scaffold build test runs LSTM/GRU on one)
    assert "_thnn_fused_lstm_cell" not in device_only


def test_a_narrowed_op_routes_its_other_dtypes_to_the_fallback_and_tests_only_its_own(tmp_path):
    """Issue #27 item 4: device.yaml `native: - {op: relu, dtypes: [...]}` narrows what the
    generated wrappers let reach the kernel (relu and its in-place variant) and what the
    generated conformance suite tests; an error the kernel lets through is annotated with
    the backend, the op and the call's dtype."""
    import ast

    from flsdk.codegen.generate import generate
    from flsdk.scaffold import render_backend

    root = tmp_path / "zeta"
    render_backend("zeta", root)
    device = root / "device.yaml"
    device.write_text(device.read_text().replace("  - op: relu\n", "  - {op: relu, dtypes: [bfloat16, float32]}\n"))
    (root / "kernels" / "relu.cpp").write_text(
        '#include "kernels.h"\nnamespace zeta::kernels {\n'
        "at::Tensor k_relu(const at::Tensor & self) {\n  return self;\n}\n}\n")
    generate(root)
    source = "\n".join(p.read_text() for p in sorted((root / "generated").glob("register_kernels_*.cpp")))
    for wrapper in ("wrapper_relu", "wrapper_relu_"):
        body = _wrapper(source, wrapper)
        # in the spec's order (float32 before bfloat16), whatever the entry's order
        assert "op_dtypes = dtype_set({c10::ScalarType::Float, c10::ScalarType::BFloat16})" in body, body
        assert body.index("run_on_cpu") < body.index("kernels::k_relu")
        assert '"relu", "k_relu", "float32, bfloat16", dtype_of(self));' in body, body
    conformance = (root / "tests" / "generated" / "test_zeta_conformance.py").read_text()
    cases = ast.literal_eval(conformance.split("\nCASES = ", 1)[1].split("\n#", 1)[0].strip())
    assert {c[3] for c in cases if c[1] == "relu"} == {"float32", "bfloat16"}
    # the ops not narrowed keep every dtype of their spec the device lists
    from flsdk.spec import load_backend

    backend = load_backend(root)
    assert backend.dtypes_for(backend.op("relu")) == ("float32", "bfloat16")
    assert len(backend.dtypes_for(backend.op("add.Tensor"))) > 2


def test_a_narrowed_op_is_reported_with_its_dtypes_by_flsdk_ops_and_to_torch_fl(tmp_path, capsys, monkeypatch):
    """Issue 27's narrowing reaches the reports: `flsdk ops` shows what relu's kernel
    computes and where device.yaml narrows it, and the backend package ships the wrappers'
    routes (op_dtypes.py) so that torch_fl.check_ops calls a float64 relu a fallback."""
    import runpy

    from flsdk.cli import main
    from flsdk.codegen.generate import generate
    from flsdk.scaffold import render_backend
    from torch_fl.ops import _kernel_dtypes

    root = tmp_path / "zeta"
    render_backend("zeta", root)
    device = root / "device.yaml"
    device.write_text(device.read_text().replace("  - op: relu\n", "  - {op: relu, dtypes: [float32]}\n"))
    line = device.read_text().splitlines().index("  - {op: relu, dtypes: [float32]}") + 1
    (root / "kernels" / "relu.cpp").write_text(
        '#include "kernels.h"\nnamespace zeta::kernels {\n'
        "at::Tensor k_relu(const at::Tensor & self) {\n  return self;\n}\n}\n")
    generate(root)

    table = runpy.run_path(str(root / "torch_fl_zeta" / "_generated" / "op_dtypes.py"))["OP_DTYPES"]
    narrowed = {"dtypes": ["float32"], "args": ["self"], "narrowed_in": f"device.yaml:{line}"}
    assert table["relu"] == table["relu_"] == narrowed
    assert "add.Tensor" not in table or "narrowed_in" not in table["add.Tensor"]
    # torch_fl's reading of that entry: float64 calls leave the kernel
    status, note = _kernel_dtypes("relu", table["relu"], {"self": {torch.float64}}, {"float32", "float64"}, "")
    assert status == "fallback" and f"float32 only (device.yaml:{line})" in note and "float64 calls" in note
    assert _kernel_dtypes("relu", table["relu"], {"self": {torch.float32}}, {"float32", "float64"}, "") == \
        ("native", "")
    # a dtype the device lacks altogether is check_ops' device-wide note, not this one
    assert _kernel_dtypes("relu", table["relu"], {"self": {torch.complex64}}, {"float32"}, "") == ("native", "")

    monkeypatch.chdir(root)
    assert main(["ops", "--op", "relu"]) == 0
    out = capsys.readouterr().out
    row = next(r for r in out.splitlines() if r.startswith("relu "))
    assert row.split()[2] == "native" and f"(float32 only, narrowed at device.yaml:{line}; others: CPU fallback)" in row
    assert f"  kernel computes float32 (narrowed at device.yaml:{line}); other dtypes: CPU fallback" in out
    rows = {r["op"]: r for r in op_statuses(root)}
    assert rows["relu"]["dtypes"] == ["float32"] and rows["relu"]["narrowed"] == f"device.yaml:{line}"
    assert "narrowed" not in rows["add.Tensor"] and len(rows["add.Tensor"]["dtypes"]) > 1
    assert "dtypes" not in rows["abs"]  # not selected: every call runs on the fallback
