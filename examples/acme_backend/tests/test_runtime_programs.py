"""acme's vendor runtime (examples/acme_backend/runtime): build and run its
standalone C++ test programs, and check that runtime.cmake gives a
position-independent static library usable from a shared object.

The C++ programs hold the real assertions. They use acme's one C++ test
harness, tests/cpp/harness.h, with the runtime's part of it in
runtime/tests/harness.h (status checks, the runtime's last error in a failed
check's message, the clean-up check after each test). test_runtime is
test_device.cpp (init, options, versions, device loss, errors), test_memory.cpp
(allocator, copies, device memory the host never reads), test_streams.cpp
(ordering, the asynchronous default stream, sticky errors, fork, slow device,
stress), test_events.cpp and test_ipc.cpp (device memory and events shared
between processes, a forked child's own memory, freed pages, link speed);
test_compute_units (test_compute_units_program.py runs it) is test_compute_units.cpp.
This wrapper compiles them with the runtime's sources, runs them and checks that every test reported PASS.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[1] / "runtime"
HARNESS = Path(__file__).resolve().parent / "cpp"  # acme's C++ test harness
CXX = os.environ.get("CXX", "g++")
CXXFLAGS = ["-O1", "-std=c++20", "-pthread", "-fPIC", "-Wall", "-Wextra", "-Werror"]
JOBS = 2  # compile jobs at once (the machine budget)

# The test programs: their files in runtime/tests (each program also links the
# runtime's sources).
PROGRAMS = {
    "test_runtime": ["test_device.cpp", "test_memory.cpp", "test_streams.cpp",
                     "test_events.cpp", "test_ipc.cpp"],
    "test_compute_units": ["test_compute_units.cpp"],
}

# Every test test_runtime defines, in run order; a missing PASS line means it
# was skipped or lost.
EXPECTED_TESTS = [
    # test_device.cpp
    "init", "invalid_arguments", "last_error_is_thread_local", "options_and_stats",
    "host_waits_counts_synchronize", "protect_option_gone", "slow_device_option",
    "fault_injection", "device_loss_and_versions",
    # test_memory.cpp
    "alloc_free_basic", "host_alloc_free", "oom", "coalescing_and_holes", "best_fit", "alignment_config",
    "copies", "copy_checks", "memcpy_sync_waits", "host_dereference_segfaults",
    "device_view_only_on_device", "memory_benchmarks",
    # test_streams.cpp
    "stream_ordering", "default_stream_async", "null_stream_memcpy_ordered",
    "sticky_errors", "default_stream_errors", "device_synchronize_waits_default",
    "slow_device_delays_work", "fork_child_streams", "reinit_replaces_cached_default_streams",
    "multithread_stress",
    "stream_benchmarks",
    # test_events.cpp
    "events", "events_on_default_stream", "event_elapsed", "stream_wait_event",
    "wait_event_on_default_stream",
    # test_ipc.cpp
    "link_gbps_option", "freed_pages_return_to_the_os", "ipc_mem_handles", "ipc_mem_handle_errors",
    "ipc_event_handles", "ipc_event_owner_exits", "fork_child_memory_is_private",
]

pytestmark = pytest.mark.build


def runtime_sources() -> list[str]:
    """The runtime's sources as runtime/runtime.cmake lists them (the one list)."""
    cmake = (RUNTIME / "runtime.cmake").read_text()
    return re.findall(r"\$\{ACME_RUNTIME_DIR\}/(\w+\.cpp)", cmake)


def _clean_env() -> dict[str, str]:
    """The programs set the ACME_* variables they test; inherited ones would skew them."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ACME_")}


# Objects and programs built in this pytest process (test_compute_units_program.py
# shares them): each source is compiled once.
_objects: dict[Path, Path] = {}
_programs: dict[str, Path] = {}


def _compile(src: Path, obj: Path) -> Path:
    cmd = [CXX, *CXXFLAGS, f"-I{RUNTIME}", "-c", str(src), "-o", str(obj)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"compile failed:\n{' '.join(cmd)}\n{res.stdout}{res.stderr}"
    return obj


def build_program(name: str, work: Path) -> Path:
    """The test program `name` (a key of PROGRAMS), built in `work` unless this
    process built it already: compiles the sources not compiled yet, at most
    JOBS at a time, then links them with the runtime's objects."""
    if name in _programs:
        return _programs[name]
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX}) on PATH")
    sources = ([RUNTIME / s for s in runtime_sources()]
               + [RUNTIME / "tests" / t for t in PROGRAMS[name]])
    todo = [s for s in sources if s not in _objects]
    todo.sort(key=lambda s: s.stat().st_size, reverse=True)  # the long ones first
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        objs = list(pool.map(lambda s: _compile(s, work / (s.stem + ".o")), todo))
    _objects.update(zip(todo, objs))
    exe = work / name
    link = [CXX, "-pthread", *(str(_objects[s]) for s in sources), "-o", str(exe)]
    res = subprocess.run(link, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"link failed:\n{' '.join(link)}\n{res.stderr}"
    _programs[name] = exe
    return exe


def run_program(exe: Path, cwd: Path, *args: str, env: dict[str, str] | None = None,
                timeout: float = 180) -> subprocess.CompletedProcess:
    # cwd: the forked children that die of SIGSEGV must not leave anything in
    # the repository even if core dumps were enabled.
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=_clean_env() if env is None else env)


def passed_tests(out: str) -> list[str]:
    return re.findall(r"^PASS (\w+)", out, re.M)


def outcome(res: subprocess.CompletedProcess) -> str:
    """How a test program ended, for failure messages."""
    if res.returncode >= 0:
        return f"exit code {res.returncode}\n{res.stdout}\n{res.stderr}"
    sig = signal.Signals(-res.returncode).name
    return (f"killed by {sig}: the test after the last PASS/FAIL line crashed\n"
            f"{res.stdout}\n{res.stderr}")


@pytest.fixture(scope="module")
def runtime_test_binary(tmp_path_factory) -> Path:
    return build_program("test_runtime", tmp_path_factory.mktemp("acme_runtime"))


def test_runtime_program_passes(runtime_test_binary: Path, tmp_path: Path):
    res = run_program(runtime_test_binary, tmp_path)
    out = res.stdout
    print(out)  # benchmark lines, visible with -s
    assert res.returncode == 0, f"runtime tests failed: {outcome(res)}"
    passed = passed_tests(out)
    assert passed == EXPECTED_TESTS, (
        f"PASS lines differ from EXPECTED_TESTS: missing {sorted(set(EXPECTED_TESTS) - set(passed))}, "
        f"unexpected {sorted(set(passed) - set(EXPECTED_TESTS))}\n{out}")
    assert f"acme runtime tests: {len(EXPECTED_TESTS)} passed, 0 failed" in out, out
    assert re.search(r"bench: memcpy 64 MiB: H2D [\d.]+ GB/s", out), out


def test_runtime_program_reports_failures(runtime_test_binary: Path, tmp_path: Path):
    """The harness must be able to fail: with ACME_FAULT_MALLOC=1 (read at init)
    every malloc fails, so alloc_free_basic reports FAIL and the exit is 1."""
    env = _clean_env() | {"ACME_FAULT_MALLOC": "1"}
    res = run_program(runtime_test_binary, tmp_path, "alloc_free_basic", env=env, timeout=60)
    assert res.returncode == 1, res.stdout
    assert "FAIL alloc_free_basic" in res.stdout
    # the failed check's message ends with the runtime's last error (the runtime's
    # hook in acme's shared harness, tests/cpp/harness.h)
    assert re.search(r"^    test_memory\.cpp:\d+: rtm::malloc\(0, 1000, &a\) gave status \d+, want 0; "
                     r"last_error: acme: injected malloc fault", res.stdout, re.M), res.stdout
    assert re.search(r"acme runtime tests: \d+ passed, [1-9]\d* failed", res.stdout)
    # the filter ran only "init" (always first) and the test asked for
    assert re.findall(r"^(?:PASS|FAIL) (\w+)", res.stdout, re.M) == ["init", "alloc_free_basic"]


def test_every_test_source_is_built():
    """Each runtime/tests/test_*.cpp belongs to a program (a new file must be
    added to PROGRAMS, or its tests would silently never run)."""
    on_disk = {p.name for p in (RUNTIME / "tests").glob("test_*.cpp")}
    assert on_disk == {f for files in PROGRAMS.values() for f in files}
    assert (RUNTIME / "tests" / "harness.h").is_file()
    assert (HARNESS / "harness.h").is_file()


def test_runtime_sources_are_torch_free():
    """The runtime is the vendor's own library: no PyTorch headers in it."""
    pattern = re.compile(r'#\s*include\s*[<"](torch|ATen|c10)/')
    for path in [*RUNTIME.glob("*.h"), *RUNTIME.glob("*.cpp")]:
        hits = [line for line in path.read_text().splitlines() if pattern.search(line)]
        assert not hits, f"{path.name} includes PyTorch headers: {hits}"


@pytest.mark.slow  # a cmake configure and build of the runtime alone (~15 s)
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
          if (r::memcpy(p, &v, sizeof v, r::CopyKind::HostToDevice, 1, nullptr) != r::Status::Ok ||
              r::stream_synchronize(1, nullptr) != r::Status::Ok) return 3;
          r::Stream s = nullptr;
          if (r::stream_create(1, &s) != r::Status::Ok) return 4;
          // Device memory is reached only by device work, through its view.
          auto inc = [p] {
            if (int* q = static_cast<int*>(r::device_view(p))) *q += 1;
          };
          if (r::launch(1, s, inc) != r::Status::Ok) return 5;
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
