"""One naming for "where is op X" (#12 item 5): in acme, an op's spec family, its spec
file and the kernel file that defines it carry the same name, and `flsdk ops` shows all three."""

import json
from pathlib import Path

from flsdk.cli import main, op_statuses

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "examples" / "acme_backend"


def test_every_acme_kernel_lives_in_the_file_named_after_its_spec_family():
    rows = [r for r in op_statuses(ACME) if r.get("spec")]
    assert len(rows) > 300
    misplaced = [(r["op"], r["family"], r["kernel"]) for r in rows
                 if r["status"] == "native" and Path(r["kernel"]).stem != r["family"]]
    assert misplaced == []
    wrong_file = [(r["op"], r["spec"]) for r in rows
                  if Path(r["spec"].rsplit(":", 1)[0]).stem != r["family"]]
    assert wrong_file == []


def test_flsdk_ops_shows_spec_kernel_and_status_of_one_op(capsys, monkeypatch):
    monkeypatch.chdir(ACME)
    assert main(["ops", "--op", "max_pool2d_with_indices"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if line.startswith("max_pool2d_with_indices "))
    assert row.split()[1:4] == ["pool", "native", "kernels/pool.cpp"]
    assert row.split()[4].startswith("../../opspec/pool.yaml:")


def _details(out: str, op: str) -> list[str]:
    """The lines `flsdk ops --op` prints under `<op>:` (up to the next blank line)."""
    block = out.split(f"\n{op}:\n", 1)[1]
    return block.split("\n\n", 1)[0].splitlines()


def test_flsdk_ops_names_the_registration_shard_and_the_conformance_tests_of_an_op(capsys, monkeypatch):
    """Issue 28: the other two questions about op X: which generated shard registers it
    (and its variants), and which generated tests cover it, as node ids pytest accepts."""
    import os
    import re
    import subprocess
    import sys

    monkeypatch.chdir(ACME)
    assert main(["ops", "--op", "relu", "--op", "acme::fused_bias_gelu"]) == 0
    out = capsys.readouterr().out
    for op, registered in (("relu", ["relu", "relu_"]), ("acme::fused_bias_gelu", ["acme::fused_bias_gelu"])):
        lines = _details(out, op)
        at = next(i for i, line in enumerate(lines) if line.startswith("  registered in "))
        shard = re.fullmatch(r"  registered in (generated/register_kernels_\d+\.cpp): (.*)", lines[at])
        assert shard and shard[2].split(", ") == registered, lines[at]
        # that shard, and no other, registers each overload
        name = op.split("::")[-1]
        for path in sorted((ACME / "generated").glob("register_kernels_*.cpp")):
            impl = f'm.impl("{name}"' in path.read_text()
            assert impl == (path.name == Path(shard[1]).name), (op, path.name)
        tests = [line.strip() for line in lines[at + 2:]]
        assert re.search(rf"tested by {len(tests)} generated conformance test", lines[at + 1]), lines[at + 1]
        assert tests and all(t.startswith("tests/generated/test_acme_conformance.py::") for t in tests)
        if op == "relu":  # the functional op's cases and its in-place variant's
            assert "tests/generated/test_acme_conformance.py::test_conformance[relu-float32-s0]" in tests
            assert any("::test_variant_conformance[relu_-float32-" in t for t in tests)
            assert not any("leaky_relu" in t for t in tests)
        # pytest finds every one of them (an unknown node id is an error) and no more
        collect = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *tests],
            cwd=ACME, capture_output=True, text=True, timeout=300,
            env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        assert collect.returncode == 0, collect.stdout[-2000:] + collect.stderr[-2000:]
        assert f"{len(tests)} tests collected" in collect.stdout, collect.stdout[-1000:]

    # an op the generated tests do not compare: its skip, and why
    assert main(["ops", "--op", "_scaled_dot_product_fused_attention_overrideable"]) == 0
    lines = _details(capsys.readouterr().out, "_scaled_dot_product_fused_attention_overrideable")
    assert lines[-1] == ("  not compared by the generated conformance tests: no CPU reference: CPU has no kernel "
                         "for it and its CPU counterpart returns another tuple; its skip: "
                         "tests/generated/test_acme_conformance.py::test_not_compared["
                         "_scaled_dot_product_fused_attention_overrideable]"), lines
    # the JSON rows carry the same, and an op no one knows is an error, not an empty table
    assert main(["ops", "--op", "relu", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)["ops"][0]
    assert set(row["registered"]) == {"relu", "relu_"} and len(row["tests"]) > 2
    assert main(["ops", "--op", "no_such_op"]) == 2
    assert "no_such_op" in capsys.readouterr().err


def test_conformance_test_ids_follow_the_cases_gen_writes():
    """A spec op's tests: its own cases, its variants' (named after the variant, e.g.
    relu_), its random and custom cases, or its visible skip; never another op's."""
    from flsdk.codegen.context import conformance_tests_of

    cases = {"functional": [("relu-float32-s0", "relu"), ("leaky_relu-float32-s0", "leaky_relu")],
             "variants": [("relu_-float32-s0", "inplace", "relu_", "relu")],
             "custom": [("acme.f-float32-s0", "acme::f")], "random": [("bernoulli.p-float32-s0", "bernoulli.p")],
             "random_variants": [("bernoulli_.float-float32-s0", "inplace", "bernoulli_.float", "bernoulli.p")],
             "skipped": {"acme::g": "no kernel yet"}}
    assert conformance_tests_of(cases, "relu") == ["test_conformance[relu-float32-s0]",
                                                   "test_variant_conformance[relu_-float32-s0]"]
    assert conformance_tests_of(cases, "bernoulli.p") == [
        "test_random_op_statistics[bernoulli.p-float32-s0]",
        "test_random_variant_statistics[bernoulli_.float-float32-s0]"]
    assert conformance_tests_of(cases, "acme::f") == ["test_custom_op_conformance[acme.f-float32-s0]"]
    assert conformance_tests_of(cases, "acme::g") == ["test_not_compared[acme.g]"]
    assert conformance_tests_of(cases, "abs") == []
