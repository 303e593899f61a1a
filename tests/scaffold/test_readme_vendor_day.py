"""README's "A vendor's day", run verbatim (issue 27: "followed literally in a
fresh venv, runs start to finish with no warning the user did not cause and no
failing step").

test_vendor_day.py and test_first_day.py test the day's steps one by one
against a build of the test session; this test runs the README's block itself,
every line as written, in one `bash` with `set -euo pipefail`:

* The block is the one fenced block of the section `## A vendor's day`, under
  the marker comment that says this test runs it. README's block starts with
  its own fresh venv (`python3 -m venv ../zeta-venv`) and says where it runs:
  the root of a flsdk clone. The clone is a copy of this checkout (the files
  git tracks or would track: committed, changed and new ones, no build output
  and no .venv) in a fresh temporary folder, so the block's `.` in
  `pip install -e ".[vendor]"` is this checkout's tree, and its `../zeta` and
  `../zeta-venv` land in the temporary folder too. That copy is the only
  mapping: no line of the block is changed.
* torch comes from the block's own `pip install torch==2.13.0` (this
  machine's pip configuration finds the CPU build on local disk).
* The environment is a user's login shell, not this test's: PATH without this
  test's venv, HOME, locale, and the machine's pip/pyenv configuration; nothing
  of PYTHONPATH, VIRTUAL_ENV, TORCH_* or build caches. PIP_DISABLE_PIP_VERSION_CHECK=1
  silences pip's "a new release of pip is available" notice (no network here).
* The block has one line a human acts on rather than a shell: the comment
  "write the body of kernels/relu.cpp ...". After it (a no-op for bash) the
  script does what it says: it writes the kernel of the scaffold's own
  docs/writing-a-kernel.md into kernels/relu.cpp (that kernel has no stub
  line). A comment-only line this test does not know fails the test, so a new
  human step gets its action here.
* Warnings: every line of the run (stderr and stdout) that mentions one fails
  the test unless ALLOWED_WARNINGS lists it for its step, with the reason the
  user caused it.
* Before each line the script prints `[vendor day i/n] <line>` (to stdout and
  stderr), which is the progress a human sees with `pytest -s`, and how a
  failure or a warning is attributed to its step.

Then: every step exited 0, the backend imports and runs ops on its device (the
block's own `python -c` line printed its tensor; relu is native and runs),
nothing warns except what ALLOWED_WARNINGS lists with a reason, and what the
README promises exists (the backend repo with its generated
files, conformance tests that passed, a manylinux wheel in dist/ whose
autoload was checked in a fresh venv, the readiness checklist's version record
torch_fl.lock.json).

Slow (a torch install, three builds of the scaffold, a release check venv: 15 min
on this 2-core machine, 23 min while other builds share it): `--run-slow`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## A vendor's day"
MARKER = "<!-- tests/scaffold/test_readme_vendor_day.py runs the block below verbatim"
STEP = "[vendor day "

# What a human does at the block's comment-only lines: {comment prefix: shell
# command run right after that comment}. Run with this test's Python (it is the
# human's hand, not the vendor's venv).
WRITE_RELU = r"""
import pathlib, re
guide = pathlib.Path("docs/writing-a-kernel.md").read_text()
code = re.search(r"```cpp\n(// kernels/relu\.cpp\n.*?)```", guide, re.S).group(1)
stub = pathlib.Path("kernels/relu.cpp")
assert "// flsdk:stub" in stub.read_text(), "kernels/relu.cpp is not the stub the README speaks of"
assert "// flsdk:stub" not in code
stub.write_text(code)
print("(the test wrote kernels/relu.cpp from docs/writing-a-kernel.md)")
"""
HUMAN_STEPS = {
    "# write the body of kernels/relu.cpp": f"{shlex.quote(sys.executable)} -c {shlex.quote(WRITE_RELU)}",
}

# Lines of the run (stdout or stderr) that mention a warning and are expected,
# each with why the user caused it: (step the line belongs to, regex, reason).
# Every other line mentioning "warn" (any case: Python's `...Warning:`, pip's
# `WARNING:`, a compiler's `warning:`, pytest's "warnings summary") fails the test.
ALLOWED_WARNINGS: list[tuple[str, str, str]] = [
    ("flsdk check",
     r"^warning: \S*device\.yaml: \d+ op\(s\) must be native: no CPU kernel exists \(",
     "the README's `flsdk check` line says it warns about the few ops that must be native: "
     "a check the user asked for, listing what the new backend still lacks"),
    ("flsdk readiness --model none",
     r"^(production readiness of zeta:0: WARN|[1-7]\. \[WARN\] [a-z_]+ )",
     "the production checklist the user ran: a day-one backend has no versions to report, "
     "no fault injection, one device and no model given, and the checklist says so (exit 0)"),
]


def readme_block(readme: str) -> list[str]:
    """The lines of the one fenced block of README's vendor's day section."""
    start = readme.index(f"\n{SECTION}\n")
    end = readme.find("\n## ", start + 1)
    section = readme[start:end if end >= 0 else len(readme)]
    assert MARKER in section, f"README's {SECTION!r} lost the marker saying this test runs its block"
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 1, f"README's {SECTION!r} has {len(blocks)} fenced blocks, expected one"
    return [line for line in blocks[0].splitlines() if line.strip()]


def script_of(lines: list[str]) -> str:
    """The bash script: each README line verbatim, after a progress line; after
    a human step's comment, the test's action for it."""
    out = ["set -euo pipefail"]
    n = len(lines)
    for i, line in enumerate(lines, 1):
        shown = line if line.lstrip().startswith("#") else line.split("  #", 1)[0].rstrip()
        banner = shlex.quote(f"{STEP}{i}/{n}] {shown}")
        out += [f"echo {banner}; echo {banner} >&2", line]
        if line.lstrip().startswith("#"):
            actions = [cmd for prefix, cmd in HUMAN_STEPS.items() if line.lstrip().startswith(prefix)]
            assert len(actions) == 1, f"README's vendor's day has a human step this test cannot do: {line!r}"
            out.append(actions[0])
    return "\n".join(out) + "\n"


def copy_checkout(dest: Path) -> None:
    """This checkout as a clone with its working tree's changes: the files git
    tracks or would track (untracked ones that .gitignore does not exclude)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():  # (a tracked file deleted in the working tree is not there)
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def user_env(home: Path) -> dict:
    """A user's shell on this machine: no trace of this test's venv or settings."""
    test_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.realpath(p) != os.path.realpath(test_bin))
    env = {k: v for k, v in os.environ.items()
           if k in ("USER", "LOGNAME", "LANG", "LC_ALL", "TERM", "SHELL") or k.startswith(("PIP_", "PYENV"))}
    env.update(PATH=path, HOME=str(home), TMPDIR=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run_streaming(script: str, cwd: Path, env: dict, timeout: float) -> tuple[int, str, str]:
    """Run the script with bash; show its output as it comes (`pytest -s`), each
    step's banner with the elapsed time; return (code, stdout, stderr)."""
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    start = time.monotonic()
    captured = {"out": [], "err": []}

    def pump(stream, key):
        for line in stream:
            captured[key].append(line)
            if line.startswith(STEP):
                if key == "out":
                    print(f"\n[{time.monotonic() - start:6.0f} s] {line}", end="", flush=True)
            else:
                print(("  | " if key == "out" else "  ! ") + line, end="", flush=True)

    threads = [threading.Thread(target=pump, args=(proc.stdout, "out")),
               threading.Thread(target=pump, args=(proc.stderr, "err"))]
    for t in threads:
        t.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    for t in threads:
        t.join()
    print(f"\n[{time.monotonic() - start:6.0f} s] vendor's day ended with exit code {code}", flush=True)
    return code, "".join(captured["out"]), "".join(captured["err"])


def by_step(text: str) -> list[tuple[str, list[str]]]:
    """[(banner, lines printed after it)] of a captured stream."""
    steps: list[tuple[str, list[str]]] = [("(before the first step)", [])]
    for line in text.splitlines():
        if line.startswith(STEP):
            steps.append((line, []))
        else:
            steps[-1][1].append(line)
    return steps


def unexpected_warnings(text: str) -> list[str]:
    """Lines of a captured stream that mention a warning ALLOWED_WARNINGS does not
    allow in their step."""
    found = []
    for banner, lines in by_step(text):
        command = banner.split("] ", 1)[-1]
        for line in lines:
            if re.search(r"warn", line, re.I) and not any(
                    command == step and re.search(pattern, line) for step, pattern, _ in ALLOWED_WARNINGS):
                found.append(f"{banner}\n    {line}")
    return found


def test_readme_block_is_runnable_as_written():
    """Fast (default CI): the block is found, every comment-only line is a human
    step this test knows, and it starts in its own fresh venv from a flsdk clone
    with the torch the README pins; the slow test below runs it."""
    lines = readme_block((ROOT / "README.md").read_text())
    script = script_of(lines)
    assert script.count(STEP) == 2 * len(lines)
    assert lines[0].startswith("python3 -m venv ") and "/bin/activate" in lines[0], lines[0]
    install = next(line for line in lines if line.startswith("pip install torch"))
    assert install.startswith('pip install torch==2.13.0 && pip install -e ".[vendor]"'), install
    proc = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
@pytest.mark.build
def test_readme_vendors_day_runs_verbatim(tmp_path):
    lines = readme_block((ROOT / "README.md").read_text())
    work = tmp_path / "day"
    clone = work / "flsdk"
    home = work / "home"
    home.mkdir(parents=True)
    copy_checkout(clone)
    print(f"\nREADME's vendor's day: {len(lines)} lines, run in {clone}", flush=True)

    code, out, err = run_streaming(script_of(lines), clone, user_env(home), timeout=3600)

    last = by_step(out)[-1][0]
    assert code == 0, f"the vendor's day failed (exit {code}) at\n{last}\nstderr:\n{err[-4000:]}"
    assert out.count(STEP) == len(lines), "not every step ran"

    # The block's python -c line: the backend imports with torch and runs an op on its device.
    assert "tensor([2., 2., 2., 2.], device='zeta:0')" in out, out[-3000:]

    # No warning the user did not cause, on stderr nor on stdout (pytest prints its
    # warnings summary there).
    warnings = unexpected_warnings(err) + unexpected_warnings(out)
    assert not warnings, "warnings the user did not cause:\n" + "\n".join(warnings)

    zeta, venv = work / "zeta", work / "zeta-venv"
    # The backend repo new-backend promised, generated by `flsdk gen`.
    for name in ("pyproject.toml", "device.yaml", "generated/ops.lock.json", "kernels/relu.cpp",
                 "scripts/release.py"):
        assert (zeta / name).is_file(), f"zeta/{name} missing"
    # `pytest tests` and `pytest tests -k relu`: tests ran and passed (the day's exit codes say
    # none failed; the summaries say some ran).
    summaries = re.findall(r"^=+ (.*\b(?:passed|failed|error|no tests ran)\b.*) =+$", out, re.M)
    assert len(summaries) == 2 and all("passed" in s and "failed" not in s for s in summaries), summaries
    # The release: one manylinux wheel in dist/, its autoload checked in a fresh venv.
    wheels = sorted((zeta / "dist").glob("torch_fl_zeta-*.whl"))
    assert len(wheels) == 1 and "manylinux" in wheels[0].name, wheels
    report = json.loads(next(line for line in reversed(out.splitlines()) if line.startswith('{"autoloaded"')))
    assert report["autoloaded"] and report["loaded"] and report["result"] == [2.0] * 4, report
    # The readiness checklist ran on the new device and recorded the versions.
    assert "production readiness of zeta:0" in out
    record = json.loads((zeta / "torch_fl.lock.json").read_text())["versions"]
    assert record["backend"] == "zeta" and record["torch"].startswith("2.13.0"), record

    # relu is native now (the human step took) and runs on the device, in the day's venv.
    ops = subprocess.run([str(venv / "bin" / "flsdk"), "ops", "--op", "relu"], cwd=zeta, env=user_env(home),
                         capture_output=True, text=True, timeout=300)
    assert ops.returncode == 0 and re.search(r"\bnative\b", ops.stdout), ops.stdout + ops.stderr
    probe = ("import torch; x = torch.tensor([-1.0, 0.5, 2.0], device='zeta'); y = torch.relu(x); "
             "print(y.device, y.cpu().tolist())")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=work, env=user_env(home),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["zeta:0", "[0.0,", "0.5,", "2.0]"], run.stdout
    assert not re.search(r"warn", run.stderr, re.I), run.stderr
