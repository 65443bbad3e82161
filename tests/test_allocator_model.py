"""The one model of the caching allocator (analysis/allocator.py): the invariants
``torch.cuda._memory_viz`` reads off a snapshot hold at every step of random
programs under every setting the counterfactuals use, and on the real
snapshots' states at the OOM.

_memory_viz.segsum: reserved = allocated (requested bytes of active blocks)
+ free inside reserved, where free inside reserved = rounding waste (size −
requested of active blocks) + holes between blocks (every other block)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oompost.analysis.allocator import Block, CachingAllocator
from oompost.analysis.allocator_rules import ALLOCATED, INACTIVE, AllocatorSettings
from oompost.analysis.snapshot_metrics import oom_metrics, state_after
from oompost.model import Segment
from oompost.parsers.snapshot import load_snapshot

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SAMPLES = Path(__file__).parent.parent / "sample_logs"
SETTINGS = ("", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4",
            "garbage_collection_threshold:0.6,max_split_size_mb:128")


def memory_viz_sums(segs: tuple[Segment, ...]) -> dict[str, int]:
    """The totals of ``_memory_viz.segsum`` (requested bytes count as allocated)."""
    out = {"reserved": 0, "allocated": 0, "free_internal": 0, "free_external": 0, "allocated_blocks": 0}
    for s in segs:
        out["reserved"] += s.total_size
        for b in s.blocks:
            if b.state == ALLOCATED:
                out["allocated"] += b.requested_size
                out["free_internal"] += b.size - b.requested_size
                out["allocated_blocks"] += b.size
            else:
                out["free_external"] += b.size
    return out


def check(sim: CachingAllocator, live: dict[int, Block]) -> None:
    segs = sim.segments(live.values())
    v = memory_viz_sums(segs)
    assert v["reserved"] == sim.reserved
    assert v["allocated_blocks"] == sim.allocated
    assert v["allocated"] + v["free_internal"] + v["free_external"] == v["reserved"]
    assert v["free_internal"] >= 0
    free_in_pools = sum(len(p) for p in sim.free_pools.values())
    free_blocks = 0
    for s in segs:
        end = s.address
        prev_free = False
        for b in s.blocks:
            assert b.address == end, "blocks of a segment are contiguous"
            end = b.address + b.size
            is_free = b.state == INACTIVE
            assert not (is_free and prev_free), "two free neighbours were not merged"
            prev_free = is_free
            free_blocks += is_free
            if b.state == ALLOCATED:
                assert b.size >= sim.s.round(b.requested_size)
        assert end == s.address + s.total_size
    assert free_blocks == free_in_pools, "every free block is in exactly one pool entry"


@pytest.mark.parametrize("conf", SETTINGS)
def test_memory_viz_invariants_hold_through_random_programs(conf: str) -> None:
    rnd = random.Random(len(conf))
    st = AllocatorSettings.coerce(conf)
    cap = 900 * MiB if "garbage" in conf else None
    sim = CachingAllocator(st, cap, 2 * GiB, 80 * GiB, 1 << 40)
    live: dict[int, Block] = {}
    pending: list[Block] = []
    ooms = 0
    for step in range(4000):
        r = rnd.random()
        if live and r < 0.45:
            k = rnd.choice(list(live))
            b = live.pop(k)
            sim.request_free(b)
            pending.append(b)
        elif pending and r < 0.6:
            sim.complete_free(pending.pop(rnd.randrange(len(pending))))
        else:
            size = rnd.choice((rnd.randrange(1, 64 * KiB), rnd.randrange(MiB, 12 * MiB),
                               rnd.randrange(12 * MiB, 300 * MiB)))
            b = sim.malloc(size, rnd.choice((0, 0, 7)))
            if b is None:
                ooms += 1
            else:
                live[id(b)] = b
            # releasing the cache completes every pending free (synchronize_and_free_events)
            pending = [b for b in pending if id(b) in sim.pending]
        if step % 97 == 0:
            check(sim, live)
    check(sim, live)
    assert ooms > 0 or cap is None
    assert sim.peak_reserved >= sim.reserved > 0


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.iterdir() if (p / "snapshot_rank0_oom.pickle.gz").exists()))
def test_memory_viz_invariants_hold_on_the_real_states_at_the_oom(name: str) -> None:
    snap = load_snapshot(str(SAMPLES / name / "snapshot_rank0_oom.pickle.gz"))
    m = oom_metrics(snap)
    assert m.reserved == m.active + m.free_total                # allocated + pending + holes
    assert m.active == m.requested + m.internal_waste           # rounding waste is inside the active blocks
    segs = state_after(snap, m.device, m.oom_index if m.oom_index is not None else len(snap.traces[m.device]) - 1)[0]
    v = memory_viz_sums(segs)
    assert v["allocated"] + v["free_internal"] + v["free_external"] == v["reserved"] == m.reserved
    assert v["allocated_blocks"] == m.allocated


def test_estimator_runs_on_the_same_model() -> None:
    from oompost.estimate.memory import _CachingAllocator

    al = _CachingAllocator()
    assert isinstance(al, CachingAllocator)
    b = al.malloc(3 * MiB + 1, tag="x")
    assert b.size == 3 * MiB + 512 and al.reserved == 20 * MiB and al.live["x"] == b.size
    check(al, {id(b): b})
