"""The reference models (torch_fl.models) on CPU: shapes, training, determinism."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from torch_fl.models import GPT, GPTConfig, resnet18, train_step
from torch_fl.models.resnet import BasicBlock


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny tensors: extra OpenMP threads only spin, and on a shared machine they
    # make these tests many times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _seeded_resnet(**kw):
    torch.manual_seed(0)
    return resnet18(**kw)


def test_resnet18_layout_is_standard():
    m = resnet18(num_classes=10)
    blocks = [b for b in m.modules() if isinstance(b, BasicBlock)]
    assert len(blocks) == 8  # four stages of two BasicBlocks
    convs = [c for c in m.modules() if isinstance(c, torch.nn.Conv2d)]
    # 1 stem + 16 block convs + 3 downsample projections
    assert len(convs) == 20
    n_params = sum(p.numel() for p in m.parameters())
    # ResNet-18 with a 10-class head has 11,181,642 parameters (11.69M with 1000).
    assert n_params == 11_181_642
    assert sum(p.numel() for p in resnet18(num_classes=1000).parameters()) == 11_689_512


@pytest.mark.parametrize("small_input", [False, True])
@pytest.mark.parametrize("num_classes", [10, 7])
def test_resnet18_shapes(small_input, num_classes):
    m = _seeded_resnet(num_classes=num_classes, small_input=small_input, width=8)
    m.eval()
    with torch.no_grad():
        out = m(torch.randn(3, 3, 32, 32))
    assert out.shape == (3, num_classes)
    assert torch.isfinite(out).all()


def test_resnet18_imagenet_size_input():
    m = _seeded_resnet(num_classes=5, width=8).eval()
    with torch.no_grad():
        assert m(torch.randn(1, 3, 224, 224)).shape == (1, 5)


def test_gpt_shapes_and_loss():
    torch.manual_seed(0)
    cfg = GPTConfig()
    assert (cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_embd, cfg.n_head) == (256, 32, 2, 64, 4)
    m = GPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.block_size))
    logits, loss = m(idx)
    assert logits.shape == (2, cfg.block_size, cfg.vocab_size) and loss is None
    _, loss = m(idx, torch.randint(0, cfg.vocab_size, (2, cfg.block_size)))
    # An untrained model predicts nearly uniformly: loss close to ln(vocab).
    assert abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.5
    assert m.lm_head.weight is m.wte.weight  # tied


def test_gpt_rejects_too_long_sequence():
    m = GPT(GPTConfig(block_size=8))
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 9, dtype=torch.long))


def test_gpt_attention_is_causal():
    # Changing a later token must not change earlier logits.
    torch.manual_seed(0)
    m = GPT(GPTConfig(dropout=0.0)).eval()
    idx = torch.randint(0, 256, (1, 16))
    idx2 = idx.clone()
    idx2[0, 10] = (idx2[0, 10] + 1) % 256
    a, _ = m(idx)
    b, _ = m(idx2)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_gpt_sdpa_matches_matmul_attention():
    torch.manual_seed(0)
    m1 = GPT(GPTConfig(dropout=0.0)).eval()
    m2 = GPT(GPTConfig(dropout=0.0, use_sdpa=True)).eval()
    m2.load_state_dict(m1.state_dict())
    idx = torch.randint(0, 256, (2, 20))
    torch.testing.assert_close(m1(idx)[0], m2(idx)[0], atol=1e-5, rtol=1e-4)


def _train(model, batch, opt, steps):
    return [train_step(model, batch, opt) for _ in range(steps)]


def test_resnet18_loss_decreases():
    m = _seeded_resnet(num_classes=10, small_input=True, width=8)
    torch.manual_seed(1)
    batch = (torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,)))
    losses = _train(m, batch, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), 8)
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_gpt_loss_decreases(use_sdpa):
    torch.manual_seed(0)
    m = GPT(GPTConfig(use_sdpa=use_sdpa))
    tok = torch.randint(0, 256, (4, 33))
    batch = (tok[:, :-1], tok[:, 1:])
    losses = _train(m, batch, torch.optim.AdamW(m.parameters(), lr=3e-3), 10)
    assert losses[-1] < losses[0] - 0.5, losses


def test_training_is_deterministic_with_seed():
    def run():
        torch.manual_seed(123)
        m = GPT(GPTConfig())  # dropout on: the RNG must be reproduced too
        tok = torch.randint(0, 256, (2, 17))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses = _train(m, (tok[:, :-1], tok[:, 1:]), opt, 3)
        return losses, m.wte.weight.detach().clone()

    l1, w1 = run()
    l2, w2 = run()
    assert l1 == l2
    assert torch.equal(w1, w2)


def test_train_step_classifier_uses_cross_entropy():
    m = _seeded_resnet(num_classes=3, width=8, small_input=True)
    x, y = torch.randn(2, 3, 16, 16), torch.tensor([0, 2])
    m.train()
    torch.manual_seed(5)
    expected = F.cross_entropy(m(x), y).item()
    # BatchNorm running stats changed by the forward above do not affect the
    # train-mode output (batch statistics), so the loss is reproduced.
    loss = train_step(m, (x, y), torch.optim.SGD(m.parameters(), lr=0.0))
    assert loss == pytest.approx(expected, rel=1e-6)


# --- the op trace (torch_fl.models.trace) -------------------------------------

def test_trace_maps_cpu_paths_to_privateuse1_entry_points():
    from torch_fl.models.trace import record_ops

    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 8, 8, requires_grad=True)
    with record_ops() as r:
        y = torch.nn.functional.dropout(conv(x).relu().clone(), 0.5, training=True)
        y.sum().backward()
    ops = set(r.backend_ops)
    # CPU runs mkldnn convolutions and bernoulli_-based dropout; PrivateUse1 gets:
    assert {"convolution_overrideable", "convolution_backward_overrideable",
            "native_dropout", "native_dropout_backward", "relu", "threshold_backward"} <= ops
    assert not any(op.startswith(("mkldnn", "_mkldnn")) for op in r.reached)
    # composites and glue are not asked of the backend
    assert "clone" in r.composite and "clone" not in ops
    assert "convolution" not in ops
    assert not (set(r.glue_ops) & ops)


def test_trace_expands_foreach_composites():
    from torch_fl.models.trace import record_ops

    params = [torch.nn.Parameter(torch.randn(3)) for _ in range(2)]
    for p in params:
        p.grad = torch.randn(3)
    opt = torch.optim.AdamW(params, foreach=True)
    with record_ops() as r:
        opt.step()
    assert any(op.startswith("_foreach_") for op in r.composite)
    assert {"lerp_.Scalar", "addcdiv_", "sqrt"} <= set(r.backend_ops)
