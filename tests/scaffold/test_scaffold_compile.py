"""A freshly scaffolded backend (device.yaml `compile: {codegen: cpp}`) runs
torch.compile with the default backend: Inductor's C++ kernels on its memory.

It runs the compile tests flsdk generated into the scaffold's own conformance
suite (tests/generated/test_zeta_compile.py: fused pointwise ops, reductions,
indexing, and a small model's training step, compiled vs eager), on the scaffold
built once per session (the `zeta_first_build` fixture, shared with
test_scaffold_build)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from scaffold import site_env

pytestmark = pytest.mark.build


# Inductor's C++ compile of a model on the scaffold (~45 s): --run-slow; acme's compile
# tests (examples/acme_backend/tests/test_compile.py) run the same glue in CI.
@pytest.mark.slow
def test_scaffold_compiles_a_small_model(zeta_first_build):
    root, site = zeta_first_build
    assert "compile: {codegen: cpp}" in (root / "device.yaml").read_text()
    generated = root / "tests" / "generated" / "test_zeta_compile.py"
    assert generated.is_file(), sorted(p.name for p in generated.parent.iterdir())
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging",
         str(generated)],
        # not cwd=root: `python -m pytest` puts the cwd first on sys.path, and the source
        # tree's package (no built _C) would shadow the built one
        cwd=site, env=site_env(site, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1"),
        capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    from torch_fl.testing.compile_check import CASES

    assert f"{len(CASES)} passed" in proc.stdout, proc.stdout[-2000:]
    # pytest's default warning filters, as the vendor runs `pytest tests`: torch's own
    # deprecation warnings of Inductor's import (torch.jit.script_method) are not the
    # backend's and are filtered by the scaffold's pyproject.toml; nothing else warns.
    assert "warning" not in proc.stdout.lower(), proc.stdout[-3000:]
