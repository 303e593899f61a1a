"""Real architectures from torchvision, timm, Hugging Face transformers and
diffusers (and torch.nn's RNNs), built from configs with random weights, and one
training step of each on any device.

Nobody in this repo wrote these models: they are what users bring. Each case is
small (few layers, narrow, 32x32 images, 16-token sequences) so one step takes
well under a second on CPU, but keeps what makes its family hard: biased,
depthwise and grouped convolutions, squeeze-excitation, layer scale, windowed
attention with relative position bias, RoPE with grouped-query attention,
encoder-decoder cross attention, a conv1d audio front end, fused RNN cells,
RMSNorm / qk-norm / EVA-02 / CaiT ViTs, Mamba's and Mamba2's pure-torch
selective scans, a GroupNorm'd wav2vec2 front end with CTC, DETR-style detection
losses (Hungarian matching on scipy, GIoU), SegFormer, and denoising UNets.

Used by test_real_models.py, and runnable as a survey that prints, per model
and precision (float32, bf16 and fp16 autocast), pass / first error line / ops
on the CPU fallback, and the differences from the CPU (docs/real-models.md):

    python examples/acme_backend/tests/real_model_zoo.py [--compile] [--device NAME] [--float32] [name ...]

--device runs the survey on another flsdk backend's device (the OpenCL example's
`ocl`, say; default acme), --float32 leaves out the autocast columns.

With --compile each step runs through torch.compile(model) (default backend,
caches disabled) and the cell adds how many graphs, graph breaks and acme
kernels the compile produced.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------
# Importing torchvision on a CPU-only torch.
#
# PyPI's torchvision wheel is built against CUDA: its compiled ops library
# (torchvision/_C.so: nms, roi_align, deform_conv2d ...) links libtorch_cuda.so
# and cannot load on our CPU torch. torchvision tolerates that by design
# (torchvision/extension.py catches the OSError and _has_ops() turns False, and
# every meta/autograd registration is guarded by _has_ops()) except two:
# torchvision/_meta_registrations.py calls
# torch.library.register_fake("torchvision::nms") and ("torchvision::qnms")
# unguarded, which raises "RuntimeError: operator torchvision::nms does not
# exist", so `import torchvision` (and timm, and transformers, which import
# it) fails. The model definitions never use those ops.
#
# Smallest workaround: only when that import fails for this reason, declare the
# two schemas that _C.so would have declared, then import again. Calling
# torchvision.ops.nms then raises "no kernel" (as it should: there is none);
# the models import and run. If _C.so loads (a matching CPU wheel), nothing is
# declared.
# ---------------------------------------------------------------------------
_TORCHVISION_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_torchvision_fragment = None  # keeps the declared schemas alive


def import_torchvision():
    global _torchvision_fragment
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as e:
        if "operator torchvision::nms does not exist" not in str(e):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the half-imported package from the failed attempt
    _torchvision_fragment = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _TORCHVISION_SCHEMAS.values():
        _torchvision_fragment.define(schema)
    return importlib.import_module("torchvision")


def import_package(name: str):
    """torchvision, timm, transformers or diffusers (all but the first import
    torchvision, directly or through transformers)."""
    if name in ("torchvision", "timm", "transformers", "diffusers"):
        import_torchvision()
    return importlib.import_module(name)


# ---------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    package: str  # the package that must be importable ("torch" for nn.LSTM & co)
    build: Callable[[], nn.Module]
    batch: Callable[[], tuple]  # CPU tensors
    loss: Callable[[nn.Module, tuple], torch.Tensor]
    slow: bool = False


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(n=4, c=3, size=32, classes=10, seed=0):
    g = _gen(seed)
    return torch.randn(n, c, size, size, generator=g), torch.randint(0, classes, (n,), generator=g)


def _cnn_images():
    # 64x64 so that the last stage of a stride-32 CNN still has 2x2 pixels: batch
    # norm over 4 samples x 1 pixel normalizes almost everything to +-1 and leaves
    # only rounding noise in the gradients of the layers below.
    return _images(size=64)


def _classify(model, batch):
    x, y = batch
    out = model(x)
    if isinstance(out, dict):  # torchvision segmentation models
        out = out["out"]
    return F.cross_entropy(out, y)


def _segmentation_batch():
    g = _gen(2)
    return torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 3, (4, 64, 64), generator=g)


def _video_batch():
    g = _gen(3)
    return torch.randn(2, 3, 4, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g)


VOCAB, SEQ = 128, 16


def _tokens(seed=4, n=2, length=SEQ):
    return torch.randint(0, VOCAB, (n, length), generator=_gen(seed))


def _hf_loss(model, batch):
    return model(**batch[0]).loss


# --- torchvision -----------------------------------------------------------
def _tv():
    return import_torchvision().models


def _tv_vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                             hidden_dim=64, mlp_dim=128, num_classes=10)


def _tv_swin():
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[2, 2], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)


def _tv_swin_v2():
    from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformer, SwinTransformerBlockV2
    return SwinTransformer(patch_size=[2, 2], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10,
                           block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2)


def _tv_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 2)],
                    stochastic_depth_prob=0.0, num_classes=10)


def _tv_deeplab():
    return _tv().segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                             num_classes=3, aux_loss=False)


def _tv_fcn():
    return _tv().segmentation.fcn_resnet50(weights=None, weights_backbone=None, num_classes=3,
                                           aux_loss=False)


# --- timm ------------------------------------------------------------------
def _timm(name, **kw):
    def build():
        return import_package("timm").create_model(name, pretrained=False, num_classes=10, **kw)
    return build


# --- transformers ----------------------------------------------------------
def _hf(config_name, model_name, attention="sdpa", **config):
    """attention=None for models without attention (state-space models refuse "sdpa")."""
    def build():
        tf = import_package("transformers")
        cfg = getattr(tf, config_name)(**config)
        if attention is not None:
            cfg._attn_implementation = attention  # "sdpa": what users get by default on CPU/CUDA
        return getattr(tf, model_name)(cfg)
    return build


def _causal_lm_batch():
    ids = _tokens()
    return ({"input_ids": ids, "labels": ids},)


def _masked_lm_batch():
    ids = _tokens()
    labels = ids.clone()
    labels[:, ::2] = -100  # only every other position is scored, as in MLM
    return ({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels},)


def _seq2seq_batch():
    return ({"input_ids": _tokens(5), "labels": _tokens(6, length=SEQ // 2)},)


WHISPER_MELS, WHISPER_FRAMES = 16, 32  # frames = 2 * max_source_positions (stride-2 conv)


def _whisper_batch():
    feats = torch.randn(2, WHISPER_MELS, WHISPER_FRAMES, generator=_gen(7))
    return ({"input_features": feats, "labels": _tokens(8, length=SEQ // 2)},)


_TINY_DECODER = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, max_position_embeddings=64)


# state-space models: transformers' pure-torch paths (no mamba_ssm / causal_conv1d
# kernels here): Mamba's sequential selective scan over the 16 tokens with a
# depthwise causal conv1d, Mamba2's chunked SSD scan (cumsum, segment sums,
# exp of masked differences, chunk_size 8 so the 16 tokens make two chunks)
_TINY_SSM = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, expand=2, conv_kernel=4,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2)

WAV2VEC2_SAMPLES = 1600  # 0.1 s at 16 kHz: 319 -> 159 -> 79 frames through the conv front end


def _ctc_batch():
    g = _gen(11)
    audio = torch.randn(2, WAV2VEC2_SAMPLES, generator=g)
    labels = torch.randint(1, 32, (2, 12), generator=g)  # 0 is CTC's blank (pad_token_id)
    labels[1, 9:] = -100  # a shorter transcript: CTC's target lengths differ
    return ({"input_values": audio, "labels": labels},)


DETECTION_CLASSES = 3


DETR_QUERIES = 10


def _detection_batch(size=32, queries=0):
    """Images and, per image, 2-3 boxes (center x, y, width, height in 0..1)
    with their classes: what DETR-style losses match to queries with scipy's
    Hungarian algorithm. queries > 0: DETR's decoder inputs too (see
    _distinct_queries)."""
    g = _gen(12)
    images = torch.randn(2, 3, size, size, generator=g)
    extra = {"decoder_inputs_embeds": torch.randn(2, queries, 64, generator=g)} if queries else {}
    labels = []
    for n in (2, 3):
        centers = 0.3 + 0.4 * torch.rand(n, 2, generator=g)
        sizes = 0.1 + 0.3 * torch.rand(n, 2, generator=g)
        labels.append({"class_labels": torch.randint(0, DETECTION_CLASSES, (n,), generator=g),
                       "boxes": torch.cat([centers, sizes], dim=1)})
    return ({"pixel_values": images, "labels": labels, **extra},)


def _distinct_queries(build, seed=0):
    """A DETR-style detector whose queries predict different boxes and classes.

    With transformers' initialization (zero detection tokens and position
    embeddings in YOLOS; zero decoder inputs, std-0.02 query embeddings and heads
    in DETR) the queries of a random-weight model predict the same class and box
    up to ~1e-5: the Hungarian matcher then breaks a near-tie, and which query
    gets which target is decided by the last bit of rounding. Seen: YOLOS under
    bf16, acme matched queries (3, 4) of the first image where CPU and float64
    match (0, 1), and the gradients of those tokens differ 5x; DETR's best two
    assignments tie to 1e-5 in float64. Here the token, position and query
    embeddings are redrawn at std 0.3 and the heads at 0.1 (DETR also gets random
    decoder inputs, _detection_batch(queries=...)): the best assignment then wins
    by 1-5 % of its cost in float64 (YOLOS: by 0.23 of 4.6 and 0.090 of 6.7 for
    the two images; DETR, seed 3: 0.16 of 6.5 and 0.10 of 13.6), beyond bf16
    rounding (other seeds give margins down to 0.3 %: checked before picking)."""
    def distinct():
        model = build()
        g = _gen(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() < 2:
                    continue
                if any(k in name for k in ("token", "position_embeddings", "query")):
                    p.normal_(std=0.3, generator=g)
                elif any(k in name for k in ("class_labels_classifier", "bbox_predictor")):
                    p.normal_(std=0.1, generator=g)
        return model
    return distinct


def _detection_loss(model, batch):
    """DETR-style losses build their class weights with torch.ones (the default
    dtype): in the float64 reference the default dtype is float64 too."""
    inputs = batch[0]
    double = inputs["pixel_values"].dtype == torch.float64
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if double else previous)
    try:
        return model(**inputs).loss
    finally:
        torch.set_default_dtype(previous)


def _hf_segmentation_batch():
    images, labels = _segmentation_batch()
    return ({"pixel_values": images, "labels": labels},)


# --- diffusers ---------------------------------------------------------------
def _unet2d():
    from diffusers import UNet2DModel
    return UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(32, 64), norm_num_groups=8, attention_head_dim=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def _unet2d_condition():
    from diffusers import UNet2DConditionModel
    return UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64), norm_num_groups=8,
                                cross_attention_dim=32, attention_head_dim=8,
                                down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))


def _diffusion_batch(channels=3, text=False):
    def batch():
        g = _gen(13)
        x = torch.randn(2, channels, 16, 16, generator=g)
        noise = torch.randn(2, channels, 16, 16, generator=g)
        t = torch.tensor([10, 700])
        extra = {"encoder_hidden_states": torch.randn(2, 8, 32, generator=g)} if text else {}
        return x, noise, t, extra
    return batch


def _denoising_loss(model, batch):
    """The DDPM objective at two timesteps: predict the noise added to x."""
    x, noise, t, extra = batch
    a = (1 - t.to(x.dtype) / 1000).view(-1, 1, 1, 1)
    noisy = a.sqrt() * x + (1 - a).sqrt() * noise
    return F.mse_loss(model(noisy, t, **extra).sample, noise)


# --- torch.nn RNNs ---------------------------------------------------------
class RNNClassifier(nn.Module):
    """Embedding -> 2-layer (bi)RNN -> linear over the last step, as in a
    sequence classifier; `cell` is nn.LSTM, nn.GRU or nn.RNN."""

    def __init__(self, cell, bidirectional=False, hidden=32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 24)
        self.rnn = cell(24, hidden, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), 10)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out[:, -1])


def _seq_batch():
    return _tokens(9), torch.randint(0, 10, (2,), generator=_gen(10))


CASES: dict[str, Case] = {c.name: c for c in [
    # torchvision: the stock constructors where they are small enough at 32x32
    Case("tv-resnet18", "torchvision", lambda: _tv().resnet18(num_classes=10), _cnn_images, _classify),
    Case("tv-mobilenet_v3_small", "torchvision", lambda: _tv().mobilenet_v3_small(num_classes=10),
         _cnn_images, _classify),
    Case("tv-efficientnet_b0", "torchvision", lambda: _tv().efficientnet_b0(num_classes=10),
         _cnn_images, _classify),
    Case("tv-convnext", "torchvision", _tv_convnext, _cnn_images, _classify),
    Case("tv-regnet_y_400mf", "torchvision", lambda: _tv().regnet_y_400mf(num_classes=10),
         _cnn_images, _classify),
    Case("tv-squeezenet1_1", "torchvision", lambda: _tv().squeezenet1_1(num_classes=10),
         _cnn_images, _classify),
    Case("tv-vit", "torchvision", _tv_vit, _images, _classify),
    Case("tv-swin", "torchvision", _tv_swin, _images, _classify),
    Case("tv-swin_v2", "torchvision", _tv_swin_v2, _images, _classify),
    Case("tv-deeplabv3_mobilenet_v3", "torchvision", _tv_deeplab, _segmentation_batch, _classify),
    Case("tv-fcn_resnet50", "torchvision", _tv_fcn, _segmentation_batch, _classify, slow=True),
    Case("tv-r3d_18", "torchvision", lambda: _tv().video.r3d_18(num_classes=10), _video_batch,
         _classify),
    # timm
    Case("timm-deit_tiny", "timm", _timm("deit_tiny_patch16_224", img_size=32, patch_size=8, depth=2),
         _images, _classify),
    Case("timm-convnext_atto", "timm", _timm("convnext_atto"), _cnn_images, _classify),
    Case("timm-efficientnet_b0", "timm", _timm("efficientnet_b0"), _cnn_images, _classify,
         slow=True),  # the family runs by default as tv-efficientnet_b0
    Case("timm-maxvit_pico", "timm", _timm("maxvit_rmlp_pico_rw_256", img_size=64),
         lambda: _images(size=64), _classify),
    Case("timm-levit_128s", "timm", _timm("levit_128s", img_size=64), lambda: _images(size=64),
         _classify),
    # transformers
    Case("hf-llama", "transformers",
         _hf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **_TINY_DECODER),
         _causal_lm_batch, _hf_loss),
    # mixture of experts: on any device but CPU and MPS, transformers' grouped-GEMM
    # experts count tokens per expert with histc on int32 (found by family_sweep.py)
    Case("hf-mixtral", "transformers",
         _hf("MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2,
             num_key_value_heads=2, **_TINY_DECODER),
         _causal_lm_batch, _hf_loss),
    Case("hf-gpt2", "transformers",
         _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
             n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
         _causal_lm_batch, _hf_loss),
    Case("hf-bert", "transformers",
         _hf("BertConfig", "BertForMaskedLM", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
         _masked_lm_batch, _hf_loss),
    Case("hf-t5", "transformers",
         _hf("T5Config", "T5ForConditionalGeneration", vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128,
             num_layers=2, num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0),
         _seq2seq_batch, _hf_loss),
    Case("hf-bart", "transformers",
         _hf("BartConfig", "BartForConditionalGeneration", vocab_size=VOCAB, d_model=64,
             encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64, dropout=0.0,
             attention_dropout=0.0, activation_dropout=0.0),
         _seq2seq_batch, _hf_loss),
    Case("hf-whisper", "transformers",
         _hf("WhisperConfig", "WhisperForConditionalGeneration", vocab_size=VOCAB,
             num_mel_bins=WHISPER_MELS, d_model=64, encoder_layers=2, decoder_layers=2,
             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
             decoder_ffn_dim=128, max_source_positions=WHISPER_FRAMES // 2, max_target_positions=64,
             dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0,
             decoder_start_token_id=1, eos_token_id=2, bos_token_id=1),
         _whisper_batch, _hf_loss),
    # timm ViTs with other norms: RMSNorm everywhere with qk-norm, layer scale and
    # register tokens; EVA-02 (rotary embeddings, SwiGLU with an inner LayerNorm; its
    # head at the usual scale, not timm's 1e-3, so the body's gradients are not ~0);
    # CaiT (layer scale, talking-heads attention, class-attention blocks)
    Case("timm-vit_rmsnorm", "timm",
         _timm("vit_small_patch16_224", img_size=32, patch_size=8, depth=2, embed_dim=64,
               num_heads=4, norm_layer="rmsnorm", qk_norm=True, init_values=1e-1, reg_tokens=2),
         _images, _classify),
    Case("timm-eva02_tiny", "timm",
         _timm("eva02_tiny_patch14_224", img_size=28, depth=2, scale_mlp=True, head_init_scale=1.0),
         lambda: _images(size=28), _classify),
    Case("timm-cait_xxs24", "timm", _timm("cait_xxs24_224", img_size=32, patch_size=8, depth=2),
         _images, _classify),
    # transformers: state-space models
    Case("hf-mamba", "transformers",
         _hf("MambaConfig", "MambaForCausalLM", attention=None, state_size=8, time_step_rank=8,
             **_TINY_SSM),
         _causal_lm_batch, _hf_loss),
    Case("hf-mamba2", "transformers",
         _hf("Mamba2Config", "Mamba2ForCausalLM", attention=None, num_heads=8, head_dim=16,
             n_groups=1, state_size=16, chunk_size=8, **_TINY_SSM),
         _causal_lm_batch, _hf_loss),
    # transformers: audio with a GroupNorm'd conv feature extractor, a weight-normed
    # grouped positional conv (_weight_norm_interface, dim=2), and CTC loss
    Case("hf-wav2vec2_ctc", "transformers",
         _hf("Wav2Vec2Config", "Wav2Vec2ForCTC", vocab_size=32, hidden_size=64, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=128, conv_dim=(32, 32, 32),
             conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), feat_extract_norm="group",
             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0,
             hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
             feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0, ctc_loss_reduction="mean",
             pad_token_id=0),
         _ctc_batch, _hf_loss),
    # transformers: detection heads (set-prediction losses with Hungarian matching,
    # L1 and generalized-IoU box losses); DETR on a timm ResNet-18 with frozen batch norm
    Case("hf-yolos", "transformers", _distinct_queries(
        _hf("YolosConfig", "YolosForObjectDetection", hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, image_size=[32, 32], patch_size=8,
            num_detection_tokens=5, num_labels=DETECTION_CLASSES, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)),
         _detection_batch, _detection_loss),
    Case("hf-detr_resnet18", "transformers", _distinct_queries(
         _hf("DetrConfig", "DetrForObjectDetection", backbone="resnet18", use_timm_backbone=True,
             use_pretrained_backbone=False, d_model=64, encoder_layers=1, decoder_layers=1,
             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
             decoder_ffn_dim=128, num_queries=DETR_QUERIES, num_labels=DETECTION_CLASSES,
             dropout=0.0), seed=3),
         lambda: _detection_batch(size=64, queries=DETR_QUERIES), _detection_loss,
         slow=True),  # 11 M parameters (ResNet-18); detection runs by default as hf-yolos
    # transformers: segmentation head (Mix Transformer encoder with spatial-reduction
    # attention and Mix-FFN depthwise convs, all-MLP decoder with batch norm,
    # logits upsampled bilinearly to the labels)
    Case("hf-segformer", "transformers",
         _hf("SegformerConfig", "SegformerForSemanticSegmentation", num_encoder_blocks=2,
             depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[32, 64], patch_sizes=[7, 3],
             strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
             decoder_hidden_size=64, num_labels=3, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0, drop_path_rate=0.0),
         _hf_segmentation_batch, _hf_loss),
    # diffusers: denoising UNets (GroupNorm + SiLU resnet blocks with timestep
    # embeddings, self-attention; the conditional one cross-attends to 8 "text" tokens)
    Case("diffusers-unet2d", "diffusers", _unet2d, _diffusion_batch(), _denoising_loss),
    Case("diffusers-unet2d_condition", "diffusers", _unet2d_condition,
         _diffusion_batch(channels=4, text=True), _denoising_loss),
    # torch.nn recurrent networks
    Case("nn-lstm", "torch", lambda: RNNClassifier(nn.LSTM), _seq_batch, _classify),
    Case("nn-bilstm", "torch", lambda: RNNClassifier(nn.LSTM, bidirectional=True), _seq_batch,
         _classify),
    Case("nn-gru", "torch", lambda: RNNClassifier(nn.GRU), _seq_batch, _classify),
    Case("nn-rnn_tanh", "torch", lambda: RNNClassifier(nn.RNN), _seq_batch, _classify),
]}


# ---------------------------------------------------------------------------
# One training step
# ---------------------------------------------------------------------------
def _without_dropout(model: nn.Module) -> nn.Module:
    """Dropout and stochastic depth draw different random numbers on each
    device; put only those modules in eval mode (batch norm keeps training)."""
    for m in model.modules():
        kind = type(m).__name__
        if "Dropout" in kind or "DropPath" in kind or "StochasticDepth" in kind:
            m.eval()
    return model


def make_model(case: Case) -> nn.Module:
    torch.manual_seed(0)
    return _without_dropout(case.build().train())


@dataclasses.dataclass
class Step:
    loss: float
    grads: dict[str, torch.Tensor]  # float32, on CPU, before the update
    params: dict[str, torch.Tensor]  # float32, on CPU, after one SGD step


def batch_to(batch, device):
    if isinstance(batch, dict):
        return {k: batch_to(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(batch_to(v, device) for v in batch)
    return batch.to(device)


LR = 0.01  # SGD-momentum; its first step is p -= LR * grad


def train_step(case: Case, model: nn.Module, device: str, autocast: torch.dtype | None) -> Step:
    """Forward, backward and one SGD-momentum step of a copy of `model` on
    `device`, under torch.autocast(device type, autocast) unless None."""
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    batch = batch_to(case.batch(), device)
    with torch.autocast(torch.device(device).type, dtype=autocast or torch.float32,
                        enabled=autocast is not None):
        loss = case.loss(model, batch)
    loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()
             if p.grad is not None}
    opt.step()
    params = {n: p.detach().float().cpu() for n, p in model.named_parameters()}
    return Step(float(loss.detach().float().cpu()), grads, params)


def compiled(case: Case) -> Case:
    """The same case with the model run through `torch.compile` (default backend):
    forward and backward are compiled, the optimizer step stays eager."""
    def loss(model, batch, _eager_loss=case.loss):
        return _eager_loss(torch.compile(model), batch)
    return dataclasses.replace(case, loss=loss)


@dataclasses.dataclass
class CompileCounts:
    graphs: int = 0        # graphs Dynamo captured (forward and backward count apart)
    graph_breaks: int = 0  # places Dynamo fell back to Python
    acme_kernels: int = 0  # kernels Inductor generated for a torch_fl device


@contextlib.contextmanager
def compile_counters():
    """What torch.compile did inside the block: a model that graph-breaks
    everywhere, or whose graphs never reach the device's code generation, would
    otherwise pass as an eager run."""
    from torch._dynamo.utils import counters

    from torch_fl import graph as graph_api

    counts = CompileCounts()
    graphs0 = counters["stats"]["unique_graphs"]
    breaks0 = sum(counters["graph_break"].values())

    def seen(graph):
        counts.acme_kernels += graph.num_kernels

    graph_api.add_graph_observer(seen)
    try:
        yield counts
    finally:
        graph_api.remove_graph_observer(seen)
        counts.graphs = counters["stats"]["unique_graphs"] - graphs0
        counts.graph_breaks = sum(counters["graph_break"].values()) - breaks0


def float64_reference(case: Case, model: nn.Module) -> Step:
    """The same step on CPU in float64: what both float32 runs are judged by.
    Some of these gradients are ill-conditioned in float32 (batch norm over few
    values, e.g. FCN's layer4 differs by 13 % between CPU float32 and float64),
    so acme is asked to be about as close to float64 as CPU's float32 is, not
    to match CPU's rounding."""
    def batch():
        return tuple(_double(t) for t in case.batch())
    reference = copy.deepcopy(model).double()
    config = getattr(reference, "config", None)
    if getattr(config, "_experts_implementation", None) not in (None, "eager"):
        # CPU's grouped GEMM has no float64 kernel; the per-expert loop computes the same
        config._experts_implementation = "eager"
    return train_step(dataclasses.replace(case, batch=batch), reference, "cpu", None)


def perturbed_model(model: nn.Module, seed: int, rel: float) -> nn.Module:
    """A copy of `model` with every floating parameter multiplied by
    (1 + rel * N(0, 1)), drawn from `seed`: the same step at rounding-level
    distance, to measure how much rounding alone moves its results."""
    g = _gen(seed)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            if p.is_floating_point():
                p.mul_(1 + rel * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return out


def _double(x):
    if isinstance(x, dict):
        return {k: _double(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):  # DETR-style labels: a list of dicts per image
        return type(x)(_double(v) for v in x)
    return x.double() if x.is_floating_point() else x


def grad_errors(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per parameter: ||grad - reference|| / ||reference|| (Frobenius), where a
    reference smaller than 1e-3 of the model's largest is replaced by that floor
    (a gradient that is zero up to rounding, like a conv bias under batch norm,
    is judged on the model's scale)."""
    norms = {n: g.double().norm().item() for n, g in reference.items()}
    floor = 1e-3 * max(norms.values())
    return {n: (grads[n].double() - g.double()).norm().item() / max(norms[n], floor, 1e-30)
            for n, g in reference.items()}


def grad_error(grads, reference) -> tuple[float, str]:
    """The worst of grad_errors and its parameter's name."""
    errs = grad_errors(grads, reference)
    worst = max(errs, key=errs.get)
    return errs[worst], worst


# ---------------------------------------------------------------------------
# Survey: python real_model_zoo.py [names] -> a Markdown table
# ---------------------------------------------------------------------------
def _survey_one(case: Case, device: str, autocast, compile_model: bool = False) -> str:
    import torch_fl

    try:
        import_package(case.package)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        return f"not importable: {type(e).__name__}: {str(e).splitlines()[0]}"
    model = make_model(case)
    torch_fl.clear_fallback_log()
    note = ""
    try:
        if compile_model:
            torch._dynamo.reset()
            with compile_counters() as counts:
                dev = train_step(compiled(case), model, device, autocast)
            note = (f"; compiled: {counts.graphs} graphs, {counts.graph_breaks} breaks, "
                    f"{counts.acme_kernels} kernels")
        else:
            dev = train_step(case, model, device, autocast)
    except Exception as e:  # noqa: BLE001
        fb = torch_fl.get_fallback_log()
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return f"ERROR {type(e).__name__}: {first}" + (f"; fallback: {_fb(fb)}" if fb else "")
    fb = torch_fl.get_fallback_log()
    if autocast is None:
        cpu = train_step(case, model, "cpu", None)
    else:  # the reference of test_real_models.py: CPU autocast with CUDA's policy
        from torch_fl.testing.autocast_reference import cuda_autocast_policy_on_cpu

        with cuda_autocast_policy_on_cpu():
            cpu = train_step(case, model, "cpu", autocast)
    ref = float64_reference(case, model)
    rel = abs(dev.loss - cpu.loss) / max(1.0, abs(cpu.loss))
    e_dev, e_cpu = grad_errors(dev.grads, ref.grads), grad_errors(cpu.grads, ref.grads)
    worst = max(e_dev, key=lambda n: e_dev[n] / (e_cpu[n] + 1e-6))
    verdict = (f"loss {dev.loss:.4f} vs cpu {cpu.loss:.4f} (rel {rel:.1e}); grad err vs float64: "
               f"{device} {max(e_dev.values()):.1e}, cpu {max(e_cpu.values()):.1e}; worst ratio "
               f"{e_dev[worst]:.1e}/{e_cpu[worst]:.1e} ({worst})")
    return ("pass; " if not fb else "runs; fallback: " + _fb(fb) + "; ") + verdict + note


def _fb(log) -> str:
    return ", ".join(f"{e['op']} x{e['count']}" for e in sorted(log, key=lambda e: -e["count"]))


def main(argv: list[str]) -> None:
    import time

    torch.set_num_threads(1)  # see test_real_models.py: CPU's threads spin on a loaded machine
    compile_model = "--compile" in argv  # the step through torch.compile(model), caches off
    if compile_model:
        import torch._inductor.config as inductor_config

        inductor_config.force_disable_caches = True
        torch._dynamo.config.allow_rnn = True  # as test_real_models_compile.py: RNNs compiled too
    device = "acme"
    if "--device" in argv:
        at = argv.index("--device")
        device = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    precisions = (None,) if "--float32" in argv else (None, torch.bfloat16, torch.float16)
    names = [a for a in argv if a not in ("--compile", "--float32")] or list(CASES)
    columns = ["float32", "bf16 autocast", "fp16 autocast"][:len(precisions)]
    print(f"| model ({device}) | {' | '.join(columns)} |\n|{' --- |' * (len(columns) + 1)}")
    for name in names:
        case = CASES[name]
        t = time.perf_counter()
        cells = [_survey_one(case, device, dtype, compile_model) for dtype in precisions]
        print(f"| {name} | {' | '.join(cells)} |  <!-- {time.perf_counter() - t:.1f} s -->", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
