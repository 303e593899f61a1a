"""A backend's autocast policy: PyTorch's CUDA policy, read from the installed
torch, with per-op overrides from the op specs.

Where the policy comes from, and why that source is the right one
-----------------------------------------------------------------
Users expect `torch.autocast("<backend>")` to do what `torch.autocast("cuda")`
does. CUDA's policy is compiled into libtorch (aten/src/ATen/autocast_mode.cpp),
which expands the op lists `AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`,
`AT_FORALL_FP32_SET_OPT_DTYPE`, `AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE` and
`AT_FORALL_PROMOTE`. Those lists live in the installed header
`torch/include/ATen/autocast_mode.h` ("to make sure other backends can reuse the
policy op list", it says), which ships in the same wheel as the binary, so
reading them gives exactly the installed torch's policy, op by op and policy by
policy. The other candidates are weaker: the dispatcher
(`torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastCUDA")`) knows
which ops CUDA wraps but not how (every wrapper is registered from one line of
autocast_mode.cpp), `torch/testing/_internal/autocast_test_lists.py` is a
hand-picked sample of ops with arguments, and the docs' op reference is prose.

The dispatcher is the independent check: the ops it reports with an
AutocastCUDA kernel must be the header's ops plus `CUDA_EXTRAS` below
(tests/codegen/test_codegen_autocast.py asserts it, so drift in a new torch fails a
test instead of silently diverging), and the loaded backend's
AutocastPrivateUse1 kernels must be this policy (acme's tests assert it).

Rules
-----
* Every op of the header lists gets CUDA's policy, registered on the same op
  CUDA registers it on (`conv2d`, `linear`, `layer_norm` ... sit above autograd,
  so casts happen before autograd records the inputs).
* The wrapper is torch's `at::autocast::WrapFunction`, whose `cached_cast` casts
  every `Tensor`, `Tensor?` and `Tensor[]` argument (a convolution's bias too);
  `policy_rules` refuses ops with other tensor-holding argument types.
* An op spec's `autocast:` field overrides the policy of its op: a policy
  (`lower_precision_fp`, `fp32`, `promote`) replaces torch's, `fallthrough`
  removes it, `none` (the default) keeps torch's. A spec on a backend-level op
  that runs below another op's autograd node is registered on that op
  (`AUTOCAST_ENTRY_POINT`).
* Every other op falls through (runs with its inputs as they come).

Reading the header (its op lists, CUDA_EXTRAS, BANNED_MESSAGE) is text only and
lives in torch_fl._tables.autocast, shared with torch_fl.testing.autocast_reference
(the runtime does not import flsdk); this module resolves and checks it with
torchgen and adds the op specs' overrides.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from torchgen import local
from torchgen.api.types import DispatcherSignature
from torchgen.model import BaseTy, BaseType, FunctionSchema, ListType, OptionalType, Type

from flsdk.spec.errors import SpecError
from flsdk.spec.model import OpSpec
from torch_fl._tables.autocast import (  # noqa: F401  (re-exported: flsdk's names of them)
    BANNED_MESSAGE,
    CUDA_EXTRAS,
    HEADER_LISTS,
    REDISPATCH_LIST,
    HeaderPolicy,
    header_path,
    header_policy,
    parse_header,
)

from . import signatures

# A policy given in a spec for an op that runs below another op's autograd node
# is registered on that op: a cast below autograd would make the autograd
# node's saved inputs and its output disagree in dtype.
AUTOCAST_ENTRY_POINT = {
    "convolution_overrideable": "convolution",
    "convolution_backward_overrideable": None,  # backward ops are never autocast
}

SPEC_POLICIES = ("lower_precision_fp", "fp32", "promote")


@dataclass(frozen=True)
class Rule:
    """The autocast wrapper of one op."""

    op: str                        # the overload it is registered on: "pow.Tensor_Scalar"
    policy: str                    # a CastPolicy enumerator, or "banned"
    source: str                    # "torch" or the spec file that set it: "opspec/attention.yaml"
    redispatch: str | None = None  # fp32_append_dtype: the overload called with dtype=float32


# ---------------------------------------------------------------- resolution


def _normalize_sig(sig: str) -> str:
    """`const ::std::optional<at::Scalar> &` and `const std::optional<Scalar>&` compare equal."""
    return re.sub(r"\s+", "", re.sub(r"(::)?\b(std|at|c10)::", "", sig))


def _dispatcher(op: str, render) -> str:
    """`render(DispatcherSignature)` of an op, under the op's own torchgen flags
    (torchgen's type rules read them, as in ATen's build)."""
    f = signatures.native_functions()[op]
    with local.parametrize(use_const_ref_for_mutable_tensors=f.use_const_ref_for_mutable_tensors,
                           use_ilistref_for_tensor_lists=f.part_of_structured_group):
        return render(DispatcherSignature.from_schema(f.func))


def dispatcher_type(op: str) -> str:
    """C++ function type of an op's dispatcher signature: `at::Tensor (const at::Tensor &, ...)`."""
    return _dispatcher(op, lambda sig: sig.type())


def _redispatch_overload(func: str, redispatch_sig: str) -> str:
    """The overload of `func` whose dispatcher signature is the header's redispatch signature."""
    want = _normalize_sig(redispatch_sig)
    found = [name for name in signatures.native_functions()
             if name.partition(".")[0] == func and _normalize_sig(dispatcher_type(name)) == want]
    if len(found) != 1:
        raise ValueError(f"autocast_mode.h redispatches to {func}{redispatch_sig}, which matches "
                         f"{len(found)} overloads of the installed torch ({', '.join(found) or 'none'})")
    return found[0]


def _is_tensor(t: Type) -> bool:
    return isinstance(t, BaseType) and t.name == BaseTy.Tensor


def uncast_tensor_args(func: FunctionSchema) -> list[str]:
    """Arguments holding tensors that `cached_cast` would pass through uncast.

    cached_cast has overloads for Tensor, Tensor? and Tensor[]; a `Tensor?[]`
    (index lists) is passed as is, which is right only for integer indices."""
    bad = []
    for arg in func.arguments.flat_all:
        t = arg.type
        plain = _is_tensor(t) or (isinstance(t, OptionalType) and _is_tensor(t.elem)) \
            or (isinstance(t, ListType) and _is_tensor(t.elem))
        if plain or not t.is_tensor_like():
            continue
        if arg.name == "indices":  # Tensor?[] indices: integer or bool, never autocast
            continue
        bad.append(f"{arg.name}: {t}")
    return bad


@functools.lru_cache(maxsize=1)
def torch_rules() -> dict[str, Rule]:
    """CUDA's policy of the installed torch, by op."""
    header = header_policy()
    functions = signatures.native_functions()
    rules: dict[str, Rule] = {}
    for op, policy in header.policies.items():
        if op not in functions:
            raise ValueError(f"autocast_mode.h lists {op}, which the installed torch's "
                             "native_functions.yaml does not have")
        redispatch = None
        if op in header.redispatch:
            func, _, redispatch_sig = header.redispatch[op]
            redispatch = _redispatch_overload(func, redispatch_sig)
        uncast = uncast_tensor_args(functions[op].func)
        if uncast:
            raise ValueError(f"autocast_mode.h gives {op} {policy}, but at::autocast::cached_cast would "
                             f"leave {', '.join(uncast)} uncast; flsdk/codegen/autocast.py must handle it")
        rules[op] = Rule(op=op, policy=policy, source="torch", redispatch=redispatch)
    for op, what in CUDA_EXTRAS.items():
        if what == "banned":
            rules[op] = Rule(op=op, policy="banned", source="torch")
    return rules


def entry_point(op: str) -> str | None:
    """The op an autocast policy given for `op` is registered on (None: never)."""
    base, dot, overload = op.partition(".")
    if base not in AUTOCAST_ENTRY_POINT:
        return op
    target = AUTOCAST_ENTRY_POINT[base]
    return None if target is None else target + dot + overload


def policy_rules(specs: list[OpSpec]) -> list[Rule]:
    """The backend's autocast rules: torch's, then the specs' overrides (spec wins).

    Raises SpecError for a spec policy that cannot be honoured."""
    rules = dict(torch_rules())
    set_by: dict[str, OpSpec] = {}
    for spec in specs:
        if spec.is_custom or spec.autocast == "none":
            continue
        target = entry_point(spec.op)
        if target is None or "_backward" in spec.op.partition(".")[0]:
            raise SpecError(spec.file, spec.line, "autocast",
                            f"{spec.op} runs inside autograd's backward; backward ops are never autocast",
                            "no autocast field on this op")
        if target in set_by and set_by[target].autocast != spec.autocast:
            other = set_by[target]
            raise SpecError(spec.file, spec.line, "autocast",
                            f"{spec.op} sets {spec.autocast} on {target}, but {other.file}:{other.line} "
                            f"({other.op}) sets {other.autocast}", "one policy per op")
        set_by[target] = spec
        if spec.autocast == "fallthrough":
            rules.pop(target, None)
            continue
        if target not in signatures.native_functions():
            raise SpecError(spec.file, spec.line, "autocast",
                            f"autocast of {spec.op} registers on {target}, which this torch does not have")
        uncast = uncast_tensor_args(signatures.native_functions()[target].func)
        if uncast:
            raise SpecError(spec.file, spec.line, "autocast",
                            f"{spec.autocast} on {target} would leave {', '.join(uncast)} uncast "
                            "(at::autocast::cached_cast casts Tensor, Tensor? and Tensor[] arguments only)",
                            "fallthrough or none")
        # The file, not its line: generated code must not change when a spec file's lines move.
        source = f"{Path(spec.file).parent.name}/{Path(spec.file).name}"
        rules[target] = Rule(op=target, policy=spec.autocast, source=source)
    return sorted(rules.values(), key=lambda r: r.op)


# ---------------------------------------------------------------- template values


def template_values(specs: list[OpSpec]) -> dict:
    """What templates/cpp/autocast.cpp.j2 prints: one list per kind of registration."""
    kernels, redispatch, banned = [], [], []
    for rule in policy_rules(specs):
        name, _, overload = rule.op.partition(".")
        if rule.policy == "banned":
            fn = "banned_" + rule.op.replace(".", "_")
            banned.append({"op": rule.op, "fn": fn, "decl": _dispatcher(rule.op, lambda sig: sig.defn(name=fn)),
                           "message": BANNED_MESSAGE[rule.op], "source": rule.source})
        elif rule.redispatch:
            redispatch.append({"op": rule.op, "policy": rule.policy, "source": rule.source,
                               "fn": "at::" + rule.redispatch.partition(".")[0],
                               "register_type": dispatcher_type(rule.op),
                               "redispatch_type": dispatcher_type(rule.redispatch)})
        else:
            kernels.append({"name": name, "overload": overload, "policy": rule.policy,
                            "source": rule.source})
    return {"kernels": kernels, "redispatch": redispatch, "banned": banned}
