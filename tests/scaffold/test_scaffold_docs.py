"""The docs a scaffolded backend gets say what the generated code does: the runtime
adapter reference lists every call of the generated header with its exact
declaration, the guides the README names exist, and `flsdk check` gives a custom
op without a spec the same kind of hint as an aten op."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def zeta(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("docs") / "zeta"
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "new-backend", "zeta", "--out", str(root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def _normalize(decl: str) -> str:
    decl = re.sub(r"\s+", " ", decl).strip()
    return re.sub(r"\s*([(),*&])\s*", r"\1", decl)


def _declarations(cpp: str) -> dict[str, str]:
    """name -> normalized declaration of every function declared in C++ text."""
    cpp = re.sub(r"//[^\n]*", "", cpp)
    out = {}
    for m in re.finditer(r"(?:^|\n)\s*((?:[\w:]+[\s*&]+)+?(\w+)\s*\([^;{)]*\))\s*;", cpp):
        out[m.group(2)] = _normalize(m.group(1))
    return out


def test_runtime_adapter_reference_matches_the_generated_header(zeta):
    header = _declarations((zeta / "generated" / "runtime_adapter.h").read_text())
    doc = (zeta / "docs" / "runtime-adapter.md").read_text()
    blocks = "\n".join(re.findall(r"```cpp\n(.*?)```", doc, re.S))
    documented = _declarations(blocks)
    # the parser sees the header's functions (a sanity check of the test itself)
    assert {"init", "malloc", "memcpy", "memcpy_peer", "stream_create", "event_record",
            "event_elapsed_ms", "kernel_begin", "last_error"} <= set(header)
    missing = sorted(set(header) - set(documented))
    assert not missing, f"runtime adapter calls not documented: {missing}"
    extra = sorted(set(documented) - set(header))
    assert not extra, f"documented calls the header does not declare: {extra}"
    differ = {n: (header[n], documented[n]) for n in header if header[n] != documented[n]}
    assert not differ, f"documented declarations differ from the header: {differ}"
    # stream and event calls take the device (the header's contract)
    assert documented["stream_synchronize"].startswith("Status stream_synchronize(int device")
    assert documented["event_record"].startswith("Status event_record(int device")


def test_ccl_adapter_reference_matches_the_generated_header(zeta):
    """docs/ccl-adapter.md lists every call of generated/ccl_adapter.h with its exact
    declaration (issue 35: the collective-library adapter a vendor implements)."""
    header = _declarations((zeta / "generated" / "ccl_adapter.h").read_text())
    doc = (zeta / "docs" / "ccl-adapter.md").read_text()
    documented = _declarations("\n".join(re.findall(r"```cpp\n(.*?)```", doc, re.S)))
    assert {"get_unique_id", "comm_init", "all_reduce", "all_to_all", "send", "group_end",
            "comm_get_async_error", "last_error"} <= set(header)
    assert sorted(set(header) - set(documented)) == [], "ccl adapter calls not documented"
    assert sorted(set(documented) - set(header)) == [], "documented calls the header lacks"
    differ = {n: (header[n], documented[n]) for n in header if header[n] != documented[n]}
    assert not differ, f"documented declarations differ from the header: {differ}"


def test_readme_names_the_guides_and_they_exist(zeta):
    readme = (zeta / "README.md").read_text()
    for guide in ("writing-a-kernel", "runtime-adapter", "custom-ops", "releasing"):
        assert f"docs/{guide}.md" in readme, guide
        assert (zeta / "docs" / f"{guide}.md").is_file(), guide
    kernel = (zeta / "docs" / "writing-a-kernel.md").read_text()
    for topic in ("## Outputs", "data_ptr", "## Which `at::` calls", "## Headers",
                  "## Non-contiguous inputs and broadcasting", "## What the generated wrapper already did",
                  "generated/register_kernels.h"):
        assert topic in kernel, topic
    assert "{{" not in kernel and "zeta::kernels" in kernel, "the guide is rendered for the backend"


def test_custom_op_example_of_the_guide_is_valid_and_generates_its_stub(zeta, tmp_path):
    import shutil

    root = tmp_path / "zeta"
    shutil.copytree(zeta, root)
    guide = (root / "docs" / "custom-ops.md").read_text()
    spec = re.search(r"```yaml\n(# opspec/zeta_custom\.yaml\n.*?)```", guide, re.S).group(1)
    (root / "opspec").mkdir()
    (root / "opspec" / "zeta_custom.yaml").write_text(spec)
    device = root / "device.yaml"
    device.write_text(device.read_text().replace("  - op: relu\n",
                                                 "  - op: relu\n  - op: zeta::fused_bias_gelu\n"))
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "gen"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stub = (root / "kernels" / "fused_bias_gelu.cpp").read_text()
    assert "at::Tensor k_fused_bias_gelu(const at::Tensor & x, const at::Tensor & bias)" in stub


def test_check_hints_where_a_custom_op_spec_goes(zeta, tmp_path):
    import shutil

    root = tmp_path / "zeta"
    shutil.copytree(zeta, root)
    device = root / "device.yaml"
    device.write_text(device.read_text().replace("  - op: relu\n", "  - op: relu\n  - op: zeta::my_gelu\n"))
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "check"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = next(ln for ln in (proc.stdout + proc.stderr).splitlines() if "zeta::my_gelu" in ln)
    assert re.search(r"device\.yaml:\d+: native\[\d+\]\.op: custom op 'zeta::my_gelu' has no op spec", line), line
    for needle in ("opspec/<family>.yaml", "- op: zeta::my_gelu", 'schema: "my_gelu(Tensor self) -> Tensor"',
                   "docs/custom-ops.md"):
        assert needle in line, (needle, line)
    assert "leaky_relu" not in line, "close names come from the custom ops only"


# Where a scaffold's text names a document: "docs/x.md", "kernels/README.md", or a
# markdown link target.
_DOC_REF = re.compile(r"(?<![\w.-])((?:[\w.-]+/)+[\w.-]+\.md)\b")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_TEXT = {".md", ".py", ".toml", ".yml", ".yaml", ".h", ".cpp", ".cmake", ".txt"}


def test_scaffold_docs_reference_only_what_the_vendor_has(zeta):
    """Every document a scaffolded backend's files point to is in the backend
    (issue 27 item 8: its guides sent the vendor to flsdk's docs/architecture.md,
    a file of flsdk's repository, not of the backend nor of the installed flsdk)."""
    dangling, checked = [], 0
    for path in sorted(zeta.rglob("*")):
        if not path.is_file() or path.suffix not in _TEXT or "build" in path.relative_to(zeta).parts:
            continue
        text = path.read_text()
        rel = path.relative_to(zeta)
        if re.search(r"flsdk's\s+(?:`)?docs/", text):
            dangling.append(f"{rel}: points into flsdk's own docs/")
        refs = set(_DOC_REF.findall(text)) | {t for t in _LINK.findall(text) if "://" not in t}
        for ref in refs:
            checked += 1
            if not ((zeta / ref).exists() or (path.parent / ref).exists()):
                dangling.append(f"{rel}: {ref}")
    assert checked >= 10, checked  # the scan sees the guides' references
    assert not dangling, dangling


def test_custom_op_guide_documents_the_sample_dsl_flsdk_parses(zeta):
    from flsdk.spec.samples import classify, parse_tensor

    guide = (zeta / "docs" / "custom-ops.md").read_text()
    section = guide[guide.index("* `samples`"):guide.index("## 2.")]
    tokens = re.findall(r"`([^`]+)`", section)
    tensors = [t for t in tokens if re.match(r"^[TFLB]\(", t)]
    assert {"T(2,3)", "T(2,3)+", "T(2,3)[0,1]", "T()", "F(2,3)", "L(2,3;10)", "B(2,3)"} <= set(tensors), tensors
    for token in tensors:
        parse_tensor(token)  # raises on a token flsdk would refuse
    assert classify("dtype:float16")[0] == "dtype" and classify("sum")[0] == "word"


def test_every_checked_claim_of_the_adapter_reference_is_listed_and_every_listed_one_checked(zeta):
    """Issue 36: each claim docs/runtime-adapter.md makes that code can check is
    checked by a test: its table "What your generated tests check" names exactly the
    claims generated/adapter_contract.cpp runs (the generated adapter tests' ids)."""
    from flsdk.codegen.context import adapter_contract_claims

    doc = (zeta / "docs" / "runtime-adapter.md").read_text()
    section = doc.split("## What your generated tests check", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert listed == adapter_contract_claims()
    generated = (zeta / "tests" / "generated" / "test_zeta_adapter.py").read_text()
    assert f"CLAIMS = {adapter_contract_claims()!r}".replace("'", '"') in generated


def test_the_adapter_reference_states_the_contract_exactly(zeta):
    """Issue 36 items 9-12 in the reference a vendor reads: the conversions as PyTorch's
    CPU does them (with the values that differ between runtimes), no `DeviceLost`
    status the header lacks, the thread device_view is called on, the pinned promise,
    the versions and how to move between memory models."""
    doc = (zeta / "docs" / "runtime-adapter.md").read_text()
    header = (zeta / "generated" / "runtime_adapter.h").read_text()
    statuses = set(re.findall(r"^  (\w+) = \d+,", header.split("enum class Status", 1)[1].split("};")[0], re.M))
    used = set(re.findall(r"`(OutOfMemory|InvalidDevice|InvalidValue|Error|Unsupported|Ok|[A-Z]\w*Lost\w*)`", doc))
    assert used <= statuses, used - statuses
    for words in ("3e9 -> INT32_MIN as int32, 0 as int16", "1.0004882812509095 float64 -> 1.0 float16",
                  "It is called only on the thread running `fn`",
                  "every host\n  pointer your `memcpy` gets from the glue lies in such a block",
                  "## Versions", 'adapter_versions: {runtime: "1.2", ccl: "1.0"}',
                  "## Moving between memory models", "## Testing before silicon", "ZETA_SLOW_DEVICE"):
        assert words in doc, words
    for words in ("3e9 -> int32 INT32_MIN, -> int16 0", "1.0004882812509095 -> 1.0 float16",
                  "call it only on the thread running", "every host pointer the glue passes to memcpy"):
        assert words in re.sub(r"\s*\n//\s*", " ", header), words
