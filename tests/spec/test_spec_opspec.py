"""Loading op spec files: the good fixture and every kind of error, with file:line:field."""

import dataclasses
import textwrap
from pathlib import Path

import pytest

from flsdk.spec import OpSpec, SpecError, SpecErrors, Tolerance, load_opspecs
from flsdk.spec.aten import variant_ops

FIXTURES = Path(__file__).parents[1] / "support" / "fixtures" / "spec"


def write(tmp_path, text, name="fam.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def errors_of(paths):
    with pytest.raises(SpecErrors) as info:
        load_opspecs(paths)
    return info.value


def find(errs, field):
    hits = [e for e in errs if e.field == field]
    assert hits, f"no error on {field!r}; got:\n{errs}"
    return hits[0]


def assert_error(errs, file, line, field, *words):
    err = find(errs, field)
    assert (err.file, err.line) == (str(file), line), str(err)
    text = str(err)
    assert text.startswith(f"{file}:{line}: {field}: " if field else f"{file}:{line}: "), text
    for word in words:
        assert word in text, text
    return err


def test_good_fixture_loads():
    ops = load_opspecs([FIXTURES / "opspec" / "binary.yaml", FIXTURES / "opspec" / "unary.yaml"])
    by = {o.op: o for o in ops}
    assert [o.op for o in ops] == ["add.Tensor", "mul.Tensor", "div.Tensor_mode", "relu", "exp", "sum.dim_IntList"]
    add = by["add.Tensor"]
    assert isinstance(add, OpSpec)
    assert add.family == "binary" and add.line == 4 and add.file.endswith("binary.yaml")
    assert add.dtypes == ("float32", "float16", "bfloat16", "int64", "int32")
    assert add.variants == ("inplace", "out")
    assert add.variant_ops == {"inplace": "add_.Tensor", "out": "add.out"}
    # explicit tolerances kept, the other dtypes get the torch.testing defaults
    assert add.tolerances["bfloat16"] == Tolerance(1e-2, 1.6e-2)
    assert add.tolerances["float16"] == Tolerance(1e-5, 1e-3)
    assert add.tolerances["int64"] == Tolerance(0.0, 0.0)
    assert set(add.tolerances) == set(add.dtypes)
    assert add.samples[1] == ["T(4,1)", "T(3)", {"alpha": 2}]
    assert add.autocast == "none" and add.schema is None and not add.is_custom
    assert by["div.Tensor_mode"].skip_conformance == "rounding differs on the simulator"
    assert by["exp"].autocast == "fp32"
    assert by["relu"].variant_ops == {"inplace": "relu_"}
    assert by["sum.dim_IntList"].variant_ops == {"out": "sum.IntList_out"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        add.op = "x"  # frozen


def test_custom_op_loads():
    (spec,) = load_opspecs([FIXTURES / "backend" / "opspec" / "acme_custom.yaml"])
    assert spec.is_custom and spec.namespace == "acme" and spec.name == "fused_gelu"
    assert spec.schema == "fused_gelu(Tensor x) -> Tensor"


def test_variant_ops():
    assert variant_ops("add.Tensor") == {"inplace": "add_.Tensor", "out": "add.out"}
    assert variant_ops("add_.Tensor") == {}
    with pytest.raises(KeyError):
        variant_ops("no_such_op")


def test_malformed_yaml(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes: [float32
    """)
    err = errors_of([p])
    assert err.file == str(p) and err.line in (4, 5) and "malformed YAML" in str(err)


def test_wrong_type(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes: float32
          - op: mul.Tensor
            dtypes: [float32]
            tolerance:
              float32: {atol: 1e-5, rtol: 0.1}
    """)
    errs = errors_of([p])
    assert_error(errs, p, 4, "ops[0].dtypes", "wrong type", "a non-empty list")
    # PyYAML reads 1e-5 as text: say so
    assert_error(errs, p, 8, "ops[1].tolerance.float32.atol", "write e.g. 1.0e-5")


def test_unknown_field_with_suggestion(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes: [float32]
            varaints: [out]
    """)
    assert_error(errors_of([p]), p, 5, "ops[0].varaints", "unknown field", "did you mean 'variants'")


def test_missing_field(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes: [float32]
          - dtypes: [float32]
    """)
    assert_error(errors_of([p]), p, 5, "ops[1].op", "missing required field 'op'")
    q = write(tmp_path, "ops: []\n", "nofamily.yaml")
    errs = errors_of([q])
    assert_error(errs, q, 1, "family", "missing required field")
    assert_error(errs, q, 1, "ops", "must not be empty")


def test_empty_file(tmp_path):
    p = write(tmp_path, "# nothing\n")
    assert_error(errors_of([p]), p, 1, "", "wrong type", "a mapping with `family` and `ops`")


def test_duplicate_op_across_files_names_both(tmp_path):
    a = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes: [float32]
    """, "binary.yaml")
    b = write(tmp_path, """
        family: more
        ops:
          - op: mul.Tensor
            dtypes: [float32]
          - op: add.Tensor
            dtypes: [float32]
    """, "more.yaml")
    err = assert_error(errors_of([a, b]), b, 5, "op", "duplicate op 'add.Tensor'")
    assert f"first defined at {a}:3" in str(err)


def test_duplicate_op_in_one_file(tmp_path):
    a = write(tmp_path, """
        family: binary
        ops:
          - op: relu
            dtypes: [float32]
          - op: relu
            dtypes: [float64]
    """)
    assert_error(errors_of([a]), a, 5, "op", "duplicate op 'relu'", f"{a}:3")


def test_unknown_aten_op_with_suggestion(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.tensor
            dtypes: [float32]
          - op: relu.Tensor
            dtypes: [float32]
    """)
    errs = errors_of([p])
    assert_error(errs, p, 3, "ops[0].op", "unknown aten op 'add.tensor'", "did you mean 'add.Tensor'")
    assert_error(errs, p, 5, "ops[1].op", "unknown aten op 'relu.Tensor'", "did you mean")


def test_dtype_typo_with_suggestion(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes:
              - float32
              - flaot16
            tolerance:
              bfloat61: {atol: 0.1, rtol: 0.1}
    """)
    errs = errors_of([p])
    assert_error(errs, p, 6, "ops[0].dtypes[1]", "unknown value 'flaot16'", "did you mean 'float16'", "a dtype name")
    assert_error(errs, p, 8, "ops[0].tolerance.bfloat61", "unknown key 'bfloat61'", "did you mean 'bfloat16'")


def test_tolerance_for_unlisted_dtype(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes: [float32]
            tolerance:
              float16: {atol: 0.1, rtol: 0.1}
              float32: {atol: .nan, rtol: 0.1}
    """)
    errs = errors_of([p])
    assert_error(errs, p, 6, "ops[0].tolerance.float16", "does not list")
    assert_error(errs, p, 7, "ops[0].tolerance.float32.atol", "not a finite number")


def test_unknown_variant(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: sum.dim_IntList
            dtypes: [float32]
            variants: [out, inplace]
          - op: add_.Tensor
            dtypes: [float32]
            variants: [out]
          - op: add.Tensor
            dtypes: [float32]
            variants: [outplace]
    """)
    errs = errors_of([p])
    assert_error(errs, p, 5, "ops[0].variants[1]", "no inplace overload", "variants among: out")
    assert_error(errs, p, 8, "ops[1].variants[0]", "is inplace", "functional ops only")
    assert_error(errs, p, 11, "ops[2].variants[0]", "unknown value 'outplace'", "inplace or out")


def test_custom_op_without_schema(tmp_path):
    p = write(tmp_path, """
        family: acme
        ops:
          - op: acme::fused_gelu
            dtypes: [float32]
          - op: acme::fused_relu
            schema: "fused_rleu(Tensor x) -> Tensor"
            dtypes: [float32]
          - op: acme::bad
            schema: "bad(Tensr x) -> Tensor"
            dtypes: [float32]
            variants: [out]
          - op: relu
            schema: "relu(Tensor self) -> Tensor"
            dtypes: [float32]
    """)
    errs = errors_of([p])
    assert_error(errs, p, 3, "ops[0].op", "custom op 'acme::fused_gelu' needs a `schema`")
    assert_error(errs, p, 6, "ops[1].schema", "schema names 'fused_rleu' but the op is 'fused_relu'")
    assert_error(errs, p, 9, "ops[2].schema", "cannot parse schema")
    assert_error(errs, p, 11, "ops[2].variants", "only for aten ops")
    assert_error(errs, p, 13, "ops[3].schema", "take their schema from torch")


def test_bad_samples(tmp_path):
    p = write(tmp_path, """
        family: binary
        ops:
          - op: add.Tensor
            dtypes: [float32]
            samples:
              - ["T(4,3", "T(4,3)"]
              - [{alpha: 2}, "T(3)"]
              - ["T(2)", "dtype:flaot32"]
              - "T(3)"
    """)
    errs = errors_of([p])
    assert_error(errs, p, 6, "ops[0].samples[0][0]", "malformed tensor argument")
    assert_error(errs, p, 7, "ops[0].samples[1][0]", "must be the last entry")
    assert_error(errs, p, 8, "ops[0].samples[2][1]", "unknown dtype 'flaot32'", "did you mean 'float32'")
    assert_error(errs, p, 9, "ops[0].samples[3]", "wrong type")


def test_all_errors_reported_at_once(tmp_path):
    a = write(tmp_path, """
        family: binary
        ops:
          - op: add.tensor
            dtypes: [float32]
          - op: mul.Tensor
            dtypes: [flot32]
    """, "a.yaml")
    b = write(tmp_path, "family: [x]\nops: []\n", "b.yaml")
    errs = errors_of([a, b])
    assert len(errs) >= 4
    assert [e.file for e in errs] == sorted(e.file for e in errs)
    rendered = str(errs).splitlines()
    assert len(rendered) == len(errs)


def test_unknown_family_name_rules(tmp_path):
    p = write(tmp_path, """
        family: all
        ops:
          - op: relu
            dtypes: [float32]
    """)
    assert_error(errors_of([p]), p, 1, "family", "reserved")


def test_missing_file(tmp_path):
    err = errors_of([tmp_path / "nope.yaml"])  # SpecErrors, though only one
    assert len(err) == 1
    assert "nope.yaml: file not found" in str(err)


def test_single_spec_error_is_a_spec_error(tmp_path):
    p = write(tmp_path, "family: x\nops: 3\n")
    with pytest.raises(SpecError):
        load_opspecs([p])


def test_cpu_reference_dtype(tmp_path):
    good = write(tmp_path, """
        family: reduce
        ops:
          - op: histc
            dtypes: [float32, int32]
            cpu_reference_dtype: float64
    """)
    (histc,) = load_opspecs([good])
    assert histc.cpu_reference_dtype == "float64"
    bad = write(tmp_path, """
        family: reduce
        ops:
          - op: histc
            dtypes: [int32]
            cpu_reference_dtype: int64
          - op: acme::count
            schema: "count(Tensor x) -> Tensor"
            dtypes: [int32]
            reference: "lambda x: x"
            cpu_reference_dtype: float64
    """, name="bad.yaml")
    errs = errors_of([bad])
    assert_error(errs, bad, 5, "ops[0].cpu_reference_dtype", "float64 or float32")
    assert_error(errs, bad, 10, "ops[1].cpu_reference_dtype", "only on aten ops")


def test_cpu_reference_dtype_mapping(tmp_path):
    good = write(tmp_path, """
        family: grid_sample
        ops:
          - op: grid_sampler_2d
            dtypes: [float32, bfloat16, float16]
            cpu_reference_dtype: {bfloat16: float32, float16: float32}
    """)
    (spec,) = load_opspecs([good])
    assert spec.cpu_reference_dtype == {"bfloat16": "float32", "float16": "float32"}
    bad = write(tmp_path, """
        family: grid_sample
        ops:
          - op: grid_sampler_2d
            dtypes: [float32, bfloat16]
            cpu_reference_dtype: {float16: float32}
          - op: grid_sampler_3d
            dtypes: [float32, bfloat16]
            cpu_reference_dtype: {bfloat16: int8}
    """, name="bad.yaml")
    errs = errors_of([bad])
    assert_error(errs, bad, 5, "ops[0].cpu_reference_dtype.float16", "keys among: float32, bfloat16")
    assert_error(errs, bad, 8, "ops[1].cpu_reference_dtype", "a mapping dtype -> float64 or float32")


def test_cpu_reference_mapping_runs_the_named_dtypes_wide():
    import torch

    from torch_fl.testing import conformance as conf

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 5, 5, generator=g).bfloat16()
    grid = (torch.rand(1, 4, 4, 2, generator=g) * 2 - 1).bfloat16()
    args = [x, grid, 1, 0, False]  # nearest: CPU's bfloat16 coordinates pick other pixels
    mapping = {"bfloat16": "float32"}
    wide = conf.run_cpu_reference("grid_sampler_2d", args, {}, torch.bfloat16, mapping)
    assert wide.dtype == torch.bfloat16
    assert torch.equal(wide, torch.grid_sampler_2d(x.float(), grid.float(), 1, 0, False).bfloat16())
    # dtypes the mapping does not name: CPU as it is
    plain = conf.run_cpu_reference("grid_sampler_2d", [x.float(), grid.float(), 1, 0, False], {},
                                   torch.float32, mapping)
    assert torch.equal(plain, torch.grid_sampler_2d(x.float(), grid.float(), 1, 0, False))
