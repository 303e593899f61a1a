"""Loading device descriptors: the good fixture, defaults, and errors with file:line:field."""

import textwrap
from pathlib import Path

import pytest

from flsdk.spec import DeviceDescriptor, FallbackPolicy, NativeSelection, SpecErrors, load_device

FIXTURE = Path(__file__).parents[1] / "support" / "fixtures" / "spec" / "backend" / "device.yaml"


def variant(tmp_path, **lines):
    """The fixture with some lines replaced: variant(tmp_path, l6="  capacity: -1")."""
    text = FIXTURE.read_text().splitlines()
    for key, value in lines.items():
        text[int(key[1:]) - 1] = value
    path = tmp_path / "device.yaml"
    path.write_text("\n".join(text) + "\n")
    return path


def errors_of(path):
    with pytest.raises(SpecErrors) as info:
        load_device(path)
    return info.value


def assert_error(errs, file, line, field, *words):
    hits = [e for e in errs if e.field == field]
    assert hits, f"no error on {field!r}; got:\n{errs}"
    err = hits[0]
    text = str(err)
    assert (err.file, err.line) == (str(file), line), text
    assert text.startswith(f"{file}:{line}: {field}: "), text
    for word in words:
        assert word in text, text
    return err


def test_good_fixture_loads():
    d = load_device(FIXTURE)
    assert isinstance(d, DeviceDescriptor)
    assert d.name == "acme" and d.display_name == "ACME Simulated Accelerator"
    assert (d.device_count_default, d.device_count_env) == (2, "ACME_DEVICE_COUNT")
    assert d.memory_capacity == 2**30 and d.memory_capacity_env == "ACME_MEMORY_CAPACITY"
    assert d.memory_alignment == 512
    assert d.allocator == {"round_size": 512, "max_split_size": None,
                           "garbage_collection_threshold": 0.0, "env": "ACME_ALLOC_CONF"}
    assert d.dtypes[:3] == ("float32", "float16", "bfloat16") and len(d.dtypes) == 10
    assert d.amp_dtypes == ("bfloat16", "float16")
    assert d.quantization_schemes == ("per_tensor_affine", "per_channel_affine")
    assert d.quantization_dtypes == ("int8",)
    assert d.comm_backend == "acmeccl"
    assert d.native == (NativeSelection("opspec", "binary", 19), NativeSelection("op", "relu", 20),
                        NativeSelection("op", "acme::fused_gelu", 21))
    assert d.fallback == FallbackPolicy("allow", ("mul.out",), (), "ACME_FALLBACK_WARN")
    plain = d.as_dict()
    assert plain["dtypes"][0] == "float32" and plain["fallback"]["deny"] == ["mul.out"]


def test_minimal_descriptor_gets_defaults(tmp_path):
    path = tmp_path / "device.yaml"
    path.write_text("name: npu_nine\nmemory: {capacity: 16 GiB}\ndtypes: [float32]\n")
    d = load_device(path)
    assert d.display_name == "npu_nine"
    assert (d.device_count_default, d.device_count_env) == (1, "NPU_NINE_DEVICE_COUNT")
    assert d.memory_capacity == 16 * 2**30 and d.memory_alignment == 512
    assert d.memory_capacity_env == "NPU_NINE_MEMORY_CAPACITY"
    assert d.allocator == {"round_size": 512, "max_split_size": None,
                           "garbage_collection_threshold": 0.0, "env": "NPU_NINE_ALLOC_CONF"}
    assert d.amp_dtypes == () and d.comm_backend is None and d.native == ()
    assert d.fallback == FallbackPolicy("allow", (), (), "NPU_NINE_FALLBACK_WARN")
    assert (d.compute_units, d.compute_units_env) == (1, "NPU_NINE_COMPUTE_UNITS")


@pytest.mark.parametrize("value,units,env", [
    ("{default: 8}", 8, "ACME_COMPUTE_UNITS"),
    ("{default: auto, env: ACME_UNITS}", 0, "ACME_UNITS"),  # 0 = the host's threads
])
def test_compute_units(tmp_path, value, units, env):
    d = load_device(variant(tmp_path, l4=f"device_count: {{default: 2}}\ncompute_units: {value}"))
    assert (d.compute_units, d.compute_units_env) == (units, env)


@pytest.mark.parametrize("line,value,field,words", [
    (6, "  capacity: -1", "memory.capacity", ["must be positive"]),
    (6, "  capacity: lots", "memory.capacity", ["'lots' is not a size", "GiB"]),
    (6, "  capacity: 0", "memory.capacity", ["must be positive"]),
    (6, "  capacity: 16 GB", "memory.capacity", ["ambiguous unit", '"16 GiB"']),
    (6, "  capacity: [1]", "memory.capacity", ["wrong type"]),
    (8, "  alignment: 500", "memory.alignment", ["not a power of two"]),
    (12, "  max_split_size: abc", "allocator.max_split_size", ["not a size"]),
    (13, "  garbage_collection_threshold: 1.5", "allocator.garbage_collection_threshold", ["out of range"]),
    (4, "device_count: {default: 0}", "device_count.default", ["out of range", ">= 1"]),
    (4, "device_count: {default: two}", "device_count.default", ["wrong type", "an integer"]),
    (4, "device_count: {env: X}", "device_count.default", ["missing required field"]),
    ((4, 5), "device_count: {default: 2}\ncompute_units: {default: 0}", "compute_units.default",
     ["the number 0", "an integer 1..1024, or auto"]),
    ((4, 5), "device_count: {default: 2}\ncompute_units: {default: many}", "compute_units.default",
     ["'many'", "an integer 1..1024, or auto"]),
    ((4, 5), "device_count: {default: 2}\ncompute_units: 4", "compute_units", ["{default: <count>|auto"]),
    ((4, 5), "device_count: {default: 2}\ncompute_units: {default: 4, env: units}",
     "compute_units.env", ["environment variable"]),
    (7, "  capacity_env: acme_cap", "memory.capacity_env", ["environment variable"]),
    (14, "dtypes: [float32, bfloat61]", "dtypes[1]", ["unknown value 'bfloat61'", "did you mean 'bfloat16'"]),
    (15, "amp_dtypes: [float64]", "amp_dtypes[0]", ["unknown value 'float64'", "float16 or bfloat16"]),
    ((15, 16), "amp_dtypes: [bfloat16, float16]\nxdtypes: []", "xdtypes", ["unknown field"]),
    (16, "quantization: {schemes: [per_tensor_afine]}", "quantization.schemes[0]",
     ["did you mean 'per_tensor_affine'"]),
    (19, "  - opspec: binary\n    op: relu", "native[0]", ["exactly one of"]),
    (19, "  - family: binary", "native[0].family", ["unknown field"]),
    (17, "comm_backend: nccl", "comm_backend", ["torch.distributed backend already"]),
    (17, "comm_backend: Acme-CCL", "comm_backend", ["lowercase identifier"]),
    (22, "fallback: {mode: maybe}", "fallback.mode", ["unknown value 'maybe'", "allow or deny"]),
    (22, "fallback: {deny: [add.tensor]}", "fallback.deny[0]", ["unknown aten op", "did you mean 'add.Tensor'"]),
    (22, "fallback: {deny: [add, aten::mul.Tensor]}", None, []),
])
def test_device_errors(tmp_path, line, value, field, words):
    # `line`: the fixture line replaced by `value`, or (replaced line, line of the error)
    replaced, error_line = line if isinstance(line, tuple) else (line, line)
    path = variant(tmp_path, **{f"l{replaced}": value})
    if field is None:
        load_device(path)  # the variant is valid
        return
    assert_error(errors_of(path), path, error_line, field, *words)


@pytest.mark.parametrize("name,words", [
    ("cuda", "torch device type"), ("meta", "torch device type"), ("class", "keyword"),
    ("Acme", "lowercase identifier"), ("my-chip", "lowercase identifier"), ("nn", "torch.nn"),
])
def test_bad_backend_name(tmp_path, name, words):
    path = variant(tmp_path, l2=f"name: {name}")
    assert_error(errors_of(path), path, 2, "name", words)


def test_missing_fields(tmp_path):
    path = tmp_path / "device.yaml"
    path.write_text("display_name: X\n")
    errs = errors_of(path)
    for field in ("name", "memory", "dtypes"):
        assert_error(errs, path, 1, field, "missing required field")


def test_amp_dtype_must_be_a_device_dtype(tmp_path):
    path = variant(tmp_path, l14="dtypes: [float32, float16]")
    errs = errors_of(path)
    assert_error(errs, path, 15, "amp_dtypes[0]", "'bfloat16' is not in dtypes")
    assert_error(errs, path, 16, "quantization.dtypes[0]", "'int8' is not in dtypes")


def test_several_errors_at_once(tmp_path):
    path = variant(tmp_path, l2="name: cuda", l6="  capacity: -1", l8="  alignment: 3")
    errs = errors_of(path)
    assert [e.line for e in errs] == [2, 6, 8]


def test_duplicate_key(tmp_path):
    path = variant(tmp_path, l3="name: acme2")
    errs = errors_of(path)
    assert_error(errs, path, 3, "name", "duplicate key (first at line 2)")


def test_not_a_mapping(tmp_path):
    path = tmp_path / "device.yaml"
    path.write_text(textwrap.dedent("""\
        - name: acme
    """))
    errs = errors_of(path)
    assert "wrong type: got a list" in str(errs)


def test_runtime_primitives_take_pinned_host_and_a_typo_names_the_choices(tmp_path):
    path = tmp_path / "device.yaml"
    head = "name: npu_nine\nmemory: {capacity: 16 GiB}\ndtypes: [float32]\n"
    path.write_text(head + "runtime_primitives: [memset, pinned_host]\n")
    assert load_device(path).runtime_primitives == ("memset", "pinned_host")
    path.write_text(head + "runtime_primitives: [pinned_hots]\n")
    assert_error(errors_of(path), path, 4, "runtime_primitives[0]", "pinned_hots", "pinned_host")
