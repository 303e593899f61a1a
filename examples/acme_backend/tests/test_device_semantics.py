"""acme behaves like a PyTorch device in the ways users rely on: serialization,
copies between devices, per-device RNG, torch.accelerator, pinned memory and
non_blocking copies, checkpointing."""

import io

import pytest
import torch

import torch_fl_acme._C as native

# Every test leaves acme's allocated bytes where it found them (conftest.py).
pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


@pytest.fixture
def restore_device():
    yield
    torch.accelerator.set_device_index(0)


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


# -- serialization ------------------------------------------------------------

def test_save_load_tensors_keeps_device_dtype_and_values():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    objs = {"f32": x.to("acme:0"), "i64": x.long().to("acme:1"), "bf16": x.bfloat16().to("acme:1"),
            "view": x.to("acme:0")[1:, ::2], "bool": (x > 5).to("acme:0")}
    loaded = roundtrip(objs)
    for key, t in objs.items():
        assert loaded[key].device == t.device, key
        assert loaded[key].dtype == t.dtype, key
        assert torch.equal(loaded[key].cpu(), t.cpu()), key
    # a view and its base still share storage after loading
    base = x.to("acme")
    pair = roundtrip({"base": base, "view": base[1]})
    pair["view"].fill_(-1)
    assert torch.equal(pair["base"][1].cpu(), torch.full((4,), -1.0))


@pytest.mark.parametrize("map_location, expected", [
    ("cpu", "cpu"),
    ("acme:1", "acme:1"),
    (torch.device("acme", 0), "acme:0"),
    ({"acme:0": "acme:1"}, "acme:1"),
    (lambda storage, loc: storage, "cpu"),          # PyTorch: the storage as read, on the CPU
])
def test_load_state_dict_with_map_location(map_location, expected):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("acme:0")
    state = roundtrip(model.state_dict(), map_location=map_location)
    for name, t in state.items():
        assert str(t.device) == expected, (name, t.device)
        torch.testing.assert_close(t.cpu(), model.state_dict()[name].cpu(), rtol=0, atol=0)
    # and a CPU checkpoint loads onto acme
    cpu_state = {k: v.cpu() for k, v in model.state_dict().items()}
    on_acme = roundtrip(cpu_state, map_location="acme:1")
    assert all(v.device == torch.device("acme", 1) for v in on_acme.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("acme:1")
    fresh.load_state_dict(on_acme)
    fresh.eval()
    model.eval()
    inp = torch.randn(2, 4)
    torch.testing.assert_close(fresh(inp.to("acme:1")).cpu(), model(inp.to("acme:0")).cpu())


# -- copies between devices ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_copies_between_devices_preserve_values(dtype):
    x = (torch.arange(60).reshape(3, 4, 5) % 7).to(dtype)
    d0 = x.to("acme:0")
    cases = {
        "contiguous": (d0.to("acme:1"), x),
        "transposed": (d0.transpose(0, 2).to("acme:1"), x.transpose(0, 2)),
        "sliced": (d0[:, 1:3, ::2].to("acme:1"), x[:, 1:3, ::2]),
        "expanded": (d0[:1].expand(3, 4, 5).to("acme:1"), x[:1].expand(3, 4, 5)),
        "with cast": (d0.to("acme:1", torch.float64), x.double()),
    }
    for name, (got, want) in cases.items():
        assert got.device == torch.device("acme", 1), name
        assert torch.equal(got.cpu(), want), name
    # into a strided destination on the other device, and back
    dst = torch.zeros(5, 4, 3, dtype=dtype, device="acme:1").permute(2, 1, 0)
    dst.copy_(d0)
    assert torch.equal(dst.cpu(), x)
    back = torch.empty_like(x, device="acme:0")
    back.copy_(dst)
    assert torch.equal(back.cpu(), x)


def test_non_blocking_copies_and_pinned_memory():
    host = torch.arange(1000, dtype=torch.float32)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned()
    assert torch.empty(10, pin_memory=True).is_pinned()
    d = pinned.to("acme", non_blocking=True)
    out = torch.empty(1000).pin_memory()
    out.copy_(d * 2, non_blocking=True)
    torch.accelerator.synchronize()
    assert torch.equal(out, host * 2)
    # pageable memory with non_blocking=True is still correct
    assert torch.equal(host.to("acme", non_blocking=True).to("cpu"), host)
    # pinned buffers are host (CPU) tensors
    assert pinned.device.type == "cpu"
    del d


def test_pinned_blocks_come_from_the_runtimes_page_locked_memory():
    """device.yaml lists pinned_host: the glue's pinned-memory allocator takes its
    blocks from the runtime's host_alloc (acmeMallocHost), for pin_memory() and for
    the staging block of a pageable copy alike, and gives cached ones back with
    host_free; none come from the C heap."""
    import json

    def stats():
        return json.loads(native.runtime_get_option("stats"))

    torch.accelerator.synchronize()
    torch._C._accelerator_emptyHostCache()  # no cached block to reuse
    before = stats()
    pinned = torch.arange(37 << 18, dtype=torch.float32).pin_memory()  # 37 MiB
    assert pinned.is_pinned() and stats()["host_allocs"] == before["host_allocs"] + 1
    d = pinned.to("acme", non_blocking=True)  # the user's pinned block: no staging
    pageable = torch.full((41 << 18,), 3.0)  # 41 MiB: staged through a new block
    d2 = pageable.to("acme")
    assert stats()["host_allocs"] == before["host_allocs"] + 2
    assert torch.equal(d.cpu(), pinned) and torch.equal(d2.cpu(), pageable)
    del pinned
    torch.accelerator.synchronize()
    torch._C._accelerator_emptyHostCache()
    assert stats()["host_frees"] == before["host_frees"] + 2


# -- RNG ----------------------------------------------------------------------

def test_rng_reproducible_per_device(restore_device):
    torch.acme.manual_seed(123)        # current device (0)
    a = torch.randn(100, device="acme:0").cpu()
    torch.acme.manual_seed(123)
    b = torch.randn(100, device="acme:0").cpu()
    assert torch.equal(a, b)
    # devices have their own generators
    torch.acme.manual_seed_all(7)
    x0 = torch.rand(50, device="acme:0").cpu()
    x1 = torch.rand(50, device="acme:1").cpu()
    assert torch.equal(x0, x1)                      # same seed, same stream of numbers
    torch.rand(50, device="acme:0")                  # advance device 0 only
    torch.acme.manual_seed_all(7)
    torch.rand(50, device="acme:0")
    assert torch.equal(torch.rand(50, device="acme:1").cpu(), x1)  # device 1 untouched by 0
    # get/set_rng_state replays
    state = torch.acme.get_rng_state("acme:1")
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    r1 = torch.randn(20, device="acme:1").cpu()
    torch.acme.set_rng_state(state, "acme:1")
    assert torch.equal(torch.randn(20, device="acme:1").cpu(), r1)
    states = torch.acme.get_rng_state_all()
    assert len(states) == 2
    # the device's generator, not the CPU one
    torch.manual_seed(0)
    torch.acme.manual_seed_all(0)
    cpu_state = torch.get_rng_state()
    torch.randn(10, device="acme:0")
    assert torch.equal(torch.get_rng_state(), cpu_state)
    # explicit generators
    g = torch.Generator(device="acme:1").manual_seed(5)
    a = torch.randn(8, device="acme:1", generator=g).cpu()
    g.manual_seed(5)
    assert torch.equal(torch.randn(8, device="acme:1", generator=g).cpu(), a)
    assert torch.acme.initial_seed() == 0
    torch.accelerator.set_device_index(1)
    torch.acme.manual_seed(99)
    assert native.initial_seed(1) == 99 and native.initial_seed(0) == 0


def test_fork_rng_and_checkpoint_use_the_device_module():
    torch.acme.manual_seed_all(3)
    with torch.random.fork_rng(devices=[0], device_type="acme"):
        inside = torch.rand(5, device="acme").cpu()
    after = torch.rand(5, device="acme").cpu()
    assert torch.equal(inside, after)     # the fork restored the device's state
    # activation checkpointing replays dropout on the device with the same RNG
    lin = torch.nn.Linear(8, 8).to("acme")
    x = torch.randn(4, 8, device="acme", requires_grad=True)

    def block(t):
        return torch.nn.functional.dropout(lin(t), p=0.5, training=True).sum()

    torch.acme.manual_seed(11)
    torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).backward()
    g1 = x.grad.cpu().clone()
    x.grad = None
    torch.acme.manual_seed(11)
    block(x).backward()
    torch.testing.assert_close(x.grad.cpu(), g1)
    lin = x = None  # free the device memory before the next check


# -- torch.accelerator ---------------------------------------------------------

def test_accelerator_apis(restore_device):
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("acme")
    assert torch.accelerator.device_count() == 2 == torch.acme.device_count()
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1 == torch.acme.current_device()
    assert torch.ones(1, device="acme").device == torch.device("acme", 1)
    with torch.accelerator.device_index(0):
        assert torch.ones(1, device="acme").device.index == 0
    assert torch.accelerator.current_device_index() == 1
    with torch.acme.device(0):
        assert torch.acme.current_device() == 0
    assert torch.acme.current_device() == 1
    torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)

    torch.acme.empty_cache()
    torch.accelerator.reset_peak_memory_stats(1)
    base = torch.accelerator.memory_allocated(1)
    x = torch.empty(1 << 20, device="acme:1")       # 4 MiB
    assert torch.accelerator.memory_allocated(1) == base + (4 << 20)
    assert torch.accelerator.max_memory_allocated(1) >= base + (4 << 20)
    assert torch.accelerator.memory_reserved(1) >= torch.accelerator.memory_allocated(1)
    free, total = torch.accelerator.get_memory_info(1)
    assert total == torch.acme.mem_get_info(1)[1] and free <= total - (4 << 20)
    stats = torch.accelerator.memory_stats(1)
    assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated(1)
    assert stats["active.all.current"] >= 1
    del x
    assert torch.accelerator.memory_allocated(1) == base
    assert torch.accelerator.max_memory_allocated(1) >= base + (4 << 20)   # peak remembered
    torch.accelerator.reset_peak_memory_stats(1)
    assert torch.accelerator.max_memory_allocated(1) == base
    torch.acme.empty_cache()
    assert torch.accelerator.memory_reserved(1) <= torch.accelerator.memory_allocated(1) + (2 << 20)
    # the allocator config round-trips
    config = torch.acme.get_memory_config()
    assert config["round_size"] >= 1
    with pytest.raises(RuntimeError, match="round_size"):
        torch.acme.set_memory_config("round_size:0")
    with pytest.raises(RuntimeError, match="unknown allocator config key"):
        torch.acme.set_memory_config({"no_such_key": 1})
    assert torch.acme.get_memory_config() == config


def test_tensor_and_module_methods_for_the_device():
    t = torch.ones(3).acme()
    assert t.is_acme and t.device == torch.device("acme", 0)
    t1 = torch.ones(3).acme(1)
    assert t1.device == torch.device("acme", 1)
    m = torch.nn.Linear(2, 2).acme(1)
    assert m.weight.device == torch.device("acme", 1)
    # Module.to keeps parameter identity (weights tied between modules stay tied)
    emb = torch.nn.Embedding(5, 2)
    head = torch.nn.Linear(2, 5, bias=False)
    head.weight = emb.weight
    both = torch.nn.ModuleList([emb, head]).to("acme")
    assert both[0].weight is both[1].weight
    untyped = torch.ones(4).acme().untyped_storage()
    assert untyped.device.type == "acme" and untyped.nbytes() == 16
    del t, t1, m, both, untyped
