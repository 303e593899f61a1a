"""acmeccl, acme's collective library (examples/acme_backend/ccl): build and run
its standalone C++ test program ccl/tests/test_ccl.cpp (no torch) with the
runtime's and the library's sources, and its benchmark once on small sizes.

The program holds the real assertions: each test forks its ranks as processes
(1 to 4; on one simulated host or two, through ACME_HOST_ID) and checks every
collective, reduction op and dtype against values computed on the host, the
in-place forms, all_to_all with uneven splits, grouped send/recv in both orders,
several communicators, stream order and the link-speed and slow-device options,
an abort from another thread, a rank killed mid-collective, comm_init timeouts,
argument errors and mismatched collectives. A scenario whose processes do not
all exit within its timeout is killed and fails: a hang is a failure.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_runtime_programs import CXX, JOBS, _compile, _objects, outcome, passed_tests, run_program, runtime_sources

ACME = Path(__file__).resolve().parents[1]
RUNTIME = ACME / "runtime"
CCL = ACME / "ccl"

# Every test of test_ccl.cpp, in run order.
EXPECTED = [
    "one_rank", "one_host_2_ranks", "one_host_4_ranks", "two_hosts_2_ranks_each",
    "two_hosts_interleaved_and_uneven", "large_buffers", "ipc_opened_buffers",
    "several_communicators", "concurrent_streams_and_communicators",
    "stream_order_link_speed_and_slow_device", "abort_from_another_thread",
    "peer_killed_mid_collective", "comm_init_timeouts_name_missing_ranks",
    "argument_errors_and_mismatched_collectives",
]

pytestmark = pytest.mark.build


def ccl_sources() -> list[str]:
    """The library's sources as ccl/ccl.cmake lists them (the adapter needs the
    generated header of flsdk's interface only; it is compiled too)."""
    return re.findall(r"\$\{ACME_CCL_DIR\}/(\w+\.cpp)", (CCL / "ccl.cmake").read_text())


def build(main: Path, work: Path) -> Path:
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX}) on PATH")
    sources = ([RUNTIME / s for s in runtime_sources()] + [CCL / s for s in ccl_sources()] + [main])
    todo = [s for s in sources if s not in _objects]
    todo.sort(key=lambda s: s.stat().st_size, reverse=True)
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        objs = list(pool.map(lambda s: _compile(s, work / (s.parent.name + "_" + s.stem + ".o")), todo))
    _objects.update(zip(todo, objs))
    exe = work / main.stem
    link = [CXX, "-pthread", *(str(_objects[s]) for s in sources), "-o", str(exe)]
    res = subprocess.run(link, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"link failed:\n{' '.join(link)}\n{res.stderr}"
    return exe


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("acmeccl")


# Compiling the program costs ~45 s on two cores: --run-slow (CI keeps acmeccl
# covered through torch: tests/torch_fl/test_distributed_torchrun.py).
@pytest.mark.slow
def test_ccl_program_passes(work: Path, tmp_path: Path):
    exe = build(CCL / "tests" / "test_ccl.cpp", work)
    res = run_program(exe, tmp_path, timeout=240)
    print(res.stdout)
    assert res.returncode == 0, f"acmeccl tests failed: {outcome(res)}"
    assert passed_tests(res.stdout) == EXPECTED, res.stdout
    assert f"acmeccl tests: {len(EXPECTED)} passed, 0 failed" in res.stdout


def test_ccl_benchmark_runs(work: Path, tmp_path: Path):
    """The benchmark program (benchmarks/bench_acmeccl.py runs it on every size)
    works: every op on small sizes, on one host and on two."""
    exe = build(CCL / "bench" / "bench_acmeccl.cpp", work)
    for hosts in ("1", "2"):
        res = run_program(exe, tmp_path, "--ranks", "2", "--hosts", hosts, "--max", str(1 << 20),
                          timeout=120)
        assert res.returncode == 0, f"bench_acmeccl failed: {outcome(res)}"
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            assert re.search(rf"^{op}\s+1048576(\s+[\d.]+){{4}}$", res.stdout, re.M), res.stdout


def test_every_ccl_test_source_is_built():
    assert {p.name for p in (CCL / "tests").glob("test_*.cpp")} == {"test_ccl.cpp"}
    assert set(ccl_sources()) == {p.name for p in CCL.glob("*.cpp")}


def test_ccl_sources_are_torch_free():
    """acmeccl is the vendor's own library: no PyTorch headers in it."""
    pattern = re.compile(r'#\s*include\s*[<"](torch|ATen|c10)/')
    for path in [*CCL.rglob("*.h"), *CCL.rglob("*.cpp")]:
        hits = [line for line in path.read_text().splitlines() if pattern.search(line)]
        assert not hits, f"{path.name} includes PyTorch headers: {hits}"
