"""Whole model families on acme, not the zoo's picked cases: every torchvision
builder, one model per timm module, every causal-LM type transformers ships.

    python examples/acme_backend/tests/family_sweep.py torchvision|timm|hf [name ...]
        [--max-params 40e6]

Each model is built with random weights (torchvision/timm: 10 classes, 64x64
images; transformers: its config class shrunk to 2 layers of width 64) and
runs one float32 SGD step through real_model_zoo's survey: acme against CPU
float32 and CPU float64. A model whose CPU step fails too (an input size it
does not take, a config the generic shrink breaks) is listed as such, not
counted against acme. Prints one Markdown row per model as it goes.

Reading the rows: the zoo's "worst ratio" compares acme's and CPU's distance
from float64 per parameter. A single ReLU input or max-pool window whose sign
or argmax flips between two float32 roundings sends that layer's gradient far
from float64 on one device and not the other (seen in mnasnet0_75, vgg11); a
model that calls F.dropout directly (timm's ghostnet, senet154 heads) draws
different masks per device and its losses differ. Neither is an acme error.
Results of the last run: docs/real-models.md ("Family sweeps").
"""

from __future__ import annotations

import sys
import time
import warnings

import torch

import real_model_zoo as zoo

# timm: per module, the first variant whose name has the earliest of these (smallest first)
_SMALL_NAMES = ["pico", "femto", "atto", "nano", "xxxs", "xxs", "tiny", "xs", "mini", "small",
                "lite", "_t", "_s", "b0", "s0", "18", "26", "_a"]

# transformers: what each config class calls its sizes; unknown names are skipped
_TINY_LM = dict(vocab_size=zoo.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=64, n_positions=64, head_dim=16, d_model=64, n_embd=64,
                n_layer=2, n_head=4, ffn_dim=128, d_ff=128, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, dropout=0.0, attention_dropout=0.0,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, hidden_dropout=0.0,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
_SKIP_HF = {"blt": "its default sub-configs are not shrunk by the generic sizes and take >10 GB"}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


def _row(name: str, detail: str, case: zoo.Case | None, max_params: float) -> str:
    """Runs the CPU step first (a failure there is not acme's), then the survey."""
    start = time.perf_counter()
    if case is None:
        return f"| {name} | {detail} | - | - |"
    try:
        model = zoo.make_model(case)
        params = sum(p.numel() for p in model.parameters())
        if params > max_params:
            return f"| {name} | {detail} | {params / 1e6:.0f}M | skipped: above --max-params |"
        zoo.train_step(case, model, "cpu", None)
    except Exception as e:  # noqa: BLE001 - reported
        return f"| {name} | {detail} | - | not run: fails on CPU too (or does not build): {_first_line(e)} |"
    cell = zoo._survey_one(case, "acme", None)
    return f"| {name} | {detail} | {params / 1e6:.1f}M | {cell} |  <!-- {time.perf_counter() - start:.1f} s -->"


def torchvision_cases(names: list[str]):
    tv = zoo.import_torchvision()
    groups = [(tv.models, zoo._cnn_images, {"num_classes": 10}),
              (tv.models.segmentation, zoo._segmentation_batch,
               {"num_classes": 3, "weights_backbone": None, "aux_loss": False}),
              (tv.models.video, zoo._video_batch, {"num_classes": 10})]
    for module, batch, kwargs in groups:
        for name in tv.models.list_models(module=module):
            if names and name not in names:
                continue
            kw = dict(kwargs)
            if name.startswith("vit"):
                kw["image_size"] = 56 if name == "vit_h_14" else 64  # a multiple of the patch
            if name in ("inception_v3", "googlenet"):
                kw.update(aux_logits=False, init_weights=True)
            data = (lambda: zoo._images(size=96)) if name == "inception_v3" else batch
            build = (lambda name=name, kw=kw: tv.models.get_model(name, **kw))
            yield name, "torchvision", zoo.Case(f"tv-{name}", "torchvision", build, data, zoo._classify)


def timm_cases(names: list[str]):
    zoo.import_torchvision()
    timm = zoo.import_package("timm")

    def smallest(variants):
        def key(n):
            rank = next((i for i, k in enumerate(_SMALL_NAMES) if k in n), len(_SMALL_NAMES))
            return rank, len(n), n
        return sorted(variants, key=key)[0]

    for module in timm.list_modules():
        variants = timm.list_models(module=module)
        if not variants:
            continue
        name = smallest(variants)
        if names and module not in names and name not in names:
            continue

        def build(name=name):
            try:  # most take the image size; the others are built for theirs
                return timm.create_model(name, pretrained=False, num_classes=10, img_size=64)
            except TypeError:
                return timm.create_model(name, pretrained=False, num_classes=10)
        case = zoo.Case(f"timm-{name}", "timm", build, lambda: zoo._images(size=64), zoo._classify)
        try:  # models with a fixed input size get 224x224 (batch 2)
            zoo.train_step(case, zoo.make_model(case), "cpu", None)
        except Exception:  # noqa: BLE001 - _row reports the 224 px attempt's error
            case = zoo.Case(f"timm-{name}", "timm", lambda name=name: timm.create_model(
                name, pretrained=False, num_classes=10), lambda: zoo._images(n=2, size=224), zoo._classify)
        yield module, name, case


def hf_causal_lm_cases(names: list[str]):
    zoo.import_torchvision()
    tf = zoo.import_package("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    tf.logging.set_verbosity_error()
    for model_type, class_name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        if names and model_type not in names:
            continue
        if model_type in _SKIP_HF:
            yield model_type, f"skipped: {_SKIP_HF[model_type]}", None
            continue
        class_name = class_name if isinstance(class_name, str) else class_name[0]

        def build(model_type=model_type, class_name=class_name, attention="sdpa"):
            config = CONFIG_MAPPING[model_type]()
            for target in (config, getattr(config, "text_config", None)):
                for key, value in _TINY_LM.items():
                    if target is not None and (hasattr(target, key) or key in getattr(target, "attribute_map", {})):
                        try:
                            setattr(target, key, value)
                        except Exception:  # noqa: BLE001 - read-only in this config
                            pass
            config._attn_implementation = attention
            return getattr(tf, class_name)(config)
        case = zoo.Case(f"hf-{model_type}", "transformers", build, zoo._causal_lm_batch, zoo._hf_loss)
        try:  # the users' default is SDPA; models without it get eager attention
            zoo.train_step(case, zoo.make_model(case), "cpu", None)
        except ValueError as e:
            if "attention implementation" in str(e):
                case = zoo.Case(case.name, case.package, lambda b=build: b(attention="eager"),
                                case.batch, case.loss)
        except Exception:  # noqa: BLE001 - _row reports it
            pass
        yield model_type, class_name, case


FAMILIES = {"torchvision": torchvision_cases, "timm": timm_cases, "hf": hf_causal_lm_cases}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in FAMILIES:
        print(__doc__)
        return 2
    max_params = 40e6
    if "--max-params" in argv:
        i = argv.index("--max-params")
        max_params = float(argv[i + 1])
        del argv[i:i + 2]
    warnings.filterwarnings("ignore")
    import torch_fl_acme

    torch_fl_acme.load()
    torch.set_num_threads(1)  # as the zoo's tests: CPU's threads spin on a loaded machine
    family, names = argv[0], argv[1:]
    print(f"| {family} | model | params | acme vs CPU vs float64 |\n| --- | --- | --- | --- |")
    for row in FAMILIES[family](names):
        if family == "torchvision":
            name, _, case = row
            print(_row(name, "", case, max_params), flush=True)
        else:
            module, detail, case = row
            print(_row(module, detail, case, max_params), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
