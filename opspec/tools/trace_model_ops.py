"""Print the ATen ops a PrivateUse1 backend runs for the reference models.

    python opspec/tools/trace_model_ops.py            # backend ops, one a line
    python opspec/tools/trace_model_ops.py --all      # plus glue and composite ops
    python opspec/tools/trace_model_ops.py --by-run   # per model / autocast run
    python opspec/tools/trace_model_ops.py --full     # full-width ResNet-18

Forward, backward and SGD-momentum / AdamW steps (foreach off and on) of
torch_fl.models' ResNet-18 and GPT (matmul attention and SDPA), with and without
bfloat16 autocast. See torch_fl/models/trace.py for how the CPU trace is mapped to
what a PrivateUse1 backend is asked for.
"""

from __future__ import annotations

import argparse
import sys

import torch

from torch_fl.models.trace import SDPA_OVERRIDEABLE, trace_reference_models, union


def _dtypes(ds) -> str:
    return ",".join(sorted(str(d).replace("torch.", "") for d in ds))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="also list glue and composite ops")
    ap.add_argument("--by-run", action="store_true", help="list the backend ops of each run")
    ap.add_argument("--full", action="store_true", help="full-width ResNet-18 (slower)")
    ap.add_argument("--no-autocast", action="store_true", help="skip the bfloat16 autocast runs")
    args = ap.parse_args(argv)

    runs = trace_reference_models(autocast=not args.no_autocast, small=not args.full)
    total = union(runs.values())
    print(f"# torch {torch.__version__}: {len(total.backend_ops)} backend ops "
          "(op  dtypes seen)")
    for name in total.backend_ops:
        print(f"{name:40s} {_dtypes(total.reached[name])}")
    print("# reached instead of the math path when _fused_sdp_choice answers 'overrideable':")
    for name in SDPA_OVERRIDEABLE:
        print(f"#   {name}")
    if args.by_run:
        for key, r in runs.items():
            print(f"\n# {key}: {len(r.backend_ops)} backend ops")
            print("  " + " ".join(r.backend_ops))
    if args.all:
        print("\n# provided by the generated glue:")
        print("  " + " ".join(total.glue_ops))
        print("# composite (decomposed before reaching a backend kernel):")
        print("  " + " ".join(sorted(total.composite)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
