"""torch.compile(model), default backend, on architectures nobody in this repo
wrote: the real-model zoo (real_model_zoo.py: torchvision, timm, transformers,
torch.nn RNNs) takes one compiled training step on acme, in float32 and under
bf16 autocast, and is judged exactly as the eager step is in
test_real_models.py (`compare_step`: loss against the CPU step, gradients
against float64, the CPU fallback log empty).

Besides matching, the step must really be compiled: Dynamo captured at least
one graph, and Inductor generated fused C++ kernels for acme (a model that
graph-breaks everywhere would otherwise pass as eager).

Each compile costs tens of seconds of C++ compilation on 2 cores, so the
default run takes one CNN in float32 and one decoder under bf16 autocast;
every other case is slow (--run-slow). Caches are disabled: a warm cache
would hide a broken registration. The survey (`python real_model_zoo.py
--compile [name ...]`) prints the same per model.
"""

from __future__ import annotations

import pytest
import real_model_zoo as zoo
import test_real_models as eager_suite
import torch

import torch_fl

PRECISIONS = ("float32", "bf16-autocast")
DEFAULT = {("tv-resnet18", "float32"), ("hf-llama", "bf16-autocast")}

# (model, precision) -> why it fails today; xfail(strict=True): remove once it passes.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _params():
    for name in zoo.CASES:
        for precision in PRECISIONS:
            marks = [] if (name, precision) in DEFAULT else [pytest.mark.slow]
            if (name, precision) in KNOWN_FAILURES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[(name, precision)]))
            yield pytest.param(name, precision, id=f"{name}-{precision}", marks=marks)


@pytest.fixture(autouse=True)
def fresh_inductor():
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    # allow_rnn: Dynamo skips nn.LSTM/GRU/RNN frames (eager, on any device) unless
    # told otherwise, and its graph-break hint tells users to set it; with it the
    # RNN cases are compiled for real.
    with inductor_config.patch(force_disable_caches=True), torch._dynamo.config.patch(allow_rnn=True):
        yield
    torch._dynamo.reset()


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    """As in test_real_models.py: CPU's spinning OpenMP threads on a loaded machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize("name,precision", list(_params()))
def test_compiled_real_model_trains_on_acme_and_matches_cpu(name, precision):
    case, model, f64 = eager_suite.case_model_and_reference(name)
    autocast = eager_suite.PRECISIONS[precision]

    torch_fl.clear_fallback_log()
    with zoo.compile_counters() as counts:
        dev = zoo.train_step(zoo.compiled(case), model, eager_suite.DEVICE, autocast)
    log = torch_fl.get_fallback_log()
    assert log == [], f"{name} ({precision}) fell back to CPU: " + ", ".join(
        f"{e['op']} x{e['count']}" for e in log)
    assert counts.graphs >= 1 and counts.acme_kernels >= 1, (
        f"{name} ({precision}) was not compiled for acme: {counts}")
    ref = eager_suite.reference_step(case, model, autocast)
    # Under autocast Inductor computes a fused bf16 chain in float32 and rounds only
    # what it stores (`emulate_precision_casts` is off by default), so a compiled
    # low-precision loss is often closer to float64 than the eager reference
    # (EfficientNet-B0 bf16: float64 3.701, eager CPU 3.961, compiled acme 3.732):
    # compare_step's float64 rule accepts that.
    problems = eager_suite.compare_step(dev, ref, f64, precision,
                                        eager_suite.perturbed_references(case, model, precision))
    assert not problems, f"{name} ({precision}), compiled: " + "; ".join(problems)


def test_compile_counters_see_a_compiled_step_and_not_an_eager_one():
    """The 'really compiled' check can fail: an eager step counts nothing."""
    def batch():
        return torch.randn(4, 8, generator=zoo._gen(0)), torch.tensor([0, 1, 2, 1])
    case = zoo.Case("mlp", "torch", lambda: torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3)),
        batch, zoo._classify)
    model = zoo.make_model(case)
    with zoo.compile_counters() as eager:
        zoo.train_step(case, model, "acme", None)
    assert eager.graphs == 0 and eager.acme_kernels == 0, eager
    with zoo.compile_counters() as compiled:
        zoo.train_step(zoo.compiled(case), model, "acme", None)
    assert compiled.graphs >= 1 and compiled.acme_kernels >= 1, compiled


def test_known_failures_name_real_cases():
    assert {name for name, _ in KNOWN_FAILURES} <= set(zoo.CASES)
    assert {precision for _, precision in KNOWN_FAILURES} <= set(PRECISIONS)
    assert {name for name, _ in DEFAULT} <= set(zoo.CASES)
