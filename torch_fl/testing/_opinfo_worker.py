"""Worker process of the OpInfo runner (`python -m torch_fl.testing._opinfo_worker`).

It exists so that a kernel that crashes the process (a signal, an abort) ends
only this worker: the runner sees which op was running, marks it as a crash and
starts a new worker for the remaining ops.

Protocol, one JSON object per line:
  stdin, first line:  {"device": "acme:0", "op_db": null | "file.py:NAME",
                       "seed": 0, "max_samples": null}
  stdin, then:        {"op": "add", "dtype": "float32", "phases": ["forward", "grad"]}
  stdout:             {"event": "ready"}                          once, after setup
                      {"event": "begin", "op", "dtype", "phase"}  before each phase
                      {"event": "sample", "index", "summary"}     before each device run
                      {"event": "end", "op", "dtype", "phase", "result": {...}, "seconds"}
                      {"event": "done", "op", "dtype"}            after the last phase
stdin closing ends the worker. Anything else the op prints goes to stderr, so
stdout carries only the protocol.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings


def _emit(stream, **event) -> None:
    stream.write(json.dumps(event) + "\n")
    stream.flush()


def main() -> int:
    # Keep stdout for the protocol: ops that print (or warn) write to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")

    config = json.loads(sys.stdin.readline())
    import torch

    from torch_fl.testing.opinfo_check import check_opinfo
    from torch_fl.testing.opinfo_db import load_op_db

    ops = {oid: op for oid, op in load_op_db(config.get("op_db"))}
    device = torch.device(config["device"])
    if device.type != "cpu":
        import torch_fl

        torch_fl.init_device(device)
        torch_fl.set_fallback_warn(False, device)
    seed = int(config.get("seed", 0))
    max_samples = config.get("max_samples")
    _emit(proto, event="ready")
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        oid, dtype_name = job["op"], job["dtype"]
        dtype = getattr(torch, dtype_name)
        for phase in job["phases"]:
            _emit(proto, event="begin", op=oid, dtype=dtype_name, phase=phase)
            start = time.perf_counter()
            def on_sample(index, sample, phase=phase):
                _emit(proto, event="sample", index=index, summary=sample.summary()[:300])

            try:
                result = check_opinfo(ops[oid], device, dtype, phase, seed=seed,
                                      max_samples=max_samples, on_sample=on_sample)
            except Exception as exc:  # a bug of the runner itself, not of the op
                result = {"status": "error", "native": None, "fallback_ops": [],
                          "detail": f"runner: {type(exc).__name__}: {exc}", "samples": {}}
            _emit(proto, event="end", op=oid, dtype=dtype_name, phase=phase, result=result,
                  seconds=round(time.perf_counter() - start, 4))
        _emit(proto, event="done", op=oid, dtype=dtype_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
