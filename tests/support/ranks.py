"""Helpers of the tests that run torch.distributed in child processes, one per rank
(test_torch_fl_distributed, test_torch_fl_article)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of asking, for a rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(commands: list[list[str]], *, env: dict, timeout: float, label: str,
              cwd: str | Path | None = None) -> list[str]:
    """Start one process per rank (`commands[r]`), all at once since they rendezvous,
    and return their outputs (stdout and stderr together). A rank that exits non-zero
    fails with its output; a hang kills every rank and fails with their logs (a rank
    left behind would hold the port and the next test's rendezvous). A rank that is a
    test module run as a script imports these helpers too (tests/support on its path)."""
    env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent),
                                                               env.get("PYTHONPATH")])))
    procs = [subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for command in commands]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        logs = [p.communicate()[0] for p in procs]
        raise AssertionError(f"{label}: hung for more than {timeout}s\n" + "\n".join(
            f"--- rank {r} ---\n{log[-3000:]}" for r, log in enumerate(logs))) from None
    for r, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"{label}: rank {r} exited {p.returncode}\n{out[-4000:]}"
    return outputs
