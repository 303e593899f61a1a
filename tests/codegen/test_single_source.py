"""Each fact is kept in one place and read everywhere else (issue #12, item 1).

These tests fail when a second copy of a list, a grammar or a default comes back.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from flsdk.codegen import context, glue
from flsdk.codegen.generate import TEMPLATES, generate
from flsdk.scaffold import render_backend
from flsdk.spec import samples

REPO = Path(__file__).resolve().parents[2]
ACME = REPO / "examples" / "acme_backend"


# --- the glue op list -----------------------------------------------------------

STATIC_GLUE_DIR = REPO / "flsdk" / "static_glue"
GLUE_SOURCES = ("minimal_ops.cpp", "copies.cpp")  # the static glue files that register glue ops


def _glue_registrations() -> dict[str, str]:
    """op -> C++ function, of every m.impl in the glue's dense PrivateUse1 blocks."""
    out = {}
    for name in GLUE_SOURCES:
        block = (STATIC_GLUE_DIR / name).read_text().split("TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {", 1)[1]
        block = block.split("\n}", 1)[0]
        out.update(re.findall(r'm\.impl\("([^"]+)", TORCH_FN\((\w+)\)\)', block))
    return out


def test_static_glue_registers_exactly_the_glue_list():
    """glue.GLUE_KERNELS (read by codegen, `flsdk ops` and the tracer) is what the
    static glue registers, op for op and function for function."""
    assert _glue_registrations() == glue.GLUE_KERNELS


def test_the_generated_glue_is_the_static_glue():
    for name in GLUE_SOURCES:
        assert (STATIC_GLUE_DIR / name).read_text() in (ACME / "generated" / name).read_text(), name


def test_tracer_and_cli_read_the_glue_list():
    from torch_fl.models import trace

    assert trace.GLUE_OPS == frozenset(glue.GLUE_OPS)
    assert context.GLUE_OPS is glue.GLUE_OPS
    # no literal collection in the tracer's source lists glue ops again
    tree = ast.parse(Path(trace.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            assert len(names & set(glue.GLUE_OPS)) < 2, f"trace.py retypes glue ops: {ast.unparse(node)}"



# --- the generated file table -----------------------------------------------------

@pytest.fixture(scope="module")
def zeta(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("single") / "zeta"
    render_backend("zeta", root)
    generate(root)
    return root


def test_every_template_is_rendered_once_and_sources_follow_the_table(zeta):
    from flsdk.codegen.kernel_scan import scan_kernels
    from flsdk.spec import load_backend

    ctx = context.build_context(load_backend(zeta), scan_kernels(zeta), "2.13.0")
    paths = [out.path for out in ctx.outputs]
    assert len(paths) == len(set(paths))
    rendered = {out.template for out in ctx.outputs if not out.static}
    on_disk = {str(p.relative_to(TEMPLATES)) for p in TEMPLATES.rglob("*.j2")}
    stub_template = "kernels/kernel_stub.cpp.j2"  # rendered once per new kernel, not per generation
    # only for a backend with kernels in a device language (tests/test_device_code.py)
    device_code_template = "cpp/device_sources.cpp.j2"
    assert rendered | {stub_template, device_code_template} == on_disk
    # The static glue (flsdk/static_glue/), the kernel library (flsdk/kernel_lib/) and
    # the Python glue (torch_fl/backend_glue/) are copied, each file once.
    copied = [f"{out.static_dir}/{out.template}" for out in ctx.outputs if out.static]
    assert len(copied) == len(set(copied))
    assert set(copied) == {f"flsdk/static_glue/{name}" for name in
                           set(context.STATIC_GLUE) | set(context.STATIC_TOOLS)} | \
        {f"{context.BACKEND_GLUE_DIR}/{name}" for name in context.BACKEND_GLUE} | \
        {f"{context.KERNEL_LIB_DIR}/{name}" for name in context.KERNEL_LIB}
    on_disk_lib = {p.name for p in (REPO / context.KERNEL_LIB_DIR).iterdir() if p.is_file()}
    assert on_disk_lib == set(context.KERNEL_LIB), "every file of flsdk/kernel_lib/ is copied"
    for out in ctx.outputs:
        assert (zeta / out.path).is_file(), out.path
    cmake = (zeta / "generated" / "sources.cmake").read_text()
    listed = [f for f in re.findall(r"\$\{CMAKE_CURRENT_LIST_DIR\}/([\w./]+\.cpp)", cmake)
              if not f.startswith("../")]  # the kernels, listed after the glue
    assert sorted(listed) == sorted(out.path.removeprefix("generated/") for out in ctx.outputs
                                    if out.path.startswith("generated/") and out.path.endswith(".cpp"))


def test_generate_holds_no_decisions():
    """generate.py renders what context.py decided: no file table, case list or C++ text."""
    source = (REPO / "flsdk" / "codegen" / "generate.py").read_text()
    for needle in ('"register_kernels.cpp"', "namespace {", "TORCH_CHECK", "dtypes_for", "samples"):
        assert needle not in source, f"generate.py contains {needle!r}"


# --- allocator defaults -------------------------------------------------------------

def test_allocator_defaults_come_from_the_loader(tmp_path):
    root = tmp_path / "zeta"
    render_backend("zeta", root)
    device = (root / "device.yaml").read_text()
    device = re.sub(r"(?m)^allocator:\n(?:  .*\n)*", "", device)
    device = re.sub(r"(?m)^(  alignment:).*$", r"\1 4096", device)
    (root / "device.yaml").write_text(device)
    from flsdk.spec import load_device

    d = load_device(root / "device.yaml")
    assert d.memory_alignment == 4096 and d.allocator["round_size"] == 4096
    generate(root)
    config = (root / "generated" / "device_config.h").read_text()
    assert '"round_size:4096,max_split_size_mb:unlimited,garbage_collection_threshold:0"' in config
    # context reads the loader's values and applies no default of its own
    tree = ast.parse((REPO / "flsdk" / "codegen" / "context.py").read_text())
    gets = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get" and "allocator" in ast.unparse(n.func.value)]
    assert gets == [], [ast.unparse(g) for g in gets]


# --- the sample grammar ---------------------------------------------------------------

TOKENS = [
    "T(2,3)", "T(2,3)+", "T(2,3)[0,1]", "T(2,3)[-1.5,2e1]", "T(2,3).t()", "T()", "F(4)", "F(2,3)+",
    "L(2,3;10)", "L(4;1).t()", "B(2,3)", "B()", "T( 2 , 3 )", "floor", "dtype:float16",
    # malformed
    "T(2,3", "T(2,x)", "T(-1)", "T(2)[1,0]", "T(2)[a,1]", "L(2,3)", "L(2;0)", "L(2;5)+", "B(2)+",
    "T(2;3)", "X(2)", "T(2)-", "a-b", "2x", "T(2).t", "dtype:float99",
]


@pytest.mark.parametrize("token", TOKENS)
def test_check_and_materialize_agree(token):
    """flsdk check accepts a token exactly when the conformance helper can build it."""
    torch = pytest.importorskip("torch")
    from torch_fl.testing.conformance import materialize

    accepted = samples.check_sample([token]) == []
    try:
        materialize([token], torch.float32)
        built = True
    except ValueError:
        built = False
    assert accepted == built, (token, samples.check_sample([token]))


def test_conformance_has_no_grammar_of_its_own():
    from torch_fl.testing import conformance

    source = Path(conformance.__file__).read_text()
    assert "re.compile" not in source and "import re" not in source


# --- the data flow spec -> model -> codegen ---------------------------------------------

def test_spec_package_never_imports_codegen():
    for path in sorted((REPO / "flsdk" / "spec").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                assert "codegen" not in name, f"{path.name} imports {name}"


# --- the --run-slow option ------------------------------------------------------------

def test_run_slow_is_defined_once_by_the_plugin():
    import subprocess
    import sys

    conftests = [p for top in ("tests", "examples", "cookiecutter-backend") for p in (REPO / top).rglob("conftest.py")]
    assert ACME / "tests" / "conftest.py" in conftests
    for path in conftests:
        assert "--run-slow" not in path.read_text(), f"{path} defines --run-slow again"
    # pytest on either directory alone (from its own directory) offers the option
    for where in (REPO / "tests", ACME / "tests"):
        out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"],
                             cwd=where, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("--run-slow") == 1, where
