"""torch_fl parts that need no device: import cost, lazy exports, metrics,
CPU-vs-CPU comparison, compat reporting, and behaviour with no backend."""

from __future__ import annotations

import math
import subprocess
import sys
import types

import pytest
import torch

import torch_fl
from torch_fl import _backends
from torch_fl.precision import tensor_diff


def test_import_is_lazy_and_does_not_import_torch():
    code = ("import sys, torch_fl; assert 'torch' not in sys.modules, 'torch imported'; "
            "print(torch_fl.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == torch_fl.__version__


def test_every_export_resolves():
    for name in torch_fl.__all__:
        assert getattr(torch_fl, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        torch_fl.nope  # noqa: B018


def test_type_checking_block_lists_exactly_the_lazy_exports():
    """IDEs and type checkers see torch_fl's names through the TYPE_CHECKING
    imports; they must be the names __getattr__ resolves, each from its module."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(torch_fl.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name}: re-export needs 'as {alias.name}'"
            seen[alias.name] = node.module
    assert sorted(seen) == sorted(set(torch_fl.__all__) - {"__version__"})
    for name, module in seen.items():
        assert torch_fl._WHERE[name] == module, name
        assert getattr(torch_fl, name) is getattr(__import__(f"torch_fl.{module}", fromlist=[name]), name)


def test_tensor_diff_metrics():
    a = torch.tensor([1.0, 2.0, 0.0, -4.0])
    b = torch.tensor([1.0, 2.002, 0.0005, -4.0])
    d = tensor_diff(a, b, atol=1e-3, rtol=1e-3)
    assert d.max_abs == pytest.approx(0.002, rel=1e-3)
    assert d.max_rel == pytest.approx(0.001, rel=1e-3)  # the 0 reference is excluded
    assert 0.9999 < d.cosine <= 1.0
    assert d.ok  # 0.002 <= 1e-3 + 1e-3 * 2
    assert not tensor_diff(a, b, atol=1e-4, rtol=1e-4).ok
    opposite = tensor_diff(a, -a)
    assert opposite.cosine == pytest.approx(-1.0) and not opposite.ok


def test_tensor_diff_nonfinite_and_shapes():
    a = torch.tensor([1.0, math.nan, math.inf])
    assert tensor_diff(a, a.clone()).ok
    d = tensor_diff(a, torch.tensor([1.0, 0.0, math.inf]))
    assert not d.ok and "NaN" in d.note
    assert not tensor_diff(a, torch.tensor([1.0, math.nan, -math.inf])).ok
    s = tensor_diff(torch.zeros(2, 3), torch.zeros(3, 2))
    assert not s.ok and "shape" in s.note


def test_compare_precision_cpu_vs_cpu_is_exact():
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    (d,) = torch_fl.compare_precision(torch.matmul, (a, b), "cpu", "cpu").diffs
    assert d.max_abs == 0 and d.cosine == pytest.approx(1.0) and d.ok
    two = torch_fl.compare_precision(lambda x: (x.sin(), {"c": x.cos()}), (a,), "cpu", "cpu")
    assert len(two.diffs) == 2 and tuple(two) == (0.0, 0.0)


def test_compare_model_cpu_vs_cpu_has_no_divergence():
    from torch_fl.models import resnet18

    torch.manual_seed(0)
    model = resnet18(width=8)
    report = torch_fl.compare_model(model, torch.randn(2, 3, 32, 32), "cpu", "cpu")
    assert report.first_divergent is None and report.first_divergent_grad is None
    assert report.ok
    names = [d.name for d in report.forward]
    # execution order, innermost first; the twice-called ReLU of a block is kept apart
    assert names.index("conv1") < names.index("layer1.0.conv1") < names.index("fc")
    assert "layer1.0.relu#2" in names
    assert names[-1] == "(model)"
    grads = [d.name for d in report.grads]
    assert grads[0].startswith("fc.") and grads[-1] == "conv1.weight"  # backward order
    assert '"first_divergent": null' in report.to_json()
    # the original model was not moved or given gradients
    assert all(p.grad is None for p in model.parameters())


def _fake_backend(name: str, torch_version: str, error: str | None = None):
    mod = types.ModuleType(f"fake_{name}")
    mod.NAME, mod.PACKAGE, mod.TORCH_VERSION = name, f"torch_fl_{name}", torch_version

    def load():
        if error:
            raise RuntimeError(error)
    mod.load = load
    mod.load_error = lambda: error
    return mod


def test_compat_and_reports_surface_a_refusing_backend(monkeypatch):
    refusal = "torch_fl_old was built for torch 2.1.0 but torch 2.13.0 is installed."
    entry = _backends.BackendEntry("old", "torch_fl_old._generated.backend", "torch-fl-old",
                                   module=_fake_backend("old", "2.1.0", refusal))
    broken = _backends.BackendEntry("gone", "torch_fl_gone._generated.backend", None,
                                    import_error="cannot import torch_fl_gone: ModuleNotFoundError")
    monkeypatch.setattr(_backends, "_entries", [entry, broken])
    rows = {r["name"]: r for r in torch_fl.compat_matrix()}
    assert rows["old"]["built_for"] == "2.1.0" and not rows["old"]["version_ok"]
    assert rows["old"]["error"] == refusal and not rows["old"]["loaded"]
    assert "ModuleNotFoundError" in rows["gone"]["error"]
    text = torch_fl.compat_report()
    assert "REFUSED" in text and refusal in text
    with pytest.raises(torch_fl.IncompatibleBackendError, match="built for torch 2.1.0"):
        torch_fl.check_compat("old")
    reports = {r["name"]: r for r in torch_fl.backend_reports()}
    assert reports["old"] == {"name": "old", "package": "torch_fl_old", "loaded": False,
                              "error": refusal, "torch_version": "2.1.0", "device_count": 0,
                              "memory_model": "host"}
    assert reports["gone"]["package"] == "torch_fl_gone" and not reports["gone"]["loaded"]


def test_no_backend_installed_gives_clear_errors(monkeypatch):
    monkeypatch.setattr(_backends, "_entries", [])
    monkeypatch.setattr(_backends, "_privateuse1_owner", lambda: None)
    assert torch_fl.backend_reports() == []
    assert torch_fl.list_devices() == ["cpu"]
    with pytest.raises(torch_fl.NoBackendError, match="no flsdk backend is installed"):
        torch_fl.get_fallback_log()
    with pytest.raises(torch_fl.NoBackendError):
        torch_fl.init_device()
    assert "no flsdk backend installed" in torch_fl.compat_report()


def test_memory_config_validation_happens_before_the_backend(monkeypatch):
    # Bad keys/values are rejected in Python with the list of valid keys,
    # whether or not a backend is present.
    with pytest.raises(ValueError, match="unknown memory config key 'round'.*round_size"):
        torch_fl.set_memory_config("acme:0", {"round": 512})
    with pytest.raises(ValueError, match=r"garbage_collection_threshold must be in \[0, 1\)"):
        torch_fl.set_memory_config("acme:0", {"garbage_collection_threshold": 1.5})
    with pytest.raises(ValueError, match="round_size must be an integer"):
        torch_fl.set_memory_config("acme:0", {"round_size": 0})
    with pytest.raises(TypeError):
        torch_fl.set_memory_config("acme:0", "round_size:512")
