"""A vendor's first day, replayed on one scaffolded and built backend (issue 11):
each way a broken or stale backend used to look healthy, and what it does now.

One build for the whole module (the `first_day` fixture: scaffold `zeta`, fill
relu and a custom op, gen, build a wheel, unpack it); each test then runs
Python, pytest or flsdk against it in subprocesses, as the vendor would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from custom_op_spec import add_custom_spec, custom_spec

pytestmark = pytest.mark.build

CUSTOM_SPEC = custom_spec('["T(4,3)", "T(4,3)"]', '["T(3,4).t()", "T(4,3)", {alpha: 2.0}]', twice=True)

RELU = """\
// relu on the zeta device, every dtype the device lists (the first kernel of the day),
// written with flsdk's kernel library: the host part allocates, the device part
// (queued on the stream) computes.
#include "kernels.h"

#include <ATen/ops/empty.h>

#include "kernel_lib/common.h"

namespace zeta::kernels {

using namespace zeta::common;

at::Tensor k_relu(const at::Tensor & self) {
  at::Tensor src = self.contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options());
  dispatch<kAllNoBool>("relu", src.device(), src.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [in = DeviceTensor(src), res = DeviceTensor(out)] {
      const T* x = in.const_data_ptr<T>();
      T* y = res.data_ptr<T>();
      for (int64_t i = 0; i < res.numel(); ++i) y[i] = static_cast<float>(x[i]) > 0.f ? x[i] : T(0);
    });
  });
  return out;
}

}  // namespace zeta::kernels
"""

SCALE_ADD = """\
// zeta::scale_add: x + alpha * y (same shapes), float32.
#include "kernels.h"

#include <ATen/ops/empty.h>

#include "kernel_lib/common.h"

namespace zeta::kernels {

using namespace zeta::common;

at::Tensor k_scale_add(const at::Tensor & x, const at::Tensor & y, double alpha) {
  const char* op = "scale_add";
  check_dtype<kF32>(op, x.device(), x.scalar_type());
  check_dtype<kF32>(op, y.device(), y.scalar_type());
  FL_CHECK(x.sizes() == y.sizes(), op, "shapes differ: ", x.sizes(), " vs ", y.sizes());
  at::Tensor a = x.contiguous(), b = y.contiguous();
  at::Tensor out = at::empty(a.sizes(), a.options());
  launch(out, [va = DeviceTensor(a), vb = DeviceTensor(b), vo = DeviceTensor(out),
               s = static_cast<float>(alpha)] {
    const float* pa = va.const_data_ptr<float>();
    const float* pb = vb.const_data_ptr<float>();
    float* po = vo.data_ptr<float>();
    for (int64_t i = 0; i < vo.numel(); ++i) po[i] = pa[i] + s * pb[i];
  });
  return out;
}

}  // namespace zeta::kernels
"""

TWICE = """\
// zeta::twice: written, but the vendor forgets to run `flsdk gen` before building.
#include "kernels.h"

#include <ATen/ops/mul.h>

namespace zeta::kernels {

at::Tensor k_twice(const at::Tensor & x) { return at::mul(x, 2); }

}  // namespace zeta::kernels
"""


def _flsdk(*args, cwd=None, env=None, check=True):
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _build_env(base: Path) -> dict:
    env = dict(os.environ)
    if shutil.which("ccache") and not env.get("CMAKE_CXX_COMPILER_LAUNCHER"):
        # paths relative to the scratch folder: a rerun hits the cache
        env.update(CMAKE_CXX_COMPILER_LAUNCHER="ccache", CCACHE_BASEDIR=str(base), CCACHE_NOHASHDIR="true")
    return env


def _wheel(root: Path, out: Path):
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out),
         str(root)], capture_output=True, text=True, timeout=2400, env=_build_env(root.parent))


class Day:
    def __init__(self, base: Path):
        self.base = base
        self.root = base / "zeta"
        self.site = base / "site"
        self.elsewhere = base / "elsewhere"   # a folder that is not the backend's source
        self.elsewhere.mkdir()
        self.timings: dict[str, float] = {}

    def env(self, **extra) -> dict:
        env = dict(os.environ, PYTHONPATH=str(self.site), **extra)
        env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
        env.pop("TORCH_FL_BACKEND", None)
        env.update(extra)
        return env

    def python(self, code: str, cwd: Path | None = None, **extra):
        return subprocess.run([sys.executable, "-c", code], cwd=cwd or self.elsewhere, env=self.env(**extra),
                              capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def first_day(tmp_path_factory):
    day = Day(tmp_path_factory.mktemp("first_day"))
    root = day.root
    t = time.perf_counter()
    _flsdk("new-backend", "zeta", "--out", str(root))
    day.timings["new-backend"] = time.perf_counter() - t
    add_custom_spec(root, CUSTOM_SPEC, ops=("zeta::scale_add", "zeta::twice"))
    t = time.perf_counter()
    _flsdk("gen", cwd=root)
    day.timings["gen"] = time.perf_counter() - t
    (root / "kernels" / "relu.cpp").write_text(RELU)
    (root / "kernels" / "scale_add.cpp").write_text(SCALE_ADD)
    _flsdk("gen", cwd=root)
    t = time.perf_counter()
    proc = _wheel(root, day.base / "wheels")
    day.timings["build"] = time.perf_counter() - t
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheel = next((day.base / "wheels").glob("torch_fl_zeta-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(day.site)
    print("first day timings (s):", json.dumps({k: round(v, 1) for k, v in day.timings.items()}))
    return day


README_LINE = "import torch; print((torch.ones(4, device='zeta') + 1).cpu().tolist())"


def test_1_source_folder_shadowing_is_named_and_the_readme_line_works(first_day):
    day = first_day
    inside = day.python(README_LINE, cwd=day.root, TORCH_FL_BACKEND="zeta")
    assert inside.returncode != 0
    warning = [line for line in inside.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warning) == 1, inside.stderr
    for needle in ("'zeta' device backend (torch_fl_zeta) was not loaded", "source folder",
                   "shadows the installed package", "flsdk doctor"):
        assert needle in warning[0], (needle, warning[0])
    doctor = _flsdk("doctor", cwd=day.root, env=day.env(TORCH_FL_BACKEND="zeta"), check=False)
    assert doctor.returncode == 1 and "SHADOWED in this folder" in doctor.stdout, doctor.stdout
    assert "Traceback" not in doctor.stderr
    # The README's line, as the README now writes it: from outside the source folder.
    outside = day.python(README_LINE, cwd=day.root.parent, TORCH_FL_BACKEND="zeta")
    assert outside.returncode == 0, outside.stderr
    assert outside.stdout.strip() == "[2.0, 2.0, 2.0, 2.0]" and "RuntimeWarning" not in outside.stderr
    readme = (day.root / "README.md").read_text()
    assert "(cd /tmp && python -c" in readme and "source folder" in readme


def test_3_building_with_stale_generated_files_is_refused(first_day):
    day = first_day
    stub = day.root / "kernels" / "twice.cpp"
    original = stub.read_text()
    stub.write_text(TWICE)  # the stub line is gone: a kernel now, but gen did not run
    try:
        t = time.perf_counter()
        proc = _wheel(day.root, day.base / "stale_wheels")
        seconds = time.perf_counter() - t
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-2000:]
        assert "generated/ is stale" in out and "run `flsdk gen`" in out, out[-3000:]
        assert seconds < 300, seconds  # refused at configure time, before compiling
        status = json.loads(_flsdk("ops", "--format", "json", cwd=day.root).stdout)
        assert {r["op"]: r["status"] for r in status["ops"]}["zeta::twice"] == "native"
        assert _flsdk("gen", "--check", cwd=day.root, check=False).returncode == 1
    finally:
        stub.write_text(original)
    assert _flsdk("gen", "--check", cwd=day.root, check=False).returncode == 0


def test_4_two_backends_one_loads_the_other_warns_and_the_user_chooses(first_day, acme_backend):
    day = first_day  # acme (acme_backend: skipped only when not installed) is the second backend
    code = "import torch; print(torch._C._get_privateuse1_backend_name())"
    both = day.python(code)
    assert both.returncode == 0, both.stderr
    owner = both.stdout.strip().splitlines()[-1]
    assert owner in ("acme", "zeta")
    other = "zeta" if owner == "acme" else "acme"
    warnings = [line for line in both.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1, both.stderr
    for needle in (f"'{other}' device backend", f"already taken by the '{owner}' backend",
                   f"TORCH_FL_BACKEND={other}", "flsdk doctor"):
        assert needle in warnings[0], (needle, warnings[0])
    for chosen in ("zeta", "acme"):
        proc = day.python("import torch; print(torch._C._get_privateuse1_backend_name(), "
                          f"(torch.ones(2, device='{chosen}') * 3).cpu().tolist())", TORCH_FL_BACKEND=chosen)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split()[0] == chosen and "RuntimeWarning" not in proc.stderr, proc.stderr


def test_5_names_pytorch_refuses_are_refused_and_leave_nothing(first_day):
    day = first_day
    for name in ("qlx7", "class"):
        proc = _flsdk("new-backend", name, cwd=day.elsewhere, check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not (day.elsewhere / name).exists()


def test_6_custom_ops_are_tested_against_their_reference_and_skips_say_why(first_day):
    day = first_day
    stub = (day.root / "kernels" / "twice.cpp").read_text()
    assert "custom op zeta::twice" in stub and "aten::zeta" not in stub and "runs on the CPU fallback" not in stub
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-v",
                           str(day.root / "tests" / "generated")], cwd=day.elsewhere,
                          env=day.env(TORCH_FL_BACKEND="zeta"), capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    for case in ("test_custom_op_conformance[zeta.scale_add-float32-s0] PASSED",
                 "test_custom_op_conformance[zeta.scale_add-float32-s1] PASSED",
                 "test_conformance[relu-float32-s0] PASSED",
                 "test_variant_conformance[relu_-float32-s0] PASSED",   # the in-place variant
                 "test_variant_conformance[relu_-int64-s0] PASSED"):
        assert case in out, (case, out[-4000:])
    assert "zeta::twice: not compared: no native kernel yet" in out, out[-3000:]
    assert "add.Tensor: not compared: no native kernel yet" in out
    # the reference really is what the kernel is held to: a wrong one fails
    generated = (day.root / "tests" / "generated" / "test_zeta_conformance.py").read_text()
    broken = day.elsewhere / "test_wrong_reference.py"
    broken.write_text(generated.replace("lambda x, y, alpha=1.0: x + alpha * y",
                                        "lambda x, y, alpha=1.0: x - alpha * y"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(broken),
                           "-k", "scale_add"], cwd=day.elsewhere, env=day.env(TORCH_FL_BACKEND="zeta"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "2 failed" in proc.stdout, proc.stdout[-2000:]
    broken.unlink()


def test_7_compare_on_a_fresh_backend_and_a_users_model(first_day):
    day = first_day
    env = day.env(TORCH_FL_BACKEND="zeta")
    (day.elsewhere / "mymodels.py").write_text(textwrap.dedent("""\
        import torch

        def build():
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
            return model, torch.randn(5, 8)
        """))
    mine = _flsdk("compare", "--model", "mymodels:build", "--device-b", "zeta:0", cwd=day.elsewhere, env=env,
                  check=False)
    assert mine.returncode == 0 and mine.stdout.strip(), mine.stderr
    resnet = _flsdk("compare", "--model", "resnet18", cwd=day.elsewhere, env=env, check=False)
    assert "Traceback" not in resnet.stderr, resnet.stderr
    assert resnet.returncode == 0 or (resnet.returncode == 1 and len(resnet.stderr.strip().splitlines()) == 1), \
        resnet.stderr
    missing = _flsdk("compare", "--model", "mymodels:build", "--device-b", "nosuch:0", cwd=day.elsewhere,
                     env=env, check=False)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr


def test_8_test_ids_are_stable_per_op_and_k_selects_them(first_day):
    day = first_day

    def ids(root: Path, *k):
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                               str(root / "tests" / "generated"), *k], cwd=day.elsewhere,
                              env=day.env(TORCH_FL_BACKEND="zeta"), capture_output=True, text=True, timeout=600)
        return [line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line]

    before = ids(day.root)
    assert "test_conformance[relu-float32-s0]" in before and "test_variant_conformance[relu_-float32-s0]" in before
    # Add an op (abs) and fill add.Tensor's kernel: ids of before stay, none is renumbered.
    copy = day.base / "zeta_plus"
    shutil.copytree(day.root, copy, ignore=shutil.ignore_patterns("build", "_C*.so"))
    device = copy / "device.yaml"
    device.write_text(device.read_text().replace("native:\n", "native:\n  - op: abs\n"))
    (copy / "kernels" / "abs.cpp").write_text(RELU.replace("relu", "abs").replace(
        "static_cast<float>(in[i]) > 0.f ? in[i] : T(0)", "static_cast<float>(in[i]) < 0.f ? T(-in[i]) : in[i]"))
    stub = copy / "kernels" / "add_Tensor.cpp"
    stub.write_text("".join(line for line in stub.read_text().splitlines(True) if "flsdk:stub" not in line))
    _flsdk("gen", cwd=copy)
    after = ids(copy)
    compared_before = {i for i in before if not i.startswith("test_not_compared[")}
    assert compared_before < set(after)  # (add.Tensor moved from a skip to compared cases)
    assert any(i.startswith("test_conformance[abs-") for i in after)
    # the documented selection (README, docs/building-acme.md): `-k add.Tensor` is that op's cases
    selected = ids(copy, "-k", "add.Tensor")
    # (its cases, and the first of them again on the slow device)
    assert selected and selected == [i for i in after if i.startswith(("test_conformance[add.Tensor-",
                                                                       "test_slow_device[add.Tensor-"))]
    assert "test_slow_device[add.Tensor-float32-s0]" in selected
    assert [i for i in after if "[add_.Tensor-" in i] and [i for i in after if "[add.out-" in i]
