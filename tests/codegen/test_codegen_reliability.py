"""flsdk gen under faults: interrupted runs, unwritable outputs, stray files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flsdk.cli import main as flsdk_main
from flsdk.codegen import writer as writer_module
from flsdk.codegen.generate import generate
from flsdk.scaffold import render_backend


@pytest.fixture()
def backend(tmp_path: Path) -> Path:
    root = tmp_path / "zeta"
    render_backend("zeta", root)
    return root


def test_interrupted_gen_leaves_every_file_old_or_new(backend, monkeypatch):
    generate(backend)
    before = {p: p.read_text() for p in (backend / "generated").rglob("*") if p.is_file()}
    device = backend / "device.yaml"
    device.write_text(device.read_text().replace("capacity: 1 GiB", "capacity: 512 MiB"))
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated Ctrl-C in the middle of flsdk gen")
        return real_replace(src, dst)

    monkeypatch.setattr(writer_module.os, "replace", flaky_replace)
    with pytest.raises(KeyboardInterrupt):
        generate(backend)
    monkeypatch.setattr(writer_module.os, "replace", real_replace)
    leftovers = [p.name for p in (backend / "generated").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == [], "temporary files must not survive an interruption"
    for path, old in before.items():
        now = path.read_text()
        assert now == old or "536870912" in now, path  # old content, or complete new content
    result = generate(backend)  # the next run completes the job
    assert "536870912ULL" in (backend / "generated" / "device_config.h").read_text()
    assert result.report.conflicts == []


def test_output_folder_that_cannot_be_written_is_a_clear_error(backend, capsys):
    (backend / "generated").write_text("a file where flsdk needs a folder")
    assert flsdk_main(["gen", str(backend)]) == 2
    err = capsys.readouterr().err
    assert "flsdk: error:" in err and "generated" in err and "Traceback" not in err


def test_stub_is_never_recreated_over_a_user_file(backend):
    generate(backend)
    (backend / "kernels" / "relu.cpp").unlink()
    mine = backend / "kernels" / "activations.cpp"
    mine.write_text('#include "kernels.h"\nnamespace zeta::kernels {\n'
                    "at::Tensor k_relu(const at::Tensor & self) {\n  return self;\n}\n}\n")
    result = generate(backend)
    assert "kernels/relu.cpp" not in result.stubs_created
    assert not (backend / "kernels" / "relu.cpp").exists()
    assert "kernels/activations.cpp" in (backend / "generated" / "sources.cmake").read_text()


def test_stub_left_behind_is_reported_as_superseded(backend, capsys):
    generate(backend)
    (backend / "kernels" / "activations.cpp").write_text(
        '#include "kernels.h"\nnamespace zeta::kernels {\n'
        "at::Tensor k_relu(const at::Tensor & self) {\n  return self;\n}\n}\n")
    result = generate(backend)
    assert result.superseded_stubs == {"kernels/relu.cpp": "kernels/activations.cpp"}
    assert (backend / "kernels" / "relu.cpp").exists(), "flsdk never deletes files under kernels/"
    assert flsdk_main(["gen", str(backend)]) == 0
    assert "kernels/relu.cpp: its kernel now lives in kernels/activations.cpp" in capsys.readouterr().out
