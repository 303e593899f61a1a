"""`flsdk readiness`: the production checklist (torch_fl.readiness) on a
reference model (ResNet-18, the small GPT, or none), as a table or JSON."""

from __future__ import annotations

import sys


def run_readiness(args) -> int:
    """args: device, model, json, record, update_record, min_bandwidth, no_bandwidth,
    no_faults, atol, rtol. Exit 0 (pass / warn), 1 (a check failed), 2 (bad arguments)."""
    from . import _backends
    from .checklist import readiness
    from .cli_compare import MODELS, build_workload

    device = args.device or _backends.first_device()
    if device is None:
        from .discovery import backend_reports

        reasons = [f"{r['name']}: {r['error']}" for r in backend_reports() if not r["loaded"]]
        print("flsdk readiness: no device: " + ("; ".join(reasons) if reasons
                                               else "no flsdk backend is installed"),
              file=sys.stderr)
        return 1
    model = inputs = loss_fn = targets = None
    if args.model != "none":
        if args.model not in MODELS:
            print(f"flsdk readiness: unknown model {args.model!r}; choose one of: "
                  f"{', '.join(MODELS)}, none", file=sys.stderr)
            return 2
        model, inputs, loss_fn, targets = build_workload(args.model)
    report = readiness(device, model, inputs, loss_fn=loss_fn, targets=targets,
                       model_name=None if args.model == "none" else args.model,
                       record=args.record or None, update_record=args.update_record,
                       atol=args.atol, rtol=args.rtol, min_bandwidth_gbps=args.min_bandwidth,
                       bandwidth=not args.no_bandwidth, faults=not args.no_faults)
    print(report.to_json() if args.json else report.table())
    return 0 if report.ok else 1
