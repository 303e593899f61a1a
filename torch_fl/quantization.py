"""torch_fl.quantization: calibrate, simulate and plan int8 quantization on a device.

The workflow, whatever the chip:

1. ``calib = calibrate(model, data, "acme", scheme="per_channel")`` runs the model on
   the device over calibration batches and, with torch.ao observers, computes the
   scale / zero point of every Linear and Conv layer's weight (per tensor or per
   output channel) and input activation (per tensor). Schemes and dtypes the device
   descriptor does not list (``quantization: {schemes, dtypes}`` in device.yaml) are
   refused before anything runs.
2. ``fake_quantize_model(model, calib)`` returns a copy of the model on the device
   whose layers fake-quantize (quantize, clamp, dequantize) their input and weight
   with the calibrated parameters: the numerics of an int8 kernel, run with the
   device's float kernels. Fake quantization is written with elementary ops
   (mul, round, clamp, sub) so it runs on any backend natively rather than needing
   torch's fused fake-quant kernels.
3. ``report = evaluate(model, calib, data, labels)`` measures the float and the
   quantized score (accuracy with labels, or the relative output error without),
   the drop, and each layer's sensitivity: the drop when only that layer is
   quantized.
4. ``plan = mixed_plan(report, budget=2)`` (or ``threshold=``) keeps the most
   sensitive layers in float; ``evaluate(model, calib, data, labels, plan=plan)``
   measures the mixed model.

Only weights and layer inputs are quantized; biases stay float (an int8 kernel
accumulates in int32 where the bias is exact to the accumulator's scale).
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.ao.quantization.observer import (
    HistogramObserver,
    MinMaxObserver,
    PerChannelMinMaxObserver,
)

__all__ = [
    "Calibration",
    "LayerQuant",
    "MixedPlan",
    "QuantReport",
    "QuantizationNotSupported",
    "calibrate",
    "evaluate",
    "fake_quantize",
    "fake_quantize_model",
    "mixed_plan",
    "supported",
]

# The article's threshold: more accuracy drop than this -> mixed quantization.
MIXED_ADVICE_DROP = 0.01

# The last calibration of each model, so evaluate(model, loader) can find it
# (the article's calibrate(...); evaluate(...) sequence keeps no handle).
_last_calibration: weakref.WeakKeyDictionary[nn.Module, Calibration] = weakref.WeakKeyDictionary()

# Layers whose weight and input are quantized.
QUANTIZABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)

# User-facing scheme names -> torch qscheme. "per_tensor"/"per_channel" are the
# affine forms (the descriptor's per_tensor_affine / per_channel_affine).
_SCHEMES = {
    "per_tensor": torch.per_tensor_affine,
    "per_tensor_affine": torch.per_tensor_affine,
    "per_tensor_symmetric": torch.per_tensor_symmetric,
    "per_channel": torch.per_channel_affine,
    "per_channel_affine": torch.per_channel_affine,
    "per_channel_symmetric": torch.per_channel_symmetric,
}
_QSCHEME_NAME = {
    torch.per_tensor_affine: "per_tensor_affine",
    torch.per_tensor_symmetric: "per_tensor_symmetric",
    torch.per_channel_affine: "per_channel_affine",
    torch.per_channel_symmetric: "per_channel_symmetric",
}
# Storage dtype -> (observer dtype, name used in device descriptors)
_DTYPES = {
    torch.int8: (torch.qint8, "int8"),
    torch.qint8: (torch.qint8, "int8"),
    torch.uint8: (torch.quint8, "uint8"),
    torch.quint8: (torch.quint8, "uint8"),
}
# What the CPU reference path implements (CPU has no descriptor).
_CPU_SCHEMES = list(_QSCHEME_NAME.values())
_CPU_DTYPES = ["int8", "uint8"]


class QuantizationNotSupported(ValueError):
    """The device does not support the requested quantization scheme or dtype."""


# ------------------------------------------------------------------ device rules

def supported(device: str | torch.device) -> dict[str, list[str]]:
    """{"schemes": [...], "dtypes": [...]} the device's descriptor allows.

    CPU (the reference) allows everything this module implements.
    """
    device_type = torch.device(device).type
    if device_type == "cpu":
        return {"schemes": list(_CPU_SCHEMES), "dtypes": list(_CPU_DTYPES)}
    from . import _backends

    descriptor = getattr(_backends.backend(device_type), "DESCRIPTOR", None) or {}
    return {"schemes": list(descriptor.get("quantization_schemes") or []),
            "dtypes": list(descriptor.get("quantization_dtypes") or [])}


def _check_supported(device: torch.device, scheme: str, dtype: torch.dtype) -> tuple[torch.qscheme, torch.dtype]:
    if scheme not in _SCHEMES:
        raise QuantizationNotSupported(
            f"unknown quantization scheme '{scheme}'; use one of {', '.join(_SCHEMES)}")
    if dtype not in _DTYPES:
        raise QuantizationNotSupported(
            f"unsupported quantization dtype {dtype}; use torch.int8 or torch.uint8")
    qscheme = _SCHEMES[scheme]
    observer_dtype, dtype_name = _DTYPES[dtype]
    allowed = supported(device)
    scheme_name = _QSCHEME_NAME[qscheme]
    if scheme_name not in allowed["schemes"]:
        listed = ", ".join(allowed["schemes"]) or "none"
        raise QuantizationNotSupported(
            f"device '{device.type}' does not support quantization scheme '{scheme}' "
            f"({scheme_name}); its descriptor allows: {listed}")
    if dtype_name not in allowed["dtypes"]:
        listed = ", ".join(allowed["dtypes"]) or "none"
        raise QuantizationNotSupported(
            f"device '{device.type}' does not support quantization dtype {dtype_name}; "
            f"its descriptor allows: {listed} (schemes: {', '.join(allowed['schemes']) or 'none'})")
    return qscheme, observer_dtype


# ------------------------------------------------------------------ data model

@dataclass
class LayerQuant:
    """Quantization parameters of one layer (tensors kept on CPU)."""

    name: str
    kind: str                         # "Linear", "Conv2d", ...
    weight_scale: torch.Tensor        # shape [] (per tensor) or [out_channels]
    weight_zero_point: torch.Tensor   # same shape, int64
    weight_axis: int | None           # channel axis for per-channel, else None
    input_scale: float
    input_zero_point: int
    quant_min: int
    quant_max: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind,
            "weight_scale": self.weight_scale.tolist(),
            "weight_zero_point": self.weight_zero_point.tolist(),
            "weight_axis": self.weight_axis,
            "input_scale": self.input_scale, "input_zero_point": self.input_zero_point,
            "quant_min": self.quant_min, "quant_max": self.quant_max,
        }


@dataclass
class Calibration:
    """Result of `calibrate`: per-layer parameters plus what they were made for."""

    device: str                       # device type the scheme was checked against
    scheme: str                       # e.g. "per_channel_affine"
    dtype: torch.dtype                # torch.int8 / torch.uint8
    observer: str                     # activation observer: "minmax" | "histogram"
    layers: dict[str, LayerQuant] = field(default_factory=dict)

    @property
    def layer_names(self) -> list[str]:
        return list(self.layers)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "scheme": self.scheme, "dtype": str(self.dtype),
                "observer": self.observer,
                "layers": {n: q.to_dict() for n, q in self.layers.items()}}


@dataclass
class MixedPlan:
    """Which layers run quantized and which stay in float."""

    quantized: list[str]
    float_layers: list[str]

    def __contains__(self, name: str) -> bool:
        return name in self.quantized


@dataclass
class QuantReport:
    """Result of `evaluate`. Scores are "higher is better" except for output error.

    `drop` is always "how much worse than float": float - quantized for accuracy
    and custom metrics, quantized - float for the output error.
    """

    metric: str
    float_score: float
    quant_score: float
    drop: float
    quantized_layers: list[str]
    sensitivity: dict[str, float] = field(default_factory=dict)

    def most_sensitive(self, n: int | None = None) -> list[str]:
        order = sorted(self.sensitivity, key=lambda k: self.sensitivity[k], reverse=True)
        return order if n is None else order[:n]

    @property
    def needs_mixed(self) -> bool:
        """The Torch-FL article's rule: an accuracy drop above 1 % (absolute) calls
        for mixed quantization. Only defined for the accuracy metric (else False)."""
        return self.metric == "accuracy" and self.drop > MIXED_ADVICE_DROP

    @property
    def advice(self) -> str:
        if self.metric != "accuracy":
            return (f"{self.metric} {self.quant_score:.4g} quantized vs {self.float_score:.4g} "
                    f"float (the 1 % rule needs labels: pass (inputs, targets) batches)")
        head = (f"accuracy {self.quant_score:.2%} quantized vs {self.float_score:.2%} float: "
                f"drop {self.drop:.2%}")
        if not self.needs_mixed:
            return head + f" (<= {MIXED_ADVICE_DROP:.0%}): full int8 is fine"
        worst = self.most_sensitive(3)
        hint = (f"; most sensitive layers: {', '.join(worst)}; try "
                f"mixed_plan(report, budget={len(worst)})") if worst else ""
        return head + f" (> {MIXED_ADVICE_DROP:.0%}): use mixed quantization, keep the most " \
            "sensitive layers in float" + hint

    def __str__(self) -> str:
        return self.advice


# ------------------------------------------------------------------ fake quant

def _qparams(scale: torch.Tensor | float, zero_point: torch.Tensor | int, ndim: int,
             axis: int | None, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(scale, 1/scale, zero point) as float32 tensors on `device`, shaped to
    broadcast along `axis`. 1/scale is computed in float32 on the host, as torch's
    fake-quant kernels do, so results match them bit for bit."""
    scale_t = torch.as_tensor(scale, dtype=torch.float32).detach().cpu()
    zp_t = torch.as_tensor(zero_point, dtype=torch.float32).detach().cpu()
    if axis is not None and scale_t.dim() == 1:
        shape = [1] * ndim
        shape[axis] = -1
        scale_t, zp_t = scale_t.reshape(shape), zp_t.reshape(shape)
    inv_t = 1.0 / scale_t
    return scale_t.to(device), inv_t.to(device), zp_t.to(device)


def _fake_quant(x: torch.Tensor, scale: torch.Tensor, inv_scale: torch.Tensor,
                zero_point: torch.Tensor, quant_min: int, quant_max: int) -> torch.Tensor:
    q = torch.clamp(torch.round(x * inv_scale) + zero_point, quant_min, quant_max)
    return ((q - zero_point) * scale).to(x.dtype)


def fake_quantize(x: torch.Tensor, scale: torch.Tensor | float, zero_point: torch.Tensor | int,
                  quant_min: int, quant_max: int, axis: int | None = None) -> torch.Tensor:
    """Quantize to [quant_min, quant_max] and dequantize, with elementary ops.

    Same numerics as torch.fake_quantize_per_{tensor,channel}_affine (multiply by
    the inverse scale, round half to even, clamp), but made of mul/round/add/clamp/sub
    so every backend runs it with its own kernels. `axis` names the channel axis
    of a per-channel `scale`/`zero_point`.
    """
    s, inv, zp = _qparams(scale, zero_point, x.dim(), axis, x.device)
    return _fake_quant(x, s, inv, zp, quant_min, quant_max)


class FakeQuantized(nn.Module):
    """A Linear/Conv layer whose input and weight are fake-quantized.

    The weight is fake-quantized once at construction (it is constant during
    evaluation); the input is fake-quantized on every call, with its parameters
    kept as buffers on the layer's device (no host->device copy per call).
    """

    in_scale: torch.Tensor           # buffers, registered in __init__
    in_inv_scale: torch.Tensor
    in_zero_point: torch.Tensor

    def __init__(self, layer: nn.Module, q: LayerQuant):
        super().__init__()
        self.layer = copy.deepcopy(layer)
        self.qname = q.name
        self.quant_min, self.quant_max = q.quant_min, q.quant_max
        self.input_scale, self.input_zero_point = q.input_scale, q.input_zero_point
        w = self.layer.weight
        assert isinstance(w, torch.Tensor)  # a Linear/Conv layer
        with torch.no_grad():
            w.copy_(fake_quantize(w, q.weight_scale, q.weight_zero_point,
                                  q.quant_min, q.quant_max, q.weight_axis))
        s, inv, zp = _qparams(q.input_scale, q.input_zero_point, 0, None, w.device)
        self.register_buffer("in_scale", s)
        self.register_buffer("in_inv_scale", inv)
        self.register_buffer("in_zero_point", zp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _fake_quant(x, self.in_scale, self.in_inv_scale, self.in_zero_point,
                        self.quant_min, self.quant_max)
        return self.layer(x)

    def extra_repr(self) -> str:
        return (f"{self.qname}: input scale={self.input_scale:.4g} zp={self.input_zero_point}, "
                f"q=[{self.quant_min},{self.quant_max}]")


def fake_quantize_model(model: nn.Module, calibration: Calibration,
                        layers: Iterable[str] | MixedPlan | None = None,
                        device: str | torch.device | None = None) -> nn.Module:
    """A copy of `model` on `device` with `layers` (default: all calibrated) fake-quantized.

    The original model is not modified. `device` defaults to the model's device.
    """
    swapper = _LayerSwapper(model, calibration, device)
    swapper.quantize(_plan_layers(calibration, layers))
    return swapper.model


class _LayerSwapper:
    """One copy of the model on the device whose layers can be switched between
    float and fake-quantized without copying the model again (sensitivity runs
    quantize each layer alone, so copying per run would dominate the time)."""

    def __init__(self, model: nn.Module, calibration: Calibration,
                 device: str | torch.device | None):
        self.model = copy.deepcopy(model)
        if device is not None:
            dev = torch.device(device)
            if dev.type != calibration.device:
                # calibrated elsewhere (e.g. on CPU): the target must run this scheme too
                _check_supported(dev, calibration.scheme, calibration.dtype)
            self.model = self.model.to(dev)
        self.model.eval()
        self.calibration = calibration
        self.original = {n: self.model.get_submodule(n) for n in calibration.layers}
        self.wrapped: dict[str, FakeQuantized] = {}

    def _set(self, name: str, module: nn.Module) -> None:
        parent_name, _, attr = name.rpartition(".")
        parent = self.model.get_submodule(parent_name) if parent_name else self.model
        setattr(parent, attr, module)

    def quantize(self, names: Iterable[str]) -> nn.Module:
        chosen = set(names)
        for name, layer in self.original.items():
            if name in chosen:
                if name not in self.wrapped:
                    self.wrapped[name] = FakeQuantized(layer, self.calibration.layers[name])
                self._set(name, self.wrapped[name])
            else:
                self._set(name, layer)
        return self.model


def _plan_layers(calibration: Calibration, layers: Iterable[str] | MixedPlan | None) -> list[str]:
    if layers is None:
        return list(calibration.layers)
    names = list(layers.quantized) if isinstance(layers, MixedPlan) else list(layers)
    unknown = [n for n in names if n not in calibration.layers]
    if unknown:
        raise KeyError(f"layers not in the calibration: {', '.join(unknown)} "
                       f"(calibrated: {', '.join(calibration.layers)})")
    return names


# ------------------------------------------------------------------ data helpers

def _batches(data: Any) -> list[Any]:
    """A tensor is one batch; any other iterable yields batches."""
    if isinstance(data, torch.Tensor):
        return [data]
    return list(data)


def _inputs_of(batch: Any) -> Any:
    # DataLoaders yield (inputs, targets): the model takes the first element.
    if isinstance(batch, (tuple, list)):
        return batch[0]
    return batch


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(_to(v, device) for v in x)
    return x


def _call(model: nn.Module, batch: Any, device: torch.device) -> torch.Tensor:
    inputs = _to(_inputs_of(batch), device)
    out = model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)
    if isinstance(out, (tuple, list)):  # models returning (logits, loss)
        out = out[0]
    return out


# ------------------------------------------------------------------ calibrate

def calibrate(model: nn.Module, data: Any, device: str | torch.device,
              scheme: str = "per_tensor", dtype: torch.dtype = torch.int8, *,
              observer: str = "minmax",
              layers: Iterable[str] | None = None) -> Calibration:
    """Compute scales / zero points of every Linear/Conv layer's weight and input.

    The model runs (on a copy; `model` is not modified) on `device` over `data`
    (a tensor, or an iterable of batches; a batch that is a tuple/list gives its
    first element to the model). Activations use a per-tensor observer
    (`observer="minmax"` or `"histogram"`); weights use MinMax, per output channel
    when `scheme` is per_channel. `layers` restricts calibration to some module
    names. Raises `QuantizationNotSupported` before running anything if the device
    descriptor does not list the scheme or dtype.
    """
    dev = torch.device(device)
    qscheme, observer_dtype = _check_supported(dev, scheme, dtype)
    if observer not in ("minmax", "histogram"):
        raise ValueError(f"observer must be 'minmax' or 'histogram', got '{observer}'")
    per_channel = qscheme in (torch.per_channel_affine, torch.per_channel_symmetric)
    # Activations are per tensor whatever the weight scheme; symmetric stays symmetric.
    act_qscheme = (torch.per_tensor_symmetric
                   if qscheme in (torch.per_tensor_symmetric, torch.per_channel_symmetric)
                   else torch.per_tensor_affine)

    work = copy.deepcopy(model).to(dev).eval()
    wanted = set(layers) if layers is not None else None
    targets = [(n, m) for n, m in work.named_modules()
               if isinstance(m, QUANTIZABLE) and (wanted is None or n in wanted)]
    if wanted is not None:
        missing = wanted - {n for n, _ in targets}
        if missing:
            raise KeyError(f"not Linear/Conv layers of the model: {', '.join(sorted(missing))}")
    if not targets:
        raise ValueError("the model has no Linear/Conv layer to quantize")

    act_cls = HistogramObserver if observer == "histogram" else MinMaxObserver
    act_obs = {n: act_cls(dtype=observer_dtype, qscheme=act_qscheme) for n, _ in targets}

    def hook(name: str):
        def pre(_module, args):
            # Observers run on the host: calibration is offline, and the observed
            # statistics then do not depend on which reductions a backend has.
            act_obs[name](args[0].detach().to("cpu", torch.float32))
        return pre

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in targets]
    try:
        with torch.no_grad():
            seen = 0
            for batch in _batches(data):
                _call(work, batch, dev)
                seen += 1
        if seen == 0:
            raise ValueError("calibrate: `data` yielded no batch")
    finally:
        for h in handles:
            h.remove()

    result = Calibration(device=dev.type, scheme=_QSCHEME_NAME[qscheme], dtype=dtype,
                         observer=observer)
    for name, module in targets:
        weight = module.weight.detach().to("cpu", torch.float32)
        if per_channel:
            w_obs = PerChannelMinMaxObserver(ch_axis=0, dtype=observer_dtype, qscheme=qscheme)
        else:
            w_obs = MinMaxObserver(dtype=observer_dtype, qscheme=qscheme)
        w_obs(weight)
        w_scale, w_zp = w_obs.calculate_qparams()
        a_obs = act_obs[name]
        if a_obs.min_val.numel() == 0 or not torch.isfinite(a_obs.min_val).all():
            raise ValueError(f"calibrate: layer '{name}' was never called by the model on `data`")
        a_scale, a_zp = a_obs.calculate_qparams()
        result.layers[name] = LayerQuant(
            name=name, kind=type(module).__name__,
            weight_scale=(w_scale if per_channel else w_scale.reshape(())).float(),
            weight_zero_point=(w_zp if per_channel else w_zp.reshape(())).long(),
            weight_axis=0 if per_channel else None,
            input_scale=float(a_scale), input_zero_point=int(a_zp),
            quant_min=int(w_obs.quant_min), quant_max=int(w_obs.quant_max),
        )
    _last_calibration[model] = result
    return result


# ------------------------------------------------------------------ evaluate

Metric = Callable[[torch.Tensor, torch.Tensor], float]


def _accuracy(outputs: torch.Tensor, labels: torch.Tensor) -> float:
    return float((outputs.argmax(dim=-1) == labels).to(torch.float32).mean())


def _collect(model: nn.Module, batches: list[Any], device: torch.device) -> list[torch.Tensor]:
    with torch.no_grad():
        return [_call(model, b, device).to("cpu", torch.float32) for b in batches]


def _labels_for(batches: list[Any], labels: Any) -> list[torch.Tensor] | None:
    if labels is not None:
        got = _batches(labels)
        if len(got) != len(batches):
            raise ValueError(f"{len(got)} label batches for {len(batches)} data batches")
        return [torch.as_tensor(y).cpu() for y in got]
    if all(isinstance(b, (tuple, list)) and len(b) >= 2 for b in batches):
        return [torch.as_tensor(b[1]).cpu() for b in batches]
    return None


def _output_error(reference: list[torch.Tensor], outputs: list[torch.Tensor]) -> float:
    # Relative L2 error over all batches: scale-free, 0 for identical outputs.
    num = sum(float((o - r).pow(2).sum()) for o, r in zip(outputs, reference))
    den = sum(float(r.pow(2).sum()) for r in reference)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def evaluate(model: nn.Module, calibration: Calibration | Any, data: Any = None,
             labels: Any = None, *,
             metric: Metric | str | None = None, plan: Iterable[str] | MixedPlan | None = None,
             device: str | torch.device | None = None,
             sensitivity: bool = True) -> QuantReport:
    """Score of the float and the fake-quantized model, the drop, per-layer sensitivity.

    Two call forms:
    * `evaluate(model, test_loader, device="acme:0")` (the Torch-FL article's):
      uses the model's last `calibrate` result; the loader yields
      (inputs, targets) batches, so the score is accuracy, and `report.advice`
      applies the article's rule (more than 1 % drop -> mixed quantization).
    * `evaluate(model, calibration, data, labels)`.

    * `metric`: "accuracy" (default when labels are given or batches are
      (inputs, labels)), "output_error" (default otherwise: relative L2 error of
      the outputs against the float model's), or a callable(outputs, labels) ->
      float where higher is better (scored per batch, averaged).
    * `plan`: layers to quantize (names or a `MixedPlan`); default all calibrated.
    * `sensitivity`: also quantize each planned layer alone and record its drop.
    * `device`: where to run; default the calibration's device type (index 0 /
      current device).
    """
    if not isinstance(calibration, Calibration):
        if data is not None:
            raise TypeError("evaluate(model, calibration, data): the second argument must be a "
                            f"Calibration from calibrate(), got {type(calibration).__name__}")
        data, calibration = calibration, _last_calibration.get(model)
        if calibration is None:
            raise ValueError("evaluate(model, data): this model was never calibrated; call "
                             "quant.calibrate(model, calib_data, device=...) first, or pass "
                             "the Calibration: evaluate(model, calibration, data)")
    if data is None:
        raise TypeError("evaluate: no data given (a loader or batches of (inputs, targets))")
    dev = torch.device(device) if device is not None else torch.device(calibration.device)
    batches = _batches(data)
    if not batches:
        raise ValueError("evaluate: `data` yielded no batch")
    ys = _labels_for(batches, labels)
    if metric is None:
        metric = "accuracy" if ys is not None else "output_error"
    if metric in ("accuracy",) or callable(metric):
        if ys is None:
            raise ValueError(f"metric {getattr(metric, '__name__', metric)} needs labels")
    elif metric != "output_error":
        raise ValueError(f"unknown metric '{metric}': use 'accuracy', 'output_error' or a callable")

    swapper = _LayerSwapper(model, calibration, dev)
    reference = _collect(swapper.quantize([]), batches, dev)

    def score(outputs: list[torch.Tensor]) -> float:
        if metric == "output_error":
            return _output_error(reference, outputs)
        fn = _accuracy if metric == "accuracy" else metric
        assert callable(fn) and ys is not None  # checked above: accuracy or a callable, with labels
        total = sum(fn(o, y) * len(y) for o, y in zip(outputs, ys))
        return float(total) / sum(len(y) for y in ys)

    def drop(float_score: float, q_score: float) -> float:
        return q_score - float_score if metric == "output_error" else float_score - q_score

    def run(names: list[str]) -> float:
        return score(_collect(swapper.quantize(names), batches, dev))

    names = _plan_layers(calibration, plan)
    float_score = score(reference)
    quant_score = run(names)
    report = QuantReport(
        metric=metric if isinstance(metric, str) else getattr(metric, "__name__", "custom"),
        float_score=float_score, quant_score=quant_score,
        drop=drop(float_score, quant_score), quantized_layers=names)
    if sensitivity:
        for name in names:
            report.sensitivity[name] = drop(float_score, run([name]))
    return report


# ------------------------------------------------------------------ mixed precision

def mixed_plan(sensitivity: QuantReport | Mapping[str, float], budget: int | None = None,
               threshold: float | None = None) -> MixedPlan:
    """Keep the most sensitive layers in float, quantize the rest.

    Give exactly one of:
    * `budget`: how many layers stay in float (the most sensitive ones);
    * `threshold`: every layer whose sensitivity (drop when quantized alone) is
      above it stays in float.
    """
    if (budget is None) == (threshold is None):
        raise ValueError("mixed_plan: give exactly one of budget= or threshold=")
    sens = dict(sensitivity.sensitivity if isinstance(sensitivity, QuantReport) else sensitivity)
    if not sens:
        raise ValueError("mixed_plan: empty sensitivity (run evaluate(..., sensitivity=True))")
    order = sorted(sens, key=lambda k: sens[k], reverse=True)
    if budget is not None:
        if budget < 0:
            raise ValueError("mixed_plan: budget must be >= 0")
        keep = set(order[:budget])
    else:
        assert threshold is not None  # exactly one of budget and threshold
        keep = {n for n in order if sens[n] > threshold}
    return MixedPlan(quantized=[n for n in sens if n not in keep],
                     float_layers=[n for n in order if n in keep])
