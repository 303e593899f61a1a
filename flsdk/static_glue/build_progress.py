"""Progress of a backend build, on the terminal (sources.cmake, flsdk_backend_checks).

`pip install .` shows nothing of the build it runs until it ends (it keeps the
build's output for the error report), and compiling a backend takes from seconds
to minutes. This script is run by the build itself:

    build_progress.py start <build dir> <name> <ninja>    before anything compiles:
        counts what this build will compile (a dry run of ninja, which knows)
    build_progress.py compile <build dir> <root> -- <compiler command...>
    build_progress.py link <build dir> -- <linker command...>

`compile` and `link` print one line each ("zeta build: 3/14 kernels/relu.cpp,
11 left") and then become the command (exec): its output and exit status are the
command's own. Lines go to the terminal (/dev/tty), which pip does not capture;
without a terminal (CI) nothing is printed: pip -v, or the build log, shows
ninja's own [n/N] lines there. FLSDK_BUILD_PROGRESS=<file> appends the lines to
that file instead, =0 turns them off.

Standard library only.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time

STATE = "flsdk_build_progress.json"


def _out(line: str) -> None:
    target = os.environ.get("FLSDK_BUILD_PROGRESS", "")
    if target == "0":
        return
    try:
        with open(target or "/dev/tty", "a") as f:
            f.write(line + "\n")
    except OSError:  # no terminal: the build log has ninja's own lines
        pass


def _update(build_dir: str, change) -> dict:
    """Read, change and write the state under a lock (compiles run in parallel)."""
    path = os.path.join(build_dir, STATE)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        try:
            state = json.loads(f.read() or "{}")
        except ValueError:
            state = {}
        change(state)
        f.seek(0)
        f.truncate()
        f.write(json.dumps(state))
        return state


def start(build_dir: str, name: str, ninja: str) -> int:
    total = None
    if os.path.basename(ninja).startswith("ninja"):
        # A dry run from the running build's own state: what is left to do now,
        # before any compile, is what this build compiles.
        try:
            proc = subprocess.run([ninja, "-C", build_dir, "-n"], capture_output=True, text=True,
                                  timeout=60)
            total = sum(1 for line in proc.stdout.splitlines() if "] Building " in line)
        except (OSError, subprocess.SubprocessError):
            total = None
    _update(build_dir, lambda s: s.update(name=name, total=total, done=0, start=time.time()))
    if total:
        _out(f"{name} build: {total} file(s) to compile")
    return 0


def _exec(command: list[str]) -> int:
    if not command:
        print("build_progress.py: no command after --", file=sys.stderr)
        return 2
    os.execvp(command[0], command)
    return 127  # not reached


def _argument(command: list[str], flag: str) -> str | None:
    return next((command[i + 1] for i, a in enumerate(command[:-1]) if a == flag), None)


def compile_(build_dir: str, root: str, command: list[str]) -> int:
    try:
        _say_compiling(build_dir, root, command)
    except Exception:  # progress is a courtesy: the compile runs whatever happens here
        pass
    return _exec(command)


def _say_compiling(build_dir: str, root: str, command: list[str]) -> None:
    def bump(state):
        state["done"] = state.get("done", 0) + 1

    state = _update(build_dir, bump)
    source = _argument(command, "-c")
    shown = os.path.relpath(source, root) if source and os.path.isabs(source) else (source or "?")
    if source and shown.startswith(".."):
        shown = os.path.basename(source)
    done, total = state.get("done", 0), state.get("total")
    name = state.get("name", "backend")
    seconds = int(time.time() - state.get("start", time.time()))
    if total:
        _out(f"{name} build: {done}/{total} {shown}, {max(total - done, 0)} left ({seconds} s)")
    else:
        _out(f"{name} build: {shown} ({done} compiled, {seconds} s)")


def link(build_dir: str, command: list[str]) -> int:
    try:
        with open(os.path.join(build_dir, STATE)) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    try:
        output = _argument(command, "-o")  # archiving a static library (ar, ranlib) has none
        if output:
            seconds = int(time.time() - state.get("start", time.time()))
            _out(f"{state.get('name', 'backend')} build: linking {os.path.basename(output)} ({seconds} s)")
    except Exception:
        pass
    return _exec(command)


def main(argv: list[str]) -> int:
    if "--" in argv:
        at = argv.index("--")
        args, command = argv[1:at], argv[at + 1:]
    else:
        args, command = argv[1:], []
    if args[:1] == ["start"] and len(args) == 4:
        return start(args[1], args[2], args[3])
    if args[:1] == ["compile"] and len(args) == 3:
        return compile_(args[1], args[2], command)
    if args[:1] == ["link"] and len(args) == 2:
        return link(args[1], command)
    print("usage: build_progress.py start <build dir> <name> <ninja> | "
          "compile <build dir> <root> -- <command> | link <build dir> -- <command>",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
