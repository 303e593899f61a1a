"""ATen ops that a PrivateUse1 backend is asked for but CPU never implements.

PyTorch's composites route some work to device-only entry points on
PrivateUse1: `convolution` ends in `convolution_overrideable` (whose own
kernel only throws "not implemented"), RNN cells use the fused
`_thnn_fused_*_cell` ops that only CUDA implements. The boxed CPU fallback
cannot run them (CPU has no kernel), so when a backend does not implement
them natively the generated glue registers what is written here instead:

* `cpu_reference`: the CPU op computing the same thing; the glue runs it on
  host copies, through the logged CPU fallback (`convolution_overrideable`
  runs as CPU's `aten::convolution`).
* `composite`: the glue decomposes the op into other ATen ops on the device
  (fallback.cpp), logged as a fallback of the op itself.
* neither: the op must be native; calling it raises an error naming the op,
  the device and what the vendor must implement, and `flsdk ops`,
  `flsdk check` and `torch_fl.check_ops` report it with `reached_by`.
"""

from __future__ import annotations

from typing import NamedTuple


class DeviceOnlyOp(NamedTuple):
    reached_by: str                # the user-level code that reaches the op on PrivateUse1
    cpu_reference: str | None = None
    composite: bool = False

    @property
    def must_be_native(self) -> bool:
        return self.cpu_reference is None and not self.composite

    @property
    def runs_as(self) -> str:
        """Without a native kernel: 'cpu_reference', 'composite' or 'error'."""
        return "cpu_reference" if self.cpu_reference else "composite" if self.composite else "error"

    @property
    def without_native(self) -> str:
        """What happens when the backend has no kernel, for reports."""
        if self.cpu_reference:
            return f"runs as CPU's aten::{self.cpu_reference} on the CPU fallback"
        if self.composite:
            return "runs as a generated composite of other ops (logged as a fallback)"
        return f"must be native: no CPU kernel exists ({self.reached_by})"


DEVICE_ONLY_OPS: dict[str, DeviceOnlyOp] = {
    "convolution_overrideable": DeviceOnlyOp("nn.Conv*d / F.conv*d", cpu_reference="convolution"),
    "convolution_backward_overrideable": DeviceOnlyOp(
        "the backward of nn.Conv*d", cpu_reference="convolution_backward"),
    "_thnn_fused_lstm_cell": DeviceOnlyOp("nn.LSTM / nn.LSTMCell", composite=True),
    "_thnn_fused_lstm_cell_backward_impl": DeviceOnlyOp("the backward of nn.LSTM", composite=True),
    "_thnn_fused_gru_cell": DeviceOnlyOp("nn.GRU / nn.GRUCell", composite=True),
    "_thnn_fused_gru_cell_backward": DeviceOnlyOp("the backward of nn.GRU", composite=True),
    "batch_norm_stats": DeviceOnlyOp("nn.SyncBatchNorm"),
    "batch_norm_gather_stats_with_counts": DeviceOnlyOp("nn.SyncBatchNorm"),
    "batch_norm_elemt": DeviceOnlyOp("nn.SyncBatchNorm"),
    "batch_norm_backward_reduce": DeviceOnlyOp("the backward of nn.SyncBatchNorm"),
    "batch_norm_backward_elemt": DeviceOnlyOp("the backward of nn.SyncBatchNorm"),
}
# Not listed: record_stream (CUDA-only in ATen) is part of the generated glue
# (minimal_ops.cpp: the caching allocator honours it);
# _scaled_dot_product_fused_attention_overrideable(_backward) are
# reached only when the backend implements both (the glue's _fused_sdp_choice);
# otherwise attention takes the math path.
