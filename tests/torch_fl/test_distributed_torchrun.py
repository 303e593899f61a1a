"""Plain torchrun scripts on an flsdk device (issue 35): torch_fl/testing/
distributed_script.py never imports torch_fl; `import torch` loads the backend,
whose C++ c10d process group registered itself. Each rank checks its results
against the same computation on the CPU (torch_fl.testing.distributed checks every
rank said so).

Default suite: acme, 2 ranks, every scenario (collectives in every dtype, DDP,
FSDP2 with a distributed checkpoint, DTensor/TP/sequence parallel, a pipeline
schedule); again under the slow-device option through init_process_group(
device_id=...); the staged engine (gloo through pinned memory) on acme; a fresh
scaffold (no collective library, no ipc). acme's generated
tests/generated/test_acme_distributed.py runs the script again and kills a rank. --run-slow adds
4 ranks with a 2-D mesh, the other backend-string forms, and two torchrun agents
behaving as two hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from torch_fl.testing.distributed import SCENARIOS, SCRIPT, check_all_ok, environment, free_port, killed_rank, torchrun

pytestmark = pytest.mark.usefixtures("acme_backend")


def test_plain_torchrun_script_every_scenario():
    """init_process_group() with no argument: the device's backend, DDP/FSDP2/TP/PP."""
    out = torchrun(SCENARIOS)
    assert "backend acmeccl" in out and "get_backend=acmeccl" in out
    # DDP found the device's timer (ddp_timer.cpp) instead of warning it has none
    assert "Time stats are currently only collected" not in out


def test_plain_torchrun_script_under_the_slow_device_with_device_id():
    """Every queued piece of device work held back 200 us: a collective that reads
    or writes without the stream order the Work promises gives a wrong answer."""
    torchrun(["collectives", "ddp", "fsdp2"],
             env=environment(ACME_SLOW_DEVICE="200", DIST_INIT="device_id"))


def test_staged_engine_on_acme():
    """The gloo path (what a backend without a collective library gets), chosen on
    acme through torch_fl.set_comm_backend("gloo"), with the CPU backend string."""
    out = torchrun(["collectives", "ddp", "fsdp2"],
                   env=environment(DIST_STAGED="1", DIST_INIT="cpu:gloo,acme:gloo_acme"))
    assert "backend gloo_acme native=False" in out


def test_plain_torchrun_script_on_a_fresh_scaffold(zeta_first_build, tmp_path):
    """A backend on its first day (no collective library: the staged engine; no ipc)
    runs the same plain script."""
    _, site = zeta_first_build
    env = environment("zeta", DIST_TMP=str(tmp_path),
                      PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    out = torchrun(["collectives", "ddp", "fsdp2", "tp"], env=env)
    assert "zeta:0 backend zetaccl native=False" in out, out[-3000:]


def test_a_stalled_rank_times_the_others_out():
    """A rank alive but not joining: after the group's timeout (3 s here) the
    watchdog fails the collective on the others, naming it, the group and the
    time, and aborts the communicator (its queued work ends)."""
    outs = killed_rank(2, env=environment(DIST_TIMEOUT="3"), scenario="stall")
    assert "did not finish within 3000 ms" in outs[0], outs[0][-2000:]


def test_a_script_that_never_sets_the_device_gets_an_error_not_a_hang():
    """Tensors on acme:<local rank> but the current device left at 0: the object
    collectives run on acme:0. Rank 1 used to wait in all_gather_object for a
    communicator no other rank made (until the store's timeout); it must raise at
    once, naming both devices and the fix."""
    out = torchrun(["wrong_device"], timeout=120)
    assert "one process group drives one device per rank" in out, out[-3000:]


def test_a_backend_without_ipc_refuses_to_share_a_tensor(zeta_first_build):
    """A fresh scaffold's runtime lists no ipc: pickling a tensor for another process
    fails naming the device and what is missing, instead of hanging a Queue."""
    _, site = zeta_first_build
    code = ("import torch, torch_fl_zeta; torch_fl_zeta.load()\n"
            "from multiprocessing.reduction import ForkingPickler\n"
            "try:\n    ForkingPickler.dumps(torch.ones(2, device='zeta'))\n"
            "except RuntimeError as e:\n    print('REFUSED', e)\n")
    env = environment("zeta", PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "REFUSED" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "does not share device memory between processes" in proc.stdout
    assert "runtime_primitives does not list ipc" in proc.stdout


@pytest.mark.slow
def test_four_ranks_with_a_two_dimensional_mesh():
    torchrun(["collectives", "ddp", "fsdp2", "tp"], nproc=4, timeout=500)


@pytest.mark.slow
def test_functional_collectives_under_torch_compile():
    """Default torch.compile (Inductor, caches off so it compiles) of a function with
    all_reduce, all_gather and reduce_scatter: the same numbers as eager."""
    torchrun(["compile"], env=environment(TORCHINDUCTOR_FORCE_DISABLE_CACHES="1"), timeout=600)


@pytest.mark.slow
def test_backend_name_forms():
    for how in ("acmeccl", "cpu:gloo,acme:acmeccl"):
        torchrun(["collectives"], env=environment(DIST_INIT=how))


@pytest.mark.slow
def test_two_torchrun_agents_as_two_hosts():
    """Two agents on this machine (--nnodes 2), each naming another simulated host
    (ACME_HOST_ID): the collective library's network transport between them."""
    port = free_port()
    procs = []
    for node in range(2):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                   f"--node-rank={node}", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                   f"--master-port={port}", str(SCRIPT), "collectives", "ddp"]
        procs.append(subprocess.Popen(command, env=environment(ACME_HOST_ID=f"host{node}"),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=500)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise AssertionError("two-agent run hung") from None
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-5000:]
    check_all_ok("\n".join(outs), ["collectives", "ddp"], 4)
