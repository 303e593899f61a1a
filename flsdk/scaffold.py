"""`flsdk new-backend`: render cookiecutter-backend/ into a new vendor repo.

The template uses cookiecutter's syntax ({{ cookiecutter.x }}), so the
`cookiecutter` tool can render it too; flsdk renders it with Jinja directly
to need no extra dependency.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2

from flsdk import __version__

RESERVED = {"cpu", "cuda", "meta", "mps", "xpu", "xla", "hip", "mtia", "hpu", "ipu", "lazy",
            "vulkan", "privateuseone", "maia", "fpga", "ve", "opengl", "opencl", "ideep", "mkldnn"}
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class ScaffoldError(Exception):
    """A user-caused problem with new-backend's arguments."""


def template_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_cookiecutter", here.parent / "cookiecutter-backend"):
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    raise ScaffoldError("the backend template (cookiecutter-backend) is missing from this flsdk install")


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise ScaffoldError(f"backend name {name!r} must be lowercase letters, digits and _ , "
                            "starting with a letter (it becomes the device type, a C++ namespace "
                            "and the package torch_fl_<name>)")
    if name in RESERVED:
        raise ScaffoldError(f"backend name {name!r} is already a PyTorch device type; pick another")


def render_backend(name: str, out: Path, display_name: str | None = None) -> list[Path]:
    """Render the template for `name` into `out` (must not exist or be empty)."""
    import torch

    check_name(name)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ScaffoldError(f"{out} exists and is not empty; flsdk never overwrites a backend repo")
    src_root = template_dir()
    defaults = json.loads((src_root / "cookiecutter.json").read_text())
    env = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    context = {"name": name, "torch_version": torch.__version__.split("+")[0],
               "flsdk_version": __version__}
    context["display_name"] = display_name or env.from_string(defaults["display_name"]).render(
        cookiecutter=context)
    project = src_root / "{{cookiecutter.name}}"
    written = []
    for path in sorted(project.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        rel = env.from_string(str(path.relative_to(project))).render(cookiecutter=context)
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(env.from_string(path.read_text()).render(cookiecutter=context))
        written.append(target)
    return written
