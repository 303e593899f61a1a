"""The Python glue every backend package ships: the same code for every backend,
given the backend's name and generated facts as arguments.

* loader.py          loading the backend into PyTorch: load(), try_load(), the
                     torch-version and PrivateUse1 checks, BackendLoadError
* device_module.py   the functions of `torch.<name>`, PyTorch's device module
* memory.py          `torch.<name>.memory`: CUDA's memory statistics, summary and
                     snapshot/history format
* device_defaults.py numerics torch picks per device type in Python tables that
                     name only CUDA and the CPU
* op_routes.py       per-op routing to the CPU at run time (torch_fl.set_op_route,
                     TORCH_FL_OP_ROUTES read at load)

A backend must import and run with torch alone (its wheel depends on torch only;
torch_fl is an extra), so `flsdk gen` copies this folder verbatim into
`torch_fl_<name>/_generated/backend_glue/`, as it copies flsdk/static_glue/ into
`generated/`, and the generated `backend.py` and `device_module.py` call that copy
with the backend's name and data. Hence these files import only the standard
library, torch, each other (relatively), and, where a missing torch_fl is expected
and handled, `torch_fl.compile`. tests/codegen/test_import_layering.py holds them to it.
"""
