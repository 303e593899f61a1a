"""Kernels defined with another signature than generated/kernels.h declares.

Such a definition is an overload nothing calls; the build fails on it in the
kernel file (-Werror=missing-declarations), but the compiler's message names
neither the expected signature nor kernels.h. `flsdk gen` compares each
`k_...(` definition it finds with the declaration first and says both, with the
file and line. Types are compared after dropping namespaces (`at::`, `c10::`,
`std::`) and parameter names, so an alias spelled another way is not reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .kernel_scan import DEFINITION_RE, SOURCE_SUFFIXES, STUB_MARKER

_NAMESPACES = re.compile(r"(?:\b(?:at|c10|std|torch)\s*)?::\s*")


@dataclass(frozen=True)
class Mismatch:
    file: str       # relative to the backend root
    line: int
    kernel: str
    expected: str   # the declaration of generated/kernels.h
    found: str      # the definition's header, as written

    def message(self) -> str:
        return (f"{self.file}:{self.line}: {self.kernel} is defined as\n"
                f"    {self.found}\n"
                f"  but generated/kernels.h declares\n"
                f"    {self.expected}\n"
                f"  (a definition with another signature is an overload nothing calls: copy "
                f"the declaration from generated/kernels.h or the kernel's stub)")


def _split_params(text: str) -> list[str]:
    """Top-level comma split (commas inside <...> or (...) stay)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [p.strip() for p in out if p.strip()]


def _type_of(param: str) -> str:
    """A parameter's type without its name or default, normalized."""
    param = param.split("=", 1)[0].strip()
    # the name is the last identifier, unless the parameter is a bare type
    m = re.match(r"^(.*?[\s&*>])\s*([A-Za-z_]\w*)$", param)
    if m and m.group(1).strip() not in ("const", "unsigned", "signed"):
        param = m.group(1)
    return _normalize(param)


def _normalize(text: str) -> str:
    text = _NAMESPACES.sub("", text)
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"\s*([<>(),&*])\s*", r"\1", text).strip()


def _signature_key(returns: str, params: str) -> tuple[str, tuple[str, ...]]:
    return _normalize(returns), tuple(_type_of(p) for p in _split_params(params))


def _parts(declaration: str, kernel: str) -> tuple[str, str]:
    """(return type, parameter list) of `ret k_x(params)`."""
    head, _, rest = declaration.partition(kernel + "(")
    return head.strip(), rest.rsplit(")", 1)[0]


def _return_type(text: str, name_start: int) -> str:
    """The return type written before a definition's name, which may span lines
    (`::std::tuple<at::Tensor,\n at::Tensor>`): the text back to the end of the
    previous declaration, comment or preprocessor line (a line's own trailing
    comment does not count: `}  // namespace` ends a block)."""
    lines = text[:name_start].split("\n")
    taken = [lines.pop()]
    while lines:
        prev = lines[-1].strip()
        code = prev.split("//", 1)[0].strip()
        if not code or code.endswith((";", "}", "{", "*/")) or prev.startswith(("#", "//")):
            break
        taken.insert(0, lines.pop())
    return " ".join(part.strip() for part in taken).strip()


def find_mismatches(root: Path, expected: dict[str, str]) -> list[Mismatch]:
    """Definitions under root/kernels whose signature differs from `expected`
    (kernel name -> declaration). Stub files are skipped: they are not compiled."""
    out: list[Mismatch] = []
    kernels_dir = Path(root) / "kernels"
    if not kernels_dir.is_dir():
        return out
    for path in sorted(kernels_dir.rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if STUB_MARKER in text:
            continue
        for m in DEFINITION_RE.finditer(text):
            name = m.group(1)
            if name not in expected:
                continue
            returns = _return_type(text, m.start())
            want_ret, want_params = _parts(expected[name], name)
            if _signature_key(returns, m.group(2)) == _signature_key(want_ret, want_params):
                continue
            found = re.sub(r"\s+", " ", f"{returns} {name}({m.group(2)})").strip()
            out.append(Mismatch(file=path.relative_to(root).as_posix(),
                                line=text.count("\n", 0, m.start()) + 1, kernel=name,
                                expected=expected[name].strip().rstrip(";"), found=found))
    return out
