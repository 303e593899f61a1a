"""F.scaled_dot_product_attention on acme: routed to acme's fused kernels when
they apply (no dropout), to the math path otherwise; both match CPU."""

import pytest
import torch
import torch.nn.functional as F


def _qkv(seed=0, shape=(2, 3, 8, 16)):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(3)]


def test_backend_choice_prefers_fused_kernel_without_dropout():
    q, k, v = (t.to("acme") for t in _qkv())
    assert torch._fused_sdp_choice(q, k, v) == int(torch.nn.attention.SDPBackend.OVERRIDEABLE)
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.1) == int(torch.nn.attention.SDPBackend.MATH)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_attention_forward_and_backward_match_cpu(causal, mask):
    if causal and mask is not None:
        pytest.skip("PyTorch forbids is_causal together with attn_mask")
    q, k, v = _qkv()
    attn_mask = None
    if mask == "bool":
        attn_mask = torch.rand(8, 8, generator=torch.Generator().manual_seed(1)) > 0.3
        attn_mask[:, 0] = True  # every query sees at least one key
    elif mask == "float":
        attn_mask = torch.randn(8, 8, generator=torch.Generator().manual_seed(2))
    results = {}
    for device in ("cpu", "acme"):
        qd, kd, vd = (t.detach().clone().to(device).requires_grad_() for t in (q, k, v))
        m = attn_mask.to(device) if attn_mask is not None else None
        out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=m, is_causal=causal)
        out.backward(torch.ones_like(out))
        results[device] = [out.detach().cpu()] + [t.grad.cpu() for t in (qd, kd, vd)]
    for expected, actual in zip(results["cpu"], results["acme"]):
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)


def test_attention_with_dropout_uses_math_path_and_runs():
    q, k, v = (t.to("acme") for t in _qkv())
    torch.acme.manual_seed(0)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert out.shape == q.shape and torch.isfinite(out.cpu()).all()
