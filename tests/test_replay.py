"""The allocator replay: the fixtures event for event, counterfactuals, and the
individual rules of reference/allocator.md against hand-computed traces."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from oompost.analysis.allocator_rules import AllocatorSettings, allocation_size, round_size
from oompost.analysis.replay import counterfactuals, default_device_bytes, replay, replay_many
from oompost.model import Snapshot, TraceEvent
from oompost.parsers.snapshot import load_snapshot

DATA = Path(__file__).parent / "data" / "snapshots"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
INF = float("inf")


def seg_events(r) -> list[tuple[str, int]]:
    return [(e.action, e.size) for e in r.segment_events]


def trace_seg_events(s: Snapshot) -> list[tuple[str, int]]:
    return [(e.action, e.size) for e in s.traces[0] if e.action.startswith("segment_")]


# ------------------------------------------------------- fixtures, as recorded


def test_native_fixture_reproduced_event_for_event(native: Snapshot) -> None:
    r = replay(native, None, cap=2 * GiB)
    assert seg_events(r) == [("segment_alloc", 1_933_574_144)] == trace_seg_events(native)
    assert r.matches_trace is True and r.mismatch == ""
    assert r.oom is True and r.oom_index == 148
    assert (r.oom_request, r.oom_alloc_size) == (500 * MiB, 500 * MiB)
    assert r.reserved_at_oom == 1_933_574_144
    assert r.allocated_at_oom == 900 * MiB
    assert r.reserved_unallocated_at_oom == 944 * MiB
    assert r.retries == 1                               # memory_summary: "cudaMalloc retries: 1"
    assert r.peak_allocated == 1_933_574_144            # the 1843.2 MiB tensor keeps the unsplit 0.8 MiB tail
    assert r.segments_allocated == 1
    # the same, with settings given as the recorded dict or a conf string
    assert replay(native, native.allocator_settings, cap=2 * GiB).oom_index == 148
    assert replay(native, "", cap=2 * GiB).allocated_at_oom == 900 * MiB


def test_native_fixture_does_not_oom_without_the_cap(native: Snapshot) -> None:
    r = replay(native, None, cap=None)
    assert r.oom is False and r.fits_at_recorded_oom is True
    assert r.matches_trace is False                     # the recorded OOM does not happen: the cap is needed


@pytest.mark.parametrize("which", ["exp_obs", "exp_after"])
def test_expandable_fixture_reproduced_event_for_event(which: str, request: pytest.FixtureRequest) -> None:
    s: Snapshot = request.getfixturevalue(which)
    r = replay(s)
    maps = [e for e in r.segment_events if e.action == "segment_map"]
    assert [e.size for e in maps] == [e.size for e in s.traces[0] if e.action == "segment_map"]
    assert [e.size // MiB for e in maps] == [80, 2, 60, 20, 20, 20, 40, 60, 60]
    unmaps = [e for e in r.segment_events if e.action == "segment_unmap"]
    assert [(e.size, e.offset) for e in unmaps] == [(20 * MiB, 180 * MiB)]   # same page as in the trace
    trace_first = next(e.addr for e in s.traces[0] if e.action == "segment_map")
    trace_unmap = next(e for e in s.traces[0] if e.action == "segment_unmap")
    assert trace_unmap.addr - trace_first == 180 * MiB
    assert r.matches_trace is True
    assert r.oom is True and r.oom_index == 53 and r.oom_request == 200 * GiB
    assert r.reserved_at_oom == 358_612_992 and r.reserved_end == 358_612_992
    assert r.peak_reserved == 379_584_512
    assert r.device_bytes == 358_612_992 + 148_963_983_360 == default_device_bytes(s)


def test_expandable_fixture_needs_the_physical_limit(exp_obs: Snapshot) -> None:
    r = replay(exp_obs, device_bytes=INF)
    assert r.oom is False and r.fits_at_recorded_oom is True


def test_truncated_trace_is_seeded_from_the_final_segments(native: Snapshot, exp_obs: Snapshot) -> None:
    for k in (2, 10, 40, 100):
        cut = replace(native, traces=(native.traces[0][k:],))
        r = replay(cut, None, cap=2 * GiB)
        assert r.oom is True and r.oom_index == 148 - k
        assert (r.reserved_at_oom, r.allocated_at_oom) == (1_933_574_144, 900 * MiB)
        assert r.seeded > 0 or k == 2 and r.seeded == 1
    for k in (5, 20, 45):
        cut = replace(exp_obs, traces=(exp_obs.traces[0][k:],))
        r = replay(cut)
        assert r.oom is True and r.matches_trace is True and r.reserved_at_oom == 358_612_992


# ------------------------------------------------------------ counterfactuals


def _by_setting(cfs) -> dict:
    return {c.setting: c for c in cfs}


def test_native_counterfactuals_under_the_2gib_cap(native: Snapshot) -> None:
    cfs = _by_setting(counterfactuals(native, cap=2 * GiB))
    base = cfs[""]
    assert base.baseline and base.oom and base.matches_trace is True
    exp = cfs["expandable_segments:True"]
    assert exp.oom is False
    assert int(1.85 * GiB) <= exp.peak_reserved_bytes <= 2 * GiB      # allocator.md §8.1: 1.89–1.98 GiB
    ms = cfs["max_split_size_mb:200"]
    assert ms.oom is False and ms.peak_reserved_bytes <= 2 * GiB
    assert "garbage_collection_threshold:0.6,max_split_size_mb:128" in cfs
    assert all(c.cap_bytes == 2 * GiB for c in cfs.values())


def test_native_counterfactuals_with_inferred_cap_are_conservative(native: Snapshot) -> None:
    cfs = _by_setting(counterfactuals(native))
    assert cfs[""].oom and "inferred" in cfs[""].note
    exp = cfs["expandable_segments:True"]
    # it fits at 2 GiB but not at the lowest cap the trace allows (1.80 GiB): say so, do not promise
    assert exp.oom is True and "fits only if the cap was at least" in exp.note


def test_capacity_fixture_ooms_under_every_setting(exp_obs: Snapshot, exp_after: Snapshot) -> None:
    for s in (exp_obs, exp_after):
        cfs = counterfactuals(s)
        settings = {c.setting for c in cfs}
        assert {"expandable_segments:True", "", "max_split_size_mb:200"} <= settings
        assert sum(c.baseline for c in cfs) == 1
        assert all(c.oom for c in cfs)
        base = next(c for c in cfs if c.baseline)
        assert base.setting == "expandable_segments:True" and base.matches_trace is True
        assert base.to_json()["oom"] is True


# -------------------------------------------------------------- size rules


def test_round_size() -> None:
    assert round_size(1) == 512
    assert round_size(513) == 1024
    assert round_size(1200, (4,) * 16) == 1536                 # 1200 ≤ 512·4: plain 512 rounding
    assert round_size(200 * MiB + 1, (4,) * 16) == 224 * MiB   # floor 128 MiB, step 32 MiB
    assert round_size(600_000, (4,) * 16) == 655_360           # < 1 MiB uses interval 0
    assert round_size(600_000) == 600_064
    assert round_size(256 * MiB, (4,) * 16) == 256 * MiB       # powers of two stay


def test_allocation_size() -> None:
    assert allocation_size(512) == 2 * MiB
    assert allocation_size(1 * MiB) == 2 * MiB                  # exactly 1 MiB is small
    assert allocation_size(1 * MiB + 512) == 20 * MiB
    assert allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB
    assert allocation_size(10 * MiB + 512) == 12 * MiB


def test_settings_parsing() -> None:
    s = AllocatorSettings.parse("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]")
    d = s.roundup_power2_divisions
    assert d[:7] == (8,) * 7 and d[7] == 2 and d[8] == 4 and d[9] == 2 and d[10] == 4 and d[11:] == (1,) * 5
    gap = AllocatorSettings.parse("roundup_power2_divisions:[64:8,1024:4]").roundup_power2_divisions
    assert gap[6] == 8 and gap[7:10] == (0, 0, 0) and gap[10] == 4 and gap[11] == 0
    s = AllocatorSettings.parse("expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.6,"
                                "pinned_use_cuda_host_register:True")
    assert s.expandable_segments and s.max_split_size == 128 * MiB and s.garbage_collection_threshold == 0.6
    assert s.ignored == ("pinned_use_cuda_host_register",)
    assert AllocatorSettings.parse(s.to_conf()) == s
    with pytest.raises(ValueError):
        AllocatorSettings.parse("max_split_size_mb:10")
    rec = AllocatorSettings.from_snapshot({"PYTORCH_CUDA_ALLOC_CONF": "max_non_split_rounding_mb:40",
                                           "max_split_size": 2_097_152_000, "expandable_segments": False,
                                           "garbage_collection_threshold": 0.0,
                                           "roundup_power2_divisions": {"1": 0, "256": 4}})
    assert rec.max_split_size == 2000 * MiB and rec.max_non_split_rounding == 40 * MiB
    assert rec.roundup_power2_divisions[8] == 4
    assert AllocatorSettings.from_snapshot({"max_split_size": -1}).max_split_size is None


# ------------------------------------------------------- synthetic traces


class Trace:
    """Builds a trace the way the allocator records it: addresses are handles."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self._next = 1 << 40

    def alloc(self, size: int, stream: int = 0) -> tuple[int, int, int]:
        addr = self._next
        self._next += 1 << 36
        self.events.append(TraceEvent("alloc", addr, size, stream, None))
        return addr, size, stream

    def free(self, h: tuple[int, int, int], completed: bool = True) -> None:
        addr, size, stream = h
        self.events.append(TraceEvent("free_requested", addr, size, stream, None))
        if completed:
            self.complete(h)

    def complete(self, h: tuple[int, int, int]) -> None:
        addr, size, stream = h
        self.events.append(TraceEvent("free_completed", addr, size, stream, None))

    def snapshot(self) -> Snapshot:
        return Snapshot("synthetic", (), (tuple(self.events),), {}, {})


def sim(t: Trace, conf: str = "", cap: int | None = None):
    return replay(t.snapshot(), conf, cap=cap, device_bytes=INF)


def test_max_split_size_rules() -> None:
    t = Trace()
    a = t.alloc(300 * MiB)
    t.free(a)
    b = t.alloc(100 * MiB)
    # default: the 100 MiB request splits the cached 300 MiB block
    assert seg_events(sim(t)) == [("segment_alloc", 300 * MiB)]
    # max_split 200: an oversize block never serves a smaller request → a new segment
    assert seg_events(sim(t, "max_split_size_mb:200")) == [("segment_alloc", 300 * MiB), ("segment_alloc", 100 * MiB)]
    t.free(b)
    c = t.alloc(290 * MiB)            # ≥ max_split and 300 < 290 + 20: takes the whole block, unsplit
    r = sim(t, "max_split_size_mb:200")
    assert len(r.segment_events) == 2 and r.allocated_end == 300 * MiB
    t.free(c)
    t.alloc(250 * MiB)                # 300 ≥ 250 + 20: rejected (only the first candidate is examined)
    assert seg_events(sim(t, "max_split_size_mb:200"))[-1] == ("segment_alloc", 250 * MiB)
    # max_non_split_rounding_mb widens the allowance
    assert len(sim(t, "max_split_size_mb:200,max_non_split_rounding_mb:60").segment_events) == 2


def test_release_available_cached_blocks_under_a_cap() -> None:
    t = Trace()
    a = t.alloc(300 * MiB)
    t.free(a)
    t.alloc(100 * MiB)
    t.alloc(150 * MiB)
    r = sim(t, "max_split_size_mb:200", cap=400 * MiB)
    # 400 + 150 > cap: the oversize 300 MiB block is freed (step 5), then the segment fits
    assert seg_events(r) == [("segment_alloc", 300 * MiB), ("segment_alloc", 100 * MiB),
                             ("segment_free", 300 * MiB), ("segment_alloc", 150 * MiB)]
    assert r.retries == 0 and r.oom is False           # step 5 is not a counted retry
    assert seg_events(sim(t, "", cap=400 * MiB)) == [("segment_alloc", 300 * MiB)]   # default: both split it


def test_should_split_thresholds() -> None:
    t = Trace()
    a = t.alloc(30 * MiB)
    t.free(a)
    t.alloc(29 * MiB + 512 * KiB)      # leftover 0.5 MiB ≤ 1 MiB: stays inside the block
    t.alloc(1000)                      # small pool: 1024 B out of a 2 MiB segment, the rest split off
    t.alloc(1000)
    r = sim(t)
    assert r.allocated_end == 30 * MiB + 2048
    assert seg_events(r) == [("segment_alloc", 30 * MiB), ("segment_alloc", 2 * MiB)]
    # expandable: any leftover ≥ 512 B is split off
    assert sim(t, "expandable_segments:True").allocated_end == 29 * MiB + 512 * KiB + 2048


def test_garbage_collection_frees_only_old_whole_segments() -> None:
    t = Trace()
    a = t.alloc(300 * MiB)
    b = t.alloc(300 * MiB)
    s = t.alloc(50 * MiB, stream=1)
    t.free(a)                          # cached at GC clock 3
    t.free(s)
    for _ in range(2):                 # two more get_free_block calls: a grows older than b and s
        s2 = t.alloc(50 * MiB, stream=1)
        t.free(s2)
    t.free(b)                          # cached at clock 5
    t.alloc(400 * MiB)                 # miss at clock 6: reserved 650 > 0.6 × 1000 → GC target 50 MiB
    r = sim(t, "garbage_collection_threshold:0.6", cap=1000 * MiB)
    ev = r.segment_events
    frees = [e for e in ev if e.action == "segment_free"]
    assert [e.size for e in frees] == [300 * MiB]
    assert frees[0].addr == ev[0].addr                 # the oldest block (a), not b
    assert ev[-1].action == "segment_alloc" and ev[-1].size == 400 * MiB
    assert r.retries == 0
    # without GC the same cap forces release_cached_blocks: every whole free segment goes
    r0 = sim(t, "", cap=1000 * MiB)
    assert [e.size for e in r0.segment_events if e.action == "segment_free"] == [300 * MiB, 300 * MiB, 50 * MiB]
    assert r0.retries == 1
    # GC is inert without a memory-fraction cap
    assert not [e for e in sim(t, "garbage_collection_threshold:0.6").segment_events if e.action == "segment_free"]


def test_roundup_power2_divisions_in_replay() -> None:
    t = Trace()
    t.alloc(600_000)
    t.alloc(200 * MiB + 1)
    r = sim(t, "roundup_power2_divisions:4")
    assert r.allocated_end == 655_360 + 224 * MiB
    assert seg_events(r) == [("segment_alloc", 2 * MiB), ("segment_alloc", 224 * MiB)]
    assert sim(t, "roundup_power2_divisions:[256:4,>:1]").allocated_end == 655_360 + 224 * MiB
    d = sim(t)
    assert d.allocated_end == 600_064 + 200 * MiB + 512
    assert seg_events(d)[-1] == ("segment_alloc", 202 * MiB)


def test_expandable_unmaps_whole_free_pages_and_maps_at_the_tail() -> None:
    t = Trace()
    a = t.alloc(64 * MiB)
    t.alloc(64 * MiB)
    t.free(a)
    t.alloc(200 * MiB)
    r = sim(t, "expandable_segments:True", cap=300 * MiB)
    assert [(e.action, e.size // MiB, e.offset // MiB) for e in r.segment_events] == [
        ("segment_map", 80, 0),        # 64 MiB → 4 pages of 20 MiB
        ("segment_map", 60, 80),       # 16 MiB free tail + 3 new pages
        ("segment_unmap", 60, 0),      # cap: 140 + 200 > 300 → pages wholly inside the freed 64 MiB go
        ("segment_map", 200, 140),     # then the tail grows by 200 MiB (cap test: 80 + 200 ≤ 300)
    ]
    assert r.allocated_end == 264 * MiB and r.reserved_end == 280 * MiB and r.retries == 1


def test_pending_frees_are_not_reused_until_completed() -> None:
    t = Trace()
    a = t.alloc(100 * MiB)
    t.free(a, completed=False)         # record_stream: reusable only at free_completed
    t.alloc(100 * MiB)
    t.complete(a)
    assert seg_events(sim(t)) == [("segment_alloc", 100 * MiB), ("segment_alloc", 100 * MiB)]
    # under a cap, release_cached_blocks waits for the event and frees the whole segment
    assert seg_events(sim(t, cap=150 * MiB)) == [("segment_alloc", 100 * MiB), ("segment_free", 100 * MiB),
                                                 ("segment_alloc", 100 * MiB)]


def test_cap_test_uses_the_segment_size() -> None:
    """allocator.md §3.2: the cap is tested with alloc_size, even under expandable segments."""
    t = Trace()
    t.alloc(1 * MiB + 512 * KiB)       # needs a 20 MiB segment: refused under a 10 MiB cap
    r = sim(t, cap=10 * MiB)
    assert r.oom is True and r.oom_alloc_size == 20 * MiB
    assert sim(t, "expandable_segments:True", cap=10 * MiB).oom is True
    t = Trace()
    t.alloc(10 * MiB)                  # tests 10 MiB against the cap, then maps a whole 20 MiB page
    r = sim(t, "expandable_segments:True", cap=15 * MiB)
    assert r.oom is False and r.reserved_end == 20 * MiB


def test_oom_on_a_request_that_cannot_fit() -> None:
    t = Trace()
    t.alloc(300 * MiB)
    t.alloc(300 * MiB)
    r = sim(t, cap=500 * MiB)
    assert r.oom is True and r.oom_index == 1 and r.stopped_at == 1
    assert r.reserved_at_oom == 300 * MiB and r.oom_alloc_size == 300 * MiB


def test_private_pool_memory_is_held_fixed() -> None:
    """CUDA-graph / MemPool segments: reserved, unusable by default-pool requests."""
    from oompost.analysis.snapshot_metrics import oom_metrics
    from oompost.model import Block, Segment

    priv = Segment(0, 1 << 45, 64 * MiB, 64 * MiB, 0, "large", (1, 7), False,
                   (Block(1 << 45, 64 * MiB, 64 * MiB, "active_allocated"),))
    t = Trace()
    t.events.append(TraceEvent("alloc", 1 << 45, 64 * MiB, 0, None))     # the graph's own allocation
    t.alloc(100 * MiB)
    s = replace(t.snapshot(), segments=(priv,))
    assert oom_metrics(s).private_pool_bytes == 64 * MiB
    r = replay(s, "", cap=150 * MiB, device_bytes=INF)
    assert r.oom is True                                # 64 MiB fixed + 100 MiB > 150 MiB
    assert any("private pools" in n for n in r.notes)
    assert replay(s, "", cap=200 * MiB, device_bytes=INF).oom is False


# ------------------------------------------------------------------ speed


def _synthetic(n: int, seed: int = 0) -> Snapshot:
    rnd = random.Random(seed)
    t = Trace()
    live: list[tuple[int, int, int]] = []
    while len(t.events) < n:
        if live and (len(live) > 400 or rnd.random() < 0.48):
            t.free(live.pop(rnd.randrange(len(live))))
        else:
            r = rnd.random()
            size = (rnd.randrange(1, MiB) if r < 0.5 else rnd.randrange(MiB, 10 * MiB) if r < 0.8
                    else rnd.randrange(10 * MiB, 200 * MiB))
            live.append(t.alloc(size, stream=rnd.choice((0, 0, 7))))
    return t.snapshot()


def test_100k_events_replay() -> None:
    """(How fast: benchmarks/snapshot_speed.py.)"""
    s = _synthetic(100_000)
    for conf in ("", "expandable_segments:True"):
        r = replay(s, conf, device_bytes=INF)
        assert r.events_replayed >= 100_000 and not r.oom
        assert r.peak_reserved >= r.peak_allocated > 0


CONFS = ("", "expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.6,max_split_size_mb:128")


def test_one_shared_pass_gives_the_results_of_separate_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _synthetic(30_000, seed=3)
    runs = [(c, cap) for c in CONFS for cap in (None, 300 * MiB)]
    monkeypatch.setenv("OOMPOST_JOBS", "1")
    alone = [replay(s, c, cap=cap, device_bytes=INF) for c, cap in runs]
    shared = replay_many(s, runs, device_bytes=INF)
    assert shared == alone
    assert any(r.oom for r in alone) and not all(r.oom for r in alone)   # the runs do stop at different entries


def test_runs_that_differ_only_in_the_cap_are_replayed_once_until_the_cap_matters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counterfactuals under a bracketed cap replay each setting at both ends: one run
    stands for the others until a cap test would go the other way, then they are replayed."""
    import oompost.analysis.replay as rp

    s = _synthetic(30_000, seed=5)
    free = replay(s, "", device_bytes=INF)
    caps = (free.peak_reserved + 64 * MiB, free.peak_reserved + 2 * GiB,      # never reached: one run for both
            free.peak_reserved // 2, free.peak_reserved // 2 + 20 * MiB)       # reached: the twin is replayed
    runs = [(c, cap) for c in ("", "expandable_segments:True", "garbage_collection_threshold:0.6") for cap in caps]
    monkeypatch.setenv("OOMPOST_JOBS", "1")
    alone = [replay(s, c, cap=cap, device_bytes=INF) for c, cap in runs]
    calls = []
    real = rp._Run.__init__

    def counting(self, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(rp._Run, "__init__", counting)
    assert replay_many(s, runs, device_bytes=INF) == alone
    assert len(calls) < len(runs)                   # some runs were never replayed on their own
    assert alone[0].cap != alone[1].cap and not alone[0].oom and not alone[1].oom


def test_replays_in_processes_give_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    import oompost.analysis.replay as rp

    s = _synthetic(30_000, seed=4)
    runs = [(c, cap) for c in CONFS for cap in (None, 300 * MiB)]
    monkeypatch.setenv("OOMPOST_NO_ALLOCSIM", "1")         # processes are the pure-Python fallback's
    monkeypatch.setenv("OOMPOST_JOBS", "1")
    alone = replay_many(s, runs, device_bytes=INF)
    monkeypatch.setenv("OOMPOST_JOBS", "3")
    monkeypatch.setattr(rp, "PARALLEL_FROM_ENTRIES", 0)
    assert rp._jobs(len(runs), 30_000) == 3
    assert replay_many(s, runs, device_bytes=INF) == alone


def test_counterfactual_note_says_how_much_was_replayed(native: Snapshot) -> None:
    cfs = counterfactuals(native, cap=2 * GiB)
    assert f"{len(cfs)} allocator replays of {len(native.traces[0]):,} trace entries" in cfs[0].note
    assert cfs[0].elapsed_s is not None and cfs[0].elapsed_s >= 0
    assert all(c.elapsed_s is None for c in cfs[1:])
