"""Property: whatever YAML is fed to the loaders, they either succeed or raise
SpecError/SpecErrors - never another exception (no tracebacks for users)."""

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flsdk.spec import SpecError, load_backend, load_device, load_opspecs

FIXTURES = Path(__file__).parents[1] / "support" / "fixtures" / "spec"
# libyaml keeps the examples cheap; the loader under test uses it too when present
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def dump(value) -> str:
    return yaml.dump(value, Dumper=_Dumper)


def parsed(text: str):
    return yaml.load(text, Loader=_Loader)


OPSPEC_TEXT = (FIXTURES / "opspec" / "binary.yaml").read_text()
DEVICE_TEXT = (FIXTURES / "backend" / "device.yaml").read_text()
CUSTOM_TEXT = (FIXTURES / "backend" / "opspec" / "acme_custom.yaml").read_text()
CANONICAL = sorted((FIXTURES / "opspec").glob("*.yaml"))

FIELDS = ["family", "ops", "op", "dtypes", "variants", "autocast", "tolerance", "samples",
          "skip_conformance", "schema", "atol", "rtol", "float32", "bfloat16", "name", "memory",
          "capacity", "alignment", "allocator", "max_split_size", "native", "opspec", "fallback",
          "mode", "deny", "allow", "device_count", "default", "env", "quantization", "schemes"]
WORDS = ["add.Tensor", "relu", "acme::x", "float32", "flaot32", "inplace", "out", "1 GiB", "-1",
         "unlimited", "all", "binary", "T(2,3)", "T(", "dtype:float32", "cuda", "acme", "allow", "16 GB"]

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.sampled_from(WORDS), st.text(max_size=12),
)
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=8))
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(keys, children, max_size=5)),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    # One directory reused by every example: creating and removing a temp dir
    # per example cost more than the loading itself on a busy machine.
    return tmp_path_factory.mktemp("fuzz")


def only_spec_errors(load, text: str, path: Path):
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load(path)
    except SpecError as err:
        assert str(err)  # renders
        assert err.file


def mutate(text: str, data) -> str:
    """Apply a few random text edits: delete, insert, replace a word, duplicate a line."""
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["delete", "insert", "word", "dupline", "indent"]))
        pos = data.draw(st.integers(0, max(0, len(text) - 1)))
        if kind == "delete":
            text = text[:pos] + text[pos + data.draw(st.integers(1, 5)):]
        elif kind == "insert":
            pieces = [":", "-", "[", "]", "{", "}", "\n", " ", "'", "&a ", "*a", "!x "]
            text = text[:pos] + data.draw(st.sampled_from(pieces)) + text[pos:]
        elif kind == "word":
            text = text[:pos] + data.draw(st.sampled_from(WORDS + FIELDS)) + text[pos:]
        elif kind == "dupline":
            lines = text.splitlines()
            i = data.draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        else:
            lines = text.splitlines()
            i = data.draw(st.integers(0, len(lines) - 1))
            lines[i] = "  " + lines[i]
            text = "\n".join(lines)
    return text


def replace_random_node(data_tree, draw):
    """Replace one randomly chosen node of parsed YAML with a random value."""
    nodes = [((), data_tree)]
    stack = [((), data_tree)]
    while stack:
        path, node = stack.pop()
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in children:
            nodes.append((path + (k,), v))
            stack.append((path + (k,), v))
    path, _ = draw(st.sampled_from(nodes))
    new = draw(values)
    if not path:
        return new
    parent = data_tree
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = new
    return data_tree


@SETTINGS
@given(value=values)
def test_random_opspec_data(work, value):
    only_spec_errors(lambda p: load_opspecs([p]), dump(value), work / "fam.yaml")


@SETTINGS
@given(value=values)
def test_random_device_data(work, value):
    only_spec_errors(load_device, dump(value), work / "device.yaml")


@SETTINGS
@given(data=st.data())
def test_mutated_opspec_text(work, data):
    only_spec_errors(lambda p: load_opspecs([p]), mutate(OPSPEC_TEXT, data), work / "fam.yaml")


@SETTINGS
@given(data=st.data())
def test_mutated_device_text(work, data):
    only_spec_errors(load_device, mutate(DEVICE_TEXT, data), work / "device.yaml")


@SETTINGS
@given(data=st.data())
def test_mutated_opspec_nodes(work, data):
    tree = replace_random_node(parsed(OPSPEC_TEXT), data.draw)
    only_spec_errors(lambda p: load_opspecs([p]), dump(tree), work / "fam.yaml")


@settings(SETTINGS, max_examples=100)  # three files per example
@given(data=st.data())
def test_mutated_backend(work, data):
    device = replace_random_node(parsed(DEVICE_TEXT), data.draw)
    custom = replace_random_node(parsed(CUSTOM_TEXT), data.draw)
    root = work / "backend"
    (root / "opspec").mkdir(parents=True, exist_ok=True)
    (root / "device.yaml").write_text(dump(device))
    (root / "opspec" / "acme_custom.yaml").write_text(dump(custom))
    try:
        load_backend(root, CANONICAL)
    except SpecError as err:
        assert str(err)
