"""Loading a whole backend: native selection, cross-file rules, warnings, canonical specs, speed."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flsdk.spec.paths as paths
from flsdk.spec import Backend, SpecError, SpecErrors, check_backend, load_backend, load_opspecs, opspec_dir
from flsdk.spec.paths import canonical_opspec_files

FIXTURES = Path(__file__).parents[1] / "support" / "fixtures" / "spec"
CANONICAL = sorted((FIXTURES / "opspec").glob("*.yaml"))  # stand-ins for opspec/*.yaml


@pytest.fixture
def backend_dir(tmp_path):
    root = tmp_path / "acme_backend"
    shutil.copytree(FIXTURES / "backend", root)
    return root


def edit_device(root, old, new):
    path = root / "device.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def errors_of(root):
    with pytest.raises(SpecErrors) as info:
        load_backend(root, CANONICAL)
    return info.value


def test_good_backend_loads(backend_dir):
    b = load_backend(backend_dir, CANONICAL)
    assert isinstance(b, Backend) and b.name == "acme" and b.root == backend_dir
    assert [o.op for o in b.all_ops] == ["add.Tensor", "mul.Tensor", "div.Tensor_mode", "relu", "exp",
                                         "sum.dim_IntList", "acme::fused_gelu"]
    # opspec: binary + op: relu + op: acme::fused_gelu, in all_ops order
    assert [o.op for o in b.ops] == ["add.Tensor", "mul.Tensor", "div.Tensor_mode", "relu", "acme::fused_gelu"]
    assert b.op("exp").family == "unary"
    with pytest.raises(KeyError):
        b.op("nope")
    # the device has no complex64/int64 restrictions here: intersection keeps op order
    assert b.dtypes_for(b.op("add.Tensor")) == ("float32", "float16", "bfloat16", "int64", "int32")


def test_select_all(backend_dir):
    edit_device(backend_dir, "  - opspec: binary\n  - op: relu\n  - op: acme::fused_gelu\n", "  - opspec: all\n")
    b = load_backend(backend_dir, CANONICAL)
    assert [o.op for o in b.ops] == [o.op for o in b.all_ops]


def test_unknown_family_and_op_in_native(backend_dir):
    path = edit_device(backend_dir, "  - opspec: binary\n  - op: relu\n",
                       "  - opspec: binray\n  - op: relu.Tensor\n  - op: mm\n")
    errs = errors_of(backend_dir)
    texts = {e.field: str(e) for e in errs}
    assert texts["native[0].opspec"].startswith(f"{path}:19: native[0].opspec: unknown op family 'binray'")
    assert "did you mean 'binary'" in texts["native[0].opspec"]
    assert texts["native[1].op"].startswith(f"{path}:20: native[1].op: unknown op 'relu.Tensor'")
    assert "did you mean 'relu'" in texts["native[1].op"]
    # an aten op that exists but has no spec gets a different, actionable message
    assert texts["native[2].op"].startswith(f"{path}:21: native[2].op: 'mm' has no op spec")


def test_custom_op_namespace_must_be_backend_name(backend_dir):
    spec = backend_dir / "opspec" / "acme_custom.yaml"
    spec.write_text(spec.read_text().replace("acme::fused_gelu", "other::fused_gelu"))
    edit_device(backend_dir, "  - op: acme::fused_gelu\n", "")
    errs = errors_of(backend_dir)
    (err,) = errs
    assert (err.file, err.line, err.field) == (str(spec), 4, "op")
    assert "namespace 'other'" in str(err) and "acme::fused_gelu" in str(err)


def test_backend_op_duplicating_a_canonical_op(backend_dir):
    dup = backend_dir / "opspec" / "mine.yaml"
    dup.write_text("family: mine\nops:\n  - op: relu\n    dtypes: [float32]\n")
    err = next(e for e in errors_of(backend_dir) if "duplicate" in e.message)
    assert (err.file, err.line) == (str(dup), 3)
    assert f"first defined at {FIXTURES / 'opspec' / 'unary.yaml'}:4" in str(err)


def test_errors_in_device_and_specs_reported_together(backend_dir):
    edit_device(backend_dir, "capacity: 1 GiB", "capacity: 1 GB")
    spec = backend_dir / "opspec" / "acme_custom.yaml"
    spec.write_text(spec.read_text().replace("dtypes: [float32]", "dtypes: [flaot32]"))
    errs = errors_of(backend_dir)
    assert {Path(e.file).name for e in errs} == {"device.yaml", "acme_custom.yaml"}


def test_missing_device_yaml(tmp_path):
    with pytest.raises(SpecErrors) as info:  # the CLI catches SpecErrors only
        load_backend(tmp_path, CANONICAL)
    assert str(info.value).startswith(f"{tmp_path / 'device.yaml'}: file not found")


def test_check_backend_warnings(backend_dir):
    edit_device(backend_dir, "amp_dtypes: [bfloat16, float16]\n", "")
    edit_device(backend_dir, "  - op: relu\n", "  - op: relu\n  - op: exp\n")
    edit_device(backend_dir, "deny: [mul.out]", "deny: [mul.out], allow: [add]")
    warnings = check_backend(backend_dir, CANONICAL)
    text = "\n".join(warnings)
    assert "div.Tensor_mode: conformance skipped: rounding differs" in text
    assert "fallback.allow has no effect in mode allow" in text
    assert "fallback.deny lists 'mul.out', which has a native kernel anyway" in text
    assert "family 'acme_custom' differs from the file name" not in text  # same stem
    for w in warnings:
        assert ":" in w.split(" ")[0]  # every warning starts with file:line


def test_opspec_dir_source_tree_and_installed(tmp_path, monkeypatch):
    repo = Path(__file__).resolve().parents[2]
    assert opspec_dir() == repo / "opspec"
    assert (opspec_dir() / "schema" / "opspec.schema.json").is_file()
    # an installed wheel: flsdk/_opspec next to the package modules
    fake_pkg = tmp_path / "site" / "flsdk"
    shutil.copytree(repo / "opspec" / "schema", fake_pkg / "_opspec" / "schema")
    monkeypatch.setattr(paths, "_PACKAGE", fake_pkg)
    assert paths.opspec_dir() == fake_pkg / "_opspec"
    shutil.rmtree(fake_pkg / "_opspec")
    with pytest.raises(SpecError, match="installation is incomplete"):
        paths.opspec_dir()


def test_every_canonical_opspec_file_loads():
    files = canonical_opspec_files()
    if not files:
        pytest.skip("no canonical opspec/*.yaml yet")
    ops = load_opspecs(files)
    assert ops and all(o.family for o in ops)


def test_loading_is_fast():
    """A fresh process loads the canonical set (or the fixtures while it is
    empty) plus a backend in well under 2 s once the aten index is cached.
    The first run warms the cache (torchgen parse, ~1-3 s on a busy machine)."""
    code = textwrap.dedent(f"""
        import time
        t0 = time.perf_counter()
        from flsdk.spec import load_backend
        from flsdk.spec.paths import canonical_opspec_files
        files = canonical_opspec_files() or {[str(p) for p in CANONICAL]!r}
        b = load_backend({str(FIXTURES / 'backend')!r}, files)
        print(len(b.all_ops), time.perf_counter() - t0)
    """)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            for _ in range(2)]
    count, seconds = runs[1].stdout.split()
    assert int(count) > 1
    assert float(seconds) < 2.0, f"loading took {float(seconds):.2f} s (cold run: {runs[0].stdout.split()[1]} s)"


def test_aten_index_cache(tmp_path, monkeypatch):
    from flsdk.spec import aten

    monkeypatch.setenv("FLSDK_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FLSDK_NO_CACHE", raising=False)
    aten._index.cache_clear()
    try:
        fresh = aten._index()  # builds and writes the cache
        (cache,) = tmp_path.glob("aten-index-*.json")
        aten._index.cache_clear()
        again = aten._index()  # read back
        assert again == fresh
        assert again.variants["add.Tensor"] == {"inplace": "add_.Tensor", "out": "add.out"}
        # a damaged cache is ignored and rewritten, never an error
        cache.write_text("{not json")
        aten._index.cache_clear()
        assert aten._index() == fresh
        assert aten._read_cache(aten._cache_key()) == fresh
    finally:
        aten._index.cache_clear()


# ---- issue #27 item 4: a native op entry may narrow the op's dtypes

def test_an_op_entry_narrows_the_dtypes_of_its_kernel(backend_dir):
    edit_device(backend_dir, "  - op: relu\n", "  - {op: relu, dtypes: [float32]}\n")
    b = load_backend(backend_dir, CANONICAL)
    assert b.dtypes_for(b.op("relu")) == ("float32",)
    assert b.op("relu").dtypes == ("float32", "float64", "bfloat16")  # the spec is unchanged
    assert b.dtypes_for(b.op("add.Tensor")) == ("float32", "float16", "bfloat16", "int64", "int32")
    assert "relu" in [o.op for o in b.ops]
    # with `opspec: all`, an op entry narrows one op of the selection
    edit_device(backend_dir, "  - opspec: binary\n",
                "  - opspec: all\n  - {op: add.Tensor, dtypes: [float16, float32]}\n")
    b = load_backend(backend_dir, CANONICAL)
    assert b.dtypes_for(b.op("add.Tensor")) == ("float32", "float16")  # in the spec's order
    assert b.descriptor.as_dict()["native"][0] == {"kind": "opspec", "name": "all", "line": 19}


@pytest.mark.parametrize("entry,field,words", [
    ("  - {op: relu, dtypes: [float16]}", "native[1].dtypes[0]",
     ["'float16' is not among the dtypes of 'relu'", "unary.yaml:4", "dtypes among: float32, float64, bfloat16"]),
    ("  - {op: relu, dtypes: [complex64]}", "native[1].dtypes[0]",
     ["'complex64' is not in the device's dtypes"]),
    ("  - {op: relu, dtypes: [float32, flaot64]}", "native[1].dtypes[1]",
     ["unknown value 'flaot64'", "did you mean 'float64'"]),
    ("  - {op: relu, dtypes: []}", "native[1].dtypes", ["must not be empty"]),
    ("  - {opspec: unary, dtypes: [float32]}", "native[1].dtypes", ["narrows one op, not a family"]),
    ("  - {dtypes: [float32]}", "native[1].dtypes", ["without an `op`"]),
    ("  - {op: relu, opspec: unary}", "native[1]", ["exactly one of"]),
    ("  - {op: relu, dtype: [float32]}", "native[1].dtype", ["unknown field 'dtype'", "did you mean 'dtypes'"]),
    ("  - {op: relu, dtypes: [float32]}\n  - {op: relu, dtypes: [float64]}", "native[2].dtypes",
     ["'relu' is narrowed twice (first at line 20)"]),
])
def test_a_narrowing_entry_is_checked_with_file_line_and_field(backend_dir, entry, field, words):
    path = edit_device(backend_dir, "  - op: relu\n", entry + "\n")
    errs = errors_of(backend_dir)
    hits = [e for e in errs if e.field == field]
    assert hits, f"no error on {field!r}; got:\n{errs}"
    text = str(hits[0])
    assert text.startswith(f"{path}:{hits[0].line}: {field}: ") and hits[0].line in (20, 21), text
    for word in words:
        assert word in text, text


# ---- issue #27 item 5: every error of a file in one run, and no cascades

def test_an_invalid_custom_op_spec_is_reported_once_not_as_missing(backend_dir):
    spec = backend_dir / "opspec" / "acme_custom.yaml"
    spec.write_text(spec.read_text().replace("dtypes: [float32]", "dtypes: [float32, flaot16]"))
    errs = errors_of(backend_dir)
    assert [(Path(e.file).name, e.line, e.field) for e in errs] == [("acme_custom.yaml", 6, "ops[0].dtypes[1]")], \
        str(errs)
    assert "did you mean 'float16'" in str(errs) and "has no op spec" not in str(errs)
    # the same for an aten op whose spec is invalid, a fallback entry, and a family
    spec.write_text(spec.read_text().replace("ops:\n", "ops:\n  - op: relu6\n    dtypes: [float32]\n    samplez: []\n"))
    edit_device(backend_dir, "  - op: relu\n", "  - op: relu\n  - op: relu6\n  - opspec: acme_custom\n")
    edit_device(backend_dir, "deny: [mul.out]", "deny: [mul.out, acme::fused_gelu]")
    errs = errors_of(backend_dir)
    assert {Path(e.file).name for e in errs} == {"acme_custom.yaml"}, str(errs)
    assert len(errs) == 2, str(errs)  # flaot16, samplez


def test_a_broken_backend_spec_file_does_not_make_its_custom_ops_missing(backend_dir):
    spec = backend_dir / "opspec" / "acme_custom.yaml"
    spec.write_text(spec.read_text().replace("ops:", "ops: [", 1))
    errs = errors_of(backend_dir)
    assert len(errs) == 1 and "malformed YAML" in str(errs), str(errs)


def test_device_yaml_reports_every_mistake_in_one_run(backend_dir):
    path = edit_device(backend_dir, "dtypes: [float32,", "dtypes: [flaot32,")
    edit_device(backend_dir, "  capacity: 1 GiB", "  capacity: 1 GiBs")
    edit_device(backend_dir, "  - op: relu\n", "  - op: rellu\n")
    edit_device(backend_dir, "mode: allow", "mode: alow")
    errs = errors_of(backend_dir)
    got = {(e.line, e.field) for e in errs}
    assert got == {(6, "memory.capacity"), (14, "dtypes[0]"), (20, "native[1].op"), (22, "fallback.mode")}, str(errs)
    text = str(errs)
    assert "did you mean 'float32'" in text and "unknown unit 'GiBs'" in text and "did you mean 'relu'" in text
    assert all(line.startswith(f"{path}:") for line in text.splitlines()), text


def test_a_field_with_a_schema_error_gets_no_follow_on_errors(backend_dir):
    # amp_dtypes are checked against dtypes: a wrong `dtypes` is reported once, not
    # again as "'bfloat16' is not in dtypes"
    edit_device(backend_dir, "dtypes: [float32, float16, bfloat16,", "dtypes: [float32, float16, bfloat61,")
    errs = errors_of(backend_dir)
    assert [e.field for e in errs] == ["dtypes[2]"], str(errs)


# ---- issue #27 item 6: a schema PyTorch cannot parse is a spec error with file:line:field

@pytest.mark.parametrize("schema,words", [
    ("fused_gelu(Tensor x -> Tensor", ["unclosed ( at column 11"]),
    ("fused_gelu(Tensor x, float a=(1.0) -> Tensor", ["unclosed ( at column 11"]),
    ("fused_gelu(Tensor x, float a=1.0()) -> Tensor", ["expected ) but found '(' at column 33",
                                                       "PyTorch's schema parser"]),
    ("fused_gelu(Tensor x) -> Tensor)", [") at column 31 closes nothing"]),
])
def test_a_custom_schema_pytorch_refuses_is_a_spec_error(backend_dir, schema, words):
    spec = backend_dir / "opspec" / "acme_custom.yaml"
    spec.write_text(spec.read_text().replace('"fused_gelu(Tensor x) -> Tensor"', f'"{schema}"'))
    with pytest.raises(SpecErrors) as info:  # what `flsdk check` runs (and `gen`)
        check_backend(backend_dir, CANONICAL)
    errs = info.value
    assert [(e.line, e.field) for e in errs] == [(5, "ops[0].schema")], str(errs)
    text = str(errs)
    assert text.startswith(f"{spec}:5: ops[0].schema: cannot parse schema: "), text
    for word in words:
        assert word in text, text


def test_an_inplace_or_out_form_in_native_points_at_its_functional_op(backend_dir):
    """Issue 36 item 7: `relu_` in native: is relu's in-place form, which relu's spec
    generates; the error says to list relu (not "add relu_ to an op spec file"). A
    form the spec does not generate yet says which variant to add."""
    path = edit_device(backend_dir, "  - op: relu\n", "  - op: relu_\n  - op: add_.Tensor\n  - op: add.out\n")
    texts = {e.field: str(e) for e in errors_of(backend_dir)}
    relu = texts["native[1].op"]
    assert relu.startswith(f"{path}:20: native[1].op: 'relu_' is the in-place form of 'relu'"), relu
    assert "list 'relu' instead" in relu and "has no op spec" not in relu, relu
    for field, form, op in (("native[2].op", "in-place", "add.Tensor"), ("native[3].op", "out=", "add.Tensor")):
        assert f"is the {form} form of '{op}'" in texts[field], texts[field]
        assert f"list '{op}' instead" in texts[field], texts[field]
