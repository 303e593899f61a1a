"""The generated autocast policy: PyTorch's CUDA policy from the installed torch,
checked against torch's dispatcher, with op-spec overrides (flsdk/codegen/autocast.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torchgen.model import FunctionSchema

from flsdk.codegen import autocast
from flsdk.codegen.generate import generate
from flsdk.scaffold import render_backend
from flsdk.spec import SpecError, load_backend
from flsdk.spec.model import OpSpec

REPO = Path(__file__).resolve().parents[2]
ACME = REPO / "examples" / "acme_backend"


def spec(op: str, policy: str, file: str = "/x/opspec/mine.yaml", line: int = 3) -> OpSpec:
    return OpSpec(op=op, family="mine", file=file, line=line, dtypes=("float32",), variants=(),
                  autocast=policy, tolerances={}, samples=(), skip_conformance=None, schema=None,
                  is_custom=False)


def by_op(rules) -> dict[str, autocast.Rule]:
    return {r.op: r for r in rules}


# ---------------------------------------------------------------- the source


def test_header_lists_are_what_cuda_registers():
    """The header's lists plus the named CUDA extras are exactly the ops the installed
    libtorch wraps for AutocastCUDA: a torch that registers CUDA autocast for an op
    outside the lists (or drops one) fails here, not silently."""
    cuda = {name.removeprefix("aten::")
            for name in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA")}
    header = set(autocast.header_policy().policies)
    assert header | set(autocast.CUDA_EXTRAS) == cuda
    assert not header & set(autocast.CUDA_EXTRAS)


def test_policies_of_ops_users_hit():
    rules = autocast.torch_rules()
    expected = {
        "conv1d": "lower_precision_fp", "conv2d": "lower_precision_fp", "convolution": "lower_precision_fp",
        "linear": "lower_precision_fp", "matmul": "lower_precision_fp", "bmm": "lower_precision_fp",
        "scaled_dot_product_attention": "lower_precision_fp", "_thnn_fused_lstm_cell": "lower_precision_fp",
        "layer_norm": "fp32", "group_norm": "fp32", "rms_norm": "fp32", "exp": "fp32",
        "pow.Tensor_Scalar": "fp32", "mse_loss": "fp32", "nll_loss": "fp32",
        "softmax.int": "fp32_set_opt_dtype", "sum.dim_IntList": "fp32_set_opt_dtype",
        "norm.Scalar": "fp32_append_dtype", "index_put": "promote", "cross": "promote",
        "binary_cross_entropy": "banned",
    }
    assert {op: rules[op].policy for op in expected} == expected
    assert rules["norm.Scalar"].redispatch == "norm.ScalarOpt_dtype"
    assert rules["norm.ScalarOpt_dim"].redispatch == "norm.ScalarOpt_dim_dtype"
    assert "cudnn_convolution" not in rules
    assert {r.source for r in rules.values()} == {"torch"}


def test_every_torch_rule_casts_all_its_tensor_arguments():
    # conv2d's bias is a Tensor?, cat's inputs a Tensor[]: both are cast by cached_cast
    rules = autocast.policy_rules([])
    assert len(rules) == len(autocast.torch_rules())
    assert autocast.uncast_tensor_args(FunctionSchema.parse(
        "f(Tensor a, Tensor? bias, Tensor[] xs, Tensor?[] indices) -> Tensor")) == []
    assert autocast.uncast_tensor_args(FunctionSchema.parse(
        "f(Tensor a, Tensor?[] weights) -> Tensor")) == ["weights: Tensor?[]"]


HEADER = """
#define AT_FORALL_LOWER_PRECISION_FP(_)  \\
  _(_convolution, deprecated)            \\
  _(mm)
#define AT_FORALL_FP32(_) \\
  _(exp)                  \\
  _(pow, Tensor_Scalar)
#define AT_FORALL_FP32_SET_OPT_DTYPE(_) _(sum)
#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(_)                         \\
  _(ADD_NS(norm),                                                           \\
    "norm.Scalar",                                                          \\
    Tensor(const Tensor&, const Scalar&),                                   \\
    Tensor(const Tensor&, const std::optional<Scalar>&, ScalarType),        \\
    fp32_append_dtype)
#define AT_FORALL_PROMOTE(_) \\
  _(index_put)
"""


def test_parse_header():
    parsed = autocast.parse_header(HEADER)
    assert parsed.policies == {
        "_convolution.deprecated": "lower_precision_fp", "mm": "lower_precision_fp", "exp": "fp32",
        "pow.Tensor_Scalar": "fp32", "sum": "fp32_set_opt_dtype", "norm.Scalar": "fp32_append_dtype",
        "index_put": "promote"}
    func, register_sig, redispatch_sig = parsed.redispatch["norm.Scalar"]
    assert func == "norm" and register_sig == "Tensor(const Tensor&, const Scalar&)"
    assert autocast._redispatch_overload(func, redispatch_sig) == "norm.ScalarOpt_dtype"


def test_parse_header_says_when_the_lists_moved():
    with pytest.raises(ValueError, match="defines no AT_FORALL_PROMOTE.*must learn the new layout"):
        autocast.parse_header(HEADER.split("#define AT_FORALL_PROMOTE")[0], "x.h")


# ---------------------------------------------------------------- spec overrides


def test_spec_policy_overrides_torch_and_fallthrough_removes_it():
    rules = by_op(autocast.policy_rules([
        spec("mm", "fp32"),                 # replaces torch's lower_precision_fp
        spec("conv2d", "fallthrough"),      # removes torch's policy
        spec("add.Tensor", "promote"),      # adds one torch has not
        spec("exp", "none"),                # keeps torch's
    ]))
    assert rules["mm"] == autocast.Rule("mm", "fp32", "opspec/mine.yaml")
    assert "conv2d" not in rules
    assert rules["add.Tensor"].policy == "promote"
    assert rules["exp"] == autocast.torch_rules()["exp"]


def test_backend_level_op_is_registered_on_the_op_that_owns_autograd():
    rules = by_op(autocast.policy_rules([spec("convolution_overrideable", "fp32")]))
    assert rules["convolution"].policy == "fp32" and "convolution_overrideable" not in rules
    for backward in ("convolution_backward_overrideable", "_softmax_backward_data"):
        with pytest.raises(SpecError, match="backward ops are never autocast"):
            autocast.policy_rules([spec(backward, "fp32")])


def test_two_specs_setting_one_op_differently_is_an_error():
    with pytest.raises(SpecError, match=r"a\.yaml:7: autocast: convolution_overrideable sets fp32 on "
                                        r"convolution, but /x/opspec/mine\.yaml:3 \(convolution\) sets promote"):
        autocast.policy_rules([spec("convolution", "promote"),
                               spec("convolution_overrideable", "fp32", file="/x/a.yaml", line=7)])


# ---------------------------------------------------------------- generated code


def registrations(cpp: str) -> dict[str, str]:
    """op -> policy as registered in a generated autocast.cpp."""
    found = {}
    for m in re.finditer(r"KERNEL_PRIVATEUSEONE\((\w+), (?:(\w+), )?(\w+)\)", cpp):
        found[m.group(1) + ("." + m.group(2) if m.group(2) else "")] = m.group(3)
    for m in re.finditer(r'm\.impl\("([\w.]+)", &at::autocast::WrapFunction<\s*CastPolicy::(\w+)', cpp):
        found[m.group(1)] = m.group(2)
    for m in re.finditer(r'm\.impl\("([\w.]+)", TORCH_FN\(banned_', cpp):
        found[m.group(1)] = "banned"
    return found


def test_acme_generated_policy_is_torchs_plus_its_spec_overrides():
    backend = load_backend(ACME)
    cpp = (ACME / "generated" / "autocast.cpp").read_text()
    expected = {r.op: r.policy for r in autocast.policy_rules(backend.ops)}
    assert registrations(cpp) == expected
    torch_policy = {r.op: r.policy for r in autocast.torch_rules().values()}
    # every difference from torch's (CUDA's) policy is set by a spec, named in the file
    for op in set(expected) | set(torch_policy):
        if expected.get(op) != torch_policy.get(op):
            assert re.search(rf"\b{op.split('.')[0]}\b.*// opspec/\w+\.yaml", cpp), op
    # the two failures users reported: biased conv2d and SDPA
    assert expected["conv2d"] == expected["scaled_dot_product_attention"] == "lower_precision_fp"


MINE = """\
family: mine
ops:
  - op: dist
    dtypes: [float32]
    autocast: promote
  - op: conv2d
    dtypes: [float32]
    autocast: fallthrough
"""


def test_gen_renders_overrides_on_a_fresh_backend(tmp_path):
    root = tmp_path / "zeta"
    render_backend("zeta", root)
    (root / "opspec").mkdir(exist_ok=True)
    (root / "opspec" / "mine.yaml").write_text(MINE)
    device = (root / "device.yaml").read_text()
    (root / "device.yaml").write_text(device.replace("native:\n", "native:\n  - opspec: mine\n", 1))
    generate(root)
    cpp = (root / "generated" / "autocast.cpp").read_text()
    assert "KERNEL_PRIVATEUSEONE(dist, promote)  // opspec/mine.yaml" in cpp
    assert "KERNEL_PRIVATEUSEONE(conv2d," not in cpp
    assert "KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)  // torch" in cpp
    assert "KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)  // torch" in cpp


@pytest.mark.parametrize("text, message", [
    ("  - op: mm\n    dtypes: [float32]\n    autocast: fp16\n",
     r"mine\.yaml:5: ops\[0\]\.autocast: .*fallthrough"),
    ("  - op: zeta::mine\n    schema: \"mine(Tensor x) -> Tensor\"\n    dtypes: [float32]\n    autocast: fp32\n",
     r"mine\.yaml:6: ops\[0\]\.autocast: autocast policies are generated only for aten ops"),
])
def test_bad_autocast_field_names_file_line_and_field(tmp_path, text, message):
    root = tmp_path / "zeta"
    render_backend("zeta", root)
    (root / "opspec").mkdir(exist_ok=True)
    (root / "opspec" / "mine.yaml").write_text("family: mine\nops:\n" + text)
    device = (root / "device.yaml").read_text()
    (root / "device.yaml").write_text(device.replace("native:\n", "native:\n  - opspec: mine\n", 1))
    with pytest.raises(SpecError, match=message):
        load_backend(root)

