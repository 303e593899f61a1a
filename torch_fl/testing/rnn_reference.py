"""CPU references for the fused RNN cell ops, which have no CPU kernel.

PyTorch routes the cells of nn.LSTM / nn.GRU on CUDA and PrivateUse1 devices to
`_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` (and their backward ops), which
only CUDA implements in PyTorch itself. The conformance test compares a
backend's kernels with these compositions of CPU ops: PyTorch's gate math, with
the workspace layout of PyTorch's CUDA kernels (what the backward ops read):

    LSTM  gates [i, f, g, o]   workspace [N, 4H]: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
    GRU   gates [r, z, n]      workspace [N, 5H]: r, z, n, hx, hn + b_hn

Half-precision inputs compute in float32 and round once, as device kernels do.

Whole-sequence layers (a backend's own ops that run one LSTM / GRU / Elman RNN
layer in one direction over every time step, e.g. acme's `acme::lstm_layer`; input
[T, B, I], states [B, H], `reverse` runs time backwards) are referenced by the same
cells, step by step (`lstm_layer`, `gru_layer`, `rnn_layer`), and their backward ops
by the cells' backward math over the saved workspace (`lstm_layer_backward`,
`gru_layer_backward`, `rnn_layer_backward`):

    LSTM  workspace [T, B, 4H]: the cell's;  cell_states [T, B, H]: c after each step
    GRU   workspace [T, B, 4H]: r, z, n, hn + b_hn (the cell's without hx: the
          previous step's output is it)
    RNN   no workspace: h = tanh(a) or relu(a) of the step's pre-activation a, and
          the derivative comes from h itself (1 - h^2, or 0 where h <= 0), as PyTorch's
          tanh_backward / threshold_backward take it from the result
"""

from __future__ import annotations

import torch

__all__ = [
    "fused_lstm_cell", "fused_lstm_cell_backward_impl", "fused_gru_cell",
    "fused_gru_cell_backward", "lstm_layer", "lstm_layer_backward", "gru_layer",
    "gru_layer_backward", "rnn_layer", "rnn_layer_backward",
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


def _steps(T: int, reverse: bool) -> list[int]:
    return list(range(T - 1, -1, -1)) if reverse else list(range(T))


def lstm_layer(input, hx, cx, w_ih, w_hh, b_ih=None, b_hh=None, reverse=False):
    """(output [T, B, H], hy, cy, workspace [T, B, 4H], cell_states [T, B, H])."""
    T, B, H = input.shape[0], hx.shape[0], hx.shape[1]
    output = input.new_empty(T, B, H)
    workspace = input.new_empty(T, B, 4 * H)
    cell_states = input.new_empty(T, B, H)
    h, c = hx, cx
    for t in _steps(T, reverse):
        h, c, ws = fused_lstm_cell(input[t] @ w_ih.t(), h @ w_hh.t(), c, b_ih, b_hh)
        output[t], cell_states[t], workspace[t] = h, c, ws
    return output, h.clone(), c.clone(), workspace, cell_states


def lstm_layer_backward(grad_output, grad_hy, grad_cy, input, hx, cx, w_ih, w_hh, output, workspace,
                        cell_states, reverse=False):
    """Gradients of lstm_layer from its saved tensors: (input, hx, cx, w_ih, w_hh,
    b_ih, b_hh); the two bias gradients are the same."""
    T = input.shape[0]
    steps = _steps(T, reverse)
    dh, dc = grad_hy, grad_cy
    grad_gates = [None] * T
    for k in range(T - 1, -1, -1):
        t = steps[k]
        c_prev = cx if k == 0 else cell_states[steps[k - 1]]
        grad_gates[t], dc, _ = fused_lstm_cell_backward_impl(grad_output[t] + dh, dc, c_prev,
                                                             cell_states[t], workspace[t], False)
        dh = grad_gates[t] @ w_hh
    return _layer_weight_grads(grad_gates, grad_gates, input, hx, w_ih, output, steps, dh, dc)


def _layer_weight_grads(grad_x_gates, grad_h_gates, input, hx, w_ih, output, steps, dh, dc=None):
    T = input.shape[0]
    h_prev = [hx if k == 0 else output[steps[k - 1]] for k in range(T)]
    gx = torch.stack(grad_x_gates) if T else input.new_zeros(0, hx.shape[0], w_ih.shape[0])
    gh = torch.stack(grad_h_gates) if T else gx
    hp = torch.stack([h_prev[steps.index(t)] for t in range(T)]) if T else hx.new_zeros(0, *hx.shape)
    flat_gx, flat_gh = gx.reshape(-1, gx.shape[-1]), gh.reshape(-1, gh.shape[-1])
    grads = [gx @ w_ih, dh] + ([dc] if dc is not None else [])
    grads += [flat_gx.t() @ input.reshape(-1, input.shape[-1]), flat_gh.t() @ hp.reshape(-1, hx.shape[-1]),
              flat_gx.sum(0), flat_gh.sum(0)]
    return tuple(grads)


def gru_layer(input, hx, w_ih, w_hh, b_ih=None, b_hh=None, reverse=False):
    """(output [T, B, H], hy, workspace [T, B, 4H])."""
    T, B, H = input.shape[0], hx.shape[0], hx.shape[1]
    output = input.new_empty(T, B, H)
    workspace = input.new_empty(T, B, 4 * H)
    h = hx
    for t in _steps(T, reverse):
        h, ws = fused_gru_cell(input[t] @ w_ih.t(), h @ w_hh.t(), h, b_ih, b_hh)
        output[t] = h
        workspace[t] = torch.cat([ws[:, :3 * H], ws[:, 4 * H:]], dim=1)  # without hx
    return output, h.clone(), workspace


def gru_layer_backward(grad_output, grad_hy, input, hx, w_ih, w_hh, output, workspace, reverse=False):
    """Gradients of gru_layer from its saved tensors: (input, hx, w_ih, w_hh, b_ih, b_hh)."""
    T, H = input.shape[0], hx.shape[1]
    steps = _steps(T, reverse)
    dh = grad_hy
    gx_gates, gh_gates = [None] * T, [None] * T
    for k in range(T - 1, -1, -1):
        t = steps[k]
        h_prev = hx if k == 0 else output[steps[k - 1]]
        ws = torch.cat([workspace[t][:, :3 * H], h_prev, workspace[t][:, 3 * H:]], dim=1)
        gx_gates[t], gh_gates[t], dh_direct, _, _ = fused_gru_cell_backward(grad_output[t] + dh, ws, False)
        dh = dh_direct + gh_gates[t] @ w_hh
    return _layer_weight_grads(gx_gates, gh_gates, input, hx, w_ih, output, steps, dh)


def rnn_layer(input, hx, w_ih, w_hh, b_ih=None, b_hh=None, reverse=False, relu=False):
    """(output [T, B, H], hy) of an Elman RNN layer: h = act(x W_ih^T + b_ih + h W_hh^T + b_hh),
    act tanh or relu (nn.RNN's nonlinearity), computed as nn.RNNCell's CPU composite."""
    T, B, H = input.shape[0], hx.shape[0], hx.shape[1]
    output = input.new_empty(T, B, H)
    h = hx
    for t in _steps(T, reverse):
        a = torch.nn.functional.linear(input[t], w_ih, b_ih) + torch.nn.functional.linear(h, w_hh, b_hh)
        h = a.relu() if relu else a.tanh()
        output[t] = h
    return output, h.clone()


def rnn_layer_backward(grad_output, grad_hy, input, hx, w_ih, w_hh, output, reverse=False, relu=False):
    """Gradients of rnn_layer from its saved output: (input, hx, w_ih, w_hh, b_ih, b_hh);
    the two bias gradients are the same. The activation's derivative is taken from
    the output (1 - h^2 for tanh; for relu 0 where h <= 0, else 1, as threshold_backward),
    whatever values `output` holds."""
    T = input.shape[0]
    steps = _steps(T, reverse)
    dh = grad_hy
    grad_pre = [None] * T
    for k in range(T - 1, -1, -1):
        t = steps[k]
        h = output[t]
        g = grad_output[t] + dh
        grad_pre[t] = torch.where(h <= 0, torch.zeros_like(g), g) if relu else g * (1 - h * h)
        dh = grad_pre[t] @ w_hh
    return _layer_weight_grads(grad_pre, grad_pre, input, hx, w_ih, output, steps, dh)
