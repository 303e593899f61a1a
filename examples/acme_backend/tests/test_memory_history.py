"""Device memory in the profiler and in CUDA's snapshot format (issue 37):
profile_memory=True sees acme's allocations and frees; torch.acme.memory's
_record_memory_history / _snapshot / _dump_snapshot give what
torch.cuda.memory._snapshot() gives, stack frames included, and PyTorch's own
viewer (torch.cuda._memory_viz) renders it; memory_stats() has CUDA's keys and
memory_summary() CUDA's table."""

import pickle

import pytest
import torch
from torch.cuda import _memory_viz
from torch.profiler import ProfilerActivity, profile

MiB = 2**20


@pytest.fixture
def history():
    """Memory history recorded for the test, off (and cleared) afterwards. The cache
    is emptied first, so the test's allocations take fresh segments."""
    torch.acme.empty_cache()
    torch.acme.memory._record_memory_history(max_entries=100000, clear_history=True)
    yield
    torch.acme.memory._record_memory_history(None)


def _allocate_here():
    return torch.empty(3 * MiB // 4, device="acme")  # 3 MiB: a large-pool segment of its own


def test_profile_memory_shows_device_allocations_and_frees():
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 profile_memory=True) as prof:
        x = torch.empty(1024, 1024, device="acme")  # 4 MiB
        del x
    # the allocation is charged to the op that made it; the free (outside any op)
    # is a "[memory]" event of its own
    empty = next(e for e in prof.key_averages() if e.key == "aten::empty")
    assert empty.device_memory_usage == 4 * MiB, empty.device_memory_usage
    memory = [e for e in prof.events() if e.name == "[memory]"]
    assert -4 * MiB in {e.device_memory_usage for e in memory}


def test_snapshot_has_cuda_format_with_python_frames(history):
    x = _allocate_here()
    snapshot = torch.acme.memory._snapshot()
    assert set(snapshot) >= {"segments", "device_traces", "allocator_settings"}
    assert len(snapshot["device_traces"]) == torch.acme.device_count()
    address = x.untyped_storage().data_ptr()
    block = next(b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == address)
    assert block["state"] == "active_allocated"
    assert block["size"] >= block["requested_size"] == 3 * MiB
    seg = next(s for s in snapshot["segments"] if any(b is block for b in s["blocks"]))
    assert seg["device"] == 0 and seg["segment_type"] == "large" and seg["stream"] == 0
    assert seg["total_size"] == sum(b["size"] for b in seg["blocks"])
    frames = block["frames"]
    assert any(f["name"] == "_allocate_here" and f["filename"].endswith("test_memory_history.py")
               for f in frames), frames[:5]
    trace = snapshot["device_traces"][0]
    alloc = [e for e in trace if e["action"] == "alloc" and e["addr"] == address]
    assert alloc and alloc[-1]["size"] == block["size"] and alloc[-1]["frames"]
    assert {"segment_alloc", "alloc"} <= {e["action"] for e in trace}
    del x
    trace = torch.acme.memory._snapshot()["device_traces"][0]
    assert [e["action"] for e in trace if e["addr"] == address][-2:] == ["free_requested",
                                                                          "free_completed"]


def test_pytorchs_memory_viewer_renders_the_snapshot(history, tmp_path):
    keep = [_allocate_here() for _ in range(2)]
    del keep[0]
    snapshot = torch.acme.memory._snapshot()
    text = _memory_viz.segsum(snapshot)
    assert "segments:" in text and "total_allocated" in text
    # the flame graphs' folded stacks (flamegraph.pl, which _memory_viz downloads, left out)
    folded = _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in folded and "_allocate_here" in folded
    assert "seg_" in _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    trace = _memory_viz.trace(snapshot)
    assert trace.startswith("Device 0") and "del " in trace  # the freed block
    html = _memory_viz.trace_plot(snapshot)
    assert "MemoryViz.js" in html and "snapshot.pickle" in html
    assert "MemoryViz.js" in _memory_viz.segment_plot(snapshot)
    path = tmp_path / "acme_snapshot.pickle"
    torch.acme.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert loaded["segments"] and loaded["device_traces"][0]


def test_history_off_records_no_trace_and_bad_arguments_say_so():
    torch.acme.memory._record_memory_history(None)
    x = _allocate_here()
    snapshot = torch.acme.memory._snapshot()
    assert snapshot["device_traces"][0] == []
    block = next(b for s in snapshot["segments"] for b in s["blocks"]
                 if b["address"] == x.untyped_storage().data_ptr())
    assert block["frames"] == []
    with pytest.raises(ValueError, match="enabled must be None, 'state' or 'all'"):
        torch.acme.memory._record_memory_history("everything")
    with pytest.raises(ValueError, match="stacks must be 'python' or 'all'"):
        torch.acme.memory._record_memory_history(stacks="cpp")


def test_max_entries_keeps_the_last_events(history):
    torch.acme.memory._record_memory_history(max_entries=4, clear_history=True)
    for _ in range(5):
        torch.empty(100, device="acme")
    trace = torch.acme.memory._snapshot()["device_traces"][0]
    assert len(trace) == 4


def test_import_of_the_memory_module_works():
    import importlib

    mod = importlib.import_module("torch.acme.memory")
    assert mod is torch.acme.memory
    assert callable(mod._record_memory_history) and callable(mod._dump_snapshot)


# The keys torch.cuda.memory_stats() documents (PyTorch 2.13).
CUDA_STAT_METRICS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                     "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
CUDA_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                 "num_device_free", "max_split_size")


def test_memory_stats_have_cudas_keys_and_summary_cudas_table():
    x = _allocate_here()
    stats = torch.acme.memory_stats()
    for metric in CUDA_STAT_METRICS:
        for pool in ("all", "large_pool", "small_pool"):
            for field in ("current", "peak", "allocated", "freed"):
                assert f"{metric}.{pool}.{field}" in stats, f"{metric}.{pool}.{field}"
    for key in CUDA_COUNTERS + tuple(f"oversize_{k}.{f}" for k in ("allocations", "segments")
                                     for f in ("current", "peak", "allocated", "freed")):
        assert key in stats, key
    assert stats["allocated_bytes.all.current"] >= 3 * MiB
    summary = torch.acme.memory_summary()
    for row in ("Allocated memory", "Active memory", "Requested memory", "Reserved memory",
                "Non-releasable memory", "Allocations", "from large pool", "Oversize allocations"):
        assert row in summary, row
    assert "Cur Usage" in summary and "Tot Freed" in summary
    assert torch.acme.memory.memory_summary(abbreviated=True).count("from large pool") == 0
    del x
