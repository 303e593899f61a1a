"""Numerics torch chooses per device type in Python tables that name only CUDA
and the CPU: acme gets CUDA's choice for its amp dtypes, not the low-precision
fallback (install_device_defaults of torch_fl/backend_glue/device_defaults.py,
which the backend's load() calls from its copy in _generated/backend_glue/)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

# OpInfo nn.functional.linear_cross_entropy.chunked_none, bfloat16, sample 56:
# the target's logit is the largest by far, so the loss is a small difference
# of two large numbers that bfloat16 accumulation rounds to 0.
X = [[-0.1953, 0.6602, 1.9219]]
W = [[-0.6680, 0.1680, 0.0728], [0.7344, -0.4219, 1.7500],
     [-1.8750, 0.1865, 0.3066], [-1.3359, 1.3984, -0.0449]]
BIAS = [-7.6250, -5.8125, -1.6172, 5.0625]
CLASS_WEIGHT = [1.9297, 1.5547, 1.5234, 1.1328]


def chunked_loss(device, options, dtype=torch.bfloat16):
    # the values are bfloat16's; float64 computes their exact loss
    t = lambda v: torch.tensor(v, dtype=torch.bfloat16).to(device=device, dtype=dtype)  # noqa: E731
    return F.linear_cross_entropy(t(X), t(W), torch.tensor([3], device=device), linear_bias=t(BIAS),
                                  weight=t(CLASS_WEIGHT), reduction="none", options=options)


def test_hook_is_installed_on_this_torch():
    resolve = LinearCrossEntropyOptions._resolve_auto_acc_dtype
    assert hasattr(resolve, "__wrapped__"), "torch 2.13's table moved: the backend's hook did nothing"
    for dtype in (torch.bfloat16, torch.float16):   # device.yaml's amp_dtypes
        assert resolve(dtype, torch.device("acme")) == torch.float32
        assert resolve(dtype, torch.device("acme:1")) == torch.float32


def test_chunked_linear_cross_entropy_accumulates_in_float32():
    exact = chunked_loss("cpu", None, torch.float64).item()
    acme = chunked_loss("acme", LinearCrossEntropyOptions()).cpu().double().item()
    cpu = chunked_loss("cpu", LinearCrossEntropyOptions()).double().item()
    assert exact == pytest.approx(0.00153, rel=0.02)
    assert acme == pytest.approx(cpu, rel=0.02)
    # what acme computed before: the unlisted-device default, bfloat16 accumulation
    low = chunked_loss("acme", LinearCrossEntropyOptions(acc_dtype=torch.bfloat16)).cpu().item()
    assert low == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_other_devices_and_dtypes_keep_torchs_choice(dtype):
    resolve = LinearCrossEntropyOptions._resolve_auto_acc_dtype
    assert resolve(torch.float32, torch.device("acme")) is None
    assert resolve(dtype, torch.device("cpu")) == (torch.float32 if dtype == torch.bfloat16 else None)
    assert resolve(dtype, None) is None
