"""torch.compile with the default backend (Inductor) on acme, compared with eager.

Inductor's C++ kernels run on acme's host-addressable memory; matmul and conv stay
acme's own kernels. Caches are disabled (a warm cache would hide a broken
registration). Each compile costs seconds of C++ compilation, so the default run
keeps a few small graphs; the rest is marked slow.
"""

import pytest
import torch

import torch_fl

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def fresh_inductor():
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    with inductor_config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()


def close(a, b, atol=1e-5, rtol=1e-5):
    torch.testing.assert_close(a.cpu(), b.cpu(), atol=atol, rtol=rtol)


def test_pointwise_chain_fuses_into_one_kernel():
    def chain(x):
        return torch.nn.functional.gelu(x * 2 + 1).sin() * x

    x = torch.randn(64, 33, device="acme")
    y = torch.compile(chain)(x)
    assert y.device.type == "acme"
    close(y, chain(x))
    graph = torch_fl.get_optimized_graph()
    assert graph.device == "acme" and graph.num_kernels == 1 and graph.fused_kernels == 1
    assert any("gelu" in op or "erf" in op for op in graph.kernels[0].ops), graph.summary()


def test_reductions_and_indexing():
    def f(x, idx):
        return torch.softmax(x, -1)[idx] + torch.nn.functional.layer_norm(x, x.shape[-1:])[idx]

    x = torch.randn(16, 40, device="acme")
    idx = torch.tensor([3, 0, 15, 7], device="acme")
    close(torch.compile(f)(x, idx), f(x, idx))


def test_train_step_matches_eager_and_matmul_stays_on_acme():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 3)).to("acme")
    twin = torch.nn.Sequential(*(m for m in model)).to("acme")  # same parameters
    x = torch.randn(8, 12, device="acme")
    target = torch.randint(0, 3, (8,), device="acme")

    def loss_of(m):
        return torch.nn.functional.cross_entropy(m(x), target)

    eager_loss = loss_of(twin)
    eager_loss.backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled_loss = loss_of(torch.compile(model))
    compiled_loss.backward()
    close(compiled_loss, eager_loss)
    for p, g in zip(model.parameters(), eager_grads):
        close(p.grad, g, atol=1e-5, rtol=1e-4)
    graph = torch_fl.get_optimized_graph()  # the backward graph
    assert any("mm" in name for name in graph.extern_calls), graph.summary()


def test_graph_api_fusion_off_compiles_one_kernel_per_op():
    def chain(x):
        return ((x * 2 + 1).relu() - 3).abs()

    x = torch.randn(32, 32, device="acme")
    torch_fl.set_op_fusion(False)
    try:
        unfused = torch_fl.get_optimized_graph(chain, x)
    finally:
        torch_fl.set_op_fusion(True)
    torch._dynamo.reset()
    fused = torch_fl.get_optimized_graph(chain, x)
    assert not unfused.op_fusion and unfused.fused_kernels == 0 and unfused.num_kernels >= 4, unfused.summary()
    assert fused.op_fusion and fused.num_kernels == 1 and fused.fused_kernels == 1, fused.summary()
    assert [n.op for n in fused.nodes].count("call_function") >= 4


def test_optimize_follows_graph_optimization_switch():
    model = torch.nn.Linear(2, 2)
    torch_fl.set_graph_optimization(False)
    assert torch_fl.optimize(model) is model
    torch_fl.set_graph_optimization(True)
    try:
        assert type(torch_fl.optimize(model)).__name__ == "OptimizedModule"
    finally:
        torch_fl.set_graph_optimization(False)


def test_cpp_wrapper_is_refused_clearly():
    x = torch.randn(4, device="acme")
    with pytest.raises(Exception, match="cpp_wrapper=True and AOTInductor .* not supported"):
        torch.compile(lambda t: t.sin() + 1, options={"cpp_wrapper": True})(x)


@pytest.mark.slow
def test_views_random_and_bf16():
    def views(x):
        return x.t().reshape(-1)[::3] * 2 + x.permute(1, 0)[1].sum()

    x = torch.randn(6, 9, device="acme")
    close(torch.compile(views)(x), views(x))

    def rnd(x):
        return torch.nn.functional.dropout(x, 0.5) + torch.rand_like(x)

    ones = torch.ones(256, 256, device="acme")
    y = torch.compile(rnd)(ones).cpu()
    assert set(torch.unique((y - y.frac())).tolist()) <= {0.0, 2.0}  # dropout kept x2 or dropped
    assert 0.4 < (y >= 2).float().mean() < 0.6 and 0.45 < y.frac().mean() < 0.55

    def gelu(x):
        return torch.nn.functional.gelu(x) * x

    xb = torch.randn(64, 64, device="acme", dtype=torch.bfloat16)
    yb = torch.compile(gelu)(xb)
    assert yb.dtype == torch.bfloat16
    close(yb.float(), gelu(xb).float(), atol=2e-2, rtol=2e-2)


@pytest.mark.slow
def test_conv_and_model_on_second_device():
    if torch.accelerator.device_count() < 2:
        pytest.skip("needs acme:1")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).to("acme:1")
    x = torch.randn(2, 3, 8, 8, device="acme:1")
    y = torch.compile(model)(x)
    assert y.device == torch.device("acme:1")
    close(y, model(x), atol=1e-5, rtol=1e-4)


MAXPOOL_XFAIL = ("compiled max_pool2d backward on acme gives wrong input gradients (forward, "
                 "and the same graph compiled on CPU, are right): one of Inductor 2.13's "
                 "'cpu'-only lowering paths not yet covered by torch_fl.compile.workarounds")


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=MAXPOOL_XFAIL)
def test_max_pool_backward():
    def f(x):
        return torch.nn.functional.max_pool2d(x, 3, 2, 1).sum(dim=(2, 3)).pow(2).sum()

    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16).to("acme").requires_grad_()
    f(x).backward()
    eager = x.grad.clone()
    x.grad = None
    torch.compile(f)(x).backward()
    close(x.grad, eager, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gpt", pytest.param(
    "resnet18", marks=pytest.mark.xfail(strict=True, reason=MAXPOOL_XFAIL))])
def test_reference_train_step_matches_eager(which):
    from torch_fl.models import GPT, GPTConfig, resnet18

    def build():
        torch.manual_seed(0)
        if which == "gpt":
            return GPT(GPTConfig(dropout=0.0)).to("acme")
        return resnet18(num_classes=10).to("acme")

    if which == "gpt":
        tokens = torch.randint(0, 256, (4, 33)).to("acme")
        batch = (tokens[:, :-1], tokens[:, 1:])
    else:
        batch = (torch.randn(4, 3, 32, 32).to("acme"), torch.randint(0, 10, (4,)).to("acme"))
    eager, compiled = build(), build()
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_c = torch.optim.SGD(compiled.parameters(), lr=0.05)
    step_c = torch.compile(compiled)
    for _ in range(2):
        for model, fwd, opt in ((eager, eager, opt_e), (compiled, step_c, opt_c)):
            opt.zero_grad()
            if which == "gpt":
                _, loss = fwd(*batch)
            else:
                loss = torch.nn.functional.cross_entropy(fwd(batch[0]), batch[1])
            loss.backward()
            opt.step()
            model.last_loss = loss.detach()
    close(compiled.last_loss, eager.last_loss, atol=1e-4, rtol=1e-4)
    for pc, pe in zip(compiled.parameters(), eager.parameters()):
        close(pc, pe, atol=1e-4, rtol=1e-3)


NONE_SCRIPT = r"""
import warnings
import torch_fl_acme._generated.backend as backend
backend.DESCRIPTOR["compile"] = {"codegen": "none"}   # as if device.yaml said so
backend.load()
import torch

def f(x):
    return torch.nn.functional.gelu(x) * 2

x = torch.randn(8, 8, device="acme")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = torch.compile(f)(x)
    z = torch.compile(lambda t: t.sin() + 1)(x)
ours = [str(w.message) for w in caught if "codegen: none" in str(w.message)]
assert len(ours) == 1, ours
assert "aot_eager" in ours[0]
torch.testing.assert_close(y.cpu(), f(x).cpu())
torch.testing.assert_close(z.cpu(), (x.sin() + 1).cpu())
import torch_fl.compile.no_codegen as nc
assert nc._warned == {"acme"}
print("OK")
"""


def test_codegen_none_falls_back_to_aot_eager_with_one_warning():
    import os
    import subprocess
    import sys

    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    proc = subprocess.run([sys.executable, "-c", NONE_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
