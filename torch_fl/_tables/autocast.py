"""The op lists of PyTorch's CUDA autocast policy, read from the installed torch's
`torch/include/ATen/autocast_mode.h` (text only: neither torch nor torchgen is
imported).

Shared by flsdk, whose generated `autocast.cpp` gives a backend CUDA's policy
(flsdk/codegen/autocast.py: why the header is the right source, the torchgen
checks, the op specs' overrides), and torch_fl.testing.autocast_reference, which
runs CPU autocast under the same policy.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

# The header's op lists and the at::autocast::CastPolicy each one registers.
HEADER_LISTS = {
    "AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp",
    "AT_FORALL_FP32": "fp32",
    "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype",
    "AT_FORALL_PROMOTE": "promote",
}
# Entries `_(REDISPATCH_FUNC, "op.overload", REGISTER_SIG, REDISPATCH_SIG, POLICY)`:
# the wrapper calls another overload of the op (norm without dtype -> with dtype).
REDISPATCH_LIST = "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE"

# Ops CUDA's autocast wraps outside the header lists, and what a flsdk backend
# does with each. The dispatcher check fails when torch adds one not named here.
CUDA_EXTRAS = {
    "cudnn_convolution": "skip: a cuDNN entry point, never reached on another device",
    "cudnn_convolution_transpose": "skip: a cuDNN entry point, never reached on another device",
    "binary_cross_entropy": "banned",
}
BANNED_MESSAGE = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
        "(as on CUDA): the sigmoid before them loses precision in low precision. Use "
        "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, "
        "which are safe to autocast, or compute this loss outside the autocast region."),
}


def header_path() -> Path:
    """The installed torch's include/ATen/autocast_mode.h, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    locations = (spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location).resolve() / "include" / "ATen" / "autocast_mode.h"
        if path.is_file():
            return path
    raise FileNotFoundError("the installed torch has no include/ATen/autocast_mode.h "
                            + (f"(looked in {', '.join(map(str, locations))})" if locations
                               else "(torch is not installed)"))


def _macro_bodies(text: str) -> dict[str, str]:
    """`#define NAME(_) \\ ...` blocks of a header, continuation lines joined."""
    bodies: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*#\s*define\s+(\w+)\(_\)\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        parts = [m.group(2)]
        while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            parts[-1] = parts[-1].rstrip()[:-1]
            i += 1
            parts.append(lines[i])
        bodies[m.group(1)] = " ".join(parts)
        i += 1
    return bodies


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside (), <> and quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth, quoted = 0, False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "(<":
            depth += 1
        elif not quoted and ch in ")>":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return parts


def _entries(body: str) -> list[list[str]]:
    """The `_(a, b, ...)` entries of a macro body, each as its argument list."""
    entries = []
    for m in re.finditer(r"(?<![\w])_\(", body):
        depth, j = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(body[j], 0)
            j += 1
        entries.append(_split_top_level(body[m.end():j - 1]))
    return entries


@dataclass(frozen=True)
class HeaderPolicy:
    """The header's lists: op -> policy, and the redispatch entries."""

    policies: dict[str, str]                       # "pow.Scalar" -> "fp32"
    redispatch: dict[str, tuple[str, str, str]]    # "norm.Scalar" -> (func, register sig, redispatch sig)


def parse_header(text: str, where: str = "autocast_mode.h") -> HeaderPolicy:
    bodies = _macro_bodies(text)
    missing = [name for name in [*HEADER_LISTS, REDISPATCH_LIST] if name not in bodies]
    if missing:
        raise ValueError(f"{where} defines no {', '.join(missing)}: this torch's autocast op "
                         "lists moved; torch_fl/_tables/autocast.py must learn the new layout")
    policies: dict[str, str] = {}
    for macro, policy in HEADER_LISTS.items():
        for args in _entries(bodies[macro]):
            op = args[0] + ("." + args[1] if len(args) > 1 else "")
            policies[op] = policy
    redispatch: dict[str, tuple[str, str, str]] = {}
    for args in _entries(bodies[REDISPATCH_LIST]):
        func, name, register_sig, redispatch_sig, policy = args
        func = re.sub(r"ADD_NS\((\w+)\)", r"\1", func)
        name = name.strip('"')
        policies[name] = policy
        redispatch[name] = (func, register_sig, redispatch_sig)
    return HeaderPolicy(policies=policies, redispatch=redispatch)


@functools.lru_cache(maxsize=1)
def header_policy() -> HeaderPolicy:
    path = header_path()
    return parse_header(path.read_text(), str(path))


def cuda_policies() -> dict[str, str]:
    """op -> CastPolicy enumerator of CUDA's autocast ("mm" -> "lower_precision_fp"),
    "banned" for the ops CUDA refuses; the ops the header names, unchecked
    (flsdk.codegen.autocast.torch_rules checks them against torchgen)."""
    policies = dict(header_policy().policies)
    policies.update({op: "banned" for op, what in CUDA_EXTRAS.items() if what == "banned"})
    return policies
