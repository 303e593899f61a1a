"""A backend's tensors across processes with torch.multiprocessing, as CUDA's.

torch's pickling reductions (torch/multiprocessing/reductions.py) share CPU
tensors through shared memory and CUDA tensors through CUDA IPC handles; any
other device fails ("_share_fd_: only available on CPU"). At load the backend
wraps them: a tensor or storage of this device is shared through the runtime's
IPC handles (`<package>._C._ipc_share`, ipc.cpp: the consumer opens the same
device memory, written in place by either side, and its stream waits for an
event recorded after the producer's last write); everything else goes to
torch's own reduction. A backend whose runtime lacks the `ipc` primitives fails
with a message naming the device and what is missing.

As with CUDA: the producer must stay alive while a consumer uses what it sent
(it keeps each shared storage until its consumers drop it); within one process
the original storage comes back.
"""

import importlib
import os

_installed: set[str] = set()  # device types whose reductions are installed


def rebuild_storage(native_name, shared):
    """The consumer's storage: `shared` is what `_ipc_share` returned in the producer;
    `native_name` the backend's native module ("torch_fl_acme._C": a module is not
    picklable, its name is)."""
    native_module = importlib.import_module(native_name)
    device, mem, offset, nbytes, event, counter_block, slot, pid, key = shared
    if pid == os.getpid():  # back at its producer (maybe through other processes)
        return native_module._ipc_lookup(key)
    return native_module._ipc_open(device, mem, offset, nbytes, event, counter_block, slot,
                                   pid, key)


def rebuild_tensor(native_name, cls, shared, dtype, size, stride, storage_offset, requires_grad):
    import torch

    storage = rebuild_storage(native_name, shared)
    tensor = torch.empty((0,), dtype=dtype, device=storage.device)
    tensor.set_(storage, storage_offset, size, stride)
    if cls is torch.nn.parameter.Parameter:
        return torch.nn.parameter.Parameter(tensor, requires_grad=requires_grad)
    tensor.requires_grad_(requires_grad)
    return tensor


def rebuild_untyped_storage(native_name, shared):
    return rebuild_storage(native_name, shared)


def rebuild_typed_storage(native_name, shared, dtype):
    import torch

    return torch.storage.TypedStorage(wrap_storage=rebuild_storage(native_name, shared),
                                      dtype=dtype, _internal=True)


def install(device_type, native_module):
    """Wrap torch's reductions of tensors and storages so that `device_type`'s go
    through the backend's IPC handles. Idempotent."""
    if device_type in _installed:
        return
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # noqa: F401  (registers torch's reductions first)

    reducers = ForkingPickler._extra_reducers
    name = native_module.__name__

    def ours(device):
        return device.type == device_type

    def wrap_tensor(original):
        def reduce_tensor(tensor):
            if not ours(tensor.device) or tensor.is_sparse or tensor.is_nested:
                return original(tensor)
            if tensor.requires_grad and not tensor.is_leaf:
                raise RuntimeError(
                    "Cowardly refusing to serialize non-leaf tensor which requires_grad, since "
                    "autograd does not support crossing process boundaries. If you just want "
                    "to transfer the data, call detach() on the tensor before serializing "
                    "(e.g., putting it on the queue).")
            shared = native_module._ipc_share(tensor.untyped_storage())
            return (rebuild_tensor, (name, type(tensor), shared, tensor.dtype,
                                     tuple(tensor.size()), tuple(tensor.stride()),
                                     tensor.storage_offset(), tensor.requires_grad))
        return reduce_tensor

    def wrap_untyped(original):
        def reduce_storage(storage):
            if not ours(storage.device):
                return original(storage)
            return (rebuild_untyped_storage, (name, native_module._ipc_share(storage)))
        return reduce_storage

    def wrap_typed(original):
        def reduce_storage(storage):
            # the untyped storage's device: TypedStorage.device warns it is deprecated
            if not ours(storage._untyped_storage.device):
                return original(storage)
            shared = native_module._ipc_share(storage._untyped_storage)
            return (rebuild_typed_storage, (name, shared, storage.dtype))
        return reduce_storage

    for cls, original in list(reducers.items()):
        if isinstance(cls, type) and issubclass(cls, torch.Tensor):
            reducers[cls] = wrap_tensor(original)
        elif cls is torch.UntypedStorage:
            reducers[cls] = wrap_untyped(original)
        elif isinstance(cls, type) and issubclass(cls, torch.storage.TypedStorage):
            reducers[cls] = wrap_typed(original)
    _installed.add(device_type)
