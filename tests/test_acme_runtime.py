"""acme's vendor runtime (examples/acme_backend/runtime): build and run its
standalone C++ test program, and check that runtime.cmake gives a
position-independent static library usable from a shared object.

The C++ program holds the real assertions (allocator, copies, protect mode,
streams/events, sticky errors, fault injection, multi-thread stress); this
wrapper compiles it, runs it and checks every test reported PASS.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "examples" / "acme_backend" / "runtime"
CXX = os.environ.get("CXX", "g++")
CXXFLAGS = ["-O1", "-std=c++20", "-pthread", "-fPIC", "-Wall", "-Wextra", "-Werror"]

# Every test the program defines; a missing PASS line means it was skipped or lost.
EXPECTED_TESTS = [
    "init", "alloc_free_basic", "invalid_arguments", "oom",
    "coalescing_and_holes", "best_fit", "alignment_config", "copies",
    "protect_mode", "stream_ordering", "events", "stream_wait_event",
    "sticky_errors", "fork_child_streams", "fault_injection", "options_and_stats",
    "device_loss_and_versions",
    "last_error_is_thread_local", "multithread_stress", "benchmarks",
]

pytestmark = pytest.mark.build


def runtime_sources() -> list[str]:
    """The runtime's sources as runtime/runtime.cmake lists them (the one list)."""
    cmake = (RUNTIME / "runtime.cmake").read_text()
    return re.findall(r"\$\{ACME_RUNTIME_DIR\}/(\w+\.cpp)", cmake)


def _clean_env() -> dict[str, str]:
    """The program sets the ACME_* variables it tests; inherited ones would skew it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ACME_")}


@pytest.fixture(scope="module")
def runtime_test_binary(tmp_path_factory) -> Path:
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX}) on PATH")
    work = tmp_path_factory.mktemp("acme_runtime")
    # Two compile jobs at once (the machine budget): the test program alone,
    # and the runtime sources one after the other; then link.
    groups = [["tests/test_runtime.cpp", "options.cpp"],
              [s for s in runtime_sources() if s != "options.cpp"]]
    jobs = []
    for group in groups:
        cmds = [[CXX, *CXXFLAGS, f"-I{RUNTIME}", "-c", str(RUNTIME / src),
                 "-o", str(work / (Path(src).stem + ".o"))] for src in group]
        script = " && ".join(" ".join(map(shlex.quote, c)) for c in cmds)
        jobs.append((script, subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True)))
    for script, proc in jobs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"compile failed:\n{script}\n{out}"
    exe = work / "test_runtime"
    link = [CXX, "-pthread", *(str(work / (Path(s).stem + ".o")) for g in groups for s in g),
            "-o", str(exe)]
    res = subprocess.run(link, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"link failed:\n{' '.join(link)}\n{res.stderr}"
    return exe


def test_runtime_program_passes(runtime_test_binary: Path, tmp_path: Path):
    # cwd = tmp_path: the forked children that die of SIGSEGV must not leave
    # anything in the repository even if core dumps were enabled.
    res = subprocess.run([str(runtime_test_binary)], capture_output=True, text=True,
                         timeout=180, cwd=tmp_path, env=_clean_env())
    out = res.stdout
    print(out)  # benchmark lines, visible with -s
    assert res.returncode == 0, f"runtime tests failed:\n{out}\n{res.stderr}"
    passed = set(re.findall(r"^PASS (\w+)", out, re.M))
    missing = [t for t in EXPECTED_TESTS if t not in passed]
    assert not missing, f"tests without a PASS line: {missing}\n{out}"
    assert f"acme runtime tests: {len(EXPECTED_TESTS)} passed, 0 failed" in out, out
    assert re.search(r"bench: memcpy 64 MiB: H2D [\d.]+ GB/s", out), out


def test_runtime_program_reports_failures(runtime_test_binary: Path, tmp_path: Path):
    """The harness must be able to fail: with ACME_FAULT_MALLOC=1 (read at init)
    every malloc fails, so alloc_free_basic reports FAIL and the exit is 1."""
    env = _clean_env() | {"ACME_FAULT_MALLOC": "1"}
    res = subprocess.run([str(runtime_test_binary), "alloc_free_basic"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path, env=env)
    assert res.returncode == 1, res.stdout
    assert "FAIL alloc_free_basic" in res.stdout
    assert "injected malloc fault" in res.stdout
    assert re.search(r"acme runtime tests: \d+ passed, [1-9]\d* failed", res.stdout)


def test_runtime_sources_are_torch_free():
    """The runtime is the vendor's own library: no PyTorch headers in it."""
    pattern = re.compile(r'#\s*include\s*[<"](torch|ATen|c10)/')
    for path in [*RUNTIME.glob("*.h"), *RUNTIME.glob("*.cpp")]:
        hits = [line for line in path.read_text().splitlines() if pattern.search(line)]
        assert not hits, f"{path.name} includes PyTorch headers: {hits}"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not on PATH")
def test_runtime_cmake_fragment_builds_pic_library(tmp_path: Path):
    """runtime.cmake defines `acme_runtime`, static and PIC: it links into a
    shared object that works when loaded."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(textwrap.dedent(f"""
        cmake_minimum_required(VERSION 3.18)
        project(acme_runtime_probe CXX)
        include("{RUNTIME.as_posix()}/runtime.cmake")
        include("{RUNTIME.as_posix()}/runtime.cmake")  # include_guard: twice is fine
        add_library(probe SHARED probe.cpp)
        target_link_libraries(probe PRIVATE acme_runtime)
    """))
    (src / "probe.cpp").write_text(textwrap.dedent("""
        #include "acme_runtime.h"
        // 0 on success, else the step that failed.
        extern "C" int acme_probe() {
          namespace r = acme::runtime;
          if (r::init({2, 1 << 20, 512}) != r::Status::Ok) return 1;
          void* p = nullptr;
          if (r::malloc(1, 1000, &p) != r::Status::Ok) return 2;
          int v = 42, w = 0;
          if (r::memcpy(p, &v, sizeof v, r::CopyKind::HostToDevice, 1, nullptr) != r::Status::Ok) return 3;
          r::Stream s = nullptr;
          if (r::stream_create(1, &s) != r::Status::Ok) return 4;
          if (r::launch(1, s, [p] { *static_cast<int*>(p) += 1; }) != r::Status::Ok) return 5;
          if (r::memcpy(&w, p, sizeof w, r::CopyKind::DeviceToHost, 1, s) != r::Status::Ok) return 6;
          if (r::stream_synchronize(1, s) != r::Status::Ok || w != 43) return 7;
          if (r::stream_destroy(1, s) != r::Status::Ok) return 8;
          if (r::free(1, p) != r::Status::Ok) return 9;
          return r::device_count() == 2 ? 0 : 10;
        }
    """))
    build = tmp_path / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    env = _clean_env() | {"CMAKE_BUILD_PARALLEL_LEVEL": "2"}
    for cmd in (["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", *gen],
                ["cmake", "--build", str(build), "-j", "2"]):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}"
    libs = list(build.glob("libprobe.so*"))
    assert libs, f"no libprobe.so in {sorted(p.name for p in build.iterdir())}"
    # Load it in a fresh interpreter so its runtime state (threads, arenas,
    # exported acme* symbols) never meets anything else loaded by pytest.
    probe = f"import ctypes, sys; sys.exit(ctypes.CDLL({str(libs[0])!r}).acme_probe())"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, env=_clean_env())
    assert res.returncode == 0, f"acme_probe failed at step {res.returncode}: {res.stderr}"
