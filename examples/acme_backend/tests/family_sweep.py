"""Whole model families on acme, not the zoo's picked cases: every torchvision
builder, one model per timm module, every causal-LM type transformers ships.

    python examples/acme_backend/tests/family_sweep.py torchvision|timm|hf [name ...]
        [--max-params 40e6] [--autocast bf16|fp16] [--compile]

Each model is built with random weights (torchvision/timm: 10 classes, 64x64
images; transformers: its config class shrunk to 2 layers of width 64) and
takes one SGD step on acme, in float32 or under torch.autocast (--autocast),
eagerly or through torch.compile(model) (--compile, caches off). The step is
judged by test_real_models.py's rule (`compare_step`, docs/real-models.md):
the loss against the CPU step at the same precision (under autocast: CPU
autocast with CUDA's policy), each gradient against the CPU step in float64,
no CPU fallback. A model whose CPU step fails too (an input size it does not
take, a config the generic shrink breaks) is listed as such, not counted
against acme. Prints one Markdown row per model as it goes.

Reading the rows: "worst" names the parameter whose gradient is furthest from
float64 on acme relative to the CPU's own distance. A single ReLU input or
max-pool window whose sign or argmax flips between two float32 roundings sends
that layer's gradient far from float64 on one device and not the other (seen
in mnasnet0_75, vgg11); a model that calls F.dropout directly (timm's
ghostnet, senet154 heads) draws different masks per device and its losses
differ. Neither is an acme error.
Results of the last runs: docs/real-models.md ("Family sweeps").
"""

from __future__ import annotations

import sys
import time
import warnings

import real_model_zoo as zoo
import test_real_models as judge
import torch

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


def _row(name: str, detail: str, case: zoo.Case | None, options: dict) -> str:
    """The CPU step at the precision under test first (a failure there is not
    acme's), then acme's step, judged against it and against float64."""
    import torch_fl

    start = time.perf_counter()
    if case is None:
        return f"| {name} | {detail} | - | - |"
    precision, autocast = options["precision"], options["autocast"]
    try:
        model = zoo.make_model(case)
        params = sum(p.numel() for p in model.parameters())
        if params > options["max_params"]:
            return f"| {name} | {detail} | {params / 1e6:.0f}M | skipped: above --max-params |"
        ref = judge.reference_step(case, model, autocast)
    except Exception as e:  # noqa: BLE001 - reported
        return f"| {name} | {detail} | - | not run: fails on CPU too (or does not build): {_first_line(e)} |"
    torch_fl.clear_fallback_log()
    counts = None
    try:
        if options["compile"]:
            torch._dynamo.reset()
            with zoo.compile_counters() as counts:
                dev = zoo.train_step(zoo.compiled(case), model, "acme", autocast)
        else:
            dev = zoo.train_step(case, model, "acme", autocast)
    except Exception as e:  # noqa: BLE001 - reported
        fb = torch_fl.get_fallback_log()
        return (f"| {name} | {detail} | {params / 1e6:.1f}M | ERROR {_first_line(e)}"
                + (f"; fallback: {zoo._fb(fb)}" if fb else "") + " |")
    fb = torch_fl.get_fallback_log()
    try:
        f64 = zoo.float64_reference(case, model)
    except Exception as e:  # noqa: BLE001 - the model does not run in float64 (inkling2)
        rel = abs(dev.loss - ref.loss) / max(1.0, abs(ref.loss))
        return (f"| {name} | {detail} | {params / 1e6:.1f}M | not judged: its float64 reference fails "
                f"on CPU ({_first_line(e)}); loss {dev.loss:.4f} vs cpu {ref.loss:.4f} (rel {rel:.1e})"
                + (f"; fallback: {zoo._fb(fb)}" if fb else "") + " |")
    # compare_step's rule: under autocast a loss at most twice as far from float64 as
    # the CPU's is rounding (batch-normed CNNs with random weights round their bf16
    # loss 5-10 % away on either device), and so is one within what the CPU's own
    # perturbed steps move.
    problems = judge.compare_step(dev, ref, f64, precision,
                                  judge.perturbed_references(case, model, precision))
    e_dev, e_ref = zoo.grad_errors(dev.grads, f64.grads), zoo.grad_errors(ref.grads, f64.grads)
    worst = max(e_dev, key=lambda n: e_dev[n] / (e_ref[n] + 1e-6))
    verdict = "pass" if not problems and not fb else "FAIL: " + "; ".join(
        problems + ([f"fallback: {zoo._fb(fb)}"] if fb else []))
    numbers = (f"loss {dev.loss:.4f} vs cpu {ref.loss:.4f} (float64 {f64.loss:.4f}); grad err vs float64 acme "
               f"{max(e_dev.values()):.1e}, cpu {max(e_ref.values()):.1e}; worst {e_dev[worst]:.1e}/"
               f"{e_ref[worst]:.1e} ({worst})")
    if counts is not None:
        numbers += f"; compiled: {counts.graphs} graphs, {counts.graph_breaks} breaks, {counts.acme_kernels} kernels"
    return (f"| {name} | {detail} | {params / 1e6:.1f}M | {verdict}; {numbers} |"
            f"  <!-- {time.perf_counter() - start:.1f} s -->")


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
            data = (lambda: zoo._images(size=96)) if name == "inception_v3" else batch  # noqa: E731
            def build(name=name, kw=kw):
                return tv.models.get_model(name, **kw)
            yield name, "", zoo.Case(f"tv-{name}", "torchvision", build, data, zoo._classify)


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


PRECISION_OF = {None: "float32", "bf16": "bf16-autocast", "fp16": "fp16-autocast"}


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("names", nargs="*", help="only these models (timm: module or model names)")
    parser.add_argument("--max-params", type=float, default=40e6)
    parser.add_argument("--autocast", choices=["bf16", "fp16"], help="the step under torch.autocast")
    parser.add_argument("--compile", action="store_true", help="the step through torch.compile(model)")
    args = parser.parse_args(argv)
    precision = PRECISION_OF[args.autocast]
    options = {"max_params": args.max_params, "precision": precision,
               "autocast": judge.PRECISIONS[precision], "compile": args.compile}
    warnings.filterwarnings("ignore")
    import torch_fl_acme

    torch_fl_acme.load()
    torch.set_num_threads(1)  # as the zoo's tests: CPU's threads spin on a loaded machine
    if args.compile:
        import torch._inductor.config as inductor_config

        inductor_config.force_disable_caches = True
    mode = precision + (", compiled" if args.compile else "")
    print(f"| {args.family} ({mode}) | model | params | acme vs CPU vs float64 |\n| --- | --- | --- | --- |")
    for name, detail, case in FAMILIES[args.family](args.names):
        try:
            row = _row(name, detail, case, options)
        except Exception as e:  # noqa: BLE001 - one model's surprise must not end the sweep
            row = f"| {name} | {detail} | - | sweep error (not judged): {_first_line(e)} |"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
