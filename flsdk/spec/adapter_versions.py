"""The versions of the adapter headers a vendor implements, and what changed.

`flsdk/static_glue/runtime_adapter.h` and `ccl_adapter.h` each carry a
major/minor version (`k<Name>AdapterVersionMajor/Minor`) and a "Changes:" list in
their comments, newest first (the headers are the one place both live; this
module reads them). A backend's device.yaml records the version its adapters were
written for (`adapter_versions: {runtime: "1.1", ccl: "1.0"}`); `flsdk gen` and
`flsdk check` compare the two with `compare()`:

* the same version: nothing to say;
* an older minor of the same major: a note listing the changes since (the
  adapter keeps working; the changes say what the glue now promises or offers);
* an older major: an error (a declaration or a promise changed: the adapter must
  be revisited), with the changes;
* a newer version than this flsdk ships: an error (the backend needs a newer flsdk).

A device.yaml without the field predates recorded versions: its adapters are
taken as written for 1.0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

STATIC_GLUE_DIR = Path(__file__).resolve().parent.parent / "static_glue"

# adapter key in device.yaml -> (header, the C++ name of its version constants)
HEADERS = {"runtime": ("runtime_adapter.h", "RuntimeAdapter"),
           "ccl": ("ccl_adapter.h", "CclAdapter")}
# What a device.yaml without `adapter_versions` was written for.
UNRECORDED = (1, 0)

_ENTRY = re.compile(r"^//\s+(\d+)\.(\d+)\s{2,}(\S.*)$")
_MORE = re.compile(r"^//\s{6,}(\S.*)$")


@dataclass(frozen=True)
class HeaderVersion:
    header: str                                      # "runtime_adapter.h"
    version: tuple[int, int]
    changes: dict[tuple[int, int], str]              # version -> what it changed

    def changes_after(self, old: tuple[int, int]) -> list[str]:
        """The entries newer than `old`, oldest first, as "X.Y: text"."""
        return [f"{v[0]}.{v[1]}: {text}" for v, text in sorted(self.changes.items()) if v > old]


def read_header(header: str, cpp_name: str, text: str | None = None) -> HeaderVersion:
    """The version and changes list of `header` (flsdk/static_glue/<header>)."""
    text = (STATIC_GLUE_DIR / header).read_text() if text is None else text
    parts = []
    for part in ("Major", "Minor"):
        m = re.search(rf"constexpr int k{cpp_name}Version{part} = (\d+);", text)
        if m is None:
            raise ValueError(f"{header} defines no k{cpp_name}Version{part}")
        parts.append(int(m.group(1)))
    changes: dict[tuple[int, int], str] = {}
    current = None
    in_list = False
    for line in text.splitlines():
        if line.strip() == "// Changes:":
            in_list = True
            continue
        if not in_list:
            continue
        entry, more = _ENTRY.match(line), _MORE.match(line)
        if entry:
            current = (int(entry.group(1)), int(entry.group(2)))
            changes[current] = entry.group(3)
        elif more and current is not None:
            changes[current] += " " + more.group(1)
        else:
            break
    return HeaderVersion(header, (parts[0], parts[1]), changes)


def shipped() -> dict[str, HeaderVersion]:
    """The headers this flsdk copies into generated/, by adapter key."""
    return {key: read_header(header, cpp) for key, (header, cpp) in HEADERS.items()}


def parse(text: str) -> tuple[int, int] | None:
    """"1.2" -> (1, 2); None when it is not MAJOR.MINOR."""
    m = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Finding:
    adapter: str        # "runtime" | "ccl"
    error: bool         # False: a note (the adapter still works)
    message: str


def compare(recorded: dict[str, str], collectives_native: bool,
            headers: dict[str, HeaderVersion] | None = None) -> list[Finding]:
    """What to tell a backend whose device.yaml records `recorded` (adapter key ->
    "X.Y"; keys absent when unrecorded). The ccl adapter counts only when the backend
    implements it (collectives: native)."""
    headers = shipped() if headers is None else headers
    findings = []
    for key, head in headers.items():
        if key == "ccl" and not collectives_native:
            continue
        text = recorded.get(key)
        old = parse(text) if text is not None else UNRECORDED
        if old is None or old == head.version:
            continue  # a malformed value is the schema's to report
        now = f"{head.version[0]}.{head.version[1]}"
        was = f"{old[0]}.{old[1]}" + ("" if text is not None else " (no adapter_versions recorded)")
        if old > head.version:
            findings.append(Finding(key, True, (
                f"the {key} adapter was written for {head.header} {was}, newer than this flsdk's "
                f"{now}: upgrade flsdk (pip install -U flsdk)")))
            continue
        changes = "; ".join(head.changes_after(old)) or "(no changes listed)"
        update = f'set `adapter_versions: {{{key}: "{now}"}}` in device.yaml'
        if old[0] < head.version[0]:
            findings.append(Finding(key, True, (
                f"the {key} adapter was written for {head.header} {was}; this flsdk's is {now}, a new "
                f"major version: declarations or promises changed and the adapter must be revisited. "
                f"Changes: {changes}. Then {update}")))
        else:
            findings.append(Finding(key, False, (
                f"the {key} adapter was written for {head.header} {was}; this flsdk's is {now} "
                f"(compatible). Changes: {changes}. Once the adapter follows them, {update}")))
    return findings


def check_descriptor(desc) -> tuple[list[str], list]:
    """(notes, errors) for a loaded DeviceDescriptor: notes as `file:line: message`
    strings, errors as SpecErrors naming file, line and field
    (adapter_versions.<key>, or adapter_versions when it is absent)."""
    from .yamlfile import load_yaml

    findings = compare(desc.adapter_versions, desc.collectives == "native")
    if not findings:
        return [], []
    doc = load_yaml(desc.file)
    notes, errors = [], []
    for f in findings:
        path = ("adapter_versions", f.adapter) if f.adapter in desc.adapter_versions else ("adapter_versions",)
        if f.error:
            errors.append(doc.error(path, f.message))
        else:
            notes.append(f"{desc.file}:{doc.line(path)}: {f.message}")
    return notes, errors
