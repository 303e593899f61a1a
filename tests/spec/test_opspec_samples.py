"""The canonical op specs (opspec/*.yaml) are runnable and complete.

* every entry names a real ATen overload, and its variants exist;
* every sample materializes and runs on CPU for every listed dtype, and
  compare(..., device="cpu") passes (so a device failure is the device's fault);
* the sample DSL itself (torch_fl.testing.conformance);
* every op the reference models make a PrivateUse1 backend run is covered.

The files are read with plain yaml.safe_load on purpose: this test checks the
content, flsdk.spec's own tests check the typed loader.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import yaml

from flsdk.spec.dtypes import DTYPES
from torch_fl.testing import conformance as conf
from torch_fl.testing.conformance import compare, default_tolerance, materialize, to_device

OPSPEC_DIR = Path(__file__).resolve().parents[2] / "opspec"
RANDOM_SKIP = "random: checked statistically"
AUTOCAST = {"none", "fallthrough", "lower_precision_fp", "fp32", "promote"}
# Implemented by the generated glue of every backend; op specs must not list them.
GLUE = {"empty.memory_format", "empty_strided", "as_strided", "view", "_reshape_alias",
        "resize_", "_copy_from", "_copy_from_and_resize", "_local_scalar_dense", "fill_.Scalar",
        "zero_", "_fused_sdp_choice"}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny tensors: extra OpenMP threads only spin, and on a shared machine they
    # make these tests many times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _load():
    files = sorted(OPSPEC_DIR.glob("*.yaml"))
    return {p.stem: yaml.safe_load(p.read_text()) for p in files}


SPECS = _load()
ENTRIES = [(fam, e) for fam, doc in SPECS.items() for e in doc["ops"]]


def _cases():
    for fam, e in ENTRIES:
        for i, _sample in enumerate(e.get("samples") or []):
            for dt in e["dtypes"]:
                yield pytest.param(fam, e, i, dt, id=f"{e['op']}-s{i}-{dt}")


@functools.lru_cache(maxsize=1)
def _groups():
    """functional op name -> (inplace name | None, out name | None), from torchgen."""
    from torchgen.gen import get_grouped_native_functions
    from torchgen.model import NativeFunctionsGroup

    from flsdk.codegen.signatures import native_functions

    out = {}
    for g in get_grouped_native_functions(list(native_functions().values())):
        if isinstance(g, NativeFunctionsGroup):
            out[str(g.functional.func.name)] = (
                g.inplace and str(g.inplace.func.name), g.out and str(g.out.func.name))
    return out


def _covered_names() -> set[str]:
    names = set()
    for _, e in ENTRIES:
        names.add(e["op"])
        inplace, out = _groups().get(e["op"], (None, None))
        if "inplace" in (e.get("variants") or []):
            names.add(inplace)
        if "out" in (e.get("variants") or []):
            names.add(out)
    return names


def _is_functional(op: str) -> bool:
    name = op.split(".", 1)[0]
    overload = op.split(".", 1)[1] if "." in op else ""
    return not name.endswith("_") and overload != "out" and not overload.endswith("_out")


# --- structure -----------------------------------------------------------------

def test_family_files_exist():
    assert len(SPECS) >= 10
    for stem, doc in SPECS.items():
        assert doc["family"] == stem, f"{stem}.yaml declares family {doc['family']!r}"
        assert set(doc) == {"family", "ops"}
        assert doc["ops"], stem


def test_at_least_150_functional_overloads():
    functional = [e["op"] for _, e in ENTRIES if _is_functional(e["op"])]
    assert len(functional) >= 150, len(functional)


def test_ops_unique_and_exist():
    seen = {}
    for fam, e in ENTRIES:
        op = e["op"]
        assert op not in seen, f"{op} listed in {seen[op]} and {fam}"
        seen[op] = fam
        conf.resolve_op(op)  # raises ValueError when torch has no such overload


def test_entries_well_formed():
    allowed = {"op", "dtypes", "variants", "autocast", "tolerance", "samples", "skip_conformance",
               "cpu_reference_dtype"}
    for fam, e in ENTRIES:
        where = f"{fam}: {e['op']}"
        assert set(e) <= allowed, f"{where}: unknown keys {set(e) - allowed}"
        assert e["dtypes"] and set(e["dtypes"]) <= set(DTYPES), where
        assert len(set(e["dtypes"])) == len(e["dtypes"]), where
        assert e.get("autocast", "none") in AUTOCAST, where
        assert 1 <= len(e.get("samples") or []) <= 3, f"{where}: needs 1-3 samples"
        for dt, tol in (e.get("tolerance") or {}).items():
            assert dt in e["dtypes"], f"{where}: tolerance for unlisted dtype {dt}"
            assert set(tol) == {"atol", "rtol"} and tol["atol"] >= 0 and tol["rtol"] >= 0, where
        if "skip_conformance" in e:
            assert isinstance(e["skip_conformance"], str) and e["skip_conformance"].strip(), where


def test_variants_exist_in_native_functions():
    from flsdk.codegen.signatures import native_functions

    for fam, e in ENTRIES:
        for v in e.get("variants") or []:
            assert v in ("inplace", "out"), f"{e['op']}: bad variant {v}"
            inplace, out = _groups().get(e["op"], (None, None))
            target = inplace if v == "inplace" else out
            assert target, f"{fam}: {e['op']} has no {v} overload in native_functions.yaml"
            assert target in native_functions()


def test_glue_ops_not_listed():
    """Ops the glue implements are not specified, except those a backend may
    take over with its own kernel (glue.GLUE_OVERRIDES: fill_.Scalar)."""
    from flsdk.codegen.glue import GLUE_OVERRIDES

    listed = _covered_names()
    assert not (listed & GLUE) - set(GLUE_OVERRIDES), listed & GLUE
    assert not any(n.startswith("set_.") or n == "set_" for n in listed)


def test_listed_ops_reach_a_backend_kernel():
    # A CompositeImplicitAutograd op without its own autograd formula decomposes at
    # the Autograd key, before any backend key: a kernel for it would never run.
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for fam, e in ENTRIES:
        name = "aten::" + e["op"]
        if has(name, "CompositeImplicitAutograd") and not has(name, "Autograd"):
            pytest.fail(f"{fam}: {e['op']} is CompositeImplicitAutograd; list what it calls")


def test_random_ops_are_marked():
    for _fam, e in ENTRIES:
        op = conf.resolve_op(e["op"])
        if torch.Tag.nondeterministic_seeded in op.tags:
            # Random results cannot be compared elementwise with CPU's.
            assert e.get("skip_conformance"), \
                f"{e['op']} is random: mark skip_conformance: {RANDOM_SKIP!r}"


def test_skips_are_rare_and_named():
    skipped = [(e["op"], e["skip_conformance"]) for _, e in ENTRIES if "skip_conformance" in e]
    non_random = [s for s in skipped if s[1] != RANDOM_SKIP]
    assert len(non_random) <= 3, non_random


# --- every sample runs and compares on CPU ------------------------------------

def _cpu_dtype_unsupported(exc: Exception, dtype: str) -> bool:
    names = {"float16": "Half", "bfloat16": "BFloat16"}
    return isinstance(exc, (NotImplementedError, RuntimeError)) and \
        f"not implemented for '{names.get(dtype, dtype)}'" in str(exc)


@pytest.mark.parametrize("fam,entry,index,dtype", list(_cases()))
def test_sample_runs_and_compares_on_cpu(fam, entry, index, dtype):
    op = entry["op"]
    sample = entry["samples"][index]
    try:
        if "skip_conformance" in entry:
            args, kwargs = materialize(sample, dtype)
            if op.startswith("_scaled_dot_product_fused_attention_overrideable"):
                # No CPU kernel exists (that is why conformance skips it): check the
                # sample fits the schema instead of running it.
                schema = conf.resolve_op(op)._schema
                positional = [a for a in schema.arguments if not a.kwarg_only]
                required = [a for a in positional if not a.has_default_value()]
                assert len(required) <= len(args) <= len(positional)
                assert set(kwargs) <= {a.name for a in schema.arguments}
                return
            assert entry["skip_conformance"] == RANDOM_SKIP
            torch.manual_seed(0)  # the CPU runs draw from the global generator
            res = conf.compare_statistics(op, sample, dtype, "cpu")
            assert res.compared >= 1
            return
        tol = (entry.get("tolerance") or {}).get(dtype, {})
        res = compare(op, sample, dtype, "cpu", tol.get("atol"), tol.get("rtol"))
    except (NotImplementedError, RuntimeError):
        # CPU refuses this dtype (not implemented, or a kernel that checks its
        # arguments' dtypes, as _weight_norm_interface_backward's saved norms)
        ref = entry.get("cpu_reference_dtype")
        if ref is None or (isinstance(ref, dict) and dtype not in ref):
            raise
        # the reference runs in cpu_reference_dtype, and must give the same result
        # twice (so a device mismatch is the device's fault)
        args, kwargs = materialize(sample, dtype)
        runs = [conf.run_cpu_reference(op, args, kwargs, getattr(torch, dtype), entry["cpu_reference_dtype"])
                for _ in range(2)]
        first, second = ([r] if isinstance(r, torch.Tensor) else list(r) for r in runs)
        assert all(t.dtype == getattr(torch, dtype) for t in first)
        assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
        return
    except Exception as exc:  # noqa: BLE001 - re-raised unless CPU lacks the dtype
        if _cpu_dtype_unsupported(exc, dtype):
            pytest.skip(f"CPU has no {dtype} kernel for {op}")
        raise
    assert res.compared >= 1
    assert res.max_abs_err == 0.0  # CPU against CPU on identical inputs is exact


# --- coverage of the reference models -----------------------------------------

def test_specs_cover_every_model_op():
    from torch_fl.models.trace import SDPA_OVERRIDEABLE, trace_reference_models, union

    total = union(trace_reference_models(autocast=True).values())
    covered = _covered_names()
    missing = sorted(set(total.backend_ops) - covered)
    assert not missing, f"ops the reference models reach but no op spec covers: {missing}"
    assert set(SDPA_OVERRIDEABLE) <= covered
    # Sanity: the trace saw the core of both models.
    for op in ("convolution_overrideable", "native_batch_norm", "addmm", "bmm",
               "native_layer_norm", "_log_softmax", "nll_loss_forward", "native_dropout"):
        assert op in total.backend_ops


# --- the sample DSL -------------------------------------------------------------

def test_dsl_tensor_of_tested_dtype():
    (t,), _ = materialize(["T(2,3)"], "bfloat16")
    assert t.dtype == torch.bfloat16 and t.shape == (2, 3) and t.is_contiguous()
    assert t.min() >= -2 and t.max() <= 2
    (t,), _ = materialize(["T(2,3)"], "int32")
    assert t.dtype == torch.int32
    (t,), _ = materialize(["T(50)"], "bool")
    assert t.dtype == torch.bool and t.any() and not t.all()


def test_dsl_positive_and_range():
    (p, r), _ = materialize(["T(100)+", "T(100)[0,1]"], "float32")
    assert (p > 0).all()
    assert (r >= 0).all() and (r < 1).all()
    (r,), _ = materialize(["T(100)[-3,-2]"], "float64")
    assert (r >= -3).all() and (r < -2).all()
    (p,), _ = materialize(["T(100)+"], "int64")
    assert (p > 0).all()


def test_dsl_float32_long_bool_scalar():
    (f, long_, b, s), _ = materialize(["F(2)", "L(3,4;10)", "B(5)", "T()"], "float16")
    assert f.dtype == torch.float32 and f.shape == (2,)
    assert long_.dtype == torch.int64 and long_.shape == (3, 4) and long_.min() >= 0 and long_.max() < 10
    assert b.dtype == torch.bool and b.shape == (5,)
    assert s.dtype == torch.float16 and s.dim() == 0


def test_dsl_transposed_view():
    (t,), _ = materialize(["T(2,3).t()"], "float32")
    assert t.shape == (3, 2) and not t.is_contiguous()
    (t,), _ = materialize(["T(2,3,4)+.t()"], "float32")
    assert t.shape == (2, 4, 3) and not t.is_contiguous() and (t > 0).all()


def test_dsl_literals_lists_kwargs_dtype_and_words():
    args, kwargs = materialize(
        ["T(2)", [1, "L(2;3)"], None, True, 2.5, "dtype:float16", "floor",
         {"alpha": 2, "xs": ["T(1)", "T(2)"], "dtype": "dtype:int8"}], "float32")
    assert args[1][0] == 1 and args[1][1].dtype == torch.int64
    assert args[2:7] == [None, True, 2.5, torch.float16, "floor"]
    assert kwargs["alpha"] == 2 and kwargs["dtype"] == torch.int8
    assert [x.shape for x in kwargs["xs"]] == [(1,), (2,)]


def test_dsl_is_seeded():
    a, _ = materialize(["T(4,4)", "L(3;100)"], "float32", seed=3)
    b, _ = materialize(["T(4,4)", "L(3;100)"], "float32", seed=3)
    c, _ = materialize(["T(4,4)", "L(3;100)"], "float32", seed=4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    # The same values in every floating dtype, up to rounding.
    (h,), _ = materialize(["T(4,4)"], "float16", seed=3)
    torch.testing.assert_close(h.float(), a[0], atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("token", [
    "X(2)", "T(2,", "T(2;3)", "L(2)", "L(2;0)", "B(2)+", "L(2;3)+", "T(2)[3,1]", "T(a)",
    "T(2).T", "dtype:float17", "T(2) + 1",
])
def test_dsl_bad_token_raises_naming_it(token):
    with pytest.raises(ValueError) as info:
        materialize(["T(1)", token], "float32")
    assert token.split(":")[-1] in str(info.value)


def test_dsl_rejects_non_list_sample_and_bad_values():
    with pytest.raises(ValueError):
        materialize("T(2)", "float32")
    with pytest.raises(ValueError):
        materialize([{"a": object()}], "float32")
    with pytest.raises(ValueError, match="unknown dtype"):
        materialize(["T(2)"], "float17")


def test_default_tolerance_table():
    assert default_tolerance("float32") == (1e-5, 1.3e-6)
    assert default_tolerance(torch.bfloat16) == (1e-5, 1.6e-2)
    assert default_tolerance("int64") == (0.0, 0.0)
    assert default_tolerance("bool") == (0.0, 0.0)


def test_every_table_dtype_is_a_torch_dtype_with_the_table_tolerance():
    # torch_fl's comparison and flsdk's spec loader read one table (flsdk.spec.dtypes).
    from flsdk.spec import dtypes as table

    for name, info in DTYPES.items():
        dtype = conf.parse_dtype(name)
        assert str(dtype) == "torch." + name
        assert default_tolerance(dtype) == (info.atol, info.rtol)
        assert dtype.is_complex == (info.kind == "complex")
        assert dtype.is_floating_point == (info.kind == "float")
    for alias, name in table.ALIASES.items():
        assert getattr(torch, alias) is conf.parse_dtype(name)


def test_to_device_copies_recursively_and_keeps_strides():
    t = torch.arange(6.0).view(2, 3).t()
    out = to_device({"a": [t, (t, 1)], "b": None}, "cpu")
    assert out["a"][0] is not t and out["a"][0].data_ptr() != t.data_ptr()
    assert out["a"][0].stride() == t.stride() and torch.equal(out["a"][0], t)
    assert isinstance(out["a"][1], tuple) and out["a"][1][1] == 1 and out["b"] is None
    e = torch.ones(3, 1).expand(3, 4)  # stride 0: copied contiguously
    assert torch.equal(to_device(e, "cpu"), e)


# --- compare ----------------------------------------------------------------------

def test_compare_checks_mutated_and_out_arguments():
    assert compare("add_.Tensor", ["T(4,3)", "T(3)"], "float32", "cpu").compared == 2
    assert compare("add.out", ["T(4,3)", "T(3)", {"out": "T(0)"}], "int32", "cpu").compared == 2
    assert compare("max.dim", ["T(4,5)", 1], "float16", "cpu").compared == 2


def test_compare_handles_scalars_and_overrideable_reference():
    assert compare("equal", ["T(3)", "T(3)"], "float32", "cpu").compared == 1
    r = compare("convolution_overrideable",
                ["T(1,2,5,5)", "T(3,2,3,3)", None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1],
                "float32", "cpu")
    assert r.compared == 1


def _perturbed_run_op(monkeypatch, change):
    calls = []
    real = conf.run_op

    def fake(op_name, args, kwargs, device=None):
        result = real(op_name, args, kwargs, device)
        calls.append(op_name)
        return change(result) if len(calls) == 2 else result  # second call = "device"

    monkeypatch.setattr(conf, "run_op", fake)


def test_compare_detects_value_error(monkeypatch):
    _perturbed_run_op(monkeypatch, lambda r: r + 1e-3)
    with pytest.raises(AssertionError, match=r"add\.Tensor.*beyond"):
        compare("add.Tensor", ["T(4,3)", "T(4,3)"], "float32", "cpu")


def test_compare_within_tolerance_reports_error(monkeypatch):
    _perturbed_run_op(monkeypatch, lambda r: r + 1e-6)
    res = compare("add.Tensor", ["T(4,3)", "T(4,3)"], "float32", "cpu", atol=1e-5, rtol=0)
    assert 0 < res.max_abs_err < 1e-5 and res.max_rel_err > 0


def test_compare_detects_dtype_and_shape_mismatch(monkeypatch):
    _perturbed_run_op(monkeypatch, lambda r: r.double())
    with pytest.raises(AssertionError, match="dtype"):
        compare("add.Tensor", ["T(4,3)", "T(4,3)"], "float32", "cpu")
    _perturbed_run_op(monkeypatch, lambda r: r[:2])
    with pytest.raises(AssertionError, match="shape"):
        compare("add.Tensor", ["T(4,3)", "T(4,3)"], "float32", "cpu")


def test_compare_detects_integer_and_tuple_mismatch(monkeypatch):
    _perturbed_run_op(monkeypatch, lambda r: (r[0], r[1] + 1))
    with pytest.raises(AssertionError, match=r"result\[1\]"):
        compare("max.dim", ["T(4,5)", 1], "float32", "cpu")


def test_compare_detects_missed_mutation(monkeypatch):
    # A "device" in-place op that returns the right value but leaves self alone.
    real = conf.run_op
    calls = []

    def fake(op_name, args, kwargs, device=None):
        calls.append(op_name)
        if len(calls) == 2:
            return real("add.Tensor", args, kwargs, device)
        return real(op_name, args, kwargs, device)

    monkeypatch.setattr(conf, "run_op", fake)
    with pytest.raises(AssertionError, match="mutated arg 0"):
        compare("add_.Tensor", ["T(4,3)", "T(4,3)"], "float32", "cpu")


def test_compare_nan_positions_must_match(monkeypatch):
    def poison(r):
        r = r.clone()
        r.view(-1)[0] = float("nan")
        return r

    _perturbed_run_op(monkeypatch, poison)
    with pytest.raises(AssertionError, match="NaN"):
        compare("sqrt", ["T(4)+"], "float32", "cpu")


def test_compare_statistics_accepts_fresh_draws_and_catches_a_bad_generator(monkeypatch):
    # On CPU the two runs draw different numbers: only the distribution matches.
    res = conf.compare_statistics("uniform_", ["T(64)"], "float32", "cpu")
    assert res.compared == 2 and res.max_abs_err > 0
    calls = []
    real = conf.run_op

    def zero_device_draws(op_name, args, kwargs, device=None):
        calls.append(op_name)  # CPU and device draws alternate, CPU first
        result = real(op_name, args, kwargs, device)
        return result.zero_() if len(calls) % 2 == 0 else result

    monkeypatch.setattr(conf, "run_op", zero_device_draws)
    with pytest.raises(AssertionError, match="mean"):
        conf.compare_statistics("uniform_", ["T(64)"], "float32", "cpu")


def test_compare_statistics_checks_dtype_and_shape(monkeypatch):
    _perturbed_run_op(monkeypatch, lambda r: (r[0].double(), r[1]))
    with pytest.raises(AssertionError, match="float64"):
        conf.compare_statistics("native_dropout", ["T(8,8)", 0.5, True], "float32", "cpu")


def test_equal_values_make_any_matching_index_acceptable():
    from torch_fl.testing.conformance import _accept_equivalent_indices

    x = torch.tensor([[3, 1, 3, 2]])
    expected = torch.topk(x, 1)
    other_tie = (expected[0], torch.tensor([[2]]))          # the other 3: equally right
    wrong = (expected[0], torch.tensor([[1]]))              # points at a 1: wrong
    accepted = _accept_equivalent_indices("topk", [x, 1], {}, tuple(expected), other_tie)
    assert torch.equal(accepted[1], other_tie[1])
    rejected = _accept_equivalent_indices("topk", [x, 1], {}, tuple(expected), wrong)
    assert torch.equal(rejected[1], expected[1])
    kth = torch.kthvalue(x, 3, 1)
    accepted = _accept_equivalent_indices("kthvalue", [x, 3, 1], {}, tuple(kth),
                                          (kth[0], torch.tensor([2 if int(kth[1]) == 0 else 0])))
    assert int(accepted[1]) in (0, 2)


def test_integer_case_with_a_floating_result_gets_that_dtypes_tolerance():
    """sqrt of an int64 tensor is float32: an integer case without a spec
    tolerance compares integer results exactly, a floating one by float32's
    default (the device may round the last bit otherwise), not bit for bit."""
    from torch_fl.testing.conformance import _case_tolerance, _check, _Errors

    assert _case_tolerance(torch.int64, None, None) == (None, None)
    assert _case_tolerance(torch.int64, 0.0, 0.0) == (None, None)   # as generated tests pass it
    assert _case_tolerance(torch.float16, None, None) == default_tolerance(torch.float16)
    assert _case_tolerance(torch.int64, 0.5, None) == (0.5, 0.0)
    expected = torch.tensor([1.0, 2.0, 3.0]).sqrt()
    one_ulp = torch.nextafter(expected, torch.tensor(10.0))
    _check(expected, one_ulp, "result", None, None, _Errors())            # float32's default
    with pytest.raises(AssertionError, match="beyond"):
        _check(expected, expected * 1.001, "result", None, None, _Errors())
    with pytest.raises(AssertionError, match="elements differ"):
        _check(torch.tensor([4, 9]), torch.tensor([4, 8]), "result", None, None, _Errors())
