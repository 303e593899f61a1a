"""The typed model of op specs, device descriptors and backends.

Everything here is built by `flsdk.spec.loader` from validated YAML and is
frozen: codegen reads it and never has to re-check a field. Values are
normalized (sizes in bytes, defaults filled in, tolerances for every dtype of
an op), so templates need no defaulting logic.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class Choice(str, Enum):
    """A spec field with a fixed set of values (the JSON Schema's enum). A member
    compares equal to its YAML string and prints as it (str(), f-strings,
    templates), so the builders may keep writing `spec.autocast == "fp32"`,
    while the model says which values exist."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)


class Autocast(Choice):
    """An op spec's `autocast:`: what torch.autocast("<device>") does to its inputs."""

    NONE = "none"                      # PyTorch's own policy for the op
    FALLTHROUGH = "fallthrough"
    LOWER_PRECISION_FP = "lower_precision_fp"
    FP32 = "fp32"
    PROMOTE = "promote"


class SelectionKind(Choice):
    OPSPEC = "opspec"                  # {opspec: all | <family>}
    OP = "op"                          # {op: <name>[, dtypes: [...]]}


class FallbackMode(Choice):
    ALLOW = "allow"                    # every op falls back except `deny`
    DENY = "deny"                      # no op falls back except `allow`


class Codegen(Choice):
    CPP = "cpp"
    TRITON = "triton"
    NONE = "none"


class MemoryModel(Choice):
    HOST = "host"                      # host code may read device memory
    DISCRETE = "discrete"              # it may not


class KernelLaunch(Choice):
    INLINE = "inline"                  # kernels run in the calling thread
    STREAM = "stream"                  # kernels queue their device work


class Collectives(Choice):
    NATIVE = "native"                  # ccl_adapter.h over the vendor's collective library
    STAGED = "staged"                  # through pinned host memory over gloo


@dataclass(frozen=True)
class Tolerance:
    """Conformance tolerance of one dtype: |device - cpu| <= atol + rtol * |cpu|."""

    atol: float
    rtol: float


@dataclass(frozen=True)
class OpSpec:
    """One op of an op spec file, resolved against the installed torch."""

    op: str                          # "add.Tensor", "relu", or custom "acme::fused_gelu"
    family: str                      # the file's `family`
    file: str                        # spec file the op came from
    line: int                        # line of its `- op:` entry
    dtypes: tuple[str, ...]          # as listed (validated names from flsdk.spec.dtypes.DTYPES)
    variants: tuple[str, ...]        # subset of ("inplace", "out"), in the order listed
    # "none" (torch's policy) | "fallthrough" | "lower_precision_fp" | "fp32" | "promote"
    autocast: Autocast
    tolerances: dict[str, Tolerance]  # one per dtype in `dtypes` (explicit, else the dtype default)
    samples: tuple[list, ...]        # raw sample DSL lists (positional args, optional trailing kwargs dict)
    skip_conformance: str | None     # reason, or None
    schema: str | None               # custom ops: normalized schema "fused_gelu(Tensor x) -> Tensor"; aten: None
    is_custom: bool                  # True for "vendor::name" ops
    variant_ops: dict[str, str] = field(default_factory=dict)
    # ^ the requested variants' overload names: {"inplace": "add_.Tensor", "out": "add.out"}
    reference: str | None = None     # custom ops: Python expression of the CPU reference callable
    cpu_reference_dtype: str | dict[str, str] | None = None
    # ^ aten ops: dtype the CPU reference computes in for the dtypes CPU's kernel refuses,
    #   or {dtype: reference dtype} for dtypes always compared that way
    schema_at: tuple[int, str] | None = None  # custom ops: (line, field) of `schema:`, for errors

    @property
    def namespace(self) -> str:
        """'aten' or the custom op's vendor namespace."""
        return self.op.split("::", 1)[0] if self.is_custom else "aten"

    @property
    def name(self) -> str:
        """The op without namespace: 'add.Tensor', 'fused_gelu'."""
        return self.op.split("::", 1)[1] if self.is_custom else self.op


@dataclass(frozen=True)
class NativeSelection:
    """One entry of device.yaml `native`: `{opspec: all|<family>}`, `{op: <name>}`,
    or `{op: <name>, dtypes: [...]}` (the op's kernel computes only these dtypes:
    calls in its spec's other dtypes run on the CPU fallback)."""

    kind: SelectionKind
    name: str   # "all", a family, or an op name
    line: int   # line in device.yaml
    dtypes: tuple[str, ...] | None = None  # kind "op" only: the narrowed dtypes, None = the spec's


@dataclass(frozen=True)
class FallbackPolicy:
    """CPU fallback: mode "allow" falls back for every op except `deny`;
    mode "deny" falls back for no op except `allow`. Entries are op overload
    names (`add.Tensor`) or base names (`add`, every overload)."""

    mode: FallbackMode
    deny: tuple[str, ...]
    allow: tuple[str, ...]
    warn_env: str             # env var that turns the once-per-op fallback warning on/off


@dataclass(frozen=True)
class CompileConfig:
    """device.yaml `compile`: how torch.compile (Inductor) generates code for the device.
    torch_fl.compile reads it (through the generated DESCRIPTOR) on the first compile."""

    codegen: Codegen
    triton_backend: str | None   # triton: the vendor's Triton backend name (default: device name)
    cudagraphs: bool             # triton: may Inductor capture device graphs (default False)
    autotune: bool               # triton: may Inductor autotune kernels (default False)
    channels_last: bool = False  # may Inductor convert conv graphs to NHWC (default False)
    sleef_u35: tuple[str, ...] = ()  # cpp: float32 functions fused kernels compute with Sleef's 3.5-ULP versions


@dataclass(frozen=True)
class DeviceDescriptor:
    """A chip as described by a backend's device.yaml, defaults filled in."""

    name: str                        # device type string, C++ namespace, package torch_fl_<name>
    display_name: str
    device_count_default: int
    device_count_env: str
    memory_capacity: int             # bytes per device
    memory_capacity_env: str
    memory_alignment: int            # bytes, power of two
    allocator: dict[str, Any]        # {"round_size": int, "max_split_size": int | None (unlimited),
                                     #  "garbage_collection_threshold": float, "env": str}
    dtypes: tuple[str, ...]
    amp_dtypes: tuple[str, ...]      # subset of dtypes, of ("float16", "bfloat16")
    quantization_schemes: tuple[str, ...]  # torch.qscheme names
    quantization_dtypes: tuple[str, ...]   # of ("int8", "uint8", "int32")
    comm_backend: str | None         # torch.distributed backend name, or None
    native: tuple[NativeSelection, ...]
    fallback: FallbackPolicy
    file: str                        # the device.yaml it came from
    compile: CompileConfig = CompileConfig(Codegen.NONE, None, False, False)
    compute_units: int = 1           # per device, >= 1; 0 = auto (a simulator: the host's threads)
    compute_units_env: str = ""      # env var overriding compute_units ("" = <NAME>_COMPUTE_UNITS)
    memory_model: MemoryModel = MemoryModel.HOST
    kernel_launch: KernelLaunch = KernelLaunch.INLINE
    # optional adapter calls: memset, copy_strided, host_kernels, pinned_host, ipc, profiling
    runtime_primitives: tuple[str, ...] = ()
    collectives: Collectives = Collectives.STAGED
    # device.yaml device_code: kernels in a language the driver compiles at run time
    # (OpenCL C): the suffixes of their files under kernels/, embedded by flsdk gen
    device_code_suffixes: tuple[str, ...] = ()
    device_code_language: str = ""
    # adapter key ("runtime", "ccl") -> "MAJOR.MINOR" of the header its adapter was written
    # for (device.yaml adapter_versions; absent keys: unrecorded, flsdk.spec.adapter_versions)
    adapter_versions: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (tuples as lists), e.g. for a generated DESCRIPTOR."""
        data = dataclasses.asdict(self)
        for entry in data["native"]:
            if entry["dtypes"] is None:
                del entry["dtypes"]  # no override: as before overrides existed
        return _plain(data)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Backend:
    """A backend repo: its descriptor and the op specs it sees."""

    descriptor: DeviceDescriptor
    ops: list[OpSpec]       # ops selected native by descriptor.native, in all_ops order
    all_ops: list[OpSpec]   # canonical ops (files sorted by name) then the backend's own opspec/*.yaml
    root: Path
    op_dtypes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # ^ device.yaml `native: - {op: relu, dtypes: [float32]}`: op -> the dtypes its kernel computes

    @property
    def name(self) -> str:
        return self.descriptor.name

    def op(self, name: str) -> OpSpec:
        """The OpSpec named `name` among all ops (KeyError if none)."""
        for spec in self.all_ops:
            if spec.op == name:
                return spec
        raise KeyError(name)

    def dtypes_for(self, spec: OpSpec) -> tuple[str, ...]:
        """Dtypes the backend's kernel of `spec` computes, in the op's order: those both
        the op and the device support, narrowed by device.yaml's `{op: ..., dtypes: [...]}`.
        The generated wrappers send the op's other dtypes to the CPU fallback, and the
        generated conformance tests test these."""
        narrowed = self.op_dtypes.get(spec.op)
        return tuple(d for d in spec.dtypes if d in self.descriptor.dtypes
                     and (narrowed is None or d in narrowed))

    def narrowed_at(self, op: str) -> int | None:
        """The device.yaml line whose `{op: <op>, dtypes: [...]}` narrows `op`, or None."""
        if op not in self.op_dtypes:
            return None
        return next(sel.line for sel in self.descriptor.native if sel.kind == "op" and sel.name == op)
