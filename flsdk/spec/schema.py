"""JSON Schema validation of op spec files and device descriptors.

The schemas (opspec/schema/*.json, draft 2020-12) are the structural
contract; this module runs them with jsonschema and turns every jsonschema
error into a SpecError that names the offending line and field and says, in
words, what was expected (the schema's `x-expected` texts). Checks that need
more than structure (sizes, aten names, selections) live in the loaders.
"""

from __future__ import annotations

import functools
import json
import math

import jsonschema

from .dtypes import did_you_mean
from .errors import SpecError
from .paths import schema_dir
from .yamlfile import Document

SCHEMAS = {"opspec": "opspec.schema.json", "device": "device.schema.json"}


@functools.cache
def load_schema(kind: str) -> dict:
    """The parsed JSON Schema `kind` ('opspec' or 'device')."""
    path = schema_dir() / SCHEMAS[kind]
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(str(path), None, "", f"flsdk installation is broken: cannot read schema ({exc})") from None


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(load_schema(kind))


def validate(doc: Document, kind: str) -> list[SpecError]:
    """All schema violations of `doc` as SpecErrors (empty when valid)."""
    out: list[SpecError] = []
    for err in _validator(kind).iter_errors(doc.data):
        out.extend(_translate(doc, err))
    return out


_TYPE_WORDS = {
    "object": "a mapping", "array": "a list", "string": "text", "integer": "an integer",
    "number": "a number", "boolean": "true or false", "null": "null",
}


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"text {value!r}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return f"{type(value).__name__} {value!r}"


def _expected(err) -> str | None:
    schema = err.schema if isinstance(err.schema, dict) else {}
    if "x-expected" in schema:
        return schema["x-expected"]
    if err.validator == "enum":
        return "one of " + ", ".join(map(str, err.validator_value))
    if err.validator == "type":
        types: list[str] = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        return " or ".join(_TYPE_WORDS.get(t, t) for t in types)
    return None


def _translate(doc: Document, err) -> list[SpecError]:
    path = tuple(err.absolute_path)
    expected = _expected(err)
    v, inst = err.validator, err.instance

    if "propertyNames" in err.absolute_schema_path:
        # jsonschema reports a bad key with the parent's path; point at the key.
        key = inst
        hint = did_you_mean(str(key), err.validator_value) if v == "enum" else ""
        return [doc.error(path + (key,), f"unknown key {key!r}" + (f"; {hint}" if hint else ""), expected)]

    if v == "additionalProperties" and err.validator_value is False and isinstance(inst, dict):
        known = list(err.schema.get("properties", {}))
        out = []
        for key in inst:
            if key in known:
                continue
            hint = did_you_mean(str(key), known)
            out.append(doc.error(path + (key,), f"unknown field {key!r}" + (f"; {hint}" if hint else ""),
                                 "one of the fields " + ", ".join(known)))
        return out

    if v == "required" and isinstance(inst, dict):
        return [doc.error(path + (name,), f"missing required field {name!r}", expected)
                for name in err.validator_value if name not in inst]

    if v == "enum":
        text = f"unknown value {inst!r}" if isinstance(inst, str) else f"{_describe(inst)} is not allowed"
        if isinstance(inst, str):
            hint = did_you_mean(inst, [str(x) for x in err.validator_value])
            text += f"; {hint}" if hint else ""
        return [doc.error(path, text, expected)]

    if v == "type":
        text = f"wrong type: got {_describe(inst)}"
        types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        if "number" in types and isinstance(inst, str) and _is_float_text(inst):
            # YAML 1.1 (PyYAML) reads 1e-5 as text; only 1.0e-5 is a float.
            text += "; YAML reads exponents without a dot as text, write e.g. 1.0e-5"
        return [doc.error(path, text, expected)]

    if v == "pattern":
        return [doc.error(path, f"{inst!r} is not a valid value here", expected)]

    if v == "minItems":
        return [doc.error(path, "must not be empty" if err.validator_value == 1
                          else f"needs at least {err.validator_value} entries", expected)]

    if v == "uniqueItems" and isinstance(inst, list):
        seen: list = []
        for i, item in enumerate(inst):
            if item in seen:
                return [doc.error(path + (i,), f"duplicate entry {item!r}", expected)]
            seen.append(item)

    if v in ("minProperties", "maxProperties"):
        return [doc.error(path, "wrong number of fields", expected)]

    if v == "not":
        return [doc.error(path, f"{inst!r} is reserved", expected)]

    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
        return [doc.error(path, f"{inst!r} is out of range (must be {words[v]} {err.validator_value})", expected)]

    if v == "minLength":
        return [doc.error(path, "must not be empty", expected)]

    if v in ("oneOf", "anyOf"):  # alternatives: the x-expected text lists them
        return [doc.error(path, f"{_describe(inst)} is not allowed", expected)]

    # Anything else: jsonschema's own words, which are correct if terse.
    return [doc.error(path, err.message, expected)]


def _is_float_text(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
