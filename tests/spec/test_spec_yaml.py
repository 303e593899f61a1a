"""flsdk.spec basics: error rendering, line-aware YAML, sizes, names, schemas."""

import json

import pytest

from flsdk.spec import SpecError, SpecErrors, opspec_dir
from flsdk.spec.dtypes import DTYPES, did_you_mean
from flsdk.spec.errors import format_path
from flsdk.spec.names import backend_name_problem
from flsdk.spec.sizes import SizeError, parse_size
from flsdk.spec.yamlfile import load_yaml, parse_yaml


def test_error_renders_file_line_field_message_expected():
    err = SpecError("a.yaml", 7, "ops[3].dtypes[1]", "unknown value 'flot32'", "a dtype name")
    assert str(err) == "a.yaml:7: ops[3].dtypes[1]: unknown value 'flot32' (expected: a dtype name)"
    assert str(SpecError("a.yaml", None, "", "file not found")) == "a.yaml: file not found"


def test_errors_are_sorted_deduplicated_and_catchable_as_spec_error():
    errs = SpecErrors([
        SpecError("b.yaml", 1, "x", "m"),
        SpecError("a.yaml", 9, "y", "m"),
        SpecError("a.yaml", 2, "z", "m"),
        SpecError("a.yaml", 2, "z", "m"),
    ])
    assert [(e.file, e.line) for e in errs] == [("a.yaml", 2), ("a.yaml", 9), ("b.yaml", 1)]
    assert str(errs).splitlines() == ["a.yaml:2: z: m", "a.yaml:9: y: m", "b.yaml:1: x: m"]
    assert isinstance(errs, SpecError) and (errs.file, errs.line) == ("a.yaml", 2)


def test_format_path():
    assert format_path(("ops", 3, "dtypes", 1)) == "ops[3].dtypes[1]"
    assert format_path(()) == ""


def test_yaml_lines_of_keys_and_items():
    doc = parse_yaml("a: 1\nb:\n  - x: [1, 2]\n    y: z\n  - 3\n", "f.yaml")
    assert doc.data == {"a": 1, "b": [{"x": [1, 2], "y": "z"}, 3]}
    assert doc.line(("a",)) == 1
    assert doc.line(("b", 0)) == 3
    assert doc.line(("b", 0, "y")) == 4
    assert doc.line(("b", 1)) == 5
    # a missing path falls back to its nearest known ancestor
    assert doc.line(("b", 0, "nothere", 5)) == 3


@pytest.mark.parametrize("text,line,words", [
    ("a: [1, 2\nb: 3\n", 2, "malformed YAML"),
    ("a: 1\n  b: 2\n", 2, "malformed YAML"),
    ("a: 1\na: 2\n", 2, "duplicate key (first at line 1)"),
    ("a:\n  - !custom 1\n", 2, "cannot read value"),
    ("1: x\n", 1, "must be text"),
    ("? [1]\n: x\n", 1, "plain text"),
    ("a: &x [*x]\n", 1, "recursive"),
    ("a: 1\n---\nb: 2\n", 2, "malformed YAML"),
])
def test_malformed_yaml_gives_line(text, line, words):
    with pytest.raises(SpecError) as info:
        parse_yaml(text, "f.yaml")
    assert info.value.line == line
    assert words in str(info.value)
    assert str(info.value).startswith(f"f.yaml:{line}: ")


def test_unreadable_files(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_yaml(tmp_path / "none.yaml")
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_yaml(bad)


@pytest.mark.parametrize("value,expected", [
    (1024, 1024), ("1024", 1024), ("16 GiB", 16 * 2**30), ("512 MiB", 512 * 2**20),
    ("64KiB", 65536), ("1.5 GiB", 3 * 2**29), ("1 gib", 2**30), ("100 B", 100),
])
def test_sizes_ok(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize("value,words", [
    ("-1", "must be positive"), (-1, "must be positive"), (0, "must be positive"),
    ("abc", "is not a size"), ("lots", "is not a size"), ("0.3 KiB", "whole number"),
    ("12 XB", "unknown unit"), (True, "is not a size"), (1.5, "is not a size"),
    ("16 GB", "ambiguous unit"),
])
def test_sizes_rejected(value, words):
    with pytest.raises(SizeError) as info:
        parse_size(value)
    assert words in info.value.message


def test_ambiguous_unit_says_what_to_write():
    with pytest.raises(SizeError) as info:
        parse_size("16 GB")
    assert '"16 GiB"' in info.value.expected


@pytest.mark.parametrize("name,ok", [
    ("acme", True), ("my_chip", True), ("my_chip2", False), ("qlx7", False), ("cpu", False), ("cuda", False),
    ("meta", False),
    ("privateuseone", False), ("Acme", False), ("2chip", False), ("my-chip", False),
    ("class", False), ("namespace", False), ("nn", False), ("torch", False), ("linalg", False),
])
def test_backend_names(name, ok):
    assert (backend_name_problem(name) is None) == ok


def test_did_you_mean():
    assert did_you_mean("flaot32", DTYPES) == "did you mean 'float32'?"
    assert did_you_mean("Float16", DTYPES) == "did you mean 'float16'?"
    assert did_you_mean("zzzzzz", DTYPES) == ""


def test_schema_dtype_enums_match_the_table():
    for name in ("opspec", "device"):
        schema = json.loads((opspec_dir() / "schema" / f"{name}.schema.json").read_text())
        assert schema["$defs"]["dtype"]["enum"] == list(DTYPES)
        assert schema["$defs"]["dtype"]["x-expected"] == "a dtype name: " + ", ".join(DTYPES)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
