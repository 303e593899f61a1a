"""`flsdk new-backend`: render cookiecutter-backend/ into a new vendor repo.

The template uses cookiecutter's syntax ({{ cookiecutter.x }}), so the
`cookiecutter` tool can render it too; flsdk renders it with Jinja directly
to need no extra dependency.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from flsdk import __version__
from flsdk.spec.adapter_versions import shipped

MAX_NAME = 32


class ScaffoldError(Exception):
    """A user-caused problem with new-backend's arguments."""


def template_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_cookiecutter", here.parent / "cookiecutter-backend"):
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    raise ScaffoldError("the backend template (cookiecutter-backend) is missing from this flsdk install")


def check_name(name: str) -> None:
    """Refuse a name PyTorch, C++ or Python cannot take (flsdk.spec.names has the rules
    device.yaml's `name` is checked with), before anything is written."""
    from flsdk.spec.names import backend_name_problem

    problem = backend_name_problem(name)
    if problem is None and len(name) > MAX_NAME:
        problem = f"{name!r} is longer than {MAX_NAME} characters"
    if problem:
        raise ScaffoldError(f"backend name {problem}; the name becomes the device type "
                            f"(torch.device(\"{name}\")), a C++ namespace and the package "
                            f"torch_fl_{name}: lowercase letters and _, starting with a letter")


MEMORY_MODELS = ("host", "discrete")


def render_backend(name: str, out: Path, display_name: str | None = None,
                   memory_model: str = "host") -> list[Path]:
    """Render the template for `name` into `out` (must not exist or be empty), with a
    runtime adapter for `memory_model`: "host" (host code can read device memory) or
    "discrete" (it cannot, as on a discrete accelerator)."""
    import torch

    check_name(name)
    if memory_model not in MEMORY_MODELS:
        raise ScaffoldError(f"memory model {memory_model!r}: expected one of {', '.join(MEMORY_MODELS)}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ScaffoldError(f"{out} exists and is not empty; flsdk never overwrites a backend repo")
    src_root = template_dir()
    defaults = json.loads((src_root / "cookiecutter.json").read_text())
    env = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    # the adapter headers' versions a fresh backend's adapters are written for
    versions = {key: "{}.{}".format(*head.version) for key, head in shipped().items()}
    context = {"name": name, "torch_version": torch.__version__.split("+")[0],
               "flsdk_version": __version__, "memory_model": memory_model,
               "runtime_adapter_version": versions["runtime"], "ccl_adapter_version": versions["ccl"]}
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
