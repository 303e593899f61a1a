"""device.yaml `device_code`: kernels in a language the driver compiles at run time
(OpenCL C) embedded by `flsdk gen` into generated/device_sources.cpp, kept apart
from the glue (the runtime library compiles it), and tracked by the build record
so that a stale installed build is refused. What examples/opencl_backend needs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from flsdk.codegen.generate import generate
from flsdk.scaffold import render_backend
from torch_fl.backend_glue import build_record

KERNEL_CL = """// a kernel whose text ends a C++ raw string with the default delimiter: )flsdk"
__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }
"""


@pytest.fixture(scope="module")
def zeta(tmp_path_factory):
    root = tmp_path_factory.mktemp("device_code") / "zeta"
    render_backend("zeta", root)
    yaml = root / "device.yaml"
    yaml.write_text(yaml.read_text() + "device_code: {language: OpenCL C, suffixes: [.cl]}\n")
    (root / "kernels" / "sub").mkdir(parents=True)
    (root / "kernels" / "sub" / "twice.cl").write_text(KERNEL_CL)
    (root / "kernels" / "prelude.cl").write_text("#define ONE 1\n")
    generate(root)
    return root


def test_sources_are_embedded_with_their_hash(zeta):
    import hashlib

    cpp = (zeta / "generated" / "device_sources.cpp").read_text()
    assert (zeta / "generated" / "device_sources.h").is_file()
    assert '"kernels/prelude.cl"' in cpp and '"kernels/sub/twice.cl"' in cpp
    assert cpp.index("kernels/prelude.cl") < cpp.index("kernels/sub/twice.cl")  # sorted by path
    assert hashlib.sha256(KERNEL_CL.encode()).hexdigest() in cpp
    assert 'R"flsdk1(' in cpp  # the text holds )flsdk": another delimiter


def test_the_runtime_compiles_them_not_the_glue(zeta):
    cmake = (zeta / "generated" / "sources.cmake").read_text()
    assert "set(FLSDK_DEVICE_SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_sources.cpp)" in cmake
    glue = cmake.split("set(FLSDK_GENERATED_SOURCES", 1)[1].split(")", 1)[0]
    assert "device_sources.cpp" not in glue
    # the build record is written with the suffixes, so .cl files count as sources
    assert 'build_record.json" .cl\n' in cmake


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_the_lookup_returns_the_exact_text(zeta, tmp_path):
    main = tmp_path / "main.cpp"
    main.write_text(
        '#include "device_sources.h"\n#include <cstdio>\n#include <cstring>\n'
        "int main() {\n"
        "  std::size_t n = 0; zeta::device_sources::all(&n);\n"
        '  auto* s = zeta::device_sources::find("kernels/sub/twice.cl");\n'
        '  if (!s || zeta::device_sources::find("kernels/none.cl")) return 1;\n'
        "  std::fwrite(s->text, 1, s->size, stdout);\n"
        "  return n == 2 && std::strlen(s->text) == s->size ? 0 : 2;\n}\n")
    exe = tmp_path / "lookup"
    subprocess.run(["g++", "-std=c++20", f"-I{zeta / 'generated'}", str(main),
                    str(zeta / "generated" / "device_sources.cpp"), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, check=True)
    assert out.stdout.decode() == KERNEL_CL


def test_an_edited_kernel_makes_generated_stale_and_the_build_old(zeta):
    record = build_record.make_record(zeta, "torch_fl_zeta", [".cl"])
    assert "kernels/sub/twice.cl" in record["files"]
    assert build_record.changed_files(record, zeta) == []
    cl = zeta / "kernels" / "sub" / "twice.cl"
    cl.write_text(KERNEL_CL.replace("2.0f", "3.0f"))
    try:
        assert build_record.changed_files(record, zeta) == [("kernels/sub/twice.cl", "changed")]
        result = generate(zeta, check=True)
        assert "generated/device_sources.cpp" in result.report.stale
    finally:
        cl.write_text(KERNEL_CL)
    # a record written without suffixes (every backend before device_code) ignores .cl files
    assert "kernels/sub/twice.cl" not in build_record.make_record(zeta, "torch_fl_zeta")["files"]


def test_without_device_code_nothing_is_generated(tmp_path):
    root = tmp_path / "plain"
    render_backend("plain", root)
    generate(root)
    assert not (root / "generated" / "device_sources.cpp").exists()
    assert "FLSDK_DEVICE_SOURCES" not in (root / "generated" / "sources.cmake").read_text()


def test_a_cpp_suffix_is_refused(tmp_path):
    from flsdk.spec import load_backend
    from flsdk.spec.errors import SpecError

    root = tmp_path / "bad"
    render_backend("bad", root)
    yaml = root / "device.yaml"
    yaml.write_text(yaml.read_text() + "device_code: {suffixes: [.cpp]}\n")
    with pytest.raises(SpecError) as err:
        load_backend(root)
    assert "device_code" in str(err.value)
