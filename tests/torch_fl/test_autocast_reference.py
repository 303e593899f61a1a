"""torch_fl.testing.autocast_reference: CPU autocast follows CUDA's policy inside
the block (each policy kind CUDA uses), and CPU's own policy comes back after it."""

import pytest
import torch
import torch.nn.functional as F

from torch_fl.testing.autocast_reference import cuda_autocast_policy_on_cpu

BF16 = torch.bfloat16


def _under(policy_on, fn):
    if policy_on:
        with cuda_autocast_policy_on_cpu(), torch.autocast("cpu", dtype=BF16):
            return fn()
    with torch.autocast("cpu", dtype=BF16):
        return fn()


def test_each_cuda_policy_kind_on_cpu():
    x, a = torch.randn(4, 8), torch.randn(4, 8).to(BF16)
    with cuda_autocast_policy_on_cpu(), torch.autocast("cpu", dtype=BF16):
        assert torch.mm(x, x.t()).dtype == BF16                                  # lower_precision_fp
        assert F.layer_norm(a, (8,)).dtype == torch.float32                      # fp32
        assert torch.exp(a).dtype == torch.float32
        assert torch.softmax(a, -1).dtype == torch.float32                       # fp32_set_opt_dtype
        assert torch.softmax(a, -1, dtype=BF16).dtype == BF16                    # ... an explicit dtype stays
        assert torch.norm(a).dtype == torch.float32                              # fp32_append_dtype
        # ... the redispatch gets the arguments the call left at their defaults
        assert torch.ops.aten.norm.Scalar(a).dtype == torch.float32
        assert torch.equal(torch.ops.aten.norm.ScalarOpt_dim(a, 2, [1]), torch.norm(a.float(), dim=1))
        assert torch.addcmul(x, a, a).dtype == torch.float32                     # promote: widest wins
        assert torch.addcmul(a, a, a).dtype == BF16
        assert torch.cat([x, a]).dtype == torch.float32                          # CPU-only promote falls through
        assert torch.mm(x.double(), x.double().t()).dtype == torch.float64       # float64 is never cast
        with pytest.raises(RuntimeError, match="unsafe to autocast"):            # banned, as on CUDA
            F.binary_cross_entropy(torch.rand(4), torch.rand(4))


def test_cross_entropy_rounds_like_cuda():
    """CPU's own policy runs cross_entropy_loss in float32; CUDA's lets
    log_softmax run in the input's dtype (cross_entropy passes it) and nll_loss
    in float32."""
    logits, target = torch.randn(4, 10).to(BF16), torch.randint(0, 10, (4,))
    cuda = _under(True, lambda: F.cross_entropy(logits, target))
    cpu = _under(False, lambda: F.cross_entropy(logits, target))
    assert cuda.dtype == cpu.dtype == torch.float32
    assert torch.equal(cuda, F.nll_loss(torch.log_softmax(logits, 1).float(), target))
    assert torch.equal(cpu, F.cross_entropy(logits.float(), target))


def test_cpu_policy_is_back_after_the_block():
    a = torch.randn(4, 8).to(BF16)
    assert _under(True, lambda: F.layer_norm(a, (8,))).dtype == torch.float32
    assert _under(False, lambda: F.layer_norm(a, (8,))).dtype == BF16
    assert _under(False, lambda: torch.cat([a.float(), a])).dtype == torch.float32  # CPU's promote
    logits, target = torch.randn(4, 10).to(BF16), torch.randint(0, 10, (4,))
    assert torch.equal(_under(False, lambda: F.cross_entropy(logits, target)),
                       F.cross_entropy(logits.float(), target))
