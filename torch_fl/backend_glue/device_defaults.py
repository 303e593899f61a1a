"""Numerics torch picks per device type in Python tables that name only CUDA and
the CPU: a backend gets CUDA's choice where its hardware behaves like CUDA.

Installed by the backend's load() (loader.py), not by torch_fl, so that a backend
wheel installed alone has it. Cheap: it patches a module `import torch` has
already imported, and does nothing on a torch without that table.
"""

import sys


def install_device_defaults(torch, name, amp_dtypes):
    """F.linear_cross_entropy's chunked path
    (LinearCrossEntropyOptions._resolve_auto_acc_dtype) accumulates float16 and
    bfloat16 in float32 on CPU and CUDA but in the input dtype on any other
    device: a bfloat16 loss summed in bfloat16 (OpInfo's chunked_none sample 56
    gave 0.0 where CPU and float64 give 0.00153). The dtypes device.yaml lists in
    amp_dtypes (`amp_dtypes`, names such as "bfloat16"), whose matmuls accumulate
    in float32 as on CUDA, get CUDA's answer on devices of type `name`."""
    options = sys.modules.get("torch.nn.modules.linear_cross_entropy_options")
    cls = getattr(options, "LinearCrossEntropyOptions", None)
    original = getattr(cls, "_resolve_auto_acc_dtype", None)
    if original is None:
        return
    amp = frozenset(getattr(torch, d) for d in amp_dtypes)

    def resolve_auto_acc_dtype(dtype, device):
        if device is not None and torch.device(device).type == name and dtype in amp:
            return torch.float32
        return original(dtype, device)

    resolve_auto_acc_dtype.__wrapped__ = original
    cls._resolve_auto_acc_dtype = staticmethod(resolve_auto_acc_dtype)
