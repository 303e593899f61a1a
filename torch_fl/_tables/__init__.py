"""Tables shared by torch_fl (the runtime) and flsdk (the SDK): torch-free, standard
library only.

    dtypes     the dtype table: names, aliases, kinds, default tolerances, C++ enumerators
    samples    the sample DSL's grammar (tensor tokens such as `T(2,3)+`)
    glue       the ops every backend's generated glue provides
    autocast   the op lists of torch's autocast_mode.h (CUDA's autocast policy)

The layering (docs/architecture.md, "Repository layout"; tests/codegen/test_import_layering.py
holds it): torch_fl never imports flsdk; flsdk imports torch_fl only here and through
`torch_fl.commands`. So these modules import nothing but the standard library and
each other: no torch, no other torch_fl module, no flsdk. flsdk re-exports their
names where its code always read them (flsdk.spec.dtypes, flsdk.codegen.glue, ...).
Not part of torch_fl's user API.
"""
