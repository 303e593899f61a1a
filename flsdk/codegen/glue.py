"""What the generated glue itself provides: one list, read by codegen, `flsdk ops`
and torch_fl's op tracer.

Plain data with no imports, so torch_fl (shipped in the same distribution as
flsdk) can read it without loading torchgen or jinja2.
"""

from __future__ import annotations

# ATen op -> the C++ function in generated/minimal_ops.cpp that implements it on
# every backend (templates/cpp/minimal_ops.cpp.j2 registers exactly these). Op
# specs never provide kernels for them.
GLUE_KERNELS = {
    "empty.memory_format": "empty_memory_format",
    "empty_strided": "empty_strided",
    "as_strided": "as_strided",
    "view": "view",
    "_reshape_alias": "reshape_alias",
    "resize_": "resize_",
    "_copy_from": "copy_from",
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
