"""Antialiased resizing on acme, as users reach it: torchvision's
`transforms.v2.functional.resize` of a device tensor (antialias=True is its
default for bilinear and bicubic) and `F.interpolate(..., antialias=True)` on a
trained position embedding (timm's naflexvit resamples its grid this way).
Until acme had `_upsample_bilinear2d_aa` / `_upsample_bicubic2d_aa` both went to
the CPU fallback; the generated conformance cases compare the kernels
themselves, these compare what the user calls."""

import pytest
import real_model_zoo as zoo
import torch
import torch.nn.functional as F

DEVICE = "acme:0"


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size", [[40, 50], [150, 90], [97, 30]])
def test_torchvision_resize_of_a_device_image(mode, size, no_fallback):
    zoo.import_torchvision()
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as TF

    img = torch.rand(2, 3, 97, 131, generator=torch.Generator().manual_seed(0))
    interp = InterpolationMode(mode)
    dev = TF.resize(img.to(DEVICE), size, interpolation=interp, antialias=True)
    cpu = TF.resize(img, size, interpolation=interp, antialias=True)
    assert dev.device.type == "acme" and dev.shape == cpu.shape
    torch.testing.assert_close(dev.cpu(), cpu, atol=1e-6, rtol=1e-5)
    # antialiasing is really applied: the plain interpolation differs when downscaling
    if size[0] < 97:
        plain = F.interpolate(img, size=size, mode=mode, align_corners=False, antialias=False)
        assert (plain - cpu).abs().max() > 1e-2


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_resampled_position_embedding_trains(mode, dtype, no_fallback):
    """Forward and backward of a 14x14 grid resampled to 9x11, in float32 and
    bfloat16 (CPU computes antialiased resizing in float32/float64 only: its
    bfloat16 reference runs in float32 and is rounded once)."""
    g = torch.Generator().manual_seed(1)
    pos = torch.randn(1, 8, 14, 14, generator=g)
    weight = torch.randn(1, 8, 9, 11, generator=g)

    def step(device, run_dtype):
        p = pos.to(device=device, dtype=run_dtype).requires_grad_()
        out = F.interpolate(p, size=(9, 11), mode=mode, antialias=True)
        (out.float() * weight.to(device)).sum().backward()
        return out.float().cpu(), p.grad.float().cpu()

    out, grad = step(DEVICE, dtype)
    ref_out, ref_grad = step("cpu", torch.float32)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 2e-2}
    torch.testing.assert_close(out, ref_out, **tol)
    torch.testing.assert_close(grad, ref_grad, **tol)
