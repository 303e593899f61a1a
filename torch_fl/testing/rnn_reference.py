"""CPU references for the fused RNN cell ops, which have no CPU kernel.

PyTorch routes the cells of nn.LSTM / nn.GRU on CUDA and PrivateUse1 devices to
`_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` (and their backward ops), which
only CUDA implements in PyTorch itself. The conformance test compares a
backend's kernels with these compositions of CPU ops: PyTorch's gate math, with
the workspace layout of PyTorch's CUDA kernels (what the backward ops read):

    LSTM  gates [i, f, g, o]   workspace [N, 4H]: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
    GRU   gates [r, z, n]      workspace [N, 5H]: r, z, n, hx, hn + b_hn

Half-precision inputs compute in float32 and round once, as device kernels do.
"""

from __future__ import annotations

import torch

__all__ = [
    "fused_lstm_cell", "fused_lstm_cell_backward_impl", "fused_gru_cell",
    "fused_gru_cell_backward",
]


def _compute_dtype(*tensors: torch.Tensor | None) -> tuple[torch.dtype, torch.dtype]:
    """(dtype of the results: promotion of the inputs, dtype to compute in)."""
    out = None
    for t in tensors:
        if t is not None:
            out = t.dtype if out is None else torch.promote_types(out, t.dtype)
    assert out is not None, "every cell has an input tensor"
    return out, (torch.float64 if out == torch.float64 else torch.float32)


def _up(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.to(dtype)


def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    out, c = _compute_dtype(input_gates, hidden_gates, cx, input_bias, hidden_bias)
    gates = input_gates.to(c) + hidden_gates.to(c)
    if input_bias is not None:
        gates = gates + input_bias.to(c) + hidden_bias.to(c)
    i, f, g, o = gates.chunk(4, dim=1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx.to(c) + i * g
    hy = o * cy.tanh()
    workspace = torch.cat([i, f, g, o], dim=1)
    return hy.to(out), cy.to(out), workspace.to(out)


def fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        return None, None, None
    out, c = _compute_dtype(grad_hy, grad_cy, cx, cy, workspace)
    i, f, g, o = _up(workspace, c).chunk(4, dim=1)
    zeros = torch.zeros_like(_up(cx, c))
    dh = zeros if grad_hy is None else grad_hy.to(c)
    dc_out = zeros if grad_cy is None else grad_cy.to(c)
    tc = cy.to(c).tanh()
    dc = dh * o * (1 - tc * tc) + dc_out
    grad_gates = torch.cat([dc * g * i * (1 - i), dc * cx.to(c) * f * (1 - f),
                            dc * i * (1 - g * g), dh * tc * o * (1 - o)], dim=1)
    grad_bias = grad_gates.sum(0).to(out) if has_bias else None
    return grad_gates.to(out), (dc * f).to(out), grad_bias


def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    out, c = _compute_dtype(input_gates, hidden_gates, hx, input_bias, hidden_bias)
    xg, hg = input_gates.to(c), hidden_gates.to(c)
    if input_bias is not None:
        xg, hg = xg + input_bias.to(c), hg + hidden_bias.to(c)
    xr, xz, xn = xg.chunk(3, dim=1)
    hr, hz, hn = hg.chunk(3, dim=1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    h0 = hx.to(c)
    hy = n + z * (h0 - n)
    return hy.to(out), torch.cat([r, z, n, h0, hn], dim=1).to(out)


def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    out, c = _compute_dtype(grad_hy, workspace)
    r, z, n, h0, hn = workspace.to(c).chunk(5, dim=1)
    gy = grad_hy.to(c)
    dz = gy * (h0 - n) * z * (1 - z)
    dn = gy * (1 - z) * (1 - n * n)
    dr = dn * hn * r * (1 - r)
    grad_input_gates = torch.cat([dr, dz, dn], dim=1)
    grad_hidden_gates = torch.cat([dr, dz, dn * r], dim=1)
    grad_input_bias = grad_input_gates.sum(0).to(out) if has_bias else None
    grad_hidden_bias = grad_hidden_gates.sum(0).to(out) if has_bias else None
    return (grad_input_gates.to(out), grad_hidden_gates.to(out), (gy * z).to(out),
            grad_input_bias, grad_hidden_bias)
