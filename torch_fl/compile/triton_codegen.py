"""`codegen: triton`: the vendor ships a Triton backend for its device.

Inductor then treats the device like a GPU: it joins Inductor's GPU_TYPES, gets
TritonScheduling and the Python wrapper, and op overrides that reach the
device through its generated device module (`torch.<name>`). The raw stream
handle comes from the vendor's `torch.<name>.get_raw_stream(index)` if its
package provides one (a Triton launcher needs it), else 0 (the null stream).
CUDA graphs and max-autotune stay off unless device.yaml says `cudagraphs: true`
/ `autotune: true` (they need vendor support Inductor cannot probe).
"""

from __future__ import annotations

from textwrap import dedent


def make_op_overrides(name: str):
    from .registration import device_op_overrides_base

    mod_expr = f"torch.{name}"

    class OpOverrides(device_op_overrides_base(name)):  # type: ignore[misc]  # base built per device at runtime
        def import_get_raw_stream_as(self, alias: str) -> str:
            return dedent(f"""
                def {alias}(index):
                    getter = getattr({mod_expr}, "get_raw_stream", None)
                    return 0 if getter is None else getter(index)
                """)

        def current_stream(self) -> str:
            return f"{mod_expr}.current_stream()"

    return OpOverrides()


def check_triton(name: str, triton_backend: str) -> None:
    """Raise a clear error unless `import triton` works and knows the vendor's backend."""
    from . import CompileNotSupportedError

    try:
        import triton.backends
    except ImportError as exc:
        raise CompileNotSupportedError(
            f"torch.compile on '{name}': device.yaml says compile: {{codegen: triton}}, but "
            f"Triton is not installed ({exc}); install the vendor's Triton build") from exc
    if triton_backend not in getattr(triton.backends, "backends", {}):
        known = ", ".join(sorted(getattr(triton.backends, "backends", {}))) or "none"
        raise CompileNotSupportedError(
            f"torch.compile on '{name}': Triton has no backend '{triton_backend}' "
            f"(device.yaml compile.triton_backend; installed Triton backends: {known})")


def register(name: str, config: dict, key: str) -> dict:
    from torch._inductor import config as inductor_config
    from torch._inductor import utils as inductor_utils
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    from .registration import register_with_inductor

    triton_backend = config.get("triton_backend") or name
    check_triton(name, triton_backend)
    if name not in inductor_utils.GPU_TYPES:
        inductor_utils.GPU_TYPES.append(name)
    hooks = register_with_inductor(
        name, key, scheduling=TritonScheduling, wrapper=PythonWrapperCodegen,
        op_overrides=make_op_overrides(name),
        no_cpp_wrapper_why="flsdk generates no C shim for Triton devices yet",
        cudagraphs=bool(config.get("cudagraphs", False)))
    hooks["interface"].is_triton_capable = staticmethod(lambda device=None: True)
    if not config.get("cudagraphs", False):
        inductor_config.triton.cudagraphs = False
    if not config.get("autotune", False):
        inductor_config.max_autotune = False
        inductor_config.max_autotune_pointwise = False
    return hooks
