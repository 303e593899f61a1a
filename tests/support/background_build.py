"""Builds that run beside the tests instead of before them.

Most tests are one Python process, so on CI's two cores one core is mostly idle
while they run. A build that takes minutes of CPU (the OpenCL example's, in
tests/scaffold/test_opencl_backend.py) starts when the session starts, at low
priority (`nice`: the tests keep their speed), and the tests that need it run at
the end of the session (tests/conftest.py moves them there), when it is done or
nearly so. Its minutes leave CI's critical path.

A job is a function run in a thread; its commands go through `run`, which
starts each in a process group of its own so `cancel` can stop the whole build
(pip, cmake, ninja, the compilers) when the tests end early.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

LOW_PRIORITY = ["nice", "-n", "10"] if shutil.which("nice") else []


class BackgroundJob:
    """`steps(job)` run in a thread from construction; `result()` waits for it."""

    def __init__(self, name: str, steps: Callable[[BackgroundJob], Any]):
        self.name = name
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._steps = steps
        self._value: Any = None
        self._error: BaseException | None = None
        self._procs: list[subprocess.Popen] = []
        self._cancelled = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._main, name=f"background {name}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._value = self._steps(self)
        except BaseException as e:  # handed to whoever waits, in result()
            self._error = e
        finally:
            self.finished = time.perf_counter()

    def run(self, cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
        """`cmd` at low priority, output captured; like subprocess.run(text=True)."""
        with self._lock:
            if self._cancelled:
                raise RuntimeError(f"{self.name}: cancelled")
            # A process group of its own (cancel kills it whole), but not a session of
            # its own: with the kernel's autogroup scheduling a new session gets an even
            # share of the CPU against the tests whatever its nice value.
            proc = subprocess.Popen(LOW_PRIORITY + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, process_group=0, **kw)
            self._procs.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            out, err = proc.communicate()
            raise RuntimeError(f"{self.name}: {' '.join(cmd[:4])} ... took over {timeout:.0f} s\n"
                               f"{out[-2000:]}{err[-2000:]}") from None
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def result(self, timeout: float) -> Any:
        """The steps' return value, waiting up to `timeout` s; re-raises what they raised."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.cancel()
            raise TimeoutError(f"{self.name}: not done after waiting {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self._value

    def seconds(self) -> float | None:
        """How long the steps took, once they are done."""
        return None if self.finished is None else self.finished - self.started

    def cancel(self) -> None:
        """Stop the running command and start no other (the session ends)."""
        with self._lock:
            self._cancelled = True
            for proc in self._procs:
                if proc.poll() is None:
                    _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
