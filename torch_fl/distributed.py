"""torch_fl.distributed: a torch.distributed backend for any flsdk device.

An flsdk device names its communication backend in its descriptor
(``comm_backend: acmeccl``). This module registers that name with c10d so that
``init_process_group("acmeccl")``, ``dist.all_reduce`` on device tensors and
``DistributedDataParallel`` work on the device.

How it works, and why:

* A simulated (or early) chip has no interconnect, so collectives are *staged*:
  device tensors are copied to host, the collective runs over a gloo group built
  on the same store (under its own prefix, so it never collides with keys other
  groups write), and the results are copied back into the original device
  tensors in place, as c10d requires (DDP's reducer reads its bucket tensor after
  the work completes).
* torch 2.13 lets Python override c10d collectives only through a
  ``torch.distributed.ProcessGroup`` subclass (the ``PyProcessGroup`` trampoline);
  ``torch._C._distributed_c10d.Backend`` has no trampoline, so Python overrides of
  a Backend subclass would never be called from C++ (DDP). c10d accepts a
  ProcessGroup returned by a backend creator and uses it as the whole group.
  The group therefore serves *every* device: CPU tensors go straight to gloo,
  so object collectives and ``"cpu:gloo"`` style use keep working.
* Collectives run synchronously: the returned Work wraps an already completed
  future whose value is the (device) tensor list, the shape DDP's reducer reads.
  Staging through host memory serialises anyway; being synchronous keeps device
  tensors from being touched on gloo's worker threads.
"""

from __future__ import annotations

import datetime
import threading
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    PrefixStore,
    ReduceOp,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
    _create_work_from_future,
)

__all__ = [
    "StagedProcessGroup",
    "comm_backend_for",
    "init_distributed",
    "register_comm_backend",
    "registered_comm_backends",
    "set_comm_backend",
]

_GLOO_PREFIX = "torch_fl_staged_gloo/"

_lock = threading.Lock()
# comm backend name -> device type it was registered for
_registered: dict[str, str] = {}
# device type -> comm backend name chosen with set_comm_backend (overrides descriptor)
_chosen: dict[str, str] = {}


# --------------------------------------------------------------------------- lookup

def comm_backend_for(device: str | torch.device) -> str:
    """Name of the communication backend used for `device` ("acme" -> "acmeccl").

    The name chosen with `set_comm_backend` wins; otherwise the device descriptor's
    `comm_backend`. CPU uses plain gloo.
    """
    device_type = torch.device(device).type
    if device_type in _chosen:
        return _chosen[device_type]
    if device_type == "cpu":
        return "gloo"
    from . import _backends  # finds and loads the device's flsdk backend

    backend = _backends.backend(device_type)
    name = (getattr(backend, "DESCRIPTOR", None) or {}).get("comm_backend")
    if not name:
        raise RuntimeError(
            f"the device descriptor of '{device_type}' names no comm_backend; add "
            f"`comm_backend: <name>` to its device.yaml or call "
            f"torch_fl.distributed.set_comm_backend(name, '{device_type}')"
        )
    return name


# ---------------------------------------------------------------------- staging

def _reduce_kind(op: Any) -> ReduceOp.RedOpType:
    if isinstance(op, ReduceOp.RedOpType):
        return op
    if isinstance(op, ReduceOp):
        for kind in ReduceOp.RedOpType.__members__.values():
            if op == kind:
                return kind
    raise ValueError(f"unsupported reduce op {op!r}")


class _Staged:
    """Host copies of some tensors; `finish` writes them back where needed.

    CPU tensors that are already contiguous are used directly (no copy);
    everything else (device tensors, non-contiguous views) goes through a
    contiguous host copy, because gloo needs contiguous CPU memory.
    """

    def __init__(self, tensors: Sequence[torch.Tensor], load: bool = True):
        self.originals = list(tensors)
        self.host: list[torch.Tensor] = []
        self.devices: set[torch.device] = set()
        for t in self.originals:
            if t.device.type == "cpu" and t.is_contiguous():
                self.host.append(t)
            elif load:
                self.host.append(t.detach().to("cpu").contiguous())
            else:  # output-only buffer: contents are overwritten, skip the read
                self.host.append(torch.empty(t.shape, dtype=t.dtype))
            if t.device.type != "cpu":
                self.devices.add(t.device)

    def finish(self) -> None:
        with torch.no_grad():
            for t, h in zip(self.originals, self.host):
                if h is not t:
                    t.copy_(h)
        # The copy-back must have landed before the work reports completion: the
        # caller may read the device tensor right after wait().
        for device in self.devices:
            module = getattr(torch, device.type, None)
            sync = getattr(module, "synchronize", None)
            if callable(sync):
                sync(device)


def _done(value: list[torch.Tensor] | None) -> dist.Work:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(value if value is not None else [])
    return _create_work_from_future(fut)


def _copy_timeout(src: Any, dst: Any) -> Any:
    timeout = getattr(src, "timeout", None)
    if timeout is not None:
        try:
            dst.timeout = timeout
        except (TypeError, AttributeError):
            pass
    return dst


class StagedProcessGroup(dist.ProcessGroup):
    """c10d process group for a device without interconnect: host staging + gloo.

    Created by the creator that `register_comm_backend` installs; not meant to be
    constructed by users directly (use `init_distributed` or
    ``dist.init_process_group(<comm_backend>)``).
    """

    def __init__(self, store: dist.Store, rank: int, size: int,
                 timeout: datetime.timedelta, backend_name: str, device_type: str):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._backend_name = backend_name
        self._device_type = device_type
        self._timeout = timeout
        self._gloo = dist.ProcessGroupGloo(PrefixStore(_GLOO_PREFIX, store), rank, size, timeout)

    # -- identity ------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return self._backend_name

    def name(self) -> str:
        return self._backend_name

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return (f"StagedProcessGroup({self._backend_name}, device={self._device_type}, "
                f"rank={self._rank}, size={self._size})")

    # -- helpers -------------------------------------------------------------
    def _allreduce_host(self, host: list[torch.Tensor], op: Any, timeout: Any = None) -> None:
        kind = _reduce_kind(op)
        if kind == ReduceOp.RedOpType.PREMUL_SUM:
            raise ValueError(f"{self._backend_name}: ReduceOp.PREMUL_SUM is not supported")
        gloo_opts = AllreduceOptions()
        # gloo has no AVG: sum, then divide (integers divide with floor, as a mean of
        # integers must stay an integer tensor).
        gloo_opts.reduceOp = ReduceOp.SUM if kind == ReduceOp.RedOpType.AVG else ReduceOp(kind)
        if timeout is not None:
            gloo_opts.timeout = timeout
        self._gloo.allreduce(host, gloo_opts).wait()
        if kind == ReduceOp.RedOpType.AVG:
            for h in host:
                if h.is_floating_point() or h.is_complex():
                    h.div_(self._size)
                else:
                    h.copy_(torch.div(h, self._size, rounding_mode="floor"))

    # -- collectives ---------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        op = ReduceOp.SUM
        if isinstance(opts, (ReduceOp, ReduceOp.RedOpType)):
            op, opts = opts, None
        elif opts is not None:
            op = opts.reduceOp
        staged = _Staged(tensors)
        self._allreduce_host(staged.host, op, getattr(opts, "timeout", None))
        staged.finish()
        return _done(list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        staged = _Staged(tensors)
        # One gloo call per tensor: the same order on every rank, so it matches.
        for h in staged.host:
            self._allreduce_host([h], op, getattr(opts, "timeout", None))
        staged.finish()
        return _done(list(tensors))

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            root, tensors = (opts if isinstance(opts, int) else 0), [tensors]
            opts = BroadcastOptions()
            opts.rootRank = root
        opts = opts if opts is not None else BroadcastOptions()
        staged = _Staged(tensors, load=True)
        gloo_opts = _copy_timeout(opts, BroadcastOptions())
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.rootTensor = opts.rootTensor
        self._gloo.broadcast(staged.host, gloo_opts).wait()
        staged.finish()
        return _done(list(tensors))

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else ReduceOptions()
        kind = _reduce_kind(opts.reduceOp)
        if kind == ReduceOp.RedOpType.AVG:
            # gloo has no AVG; an allreduce gives every rank (including root) the mean
            staged = _Staged(tensors)
            self._allreduce_host(staged.host, kind, opts.timeout)
            if self._rank == opts.rootRank:
                staged.finish()
            return _done(list(tensors))
        staged = _Staged(tensors)
        gloo_opts = _copy_timeout(opts, ReduceOptions())
        gloo_opts.reduceOp = opts.reduceOp
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.rootTensor = opts.rootTensor
        self._gloo.reduce(staged.host, gloo_opts).wait()
        if self._rank == opts.rootRank:
            staged.finish()
        return _done(list(tensors))

    def allgather(self, output_lists, inputs, opts=None):
        staged_in = _Staged(inputs)
        staged_out = [_Staged(outs, load=False) for outs in output_lists]
        gloo_opts = _copy_timeout(opts, AllgatherOptions())
        self._gloo.allgather([s.host for s in staged_out], staged_in.host, gloo_opts).wait()
        for s in staged_out:
            s.finish()
        return _done([t for outs in output_lists for t in outs])

    def _allgather_base(self, output, input, opts=None):
        staged_in = _Staged([input])
        staged_out = _Staged([output], load=False)
        gloo_opts = _copy_timeout(opts, AllgatherOptions())
        self._gloo._allgather_base(staged_out.host[0], staged_in.host[0], gloo_opts).wait()
        staged_out.finish()
        return _done([output])

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        for outs, inp in zip(output_lists, inputs):
            self.allgather([outs], [inp], opts)
        return _done([t for outs in output_lists for t in outs])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        for out, inp in zip(outputs, inputs):
            self._allgather_base(out, inp, opts)
        return _done(list(outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _reduce_scatter_host(self, out_host: torch.Tensor, in_chunks: list[torch.Tensor],
                             op: Any, timeout: Any) -> None:
        # Reduce the concatenated input over all ranks, then keep this rank's chunk.
        # Gloo's own reduce_scatter has no AVG and fewer dtypes; staged data is
        # host-side anyway, so one allreduce is the simplest correct plan.
        flat = torch.cat([c.reshape(-1) for c in in_chunks])
        self._allreduce_host([flat], op, timeout)
        offset = sum(c.numel() for c in in_chunks[: self._rank])
        mine = in_chunks[self._rank].numel()
        out_host.copy_(flat[offset: offset + mine].view(out_host.shape))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else ReduceScatterOptions()
        for out, chunks in zip(outputs, input_lists):
            if len(chunks) != self._size:
                raise ValueError(f"reduce_scatter needs {self._size} input tensors, got {len(chunks)}")
            staged_out = _Staged([out], load=False)
            host_chunks = _Staged(chunks).host
            self._reduce_scatter_host(staged_out.host[0], host_chunks, opts.reduceOp, opts.timeout)
            staged_out.finish()
        return _done(list(outputs))

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts if opts is not None else ReduceScatterOptions()
        if input.numel() != output.numel() * self._size:
            raise ValueError(
                f"reduce_scatter_tensor: input has {input.numel()} elements, expected "
                f"{output.numel()} x world size {self._size}")
        host_in = _Staged([input]).host[0]
        staged_out = _Staged([output], load=False)
        chunks = list(host_in.reshape(self._size, -1).unbind(0))
        self._reduce_scatter_host(staged_out.host[0], chunks, opts.reduceOp, opts.timeout)
        staged_out.finish()
        return _done([output])

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        for out, inp in zip(outputs, inputs):
            self._reduce_scatter_base(out, inp, opts)
        return _done(list(outputs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def gather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else GatherOptions()
        staged_in = _Staged(inputs)
        staged_out = [_Staged(outs, load=False) for outs in output_lists]
        gloo_opts = _copy_timeout(opts, GatherOptions())
        gloo_opts.rootRank = opts.rootRank
        self._gloo.gather([s.host for s in staged_out], staged_in.host, gloo_opts).wait()
        for s in staged_out:
            s.finish()
        return _done([t for outs in output_lists for t in outs])

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else ScatterOptions()
        staged_out = _Staged(outputs, load=False)
        staged_in = [_Staged(ins) for ins in input_lists]
        gloo_opts = _copy_timeout(opts, ScatterOptions())
        gloo_opts.rootRank = opts.rootRank
        self._gloo.scatter(staged_out.host, [s.host for s in staged_in], gloo_opts).wait()
        staged_out.finish()
        return _done(list(outputs))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        staged_out = _Staged([output], load=False)
        host_in = _Staged([input]).host[0]
        gloo_opts = _copy_timeout(opts, AllToAllOptions())
        self._gloo.alltoall_base(staged_out.host[0], host_in, list(output_split_sizes or []),
                                 list(input_split_sizes or []), gloo_opts).wait()
        staged_out.finish()
        return _done([output])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        # Gloo has no list alltoall: pack into one flat buffer per side and use the
        # split-size form.
        host_in = [_Staged([t]).host[0].reshape(-1) for t in inputs]
        flat_in = torch.cat(host_in)
        out_sizes = [t.numel() for t in outputs]
        flat_out = torch.empty(sum(out_sizes), dtype=flat_in.dtype)
        gloo_opts = _copy_timeout(opts, AllToAllOptions())
        self._gloo.alltoall_base(flat_out, flat_in, out_sizes, [h.numel() for h in host_in],
                                 gloo_opts).wait()
        staged = _Staged(outputs, load=False)
        for h, piece in zip(staged.host, flat_out.split(out_sizes)):
            h.copy_(piece.view(h.shape))
        staged.finish()
        return _done(list(outputs))

    def send(self, tensors, dst, tag=0):
        staged = _Staged(tensors)
        return _completed_after(self._gloo.send(staged.host, dst, tag), None, list(tensors))

    def recv(self, tensors, src, tag=0):
        staged = _Staged(tensors, load=False)
        return _completed_after(self._gloo.recv(staged.host, src, tag), staged, list(tensors))

    def recv_anysource(self, tensors, tag=0):
        staged = _Staged(tensors, load=False)
        return _completed_after(self._gloo.recv_anysource(staged.host, tag), staged, list(tensors))

    def barrier(self, opts=None):
        # The device in BarrierOptions (an accelerator) means nothing to gloo.
        gloo_opts = _copy_timeout(opts, BarrierOptions())
        self._gloo.barrier(gloo_opts).wait()
        return _done(None)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        args = {} if timeout is None else {"timeout": timeout}
        return self._gloo.monitored_barrier(wait_all_ranks=wait_all_ranks, **args)

    def set_timeout(self, timeout):
        self._timeout = timeout
        self._gloo.set_timeout(timeout)

    def shutdown(self):
        self._gloo.shutdown()

    def abort(self):
        self._gloo.abort()


def _completed_after(work: dist.Work, staged: _Staged | None, value: list[torch.Tensor]) -> dist.Work:
    work.wait()
    if staged is not None:
        staged.finish()
    return _done(value)


# ------------------------------------------------------------------ registration

def _creator(backend_name: str, device_type: str):
    def create(backend_opts, _pg_options=None):
        return StagedProcessGroup(backend_opts.store, backend_opts.group_rank,
                                  backend_opts.group_size, backend_opts.timeout,
                                  backend_name, device_type)
    create.__name__ = f"create_{backend_name}"
    return create


def register_comm_backend(name: str, device_type: str) -> str:
    """Register `name` with c10d as the staged backend of `device_type`. Idempotent.

    After this, ``dist.init_process_group(name, ...)`` and
    ``"cpu:gloo,<device_type>:<name>"`` both work. Returns `name`.
    """
    name = name.lower()
    with _lock:
        owner = _registered.get(name)
        if owner is not None:
            if owner != device_type:
                raise ValueError(f"comm backend '{name}' is already registered for device "
                                 f"'{owner}', not '{device_type}'")
            return name
        if name in dist.Backend.backend_list or name.upper() in dist.Backend._plugins:
            raise ValueError(f"'{name}' is already a torch.distributed backend not made by "
                             f"torch_fl; choose 'gloo' (staged through host memory), the "
                             f"device's own comm_backend, or another name")
        # devices must be a list: a str is taken character by character by some
        # torch versions' capability checks.
        dist.Backend.register_backend(name, _creator(name, device_type), extended_api=True,
                                      devices=[device_type])
        _registered[name] = device_type
    return name


def _staged_gloo_name(device_type: str) -> str:
    """c10d name of "gloo for this device": 'gloo' itself is torch's CPU backend."""
    return f"gloo_{device_type}"


def _c10d_name(name: str, device_type: str) -> str:
    """The c10d backend to create for a chosen comm backend name."""
    return _staged_gloo_name(device_type) if name == "gloo" else name


def registered_comm_backends() -> dict[str, str]:
    """{comm backend name: device type} registered by torch_fl in this process."""
    return dict(_registered)


def set_comm_backend(name: str, device: str | torch.device | None = None) -> str:
    """Use `name` as the comm backend of `device` (default: the current accelerator).

    * "gloo" (the Torch-FL article's "Gloo for CPU or general use"): the device's
      tensors are staged through host memory into torch's own gloo. Registered
      with c10d as "gloo_<device>" ("gloo" itself is torch's CPU backend).
    * the device's own library (descriptor `comm_backend`, e.g. "acmeccl"), or
      any new name: registered as a staged backend of the device.

    `init_distributed` and `comm_backend_for` use the choice from then on
    instead of the descriptor's `comm_backend`. Returns `name` (lower case).
    """
    device_type = torch.device(device).type if device is not None else _current_accelerator_type()
    if device_type == "cpu":
        raise ValueError("set_comm_backend: CPU uses gloo; name an flsdk device, e.g. 'acme'")
    name = name.lower()
    c10d_name = register_comm_backend(_c10d_name(name, device_type), device_type)
    _chosen[device_type] = name
    # The choice is also what c10d picks for the device when a group names no
    # backend (registering a second backend would otherwise leave the last one).
    dist.Backend.default_device_backend_map[device_type] = c10d_name
    return name


def _current_accelerator_type() -> str:
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if acc is None:
        raise RuntimeError("no accelerator is loaded; pass the device, e.g. 'acme'")
    return acc.type


def init_distributed(device: str | torch.device, rank: int, world_size: int,
                     init_method: str | None = None, *, store: dist.Store | None = None,
                     timeout: datetime.timedelta | None = None,
                     set_device: bool = True) -> torch.device:
    """Initialise the default process group for an flsdk device and return this rank's device.

    `device` is a device type ("acme") or a device ("acme:1"); without an index the
    rank picks ``rank % device_count``. The comm backend (descriptor's `comm_backend`
    or the one from `set_comm_backend`) is registered if needed, and the group is
    created with that backend alone: its process group also serves CPU tensors
    through gloo, so DDP, object collectives and barriers all work.
    `init_method` / `store` are passed to ``dist.init_process_group`` (default
    ``env://``).
    """
    dev = torch.device(device)
    if dev.type == "cpu":
        backend = "gloo"
        local = dev
    else:
        backend = register_comm_backend(_c10d_name(comm_backend_for(dev.type), dev.type),
                                        dev.type)
        index = dev.index
        if index is None:
            count = torch.accelerator.device_count()
            if count < 1:
                raise RuntimeError(f"device '{dev.type}' reports no devices")
            index = rank % count
        local = torch.device(dev.type, index)
        if set_device:
            torch.accelerator.set_device_index(index)
    kwargs: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world_size}
    if store is not None:
        kwargs["store"] = store
    else:
        kwargs["init_method"] = init_method or "env://"
    if timeout is not None:
        kwargs["timeout"] = timeout
    dist.init_process_group(**kwargs)
    return local
