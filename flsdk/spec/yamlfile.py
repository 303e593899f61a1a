"""YAML reading that remembers the line of every mapping key and sequence item.

PyYAML's composer gives nodes with marks; we walk the node tree ourselves to
build plain Python data (dicts, lists, scalars) and a side table
`lines[path] -> line` where `path` is a tuple like ('ops', 3, 'dtypes', 1).
Keeping data plain lets jsonschema validate it unchanged, and the table turns
any jsonschema or semantic error path back into a line.

Stricter than `yaml.safe_load` on purpose: duplicate keys, non-text keys and
custom tags are errors instead of being silently resolved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .errors import SpecError

# The libyaml composer is several times faster; node marks are the same.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

PathT = tuple  # tuple[str | int, ...]

# Limits on what a spec file may be. Real files are far below them (the largest
# canonical op spec is ~13 KB, ~2,000 values, depth 7); they exist so that a
# hostile or broken file (an alias bomb: a few hundred bytes of nested anchors
# expanding to billions of values; a 100,000-deep `[[[[`) is refused in
# milliseconds instead of running for minutes or overflowing the C stack.
MAX_BYTES = 4 << 20         # file size
MAX_DEPTH = 64              # nesting of mappings and sequences
MAX_VALUES = 200_000        # values after expanding aliases


@dataclass
class Document:
    """A parsed YAML file: plain data plus the line of every path in it."""

    file: str
    data: Any
    lines: dict[PathT, int] = field(default_factory=dict)

    def line(self, path: PathT) -> int:
        """Line of `path`, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)

    def error(self, path: PathT, message: str, expected: str | None = None) -> SpecError:
        from .errors import format_path

        return SpecError(self.file, self.line(path), format_path(path), message, expected, path=tuple(path))


def load_yaml(path: str | Path) -> Document:
    """Read and parse one YAML file; every failure is a SpecError."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(file, None, "", "file not found") from None
    except UnicodeDecodeError as exc:
        raise SpecError(file, None, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SpecError(file, None, "", f"cannot read file: {exc.strerror or exc}") from None
    return parse_yaml(text, file)


def parse_yaml(text: str, file: str = "<string>") -> Document:
    """Parse YAML text (one document) into a Document."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise SpecError(file, 1, "", f"file too large: {size} bytes (a spec file is at most "
                        f"{MAX_BYTES >> 20} MiB)")
    try:
        _check_depth(text, file)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = " ".join(s for s in (exc.context, exc.problem) if s)
        raise SpecError(file, line, "", f"malformed YAML: {what or exc}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other controls)
        line = text[:exc.position].count("\n") + 1 if isinstance(exc.position, int) else 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise SpecError(file, line, "", f"malformed YAML: character {char!r} is not allowed in YAML text",
                        "printable text (use an escape such as \"\\t\" inside a quoted string)") from None
    except yaml.YAMLError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise SpecError(file, 1, "", f"malformed YAML: {first}") from None
    doc = Document(file=file, data=None, lines={(): 1})
    if node is None:  # empty file
        return doc
    doc.lines[()] = node.start_mark.line + 1
    try:
        _check_expanded_size(node, file)
        doc.data = _Walker(doc).walk(node, ())
    except RecursionError:  # aliases nesting anchors inside anchors
        raise SpecError(file, None, "", "nested too deep once YAML aliases are expanded",
                        "a spec file without deeply nested anchors/aliases") from None
    return doc


def _check_expanded_size(root, file: str) -> None:
    """Refuse a document whose aliases expand to more than MAX_VALUES values,
    before anything is expanded (merge keys `<<:` copy lists, so expanding first
    would already take exponential time). Counted once per node: linear."""
    sizes: dict[int, int] = {}

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a recursive alias counts once here; the walker refuses it
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        if total > MAX_VALUES:
            raise SpecError(file, node.start_mark.line + 1, "",
                            f"more than {MAX_VALUES} values once YAML aliases are expanded (an alias bomb?)",
                            "a spec file without deeply nested anchors/aliases")
        sizes[key] = total
        return total

    size(root)


def _check_depth(text: str, file: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before composing nodes: the event
    parser is iterative, the composer recursive (a deep file would overflow it)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise SpecError(file, event.start_mark.line + 1, "",
                                f"nested more than {MAX_DEPTH} levels deep",
                                "a spec file nests a few levels (ops -> op -> samples -> args)")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


class _Walker:
    def __init__(self, doc: Document):
        self.doc = doc
        self.constructor = SafeConstructor()
        self.active: set[int] = set()
        self.values = 0

    def _err(self, node, path: PathT, message: str, expected: str | None = None) -> SpecError:
        from .errors import format_path

        return SpecError(self.doc.file, node.start_mark.line + 1, format_path(path), message, expected)

    def walk(self, node, path: PathT) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            raise self._err(node, path, f"more than {MAX_VALUES} values once YAML aliases are expanded "
                            "(an alias bomb?)", "a spec file without deeply nested anchors/aliases")
        if isinstance(node, ScalarNode):
            try:
                return self.constructor.construct_object(node)
            except yaml.YAMLError as exc:
                problem = getattr(exc, "problem", None) or str(exc)
                raise self._err(node, path, f"cannot read value: {problem}") from None
            except (ValueError, OverflowError) as exc:
                # e.g. a timestamp-looking value that is not a real date
                raise self._err(node, path, f"cannot read value: {exc}") from None
        if id(node) in self.active:
            raise self._err(node, path, "recursive YAML alias")
        self.active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                return self._sequence(node, path)
            raise self._err(node, path, f"unsupported YAML node {type(node).__name__}")
        finally:
            self.active.discard(id(node))

    def _mapping(self, node: MappingNode, path: PathT) -> dict:
        try:
            # Resolves `<<: *anchor` merge keys the way safe_load does.
            self.constructor.flatten_mapping(node)
        except yaml.YAMLError as exc:
            raise self._err(node, path, f"bad merge key: {getattr(exc, 'problem', exc)}") from None
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise self._err(key_node, path, "mapping key must be plain text, not a list or mapping")
            key = self.walk(key_node, path)
            if not isinstance(key, str):
                raise self._err(key_node, path, f"mapping key {key!r} must be text",
                                f'quote it: "{key_node.value}"')
            sub = path + (key,)
            if key in out:
                raise self._err(key_node, sub, f"duplicate key (first at line {self.doc.lines[sub]})",
                                "each key once")
            self.doc.lines[sub] = key_node.start_mark.line + 1
            out[key] = self.walk(value_node, sub)
        return out

    def _sequence(self, node: SequenceNode, path: PathT) -> list:
        out = []
        for i, item in enumerate(node.value):
            sub = path + (i,)
            self.doc.lines[sub] = item.start_mark.line + 1
            out.append(self.walk(item, sub))
        return out
