"""Per-op routing at run time and the bisection it enables (issue 37):
torch_fl.set_op_route / get_op_routes / op_route, TORCH_FL_OP_ROUTES read at load,
routed calls in the fallback log with their reason; acme's "wrong_kernel" fault
injection spoils one kernel, and compare_model(bisect=True) names it with its spec."""

import os
import subprocess
import sys

import pytest
import torch

import torch_fl
import torch_fl_acme._C as native


@pytest.fixture(autouse=True)
def clean_routes():
    torch_fl.clear_op_routes()
    yield
    torch_fl.clear_op_routes()
    native.runtime_set_option("wrong_kernel", "none")


def _log():
    return {(e["op"], e["reason"]) for e in torch_fl.get_fallback_log()}


def test_route_mm_to_the_cpu_and_back():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    x, y = a.to("acme"), b.to("acme")
    torch_fl.clear_fallback_log()
    torch_fl.set_op_route("aten::mm", "fallback")
    assert torch_fl.get_op_routes() == {"aten::mm": "fallback"}
    torch.testing.assert_close((x @ y).cpu(), a @ b)
    out = torch.empty(8, 8, device="acme")
    torch.mm(x, y, out=out)  # "aten::mm" routes every overload: mm.out too
    assert _log() == {("mm", "routed to the CPU (torch_fl.set_op_route)"),
                      ("mm.out", "routed to the CPU (torch_fl.set_op_route)")}
    torch_fl.set_op_route("aten::mm", "native")
    assert torch_fl.get_op_routes() == {}
    torch_fl.clear_fallback_log()
    (x @ y).cpu()
    assert _log() == set()


def test_one_overload_and_the_context_manager():
    x = torch.randn(4, device="acme")
    torch_fl.clear_fallback_log()
    with torch_fl.op_route("aten::add.Tensor", "fallback"):
        (x + x).cpu()
        (x + 1).cpu()  # add.Tensor too (a wrapped scalar)
        assert torch_fl.get_op_routes() == {"aten::add.Tensor": "fallback"}
    assert torch_fl.get_op_routes() == {}
    assert {op for op, _ in _log()} == {"add.Tensor"}


def test_convolution_routes_to_cpus_reference_op():
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 8, 8)
    expected = conv(x)
    torch_fl.clear_fallback_log()
    with torch_fl.op_route("aten::convolution_overrideable", "fallback"):
        got = conv.to("acme")(x.to("acme")).cpu()
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert ("convolution_overrideable", "routed to the CPU (torch_fl.set_op_route)") in _log()


@pytest.mark.parametrize("op, route, message", [
    ("aten::matmulx", "fallback", "is not a PyTorch op"),
    ("aten::logcumsumexp", "fallback", "has no native acme kernel"),
    ("aten::mm", "cpu", "must be 'fallback' or 'native'"),
    ("acme::fused_gelu", "fallback", "is not an aten op"),
    ("aten::mm.Tensor", "fallback", "is not a PyTorch op"),
    ("", "fallback", "non-empty string"),
])
def test_bad_routes_are_refused_naming_the_problem(op, route, message):
    with pytest.raises(ValueError, match=message):
        torch_fl.set_op_route(op, route)
    assert torch_fl.get_op_routes() == {}


def test_the_environment_variable_is_read_at_load():
    code = ("import torch, torch_fl; x = torch.ones(3, 3, device='acme'); torch_fl.clear_fallback_log(); "
            "(x @ x).exp().cpu(); print(sorted(torch_fl.get_op_routes())); "
            "print(sorted((e['op'], e['reason']) for e in torch_fl.get_fallback_log()))")
    env = dict(os.environ, TORCH_FL_OP_ROUTES="aten::mm=fallback, aten::exp=fallback,aten::nope=fallback")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr
    routes, log = proc.stdout.strip().splitlines()[-2:]
    assert routes == "['aten::exp', 'aten::mm']"
    assert "('mm', 'routed to the CPU (TORCH_FL_OP_ROUTES)')" in log
    assert "('exp', 'routed to the CPU (TORCH_FL_OP_ROUTES)')" in log
    # a bad entry warns (loading never fails over it) and is skipped
    assert "TORCH_FL_OP_ROUTES" in proc.stderr and "aten::nope" in proc.stderr


def test_wrong_kernel_fault_injection_spoils_only_that_kernel():
    a = torch.randn(16, 16)
    x = a.to("acme")
    native.runtime_set_option("wrong_kernel", "k_mm")
    assert native.runtime_get_option("wrong_kernel") == "k_mm"
    wrong = (x @ x).cpu()
    assert (wrong - a @ a).abs().max() > 0.5  # its first element is off by one
    torch.testing.assert_close((x + x).cpu(), a + a)  # other kernels are right
    with torch_fl.op_route("aten::mm", "fallback"):  # routing it off the chip cures it
        torch.testing.assert_close((x @ x).cpu(), a @ a, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="wrong_kernel must be one kernel name"):
        native.runtime_set_option("wrong_kernel", "k_mm, k_add")


@pytest.mark.slow
def test_bisection_finds_the_wrong_kernel_in_resnet18_with_its_spec_line():
    from torch_fl.models import resnet18

    torch.manual_seed(0)
    model = resnet18(num_classes=10)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    native.runtime_set_option("wrong_kernel", "k_addmm")  # the classifier's Linear
    report = torch_fl.compare_model(model, (x,), "cpu", "acme:0", train=False,
                                    loss_fn=torch.nn.functional.cross_entropy, targets=y,
                                    bisect=True)
    assert report.first_divergent == "fc"
    b = report.bisection
    assert b.found and b.ops == ["aten::addmm"], b
    assert "aten::convolution_overrideable" in b.candidates and len(b.candidates) > 5
    assert b.specs["aten::addmm"].startswith("flsdk:opspec/linalg.yaml:")
    assert "kernel k_addmm in kernels/linalg.cpp" in b.specs["aten::addmm"]
    assert "routing aten::addmm to the CPU removes the divergence" in report.table()
    assert torch_fl.get_op_routes() == {}  # the search leaves no route behind


def test_bisection_on_a_small_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    x = torch.randn(5, 8)
    native.runtime_set_option("wrong_kernel", "k_tanh")
    torch_fl.set_op_route("aten::exp", "fallback")  # the user's own route survives
    report = torch_fl.compare_model(model, (x,), "cpu", "acme:0", bisect=True)
    assert report.first_divergent == "1"
    assert report.bisection.found and report.bisection.ops == ["aten::tanh"], report.bisection
    assert "k_tanh" in report.bisection.specs["aten::tanh"]
    assert torch_fl.get_op_routes() == {"aten::exp": "fallback"}
    native.runtime_set_option("wrong_kernel", "none")
    assert torch_fl.compare_model(model, (x,), "cpu", "acme:0", bisect=True).bisection is None


def test_flsdk_compare_bisect_names_the_wrong_kernel(tmp_path):
    (tmp_path / "tiny_model.py").write_text(
        "import torch\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))\n"
        "    return model, torch.randn(5, 8)\n")
    env = dict(os.environ, ACME_WRONG_KERNEL="k_tanh")  # acme reads it at init
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "compare", "--model", "tiny_model:build",
                           "--bisect"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "first divergent layer (forward): 1" in proc.stdout
    assert "bisection: routing aten::tanh to the CPU removes the divergence" in proc.stdout
    assert "kernel k_tanh in kernels/" in proc.stdout
