"""`flsdk compare`: layer-by-layer precision report of a reference model on two
devices (torch_fl.compare_model on ResNet-18 or the small GPT)."""

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
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")


def run_compare(args) -> int:
    """args: model, device_a, device_b (None: first non-CPU device), json, atol, rtol."""
    from . import _backends
    from .compare import compare_model

    device_b = args.device_b or _backends.first_device()
    if device_b is None:
        from .discovery import backend_reports

        reasons = [f"{r['name']}: {r['error']}" for r in backend_reports() if not r["loaded"]]
        print("flsdk compare: no device to compare with: "
              + ("; ".join(reasons) if reasons else "no flsdk backend is installed"),
              file=sys.stderr)
        return 1
    try:
        model, inputs, loss_fn, targets = build_workload(args.model)
    except ValueError as exc:
        print(f"flsdk compare: {exc}", file=sys.stderr)
        return 2
    report = compare_model(model, inputs, args.device_a, device_b, loss_fn=loss_fn,
                           targets=targets, atol=args.atol, rtol=args.rtol)
    report.model = args.model
    print(report.table())
    if args.json:
        report.to_json(args.json)
        print(f"report written to {args.json}")
    return 0
