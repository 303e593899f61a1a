"""The glue that is the same for every backend is ordinary C++ in flsdk/static_glue/:
generated/ holds verbatim copies (a vendor repo builds without flsdk), the namespace
and device facts come from the generated device_config.h, and each source compiles
where it is written. Templates remain only for files that vary per backend."""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from flsdk.codegen.context import DEVICE_CODE_GLUE, GENERATED_CPP, STATIC_GLUE, STATIC_TOOLS
from flsdk.codegen.generate import STATIC_GLUE_DIR as STATIC_DIR
from flsdk.codegen.generate import TEMPLATES
from flsdk.codegen.writer import edited_by_hand

REPO = Path(__file__).resolve().parents[2]
ACME_GENERATED = REPO / "examples" / "acme_backend" / "generated"
CXX = shutil.which("g++") or shutil.which("c++")


def test_static_glue_is_the_static_part_of_generated():
    on_disk = {p.name for p in STATIC_DIR.iterdir() if p.is_file()}
    assert on_disk == set(STATIC_GLUE) | set(STATIC_TOOLS) | set(DEVICE_CODE_GLUE)
    assert set(STATIC_GLUE) <= set(GENERATED_CPP)
    for name in STATIC_GLUE:
        assert not (TEMPLATES / "cpp" / f"{name}.j2").exists(), f"{name} has both a template and a static source"


@pytest.mark.parametrize("name", sorted(STATIC_GLUE) + list(STATIC_TOOLS))
def test_generated_copy_is_verbatim(name):
    text = (ACME_GENERATED / name).read_text()
    header, body = text.split("\n", 2)[:2], text.split("\n", 2)[2]
    assert f"flsdk/static_glue/{name}, copied verbatim" in header[0]
    assert not edited_by_hand(text)
    assert body == (STATIC_DIR / name).read_text()


def test_static_glue_spells_no_backend_name():
    """The namespace comes from FLSDK_BACKEND_NS (device_config.h), the device
    string from config::kBackendName: nothing here names acme or a Jinja field."""
    for name in STATIC_GLUE:
        text = (STATIC_DIR / name).read_text()
        assert "{{" not in text and "{%" not in text, name
        code = re.sub(r"//.*", "", text)  # comments may give acme as an example
        assert not re.search(r"\bacme\b", code), name
        if "namespace FLSDK_BACKEND_NS" in text:
            includes = re.findall(r'#include "([^"]+)"', text)
            assert "device_config.h" in includes or "backend.h" in includes, name


def test_remaining_templates_vary_per_backend():
    """A template that printed only the namespace would be static glue."""
    for template in sorted((TEMPLATES / "cpp").glob("*.j2")):
        fields = set(re.findall(r"{{\s*([\w.]+)", template.read_text()))
        loops = "{%" in template.read_text()
        assert loops or fields - {"header", "ns"}, f"{template.name} varies by nothing but the namespace"


def _device_config(tmp_path: Path) -> Path:
    """acme's generated headers the static sources include (device_config.h,
    glue_hooks.h) renamed to another backend: the static sources must follow the
    macro, not the name they were written next to."""
    include = tmp_path / "include"
    include.mkdir()
    for name in ("device_config.h", "glue_hooks.h"):
        text = (ACME_GENERATED / name).read_text()
        (include / name).write_text(re.sub(r"\bacme\b", "zeta", text))
    return include


# Slow (the static glue with -Wall -Werror, ~1 min on 2 cores): every acme and scaffold
# build compiles the same sources, so the default run still catches an error.
@pytest.mark.slow
@pytest.mark.build
def test_static_sources_compile_where_they_live(tmp_path):
    if CXX is None:
        pytest.skip("no C++ compiler on PATH")
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    include = _device_config(tmp_path)
    # Kineto's headers too, for profiler.cpp, as generated/sources.cmake adds them
    kineto = f"-isystem{include_paths()[0]}/kineto"
    flags = ["-std=c++20", "-fsyntax-only", "-Wall", "-Werror", f"-I{include}", f"-I{STATIC_DIR}",
             *(f"-isystem{p}" for p in include_paths()), kineto,
             f"-isystem{sysconfig.get_paths()['include']}"]
    sources = sorted(n for n in STATIC_GLUE if n.endswith(".cpp"))

    def compile_one(name: str):
        cmd = [CXX, *flags, str(STATIC_DIR / name)]
        return name, subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(max_workers=2) as pool:  # the machine budget: two compile jobs
        results = list(pool.map(compile_one, sources))
    failed = {name: proc.stderr[-2000:] for name, proc in results if proc.returncode != 0}
    assert not failed, failed


def test_no_glue_makes_a_host_view_of_device_memory():
    """The glue never reads device memory from the host (issue #26): no CPU tensor
    over a device pointer (from_blob, the old host_view) in the static glue or in
    the generated tree of acme or a scaffold. The one from_blob, copies.cpp's
    host_alias, views host buffers only: every call passes the bytes of a
    buffer made by read_span or at::empty on the CPU."""
    import glob

    trees = [STATIC_DIR, ACME_GENERATED]
    trees += [Path(p) for p in glob.glob(str(REPO / "cookiecutter-backend" / "*" / "runtime"))]
    for tree in trees:
        for path in sorted(tree.glob("*.[ch]*")):
            text = path.read_text()
            assert "host_view" not in text, path
            if path.name != "copies.cpp":
                assert "from_blob" not in text, path
    copies = (STATIC_DIR / "copies.cpp").read_text()
    assert copies.count("at::from_blob(") == 1
    calls = re.findall(r"host_alias\(\w+, (\w+)\.data_ptr\(\)\)", copies)
    assert calls and len(calls) == copies.count("host_alias(") - 1, "every host_alias call is checked"
    for buffer in set(calls):
        made = re.findall(rf"at::Tensor {buffer} = ([^;]*);", copies, re.S)
        assert made, buffer
        for init in made:
            assert "read_span(" in init or ("at::empty(" in init and "kCPU" in init), (buffer, init)
