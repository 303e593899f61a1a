"""Smoke test of the acme backend: a tensor op runs on the device."""

import torch


def test_add_on_device():
    x = torch.ones(4, device="acme")
    y = (x + 1).cpu()
    assert torch.equal(y, torch.full((4,), 2.0))


def test_fallback_log_records_ops():
    import torch_fl_acme._C as native

    native.clear_fallback_log()
    # the probe op has a CPU kernel only, so no backend can run it natively: it must fall back
    from torch_fl.testing.fallback_probe import FALLBACK_PROBE, fallback_probe

    x = torch.arange(6.0, device="acme").reshape(2, 3)
    assert torch.equal(fallback_probe()(x).cpu(), x.cpu() * 2 + 1)
    ops = {entry["op"] for entry in native.fallback_log()}
    assert FALLBACK_PROBE in ops, f"an op without a native kernel must be logged, got {ops}"
