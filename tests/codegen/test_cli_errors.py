"""Every `flsdk` failure is one line on stderr and an exit code (2: the user's
input, 1: a failure at run time), never a traceback; a refused `new-backend`
leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import flsdk.cli as cli


def _run(*args, cwd=None, env=None):
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr.strip().splitlines()


@pytest.mark.parametrize("name,needle", [
    ("qlx7", "has a digit: PyTorch device strings are letters and _ only"),
    ("class", "Python keyword"),
    ("cuda", "torch device type already"),
    ("Zeta", "lowercase"),
    ("my-chip", "lowercase"),
])
def test_new_backend_refuses_names_pytorch_cannot_take_and_writes_nothing(tmp_path, name, needle):
    code, err = _run("new-backend", name, cwd=tmp_path)
    assert code == 2 and len(err) == 1 and needle in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_new_backend_whose_gen_fails_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    def failing_gen(args):
        raise FileNotFoundError("simulated failure while generating")

    monkeypatch.setattr(cli, "cmd_gen", failing_gen)
    assert cli.main(["new-backend", "zeta", "--out", str(tmp_path / "zeta")]) == 2
    assert not (tmp_path / "zeta").exists()
    given = tmp_path / "empty"
    given.mkdir()
    assert cli.main(["new-backend", "zeta", "--out", str(given)]) == 2
    assert given.is_dir() and list(given.iterdir()) == []  # the user's folder stays, empty
    assert "simulated failure" in capsys.readouterr().err


def test_usage_mistakes_are_one_line_exit_2():
    for args in (["frobnicate"], ["gen", "--bogus"], ["compare", "--atol", "x"]):
        code, err = _run(*args)
        assert code == 2 and len(err) == 1 and err[0].startswith("flsdk"), (args, err)


def test_compare_model_errors_are_one_line(tmp_path):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent("""\
        def not_a_pair():
            return 42
        """))
    cases = [("resnet99", "unknown model 'resnet99'"), ("nosuchmodule:build", "cannot import 'nosuchmodule'"),
             ("mymodels:missing", "has no 'missing'"), ("mymodels:not_a_pair", "must return (model, inputs")]
    for model, needle in cases:
        code, err = _run("compare", "--model", model, cwd=tmp_path)
        assert code == 2 and len(err) == 1 and needle in err[0], (model, err)


def test_no_backend_installed_is_one_line(monkeypatch, capsys):
    from torch_fl import _backends, discovery

    monkeypatch.setattr(_backends, "first_device", lambda: None)
    monkeypatch.setattr(discovery, "backend_reports", lambda: [])
    assert cli.main(["compare", "--model", "gpt"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["flsdk compare: no device to compare with: no flsdk backend is installed"]


def test_an_unexpected_failure_is_one_line_exit_1(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("device exploded\nsecond line of detail")

    real = cli.build_parser

    def parser_with_broken_doctor():
        parser = real()
        parser.parse_args = (lambda argv, _p=parser.parse_args: _set(_p(argv)))
        return parser

    def _set(args):
        args.func = broken
        return args

    monkeypatch.setattr(cli, "build_parser", parser_with_broken_doctor)
    assert cli.main(["doctor"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RuntimeError: device exploded" in err[0] and "FLSDK_TRACEBACK" in err[0], err
    monkeypatch.setenv("FLSDK_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        cli.main(["doctor"])


def _backend_with_custom_op(tmp_path, schema, dtypes="[float32]"):
    from flsdk.scaffold import render_backend

    root = tmp_path / "zeta"
    render_backend("zeta", root)
    (root / "opspec").mkdir(exist_ok=True)
    spec = root / "opspec" / "fused.yaml"
    spec.write_text(f'family: fused\nops:\n  - op: zeta::fused_gelu\n    schema: "{schema}"\n'
                    f'    dtypes: {dtypes}\n    samples:\n      - ["T(4,3)"]\n')
    device = root / "device.yaml"
    device.write_text(device.read_text().replace("  - op: relu\n", "  - op: relu\n  - op: zeta::fused_gelu\n"))
    return root, spec


@pytest.mark.parametrize("command", ["check", "gen"])
@pytest.mark.parametrize("schema,needle", [
    ("fused_gelu(Tensor x -> Tensor", "unclosed ( at column 11"),
    ("fused_gelu(Tensor x, float alpha=(1.0) -> Tensor", "unclosed ( at column 11"),
    ("fused_gelu(Tensor x, float alpha=1.0()) -> Tensor", "PyTorch's schema parser"),
])
def test_a_custom_schema_that_does_not_parse_is_exit_2_with_file_line_field(tmp_path, command, schema, needle):
    """Issue #27 item 6: not `flsdk check: AssertionError: Invalid function schema`, exit 1."""
    root, spec = _backend_with_custom_op(tmp_path, schema)
    code, err = _run(command, cwd=root)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"{spec}:4: ops[0].schema: cannot parse schema: ") and needle in err[0], err


def test_a_typo_in_a_custom_op_spec_is_one_error_without_a_cascade(tmp_path):
    """Issue #27 item 5: the spec's own error, not also "custom op ... has no op spec"
    on device.yaml (with a guessed schema) for a spec that exists and is merely invalid."""
    root, spec = _backend_with_custom_op(tmp_path, "fused_gelu(Tensor x) -> Tensor", "[float32, flaot16]")
    code, err = _run("check", cwd=root)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"{spec}:5: ops[0].dtypes[1]: unknown value 'flaot16'; did you mean 'float16'"), err
