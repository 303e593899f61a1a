"""One direction between flsdk and torch_fl (docs/architecture.md, "Repository layout").

    torch_fl._tables   torch-free tables both packages read (dtypes, sample grammar,
                       glue ops, autocast op lists): the standard library only
    torch_fl           the runtime a model engineer installs: never imports flsdk;
                       its library modules never import torch_fl.testing
    torch_fl.commands  compare, readiness, conformance, doctor's runtime half
    torch_fl.backend_glue  the Python glue `flsdk gen` copies into every backend, which
                       runs with torch alone: the standard library, torch and itself,
                       and torch_fl.compile only where a missing torch_fl is handled
    flsdk              the SDK: reaches torch_fl only through torch_fl._tables and,
                       from its CLI, torch_fl.commands

Every import of every .py file under torch_fl/ and flsdk/ is checked with `ast`:
module-level and inside functions, relative ones resolved, and
`importlib.import_module` / `__import__` of constant names. A crossing fails with
file:line, what it imports and the rule it breaks. A subprocess then imports every
torch_fl module with flsdk made unimportable, and uses the ones that read the
shared tables.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RULE_RUNTIME = "torch_fl never imports flsdk (the runtime installs and runs without the SDK; " \
               "tables both need live in torch_fl._tables)"
RULE_SDK = "flsdk reaches torch_fl only through torch_fl._tables (shared tables) and, from " \
           "flsdk/cli.py, torch_fl.commands (the runtime's commands)"
RULE_TABLES = "torch_fl._tables imports the standard library only (no torch, no other " \
              "torch_fl module, no flsdk)"
RULE_TESTING = "torch_fl's library modules do not import torch_fl.testing (only torch_fl/testing/ " \
               "itself and torch_fl/commands.py, whose conformance command runs its OpInfo suite)"
RULE_BACKEND_GLUE = "torch_fl.backend_glue imports the standard library, torch and itself only " \
                    "(every backend ships a copy and runs with torch alone); torch_fl.compile " \
                    "only inside a try whose handler catches ImportError"
RULE_GENERATED = "generated code (flsdk/templates) imports only public torch_fl modules " \
                 "(no `_private` module, never torch_fl._tables)"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file: `import a.b`,
    `from a import b` (a.b when that is a module, else a), relative imports,
    anywhere in the file, and importlib.import_module / __import__ of a constant."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def resolve(level: int, module: str | None) -> str:
        if not level:
            return module or ""
        base = package.split(".")
        base = base[:len(base) - (level - 1)] if level > 1 else base
        return ".".join(base + ([module] if module else []))

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = resolve(node.level, node.module)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.append((node.lineno, sub if _is_module(sub, root) else source))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called not in ("import_module", "__import__"):
                continue
            target = node.args[0].value
            if target.startswith("."):
                level = len(target) - len(target.lstrip("."))
                anchor = node.args[1] if len(node.args) > 1 else None
                # import_module(".x", __name__) in a package's __init__: relative to the package
                if isinstance(anchor, ast.Name) and anchor.id in ("__name__", "__package__"):
                    target = resolve(level, target.lstrip(".") or None)
                else:
                    continue
            found.append((node.lineno, target))
    return sorted(set(found))


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def optional_import_lines(path: Path) -> set[int]:
    """Lines inside a `try:` whose handler catches ImportError (or
    ModuleNotFoundError): imports the file carries on without."""
    def catches(handler: ast.ExceptHandler) -> bool:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return any(isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError")
                   for t in types)

    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Try) and any(catches(h) for h in node.handlers):
            for stmt in node.body:
                lines.update(range(stmt.lineno, stmt.end_lineno + 1))
    return lines


def _backend_glue_may_import(target: str, line: int, optional: set[int], stdlib: set[str]) -> bool:
    return (target.partition(".")[0] in stdlib or _under(target, "torch")
            or _under(target, "torch_fl.backend_glue")
            or (_under(target, "torch_fl.compile") and line in optional))


def violations(root: Path) -> list[str]:
    """'file:line: imports X: rule' for every import that crosses the layering."""
    out: list[str] = []
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for package in ("torch_fl", "flsdk"):
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(path, root)
            where = path.relative_to(root).as_posix()
            optional = optional_import_lines(path) if _under(name, "torch_fl.backend_glue") else set()
            for line, target in imports_of(path, root):
                broken = None
                if package == "torch_fl" and _under(target, "flsdk"):
                    broken = RULE_RUNTIME
                elif package == "flsdk" and _under(target, "torch_fl"):
                    allowed = _under(target, "torch_fl._tables") or (
                        name == "flsdk.cli" and _under(target, "torch_fl.commands"))
                    broken = None if allowed else RULE_SDK
                elif _under(name, "torch_fl._tables") and not (
                        _under(target, "torch_fl._tables") or target.partition(".")[0] in stdlib):
                    broken = RULE_TABLES
                elif _under(name, "torch_fl.backend_glue") and not _backend_glue_may_import(
                        target, line, optional, stdlib):
                    broken = RULE_BACKEND_GLUE
                elif package == "torch_fl" and _under(target, "torch_fl.testing") and not (
                        _under(name, "torch_fl.testing") or name == "torch_fl.commands"):
                    broken = RULE_TESTING
                if broken:
                    out.append(f"{where}:{line}: imports {target}: {broken}")
    return out


_TEMPLATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+(torch_fl(?:\.\w+)*)", re.MULTILINE)


def template_violations(root: Path) -> list[str]:
    out = []
    for path in sorted((root / "flsdk" / "templates").rglob("*.py.j2")):
        text = path.read_text()
        for m in _TEMPLATE_IMPORT.finditer(text):
            target = m.group(1)
            if any(part.startswith("_") for part in target.split(".")) or not _is_module(target, root):
                line = text.count("\n", 0, m.start()) + 1
                out.append(f"{path.relative_to(root).as_posix()}:{line}: imports {target}: "
                           f"{RULE_GENERATED}")
    return out


# ---------------------------------------------------------------- the rules hold


def test_no_import_crosses_the_layering():
    found = violations(ROOT)
    assert not found, "imports across the flsdk / torch_fl layering:\n  " + "\n  ".join(found)


def test_generated_code_uses_public_torch_fl_modules():
    found = template_violations(ROOT)
    assert not found, "\n  ".join(["generated code reaches torch_fl's internals:", *found])


def test_flsdk_cli_delegates_through_torch_fl_commands():
    """The exception the rules allow is used, and used once: flsdk's CLI imports
    torch_fl.commands, and nothing else of flsdk does."""
    users = sorted({module_name(p, ROOT) for p in (ROOT / "flsdk").rglob("*.py")
                    if any(_under(t, "torch_fl.commands") for _, t in imports_of(p, ROOT))})
    assert users == ["flsdk.cli"], users


# ---------------------------------------------------------------- the checker catches crossings


def test_the_checker_names_file_line_and_rule(tmp_path):
    """Each rule, in each form an import takes (module level, inside a function,
    relative, from-import of a module, importlib.import_module)."""
    files = {
        "torch_fl/__init__.py": "",
        "torch_fl/testing/__init__.py": "",
        "torch_fl/testing/helper.py": "import flsdk.spec\n",
        "torch_fl/_tables/__init__.py": "",
        "torch_fl/_tables/t.py": "import re\nfrom . import u\nimport torch\nfrom .. import compat\n",
        "torch_fl/_tables/u.py": "",
        "torch_fl/compat.py": "",
        "torch_fl/backend_glue/__init__.py": "",
        "torch_fl/backend_glue/loader.py": textwrap.dedent("""\
            import os
            import torch
            from . import device_module
            from torch_fl import compat
            from torch_fl.compile import hook
            try:
                from torch_fl.compile import inductor_hook
            except ImportError:
                pass
            """),
        "torch_fl/backend_glue/device_module.py": "",
        "torch_fl/commands.py": "from .testing import helper\n",
        "torch_fl/lazy.py": textwrap.dedent("""\
            import importlib


            def f():
                from flsdk.codegen import glue
                importlib.import_module("flsdk.cli")
                from . import testing
                from .testing.helper import x
            """),
        "flsdk/__init__.py": "",
        "flsdk/cli.py": "from torch_fl import commands\nfrom torch_fl._tables import t\n"
                        "from torch_fl.compat import x\n",
        "flsdk/spec.py": "from torch_fl import commands\nimport torch_fl\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(tmp_path)
    assert found == [
        f"torch_fl/_tables/t.py:3: imports torch: {RULE_TABLES}",
        f"torch_fl/_tables/t.py:4: imports torch_fl.compat: {RULE_TABLES}",
        f"torch_fl/backend_glue/loader.py:4: imports torch_fl.compat: {RULE_BACKEND_GLUE}",
        f"torch_fl/backend_glue/loader.py:5: imports torch_fl.compile: {RULE_BACKEND_GLUE}",
        f"torch_fl/lazy.py:5: imports flsdk.codegen: {RULE_RUNTIME}",
        f"torch_fl/lazy.py:6: imports flsdk.cli: {RULE_RUNTIME}",
        f"torch_fl/lazy.py:7: imports torch_fl.testing: {RULE_TESTING}",
        f"torch_fl/lazy.py:8: imports torch_fl.testing.helper: {RULE_TESTING}",
        f"torch_fl/testing/helper.py:1: imports flsdk.spec: {RULE_RUNTIME}",
        f"flsdk/cli.py:3: imports torch_fl.compat: {RULE_SDK}",
        f"flsdk/spec.py:1: imports torch_fl.commands: {RULE_SDK}",
        f"flsdk/spec.py:2: imports torch_fl: {RULE_SDK}",
    ], "\n".join(found)


# ---------------------------------------------------------------- the runtime without the SDK

_WITHOUT_FLSDK = r"""
import importlib, importlib.abc, pkgutil, sys


class NoFlsdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "flsdk" or name.startswith("flsdk."):
            raise ModuleNotFoundError(f"No module named {name!r} (flsdk made unimportable)", name=name)
        return None


sys.meta_path.insert(0, NoFlsdk())

import torch_fl

for name in torch_fl.__all__:               # the public API, each name resolved
    getattr(torch_fl, name)
for info in pkgutil.walk_packages(torch_fl.__path__, "torch_fl."):   # every module
    importlib.import_module(info.name)

import torch
from torch_fl import commands
from torch_fl.models.trace import record_ops
from torch_fl.testing.autocast_reference import cuda_autocast_policy_on_cpu
from torch_fl.testing.conformance import compare, default_tolerance, materialize

args, kwargs = materialize(["T(2,3)+", "L(3;5)", {"alpha": 2}], "float16")
assert args[0].dtype == torch.float16 and (args[0] > 0).all() and args[1].dtype == torch.int64
assert kwargs == {"alpha": 2}
assert default_tolerance(torch.bfloat16) == (1e-5, 1.6e-2) and default_tolerance("int8") == (0.0, 0.0)
compare("add.Tensor", ["T(4,3)", "T(4,3)"], "float32", "cpu")
(diff,) = torch_fl.compare_precision(torch.exp, (torch.randn(3).half(),), "cpu", "cpu").diffs
assert diff.ok
with record_ops() as traced:
    torch.zeros(2, 3).fill_(1.0).relu()
assert "fill_.Scalar" in traced.glue_ops and "relu" in traced.backend_ops, traced.reached
a = torch.randn(4, 8).bfloat16()
with cuda_autocast_policy_on_cpu(), torch.autocast("cpu", dtype=torch.bfloat16):
    assert torch.exp(a).dtype == torch.float32 and torch.mm(a.float(), a.float().t()).dtype == a.dtype
import argparse
parser = argparse.ArgumentParser()
commands.add_commands(parser.add_subparsers(dest="command"))
assert parser.parse_args(["readiness", "--model", "none"]).func is commands.run_readiness
assert not [m for m in sys.modules if m == "flsdk" or m.startswith("flsdk.")]
print("ok")
"""


def test_torch_fl_imports_and_works_without_flsdk():
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_FLSDK], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
