"""acme's kernels are written for a discrete, asynchronous device (issue 26): the
host part of a kernel never reads device memory, and the device part, queued with
launch(), may run after the kernel returned. So a device part must capture by
value and must not hold an at::Tensor (it would keep storage alive from a worker
thread, and a host-visible tensor invites a host read). C++ cannot check what a
lambda captures; this test reads every launch's capture list instead."""

from __future__ import annotations

import re
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "kernels"

# A name declared as a tensor anywhere in the file: `at::Tensor x`, `const at::Tensor& x`,
# `at::Tensor& x`, `std::optional<at::Tensor> x`.
TENSOR_DECL = re.compile(r"(?:at::Tensor|std::optional<at::Tensor>)\s*&?\s*([A-Za-z_]\w*)\b")
LAUNCH = re.compile(r"\blaunch(?:_plain|_inplace)?\s*\(")


def _balanced(text: str, start: int, open_ch: str, close_ch: str) -> str:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    raise AssertionError(f"unbalanced {open_ch}{close_ch} at offset {start}")


def _split_top_level(captures: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in captures:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def launches(path: Path):
    """(line, offset, capture list) of every lambda handed to launch() in `path`."""
    text = path.read_text()
    for m in LAUNCH.finditer(text):
        if text[max(0, m.start() - 10):m.start()].rstrip().endswith(("inline void", "void")):
            continue  # the definition of launch itself
        bracket = text.find("[", m.end())
        paren_close = m.end() + len(_balanced(text, m.end() - 1, "(", ")"))
        if bracket == -1 or bracket > paren_close:
            continue  # launch(on, body) passing a named callable: checked where it is built
        yield text.count("\n", 0, m.start()) + 1, m.start(), _balanced(text, bracket, "[", "]")


def _is_tensor_here(text: str, offset: int, name: str) -> bool:
    """Whether `name`'s last declaration before `offset` makes it an at::Tensor. Names
    are reused across functions (`a` is a tensor in one kernel, alpha in the next), so
    the nearest declaration wins: a tensor declaration, or any other `type name` /
    `name = ...` that comes after it."""
    before = text[:offset]
    tensor = [m.start() for m in TENSOR_DECL.finditer(before) if m.group(1) == name]
    if not tensor:
        return False
    other = re.compile(
        rf"(?:\b(?:double|float|bool|int|int64_t|uint64_t|size_t|auto|(?!Tensor\b)[A-Z]\w*)\s*[&*]?\s*"
        rf"|\w\s*\*\s*|,\s*)\b{re.escape(name)}\b\s*[=;,){{]")
    others = [m.start() for m in other.finditer(before)]
    return not others or max(others) < max(tensor)


def problems(path: Path) -> list[str]:
    text = path.read_text()
    found = []
    for line, offset, captures in launches(path):
        for cap in _split_top_level(captures):
            where = f"{path.name}:{line}: capture `{cap}`"
            if cap in ("=", "&", "this", "*this") or cap.startswith("&"):
                found.append(f"{where} is by reference or implicit: capture each value explicitly")
                continue
            name, _, init = (s.strip() for s in cap.partition("="))
            source = init or name
            if re.fullmatch(r"[A-Za-z_]\w*", source) and _is_tensor_here(text, offset, source):
                found.append(f"{where} copies the at::Tensor `{source}` into device work: "
                             f"capture DeviceTensor({source}) or the values it needs")
    return found


def test_every_device_part_captures_values_and_no_tensor():
    files = sorted(KERNELS.glob("*.cpp")) + sorted(KERNELS.glob("**/*.h"))
    total = sum(1 for f in files for _ in launches(f))
    assert total > 100, f"found only {total} launches under {KERNELS}: is the scan broken?"
    found = [p for f in files for p in problems(f)]
    assert not found, "\n".join(found)


def test_the_scan_catches_a_tensor_capture_and_a_default_capture(tmp_path):
    bad = tmp_path / "bad.cpp"
    bad.write_text(
        "at::Tensor k(const at::Tensor& self) {\n"
        "  at::Tensor out = at::empty_like(self);\n"
        "  launch(out, [self, o = DeviceTensor(out)] { });\n"
        "  launch(out, [&] { });\n"
        "  launch(out, [n = self] { });\n"
        "  return out;\n"
        "}\n")
    found = problems(bad)
    assert len(found) == 3, found
    assert "bad.cpp:3" in found[0] and "`self`" in found[0]
    assert "implicit" in found[1]
    assert "`n = self`" in found[2]
