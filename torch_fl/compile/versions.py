"""Which torch versions the Inductor integration was tested with.

The integration reaches into Inductor internals (codegen registries, wrapper
and scheduler hooks) that change between torch releases; each workaround in
`workarounds.py` was reproduced and fixed on exactly these versions. On any
other torch, registration refuses with a message instead of generating code
that may be silently wrong.
"""

from __future__ import annotations

TESTED_TORCH = ("2.13.0",)


class UnsupportedTorchError(Exception):
    """torch.compile integration was not tested with the running torch. (Not a
    RuntimeError: Inductor's hook lookup would swallow it.)"""


def base_version(version: str) -> str:
    return version.split("+", 1)[0]


def check_torch(backend_name: str) -> str:
    """The running torch's base version; raises UnsupportedTorchError if untested."""
    import torch

    running = base_version(torch.__version__)
    if running not in TESTED_TORCH:
        raise UnsupportedTorchError(
            f"torch.compile on '{backend_name}': torch_fl's Inductor integration was tested with "
            f"torch {', '.join(TESTED_TORCH)}, but torch {torch.__version__} is running. Use "
            f"torch=={TESTED_TORCH[-1]}, or torch.compile(model, backend='aot_eager') (no fused "
            f"kernels), or update torch_fl.compile for this torch.")
    return running
