"""The Torch-FL article's code samples, typed as the article (issue #9's table)
writes them, on device "acme:0". They are the contract: these spellings must
keep working whatever torch_fl adds.

The two-process sample (init_distributed + all_reduce) runs this file as a
script in two subprocesses (`python test_torch_fl_article.py <rank> <port>`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from ranks import free_port, run_ranks

import torch_fl

HERE = Path(__file__).resolve()
# acme, loaded; skipped only when not installed (tests/support/required_backend.py)
pytestmark = pytest.mark.usefixtures("acme_backend")


def _article_all_reduce(rank: int) -> None:
    """One rank of the article's distributed sample, with gloo chosen as in its
    backend table ("Gloo for CPU or general use")."""
    import torch.distributed as dist

    torch_fl.set_comm_backend("gloo")
    if rank == 0:
        torch_fl.init_distributed("acme:0", rank=0, world_size=2)
    else:
        torch_fl.init_distributed("acme:1", rank=1, world_size=2)
    t = torch.ones(1000, device=f"acme:{rank}") * (dist.get_rank() + 1)
    dist.all_reduce(t)
    assert t.device.type == "acme"
    assert torch.equal(t.cpu(), torch.full((1000,), 3.0)), t[:4]
    # acme tensors through gloo (staged by acme's C++ group), CPU tensors through gloo
    assert dist.get_backend() == "cpu:gloo,acme:gloo_acme"
    group_backend = dist.group.WORLD._get_backend(torch.device(f"acme:{rank}"))
    assert group_backend.name() == "gloo_acme" and not group_backend.native
    dist.destroy_process_group()


if __name__ == "__main__":
    _article_all_reduce(int(sys.argv[1]))
    sys.exit(0)


# ----------------------------------------------------------------- the table

def test_get_supported_ops_as_in_the_article():
    supported_ops = torch_fl.get_supported_ops("acme:0")
    assert "aten::add" in supported_ops
    assert "aten::mul" in supported_ops
    assert "aten::conv2d" in supported_ops
    assert "aten::batch_norm" in supported_ops
    # why: conv2d and batch_norm are composite and decompose into native ops
    conv = supported_ops.explain("aten::conv2d")
    assert conv.how == "composite" and "convolution_overrideable" in conv.detail
    assert supported_ops.explain("aten::batch_norm").how == "composite"
    assert supported_ops.explain("aten::add").how == "native"
    # the exact-overload forms keep working, and it is still the sorted kernel list
    assert "add.Tensor" in supported_ops and "aten::add.Tensor" in supported_ops
    assert supported_ops == sorted(supported_ops) and "add.Tensor" in list(supported_ops)
    # what acme does not run is not in it: bincount (its output size depends on the
    # data) goes to the CPU fallback
    assert "aten::bincount" not in supported_ops
    assert supported_ops.explain("aten::bincount").how == "fallback"
    assert "aten::no_such_op" not in supported_ops
    assert "aten::add.NoSuchOverload" not in supported_ops


def test_compare_precision_as_in_the_article():
    from torch_fl import compare_precision

    conv = torch.nn.Conv2d(3, 64, 3, padding=1)
    input_tensor = torch.randn(2, 3, 16, 16)
    max_diff, rel_diff = compare_precision(conv, input_tensor)
    assert 0 <= max_diff < 1e-4 and 0 <= rel_diff < 1e-2
    # the richer report stays: one TensorDiff per output, devices, ok
    report = compare_precision(conv, input_tensor)
    assert report.device_a == "cpu" and report.device_b == "acme:0"
    assert report.ok and report.diffs[0].shape == [2, 64, 16, 16]
    assert conv.weight.device.type == "cpu"  # the module was copied, not moved
    # a wrong device result shows up in the pair
    off, _ = compare_precision(_OffByOneOnDevice(conv), input_tensor, device_b="acme:0")
    assert off == pytest.approx(1.0, abs=1e-4)


class _OffByOneOnDevice(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + (x.device.type != "cpu")


def test_fallback_log_as_in_the_article():
    torch_fl.clear_fallback_log()
    torch_fl.set_fallback_mode(True)
    counts = torch.bincount(torch.tensor([1, 2, 2], device="acme:0"))  # no acme kernel: CPU fallback
    assert counts.device.type == "acme" and counts.tolist() == [0, 1, 2]
    seen = {}
    for entry in torch_fl.get_fallback_log():
        seen[entry["op"]] = entry["count"]
    assert seen.get("bincount", 0) >= 1


@pytest.fixture
def restore_memory_config():
    before = torch_fl.get_memory_config("acme:0")
    yield
    torch_fl.set_memory_config("acme:0", before)


def test_set_memory_config_as_in_the_article(restore_memory_config):
    with pytest.warns(UserWarning, match="exceeds acme:0's capacity"):
        torch_fl.set_memory_config("acme:0", {"pool_size": 4 * 1024**3,
                                              "enable_fragmentation_avoid": True,
                                              "alignment": 256})
    cfg = torch_fl.get_memory_config("acme:0")
    assert cfg["pool_limit_mb"] == 4096
    assert cfg["max_split_size_mb"] == torch_fl.memory.FRAGMENTATION_AVOID_SPLIT_MB
    assert cfg["round_size"] == 256
    before = torch_fl.memory_allocated("acme:0")
    x = torch.empty(700, dtype=torch.uint8, device="acme:0")
    assert torch_fl.memory_allocated("acme:0") - before == 768  # rounded up to 256, not 512
    del x
    torch_fl.set_memory_config("acme:0", {"pool_size": 64 * 1024**2,
                                          "enable_fragmentation_avoid": False})
    cfg = torch_fl.get_memory_config("acme:0")
    assert cfg["pool_limit_mb"] == 64 and cfg["max_split_size_mb"] is None
    with pytest.raises(torch.OutOfMemoryError):  # the pool limit binds
        torch.empty(80 * 1024**2, dtype=torch.uint8, device="acme:0")


@pytest.mark.parametrize("config, match", [
    ({"pool_size": 0}, "pool_size must be a positive integer"),
    ({"pool_size": 1.5e9}, "pool_size must be a positive integer"),
    ({"enable_fragmentation_avoid": "yes"}, "enable_fragmentation_avoid must be True or False"),
    ({"alignment": 100}, "alignment must be a power of two"),
    ({"alignment": 256, "round_size": 512}, "'round_size' both set the allocator's round_size"),
    ({"pool_sizes": 1}, "unknown memory config key 'pool_sizes'.*pool_size"),
])
def test_set_memory_config_article_keys_reject_bad_values(config, match, restore_memory_config):
    before = torch_fl.get_memory_config("acme:0")
    with pytest.raises(ValueError, match=match):
        torch_fl.set_memory_config("acme:0", config)
    assert torch_fl.get_memory_config("acme:0") == before  # nothing changed


def test_set_comm_backend_gloo_and_all_reduce_as_in_the_article():
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    run_ranks([[sys.executable, str(HERE), str(rank)] for rank in (0, 1)], env=env, timeout=60,
              label="gloo all_reduce")


def test_set_comm_backend_gloo_keeps_acmeccl():
    import torch.distributed as dist

    from torch_fl import distributed as fld

    assert torch_fl.set_comm_backend("gloo") == "gloo"
    assert fld.comm_backend_for("acme") == "gloo"
    assert fld.registered_comm_backends()["gloo_acme"] == "acme"
    assert dist.get_default_backend_for_device("acme") == "gloo_acme"
    assert torch_fl.set_comm_backend("acmeccl", "acme") == "acmeccl"
    assert fld.comm_backend_for("acme") == "acmeccl"
    assert dist.get_default_backend_for_device("acme") == "acmeccl"


def test_precision_as_in_the_article():
    info = torch_fl.get_supported_precision("acme:0")
    assert torch.float16 in info["amp_dtypes"]
    try:
        for float16 in (torch.float16, "float16"):
            torch_fl.set_auto_mixed_precision(True, dtype=float16)
            a = torch.randn(8, 8, device="acme:0")
            assert (a @ a).dtype == torch.float16
            assert torch_fl.get_auto_mixed_precision("acme:0")["dtype"] == torch.float16
    finally:
        torch_fl.set_auto_mixed_precision(False)
    with pytest.raises(ValueError, match="unknown dtype 'float61'"):
        torch_fl.set_auto_mixed_precision(True, dtype="float61")
    with pytest.raises(ValueError, match=r"acme does not support autocast to torch.float64; "
                                         r"supported: torch.bfloat16, torch.float16"):
        torch_fl.set_auto_mixed_precision(True, dtype="float64")


def _classifier_and_data():
    torch.manual_seed(0)
    centers = torch.randn(4, 16) * 3
    y = torch.randint(0, 4, (512,))
    x = centers[y] + torch.randn(512, 16)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(60):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    data = torch.utils.data.TensorDataset(x, y)
    return model, data


def test_quantization_as_in_the_article():
    import torch_fl.quantization as quant

    model, dataset = _classifier_and_data()
    calib_data = [dataset.tensors[0][i:i + 64] for i in range(0, 256, 64)]
    test_loader = torch.utils.data.DataLoader(dataset, batch_size=128)
    quant.calibrate(model, calib_data, device="acme:0")
    report = quant.evaluate(model, test_loader, device="acme:0")
    assert report.metric == "accuracy"
    assert report.float_score > 0.9
    assert report.drop == pytest.approx(report.float_score - report.quant_score)
    assert "drop" in report.advice and "%" in report.advice
    assert report.needs_mixed == (report.drop > 0.01)
    assert set(report.sensitivity) == {"0", "2"}


def test_quantization_advice_follows_the_one_percent_rule():
    from torch_fl.quantization import QuantReport

    big = QuantReport("accuracy", 0.95, 0.92, 0.03, ["a", "b"], {"a": 0.025, "b": 0.001})
    assert big.needs_mixed and "mixed quantization" in big.advice and "budget=" in big.advice
    small = QuantReport("accuracy", 0.95, 0.945, 0.005, ["a"], {"a": 0.005})
    assert not small.needs_mixed and "full int8 is fine" in small.advice


def test_evaluate_without_calibration_says_what_to_do():
    import torch_fl.quantization as quant

    model, dataset = _classifier_and_data()
    with pytest.raises(ValueError, match=r"never calibrated; call quant.calibrate"):
        quant.evaluate(model, torch.utils.data.DataLoader(dataset), device="acme:0")
