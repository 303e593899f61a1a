"""Model families train one step on acme under bf16 and fp16 autocast with no CPU
fallback, and match the same step under CPU autocast.

Small self-contained models, one per family whose autocast path differs: CNNs with
biased, depthwise and grouped convolutions and squeeze-excitation blocks; a Llama-
style decoder (RMSNorm, RoPE in float32, grouped-query attention through
F.scaled_dot_product_attention, SwiGLU); an encoder-decoder nn.Transformer; a
Whisper-style conv1d audio front end; a ViT patch-embedding block. (Real
torchvision / timm / transformers architectures are in the real-model suite.)

acme runs PyTorch's CUDA autocast policy, CPU autocast its own, so the CPU step
runs under CUDA's policy reproduced on the CPU (torch_fl.testing.autocast_reference;
docs/real-models.md): both cast the same ops to the same dtypes. The loss of the
step and the loss after the optimizer step must agree within 3 % (bf16 carries ~3
significant digits, fp16 ~4), and acme's low-precision gradients may be at most
twice as far from the float32 gradients as the CPU's low-precision run is.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl_acme._C as native
from torch_fl.testing.autocast_reference import cuda_autocast_policy_on_cpu

DEVICE = "acme:0"
CLASSES = 10


@pytest.fixture(autouse=True)
def one_cpu_thread():
    """The CPU reference steps run on one thread: on a loaded 2-core machine, torch's
    OpenMP threads contend and CPU's low-precision convolutions take 100x longer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- CNN


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)   # biased 1x1 convs, as in MobileNet/EfficientNet
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class InvertedResidual(nn.Module):
    """MobileNetV2/EfficientNet block: expand, depthwise, SE, project (all convs biased)."""

    def __init__(self, channels: int, expand: int):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Conv2d(channels, hidden, 1)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.se = SqueezeExcite(hidden, 4)
        self.project = nn.Conv2d(hidden, channels, 1)

    def forward(self, x):
        y = F.relu6(self.bn1(self.expand(x)))
        y = F.hardswish(self.bn2(self.depthwise(y)))
        return x + self.project(self.se(y))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        # small widths: CPU runs low-precision grouped convs one group at a time
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)            # biased stem
        self.block = InvertedResidual(8, 2)
        self.grouped = nn.Conv2d(8, 16, 3, padding=1, groups=2)        # ResNeXt/RegNet-style grouped conv
        self.norm = nn.GroupNorm(4, 16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        x = F.silu(self.stem(x))
        x = self.block(x)
        x = F.max_pool2d(F.gelu(self.norm(self.grouped(x))), 2)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def cnn_case():
    g = torch.Generator().manual_seed(0)
    return SmallCNN(), (torch.randn(4, 3, 16, 16, generator=g),), torch.randint(0, CLASSES, (4,), generator=g)


# ---------------------------------------------------------------- Llama-style decoder


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_len: int):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_len).float(), inv)
        self.register_buffer("cos", angles.cos(), persistent=False)   # float32, as in HF Llama
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):  # x: (B, H, T, D); the result is float32 whatever x is
        t = x.shape[-2]
        cos, sin = self.cos[:t], self.sin[:t]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class LlamaBlock(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, max_len: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm = nn.RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.rope = RotaryEmbedding(self.head_dim, max_len)
        self.mlp_norm = nn.RMSNorm(dim)
        self.gate = nn.Linear(dim, 2 * dim, bias=False)
        self.up = nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = self.rope(q), self.rope(k)     # float32 q, k next to a low-precision v
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, kv_heads: int = 2, max_len: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(LlamaBlock(dim, heads, kv_heads, max_len) for _ in range(2))
        self.norm = nn.RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x)).flatten(0, 1)


def llama_case():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (2, 13), generator=g)
    return TinyLlama(), (tokens[:, :-1],), tokens[:, 1:].flatten()


# ---------------------------------------------------------------- encoder-decoder


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int = 48, dim: int = 32):
        super().__init__()
        self.src_embed = nn.Embedding(vocab, dim)
        self.tgt_embed = nn.Embedding(vocab, dim)
        # GELU, not nn.Transformer's default ReLU: ReLU is discontinuous, and in a model
        # this small one activation within fp16 rounding of zero that lands on the other
        # side (measured: 4.4e-4 in float32, -2.3e-5 on acme, whose SDPA computes in
        # float32 where CPU's runs in fp16) puts 3-7 % on every gradient below it.
        self.transformer = nn.Transformer(dim, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                                          dim_feedforward=64, dropout=0.0, activation="gelu",
                                          batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        y = self.transformer(self.src_embed(src), self.tgt_embed(tgt), tgt_mask=mask, tgt_is_causal=True)
        return self.out(y).flatten(0, 1)


def seq2seq_case():
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(0, 48, (2, 10), generator=g), torch.randint(0, 48, (2, 9), generator=g)
    return Seq2Seq(), (src, tgt[:, :-1]), tgt[:, 1:].flatten()


# ---------------------------------------------------------------- conv1d audio front end


class AudioEncoder(nn.Module):
    """Whisper-style: two biased conv1d over log-mel frames, GELU, sinusoidal positions, a pre-norm encoder layer."""

    def __init__(self, mels: int = 16, dim: int = 32, frames: int = 40):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        pos = torch.arange(frames // 2).float()[:, None] / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("positions", torch.cat((pos.sin(), pos.cos()), dim=1), persistent=False)
        self.layer = nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.0, activation="gelu",
                                                batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, mel):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)
        x = self.layer(x + self.positions)
        return self.head(self.norm(x).mean(dim=1))


def audio_case():
    g = torch.Generator().manual_seed(3)
    return AudioEncoder(), (torch.randn(4, 16, 40, generator=g),), torch.randint(0, CLASSES, (4,), generator=g)


# ---------------------------------------------------------------- ViT patch embedding


class TinyViT(nn.Module):
    def __init__(self, dim: int = 32, patch: int = 4, image: int = 16):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)     # biased, stride = kernel
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x[:, 0])


def vit_case():
    g = torch.Generator().manual_seed(4)
    return TinyViT(), (torch.randn(4, 3, 16, 16, generator=g),), torch.randint(0, CLASSES, (4,), generator=g)


FAMILIES = {"cnn-se-depthwise-grouped": cnn_case, "llama-rope-gqa-sdpa": llama_case,
            "encoder-decoder-transformer": seq2seq_case, "conv1d-audio": audio_case,
            "vit-patch-embed": vit_case}


# ---------------------------------------------------------------- the step


def train_step(model, inputs, target, device, dtype):
    """Forward + backward + AdamW step under autocast (dtype None: float32); returns
    the step's loss, the loss after the step, and the first-step gradients."""
    model = copy.deepcopy(model).to(device)
    inputs = [t.to(device) for t in inputs]
    target = target.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    autocast = torch.autocast(torch.device(device).type, dtype=dtype or torch.float32, enabled=dtype is not None)
    with autocast:
        loss = F.cross_entropy(model(*inputs), target)
    loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()}
    opt.step()
    with torch.no_grad(), autocast:
        after = F.cross_entropy(model(*inputs), target)
    return float(loss.detach()), float(after), grads


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_trains_under_autocast_like_cpu(family, dtype):
    torch.manual_seed(0)
    model, inputs, target = FAMILIES[family]()
    model.train()
    with cuda_autocast_policy_on_cpu():
        cpu_loss, cpu_after, cpu_grads = train_step(model, inputs, target, "cpu", dtype)
    _, _, ref_grads = train_step(model, inputs, target, "cpu", None)
    native.clear_fallback_log()
    loss, after, grads = train_step(model, inputs, target, DEVICE, dtype)
    assert native.fallback_log() == [], f"{family} fell back to CPU: {native.fallback_log()}"

    assert math.isfinite(loss) and math.isfinite(after)
    assert abs(loss - cpu_loss) <= 3e-2 * abs(cpu_loss), f"loss {loss} on acme vs {cpu_loss} on CPU"
    assert abs(after - cpu_after) <= 3e-2 * abs(cpu_after), f"loss after the step {after} vs {cpu_after}"
    assert after < loss, "the optimizer step did not lower the loss"
    for name, ref in ref_grads.items():
        err, cpu_err = (grads[name] - ref).norm(), (cpu_grads[name] - ref).norm()
        assert err <= 2 * cpu_err + 2e-2 * ref.norm() + 1e-6, (
            f"{name}: {dtype} gradient error {float(err):.3e} on acme vs {float(cpu_err):.3e} on CPU")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_low_precision_really_happens(dtype):
    """The families above run in low precision on acme: the convolution with a bias,
    the linear layers and SDPA produce the autocast dtype; norms and softmax float32."""
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    conv, conv2 = nn.Conv2d(3, 4, 3).to(DEVICE), nn.Conv2d(4, 4, 3).to(DEVICE)
    q = torch.randn(1, 2, 4, 8, device=DEVICE)
    v = torch.randn(1, 2, 4, 8, device=DEVICE, dtype=dtype)
    with torch.autocast("acme", dtype=dtype):
        y = conv(x)
        assert y.dtype == dtype and conv2(F.relu(y)).dtype == dtype     # low-precision input, float32 bias
        assert F.scaled_dot_product_attention(q, q, v).dtype == dtype   # float32 q/k, low-precision v
        assert F.layer_norm(y, y.shape[-1:]).dtype == torch.float32
        assert torch.softmax(y, -1).dtype == torch.float32
        assert F.linear(x, torch.randn(5, 8, device=DEVICE)).dtype == dtype
