"""Snapshot metrics against the numbers measured on the GPU (reference/pytorch.md §5.2)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from oompost.analysis.snapshot_metrics import (
    captured_at,
    oom_metrics,
    segment_map,
    state_after,
    timeline,
    top_stacks,
    user_frame,
)
from oompost.model import Block, Frame, Segment, Snapshot, TraceEvent
from oompost.parsers.snapshot import load_snapshot

DATA = Path(__file__).parent / "data" / "snapshots"
MiB = 1 << 20
GiB = 1 << 30


# ------------------------------------------------------------ fragmentation


def test_native_fragmentation_numbers(native: Snapshot) -> None:
    m = oom_metrics(native)
    assert m.request_bytes == 500 * MiB
    assert m.request_alloc_size == 500 * MiB
    assert (m.request_pool, m.request_stream) == ("large", 0)
    assert m.free_total == 944 * MiB
    assert m.holes == 37
    assert m.free_max == 44 * MiB
    assert m.reserved == 1_933_574_144 and m.segments == 1
    assert m.allocated == 900 * MiB and m.active == 900 * MiB
    assert m.reserved_unallocated == 944 * MiB          # the OOM message's figure
    assert m.internal_waste == 0 and m.private_pool_bytes == 0
    assert m.free_cuda == 147_623_903_232
    assert m.captured_at == "oom_observer" and m.state_source == "segments"
    assert m.oom is not None and m.oom.action == "oom" and m.oom_index == 148
    assert m.trace_truncated is False and m.expandable is False
    assert m.fragmentation_suspected is True
    assert [(p.pool, p.stream, p.holes, p.largest_free) for p in m.pools] == [("large", 0, 37, 44 * MiB)]


def test_native_cap_is_inferred_from_device_free(native: Snapshot) -> None:
    """137 GiB free yet a 500 MiB request failed: a memory fraction (2 GiB here) was in force."""
    cb = oom_metrics(native).cap_bounds
    assert cb is not None and cb.source == "inferred" and cb.exact is None
    assert cb.low == 1_933_574_144                     # peak reserved seen in the trace
    assert cb.high == 1_933_574_144 + 500 * MiB         # reserved at the OOM + segment-rounded request
    assert cb.low <= 2 * GiB < cb.high
    assert "cap" in cb.note


def test_cap_from_argument_and_from_capture_meta(native: Snapshot) -> None:
    m = oom_metrics(native, limit_bytes=2 * GiB)
    assert m.cap_bounds is not None and m.cap_bounds.exact == 2 * GiB and m.cap_bounds.source == "argument"
    assert m.headroom_bytes == 2 * GiB - 1_933_574_144
    assert m.fragmentation_suspected is True             # 944 MiB free + 204 MiB headroom ≥ 500 MiB, no hole fits
    meta = replace(native, meta={"limit": 2 * GiB, "device_total": 150_109_880_320})
    cb = oom_metrics(meta).cap_bounds
    assert cb is not None and (cb.exact, cb.source) == (2 * GiB, "oompost_meta")
    nocap = replace(native, meta={"limit": 150_109_880_320, "device_total": 150_109_880_320})
    assert oom_metrics(nocap).cap_bounds is None
    conf = replace(native, meta={"device_total": 100 * GiB},
                   allocator_settings={**native.allocator_settings,
                                       "PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.02"})
    cb = oom_metrics(conf).cap_bounds
    assert cb is not None and cb.source == "allocator_settings" and cb.exact == int(0.02 * 100 * GiB)


def test_request_argument_when_trace_has_no_oom(native: Snapshot) -> None:
    no_oom = replace(native, traces=(native.traces[0][:-1],))
    m = oom_metrics(no_oom, request_bytes=500 * MiB)
    assert m.captured_at == "no_oom" and m.oom is None
    assert m.request_bytes == 500 * MiB and m.free_max == 44 * MiB


# ------------------------------------------------------------------ capacity


def test_expandable_capacity_numbers(exp_obs: Snapshot, exp_after: Snapshot) -> None:
    for s, where in ((exp_obs, "oom_observer"), (exp_after, "after_exception")):
        m = oom_metrics(s)
        assert m.captured_at == where == captured_at(s)
        assert m.request_bytes == 200 * GiB
        assert m.reserved == 358_612_992
        assert m.allocated == 353_435_648                 # "337.06 MiB is allocated by PyTorch"
        assert m.free_total == 4 * MiB + 1024 + 982_016 and m.holes == 3
        assert m.free_max == 4 * MiB                       # large pool, stream 0
        assert m.free_cuda == 148_963_983_360
        assert m.expandable is True
        assert m.cap_bounds is None                        # the card itself was too small
        assert m.fragmentation_suspected is False
        assert {(p.pool, p.segments) for p in m.pools} == {("large", 2), ("small", 1)}


# ------------------------------------------------------------ reconstruction


def _free_blocks(seg: Segment, addrs: set[int]) -> Segment:
    blocks: list[Block] = []
    for b in seg.blocks:
        free = b.state == "inactive" or b.address in addrs
        if free and blocks and blocks[-1].state == "inactive":
            p = blocks.pop()
            blocks.append(Block(p.address, p.size + b.size, 0, "inactive"))
        elif free:
            blocks.append(Block(b.address, b.size, 0, "inactive"))
        else:
            blocks.append(b)
    return replace(seg, blocks=tuple(blocks),
                   allocated_size=sum(b.size for b in blocks if b.state == "active_allocated"))


def _after_exception(snap: Snapshot, segments: tuple[Segment, ...], extra: list[TraceEvent]) -> Snapshot:
    t = snap.traces[0][-1].time_us or 0
    extra = extra + [TraceEvent("snapshot", 0, 0, 0, t + 99)]
    return replace(snap, segments=segments, traces=(snap.traces[0] + tuple(extra),))


def _frees(blocks: list[Block], t: int) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    for b in blocks:
        out += [TraceEvent("free_requested", b.address, b.requested_size, 0, t),
                TraceEvent("free_completed", b.address, b.requested_size, 0, t)]
    return out


def test_state_is_rebuilt_at_the_oom_after_unwinding(native: Snapshot) -> None:
    """Activations freed while the exception unwound are put back from the trace."""
    seg = native.segments[0]
    gone = [b for b in seg.blocks if b.state == "active_allocated"][:10]
    later = _after_exception(native, (_free_blocks(seg, {b.address for b in gone}),), _frees(gone, 1))
    assert sum(1 for b in later.segments[0].blocks if b.state == "inactive") < 37
    m = oom_metrics(later)
    assert m.captured_at == "after_exception" and m.state_source == "reconstructed"
    assert (m.free_total, m.holes, m.free_max, m.allocated) == (944 * MiB, 37, 44 * MiB, 900 * MiB)
    layout = [[(b.offset, b.size, b.state) for b in v.blocks] for v in segment_map(later)]
    assert layout == [[(b.offset, b.size, b.state) for b in v.blocks] for v in segment_map(native)]
    assert top_stacks(later)[0].bytes == 900 * MiB
    assert top_stacks(later, at="end")[0].bytes == 650 * MiB


def test_state_is_rebuilt_after_empty_cache(native: Snapshot) -> None:
    """Everything freed and the segment returned to CUDA after the OOM: the final
    snapshot is empty, the state at the OOM comes from the trace alone."""
    seg = native.segments[0]
    live = [b for b in seg.blocks if b.state == "active_allocated"]
    extra = _frees(live, 1) + [TraceEvent("segment_free", seg.address, seg.total_size, 0, 2)]
    later = _after_exception(native, (), extra)
    m = oom_metrics(later)
    assert (m.reserved, m.free_total, m.holes, m.free_max, m.allocated) == \
        (1_933_574_144, 944 * MiB, 37, 44 * MiB, 900 * MiB)
    assert [(b.offset, b.size, b.state) for b in segment_map(later)[0].blocks] == \
        [(b.offset, b.size, b.state) for b in segment_map(native)[0].blocks]
    # the rebuilt blocks carry their allocation stacks (from the paired alloc entries)
    assert top_stacks(later)[0].frame_label.startswith("repro/lab.py:190")


def test_state_rebuilt_across_an_unmap(exp_obs: Snapshot) -> None:
    """Expandable: a freed 64 MiB block whose whole pages were unmapped after the OOM."""
    s1, s2, small = exp_obs.segments
    victim = s2.blocks[1]
    assert victim.size == 64 * MiB
    base = s1.address                                   # the virtual segment starts at the first range
    lo, hi = base + 240 * MiB, base + 280 * MiB         # whole 20 MiB pages inside the freed range
    freed = _free_blocks(s2, {victim.address})
    left_blocks = tuple(b for b in freed.blocks if b.address < lo)
    lb = left_blocks[-1]
    left_blocks = left_blocks[:-1] + (Block(lb.address, lo - lb.address, 0, "inactive"),)
    right_blocks = (Block(hi, 16 * MiB, 0, "inactive"),) + tuple(b for b in freed.blocks if b.address >= hi + 16 * MiB)
    left = replace(s2, blocks=left_blocks, total_size=lo - s2.address, allocated_size=32 * MiB)
    right = replace(s2, address=hi, blocks=right_blocks, total_size=s2.address + s2.total_size - hi,
                    allocated_size=64 * MiB)
    extra = _frees([victim], 1) + [TraceEvent("segment_unmap", lo, hi - lo, 0, 2)]
    later = _after_exception(exp_obs, (s1, left, right, small), extra)
    segs, bad = state_after(later, 0, 53)
    assert bad == 0
    assert [(x.address, x.total_size) for x in segs] == [(x.address, x.total_size) for x in exp_obs.segments]
    assert oom_metrics(later).allocated == oom_metrics(exp_obs).allocated


def test_start_state_of_a_truncated_trace(native: Snapshot) -> None:
    cut = replace(native, traces=(native.traces[0][40:],))
    m = oom_metrics(cut)
    assert m.trace_truncated is True
    assert m.free_total == 944 * MiB                       # the end state is unaffected
    segs, _ = state_after(cut, 0, -1)
    assert len(segs) == 1 and segs[0].total_size == 1_933_574_144


# ----------------------------------------------------------- stacks, charts


def test_top_stack_points_at_user_code(native: Snapshot, exp_obs: Snapshot) -> None:
    top = top_stacks(native)
    assert len(top) == 1
    assert top[0].frame_label == "repro/lab.py:190 in <module>"
    assert (top[0].bytes, top[0].count) == (900 * MiB, 36)
    assert all(not f.name.startswith("torch::unwind") for f in top[0].sample_frames)
    labels = [g.frame_label for g in top_stacks(exp_obs)]
    assert "repro/lab.py:121 in workload" in labels        # model.cuda() called from the user's workload
    assert any(label.startswith("<autograd backward") for label in labels)
    assert all("site-packages/torch" not in label for label in labels if not label.startswith("<"))


def test_user_frame_skips_torch_and_cpp() -> None:
    frames = (Frame("??", 0, "torch::unwind::unwind()"), Frame("site-packages/torch/nn/modules/module.py", 1097, "cuda"),
              Frame("/x/ceval.c", 12, "PyEval_EvalFrame"), Frame("train.py", 42, "main"))
    assert user_frame(frames) == Frame("train.py", 42, "main")


def test_timeline(native: Snapshot) -> None:
    tl = timeline(native)
    assert len(tl) == 149
    assert (tl[-1].allocated, tl[-1].reserved) == (900 * MiB, 1_933_574_144)
    assert max(p.allocated for p in tl) >= 1843 * MiB       # the 1.8 GiB tensor at the start
    small = timeline(native, max_points=20)
    assert len(small) <= 20
    assert small[0].index == 0 and small[-1].index == 148
    assert max(p.allocated for p in small) == max(p.allocated for p in tl)   # peaks survive downsampling
    assert [p.index for p in small] == sorted(p.index for p in small)


def test_segment_map(native: Snapshot) -> None:
    (seg,) = segment_map(native)
    assert seg.total_size == 1_933_574_144 and len(seg.blocks) == 73
    assert seg.blocks[0].offset == 0
    assert sum(b.size for b in seg.blocks) == seg.total_size
    assert sum(b.size for b in seg.blocks if b.state == "inactive") == 944 * MiB
    for a, b in zip(seg.blocks, seg.blocks[1:]):
        assert a.offset + a.size == b.offset


def test_derived_facts_are_computed_once_and_released_after_the_analysis(native: Snapshot) -> None:
    import oompost
    from oompost.analysis import snapshot_metrics as sm

    sm.forget()
    a = sm.state_after(native, 0, -1)
    assert sm.state_after(native, 0, -1) is a                  # one starting layout, shared
    assert sm.trace_start(native, 0) is sm.trace_start(native, 0)
    oompost.analyze([str(Path(__file__).parent.parent / "sample_logs" / "fragmentation_dynamic_padding")])
    assert sm._MEMO == {}                                      # nothing keeps a snapshot alive after analyze


@pytest.mark.parametrize("name", ["fragmentation_dynamic_padding", "hf_trainer_zero3_offload_a100_40g"])
def test_timeline_from_trace_starts_pass_equals_its_own(name: str) -> None:
    """trace_start leaves its per-entry deltas for timeline (one Python walk of the
    trace, not two); a second timeline, without them, walks the trace itself."""
    from oompost.analysis.snapshot_metrics import memo

    s = load_snapshot(Path(__file__).resolve().parents[1] / "sample_logs" / name / "snapshot_rank0_oom.pickle.gz")
    first = timeline(s, max_points=10_000)
    assert not any(k[0] == "alloc_deltas" for k in memo(s) if isinstance(k, tuple))
    assert timeline(s, max_points=10_000) == first
