"""Which vector math a device's fused C++ kernels use (device.yaml `compile.sleef_u35`),
how they draw random numbers and how they load and store bool vectors.

Inductor's C++ kernels compute tanh, log, ... with Sleef's 1-ULP vector functions.
A device whose own kernels use Sleef's 3.5-ULP versions (about twice as fast: acme
does) would otherwise be slower compiled than eager on transcendental-heavy graphs,
and its compiled results would differ from its eager ones. For the functions the
descriptor lists, the device's kernels call the 3.5-ULP versions instead.
Every host-codegen device's kernels draw `rand` a vector at a time, with the
same values as Inductor's scalar loop (vector_random.py), and load and store bool
vectors (dropout and causal masks) with vector instructions (vector_masks.py).

Inductor 2.13 lets a CppScheduling subclass swap its kernel classes
(`kernel_proxy_cls`, and on the proxy `vec_kernel_cls` / `tile2d_kernel_cls`), each
with its own ops handler (`overrides`): that is the only hook used here.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def kernel_proxy_class(name: str, functions: Iterable[str]):
    """A CppKernelProxy subclass whose vectorized kernels compute `functions` (float32)
    with Sleef's 3.5-ULP versions, draw `rand` a vector at a time and move bool
    vectors through memory with vector instructions."""
    from torch._inductor.codegen.cpp import (
        CppKernelProxy,
        CppTile2DKernel,
        CppTile2DOverrides,
        CppVecKernel,
        CppVecOverrides,
    )

    functions = tuple(functions)

    def with_device_ops(stock_overrides):
        class Overrides(stock_overrides):
            # CppVecOverrides.__new__ puts its own (wrapped) methods on the instance, so
            # overriding them in the class would be shadowed: replace them on the instance.
            def __new__(cls, *args, **kwargs):
                self = super().__new__(cls, *args, **kwargs)
                for fn in functions:
                    setattr(self, fn, _sleef_u35_or(fn, getattr(self, fn)))
                self.rand = _vector_rand_or(self.rand)
                return self
        return Overrides

    prefix = name.capitalize()
    vec_kernel = type(f"{prefix}CppVecKernel", (CppVecKernel,),
                      {"overrides": with_device_ops(CppVecOverrides), "_get_store_line": _fast_mask_store,
                       "_get_vec_load_line": _fast_mask_load})
    # The 2-d tile kernel keeps both stock relations: its ops handler is the tile's
    # (CppTile2DOverrides transposes index expressions), and it is a vec_kernel_cls
    # (the proxy asserts a tiled main loop is one when it aggregates reductions).
    tile2d_kernel = type(f"{prefix}CppTile2DKernel", (CppTile2DKernel, vec_kernel),
                         {"overrides": with_device_ops(CppTile2DOverrides)})
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


def _vector_shape(kernel) -> dict:
    """What decides whether a vector kernel can take torch_fl's code: its tiling
    factor, the float lanes of one native register, the register's bit width."""
    isa = kernel.vec_isa
    return {"tiling_factor": kernel.tiling_factor, "float_lanes": isa.nelements(torch.float32),
            "bit_width": isa.bit_width()}


def _sleef_u35_or(fn: str, stock):
    from torch._inductor.codegen.cpp import CppCSEVariable
    from torch._inductor.virtualized import V

    def emit(x, *args, **kwargs):
        kernel = V.kernel
        if isinstance(x, CppCSEVariable) and x.is_vec and x.dtype == torch.float32 and not args:
            code = sleef_call(fn, str(x), **_vector_shape(kernel))
            if code is not None:
                return code
        return stock(x, *args, **kwargs)

    emit.__name__ = fn
    return emit


def _vector_rand_or(stock):
    from torch._inductor.codegen.common import BracesBuffer
    from torch._inductor.codegen.cpp import CppCSEVariable
    from torch._inductor.codegen.cpp_utils import DTYPE_TO_CPP
    from torch._inductor.virtualized import V

    from .vector_random import philox_uniform_lines

    def rand(seed, offset):
        kernel = V.kernel
        if isinstance(offset, CppCSEVariable) and offset.dtype in DTYPE_TO_CPP:
            vectors = kernel._get_num_vectors(dtype=torch.float32)
            result_load = ("at::vec::Vectorized<float>::loadu(result)" if vectors == 1
                           else f"at::vec::VectorizedN<float, {vectors}>::loadu(result)")
            shape = _vector_shape(kernel)
            lines = philox_uniform_lines(str(seed), str(offset), DTYPE_TO_CPP[offset.dtype],
                                         tiling_factor=shape["tiling_factor"],
                                         bit_width=shape["bit_width"], result_load=result_load)
            if lines is not None:
                code = BracesBuffer()
                for line in lines:
                    code.writeline(line)
                return code
        return stock(seed, offset)

    return rand


def _fast_mask_store(self, value, var, index, dtype, accu_store=False):
    """CppVecKernel._get_store_line, with bool vectors stored by vector_masks."""
    from torch._inductor.codegen.common import IndentedBuffer
    from torch._inductor.codegen.cpp import CppCSEVariable, CppVecKernel
    from torch._inductor.codegen.cpp_utils import cexpr_index

    from .vector_masks import mask_store_line

    if dtype == torch.bool and not accu_store and isinstance(value, CppCSEVariable) and value.is_vec \
            and self._try_get_const_stride(index, self.itervars[self.tiling_idx]) == 1:
        line = mask_store_line(str(value), f"{var} + {cexpr_index(index)}", cexpr_index(self.num_elems),
                               **_vector_shape(self))
        if line is not None:
            code = IndentedBuffer()
            code.writeline(line)
            return code
    return CppVecKernel._get_store_line(self, value, var, index, dtype, accu_store)


def _fast_mask_load(self, var, index, dtype, load_mask=None):
    """CppVecKernel._get_vec_load_line (always a contiguous load), with bool vectors
    loaded by vector_masks (the stock line ignores `load_mask` for bools too)."""
    from torch._inductor.codegen.cpp import CppVecKernel
    from torch._inductor.codegen.cpp_utils import cexpr_index

    from .vector_masks import mask_load_expr

    if dtype == torch.bool:
        pointer = f"{var} + {cexpr_index(index)}" if index != 0 else var
        expr = mask_load_expr(pointer, cexpr_index(self.num_elems), full=not self.tail_size,
                              **_vector_shape(self))
        if expr is not None:
            return expr
    return CppVecKernel._get_vec_load_line(self, var, index, dtype, load_mask)
