"""Device tensors across processes with torch.multiprocessing, as CUDA tensors
(issue 35 item 6): as process arguments and through Queues, both ways, the same
memory on both sides (the child writes, the parent reads), the producer keeping
what it sent alive until the consumer drops it; within one process the original
storage comes back. Spawned children, a timeout on every wait: a hang fails.
"""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing as mp

pytestmark = pytest.mark.usefixtures("acme_backend")

TIMEOUT = 60


def _needs_ipc():
    import torch_fl_acme._C as native

    if not native.has_ipc:
        pytest.fail("acme's runtime lists no ipc primitive (device.yaml runtime_primitives)")


# ------------------------------------------------------------ child processes

def _child_writes_argument(tensor, done):
    tensor.add_(10)          # in place, in the parent's memory
    tensor[0] = -1.0
    torch.accelerator.synchronize()
    done.put(tensor.device.type)


def _child_sends(queue, release):
    t = torch.arange(6.0, device="acme:1").reshape(2, 3) * 2
    view = t[:, 1:]          # non-contiguous, with a storage offset
    p = torch.nn.Parameter(torch.ones(3, device="acme:1"))
    queue.put((t, view, p))
    # The producer keeps its tensors alive until the consumer says it is done with them.
    assert release.get(timeout=TIMEOUT) == "done"


def _child_round_trip(inbox, outbox):
    t = inbox.get(timeout=TIMEOUT)
    t.mul_(3)
    torch.accelerator.synchronize()
    outbox.put(t)            # back to its producer: the parent's own storage again
    assert inbox.get(timeout=TIMEOUT) == "done"


def _spawn(target, *args):
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=target, args=args)
    p.start()
    return p


def _join(p):
    p.join(TIMEOUT)
    if p.is_alive():
        p.kill()
        pytest.fail(f"child {p.name} hung")
    assert p.exitcode == 0, f"child exited {p.exitcode}"


# ---------------------------------------------------------------------- tests

def test_a_child_writes_a_tensor_passed_as_argument():
    _needs_ipc()
    ctx = mp.get_context("spawn")
    t = torch.zeros(5, device="acme:0")
    done = ctx.Queue()
    p = _spawn(_child_writes_argument, t, done)
    assert done.get(timeout=TIMEOUT) == "acme"
    _join(p)
    assert t.cpu().tolist() == [-1.0, 10.0, 10.0, 10.0, 10.0]


def test_a_child_sends_tensors_through_a_queue():
    _needs_ipc()
    ctx = mp.get_context("spawn")
    queue, release = ctx.Queue(), ctx.Queue()
    p = _spawn(_child_sends, queue, release)
    t, view, param = queue.get(timeout=TIMEOUT)
    assert t.device == torch.device("acme:1") and view.device == torch.device("acme:1")
    assert t.cpu().tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    assert view.cpu().tolist() == [[2.0, 4.0], [8.0, 10.0]] and view.storage_offset() == 1
    assert isinstance(param, torch.nn.Parameter) and param.requires_grad
    # the view and the tensor share the producer's memory here too
    view.zero_()
    assert t.cpu().tolist() == [[0.0, 0.0, 0.0], [6.0, 0.0, 0.0]]
    del t, view, param
    release.put("done")
    _join(p)


def test_tensors_go_back_to_their_producer_as_its_own_storage():
    _needs_ipc()
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = _spawn(_child_round_trip, inbox, outbox)
    t = torch.arange(4.0, device="acme:0")
    inbox.put(t)
    back = outbox.get(timeout=TIMEOUT)
    assert back.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    assert t.cpu().tolist() == [0.0, 3.0, 6.0, 9.0]
    inbox.put("done")
    _join(p)
    import torch_fl_acme._C as native

    del back
    assert torch.acme.ipc_collect() >= 0 and native.ipc_collect() >= 0


def test_pickling_in_one_process_gives_the_same_storage():
    _needs_ipc()
    t = torch.arange(3.0, device="acme:0")
    copy = pickle.loads(ForkingPickler.dumps(t))
    assert copy.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    copy.add_(1)
    assert t.cpu().tolist() == [1.0, 2.0, 3.0]


def test_non_leaf_tensors_that_require_grad_are_refused():
    _needs_ipc()
    x = torch.ones(2, device="acme:0", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(x)


def test_cpu_tensors_still_go_through_torch():
    t = torch.arange(3.0)
    copy = pickle.loads(ForkingPickler.dumps(t))
    assert torch.equal(copy, t)
