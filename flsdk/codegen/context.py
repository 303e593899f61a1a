"""From the typed spec model to template contexts: all decisions live here.

Templates only print what this module computes (lists of lines, names,
literals), so the C++ and Python they produce can be read off this file.
"""

from __future__ import annotations

import dataclasses
import pprint
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from torchgen.model import BaseTy, BaseType, FunctionSchema, ListType, NativeFunction, OptionalType

from flsdk import __version__ as FLSDK_VERSION
from flsdk.spec.device_only import DEVICE_ONLY_OPS
from flsdk.spec.dtypes import DTYPES, scalar_type
from flsdk.spec.model import Backend, OpSpec

from . import autocast, signatures
from .glue import GLUE_HOOK_KERNELS, GLUE_OPS, GLUE_OVERRIDES
from .kernel_scan import STUB_MARKER, KernelScan, scan_device_sources

# The C++ files of generated/, plus the registration shards (register_shard_count);
# the .cpp files among them are the glue sources the build compiles, in this order.
GENERATED_CPP = (
    "runtime_adapter.h", "host_sync.h", "backend.h", "kernel_api.h", "device_config.h",
    "glue_hooks.h", "runtime_init.cpp", "host_sync.cpp", "allocator.h", "allocator.cpp",
    "guard.cpp", "hooks.cpp", "minimal_ops.cpp", "copies.cpp", "fallback.h",
    "fallback_device_only.h", "fallback.cpp", "fallback_device_only.cpp", "kernels.h",
    "register_kernels.h", "register_kernels.cpp", "native_ops.h", "native_ops.cpp",
    "autocast.cpp", "host_kernels.h", "host_kernels.cpp", "python_module.cpp", "ccl_adapter.h",
    "distributed.h", "process_group.cpp", "comm_work.cpp", "comm_native.cpp", "comm_staged.cpp",
    "python_distributed.h", "python_distributed.cpp", "ipc.h", "ipc.cpp", "ddp_timer.cpp",
    "op_routes.h", "op_routes.cpp", "profiler.h", "profiler.cpp", "memory_history.h",
    "memory_history.cpp",
    "adapter_contract.h", "adapter_contract.cpp",
)
# The same for every backend: ordinary C++ in flsdk/static_glue/<name>, copied
# verbatim (the namespace and device facts come from the generated device_config.h),
# so it compiles and lints where it is written. The others vary per backend and are
# rendered from templates/cpp/<name>.j2.
STATIC_GLUE = frozenset({
    "runtime_adapter.h", "host_sync.h", "backend.h", "kernel_api.h", "runtime_init.cpp",
    "host_sync.cpp", "allocator.h", "allocator.cpp", "guard.cpp", "hooks.cpp", "minimal_ops.cpp",
    "copies.cpp", "fallback.h", "fallback_device_only.h", "fallback.cpp", "native_ops.h",
    "host_kernels.h", "host_kernels.cpp", "python_module.cpp", "ccl_adapter.h",
    "distributed.h", "process_group.cpp", "comm_work.cpp", "comm_native.cpp", "comm_staged.cpp",
    "python_distributed.h", "python_distributed.cpp", "ipc.h", "ipc.cpp", "ddp_timer.cpp",
    "op_routes.h", "op_routes.cpp", "profiler.h", "profiler.cpp", "memory_history.h",
    "memory_history.cpp",
    "adapter_contract.h", "adapter_contract.cpp",
})
# flsdk's kernel library (flsdk/kernel_lib/, common.h says what is in it): the
# helpers kernels use, copied verbatim into generated/kernel_lib/ so that a fix
# reaches every backend at its next gen. convert.cpp, the one source, calls the
# backend's port (port.h: kernels/kernel_port.cpp), which only a backend whose
# device parts run as host code (runtime_primitives: host_kernels) defines: it
# is compiled for those alone.
KERNEL_LIB_DIR = "flsdk/kernel_lib"
KERNEL_LIB = ("common.h", "dtype.h", "errors.h", "args.h", "alloc.h", "device.h", "iter.h",
              "pointwise.h", "parallel.h", "dense.h", "port.h", "queued_work.h", "random_key.h",
              "convert.cpp")
KERNEL_LIB_SOURCE = "kernel_lib/convert.cpp"
# Static glue written only for a backend with kernels in a device language
# (device.yaml device_code): the lookup of generated/device_sources.cpp.
DEVICE_CODE_GLUE = ("device_sources.h",)
# Build tools copied the same way: the post-link symbol check of sources.cmake and
# the progress lines a build prints on the terminal.
STATIC_TOOLS = ("check_symbols.py", "build_progress.py")
# The Python glue, the same for every backend: torch_fl/backend_glue/<name>, copied
# verbatim into <package>/_generated/backend_glue/ so that the backend runs without
# torch_fl installed; the generated backend.py and device_module.py call it with the
# backend's name and facts.
BACKEND_GLUE_DIR = "torch_fl/backend_glue"
BACKEND_GLUE = ("__init__.py", "loader.py", "device_module.py", "device_defaults.py",
                "distributed.py", "c10d_default_backend.py", "multiprocessing.py", "op_routes.py",
                "memory.py", "build_record.py")

# Unity groups of the glue (CMake UNITY_BUILD_MODE GROUP, sources.cmake's
# flsdk_glue_unity_build): the glue files of a group compile as one translation
# unit, so the dispatcher, ATen and pybind11 headers that nearly every glue file
# includes are parsed once per group instead of once per file. Measured on a
# scaffold (g++ 12, -O3, issue 28): the thirteen files below cost 70 s of CPU
# compiled one by one, 40 s as these two groups. Two groups of about equal
# cost keep both cores busy. Only glue that adding or editing a kernel leaves
# alone is grouped: the registration shards and native_ops.cpp (both rewritten
# when a kernel is added) compile alone, so adding a kernel recompiles a shard
# and a 20-line file, not a group. Kernels are never grouped.
GLUE_UNITY_GROUPS = {
    "flsdk_glue_a": ("autocast.cpp", "minimal_ops.cpp", "register_kernels.cpp", "guard.cpp",
                     "allocator.cpp", "runtime_init.cpp", "host_sync.cpp", "op_routes.cpp"),
    "flsdk_glue_b": ("python_module.cpp", "fallback.cpp", "copies.cpp", "fallback_device_only.cpp",
                     "hooks.cpp", "host_kernels.cpp", "memory_history.cpp",
                     "adapter_contract.cpp"),
    # The c10d process group and device-tensor sharing: they share torch's distributed
    # and Python headers (Backend.hpp pulls in all of ATen), parsed once for the group.
    "flsdk_glue_dist": ("process_group.cpp", "comm_work.cpp", "comm_native.cpp",
                        "comm_staged.cpp", "python_distributed.cpp", "ipc.cpp", "ddp_timer.cpp"),
}

# What device.yaml's `collectives:` means, for the generated distributed tests' docstring.
COLLECTIVES_MEANING = {
    "native": "bytes move through the collective library of generated/ccl_adapter.h",
    "staged": "bytes are staged through pinned host memory over gloo",
}

# Glue compiled alone on purpose: profiler.cpp includes Kineto's headers with
# defines of its own (USE_KINETO, a header-only fmt) and an include directory
# that a unity group would either lose or spread to the files after it.
GLUE_STANDALONE = ("profiler.cpp",)

# The kernel registrations are split over several translation units, as torchgen
# shards RegisterCPU.cpp: one file of every wrapper would recompile whole for each
# new kernel. An op's shard is a stable hash of its name (register_shard), so adding
# an op rewrites one shard and the others stay byte-identical. Every shard pays for
# the dispatcher headers, so a small backend gets fewer: the count doubles per
# WRAPPERS_PER_SHARD wrappers (1, 2, 4, 8), and when it doubles an op stays in its
# shard or moves to shard + old count (crc % 2n), so resharding is rare and halfway.
MAX_REGISTER_SHARDS = 8
WRAPPERS_PER_SHARD = 64


def register_shard_count(wrappers: int) -> int:
    count = 1
    while count < MAX_REGISTER_SHARDS and wrappers > count * WRAPPERS_PER_SHARD:
        count *= 2
    return count


def register_shard(op: str, count: int) -> int:
    """The generated/register_kernels_<i>.cpp that registers `op` and its variants."""
    return zlib.crc32(op.encode()) % count


@dataclass(frozen=True)
class Output:
    """One generated file: the template rendered (or, with `static`, the file
    <static_dir>/<template> of the flsdk distribution copied verbatim), where it
    goes, and what the template needs beyond BackendContext.values."""

    template: str
    path: str
    extra: dict
    static: bool = False
    static_dir: str = "flsdk/static_glue"


@dataclass
class Wrapper:
    name: str          # C++ wrapper function
    op: str            # registered overload, "add.Tensor"
    schema: str
    decl: str
    checks: list[str]
    body: list[str]
    kernel: signatures.KernelSignature  # the vendor kernel it calls
    variant_kernel: signatures.KernelSignature | None = None  # the vendor's in-place/out kernel, tried first
    # The dtype route (_dtype_route): the tensor arguments that must be in `dtypes` (the
    # op's, narrowed by device.yaml) for the kernel to run; other calls go to the CPU
    # fallback, or fail when `falls_back` is False (custom and device-only ops).
    dtypes: tuple[str, ...] = ()
    dtype_args: tuple[str, ...] = ()
    falls_back: bool = True

    @property
    def op_info(self) -> str:
        """The wrapper's runtime::OpInfo initializer: the op and the kernels it runs, which
        the glue hands the runtime (runtime::current_op(), runtime_adapter.h) while it runs."""
        op = self.op if "::" in self.op else "aten::" + self.op
        kernels = [k.kernel for k in (self.variant_kernel, self.kernel) if k is not None]
        return f'{{"{op}", "{", ".join(kernels)}"}}'


def _optional_tensor_lists(func: FunctionSchema) -> list[str]:
    """Names of `Tensor?[]` arguments: the index lists of x[idx] and x[idx] = v.
    As on CUDA, they may come from the CPU; the wrapper moves them."""
    return [arg.name for arg in func.arguments.flat_all
            if isinstance(arg.type, ListType) and isinstance(arg.type.elem, OptionalType)
            and isinstance(arg.type.elem.elem, BaseType) and arg.type.elem.elem.name == BaseTy.Tensor]


def _device_checks(func: FunctionSchema) -> list[str]:
    """Lines checking that every tensor argument sits on one device, then
    moving CPU index lists to that device."""
    lines = []
    moved = _optional_tensor_lists(func)
    for arg in func.arguments.flat_all:
        t = arg.type
        if arg.name in moved:
            continue
        if isinstance(t, BaseType) and t.name == BaseTy.Tensor:
            fn = "check_device"
        elif isinstance(t, OptionalType) and isinstance(t.elem, BaseType) and t.elem.name == BaseTy.Tensor:
            fn = "check_device"
        elif isinstance(t, ListType) and t.elem.is_tensor_like():
            fn = "check_device_list"
        else:
            continue
        lines.append(f'{fn}(common_device, {arg.name}, "{func.name}", "{arg.name}");')
    for name in moved:
        lines.append(f'auto {name}_here = indices_to_device({name}, common_device, "{func.name}");')
    return lines


def _use_moved_indices(func: FunctionSchema, call_args: str) -> str:
    for name in _optional_tensor_lists(func):
        call_args = re.sub(rf"\b{name}\b", f"{name}_here", call_args)
    return call_args


def _tensor_like(t) -> bool:
    """Tensor, Tensor? or a list of them."""
    if isinstance(t, OptionalType):
        t = t.elem
    if isinstance(t, ListType):
        t = t.elem.elem if isinstance(t.elem, OptionalType) else t.elem
    return isinstance(t, BaseType) and t.name == BaseTy.Tensor


def _base_is(t, ty: BaseTy) -> bool:
    t = t.elem if isinstance(t, OptionalType) else t
    return isinstance(t, BaseType) and t.name == ty


def _has_tested_dtype(value) -> bool:
    """A sample value drawn in the tested dtype: a `T(...)` token, or a list holding one."""
    if isinstance(value, str):
        return value.startswith("T(")
    if isinstance(value, (list, tuple)):
        return any(_has_tested_dtype(v) for v in value)
    return False


def args_of_tested_dtype(spec: OpSpec, func: FunctionSchema) -> set[str]:
    """Arguments that take the op's dtype (the spec's `dtypes`): those its
    samples draw as `T(...)`; without samples, the first tensor argument.
    The others (indices, masks, `F(...)` tensors) may be any dtype the device
    computes natively."""
    positional = [a.name for a in func.arguments.flat_positional]
    names: set[str] = set()
    for sample in spec.samples:
        items = list(sample)
        kwargs = items.pop() if items and isinstance(items[-1], dict) else {}
        names.update(n for n, v in zip(positional, items) if _has_tested_dtype(v))
        names.update(n for n, v in kwargs.items() if _has_tested_dtype(v))
    if not names:
        first = next((a.name for a in func.arguments.flat_all if _tensor_like(a.type)), None)
        names = {first} if first else set()
    return names


def _dtype_set(dtypes) -> str:
    return "dtype_set({" + ", ".join(f"c10::ScalarType::{scalar_type(d)}" for d in dtypes) + "})"


def _routed_args(func: FunctionSchema, tested: set[str], not_passed: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The tensor arguments _dtype_route checks against the op's dtypes, in schema order."""
    return tuple(a.name for a in func.arguments.flat_all
                 if a.name in tested and a.name not in not_passed and _tensor_like(a.type))


def _dtype_route(func: FunctionSchema, wrapper: str, tested: set[str], op_dtypes,
                 not_passed: frozenset[str] = frozenset(), custom: bool = False) -> list[str]:
    """Lines sending a call whose dtypes the kernel does not list to the CPU
    fallback (custom and device-only ops, which have no CPU kernel, fail naming
    op, device and dtypes). Tested-dtype arguments and scalars must be in the op's dtypes,
    `ScalarType` arguments and other tensors in the device's (device.yaml `dtypes`:
    what it computes natively). `not_passed`: arguments the kernel never sees
    (the out= buffer a variant wrapper copies the result into)."""
    terms = []
    for arg in func.arguments.flat_all:
        if arg.name in not_passed:
            continue
        if _tensor_like(arg.type):
            terms.append(f"computes({'op_dtypes' if arg.name in tested else 'kDeviceDtypes'}, {arg.name})")
        elif _base_is(arg.type, BaseTy.ScalarType):
            # A dtype argument names a result or accumulation dtype, not the dtype
            # the kernel reads (log_softmax's backward gets the forward input's
            # bf16 under autocast while it computes in float32): the device must
            # compute it, the op's list is about its tensors.
            terms.append(f"computes(kDeviceDtypes, {arg.name})")
        elif _base_is(arg.type, BaseTy.Scalar):
            terms.append(f"computes(op_dtypes, {arg.name})")
    if not terms:
        return []
    lines = [f"constexpr DtypeSet op_dtypes = {_dtype_set(op_dtypes)};"]
    condition = " && ".join(terms)
    if custom:
        lines.append(f'TORCH_CHECK_TYPE({condition}, kBackendName, ": {func.name}: an argument\'s dtype is '
                     f'not among the op\'s dtypes ({", ".join(op_dtypes)}) and the op has no CPU '
                     f'kernel to fall back to");')
        return lines
    args = ", ".join(a.name for a in func.schema_order_arguments())  # the dispatcher's order
    lines.append(f"if (!({condition}))")
    lines.append(f'  return run_on_cpu<decltype({wrapper})>("aten::{func.name.name}", '
                 f'"{func.name.overload_name}", {args});')
    return lines


def routable(spec: OpSpec) -> bool:
    """Whether calls of the op can be routed to the CPU at run time (op_routes.h):
    an aten op with a CPU kernel, or a device-only op with a CPU reference op
    (convolution_overrideable runs as CPU's convolution). Custom ops and the other
    device-only ops have nothing on the CPU to run."""
    if spec.is_custom:
        return False
    info = DEVICE_ONLY_OPS.get(spec.op.partition(".")[0]) or DEVICE_ONLY_OPS.get(spec.op)
    return info is None or info.cpu_reference is not None


def _op_route(func: FunctionSchema, wrapper: str, spec: OpSpec) -> list[str]:
    """Lines sending the call to the CPU fallback when the op is routed there at run
    time (torch_fl.set_op_route, TORCH_FL_OP_ROUTES). Normal runs pay one relaxed
    atomic load (op_routes::any())."""
    if not routable(spec):
        return []
    args = ", ".join(a.name for a in func.schema_order_arguments())  # the dispatcher's order
    return [f'if (op_routes::any() && op_routes::to_fallback("{func.name}"))',
            f'  return run_routed<decltype({wrapper})>("aten::{func.name.name}", '
            f'"{func.name.overload_name}", {args});']


def _annotated(body: list[str], func: FunctionSchema, spec: OpSpec, kernel: str, op_dtypes,
               tested: set[str]) -> list[str]:
    """`body` inside a try whose catch adds the backend, the op and the call's dtype to
    a c10::Error the kernel lets through (PyTorch's own "expected scalar type Float but
    found Double" names none of them), then rethrows it (register_kernels.h)."""
    dtype_arg = next((a.name for a in func.schema_order_arguments() if a.name in tested
                      and (_base_is(a.type, BaseTy.Tensor))), None)
    dtype = f"dtype_of({dtype_arg})" if dtype_arg else "std::nullopt"
    return ["try {", *[f"  {line}" for line in body], "} catch (c10::Error& error) {",
            f'  annotate_kernel_error(error, "{spec.namespace}::{func.name}", "{spec.op}", "{kernel}", '
            f'"{", ".join(op_dtypes)}", {dtype});',
            "  throw;", "}"]


def falls_back(spec: OpSpec) -> bool:
    """Whether calls in a dtype the op's kernel does not compute can run on the CPU
    fallback. Custom and device-only ops have no CPU kernel: an unlisted dtype is an error."""
    return not (spec.is_custom or spec.op.partition(".")[0] in DEVICE_ONLY_OPS or spec.op in DEVICE_ONLY_OPS)


def _functional_wrapper(sig: signatures.KernelSignature, func: FunctionSchema, spec: OpSpec,
                        op_dtypes) -> Wrapper:
    name = "wrapper_" + sig.kernel[2:]
    cpu_fallback = falls_back(spec)
    tested = args_of_tested_dtype(spec, func)
    route = _dtype_route(func, name, tested, op_dtypes, custom=not cpu_fallback)
    body = [f"return kernels::{sig.kernel}({_use_moved_indices(func, sig.call_args)});"]
    return Wrapper(
        name=name, op=sig.op, schema=sig.schema,
        decl=sig.wrapper_decl.replace("wrapper(", name + "(", 1),
        checks=_device_checks(func) + _op_route(func, name, spec) + route,
        body=_annotated(body, func, spec, sig.kernel, op_dtypes, tested),
        kernel=sig, dtypes=tuple(op_dtypes), dtype_args=_routed_args(func, tested),
        falls_back=cpu_fallback,
    )


def variant_kernel_signature(f_variant: NativeFunction) -> signatures.KernelSignature:
    """The optional kernel of an in-place or out= overload (`k_mul__Tensor`,
    `k_mm_out`): the overload's own C++ signature, but it returns whether it wrote
    `self` / `out` itself. It may decline (false) any call it has no fast path for;
    the wrapper then computes with the functional kernel and copies, as without it."""
    sig = signatures.kernel_signature(f_variant)
    assert sig.decl.startswith(sig.returns) and sig.defn.startswith(sig.returns), sig.decl
    return dataclasses.replace(sig, decl="bool" + sig.decl[len(sig.returns):],
                               defn="bool" + sig.defn[len(sig.returns):], returns="bool")


def _variant_wrapper(kind: str, f_variant: NativeFunction, f_functional: NativeFunction, spec: OpSpec,
                     op_dtypes, sig: signatures.KernelSignature,
                     variant_kernel: signatures.KernelSignature | None = None) -> Wrapper | None:
    """In-place / out= wrapper computing with the functional kernel, then copying.
    When the backend wrote the overload's own kernel (`variant_kernel`), it is tried first."""
    kernel = signatures.kernel_name(str(f_functional.func.name))
    name = "wrapper_" + signatures.kernel_name(str(f_variant.func.name))[2:]
    args = _use_moved_indices(f_variant.func, signatures.call_args(f_variant, f_functional))
    returns = f_functional.func.returns
    if len(returns) != 1 or not (isinstance(returns[0].type, BaseType) and returns[0].type.name == BaseTy.Tensor):
        return None  # only single-tensor results can be copied into self/out
    if kind == "inplace":
        target = f_variant.func.arguments.self_arg.argument.name
    else:
        outs = f_variant.func.arguments.out
        if len(outs) != 1:
            return None
        target = outs[0].name
    direct = []
    if variant_kernel is not None:
        direct = [f"if (kernels::{variant_kernel.kernel}("
                  f"{_use_moved_indices(f_variant.func, variant_kernel.call_args)})) return {target};"]
    # self must already fit the result; out is resized to it
    fit = "check_inplace" if kind == "inplace" else "resize_out"
    body = direct + [
        f"auto result = kernels::{kernel}({args});",
        f'{fit}({target}, result, "{f_variant.func.name}");',
        f"{target}.copy_(result);",
        f"return {target};",
    ]
    # The functional kernel computes; the variant's self takes the op's dtype.
    tested = args_of_tested_dtype(spec, f_functional.func) | ({"self"} if kind == "inplace" else set())
    not_passed = frozenset(a.name for a in f_variant.func.arguments.out) if kind == "out" else frozenset()
    route = _dtype_route(f_variant.func, name, tested, op_dtypes, not_passed)
    body = _annotated(body, f_variant.func, spec, kernel, op_dtypes, tested)
    return Wrapper(
        name=name, op=str(f_variant.func.name), schema=str(f_variant.func),
        decl=signatures.wrapper_decl(f_variant, name),
        checks=_device_checks(f_variant.func) + _op_route(f_variant.func, name, spec) + route,
        body=body, kernel=sig,
        variant_kernel=variant_kernel, dtypes=tuple(op_dtypes),
        dtype_args=_routed_args(f_variant.func, tested, not_passed),
    )


def kernel_name(spec: OpSpec) -> str:
    return signatures.kernel_name(spec.name)


def variant_kernel_names(backend: Backend) -> set[str]:
    """The in-place and out= kernels the backend may write (`k_mul__Tensor` for
    mul_.Tensor, `k_mm_out` for mm.out): one per variant a spec lists."""
    return {signatures.kernel_name(spec.variant_ops[kind]) for spec in backend.ops if not spec.is_custom
            for kind in spec.variants if spec.variant_ops.get(kind)}


@dataclass
class BackendContext:
    """Everything the templates of one backend need."""

    values: dict
    wrappers: list[Wrapper]          # aten ops
    custom_wrappers: list[Wrapper]   # the backend's own ops (TORCH_LIBRARY(<name>))
    custom_schemas: list[str]
    kernel_sigs: list[signatures.KernelSignature]
    registered_ops: list[str]
    skipped_variants: list[str]
    outputs: list[Output]
    # Where each op spec ends up (`flsdk ops --op`), recorded as the outputs are built:
    # spec op -> {registered overload: the generated/register_kernels_<i>.cpp registering it}
    registrations: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    conformance_file: str = ""       # tests/generated/test_<name>_conformance.py
    conformance_cases: dict = dataclasses.field(default_factory=dict)  # conformance_cases()

    def conformance_test_ids(self, op: str) -> list[str]:
        """The pytest node ids (relative to the backend root) of the generated
        conformance tests of spec op `op`: its own cases, its variants', or its
        visible skip."""
        return [f"{self.conformance_file}::{test}" for test in conformance_tests_of(self.conformance_cases, op)]


def _custom_schema(spec: OpSpec) -> str:
    """The schema of a custom op (the loader sets one for every custom op)."""
    assert spec.schema is not None, spec.op
    return spec.schema


@dataclass
class _Registrations:
    """What build_context derives from the specs and the kernel scan, before any output."""

    aten_sigs: dict[str, signatures.KernelSignature]   # spec op -> its kernel's signature
    kernel_sigs: list[signatures.KernelSignature]      # every kernel a spec names (kernels.h)
    wrappers: list[Wrapper]                            # aten ops registered, variants included
    custom_wrappers: list[Wrapper]                     # the backend's own ops
    skipped: list[str]                                 # what was not registered, and why
    registered: list[str]                              # registered op names (custom ones qualified)
    native: list[str]                                  # registered + kernels the glue calls itself
    custom_schemas: list[str]                          # every custom op's schema (stubs' too: m.def)


def build_context(backend: Backend, scan: KernelScan, torch_version: str) -> BackendContext:
    """Everything the templates of `backend` need, built piece by piece: the
    registrations (wrappers), the values every template sees (device facts, op
    facts), then the outputs (C++ glue and registration shards, build tools,
    Python package, generated tests)."""
    d = backend.descriptor
    regs = _registrations(backend, scan)
    values = _device_values(backend, torch_version) | _op_values(backend, scan, regs)
    outputs, registrations = _cpp_outputs(backend, regs)
    # device_sources.cpp is the runtime's (it needs no torch): sources.cmake names it
    # FLSDK_DEVICE_SOURCES for runtime/runtime.cmake, apart from the glue.
    values["glue_sources"] = [out.path.removeprefix("generated/") for out in outputs
                              if out.path.startswith("generated/") and out.path.endswith(".cpp")
                              and out.path not in ("generated/device_sources.cpp",
                                                   f"generated/{KERNEL_LIB_SOURCE}")]
    if "host_kernels" in d.runtime_primitives:
        values["glue_sources"].append(KERNEL_LIB_SOURCE)
    values["device_sources_cpp"] = bool(d.device_code_suffixes)
    values["glue_unity_groups"] = [
        {"name": name, "files": [f for f in files if f in values["glue_sources"]]}
        for name, files in GLUE_UNITY_GROUPS.items()]
    outputs.append(Output("cmake/sources.cmake.j2", "generated/sources.cmake", {}))
    outputs += [Output(name, f"generated/{name}", {}, static=True) for name in STATIC_TOOLS]
    outputs += _python_outputs(values["package"])
    cases = conformance_cases(backend, regs.native)
    conformance_file = f"tests/generated/test_{d.name}_conformance.py"
    outputs += _test_outputs(d, conformance_file, cases)
    return BackendContext(values=values, wrappers=regs.wrappers, custom_wrappers=regs.custom_wrappers,
                          custom_schemas=regs.custom_schemas,
                          kernel_sigs=regs.kernel_sigs, registered_ops=regs.registered,
                          skipped_variants=regs.skipped, outputs=outputs, registrations=registrations,
                          conformance_file=conformance_file, conformance_cases=cases)


def _registrations(backend: Backend, scan: KernelScan) -> _Registrations:
    """The wrappers of every op whose kernel is native (its in-place / out variants
    too), and what is not registered with the reason."""
    d = backend.descriptor
    functions = signatures.native_functions()
    aten_ops = [spec for spec in backend.ops if not spec.is_custom]
    custom_ops = [spec for spec in backend.ops if spec.is_custom]
    aten_sigs = {spec.op: signatures.kernel_signature(functions[spec.op]) for spec in aten_ops}
    custom_sigs = {spec.op: signatures.custom_kernel_signature(_custom_schema(spec)) for spec in custom_ops}
    custom_wrappers = [
        _functional_wrapper(custom_sigs[spec.op], FunctionSchema.parse(_custom_schema(spec)), spec,
                            backend.dtypes_for(spec))
        for spec in custom_ops if scan.status(kernel_name(spec)) == "native"
    ]
    wrappers: list[Wrapper] = []
    skipped: list[str] = []
    for spec in aten_ops:
        if scan.status(kernel_name(spec)) != "native":
            continue
        if spec.op in GLUE_OPS and spec.op not in GLUE_OVERRIDES:
            skipped.append(f"{spec.op}: the generated glue implements it")
            continue
        if spec.op in GLUE_HOOK_KERNELS:
            continue  # the glue calls its kernel (glue_hooks.h); no registration of its own
        f = functions[spec.op]
        wrappers.append(_functional_wrapper(aten_sigs[spec.op], f.func, spec, backend.dtypes_for(spec)))
        for kind in spec.variants:
            variant = spec.variant_ops.get(kind)
            if variant in GLUE_OPS:
                skipped.append(f"{variant}: the generated glue implements it")
                continue
            variant_kernel = None
            if variant and scan.status(signatures.kernel_name(variant)) == "native":
                variant_kernel = variant_kernel_signature(functions[variant])
            wrapper = (_variant_wrapper(kind, functions[variant], f, spec, backend.dtypes_for(spec),
                                        aten_sigs[spec.op], variant_kernel) if variant else None)
            if wrapper is None:
                skipped.append(f"{spec.op} {kind} variant: only single-tensor results can be derived")
            else:
                wrappers.append(wrapper)
    registered = [w.op for w in wrappers] + [f"{d.name}::{w.op}" for w in custom_wrappers]
    # Native ops: the registered ones and the kernels the glue calls itself.
    native = registered + [spec.op for spec in aten_ops if spec.op in GLUE_HOOK_KERNELS
                           and scan.status(kernel_name(spec)) == "native"]
    return _Registrations(aten_sigs=aten_sigs, kernel_sigs=list(aten_sigs.values()) + list(custom_sigs.values()),
                          wrappers=wrappers, custom_wrappers=custom_wrappers, skipped=skipped,
                          registered=registered, native=native,
                          custom_schemas=[_custom_schema(spec) for spec in custom_ops])


def _device_values(backend: Backend, torch_version: str) -> dict:
    """device.yaml's facts as the templates print them (C++ booleans are Python
    bools, printed by the cpp_bool filter)."""
    d = backend.descriptor
    primitives = set(d.runtime_primitives)
    return {
        "ns": d.name,
        "package": f"torch_fl_{d.name}",
        "display_name": d.display_name,
        "device_count": d.device_count_default,
        "device_count_env": d.device_count_env,
        "compute_units": d.compute_units,
        "compute_units_env": d.compute_units_env,
        "memory_capacity": d.memory_capacity,
        "memory_capacity_env": d.memory_capacity_env,
        "memory_alignment": d.memory_alignment,
        "allocator_env": d.allocator["env"],
        "allocator_defaults": _allocator_defaults(d.allocator),
        "fallback_warn_env": d.fallback.warn_env,
        "fallback_enabled": d.fallback.mode == "allow",
        "fallback_deny": list(d.fallback.deny),
        "fallback_allow": list(d.fallback.allow),
        "torch_version": torch_version,
        "flsdk_version": FLSDK_VERSION,
        "dtype_enums": [scalar_type(t) for t in d.dtypes],
        "dtype_names": [{"enum": info.scalar_type, "name": t} for t, info in DTYPES.items()],
        "amp_dtypes": list(d.amp_dtypes),
        "memory_model": d.memory_model,
        "kernel_launch": d.kernel_launch,
        "kernels_launch_on_streams": d.kernel_launch == "stream",
        # What a wrapper does between the device guard and the kernel call.
        "kernel_prologue": [] if d.kernel_launch == "stream" else [
            "if (common_device.has_value()) wait_for_current_stream(common_device->index());",
            "KernelScope scope;"],
        "launch_note": ("kernel_launch: stream: the kernel queues its device work on the current "
                        "stream itself; the wrapper never waits" if d.kernel_launch == "stream" else
                        "kernel_launch: inline: the kernel runs in this thread after the work "
                        "queued on the current stream, bracketed for the runtime"),
        "runtime_memset": "memset" in primitives,
        "runtime_copy_strided": "copy_strided" in primitives,
        "runtime_host_kernels": "host_kernels" in primitives,
        "runtime_pinned_host": "pinned_host" in primitives,
        "runtime_ipc": "ipc" in primitives,
        "runtime_profiling": "profiling" in primitives,
        "collectives_native": d.collectives == "native",
        "comm_backend": d.comm_backend or "",
        "device_code_suffixes": list(d.device_code_suffixes),
        "device_code_language": d.device_code_language,
        "dtype_scalar_types": "".join(f'"{DTYPES[t].scalar_type}", ' for t in d.dtypes),
        "descriptor_py": pprint.pformat(d.as_dict() | {"file": "device.yaml"}, width=100, sort_dicts=True),
    }


def _op_values(backend: Backend, scan: KernelScan, regs: _Registrations) -> dict:
    """What the templates need to know about the ops: registered, routable,
    device-only, autocast, the tables the Python package ships."""
    aten_ops = [spec for spec in backend.ops if not spec.is_custom]
    specs_by_op = {spec.op: spec for spec in aten_ops}
    native, registered = regs.native, regs.registered
    native_copy = next((spec for spec in aten_ops if spec.op == "copy_"
                        and scan.status(kernel_name(spec)) == "native"), None)
    # Device-only ops (no CPU kernel) the backend does not implement: the glue
    # registers their CPU reference or composite, or an error saying they must be native.
    device_only = {op: info for op, info in DEVICE_ONLY_OPS.items() if op not in registered}
    copy_sig = regs.aten_sigs.get("copy_")
    return {
        "native_ops": native,
        # Native ops whose calls torch_fl.set_op_route may send to the CPU (routable()).
        "routable_ops": [w.op for w in regs.wrappers if routable(specs_by_op[w.kernel.op])],
        # Every device-only op's CPU reference, for calls routed to the CPU.
        "all_cpu_references": [{"op": op, "reference": info.cpu_reference}
                               for op, info in DEVICE_ONLY_OPS.items() if info.cpu_reference],
        "glue_called_ops": [op for op in native if op in GLUE_HOOK_KERNELS],
        "cpu_reference_ops": [{"op": op, "reference": info.cpu_reference}
                              for op, info in device_only.items() if info.cpu_reference],
        "composite_ops": [{"op": op, "function": op.removeprefix("_thnn_")}
                          for op, info in device_only.items() if info.composite],
        "must_be_native_ops": [{"op": op, "reached_by": info.reached_by}
                               for op, info in device_only.items() if info.must_be_native],
        "native_fill": "fill_.Scalar" in registered,
        "native_copy": None if native_copy is None or copy_sig is None else {
            "schema": copy_sig.schema, "decl": copy_sig.decl, "kernel": copy_sig.kernel,
            "dtypes": [scalar_type(t) for t in backend.dtypes_for(native_copy)]},
        "fused_attention": {
            "_scaled_dot_product_fused_attention_overrideable",
            "_scaled_dot_product_fused_attention_overrideable_backward"} <= set(registered),
        "autocast": autocast.template_values(backend.ops),
        "kernel_sources": scan.compiled_files,
        "native_ops_py": pprint.pformat(native, width=100),
        # one line per op (hundreds of them): greppable, and gen's diffs stay small
        "op_dtypes_lines": [f"{op!r}: {entry!r}," for op, entry in
                            sorted(op_dtypes_table(backend, regs.wrappers, regs.custom_wrappers).items())],
        "op_specs_lines": [f"{op!r}: {entry!r}," for op, entry in
                           sorted(op_specs_table(backend, scan, regs.wrappers, regs.custom_wrappers).items())],
        "device_only_py": pprint.pformat(
            {op: {"runs_as": info.runs_as, "note": info.without_native}
             for op, info in device_only.items()}, width=100, sort_dicts=True),
    }


def _cpp_outputs(backend: Backend, regs: _Registrations) -> tuple[list[Output], dict[str, dict[str, str]]]:
    """The C++ glue (static copies and rendered files), the device-code sources and the
    registration shards, with where each op's registration ended up (spec op ->
    {overload: shard path})."""
    d, ns = backend.descriptor, backend.descriptor.name
    extra: dict[str, dict] = {
        "kernels.h": {"kernels": regs.kernel_sigs,
                      "variant_kernels": [w.variant_kernel for w in regs.wrappers if w.variant_kernel]},
        "register_kernels.cpp": {"custom_schemas": regs.custom_schemas},
    }
    outputs = [Output(name, f"generated/{name}", {}, static=True) if name in STATIC_GLUE
               else Output(f"cpp/{name}.j2", f"generated/{name}", extra.get(name, {}))
               for name in GENERATED_CPP]
    outputs += [Output(name, f"generated/kernel_lib/{name}", {}, static=True, static_dir=KERNEL_LIB_DIR)
                for name in KERNEL_LIB]
    # Kernels in the device's language (device.yaml device_code): embedded for the
    # driver's compiler, generated only for a backend that has such kernels.
    if d.device_code_suffixes:
        device_sources = scan_device_sources(backend.root, d.device_code_suffixes)
        outputs += [Output(name, f"generated/{name}", {}, static=True) for name in DEVICE_CODE_GLUE]
        outputs.append(Output("cpp/device_sources.cpp.j2", "generated/device_sources.cpp",
                              {"device_sources": device_sources}))
    shards = register_shard_count(len(regs.wrappers) + len(regs.custom_wrappers))
    registrations: dict[str, dict[str, str]] = {}
    for shard in range(shards):
        mine = [w for w in regs.wrappers if register_shard(w.kernel.op, shards) == shard]
        mine_custom = [w for w in regs.custom_wrappers if register_shard(w.kernel.op, shards) == shard]
        path = f"generated/register_kernels_{shard}.cpp"
        for w in mine:  # a variant's wrapper calls (and shares the shard of) its functional op
            registrations.setdefault(w.kernel.op, {})[w.op] = path
        for w in mine_custom:
            registrations.setdefault(f"{ns}::{w.op}", {})[f"{ns}::{w.op}"] = path
        called = [k for w in mine + mine_custom for k in (w.kernel, w.variant_kernel) if k is not None]
        kernels = list({k.kernel: k for k in called}.values())
        # A shard with nothing to register (a scaffold before its first kernel)
        # includes no header: the dispatcher headers alone cost ~4 s of compile.
        outputs.append(Output("cpp/register_kernels_shard.cpp.j2", path,
                              {"shard": shard, "shards": shards, "empty": not (mine or mine_custom),
                               "wrappers": mine, "custom_wrappers": mine_custom, "kernels": kernels}))
    return outputs, registrations


def _python_outputs(package: str) -> list[Output]:
    """The backend package's generated modules and its copy of the Python glue."""
    outputs = [Output(f"python/{template}.py.j2", f"{package}/_generated/{name}.py", {})
               for template, name in (("init", "__init__"), ("backend", "backend"),
                                      ("device_module", "device_module"), ("op_dtypes", "op_dtypes"),
                                      ("op_specs", "op_specs"))]
    return outputs + [Output(name, f"{package}/_generated/backend_glue/{name}", {}, static=True,
                             static_dir=BACKEND_GLUE_DIR) for name in BACKEND_GLUE]


def _test_outputs(d, conformance_file: str, cases: dict) -> list[Output]:
    """The generated tests: conformance (one case per line, the slow-device subset
    by id), compile, adapter claims, distributed, and their conftest."""
    rendered = {f"{kind}_py": one_per_line(value) for kind, value in cases.items()
                if kind not in ("slow", "slow_variants")}
    # the slow-device subset names its cases by id (they are cases of the lists above)
    rendered |= {f"{kind}_ids_py": wrapped_set([case[0] for case in cases[kind]])
                 for kind in ("slow", "slow_variants")}
    return [
        Output("tests/test_conformance.py.j2", conformance_file, rendered | {"test_names": CONFORMANCE_TESTS}),
        Output("tests/test_compile.py.j2", f"tests/generated/test_{d.name}_compile.py",
               {"codegen": d.compile.codegen}),
        Output("tests/conftest.py.j2", "tests/generated/conftest.py", {}),
        Output("tests/test_adapter.py.j2", f"tests/generated/test_{d.name}_adapter.py",
               {"adapter_claims": adapter_contract_claims()}),
        Output("tests/test_distributed.py.j2", f"tests/generated/test_{d.name}_distributed.py",
               {"collectives": d.collectives, "collectives_means": COLLECTIVES_MEANING[d.collectives]}),
    ]


def spec_location(backend: Backend, spec: OpSpec) -> str:
    """'opspec/linalg.yaml:5' (the backend's own spec file, relative to its root) or
    'flsdk:opspec/linalg.yaml:5' (flsdk's canonical specs): no machine's paths in
    generated files."""
    path = Path(spec.file)
    try:
        rel = path.resolve().relative_to(Path(backend.root).resolve()).as_posix()
    except ValueError:
        rel = f"flsdk:{path.parent.name}/{path.name}"
    return f"{rel}:{spec.line}"


def op_specs_table(backend: Backend, scan: KernelScan, wrappers: list[Wrapper],
                   custom_wrappers: list[Wrapper]) -> dict:
    """Registered op -> (its spec's file:line, its kernel, the kernel's file): what
    torch_fl reports next to an op it found wrong (compare_model's bisection)."""
    ns = backend.name
    specs = {spec.op: spec for spec in backend.ops}
    table = {}
    for w, registered, spec_op in [(w, w.op, w.kernel.op) for w in wrappers] + \
            [(w, f"{ns}::{w.op}", w.kernel.op) for w in custom_wrappers]:
        spec = specs.get(spec_op) or specs.get(f"{ns}::{spec_op}")
        if spec is None:
            continue
        kernel = w.kernel.kernel
        table[registered] = (spec_location(backend, spec), kernel, scan.native.get(kernel, ""))
    return table
def adapter_contract_claims() -> list[str]:
    """The claims the glue's runtime-adapter checks run, in order (kChecks of
    flsdk/static_glue/adapter_contract.cpp): the ids of the generated adapter tests."""
    text = (Path(__file__).resolve().parent.parent / "static_glue" / "adapter_contract.cpp").read_text()
    table = text.split("constexpr Check kChecks[] = {", 1)[1].split("};", 1)[0]
    return re.findall(r'\{"(\w+)",', table)


def op_dtypes_table(backend: Backend, wrappers: list[Wrapper], custom_wrappers: list[Wrapper]) -> dict:
    """The dtype routes of the generated wrappers, for the Python side (op_dtypes.py;
    torch_fl.check_ops reads it): registered op -> `dtypes` its kernel computes, `args`
    the tensor arguments that must be in them; `falls_back: False` when other dtypes
    raise (the op has no CPU kernel) and `narrowed_in` (the device.yaml line that narrows
    it) only when they apply, to keep the table small. Only ops whose kernel computes
    fewer dtypes than the device lists: every other registered op takes all the device's
    dtypes."""
    device = set(backend.descriptor.dtypes)
    ns = backend.name
    table: dict[str, dict] = {}
    # (wrapper, the name it is registered under, its spec op); custom wrappers name their op bare
    routes = [(w, w.op, w.kernel.op) for w in wrappers] + \
        [(w, f"{ns}::{w.op}", f"{ns}::{w.kernel.op}") for w in custom_wrappers]
    for w, registered, spec_op in routes:
        if set(w.dtypes) >= device or not w.dtype_args:
            continue
        entry: dict[str, object] = {"dtypes": list(w.dtypes), "args": list(w.dtype_args)}
        if not w.falls_back:
            entry["falls_back"] = False
        line = backend.narrowed_at(spec_op)
        if line is not None:
            entry["narrowed_in"] = f"device.yaml:{line}"
        table[registered] = entry
    return table


def case_id(op: str, dtype: str, sample: int) -> str:
    """Test id of one case, stable when other ops are added: `add.Tensor-float32-s0`
    (`pytest -k add.Tensor` selects one op; custom ops read `acme.fused-float32-s0`)."""
    return f"{op.replace('::', '.')}-{dtype}-s{sample}"


# The generated conformance test function of each kind of case (conformance_cases);
# the template names its functions from this table, so `flsdk ops` names the same.
CONFORMANCE_TESTS = {
    "functional": "test_conformance", "variants": "test_variant_conformance",
    "custom": "test_custom_op_conformance", "random": "test_random_op_statistics",
    "random_variants": "test_random_variant_statistics", "skipped": "test_not_compared",
    "slow": "test_slow_device", "slow_variants": "test_slow_device_variant",
}


def not_compared_id(op: str) -> str:
    """Test id of an op's visible skip (test_not_compared)."""
    return op.replace("::", ".")


def conformance_tests_of(cases: dict, op: str) -> list[str]:
    """`test_function[case id]` of every generated conformance case of spec op `op`
    (conformance_cases' output): the op's own cases, then its in-place / out
    variants' (which name the functional op in their fourth field), or its skip."""
    tests = []
    for kind in ("functional", "custom", "random", "variants", "random_variants", "slow", "slow_variants"):
        # functional, custom, random and slow cases name their op second; variant cases
        # name the variant second and the functional op fourth
        at = 3 if kind in ("variants", "random_variants", "slow_variants") else 1
        tests += [f"{CONFORMANCE_TESTS[kind]}[{case[0]}]" for case in cases.get(kind, ()) if case[at] == op]
    if op in cases["skipped"]:
        tests.append(f"{CONFORMANCE_TESTS['skipped']}[{not_compared_id(op)}]")
    return tests


def _passes_dtype(sample: list) -> bool:
    kwargs = sample[-1] if sample and isinstance(sample[-1], dict) else {}
    return any(isinstance(v, str) and v.startswith("dtype:") for v in kwargs.values())


# skip_conformance of a random op: compared with CPU as a distribution, not elementwise
RANDOM_SKIP = "random: checked statistically"


def conformance_cases(backend: Backend, registered: list[str]):
    """The generated test's cases, each a tuple starting with its stable id:
    `functional` (id, op, sample, dtype, atol, rtol) against PyTorch's CPU kernel;
    `variants` (id, kind, variant op, op, sample, dtype, atol, rtol) for the
    registered in-place / out wrappers; `custom` (id, op, reference, sample,
    dtype, atol, rtol) against the spec's `reference:`; `random` (id, op, sample,
    dtype) and `random_variants` (id, kind, variant op, op, sample, dtype): the
    random ops (skip_conformance RANDOM_SKIP) and their registered variants, sampled
    on the device and compared with CPU's draws statistically; `skipped` {op: reason}
    for registered ops that are not compared (shown as pytest skips); and
    `cpu_reference_dtypes` {op: dtype} for ops whose spec has `cpu_reference_dtype`."""
    functional, variants, custom, skipped = [], [], [], {}
    random, random_variants = [], []
    cpu_reference_dtypes = {}
    registered_set = set(registered)
    for spec in backend.ops:
        if spec.op in GLUE_OPS and spec.op not in GLUE_OVERRIDES:
            skipped[spec.op] = "implemented by the generated glue (generated/minimal_ops.cpp)"
            continue
        if spec.op not in registered_set:
            skipped[spec.op] = (f"no native kernel yet ({kernel_name(spec)} is still a "
                                "`// flsdk:stub`): " + ("calling it raises" if spec.is_custom
                                                        else "it runs on the CPU fallback"))
            continue
        is_random = spec.skip_conformance == RANDOM_SKIP and not spec.is_custom
        if spec.skip_conformance and not is_random:
            skipped[spec.op] = spec.skip_conformance
            continue
        if spec.is_custom and not spec.reference:
            skipped[spec.op] = ("custom op without a `reference:` in its spec "
                                f"({spec.file}:{spec.line}): nothing to compare the kernel with")
            continue
        if not spec.samples:
            skipped[spec.op] = f"no `samples:` in its spec ({spec.file}:{spec.line})"
            continue
        if spec.cpu_reference_dtype:
            cpu_reference_dtypes[spec.op] = spec.cpu_reference_dtype
        for dtype in backend.dtypes_for(spec):
            tol = spec.tolerances[dtype]
            for j, sample in enumerate(spec.samples):
                if spec.is_custom:
                    custom.append((case_id(spec.op, dtype, j), spec.op, spec.reference, sample, dtype,
                                   tol.atol, tol.rtol))
                    continue
                if is_random:
                    random.append((case_id(spec.op, dtype, j), spec.op, sample, dtype))
                    random_variants += [
                        (case_id(spec.variant_ops[kind], dtype, j), kind, spec.variant_ops[kind], spec.op,
                         sample, dtype) for kind in spec.variants
                        if spec.variant_ops.get(kind) in registered_set
                        and not (kind == "inplace" and _passes_dtype(sample))]
                    continue
                functional.append((case_id(spec.op, dtype, j), spec.op, sample, dtype, tol.atol, tol.rtol))
                for kind in spec.variants:
                    variant = spec.variant_ops.get(kind)
                    if kind == "inplace" and _passes_dtype(sample):
                        continue  # `dtype=` is for the functional op: in-place writes self's dtype
                    if variant in registered_set:
                        variants.append((case_id(variant, dtype, j), kind, variant, spec.op, sample,
                                         dtype, tol.atol, tol.rtol))
    return {"functional": functional, "variants": variants, "custom": custom, "skipped": skipped,
            "random": random, "random_variants": random_variants,
            "slow": _first_of_each(functional, 1), "slow_variants": _first_of_each(variants, 2),
            "cpu_reference_dtypes": cpu_reference_dtypes}


def one_per_line(value: list | dict) -> str:
    """A list or dict as a Python literal with one element per line: a generated
    test file of 10,000 cases stays 10,000 lines long and diffs one case per line
    (pprint spreads a long case over several)."""
    if isinstance(value, dict):
        items = [f"    {k!r}: {v!r},\n" for k, v in value.items()]
        return "{\n" + "".join(items) + "}" if items else "{}"
    items = [f"    {v!r},\n" for v in value]
    return "[\n" + "".join(items) + "]" if items else "[]"


def wrapped_set(names: list[str], width: int = 100) -> str:
    """A set literal of strings, filled to `width` columns per line."""
    if not names:
        return "set()"
    lines, line = [], "   "
    for name in names:
        item = f" {name!r},"
        if len(line) + len(item) > width:
            lines.append(line)
            line = "   "
        line += item
    lines.append(line)
    return "{\n" + "\n".join(lines) + "\n}"


def _first_of_each(cases: list[tuple], at: int) -> list[tuple]:
    """The first case of each op (case[at]): the subset the generated tests run again
    on the slow device, where a kernel that captures by reference or reads a result
    without waiting for it computes a wrong answer (one case per kernel is enough)."""
    first: dict[str, tuple] = {}
    for case in cases:
        first.setdefault(case[at], case)
    return list(first.values())


def stub_values(backend: Backend, spec: OpSpec) -> dict:
    """What templates/kernels/kernel_stub.cpp.j2 prints for a new kernel stub."""
    sig = (signatures.custom_kernel_signature(_custom_schema(spec)) if spec.is_custom
           else signatures.signature_of(spec.op))
    return {"ns": backend.name, "op": spec.op, "kernel": sig.kernel, "schema": sig.schema,
            "defn": sig.defn, "stub_marker": STUB_MARKER, "is_custom": spec.is_custom}


def _allocator_defaults(allocator: dict) -> str:
    """device.yaml allocator defaults in the allocator's key:value syntax."""
    parts = [f"round_size:{allocator['round_size']}"]
    max_split = allocator["max_split_size"]
    parts.append("max_split_size_mb:unlimited" if max_split is None
                 else f"max_split_size_mb:{max_split / (1 << 20):g}")
    parts.append(f"garbage_collection_threshold:{allocator['garbage_collection_threshold']:g}")
    return ",".join(parts)
