"""What the generated glue itself provides: one list, read by codegen, `flsdk ops`
and torch_fl's op tracer.

Plain data with no imports, shared by flsdk (which re-exports it as
flsdk.codegen.glue) and torch_fl, which reads it without flsdk, torchgen or jinja2.
"""

from __future__ import annotations

# ATen op -> the C++ function of the static glue that implements it on every
# backend (flsdk/static_glue/minimal_ops.cpp and copies.cpp register exactly
# these: tests/codegen/test_single_source.py). Op specs provide kernels only for the
# GLUE_OVERRIDES below.
GLUE_KERNELS = {
    "empty.memory_format": "empty_memory_format",
    "empty_strided": "empty_strided",
    "as_strided": "as_strided",
    "view": "view",
    "_reshape_alias": "reshape_alias",
    "resize_": "resize_",
    "_copy_from": "copy_from",  # copies.cpp
    "_copy_from_and_resize": "copy_from_and_resize",
    "_local_scalar_dense": "local_scalar_dense",
    "set_.source_Storage_storage_offset": "set_storage",
    "set_.source_Storage": "set_source_storage",
    "set_.source_Tensor": "set_source_tensor",
    "set_": "set_empty",
    "fill_.Scalar": "fill_scalar",
    "fill_.Tensor": "fill_tensor",
    "zero_": "zero",
    "_fused_sdp_choice": "fused_sdp_choice",
    "_has_compatible_shallow_copy_type": "has_compatible_shallow_copy_type",
    "record_stream": "record_stream",
    "view_as_complex": "view_as_complex_view",
    "view_as_real": "view_as_real_view",
}

GLUE_OPS = tuple(GLUE_KERNELS)

# Glue ops a backend may take over with a native kernel listed in its op specs,
# and what happens then (flsdk ops shows it).
GLUE_OVERRIDES = {
    "fill_.Scalar": "the backend's kernel is registered instead of the glue's fill "
                    "(zero_ and fill_.Tensor go through it too)",
}

# Kernels the glue calls itself rather than registering them with the
# dispatcher: op -> what calls them. copy_ on PrivateUse1 also receives copies
# between host and device, which are the glue's job (generated/copies.cpp).
GLUE_HOOK_KERNELS = {
    "copy_": "the glue's _copy_from, for copies within one device that change dtype or layout",
}
