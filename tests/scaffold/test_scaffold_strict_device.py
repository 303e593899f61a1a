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
from scaffold import build_into, flsdk, guide_kernel, site_env

pytestmark = [pytest.mark.slow, pytest.mark.build]

REBUILD = "rebuild: pip install --no-build-isolation ."

# The guide's relu, plus one host read of its input (a vendor's debugging line).
HOST_READ = "  const int64_t n = src.numel();\n"
HOST_READ_BUG = ("  const int64_t n = src.numel();\n"
                 "  if (n && src.scalar_type() == at::kFloat && src.const_data_ptr<float>()[0] == 42.f)  // host read\n"
                 "    return out;\n")


def _by_reference(relu: str) -> str:
    """The guide's relu turned into mul, its device part capturing by reference."""
    mul = relu.replace("kernels/relu.cpp", "kernels/mul_Tensor.cpp").replace(
        "at::Tensor k_relu(const at::Tensor & self) {",
        "at::Tensor k_mul_Tensor(const at::Tensor & self, const at::Tensor & other) {\n"
        "  TORCH_CHECK(other.sizes() == self.sizes() && other.scalar_type() == self.scalar_type(), \"same only\");\n"
        "  const void* w = other.contiguous().const_data_ptr();")
    mul = re.sub(r"\[in, result, n\] \{", "[&] {", mul)
    mul = mul.replace("const auto* x = runtime::device_ptr<const scalar_t>(in);",
                      "const auto* x = runtime::device_ptr<const scalar_t>(in);\n"
                      "      const auto* v = runtime::device_ptr<const scalar_t>(w);")
    mul = re.sub(r"y\[i\] = x\[i\] < scalar_t\(0\) \? scalar_t\(0\) : x\[i\];[^\n]*", "y[i] = x[i] * v[i];", mul)
    assert "[&] {" in mul and "x[i] * v[i]" in mul, mul
    return mul


def _pytest(root: Path, site: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(root / "tests" / "generated"), *args], cwd=site,
                          env=site_env(site, **env), capture_output=True, text=True, timeout=1200)


def test_discrete_memory_slow_device_and_stale_builds_as_a_vendor_meets_them(tmp_path):
    root = tmp_path / "zeta"
    flsdk("new-backend", "zeta", "--out", str(root))  # memory.model: host, the default
    relu = guide_kernel(root)
    assert HOST_READ in relu
    (root / "kernels" / "relu.cpp").write_text(relu.replace(HOST_READ, HOST_READ_BUG))
    (root / "kernels" / "mul_Tensor.cpp").write_text(_by_reference(relu))
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
                     r"aten::mul\.Tensor \(kernel k_mul_Tensor\)", out) or "test_slow_device[mul.Tensor" in out, \
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
    (root / "kernels" / "abs.cpp").write_text(
        relu.replace("relu", "abs").replace("x[i] < scalar_t(0) ? scalar_t(0) : x[i]",
                                            "x[i] < scalar_t(0) ? -x[i] : x[i]"))
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
