"""`flsdk compare`: layer-by-layer precision report of a model on two devices
(torch_fl.compare_model on ResNet-18, the small GPT, or the user's own model
given as `module:factory`)."""

from __future__ import annotations

import sys
from typing import Any

MODELS = ("resnet18", "gpt")


def build_workload(name: str, seed: int = 0) -> tuple[Any, tuple, Any, Any]:
    """(model, inputs, loss_fn, targets) of a reference model, seeded."""
    import torch
    from torch.nn import functional as F

    from .models import GPT, GPTConfig, resnet18

    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if name == "resnet18":
        model = resnet18(num_classes=10)
        model.train()  # batch-norm on batch statistics, as in training
        x = torch.randn(8, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        return model, (x,), F.cross_entropy, y
    if name == "gpt":
        model = GPT(GPTConfig(dropout=0.0))  # dropout would differ between devices
        tok = torch.randint(0, model.config.vocab_size, (4, 16), generator=g)
        return model, (tok, tok.roll(-1, dims=1)), (lambda out: out[1]), None
    if ":" in name:
        return user_workload(name)
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}, "
                     "or module:factory (your own model)")


def user_workload(spec: str) -> tuple[Any, tuple, Any, Any]:
    """A user's model given as `module:factory` (module importable from the current
    folder or sys.path). factory() returns (model, inputs) or (model, inputs,
    loss_fn) or (model, inputs, loss_fn, targets); inputs is a tensor or a tuple
    of them. Every problem is a ValueError naming what to fix."""
    import importlib
    import os

    import torch

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--model {spec!r}: expected module:factory, e.g. my_models:build")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = importlib.import_module(module_name)
        for part in attr.split("."):
            factory = getattr(factory, part)
    except ImportError as exc:
        raise ValueError(f"--model {spec!r}: cannot import {module_name!r}: {exc}") from None
    except AttributeError:
        raise ValueError(f"--model {spec!r}: module {module_name!r} has no {attr!r}") from None
    if not callable(factory):
        raise ValueError(f"--model {spec!r}: {attr!r} is not callable")
    made = factory()
    if not isinstance(made, tuple) or not 2 <= len(made) <= 4 or not isinstance(made[0], torch.nn.Module):
        raise ValueError(f"--model {spec!r}: {attr}() must return (model, inputs[, loss_fn[, targets]]) "
                         f"with model a torch.nn.Module; it returned {type(made).__name__}")
    model, inputs, loss_fn, targets = (tuple(made) + (None, None))[:4]
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    return model, inputs, loss_fn, targets


def run_compare(args) -> int:
    """args: model, device_a, device_b (None: first non-CPU device), json, atol, rtol."""
    from . import _backends
    from .compare import compare_model

    try:
        model, inputs, loss_fn, targets = build_workload(args.model)
    except ValueError as exc:
        print(f"flsdk compare: {exc}", file=sys.stderr)
        return 2
    device_b = args.device_b or _backends.first_device()
    if device_b is None:
        from .discovery import backend_reports

        reasons = [f"{r['name']}: {r['error']}" for r in backend_reports() if not r["loaded"]]
        print("flsdk compare: no device to compare with: "
              + ("; ".join(reasons) if reasons else "no flsdk backend is installed"),
              file=sys.stderr)
        return 1
    try:
        report = compare_model(model, inputs, args.device_a, device_b, loss_fn=loss_fn,
                               targets=targets, atol=args.atol, rtol=args.rtol)
    except Exception as exc:  # an op the device cannot run, a model error: say which, one line
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"flsdk compare: {args.model} failed on {args.device_a} vs {device_b}: "
              f"{type(exc).__name__}: {first} (flsdk ops / flsdk doctor say what the device runs)",
              file=sys.stderr)
        return 1
    report.model = args.model
    print(report.table())
    if args.json:
        report.to_json(args.json)
        print(f"report written to {args.json}")
    return 0
