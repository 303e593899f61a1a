"""Errors raised for user-caused problems in op specs and device descriptors.

Every problem in a spec or descriptor becomes a `SpecError` that points at a
file, a line and a field (a dotted path like `ops[3].dtypes[1]`), says what is
wrong and, when it helps, what form was expected. Loaders collect all problems
they can find and raise them together as `SpecErrors`, so a vendor fixes a file
in one pass instead of one error per run.

`SpecErrors` is a subclass of `SpecError`, so `except SpecError` catches both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def format_path(path: Sequence[str | int]) -> str:
    """('ops', 3, 'dtypes', 1) -> 'ops[3].dtypes[1]'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


class SpecError(Exception):
    """One problem at `file:line` in `field`."""

    def __init__(self, file: str, line: int | None, field: str, message: str,
                 expected: str | None = None, path: tuple = ()):
        # `path` is `field` as a tuple (('ops', 3, 'dtypes', 1)) when known.
        self.path = tuple(path)
        self.file = str(file)
        self.line = line
        self.field = field
        self.message = message
        self.expected = expected
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        text = f"{where}: "
        if self.field:
            text += f"{self.field}: "
        text += self.message
        if self.expected:
            text += f" (expected: {self.expected})"
        return text

    def __str__(self) -> str:
        return self._render()

    def sort_key(self) -> tuple:
        return (self.file, self.line if self.line is not None else 0, self.field, self.message)


class SpecErrors(SpecError):
    """Several problems, reported together, sorted by file and line.

    The file/line/field/message attributes are those of the first error so
    code that handles a single `SpecError` still gets something sensible.
    """

    def __init__(self, errors: Iterable[SpecError]):
        flat: dict[tuple, SpecError] = {}
        for err in errors:
            for one in (err.errors if isinstance(err, SpecErrors) else [err]):
                # The same problem can be found twice (e.g. two schema keywords);
                # report it once.
                flat.setdefault((*one.sort_key(), one.expected), one)
        if not flat:
            raise ValueError("SpecErrors needs at least one error")
        self.errors: list[SpecError] = sorted(flat.values(), key=SpecError.sort_key)
        first = self.errors[0]
        super().__init__(first.file, first.line, first.field, first.message, first.expected)

    def _render(self) -> str:
        return "\n".join(e._render() for e in self.errors)

    def __len__(self) -> int:
        return len(self.errors)

    def __iter__(self):
        return iter(self.errors)


class ErrorCollector:
    """Accumulates SpecErrors while a loader walks several files."""

    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    def add(self, err: SpecError) -> None:
        if isinstance(err, SpecErrors):
            self.errors.extend(err.errors)
        else:
            self.errors.append(err)

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self) -> None:
        if self.errors:
            raise SpecErrors(self.errors)
