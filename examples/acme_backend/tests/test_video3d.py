"""Video-style networks (5-d inputs) run natively on acme and match CPU:
3-d convolution (plain, strided, grouped, dilated, transposed), 3-d batch norm,
max / avg / adaptive 3-d pooling, forward + backward + one optimizer step.

The op-level checks are in the generated conformance tests (samples of
convolution_overrideable and the *_pool3d ops in opspec/conv.yaml and opspec/pool.yaml); this
file checks the composition an r3d-style network makes of them, with the
fallback log asserted empty so a 3-d op silently running on the CPU fails.
"""

import copy

import pytest
import torch
from torch import nn

import torch_fl_acme._C as native

DEVICE = "acme:0"


class BasicBlock3d(nn.Module):
    """r3d_18's residual block: two 3x3x3 convs with batch norm, optional downsample."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm3d(cout)
        self.conv2 = nn.Conv3d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm3d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv3d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm3d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class TinyVideoNet(nn.Module):
    """An r3d-style classifier over (N, 3, T, H, W) clips, plus the 3-d ops r3d
    does not use (max/avg pooling, grouped/dilated and transposed convs)."""

    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2)),
                                  nn.BatchNorm3d(8), nn.ReLU())
        self.pool = nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
        self.block1 = BasicBlock3d(8, 8, 1)
        self.block2 = BasicBlock3d(8, 16, 2)
        self.grouped = nn.Conv3d(16, 16, 3, padding=2, dilation=2, groups=4)
        self.avg = nn.AvgPool3d(2, stride=1, padding=1, count_include_pad=False)
        self.up = nn.ConvTranspose3d(16, 8, 2, stride=2)
        self.head_pool = nn.AdaptiveAvgPool3d(1)
        self.head_max = nn.AdaptiveMaxPool3d((1, 2, 2))
        self.fc = nn.Linear(8 + 8 * 4, classes)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = self.block2(self.block1(x))
        x = self.avg(torch.relu(self.grouped(x)))
        x = self.up(x)
        feats = torch.cat([self.head_pool(x).flatten(1), self.head_max(x).flatten(1)], 1)
        return self.fc(feats)


def _step(model, x, y, device):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
    opt.step()
    params = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return float(loss.detach()), grads, params


def test_video_net_trains_natively_and_matches_cpu():
    torch.manual_seed(0)
    model = TinyVideoNet()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 4, 16, 16, generator=g)
    y = torch.randint(0, 5, (2,), generator=g)

    cpu = _step(model, x, y, "cpu")
    native.clear_fallback_log()
    dev = _step(model, x, y, DEVICE)
    assert native.fallback_log() == [], f"3-d ops fell back to CPU: {native.fallback_log()}"

    assert dev[0] == pytest.approx(cpu[0], rel=1e-4)
    for name, g_cpu in cpu[1].items():
        # A conv bias before batch norm has a zero gradient up to rounding: the
        # absolute floor keeps that noise from counting as a mismatch.
        scale = g_cpu.abs().max().item()
        err = (dev[1][name] - g_cpu).abs().max().item()
        assert err <= 1e-3 * scale + 1e-6, f"grad of {name}: max error {err:.3g} (scale {scale:.3g})"
    for name, p_cpu in cpu[2].items():
        torch.testing.assert_close(dev[2][name], p_cpu, atol=1e-4, rtol=1e-4, msg=name)


def test_convolution_beyond_3d_is_refused_with_a_clear_error():
    # PyTorch's frontend allows no 4-d convolution; the kernel's own check is
    # reached through the backend-level op, and names the op and the rank.
    x = torch.randn(1, 1, 2, 2, 2, 2, device=DEVICE)
    w = torch.randn(1, 1, 1, 1, 1, 1, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"convolution_overrideable.*3-d, 4-d or 5-d input"):
        torch.ops.aten.convolution_overrideable(x, w, None, [1] * 4, [0] * 4, [1] * 4, False,
                                                [0] * 4, 1)
