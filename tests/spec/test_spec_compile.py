"""device.yaml `compile:` section: defaults, values, and errors with file:line:field."""

from pathlib import Path

import pytest

from flsdk.spec import SpecErrors, load_device
from flsdk.spec.model import CompileConfig

FIXTURE = Path(__file__).parents[1] / "support" / "fixtures" / "spec" / "backend" / "device.yaml"


def with_compile(tmp_path, text):
    path = tmp_path / "device.yaml"
    path.write_text(FIXTURE.read_text() + text)
    return path


def compile_error(tmp_path, text):
    """The SpecErrors text for the fixture plus `text`, and where `text` starts (path:line)."""
    path = with_compile(tmp_path, text)
    with pytest.raises(SpecErrors) as info:
        load_device(path)
    return str(info.value), f"{path}:{len(FIXTURE.read_text().splitlines()) + 1}"


def test_default_is_none():
    d = load_device(FIXTURE)
    assert d.compile == CompileConfig("none", None, False, False)
    assert d.as_dict()["compile"] == {"codegen": "none", "triton_backend": None,
                                      "cudagraphs": False, "autotune": False,
                                      "channels_last": False, "sleef_u35": []}


def test_cpp_and_triton(tmp_path):
    assert load_device(with_compile(tmp_path, "compile: {codegen: cpp}\n")).compile.codegen == "cpp"
    d = load_device(with_compile(tmp_path, "compile: {codegen: triton, autotune: true}\n"))
    assert d.compile == CompileConfig("triton", "acme", False, True)  # backend name defaults to the device


def test_bad_codegen_names_line_and_field(tmp_path):
    text, where = compile_error(tmp_path, "compile: {codegen: cuda}\n")
    assert f"{where}: compile.codegen" in text and "cpp, triton or none" in text, text


def test_triton_option_refused_for_cpp(tmp_path):
    text, _ = compile_error(tmp_path, "compile: {codegen: cpp, autotune: true}\n")
    assert "compile.autotune" in text and "codegen triton only" in text


def test_channels_last_for_cpp_and_triton(tmp_path):
    assert load_device(with_compile(tmp_path, "compile: {codegen: cpp, channels_last: true}\n")).compile.channels_last
    assert not load_device(with_compile(tmp_path, "compile: {codegen: triton}\n")).compile.channels_last


def test_channels_last_refused_without_codegen(tmp_path):
    text, where = compile_error(tmp_path, "compile: {codegen: none, channels_last: true}\n")
    assert f"{where}: compile.channels_last" in text and "not none" in text, text


def test_channels_last_must_be_boolean(tmp_path):
    text, _ = compile_error(tmp_path, "compile: {codegen: cpp, channels_last: yes please}\n")
    assert "compile.channels_last" in text and "true or false" in text


def test_sleef_u35_for_cpp(tmp_path):
    d = load_device(with_compile(tmp_path, "compile: {codegen: cpp, sleef_u35: [tanh, log]}\n"))
    assert d.compile.sleef_u35 == ("tanh", "log")
    assert d.as_dict()["compile"]["sleef_u35"] == ["tanh", "log"]


def test_sleef_u35_refused_without_cpp_codegen(tmp_path):
    text, where = compile_error(tmp_path, "compile: {codegen: triton, sleef_u35: [tanh]}\n")
    assert f"{where}: compile.sleef_u35" in text and "codegen cpp only" in text, text


def test_sleef_u35_names_a_function_sleef_has(tmp_path):
    text, where = compile_error(tmp_path, "compile: {codegen: cpp, sleef_u35: [tanh, erf]}\n")
    assert f"{where}: compile.sleef_u35" in text and "one of sin, cos" in text, text


def test_cache_key_changes_with_torch_fl_compile_code(tmp_path):
    """Inductor's cache keys on torch_fl.compile's own code: an edit to a workaround
    in an editable install (no version bump) must not reuse kernels of the old code."""
    from torch_fl.compile import source_digest

    (tmp_path / "workarounds.py").write_text("A = 1\n")
    (tmp_path / "notes.txt").write_text("not code\n")
    before = source_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("changed, still not code\n")
    assert source_digest(tmp_path) == before
    (tmp_path / "workarounds.py").write_text("A = 2\n")
    assert source_digest(tmp_path) != before
