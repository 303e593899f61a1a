"""Whether an installed backend is the build of its sources: nothing stale passes.

Every build of a backend records what it was built from (the generated
sources.cmake runs this file as a script at build time):

    python build_record.py write <source root> <package> <record.json> [<suffix> ...]

(the suffixes: kernels in the device's own language, device.yaml device_code, which
the build embeds: `.cl` files are sources of the build as `.cpp` files are)

The record (installed as <package>/_generated/build_record.json) holds the source
root and, for every file the build compiles or installs (CMakeLists.txt, cmake/,
generated/, kernels/, runtime/ and the package's Python files), its size, mtime and
SHA-256. `changed_files(record, root)` compares it with the files now: a file whose
size and mtime match is taken as unchanged (hashing only the rest), so the check
costs a stat per file. The backend's load(), its generated tests and `flsdk doctor`
refuse a build whose sources changed since, with the command that rebuilds it
(loader.py, REBUILD).

Standard library only: every backend ships a copy of this file.
"""

import hashlib
import json
import os
import sys

RECORD_NAME = "build_record.json"
REBUILD = "rebuild: pip install --no-build-isolation ."
# Set to 1 to load a build whose sources changed (a test that keeps an old build on purpose).
SKIP_ENV = "FLSDK_SKIP_BUILD_CHECK"

SOURCE_DIRS = ("cmake", "generated", "kernels", "runtime")
# (not pyproject.toml: its pytest or release settings change no code that is built)
TOP_FILES = ("CMakeLists.txt",)
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".inc", ".cmake",
                   ".py", ".json", ".toml")
# not compiled into the backend (acme's runtime/tests/ are standalone test programs)
SKIPPED_DIRS = ("__pycache__", "build", "dist", ".git", "tests")


def source_files(root, package, extra_suffixes=()):
    """Relative paths (with /) of the files a build of the backend at `root` reads
    (`extra_suffixes`: device code, `.cl`, read as sources too)."""
    suffixes = SOURCE_SUFFIXES + tuple(extra_suffixes)
    found = [name for name in TOP_FILES if os.path.isfile(os.path.join(root, name))]
    for top in SOURCE_DIRS + (package,):
        base = os.path.join(root, top)
        for folder, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            for name in sorted(files):
                if not name.endswith(suffixes) or name == RECORD_NAME:
                    continue
                found.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(found)


def _digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _entry(path):
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _digest(path)}


def make_record(root, package, extra_suffixes=()):
    root = os.path.abspath(root)
    extra = sorted(set(extra_suffixes))
    return {"root": root, "package": package, "extra_suffixes": extra,
            "files": {rel: _entry(os.path.join(root, rel))
                      for rel in source_files(root, package, extra)}}


def changed_files(record, root=None):
    """[(relative path, "changed" | "added" | "removed")] of the sources at `root`
    (default: the root the record was made from) against the record."""
    root = root or record["root"]
    files = record["files"]
    now = source_files(root, record["package"], record.get("extra_suffixes", ()))
    changes = [(rel, "removed") for rel in sorted(set(files) - set(now))]
    for rel in now:
        old = files.get(rel)
        if old is None:
            changes.append((rel, "added"))
            continue
        path = os.path.join(root, rel)
        st = os.stat(path)
        if st.st_size == old["size"] and st.st_mtime_ns == old["mtime_ns"]:
            continue
        if st.st_size != old["size"] or _digest(path) != old["sha256"]:
            changes.append((rel, "changed"))
    return sorted(changes)


def read_record(package_dir):
    """The record installed in a package folder, or None (a build from before records)."""
    path = os.path.join(package_dir, "_generated", RECORD_NAME)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def problem(package_dir, root=None):
    """Why the build installed at `package_dir` is not the build of the sources at
    `root` (default: those it was built from, when they are still there), or None.
    Sources that are gone (a wheel installed on another machine) are no problem."""
    record = read_record(package_dir)
    if record is None:
        return None
    root = os.path.abspath(root or record["root"])
    if not os.path.isfile(os.path.join(root, "device.yaml")):
        return None
    changes = changed_files(record, root)
    if not changes:
        return None
    # what the vendor wrote (kernels, device.yaml, specs, runtime) first: the
    # generated files only follow from it
    generated = ("generated/", f"{record['package']}/_generated/", "tests/generated/")
    changes.sort(key=lambda change: (change[0].startswith(generated), change[0]))
    shown = ", ".join(f"{rel} {how}" for rel, how in changes[:5])
    more = f" and {len(changes) - 5} more" if len(changes) > 5 else ""
    built_here = os.path.abspath(record["root"]) == root
    return (f"the installed {record['package']} ({package_dir}) is older than its sources in {root}"
            f"{'' if built_here else ' (it was built from ' + record['root'] + ')'}: "
            f"{shown}{more} since the build; {REBUILD} (in {root}; after `flsdk gen` when "
            "specs or kernels changed)")


def main(argv):
    if len(argv) < 5 or argv[1] != "write":
        print("usage: build_record.py write <source root> <package> <record.json> [<suffix> ...]",
              file=sys.stderr)
        return 2
    record = make_record(argv[2], argv[3], argv[5:])
    tmp = argv[4] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(tmp, argv[4])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
