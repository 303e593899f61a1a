"""Whether a test that needs the acme backend runs, skips or fails (issue 27 item 13).

A skip says "this machine cannot run it", never "it is broken":

* acme not installed at all (no `torch_fl_acme` package): skip, with how to build
  it, except where acme is required (CI, `./run test`): there it fails;
* acme installed but it does not import, load or allocate: always a failure, with
  the cause (a broken build must not turn ~74 tests into skips).

`CI` (set by .ci/run, as by every CI service) or `FLSDK_REQUIRE_ACME` (set by
`./run test`, which builds acme first) make acme required. Tests use the
`acme_backend` fixture (tests/conftest.py), or `acme_skip_reason()` directly.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping

PACKAGE = "torch_fl_acme"
REQUIRED_ENV = ("CI", "FLSDK_REQUIRE_ACME")
NOT_INSTALLED = "acme backend not installed (./run setup builds it)"


class AcmeUnavailable(AssertionError):
    """acme is required here, or installed, and cannot be used: a failure."""


def required(env: Mapping[str, str] | None = None) -> bool:
    """Whether acme must be present (CI=true / FLSDK_REQUIRE_ACME=1)."""
    env = os.environ if env is None else env
    return any(env.get(k, "").strip().lower() not in ("", "0", "false", "no") for k in REQUIRED_ENV)


def _load() -> None:
    import torch

    from torch_fl import _backends

    _backends.backend("acme")
    torch.ones(1, device="acme")


def acme_skip_reason(find_spec: Callable = importlib.util.find_spec,
                     load: Callable[[], None] = _load,
                     env: Mapping[str, str] | None = None) -> str | None:
    """None when acme is usable; the skip reason when it is not installed and not
    required. Raises AcmeUnavailable when it is installed and does not load, or
    when it is required and not installed."""
    if find_spec(PACKAGE) is None:
        if required(env):
            names = [k for k in REQUIRED_ENV if required({k: (env or os.environ).get(k, "")})]
            raise AcmeUnavailable(f"{NOT_INSTALLED}, and it is required here ({', '.join(names)} set): "
                                  "the acme-dependent tests must run")
        return NOT_INSTALLED
    try:
        load()
    except Exception as exc:
        raise AcmeUnavailable(f"acme backend is installed but does not load: {type(exc).__name__}: {exc}") \
            from exc
    return None
