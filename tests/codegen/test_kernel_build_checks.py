"""#11 item 2: a kernel whose signature differs from the generated declaration is
reported by `flsdk gen` (#27 item 3) and by the build's configure step (which runs
`flsdk gen --check`), before any compiler runs, and a backend whose extension has an undefined symbol
fails right after linking (generated/sources.cmake, flsdk_backend_checks) instead of
building "successfully" and then not loading."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from flsdk.codegen.generate import STATIC_GLUE_DIR

CXX = shutil.which("g++") or shutil.which("c++")

WRONG_RELU = """\
// relu with the wrong signature: by value, where kernels.h declares const at::Tensor &.
#include "kernels.h"

#include <ATen/ops/empty.h>

namespace zeta::kernels {

at::Tensor k_relu(at::Tensor self) {
  return at::empty(self.sizes(), self.options());
}

}  // namespace zeta::kernels
"""


def _run(cmd, cwd=None, timeout=900):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.build
def test_wrong_kernel_signature_fails_in_the_kernel_file(tmp_path):
    if CXX is None or shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("needs a C++ compiler, cmake and ninja")
    root = tmp_path / "zeta"
    proc = _run([sys.executable, "-m", "flsdk.cli", "new-backend", "zeta", "--out", str(root)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (root / "kernels" / "relu.cpp").write_text(WRONG_RELU)
    # flsdk gen names the mismatch before any compiler runs (and still writes the
    # generated files, so the build below sees the same tree a vendor would).
    proc = _run([sys.executable, "-m", "flsdk.cli", "gen"], cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "kernels/relu.cpp:8: k_relu is defined as" in proc.stderr, proc.stderr
    assert "kernels/relu.cpp" in (root / "generated" / "sources.cmake").read_text()

    # The build itself (configure, as scikit-build-core runs it) refuses the same tree
    # with the same message, before any compiler runs: a vendor who skips `flsdk gen`
    # and runs `pip install .` sees the signatures, not -Werror=missing-declarations.
    build = tmp_path / "build"
    proc = _run(["cmake", "-S", str(root), "-B", str(build), "-G", "Ninja",
                 f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, "configure accepted a kernel with the wrong signature"
    assert "kernels/relu.cpp:8: k_relu is defined as" in out, out[-3000:]
    assert "k_relu(const at::Tensor & self)" in out, out[-3000:]


@pytest.mark.build
def test_undefined_symbol_fails_after_linking(tmp_path):
    """check_symbols.py, what the post-link step runs, on a module whose kernel is missing."""
    if CXX is None:
        pytest.skip("no C++ compiler on PATH")
    src = tmp_path / "module.cpp"
    src.write_text("namespace zeta::kernels { int k_relu(const int& self); }\n"
                   "int wrapper_relu(int x) { return zeta::kernels::k_relu(x); }\n")
    lib = tmp_path / "_C.so"
    proc = _run([CXX, "-shared", "-fPIC", str(src), "-o", str(lib)])
    assert proc.returncode == 0, proc.stderr
    check = _run([sys.executable, str(STATIC_GLUE_DIR / "check_symbols.py"), str(lib)])
    assert check.returncode == 1
    assert "_C.so has an undefined symbol" in check.stderr, check.stderr
    if shutil.which("c++filt"):
        assert "zeta::kernels::k_relu(int const&)" in check.stderr, check.stderr
    assert "generated/kernels.h" in check.stderr

    src.write_text("namespace zeta::kernels { int k_relu(const int& self) { return self; } }\n"
                   "int wrapper_relu(int x) { return zeta::kernels::k_relu(x); }\n")
    assert _run([CXX, "-shared", "-fPIC", str(src), "-o", str(lib)]).returncode == 0
    check = _run([sys.executable, str(STATIC_GLUE_DIR / "check_symbols.py"), str(lib)])
    assert check.returncode == 0, check.stderr
