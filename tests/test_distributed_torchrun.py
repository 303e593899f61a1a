"""Plain torchrun scripts on an flsdk device (issue 35): tests/torchrun_scripts/
plain_distributed.py never imports torch_fl; `import torch` loads the backend,
whose C++ c10d process group registered itself. Each rank checks its results
against the same computation on the CPU; here we check every rank said so.

Default suite: acme, 2 ranks, every scenario (collectives in every dtype, DDP,
FSDP2 with a distributed checkpoint, DTensor/TP/sequence parallel, a pipeline
schedule); again under the slow-device option through init_process_group(
device_id=...); the staged engine (gloo through pinned memory) on acme; a rank
killed mid-job; a fresh scaffold (no collective library, no ipc) with a plain
script. --run-slow adds 4 ranks with a 2-D mesh, the other backend-string form,
and two torchrun agents behaving as two hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ranks import free_port

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "torchrun_scripts" / "plain_distributed.py"
ROOT = HERE.parent
ALL = ["collectives", "ddp", "fsdp2", "tp", "pipeline"]

pytestmark = pytest.mark.usefixtures("acme_backend")


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", DIST_TIMEOUT="60")
    env.pop("ACME_SLOW_DEVICE", None)
    env.update(extra)
    return env


def _torchrun(scenarios: list[str], *, nproc: int = 2, env: dict, timeout: float = 240,
              extra_args: tuple[str, ...] = ()) -> str:
    """Runs the script under torchrun; returns its output. A hang kills it and fails."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               f"--master-port={free_port()}", *extra_args, str(SCRIPT), *scenarios]
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=str(ROOT))
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"torchrun hung for {timeout} s:\n{out[-4000:]}") from None
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return out


def _all_ok(out: str, scenarios: list[str], ranks: int) -> None:
    for r in range(ranks):
        for s in scenarios:
            assert f"rank {r}: {s} ok" in out, f"rank {r} did not finish {s}:\n{out[-4000:]}"


def test_plain_torchrun_script_every_scenario():
    """init_process_group() with no argument: the device's backend, DDP/FSDP2/TP/PP."""
    out = _torchrun(ALL, env=_env())
    _all_ok(out, ALL, 2)
    assert "backend acmeccl" in out and "get_backend=acmeccl" in out
    # DDP found the device's timer (ddp_timer.cpp) instead of warning it has none
    assert "Time stats are currently only collected" not in out


def test_plain_torchrun_script_under_the_slow_device_with_device_id():
    """Every queued piece of device work held back 200 us: a collective that reads
    or writes without the stream order the Work promises gives a wrong answer."""
    scenarios = ["collectives", "ddp", "fsdp2"]
    out = _torchrun(scenarios, env=_env(ACME_SLOW_DEVICE="200", DIST_INIT="device_id"))
    _all_ok(out, scenarios, 2)


def test_staged_engine_on_acme():
    """The gloo path (what a backend without a collective library gets), chosen on
    acme through torch_fl.set_comm_backend("gloo"), with the CPU backend string."""
    scenarios = ["collectives", "ddp", "fsdp2"]
    out = _torchrun(scenarios, env=_env(DIST_STAGED="1", DIST_INIT="cpu:gloo,acme:gloo_acme"))
    _all_ok(out, scenarios, 2)
    assert "backend gloo_acme native=False" in out


def test_a_killed_rank_fails_the_others_within_the_timeout():
    """The last rank exits after a first collective; the survivors' next
    collectives raise (naming the collective and the group) instead of hanging.
    Run without torchrun, whose agent would kill the survivors itself."""
    port = free_port()
    world = 3
    procs = []
    for r in range(world):
        env = _env(DIST_TIMEOUT="15", RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), "kill"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      cwd=str(ROOT)))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=120)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise AssertionError("a survivor hung:\n" + "\n".join(p.communicate()[0][-2000:] for p in procs))
    assert procs[-1].returncode == 3, outs[-1][-2000:]
    for r in range(world - 1):
        assert procs[r].returncode == 0 and f"rank {r}: kill ok" in outs[r], outs[r][-3000:]


def test_plain_torchrun_script_on_a_fresh_scaffold(zeta_first_build, tmp_path):
    """A backend on its first day (no collective library: the staged engine; no ipc)
    runs the same plain script."""
    _, site = zeta_first_build
    env = _env(PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
               TORCH_FL_BACKEND="zeta", DIST_TMP=str(tmp_path))
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    scenarios = ["collectives", "ddp", "fsdp2", "tp"]
    out = _torchrun(scenarios, env=env)
    _all_ok(out, scenarios, 2)
    assert "zeta:0 backend zetaccl native=False" in out, out[-3000:]


@pytest.mark.slow
def test_four_ranks_with_a_two_dimensional_mesh():
    scenarios = ["collectives", "ddp", "fsdp2", "tp"]
    out = _torchrun(scenarios, nproc=4, env=_env(), timeout=400)
    _all_ok(out, scenarios, 4)


@pytest.mark.slow
def test_backend_name_forms():
    for how in ("acmeccl", "cpu:gloo,acme:acmeccl"):
        out = _torchrun(["collectives"], env=_env(DIST_INIT=how))
        _all_ok(out, ["collectives"], 2)


@pytest.mark.slow
def test_two_torchrun_agents_as_two_hosts():
    """Two agents on this machine (--nnodes 2), each naming another simulated host
    (ACME_HOST_ID): the collective library's network transport between them."""
    port = free_port()
    procs = []
    for node in range(2):
        env = _env(ACME_HOST_ID=f"host{node}")
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                   f"--node-rank={node}", "--nproc-per-node=2", f"--master-addr=127.0.0.1",
                   f"--master-port={port}", str(SCRIPT), "collectives", "ddp"]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, cwd=str(ROOT)))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=400)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise AssertionError("two-agent run hung")
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-5000:]
    _all_ok("\n".join(outs), ["collectives", "ddp"], 4)
