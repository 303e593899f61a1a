"""Which vector math a device's fused C++ kernels use (device.yaml `compile.sleef_u35`).

Inductor's C++ kernels compute tanh, log, ... with Sleef's 1-ULP vector functions.
A device whose own kernels use Sleef's 3.5-ULP versions (about twice as fast: acme
does) would otherwise be slower compiled than eager on transcendental-heavy graphs,
and its compiled results would differ from its eager ones. For the functions the
descriptor lists, the device's kernels call the 3.5-ULP versions instead.

Inductor 2.13 lets a CppScheduling subclass swap its kernel classes
(`kernel_proxy_cls`, and on the proxy `vec_kernel_cls` / `tile2d_kernel_cls`), each
with its own ops handler (`overrides`): that is the only hook used here.
"""

from __future__ import annotations

from typing import Iterable

import torch


def kernel_proxy_class(name: str, functions: Iterable[str]):
    """A CppKernelProxy subclass whose vectorized kernels compute `functions` (float32)
    with Sleef's 3.5-ULP versions; the stock proxy when `functions` is empty."""
    from torch._inductor.codegen.cpp import (CppKernelProxy, CppTile2DKernel, CppTile2DOverrides,
                                             CppVecKernel, CppVecOverrides)

    functions = tuple(functions)
    if not functions:
        return CppKernelProxy

    def with_sleef(stock_overrides):
        class Overrides(stock_overrides):
            # CppVecOverrides.__new__ puts its own (wrapped) methods on the instance, so
            # overriding them in the class would be shadowed: replace them on the instance.
            def __new__(cls, *args, **kwargs):
                self = super().__new__(cls, *args, **kwargs)
                for fn in functions:
                    setattr(self, fn, _sleef_u35_or(fn, getattr(self, fn)))
                return self
        return Overrides

    prefix = name.capitalize()
    vec_kernel = type(f"{prefix}CppVecKernel", (CppVecKernel,),
                      {"overrides": with_sleef(CppVecOverrides)})
    # The 2-d tile kernel keeps both stock relations: its ops handler is the tile's
    # (CppTile2DOverrides transposes index expressions), and it is a vec_kernel_cls
    # (the proxy asserts a tiled main loop is one when it aggregates reductions).
    tile2d_kernel = type(f"{prefix}CppTile2DKernel", (CppTile2DKernel, vec_kernel),
                         {"overrides": with_sleef(CppTile2DOverrides)})
    return type(f"{prefix}CppKernelProxy", (CppKernelProxy,),
                {"vec_kernel_cls": vec_kernel, "tile2d_kernel_cls": tile2d_kernel})


def sleef_call(fn: str, x: str, *, float_lanes: int, tiling_factor: int, bit_width: int) -> str | None:
    """The C++ for Sleef's 3.5-ULP `fn` on the float vector `x`, or None where it
    does not apply: a Sleef function takes one native register (16 floats on AVX-512,
    8 on AVX2), so kernels that tile wider (VectorizedN, e.g. with bf16 loads) or
    other instruction sets keep Inductor's code."""
    if bit_width not in (256, 512) or tiling_factor != float_lanes:
        return None
    return f"at::vec::Vectorized<float>(Sleef_{fn}f{float_lanes}_u35({x}))"


def _sleef_u35_or(fn: str, stock):
    from torch._inductor.codegen.cpp import CppCSEVariable
    from torch._inductor.virtualized import V

    def emit(x, *args, **kwargs):
        kernel = V.kernel
        if isinstance(x, CppCSEVariable) and x.is_vec and x.dtype == torch.float32 and not args:
            isa = kernel.vec_isa
            code = sleef_call(fn, str(x), float_lanes=isa.nelements(torch.float32),
                              tiling_factor=kernel.tiling_factor, bit_width=isa.bit_width())
            if code is not None:
                return code
        return stock(x, *args, **kwargs)

    emit.__name__ = fn
    return emit
