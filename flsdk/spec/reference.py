"""The `reference:` of a custom op: the Python callable its conformance test
compares the device kernel with (aten ops are compared with PyTorch's CPU kernel).

Two spellings: a Python expression evaluating to a callable, with `torch` in
scope ("lambda x, bias: torch.nn.functional.gelu(x + bias)",
"torch.nn.functional.silu"), or a path "package.module:function" to the
vendor's own Python code. `flsdk check` only parses it (no torch import); the
generated test resolves it.
"""

from __future__ import annotations

import ast
import importlib
import re

REFERENCE_EXPECTED = ('a Python callable, e.g. "lambda x, bias: torch.nn.functional.gelu(x + bias)" '
                      'or "my_pkg.refs:fused_gelu"')
_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def reference_problem(text: object) -> str | None:
    """Why `text` is not a usable reference, or None."""
    if not isinstance(text, str) or not text.strip():
        return "the reference must be non-empty text"
    if _PATH.match(text.strip()):
        return None
    try:
        ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        return f"the reference is not a Python expression: {exc.msg} (column {exc.offset})"
    return None


def resolve_reference(text: str):
    """The callable named by a reference (imports torch and, for a path, the module)."""
    text = text.strip()
    if _PATH.match(text):
        module, _, attr = text.partition(":")
        value = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
    else:
        import torch

        value = eval(compile(text, "<reference>", "eval"), {"torch": torch})  # the vendor's own spec
    if not callable(value):
        raise TypeError(f"reference {text!r} is a {type(value).__name__}, not a callable")
    return value
