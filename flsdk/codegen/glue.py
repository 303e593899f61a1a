"""What the generated glue itself provides: one list, read by codegen, `flsdk ops`
and torch_fl's op tracer.

The lists live in torch_fl._tables.glue (plain data, shared with the runtime,
which must not import flsdk); these are its names.
"""

from torch_fl._tables.glue import (  # noqa: F401  (re-exported)
    GLUE_HOOK_KERNELS,
    GLUE_KERNELS,
    GLUE_OPS,
    GLUE_OVERRIDES,
)
