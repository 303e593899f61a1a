"""Inductor's C++ kernels as device work, for `codegen: cpp` on a discrete device.

On a device whose memory the host can address, a fused kernel is a host
function called with the buffers' pointers (cpp_codegen.py). On a discrete
device (device.yaml `memory.model: discrete`) the host cannot read those
pointers, and its work is queued on streams. If its runtime can run host code
as device work (runtime primitive `host_kernels`: a simulator, a CPU-like chip),
each kernel call is instead *launched*: its arguments are parsed on the host as
usual (tensors become their device addresses), packed into a closure, and
queued on the current stream through the backend's `flsdk_launch_host_kernel`;
when the stream runs it, every pointer argument is translated with
`flsdk_device_view` and the kernel runs. The call returns at once, as any
device kernel launch does.

The binding differs from Inductor's own only in how it calls `kernel(...)`
(`CALL`, `LAUNCH` below), so the compiled module is cached under its own key.
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

# Environment variables through which the compiled module finds the backend's
# C functions (Inductor passes its own tensor-data-pointer function the same way).
ENV = {"launch": "_FLSDK_LAUNCH_HOST_KERNEL", "device_view": "_FLSDK_DEVICE_VIEW",
       "last_error": "_FLSDK_LAST_LAUNCH_ERROR"}

# C++ added to each kernel's Python binding: launch(parsed args...) packs the
# parsed arguments and queues `kernel` on the current stream. Braces are doubled:
# Inductor formats this text with str.format.
LAUNCH = textwrap.dedent("""
    #include <memory>
    #include <stdexcept>
    #include <tuple>
    #include <type_traits>

    static int (*flsdk_launch)(void (*)(void*), void*) = nullptr;
    static void* (*flsdk_device_view)(const void*) = nullptr;
    static const char* (*flsdk_last_error)() = nullptr;

    static uintptr_t flsdk_address(const char* name) {{
        const char* text = std::getenv(name);
        if (!text) throw std::runtime_error(std::string(name) + " is not set");
        return static_cast<uintptr_t>(std::strtoull(text, nullptr, 10));
    }}

    template <class T> static T flsdk_on_device(T value) {{
        if constexpr (std::is_pointer_v<T>)
            return static_cast<T>(flsdk_device_view(value));
        else
            return value;
    }}

    template <class... A> static void flsdk_run(void* packed) {{
        std::unique_ptr<std::tuple<A...>> args(static_cast<std::tuple<A...>*>(packed));
        std::apply([](A... a) {{ kernel(flsdk_on_device(a)...); }}, *args);
    }}

    template <class... A> static void launch(A... a) {{
        if (!flsdk_launch) {{
            flsdk_launch = reinterpret_cast<decltype(flsdk_launch)>(flsdk_address("{launch}"));
            flsdk_device_view = reinterpret_cast<decltype(flsdk_device_view)>(flsdk_address("{device_view}"));
            flsdk_last_error = reinterpret_cast<decltype(flsdk_last_error)>(flsdk_address("{last_error}"));
        }}
        auto* packed = new std::tuple<A...>(a...);
        if (flsdk_launch(&flsdk_run<A...>, packed) != 0) {{
            delete packed;
            throw std::runtime_error(flsdk_last_error());
        }}
    }}
    """).format(**ENV).replace("{", "{{").replace("}", "}}")

CALL = "launch({}); Py_RETURN_NONE;"

_code_cache: Any = None


def _code_cache_class():
    """A CppPythonBindingsCodeCache whose bindings launch instead of calling."""
    global _code_cache
    if _code_cache is None:
        from torch._inductor.codecache import CppPythonBindingsCodeCache

        class LaunchingBindingsCodeCache(CppPythonBindingsCodeCache):
            cache: dict = {}
            call_entry_function = CALL
            extra_parse_arg = LAUNCH

        _code_cache = LaunchingBindingsCodeCache
    return _code_cache


def set_entry_points(native) -> None:
    """Tell compiled modules where the backend's launch functions are (`native`:
    its _C module). Checked before the first kernel is compiled for the device."""
    if not getattr(native, "runtime_has_host_kernels", False):
        from . import CompileNotSupportedError

        raise CompileNotSupportedError(
            "Inductor's C++ kernels cannot run on a discrete device whose runtime cannot run "
            "host code as device work: add host_kernels to device.yaml runtime_primitives "
            "(launch_host_kernel and device_view in runtime/adapter.cpp), or use codegen "
            "triton or none")
    for key, address in native.host_kernel_entry_points().items():
        os.environ[ENV[key]] = str(address)


def pybinding(async_compile, argtypes: list[str], source_code: str):
    """What `async_compile.cpp_pybinding(argtypes, source)` is in the wrapper of a
    discrete device's graph: the same kernel, launched on the current stream."""
    from torch._inductor.async_compile import get_compile_threads
    from torch._inductor.codecache import LambdaFuture

    cache = _code_cache_class()
    if get_compile_threads() <= 1:
        return cache.load_pybinding(argtypes, source_code)
    get_result = cache.load_pybinding_async(argtypes, source_code, submit_fn=async_compile.submit)
    return LambdaFuture(get_result)
