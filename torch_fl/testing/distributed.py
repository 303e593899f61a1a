"""Running the plain torchrun script (distributed_script.py) in tests: flsdk's own
(tests/torch_fl/test_distributed_torchrun.py) and every backend's generated
tests/generated/test_<name>_distributed.py. Each rank checks its own results;
here we check that every rank said so, and that nothing hangs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "distributed_script.py"
# What a default run covers; "kill" runs on its own (it ends the job).
SCENARIOS = ("collectives", "ddp", "fsdp2", "tp", "pipeline")


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of asking, for a rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(backend: str | None = None, **extra: str) -> dict:
    """The test's environment for the ranks: one thread each (2-4 processes share a
    small machine), a 60 s group timeout, no slow-device setting unless asked.
    `backend` (a device name): the ranks' `import torch` loads that backend, also
    where the test itself runs with the autoload off (several backends installed)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", DIST_TIMEOUT="60")
    for key in [k for k in env if k.endswith("_SLOW_DEVICE")]:
        del env[key]
    if backend:
        env["TORCH_FL_BACKEND"] = backend
        env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env.update(extra)
    return env


def torchrun(scenarios, *, nproc: int = 2, env: dict | None = None, timeout: float = 300,
             extra_args=(), cwd: str | None = None) -> str:
    """Runs the script under torchrun with `scenarios`; returns the output after
    checking that every rank finished every scenario. A hang kills it and fails."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               f"--master-port={free_port()}", *extra_args, str(SCRIPT), *scenarios]
    try:
        proc = subprocess.run(command, env=env or environment(), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"torchrun hung for {timeout} s:\n{out[-4000:]}") from None
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    check_all_ok(out, scenarios, nproc)
    return out


def check_all_ok(out: str, scenarios, ranks: int) -> None:
    for r in range(ranks):
        for s in scenarios:
            assert f"rank {r}: {s} ok" in out, f"rank {r} did not finish {s}:\n{out[-4000:]}"


def killed_rank(world: int = 3, *, env: dict | None = None, timeout: float = 120,
                cwd: str | None = None, scenario: str = "kill") -> list[str]:
    """The "kill" scenario without torchrun (whose agent would kill the survivors
    itself): the last rank exits after a first collective, the others must raise
    naming the collective and the group within the timeout. Returns the outputs.
    scenario="stall": the last rank stays alive but stops calling collectives for
    longer than the group's timeout."""
    port = free_port()
    base = env or environment(DIST_TIMEOUT="15")
    procs = []
    for r in range(world):
        rank_env = dict(base, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), scenario], env=rank_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      cwd=cwd))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        logs = [p.communicate()[0][-2000:] for p in procs]
        raise AssertionError("a survivor hung:\n" + "\n".join(logs)) from None
    assert procs[-1].returncode == 3, outs[-1][-2000:]
    for r in range(world - 1):
        assert procs[r].returncode == 0 and f"rank {r}: {scenario} ok" in outs[r], outs[r][-3000:]
    return outs
