"""A work-around of PyTorch 2.13's c10d for a third-party device's default backend.

PyTorch 2.13 builds every process group with `_new_process_group_helper`, which
sets the group's default backend type from its backend string. Two cases go
wrong for a backend registered with `Backend.register_backend(..., devices=
[<device>])` (later PyTorch resolves the accelerator's backend by name):

* `init_process_group()` with the device as the accelerator (backend
  "undefined"): the device's backend is created and attached, but the default
  type is set to GLOO, which the group does not have; c10d then warns "No backend
  of type 1 found" and `dist.get_backend()` says "undefined".
* a "cpu:gloo,<device>:<name>" string: the check that should pick CUSTOM compares
  the plugin's upper-case key with lower-case names, so no default type is set.

The fix wraps the helper: when the group's backends include one registered by a
flsdk backend (and no NCCL), its default type becomes CUSTOM, and an "undefined"
group that resolved to that one backend records its name, as `device_id=` does.
It changes nothing for other backends and installs once per process.
"""

_MARK = "_flsdk_default_backend_fix"


def install(is_ours):
    """`is_ours(name)`: True for a c10d backend name registered by a flsdk backend."""
    import torch.distributed.distributed_c10d as c10d

    original = c10d._new_process_group_helper
    if getattr(original, _MARK, False):
        return

    def new_process_group_helper(*args, **kwargs):
        pg, store = original(*args, **kwargs)
        backend = args[3] if len(args) > 3 else kwargs.get("backend")
        try:
            _fix(c10d, pg, backend, is_ours)
        except Exception:  # never let the fix break a group that was made
            pass
        return pg, store

    setattr(new_process_group_helper, _MARK, True)
    new_process_group_helper.__wrapped__ = original
    new_process_group_helper.__doc__ = original.__doc__
    c10d._new_process_group_helper = new_process_group_helper


def _fix(c10d, pg, backend, is_ours):
    if backend is None or not isinstance(pg, c10d.ProcessGroup):
        return
    mapping = c10d.BackendConfig(c10d.Backend(str(backend))).get_device_backend_map()
    names = {str(b) for b in mapping.values()}
    ours = sorted(n for n in names if is_ours(n))
    if not ours or c10d.Backend.NCCL in names:
        return
    pg._set_default_backend(c10d.ProcessGroup.BackendType.CUSTOM)
    if str(backend) == c10d.Backend.UNDEFINED and names == {ours[0]} and pg in c10d._world.pg_map:
        _, store = c10d._world.pg_map[pg]
        c10d._world.pg_map[pg] = (ours[0], store)
