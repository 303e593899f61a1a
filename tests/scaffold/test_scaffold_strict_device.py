"""Issue 36's "done when", as a new vendor meets it: the scaffold's simulated device
finds the bugs a kernel can hide on a fast synchronous one, and nothing stale
passes. One backend, three kernels written as a vendor might get them wrong:

* relu reads device memory in its host part (it works on `memory.model: host`);
  switching device.yaml to discrete (gen says what changed, a rebuild) makes its
  generated tests fail with a report naming the op and the kernel;
* mul's device part captures by reference: its slow-device case fails, naming it;
* abs is added (device.yaml, a kernel, `flsdk gen`) without a rebuild: the tests,
  the backend's load and `flsdk doctor` refuse the old build with the rebuild command.

Two builds of a scaffold (minutes on two cores): --run-slow."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from scaffold import build_into, flsdk, site_env

pytestmark = [pytest.mark.slow, pytest.mark.build]

REBUILD = "rebuild: pip install --no-build-isolation ."

# Kernels in the guide's style (flsdk's kernel library), each with a bug a vendor
# might write: `{check}` is a line of the host part, `{capture}` the device part's
# capture list, `{expr}` its element.
KERNEL = """\
#include "kernels.h"

#include <ATen/ops/empty.h>

#include "kernel_lib/common.h"

namespace zeta::kernels {{

using namespace zeta::common;

{signature} {{
  const char* op = "{name}";
  at::Tensor a = self.contiguous();
  at::Tensor b = {second}.contiguous();
  FL_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), op, "same shapes and dtypes only");
  at::Tensor out = at::empty(a.sizes(), a.options());
{check}  DeviceTensor in(a), w(b), res(out);
  dispatch<kAllNoBool>(op, a.device(), a.scalar_type(), [&](auto tag) {{
    using T = FL_T(tag);
    launch(out, [{capture}] {{
      const T* x = in.const_data_ptr<T>();
      const T* v = w.const_data_ptr<T>();
      (void)v;  // relu and abs read one input
      T* y = res.data_ptr<T>();
      for (int64_t i = 0; i < res.numel(); ++i) y[i] = {expr};
    }});
  }});
  return out;
}}

}}  // namespace zeta::kernels
"""
BY_VALUE = "in, w, res"
# relu reads device memory in its host part (a vendor's debugging line)
HOST_READ_BUG = ("  if (a.numel() && a.scalar_type() == at::kFloat && a.const_data_ptr<float>()[0] == 42.f)\n"
                 "    return out;  // the host read\n")
RELU_HOST_READ = KERNEL.format(signature="at::Tensor k_relu(const at::Tensor & self)", name="relu", second="self",
                               check=HOST_READ_BUG, capture=BY_VALUE, expr="x[i] < T(0) ? T(0) : x[i]")
# mul's device part captures by reference: it reads the host part's stack after it returned
MUL_BY_REFERENCE = KERNEL.format(
    signature="at::Tensor k_mul_Tensor(const at::Tensor & self, const at::Tensor & other)", name="mul",
    second="other", check="", capture="&", expr="x[i] * v[i]")
ABS = KERNEL.format(signature="at::Tensor k_abs(const at::Tensor & self)", name="abs", second="self",
                    check="", capture=BY_VALUE, expr="x[i] < T(0) ? T(-x[i]) : x[i]")


def _pytest(root: Path, site: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(root / "tests" / "generated"), *args], cwd=site,
                          env=site_env(site, **env), capture_output=True, text=True, timeout=1200)


def test_discrete_memory_slow_device_and_stale_builds_as_a_vendor_meets_them(tmp_path):
    root = tmp_path / "zeta"
    flsdk("new-backend", "zeta", "--out", str(root))  # memory.model: host, the default
    (root / "kernels" / "relu.cpp").write_text(RELU_HOST_READ)
    (root / "kernels" / "mul_Tensor.cpp").write_text(MUL_BY_REFERENCE)
    flsdk("gen", cwd=root)

    # 1. host memory: the host read goes unnoticed, as the issue found
    build_into(root, tmp_path / "site_host")
    host = _pytest(root, tmp_path / "site_host", "-k", "relu")
    assert host.returncode == 0, host.stdout[-3000:] + host.stderr[-2000:]

    # 2. the by-reference capture: its slow-device case fails, naming the op and kernel
    slow = _pytest(root, tmp_path / "site_host", "-k", "slow_device and mul")
    assert slow.returncode != 0, slow.stdout[-2000:]
    out = slow.stdout + slow.stderr
    assert re.search(r"zeta: device work crashed at 0x[0-9a-f]+ \(not device memory\): a kernel queued by "
                     r"aten::mul_?\.Tensor \(kernel k_mul_Tensor\)", out) or "test_slow_device[mul.Tensor" in out, \
        out[-3000:]

    # 3. discrete memory: one line of device.yaml, gen says what changed, a rebuild
    device = root / "device.yaml"
    device.write_text(device.read_text().replace("  model: host\n", "  model: discrete\n"))
    gen = flsdk("gen", cwd=root)
    assert "memory.model host -> discrete" in gen, gen
    build_into(root, tmp_path / "site_discrete", log=tmp_path / "build.log")
    said = [line for line in (tmp_path / "build.log").read_text().splitlines()
            if re.search(r"warn|shadows|kineto", line, re.I) and not line.startswith("WARNING: Location ")]
    assert not said, said
    discrete = _pytest(root, tmp_path / "site_discrete", "-k", "relu")
    assert discrete.returncode != 0, discrete.stdout[-2000:]
    report = discrete.stdout + discrete.stderr
    assert re.search(r"zeta: host code accessed device memory at 0x[0-9a-f]+ \(zeta:0, \d+ bytes into the "
                     r"allocation of \d+ bytes at 0x[0-9a-f]+\)\n  while running aten::relu \(kernel k_relu\), "
                     r"in its host part", report), report[-3000:]

    # 4. a new op, its kernel and gen, but no rebuild: refused, with the command
    device.write_text(device.read_text().replace("native:\n", "native:\n  - op: abs\n"))
    flsdk("gen", cwd=root)
    (root / "kernels" / "abs.cpp").write_text(ABS)
    flsdk("gen", cwd=root)
    stale = _pytest(root, tmp_path / "site_discrete", "-k", "abs")
    assert stale.returncode == 1 and REBUILD in stale.stdout and "Nothing was tested" in stale.stdout, \
        stale.stdout[-2000:]
    assert "kernels/abs.cpp added" in stale.stdout, stale.stdout[-2000:]
    env = site_env(tmp_path / "site_discrete", TORCH_FL_BACKEND="zeta")
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD")
    doctor = subprocess.run([sys.executable, "-m", "flsdk.cli", "doctor"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert doctor.returncode == 1 and "INSTALLED BUILD IS STALE" in doctor.stdout and REBUILD in doctor.stdout, \
        doctor.stdout
