"""flsdk's kernel library keeps a kernel's device part in recycled memory on its
way to the stream (kernel_lib/queued_work.h): made on the launching thread,
run and freed once on the stream's thread. This builds a small C++ program
against the header alone. The program checks four things:

* the work runs once and its captures are destroyed right after it runs, even
  when it throws;
* work that never runs is freed by discard();
* blocks freed on another thread come back to the launching thread, which
  needs no new memory in steady state;
* closures of every size class and over-sized ones all work."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

KERNEL_LIB = Path(__file__).resolve().parents[2] / "flsdk" / "kernel_lib"
CXX = os.environ.get("CXX", "g++")

PROGRAM = r"""
#include "queued_work.h"

#include <array>
#include <cstdio>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>

using namespace testns::common;
static int failures = 0;
#define CHECK(c) do { if (!(c)) { std::printf("FAIL line %d: %s\n", __LINE__, #c); ++failures; } } while (0)

template <std::size_t N>
void runs_once_and_frees_captures() {
  auto held = std::make_shared<int>(0);
  std::array<char, N> pad{};
  QueuedWork w = make_queued_work([held, pad] { ++*held; (void)pad; });
  CHECK(held.use_count() == 2);  // the closure holds a copy
  std::thread([&] { w.run(w.arg); }).join();  // the stream's thread
  CHECK(*held == 1);
  CHECK(held.use_count() == 1);  // destroyed right after it ran
}

int main() {
  runs_once_and_frees_captures<8>();
  runs_once_and_frees_captures<600>();
  runs_once_and_frees_captures<3000>();
  runs_once_and_frees_captures<10000>();  // beyond the size classes: the C heap

  {  // a throwing body: the runtime reports it, the closure is still freed
    auto held = std::make_shared<int>(0);
    QueuedWork w = make_queued_work([held] { throw std::runtime_error("kernel failed"); });
    bool threw = false;
    try { w.run(w.arg); } catch (const std::runtime_error&) { threw = true; }
    CHECK(threw);
    CHECK(held.use_count() == 1);
  }
  {  // never queued: discard frees it without running it
    auto held = std::make_shared<int>(0);
    QueuedWork w = make_queued_work([held] { ++*held; });
    w.discard(w.arg);
    CHECK(*held == 0);
    CHECK(held.use_count() == 1);
  }
  {  // steady state: blocks freed by the worker are reused, no new memory
    std::set<void*> seen;
    for (int round = 0; round < 50; ++round) {
      QueuedWork batch[8];
      for (auto& w : batch) {
        w = make_queued_work([] {});
        if (round >= 10) CHECK(seen.count(w.arg) == 1);
        seen.insert(w.arg);
      }
      std::thread([&] { for (auto& w : batch) w.run(w.arg); }).join();
    }
    CHECK(seen.size() <= 16);
  }
  std::printf(failures == 0 ? "queued work: ok\n" : "queued work: %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
"""


def test_queued_work_runs_once_frees_and_recycles(tmp_path: Path):
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX}) on PATH")
    (tmp_path / "device_config.h").write_text("#pragma once\n#define FLSDK_BACKEND_NS testns\n")
    (tmp_path / "test.cpp").write_text(PROGRAM)
    exe = tmp_path / "test_queued_work"
    build = [CXX, "-O1", "-std=c++20", "-pthread", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}",
             f"-I{KERNEL_LIB}", str(tmp_path / "test.cpp"), "-o", str(exe)]
    res = subprocess.run(build, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"build failed:\n{' '.join(build)}\n{res.stderr}"
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "queued work: ok" in res.stdout, res.stdout + res.stderr
