"""Build and set-up times (issue 28): how long a developer or a vendor waits.

    python benchmarks/bench_build.py [--only ROW ...] [--all] [--json out.json]
                                     [--dry-run] [--keep] [--workdir DIR] [--kernel FILE]

Rows (every one in a fresh temporary folder; nothing here touches the repo's
own build/ folders or installs into the venv):

  acme-clean        examples/acme_backend copied without its build/ folder, then
                    `pip wheel --no-build-isolation --no-deps` of the copy: a clean
                    build of the reference backend (target: 5 min).
  acme-one-kernel   in that same copy, after acme-clean: a comment line appended
                    to one kernel file (--kernel, default kernels/copy.cpp), then
                    the same `pip wheel` again: the incremental rebuild a kernel
                    writer waits for (target: 20 s). Selecting it runs acme-clean.
  scaffold-first    README's vendor's day: `flsdk new-backend zeta --out zeta`
                    in an empty folder, then in zeta/ the first
                    `pip install --no-build-isolation .`, with `--no-deps --target
                    <tmp>/site` added: the same build, installed into a throwaway
                    folder, because a second autoloaded PrivateUse1 backend in the
                    venv would break acme, and `--target` without `--no-deps` would
                    download torch. Timed: the pip install (target: 60 s) and the
                    whole (new-backend, which runs `flsdk gen`, plus the install).
  fresh-clone-main  (long, only with --only or --all) `git clone` of this repo
                    (its committed HEAD, from the local repo: no network) and
                    `./run main` in the clone (target: 8 min). torch is not
                    downloaded: FLSDK_VENV points at a throwaway venv whose
                    site-packages reads this venv's through a .pth line, so torch
                    and the wheels already installed here count as installed and
                    this venv is only read. What is timed is the rest: ./run's pip
                    install of flsdk (editable, from the clone), the acme build
                    (clean unless ccache is installed, which ./run then uses, as
                    in CI), and the ResNet-18 demo.
  fresh-clone-ci    (long, only with --only or --all) the same with `.ci/run`
                    (the whole test suite; target: 25 min).

Prints machine facts (cores, CPU model, compiler, ccache, load average at the
start) and a table of the times against the targets; `--json` writes them too.
A benchmark measures: it exits 0 whatever the times, and non-zero only when a
step fails (its log's tail is printed). `--dry-run` prints the commands and runs
none of them. The repo's acme build takes a lock (/tmp/acme_build.lock) that
`./run` takes too; these rows do not (their build folders are their own), so a
build running next to them shows in the load average, not as a wait.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACME = ROOT / "examples" / "acme_backend"
HEARTBEAT_S = 30.0
LOG_TAIL_LINES = 60


@dataclass(frozen=True)
class Row:
    target_s: float
    target: str  # the wording
    long: bool = False


ROWS = {
    "acme-clean": Row(300, "acme clean build ≤ 5 min"),
    "acme-one-kernel": Row(20, "rebuild after editing one kernel ≤ 20 s"),
    "scaffold-first": Row(60, "scaffold's first pip install ≤ 60 s"),
    "fresh-clone-main": Row(480, "fresh clone `./run main` ≤ 8 min", long=True),
    "fresh-clone-ci": Row(1500, "`.ci/run` ≤ 25 min", long=True),
}


class StepFailed(Exception):
    def __init__(self, step: str, rc: int, log: Path | None, tail: str):
        super().__init__(f"{step}: exit {rc}")
        self.step, self.rc, self.log, self.tail = step, rc, log, tail


# ------------------------------------------------------------------ machine facts


def _first_line(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def machine() -> dict:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cxx = os.environ.get("CXX") or "c++"
    launcher = os.environ.get("CMAKE_CXX_COMPILER_LAUNCHER", "")
    ccache_path = shutil.which("ccache")
    if "ccache" in launcher:
        ccache = f"on (CMAKE_CXX_COMPILER_LAUNCHER={launcher})"
    elif ccache_path:
        ccache = ("off for acme-clean/acme-one-kernel/scaffold-first (no launcher set); "
                  f"installed ({ccache_path}), so ./run uses it in the fresh-clone rows")
    else:
        ccache = "off (not installed)"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "cpu_model": model or platform.processor() or "unknown",
        "compiler": f"{cxx}: {_first_line([cxx, '--version']) or 'not found'}",
        "cmake": _first_line(["cmake", "--version"]),
        "ccache": ccache,
        "build_parallel_level": os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL"),
        "load_average_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "commit": _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
    }


# ------------------------------------------------------------------ running steps


def _env(extra: dict | None = None) -> dict:
    """This environment with this interpreter's bin/ first on PATH (as an activated
    venv has it: the scaffold's build finds cmake, ninja and flsdk there)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    env.update(extra or {})
    return env


def _progress_line(log: Path) -> str:
    """The last ninja progress line of a build log (`[12/345] Building ...`: ninja
    prints it when that step is done, writing to a file), or the log's last line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if re.match(r"\s*\[\d+/\d+\]", line):
            return line.strip()[:110]
    return lines[-1].strip()[:110] if lines else ""


class Runner:
    def __init__(self, dry_run: bool, logs: Path | None):
        self.dry_run, self.logs = dry_run, logs
        self.steps: list[dict] = []

    def say(self, text: str) -> None:
        print(text, flush=True)

    def action(self, what: str, fn) -> None:
        """A step in Python (copying, editing a file): printed, not timed."""
        self.say(f"  - {what}")
        if not self.dry_run:
            fn()

    def run(self, row: str, step: str, cmd: list[str], cwd: Path, env: dict | None = None,
            timed: bool = True) -> float | None:
        """Run `cmd` in `cwd`, its output to a log file, a progress line every
        HEARTBEAT_S; seconds of wall time (None in a dry run). Raises StepFailed."""
        envs = "".join(f"{k}={shlex.quote(v)} " for k, v in (env or {}).items())
        shown = f"(cd {shlex.quote(str(cwd))} && {envs}{shlex.join(cmd)})"
        self.say(f"  $ {shown}")
        record = {"row": row, "step": step, "command": shown, "timed": timed,
                  "load_at_start": os.getloadavg()[0]}
        if self.dry_run:
            self.steps.append({**record, "seconds": None, "status": "dry-run"})
            return None
        log = self.logs / f"{row}.{re.sub(r'[^A-Za-z0-9]+', '_', step)}.log"
        start = time.perf_counter()
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, cwd=cwd, env=_env(env), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            while True:
                try:
                    rc = proc.wait(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    self.say(f"    ... {time.perf_counter() - start:.0f} s  {_progress_line(log)}")
        seconds = time.perf_counter() - start
        status = "ok" if rc == 0 else f"failed (exit {rc})"
        load_at_end = os.getloadavg()[0]
        self.steps.append({**record, "seconds": seconds, "status": status, "log": str(log),
                           "load_at_end": load_at_end})
        self.say(f"    {step}: {seconds:.1f} s (1-min load average {record['load_at_start']:.1f} "
                 f"at the start, {load_at_end:.1f} at the end){'' if rc == 0 else ', ' + status}")
        if rc != 0:
            lines = log.read_text(errors="replace").splitlines()
            raise StepFailed(step, rc, log, "\n".join(lines[-LOG_TAIL_LINES:]))
        return seconds


# ------------------------------------------------------------------ the rows


def _copy_acme(dest: Path) -> None:
    shutil.copytree(ACME, dest, ignore=lambda folder, names: (
        {"build"} if Path(folder) == ACME else set()) | {n for n in names if n == "__pycache__"})


def _pip_wheel(src: Path, wheels: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
            "-w", str(wheels), str(src)]


def row_acme(r: Runner, base: Path, rows: list[str], kernel: str) -> list[dict]:
    out = []
    copy, wheels = base / "acme_backend", base / "wheels"
    r.say(f"\n== acme-clean: {ROWS['acme-clean'].target}")
    r.action(f"copy {ACME.relative_to(ROOT)} to {copy} without its build/ folder",
             lambda: _copy_acme(copy))
    seconds = r.run("acme-clean", "pip wheel (clean)", _pip_wheel(copy, wheels), base)
    out.append({"row": "acme-clean", "what": "pip wheel of a clean copy", "seconds": seconds,
                "target_s": ROWS["acme-clean"].target_s})
    if "acme-one-kernel" in rows:
        r.say(f"\n== acme-one-kernel: {ROWS['acme-one-kernel'].target}")
        path = copy / kernel

        def touch():
            if not path.is_file():
                raise FileNotFoundError(f"--kernel {kernel}: no such file in the copy")
            with open(path, "a") as handle:
                handle.write(f"// bench_build.py: edited at {datetime.datetime.now().isoformat()}\n")

        r.action(f"append a comment line to {kernel}", touch)
        seconds = r.run("acme-one-kernel", "pip wheel (one kernel edited)",
                        _pip_wheel(copy, wheels), base)
        out.append({"row": "acme-one-kernel", "what": f"pip wheel after editing {kernel}",
                    "seconds": seconds, "target_s": ROWS["acme-one-kernel"].target_s})
    return out


def _flsdk() -> list[str]:
    script = Path(sys.executable).parent / "flsdk"
    return [str(script)] if script.exists() else [sys.executable, "-m", "flsdk.cli"]


def row_scaffold(r: Runner, base: Path) -> list[dict]:
    r.say(f"\n== scaffold-first: {ROWS['scaffold-first'].target}")
    folder = base / "vendor"
    r.action(f"create the empty folder {folder}", lambda: folder.mkdir(parents=True))
    gen = r.run("scaffold-first", "flsdk new-backend",
                [*_flsdk(), "new-backend", "zeta", "--out", "zeta"], folder)
    build = r.run("scaffold-first", "pip install (first)",
                  [sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps",
                   "--target", str(base / "site"), "."], folder / "zeta")
    whole = None if build is None else gen + build
    return [{"row": "scaffold-first", "what": "first pip install (the build)", "seconds": build,
             "target_s": ROWS["scaffold-first"].target_s},
            {"row": "scaffold-first", "what": "whole: new-backend + first pip install",
             "seconds": whole, "target_s": None}]


def row_fresh_clone(r: Runner, base: Path, name: str) -> list[dict]:
    command = ["./run", "main"] if name == "fresh-clone-main" else [".ci/run"]
    r.say(f"\n== {name}: {ROWS[name].target} (long)")
    clone, venv = base / "clone", base / "venv"
    # set-up, not timed against the target: the throwaway venv that reads this one's packages
    r.run(name, "venv (set-up)", [sys.executable, "-m", "venv", str(venv)], base, timed=False)

    def link_site_packages():
        import sysconfig

        mine = sysconfig.get_paths()["purelib"]
        theirs = next((venv / "lib").glob("python*/site-packages"))
        (theirs / "_bench_build_reuse.pth").write_text(mine + "\n")

    r.action(f"make {venv} read this venv's site-packages (a .pth line): torch is not downloaded",
             link_site_packages)
    start = time.perf_counter()
    clone_s = r.run(name, "git clone", ["git", "clone", "--quiet", str(ROOT), str(clone)], base)
    run_s = r.run(name, shlex.join(command), command, clone, env={"FLSDK_VENV": str(venv)})
    whole = None if run_s is None else time.perf_counter() - start
    return [{"row": name, "what": f"git clone + {shlex.join(command)} (torch already installed)",
             "seconds": whole, "target_s": ROWS[name].target_s, "clone_s": clone_s}]


# ------------------------------------------------------------------ report


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def table(results: list[dict], info: dict) -> str:
    out = [f"machine: {info['cores']} cores ({info['cores_usable']} usable), {info['cpu_model']}",
           f"compiler: {info['compiler']}; {info['cmake'] or 'cmake not found'}",
           f"ccache: {info['ccache']}",
           "load average at start: " + ", ".join(f"{x:.2f}" for x in info["load_average_at_start"])
           + f"; commit {info['commit']}, Python {info['python']}", "",
           "| row | what is timed | seconds | target |", "| --- | --- | --- | --- |"]
    for res in results:
        target = "-"
        if res["target_s"] is not None:
            met = res["seconds"] is not None and res["seconds"] <= res["target_s"]
            mark = "" if res["seconds"] is None else (" ✓" if met else " ✗")
            limit = res["target_s"]
            target = f"≤ {limit / 60:g} min{mark}" if limit >= 120 else f"≤ {limit:g} s{mark}"
        out.append(f"| {res['row']} | {res['what']} | {_fmt(res['seconds'])} | {target} |")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="rows: " + ", ".join(f"{n} ({'long, ' if r.long else ''}{r.target})"
                                    for n, r in ROWS.items()))
    parser.add_argument("--only", nargs="+", choices=list(ROWS), metavar="ROW",
                        help="run only these rows (choices: %(choices)s); default: every row "
                             "that is not long")
    parser.add_argument("--all", action="store_true", help="every row, the long ones too")
    parser.add_argument("--json", help="write machine facts and times as JSON here")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--workdir", help="make the temporary folder here (default: the system's)")
    parser.add_argument("--kernel", default="kernels/copy.cpp",
                        help="the kernel file acme-one-kernel edits (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.only and args.all:
        parser.error("--only and --all exclude each other")
    selected = list(ROWS) if args.all else args.only or [n for n, r in ROWS.items() if not r.long]
    if "acme-one-kernel" in selected and "acme-clean" not in selected:
        selected.append("acme-clean")  # it edits acme-clean's built copy
    selected = [n for n in ROWS if n in selected]

    info = machine()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    print(f"bench_build.py, {started}: rows {', '.join(selected)}"
          f"{' (dry run: nothing is run)' if args.dry_run else ''}")
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in info['load_average_at_start'])} "
          f"on {info['cores']} cores", flush=True)

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.gettempdir())
    if args.dry_run:
        base = workdir / "bench_build-DRYRUN"
    else:
        workdir.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="bench_build-", dir=workdir))
        (base / "logs").mkdir()
        print(f"working in {base} (logs in {base / 'logs'})", flush=True)
    runner = Runner(args.dry_run, base / "logs")

    jobs = []
    if "acme-clean" in selected:
        jobs.append(("acme-clean", lambda b: row_acme(runner, b, selected, args.kernel)))
    if "scaffold-first" in selected:
        jobs.append(("scaffold-first", lambda b: row_scaffold(runner, b)))
    for name in ("fresh-clone-main", "fresh-clone-ci"):
        if name in selected:
            jobs.append((name, lambda b, name=name: row_fresh_clone(runner, b, name)))

    results, failures = [], []
    for name, job in jobs:
        sub = base / name
        if not args.dry_run:
            sub.mkdir()
        try:
            results += job(sub)
        except (StepFailed, OSError) as exc:
            failures.append({"row": name, "error": str(exc)})
            print(f"\n!! {name} failed: {exc}", file=sys.stderr)
            if isinstance(exc, StepFailed):
                print(f"-- last {LOG_TAIL_LINES} lines of {exc.log} --\n{exc.tail}\n-- end of log --",
                      file=sys.stderr, flush=True)

    print("\n" + table(results, info))
    if failures:
        print("\nfailed: " + "; ".join(f"{f['row']} ({f['error']})" for f in failures))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"script": "bench_build.py", "started": started, "dry_run": args.dry_run,
                       "machine": info, "rows": results, "steps": runner.steps,
                       "failures": failures, "workdir": str(base)}, handle, indent=1)
    if not args.dry_run:
        if args.keep or failures:
            why = " (a step failed: its logs are there)" if failures and not args.keep else ""
            print(f"kept {base}{why}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
