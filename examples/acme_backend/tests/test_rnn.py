"""RNNs run on acme: PyTorch sends the cells of nn.LSTM / nn.GRU / nn.LSTMCell /
nn.GRUCell on a PrivateUse1 device to the fused cell ops
(_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backward ops), which
have no CPU kernel, so without acme's native kernels the CPU fallback cannot
run them and every RNN dies with "Could not run ... 'CPU' backend".

Each test runs forward + backward + one SGD step on acme and on CPU from the same
weights, asserts the fallback log is empty and that outputs, gradients and updated
parameters match CPU within 1e-4 (float32; summation order differs).

The second half covers the whole-sequence path (acme::lstm_layer, gru_layer,
rnn_layer): nn.LSTM, nn.GRU and nn.RNN (tanh and relu) as a few launches per layer.
"""

import copy
import functools

import pytest
import torch
from torch import nn

import torch_fl_acme._C as native

DEVICE = "acme:0"
TOL = dict(atol=1e-4, rtol=1e-4)

# the recurrent modules the whole-sequence path takes (nn.RNN with either nonlinearity)
RNN_RELU = functools.partial(nn.RNN, nonlinearity="relu")
SEQ_KINDS = pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN, RNN_RELU],
                                    ids=["lstm", "gru", "rnn_tanh", "rnn_relu"])
ELMAN_KINDS = pytest.mark.parametrize("kind", [nn.RNN, RNN_RELU], ids=["rnn_tanh", "rnn_relu"])


def _step(model, inputs, device):
    """Forward, loss over every output, backward, one SGD step on `device`."""
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(*[tuple(u.to(device) for u in t) if isinstance(t, tuple) else t.to(device)
                  for t in inputs])
    flat = [out] if isinstance(out, torch.Tensor) else [
        t for o in out for t in (o if isinstance(o, tuple) else (o,))]
    # weights that differ per output so no gradient is a plain sum
    loss = sum(((t * torch.linspace(-1, 1, t.numel(), device=device).view_as(t)) ** 2).sum()
               for t in flat)
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
    opt.step()
    params = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return [t.detach().cpu() for t in flat], grads, params


def _check(model, inputs):
    torch.manual_seed(0)
    cpu = _step(model, inputs, "cpu")
    native.clear_fallback_log()
    dev = _step(model, inputs, DEVICE)
    assert native.fallback_log() == [], f"fell back to CPU: {native.fallback_log()}"
    for i, (c, d) in enumerate(zip(cpu[0], dev[0])):
        torch.testing.assert_close(d, c, **TOL, msg=lambda m: f"output {i}: {m}")
    for name in cpu[1]:
        torch.testing.assert_close(dev[1][name], cpu[1][name], **TOL, msg=lambda m: f"grad {name}: {m}")
        torch.testing.assert_close(dev[2][name], cpu[2][name], **TOL, msg=lambda m: f"param {name}: {m}")


def _seq(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_lstm_two_layers_bidirectional_batch_first(bias):
    torch.manual_seed(0)
    model = nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True, bias=bias)
    _check(model, [_seq(3, 7, 5)])


def test_lstm_with_initial_state_and_projection():
    torch.manual_seed(0)
    model = nn.LSTM(4, 6, num_layers=1, proj_size=3)
    h0, c0 = _seq(1, 2, 3), _seq(1, 2, 6) * 0.5
    _check(model, [_seq(5, 2, 4), (h0, c0)])


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_gru_two_layers_bidirectional(bias):
    torch.manual_seed(0)
    model = nn.GRU(5, 6, num_layers=2, bidirectional=True, bias=bias)
    _check(model, [_seq(7, 3, 5)])


def test_lstm_cell_and_gru_cell():
    torch.manual_seed(0)
    _check(nn.LSTMCell(5, 4), [_seq(3, 5), (_seq(3, 4), _seq(3, 4))])
    _check(nn.GRUCell(5, 4), [_seq(3, 5), _seq(3, 4)])


def test_packed_sequence_lstm():
    torch.manual_seed(0)
    model = nn.LSTM(4, 5, batch_first=True)

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = model

        def forward(self, x):
            lengths = torch.tensor([6, 4, 2])
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
            out, (h, c) = self.rnn(packed)
            return nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0], h, c

    _check(Packed(), [_seq(3, 6, 4)])


def test_double_backward_through_lstm_cell():
    # create_graph=True makes autograd take the differentiable composite backward
    # instead of the fused one: both must agree on acme.
    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 2)
    x = _seq(2, 3)
    results = []
    for device in ["cpu", DEVICE]:
        c = copy.deepcopy(cell).to(device)
        xi = x.to(device).requires_grad_()
        h, _ = c(xi)
        (g,) = torch.autograd.grad(h.sum(), xi, create_graph=True)
        (gg,) = torch.autograd.grad((g ** 2).sum(), xi)
        results.append((g.detach().cpu(), gg.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0], **TOL)
    torch.testing.assert_close(results[1][1], results[0][1], **TOL)


def test_mismatched_gate_shapes_name_the_op():
    ig = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"acme: _thnn_fused_lstm_cell: expected hidden_gates of shape \[2, 8\]"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, torch.randn(2, 4, device=DEVICE),
                                             torch.randn(2, 2, device=DEVICE))
    with pytest.raises(RuntimeError, match="acme: _thnn_fused_gru_cell: input_bias and hidden_bias"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(2, 6, device=DEVICE), torch.randn(2, 6, device=DEVICE),
                                            torch.randn(2, 2, device=DEVICE), torch.randn(6, device=DEVICE))
    with pytest.raises(TypeError, match="acme: _thnn_fused_gru_cell: an argument's dtype is not among the op's dtypes"):
        torch.ops.aten._thnn_fused_gru_cell(torch.ones(2, 6, dtype=torch.long, device=DEVICE),
                                            torch.ones(2, 6, dtype=torch.long, device=DEVICE),
                                            torch.ones(2, 2, dtype=torch.long, device=DEVICE))


@SEQ_KINDS
def test_rnn_under_bf16_autocast(kind):
    # As on CUDA, the fused cells are lower_precision_fp: gates and states in
    # bfloat16, natively, and close to the float32 result. (nn.RNN's cell is a
    # composite of linear and tanh / relu: its linears run in bfloat16.) The
    # whole-sequence ops compute in the input's dtype only, so autocast takes the
    # per-step path: a float32 output would mean it did not.
    torch.manual_seed(0)
    model = kind(5, 6, num_layers=2, batch_first=True)
    x = _seq(3, 7, 5)
    ref, _ = copy.deepcopy(model)(x)
    dev_model = copy.deepcopy(model).to(DEVICE)
    native.clear_fallback_log()
    with torch.autocast("acme", dtype=torch.bfloat16):
        out, _ = dev_model(x.to(DEVICE))
    out.float().square().sum().backward()
    assert native.fallback_log() == [], f"fell back to CPU: {native.fallback_log()}"
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float().cpu(), ref, atol=3e-2, rtol=3e-2)
    for name, p in dev_model.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float32 and p.grad.isfinite().all(), name


# ---------------------------------------------------------------------------
# The whole-sequence path (kernels/rnn_sequence.cpp, rnn_sequence_glue.cpp):
# nn.LSTM / nn.GRU take a few launches per layer and direction, whatever the
# sequence length; the calls it does not cover take the per-step path above.

def _launches():
    import json

    torch.accelerator.synchronize()
    return json.loads(native.runtime_get_option("stats"))["launches"]


def _train_step_launches(model, seq_len):
    model = copy.deepcopy(model).to(DEVICE)
    x = (_seq(3, seq_len, 5) if model.batch_first else _seq(seq_len, 3, 5)).to(DEVICE)
    model(x)[0].sum().backward()  # warm-up: first-use allocations
    before = _launches()
    out = model(x)
    (out[0].sum()).backward()
    return _launches() - before


@pytest.mark.parametrize("batch_first", [False, True], ids=["time-major", "batch-first"])
@SEQ_KINDS
def test_launches_do_not_grow_with_the_sequence(kind, batch_first):
    # the per-step path launched several kernels per time step (a matmul, an
    # add and the cell, forward and backward): 2 layers x 40 steps were ~1000
    torch.manual_seed(0)
    model = kind(5, 6, num_layers=2, bidirectional=True, batch_first=batch_first)
    short, long = _train_step_launches(model, 4), _train_step_launches(model, 40)
    assert short == long, f"launches grew with the sequence: {short} for 4 steps, {long} for 40"
    assert long < 80, f"{long} launches for a 2-layer bidirectional train step"


@SEQ_KINDS
def test_sequence_float64_with_initial_state(kind):
    torch.manual_seed(0)
    model = kind(4, 5, num_layers=2).double()
    h0 = _seq(2, 3, 5).double()
    state = (h0, _seq(2, 3, 5).double() * 0.5) if kind is nn.LSTM else h0
    _check(model, [_seq(6, 3, 4).double(), state])


@SEQ_KINDS
def test_sequence_only_the_output_used(kind):
    # the final states get no gradient: the backward sees zeros for them
    torch.manual_seed(0)
    model = kind(3, 4, batch_first=True)

    class OutputOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = model

        def forward(self, x):
            return self.rnn(x)[0]

    _check(OutputOnly(), [_seq(2, 5, 3)])


@SEQ_KINDS
def test_sequence_inference_mode_and_no_grad(kind):
    torch.manual_seed(0)
    model = kind(5, 6, num_layers=2, bidirectional=True, batch_first=True)
    x = _seq(3, 7, 5)
    ref = model(x)[0]
    dev = copy.deepcopy(model).to(DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(dev(x.to(DEVICE))[0].cpu(), ref.detach(), **TOL)
    with torch.inference_mode():
        torch.testing.assert_close(dev(x.to(DEVICE))[0].cpu(), ref.detach(), **TOL)


@SEQ_KINDS
def test_sequence_dropout_between_layers(kind):
    # dropout draws differ from CPU's: check what dropout does, not the values
    torch.manual_seed(0)
    model = kind(4, 5, num_layers=2, dropout=0.5).to(DEVICE)
    x = _seq(6, 3, 4).to(DEVICE)
    out, _ = model(x)
    out.sum().backward()
    assert out.shape == (6, 3, 5) and out.isfinite().all()
    assert all(p.grad is not None and p.grad.isfinite().all() for p in model.parameters())
    model.eval()
    torch.testing.assert_close(model(x)[0].cpu(), copy.deepcopy(model).cpu()(x.cpu())[0], **TOL)


@SEQ_KINDS
def test_sequence_double_backward(kind):
    # create_graph=True (a gradient penalty): the fused backward is not itself
    # differentiable, so that backward recomputes the layer per step; both
    # orders of gradients must match CPU's
    torch.manual_seed(0)
    model = kind(3, 4, num_layers=2, bidirectional=True)
    x = _seq(5, 2, 3)
    results = []
    for device in ["cpu", DEVICE]:
        m = copy.deepcopy(model).to(device)
        xi = x.to(device, copy=True).requires_grad_()
        (g,) = torch.autograd.grad(m(xi)[0].square().sum(), xi, create_graph=True)
        (g.square().sum()).backward()
        results.append((g.detach().cpu(), xi.grad.cpu(),
                        {n: p.grad.cpu() for n, p in m.named_parameters()}))
    torch.testing.assert_close(results[1][0], results[0][0], **TOL)
    torch.testing.assert_close(results[1][1], results[0][1], **TOL)
    for name, grad in results[0][2].items():
        torch.testing.assert_close(results[1][2][name], grad, **TOL, msg=lambda m: f"{name}: {m}")


def test_per_step_path_still_serves_what_the_sequence_ops_do_not():
    # projections take the per-step path: more launches for more steps
    torch.manual_seed(0)
    plain, projected = nn.LSTM(5, 6), nn.LSTM(5, 6, proj_size=3)
    assert _train_step_launches(plain, 4) == _train_step_launches(plain, 12)
    assert _train_step_launches(projected, 4) < _train_step_launches(projected, 12)


# ---------------------------------------------------------------------------
# nn.RNN (tanh and relu): acme::rnn_layer / rnn_layer_backward per layer and
# direction, taken over from aten::rnn_tanh.input / rnn_relu.input.

def _profiled_op_counts(fn):
    """How often each op ran in `fn` (forward and backward), by name."""
    import collections

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
        torch.accelerator.synchronize()
    return collections.Counter(e.name for e in prof.events())


@ELMAN_KINDS
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_elman_rnn_three_layers_bidirectional_batch_first(kind, bias):
    torch.manual_seed(0)
    model = kind(5, 6, num_layers=3, bidirectional=True, batch_first=True, bias=bias)
    _check(model, [_seq(3, 7, 5)])


@ELMAN_KINDS
def test_elman_rnn_one_layer_with_initial_state(kind):
    torch.manual_seed(0)
    model = kind(4, 6)
    _check(model, [_seq(5, 2, 4), _seq(1, 2, 6) * 0.5])


@ELMAN_KINDS
def test_elman_rnn_takes_the_layer_ops(kind):
    # one forward and one backward layer op per layer and direction; none of the
    # per-step composite's activations (a tanh / relu and its backward per step)
    torch.manual_seed(0)
    model = kind(5, 6, num_layers=2, bidirectional=True).to(DEVICE)
    x = _seq(7, 3, 5).to(DEVICE)
    ops = _profiled_op_counts(lambda: model(x)[0].square().sum().backward())
    assert ops["acme::rnn_layer"] == 4, ops
    assert ops["acme::rnn_layer_backward"] == 4, ops
    per_step = ("aten::tanh", "aten::relu", "aten::tanh_backward", "aten::threshold_backward")
    assert all(ops[name] == 0 for name in per_step), ops


@ELMAN_KINDS
def test_elman_rnn_autocast_takes_the_per_step_path(kind):
    torch.manual_seed(0)
    model = kind(5, 6, num_layers=2).to(DEVICE)
    x = _seq(4, 3, 5).to(DEVICE)

    def step():
        with torch.autocast("acme", dtype=torch.bfloat16):
            out, _ = model(x)
        out.float().sum().backward()

    ops = _profiled_op_counts(step)
    assert ops["acme::rnn_layer"] == 0, ops
    # the composite's activation, once per layer and step
    assert ops[f"aten::{model.nonlinearity}"] == 2 * 4, ops


@ELMAN_KINDS
def test_elman_rnn_bfloat16_takes_the_per_step_path(kind):
    # the layer ops are float32 / float64 only: a bfloat16 model runs per step
    torch.manual_seed(0)
    model = kind(5, 6, num_layers=2, batch_first=True).bfloat16()
    x = _seq(3, 4, 5).bfloat16()
    ref = model(x)[0]
    dev = copy.deepcopy(model).to(DEVICE)
    ops = _profiled_op_counts(lambda: dev(x.to(DEVICE))[0].float().sum().backward())
    assert ops["acme::rnn_layer"] == 0, ops
    out = dev(x.to(DEVICE))[0]
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=2e-2, rtol=2e-2)


@ELMAN_KINDS
def test_elman_rnn_packed_sequence(kind):
    # rnn_tanh.data / rnn_relu.data are not taken over: the per-step path
    torch.manual_seed(0)
    model = kind(4, 5, batch_first=True, bidirectional=True)

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = model

        def forward(self, x):
            lengths = torch.tensor([6, 4, 2])
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
            out, h = self.rnn(packed)
            return nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0], h

    _check(Packed(), [_seq(3, 6, 4)])
