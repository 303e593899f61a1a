"""C++ signatures of ATen ops, computed by torchgen from the installed torch.

The vendor-facing kernel signature is torchgen's faithful, non-SymInt C++
signature; the registered wrapper uses the dispatcher signature and translates
(SymInt -> int) with torchgen.api.translate, so vendors never see SymInt.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchgen import local
from torchgen.api import cpp
from torchgen.api.translate import UnsatError, translate
from torchgen.api.types import CppSignature, DispatcherSignature
from torchgen.model import FunctionSchema, NativeFunction

from flsdk.spec.aten import native_functions  # noqa: F401  (codegen reads it from here)


def kernel_name(op_name: str) -> str:
    """`add.Tensor` -> `k_add_Tensor`, `relu` -> `k_relu`.

    The `k_` prefix keeps kernels out of ADL's reach of `at::` functions.
    """
    base, _, overload = op_name.partition(".")
    return "k_" + base + ("_" + overload if overload else "")


@dataclass(frozen=True)
class KernelSignature:
    op: str              # "add.Tensor"
    kernel: str          # "k_add_Tensor"
    decl: str            # vendor kernel declaration (faithful, non-SymInt)
    defn: str            # vendor kernel definition header line (no defaults)
    wrapper_decl: str    # dispatcher-signature wrapper header line (named `{wrapper}`)
    call_args: str       # expression list calling the kernel from the wrapper
    returns: str         # C++ return type
    schema: str          # the op's schema, for comments


def _params(f: NativeFunction):
    return local.parametrize(
        use_const_ref_for_mutable_tensors=f.use_const_ref_for_mutable_tensors,
        use_ilistref_for_tensor_lists=f.part_of_structured_group,
    )


def kernel_signature(f: NativeFunction, wrapper_name: str = "wrapper") -> KernelSignature:
    with _params(f):
        return _signature_of_schema(f.func, f.cpp_no_default_args, wrapper_name)


def custom_kernel_signature(schema: str, wrapper_name: str = "wrapper") -> KernelSignature:
    """Signature of a vendor's custom op from its schema string ("fused_gelu(Tensor x) -> Tensor")."""
    func = FunctionSchema.parse(schema)
    with local.parametrize(use_const_ref_for_mutable_tensors=False,
                           use_ilistref_for_tensor_lists=False):
        return _signature_of_schema(func, set(), wrapper_name)


def _signature_of_schema(func: FunctionSchema, no_default_args, wrapper_name: str) -> KernelSignature:
    """Call inside local.parametrize (torchgen's signature rules depend on it)."""
    op = str(func.name)
    name = kernel_name(op)
    sig = CppSignature(
        func=func, symint=False, method=False, faithful=True,
        cpp_no_default_args=no_default_args,
    )
    dispatcher = DispatcherSignature.from_schema(func)
    try:
        call_args = ", ".join(
            e.expr for e in translate(dispatcher.arguments(), sig.arguments(), method=False)
        )
    except UnsatError:
        call_args = _call_args_by_name(dispatcher, sig)
    return KernelSignature(
        op=op,
        kernel=name,
        decl=sig.decl(name=name),
        defn=sig.defn(name=name),
        wrapper_decl=dispatcher.defn(name=wrapper_name),
        call_args=call_args,
        returns=cpp.returns_type(func.returns, symint=False).cpp_type(),
        schema=str(func),
    )


def _call_args_by_name(dispatcher: DispatcherSignature, sig: CppSignature) -> str:
    """Fallback when torchgen's translate has no rule (memory_format of factories).

    Faithful and dispatcher arguments share names; only SymInt types differ.
    """
    available = {b.name: b.type for b in dispatcher.arguments()}
    exprs = []
    for b in sig.arguments():
        source = available[b.name]
        if "SymIntArrayRef" in source and "SymIntArrayRef" not in b.type:
            exprs.append(f"C10_AS_INTARRAYREF_SLOW({b.name})")
        elif source == "c10::SymInt" and b.type == "int64_t":
            exprs.append(f"{b.name}.guard_int(__FILE__, __LINE__)")
        else:
            exprs.append(b.name)
    return ", ".join(exprs)


def call_args(f_source: NativeFunction, f_target: NativeFunction) -> str:
    """Arguments that call `f_target`'s vendor kernel from `f_source`'s dispatcher wrapper.

    Used for in-place and out= wrappers that call the functional kernel: the
    arguments share names, only constness and SymInt-ness differ.
    """
    with _params(f_source):
        dispatcher = DispatcherSignature.from_schema(f_source.func)
    with _params(f_target):
        target = CppSignature(
            func=f_target.func, symint=False, method=False, faithful=True,
            cpp_no_default_args=f_target.cpp_no_default_args,
        )
        try:
            return ", ".join(
                e.expr for e in translate(dispatcher.arguments(), target.arguments(), method=False)
            )
        except UnsatError:
            return _call_args_by_name(dispatcher, target)


def wrapper_decl(f: NativeFunction, name: str) -> str:
    with _params(f):
        return DispatcherSignature.from_schema(f.func).defn(name=name)


def signature_of(op_name: str) -> KernelSignature:
    functions = native_functions()
    if op_name not in functions:
        raise KeyError(op_name)
    return kernel_signature(functions[op_name])


if __name__ == "__main__":  # `python -m flsdk.codegen.signatures add.Tensor relu`
    import sys

    for arg in sys.argv[1:]:
        s = signature_of(arg)
        print(f"// {s.schema}\n{s.decl};\n")
