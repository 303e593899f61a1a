"""The dtype table, as flsdk's spec loader and code generator read it.

The table itself lives in torch_fl._tables.dtypes (torch-free, shared with the
runtime, which must not import flsdk); these are its names.
"""

from torch_fl._tables.dtypes import (  # noqa: F401  (re-exported)
    ALIASES,
    AMP_DTYPES,
    DTYPES,
    QSCHEMES,
    QUANT_DTYPES,
    Dtype,
    canonical,
    default_tolerance,
    did_you_mean,
    is_floating,
    scalar_type,
)
