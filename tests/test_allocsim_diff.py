"""The compiled replay (``analysis._allocsim``) against the Python model, result for result.

The Python ``CachingAllocator`` is the reference; the C port must give the very
same ``ReplayResult`` (events, peaks, OOM index and request, twin caps,
``diverged``) on real snapshots and on random traces built to reach every rule:
small and large pools, several streams, caps that force OOMs and retries,
``max_split_size``, ``roundup_power2_divisions``, expandable segments, GC,
pending frees, frees never recorded, frees of unknown blocks, recorded ``oom``
entries.  Skips when the extension is not built."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oompost.analysis import allocsim
from oompost.analysis import replay as rp
from oompost.analysis.replay import replay_many
from oompost.analysis.snapshot_metrics import oom_device, oom_metrics, settings_of
from oompost.model import Snapshot, TraceEvent
from oompost.parsers.snapshot import load_snapshot

pytestmark = pytest.mark.skipif(allocsim._allocsim is None, reason="the _allocsim extension is not built "
                                "(no C compiler at install time)")

ROOT = Path(__file__).resolve().parents[1]
MiB, GiB = 1 << 20, 1 << 30
INF = float("inf")
REFERENCE = ROOT.parent.parent / "shared" / "reference" / "snapshots"
SNAPSHOTS = sorted(ROOT.glob("sample_logs/*/*.pickle*")) + sorted(REFERENCE.glob("*.pickle"))


def both(monkeypatch: pytest.MonkeyPatch, snap: Snapshot, runs, **kw):  # type: ignore[no-untyped-def]
    """(compiled, python, how many runs the compiled path took, out of how many)."""
    taken: list[bool] = []
    real = allocsim.run_all

    def counting(every, prep):  # type: ignore[no-untyped-def]
        out = real(every, prep)
        taken.extend(out)
        return out

    monkeypatch.setenv("OOMPOST_JOBS", "1")
    monkeypatch.setattr(allocsim, "run_all", counting)
    monkeypatch.delenv("OOMPOST_NO_ALLOCSIM", raising=False)
    c = replay_many(snap, runs, **kw)
    counted = list(taken)
    monkeypatch.setenv("OOMPOST_NO_ALLOCSIM", "1")
    p = replay_many(snap, runs, **kw)
    monkeypatch.delenv("OOMPOST_NO_ALLOCSIM")
    return c, p, sum(counted), len(counted)


def assert_same(c, p) -> None:  # type: ignore[no-untyped-def]
    assert len(c) == len(p)
    for k, (x, y) in enumerate(zip(c, p)):
        if x != y:
            diff = {f: (getattr(x, f), getattr(y, f)) for f in x.__dataclass_fields__ if getattr(x, f) != getattr(y, f)}
            raise AssertionError(f"run {k} ({x.settings.to_conf()!r}, cap {x.cap}): {str(diff)[:2000]}")


# ------------------------------------------------------------- real snapshots


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_snapshots(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_snapshot(path)
    dev = oom_device(s)
    rec = settings_of(s)
    m = oom_metrics(s, device=dev)
    cap = m.cap_bounds.exact if m.cap_bounds is not None and m.cap_bounds.exact else None
    caps = [cap, None, cap // 2, cap * 3 // 4] if cap else [None, GiB, 3 * GiB]
    sts = [st for _, st in rp._candidates(rec, cap is not None)]
    sts += [rec.with_conf("roundup_power2_divisions:4"),
            rec.with_conf("expandable_segments:True,roundup_power2_divisions:[256:1,512:2,>:8]"),
            rec.with_conf("garbage_collection_threshold:0.9,max_split_size_mb:20,max_non_split_rounding_mb:4")]
    runs = [(st, c) for st in sts for c in caps]
    c, p, taken, total = both(monkeypatch, s, runs, device=dev)
    assert_same(c, p)
    if len(s.traces[dev]):
        assert taken == total > 0       # every run went through C, seeded starts (truncated traces) too


# ------------------------------------------------------------- random traces


def random_trace(seed: int, n: int) -> Snapshot:
    """Allocs and frees as the allocator records them, with the odd things real
    traces hold: pending frees completed late or never, an address reused without
    its free recorded, frees of unknown addresses, recorded ``oom`` entries."""
    rnd = random.Random(seed)
    ev: list[TraceEvent] = []
    live: list[tuple[int, int, int]] = []
    pending: list[tuple[int, int, int]] = []
    nxt = 1 << 40
    streams = (0, 0, 0, 7, 13)[: rnd.choice((1, 3, 5))]
    completed = rnd.random() < 0.8
    while len(ev) < n:
        r = rnd.random()
        if live and (len(live) > rnd.choice((50, 300)) or r < 0.45):
            h = live.pop(rnd.randrange(len(live)))
            ev.append(TraceEvent("free_requested", *h, None))
            if completed:
                if rnd.random() < 0.3:
                    pending.append(h)
                else:
                    ev.append(TraceEvent("free_completed", *h, None))
        elif pending and r < 0.55:
            ev.append(TraceEvent("free_completed", *pending.pop(rnd.randrange(len(pending))), None))
        elif r < 0.57 and live:                                   # address reused, its free never recorded
            h = live.pop(rnd.randrange(len(live)))
            size = rnd.randrange(1, 4 * MiB)
            ev.append(TraceEvent("alloc", h[0], size, h[2], None))
            live.append((h[0], size, h[2]))
        elif r < 0.58:                                            # a free of something never allocated
            ev.append(TraceEvent("free_completed" if completed else "free_requested", 5 << 50, 512, 0, None))
        elif r < 0.585:                                           # a recorded OOM the program survived
            ev.append(TraceEvent("oom", 0, rnd.randrange(100 * MiB, 4 * GiB), rnd.choice(streams), None,
                                 device_free=1 << 30))
        else:
            k = rnd.random()
            size = (rnd.randrange(1, 2048) if k < 0.15 else rnd.randrange(2048, MiB) if k < 0.5
                    else rnd.randrange(MiB, 10 * MiB) if k < 0.75 else rnd.randrange(10 * MiB, 300 * MiB)
                    if k < 0.97 else rnd.randrange(300 * MiB, 2 * GiB))
            h = (nxt, size, rnd.choice(streams))
            nxt += 1 << 36
            ev.append(TraceEvent("alloc", *h, None))
            live.append(h)
    return Snapshot("synthetic", (), (tuple(ev),), {}, {})


CONFS = ("", "expandable_segments:True", "max_split_size_mb:20", "max_split_size_mb:128",
         "max_split_size_mb:64,max_non_split_rounding_mb:0", "roundup_power2_divisions:4",
         "roundup_power2_divisions:[1:1,64:8,>:2]", "expandable_segments:True,roundup_power2_divisions:2",
         "garbage_collection_threshold:0.6,max_split_size_mb:128", "garbage_collection_threshold:0.95",
         "large_segment_size_mb:4", "expandable_segments:True,large_segment_size_mb:64")


@pytest.mark.parametrize("seed", range(12))
def test_random_traces(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    s = random_trace(seed, 6_000)
    free = replay_many(s, [("", None)], device_bytes=INF)[0].peak_reserved
    caps = (None, free // 3, free // 2, free // 2 + 20 * MiB, free * 3 // 4, free + GiB)
    runs = [(conf, cap) for conf in CONFS for cap in caps]
    db = INF if seed % 3 else free * 2 // 3 + 0.5        # a physical limit too, fractional on purpose
    c, p, taken, total = both(monkeypatch, s, runs, device_bytes=db)
    assert_same(c, p)
    assert taken >= len(CONFS)
    assert any(r.oom for r in p) and any(r.retries for r in p)
    if db == INF:
        assert not all(r.oom for r in p)


def test_runs_on_threads_give_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    s = random_trace(99, 8_000)
    runs = [(conf, cap) for conf in CONFS for cap in (None, 2 * GiB)]
    c, p, taken, total = both(monkeypatch, s, runs, device_bytes=INF)
    monkeypatch.setattr(allocsim, "THREADS_FROM_ENTRIES", 0)
    monkeypatch.setenv("OOMPOST_JOBS", "3")
    assert allocsim.cores() == 3
    assert_same(replay_many(s, runs, device_bytes=INF), p)


@pytest.mark.parametrize("size", [1 << 61, -(1 << 61), (1 << 62) + 1])
def test_values_out_of_range_decline_to_python(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = [TraceEvent("alloc", 1 << 40, MiB, 0, None), TraceEvent("alloc", 2 << 40, size, 0, None),
          TraceEvent("free_completed", 1 << 40, MiB, 0, None)]
    s = Snapshot("synthetic", (), (tuple(ev),), {}, {})
    c, p, taken, total = both(monkeypatch, s, [("", None), ("expandable_segments:True", GiB)], device_bytes=INF)
    assert_same(c, p)


def test_hostile_columns_never_crash() -> None:
    """Indices out of range decline; wrong types raise; nothing reads out of bounds."""
    import numpy as np

    run = allocsim._allocsim.run
    n = 4
    kind = np.zeros(n, np.int8)
    col = np.full(n, MiB, np.int64)
    settings = (None, 20 * MiB, False, None, 20 * MiB, (0,) * 16, None, None, 1 << 30, 1 << 30, 1 << 41, 0, (), True)
    assert run(np.array([0, 1, 2, 3], np.int64), kind, col, col, col, settings) is not None
    assert run(np.array([0, 4], np.int64), kind, col, col, col, settings) is None
    assert run(np.array([-1], np.int64), kind, col, col, col, settings) is None
    with pytest.raises(TypeError):
        run(np.array([0], np.int32), kind, col, col, col, settings)
    with pytest.raises(ValueError):
        run(np.array([0], np.int64), kind, col[:2], col, col, settings)
    with pytest.raises(ValueError):
        run(np.array([0], np.int64), kind, col, col, col, settings[:5])
    huge = settings[:10] + (1 << 70,) + settings[11:]
    assert run(np.array([0], np.int64), kind, col, col, col, huge) is None


def test_hostile_seeded_state_declines() -> None:
    """A seeded layout (from the snapshot's segments) with indices or flags out of range."""
    import numpy as np

    run = allocsim._allocsim.run
    kind = np.zeros(2, np.int8)
    col = np.full(2, MiB, np.int64)
    sel = np.array([0, 1], np.int64)
    settings = (None, 20 * MiB, False, None, 20 * MiB, (0,) * 16, None, None, 1 << 30, 1 << 30, 1 << 41, 2 * MiB, (), True)

    def state(block, free=(0,), live=(7, 0)):  # type: ignore[no-untyped-def]
        b = np.array(block, np.int64).tobytes()
        return (b, b"", np.array(free, np.int64).tobytes(), b"", b"", b"", b"", np.array(live, np.int64).tobytes(),
                (2 * MiB, 0, 0, 0, 1, 0, 0))

    good = [1 << 30, 2 * MiB, 0, 0, 0, 0, 1, -1, -1, -1, 0]
    assert run(sel, kind, col, col, col, settings, state(good)) is not None
    for k, bad in ((7, 5), (8, -2), (9, 0), (4, 2), (1, 0), (0, 1 << 62)):
        blk = list(good)
        blk[k] = bad
        assert run(sel, kind, col, col, col, settings, state(blk)) is None, (k, bad)
    assert run(sel, kind, col, col, col, settings, state(good, free=(3,))) is None
    assert run(sel, kind, col, col, col, settings, state(good, live=(7, 9))) is None
    with pytest.raises(TypeError):
        run(sel, kind, col, col, col, settings, ("x",) * 8 + ((0,) * 7,))
    with pytest.raises(ValueError):
        run(sel, kind, col, col, col, settings, state(good)[:5])


# ------------------------------------------------------------- trace_start's walk


@pytest.mark.parametrize("path", SNAPSHOTS[:6] + SNAPSHOTS[-3:], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_trace_start_and_timeline(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled walk of ``_trace_start`` (per-entry deltas for the timeline too)."""
    from oompost.analysis.snapshot_metrics import forget, timeline, trace_start

    out = []
    for off in ("", "1"):
        monkeypatch.setenv("OOMPOST_NO_ALLOCSIM", off)
        s = load_snapshot(path)
        forget()
        dev = oom_device(s)
        out.append((trace_start(s, dev), timeline(s, device=dev, max_points=5_000)))
    assert out[0] == out[1]


def test_trace_start_on_random_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    from oompost.analysis.snapshot_metrics import forget, timeline, trace_start

    for seed in range(4):
        out = []
        for off in ("", "1"):
            monkeypatch.setenv("OOMPOST_NO_ALLOCSIM", off)
            forget()
            s = random_trace(seed, 4_000)
            out.append((trace_start(s, 0), timeline(s, max_points=10_000)))
        assert out[0] == out[1]
        assert out[0][0].orphan_frees > 0


# ------------------------------------------------------------- odd inputs


def _same_or_same_error(monkeypatch: pytest.MonkeyPatch, snap: Snapshot, runs, **kw):  # type: ignore[no-untyped-def]
    from oompost.analysis.snapshot_metrics import forget

    out = []
    for off in ("", "1"):
        monkeypatch.setenv("OOMPOST_NO_ALLOCSIM", off)
        forget()
        try:
            out.append(("ok", replay_many(snap, runs, **kw)))
        except Exception as e:      # noqa: BLE001 - the Python model's own error is the reference
            out.append(("error", type(e).__name__))
    assert out[0] == out[1]
    return out[0]


@pytest.mark.parametrize("seed", range(40))
def test_extreme_values(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Addresses, sizes and streams at and beyond the int64 edges, negative sizes, any
    action in any order: the same results (or the same error) either way."""
    rnd = random.Random(seed)
    addrs = [rnd.choice([0, -1, 1 << 62, -(1 << 63), (1 << 63) - 1]) if rnd.random() < 0.1
             else rnd.randrange(1 << 40, 1 << 41, 512) for _ in range(30)]
    ev = [TraceEvent(rnd.choice(["alloc"] * 4 + ["free_requested", "free_completed", "oom", "segment_alloc"]),
                     rnd.choice(addrs),
                     rnd.choice([rnd.randrange(-1000, 3 * MiB), rnd.randrange(0, 300 * MiB), 1 << 60, (1 << 60) + 1,
                                 -(1 << 62), (1 << 63) - 1, 0, 511, 512, 513]),
                     rnd.choice([0, 1, -5, 1 << 62]), None) for _ in range(rnd.randrange(10, 300))]
    s = Snapshot("fuzz", (), (tuple(ev),), {}, {})
    confs = ("", "expandable_segments:True", "max_split_size_mb:20", "garbage_collection_threshold:0.5",
             "roundup_power2_divisions:8")
    _same_or_same_error(monkeypatch, s, [(c, cap) for c in confs for cap in (None, 100 * MiB, GiB)],
                        device_bytes=rnd.choice([INF, 2 * GiB, 1.5]))


@pytest.mark.parametrize("seed", range(40))
def test_random_seeded_layouts(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Truncated traces over random final layouts (native and expandable, small and
    large, overlapping now and then): the seeded start handed to C gives Python's results."""
    from oompost.model import Block, Segment

    rnd = random.Random(seed)
    segs = []
    base = 1 << 40
    for _ in range(rnd.randrange(1, 6)):
        blocks, addr = [], base
        for _ in range(rnd.randrange(1, 6)):
            sz = rnd.choice([512, 2 * MiB, 20 * MiB, rnd.randrange(512, 50 * MiB, 512)])
            st = rnd.choice(["active_allocated", "active_pending_free", "inactive"])
            blocks.append(Block(addr, sz, sz if st != "inactive" else 0, st))
            addr += sz
        total = addr - base
        segs.append(Segment(device=0, address=base, total_size=total, allocated_size=0, stream=rnd.choice([0, 7]),
                            segment_type="small" if rnd.random() < 0.3 else "large", pool_id=(0, 0),
                            is_expandable=rnd.random() < 0.4, blocks=tuple(blocks)))
        base += (total if rnd.random() < 0.8 else -rnd.randrange(0, total)) + rnd.choice([0, 2 * MiB, 1 << 30])
    live = [b.address for s in segs for b in s.blocks if b.state != "inactive"]
    ev: list[TraceEvent] = []
    for _ in range(rnd.randrange(5, 200)):
        if rnd.random() < 0.3 and live:
            a = rnd.choice(live)
        else:
            a = rnd.randrange(1 << 45, 1 << 46, 512)
            ev.append(TraceEvent("alloc", a, rnd.randrange(1, 60 * MiB), rnd.choice([0, 7]), None))
            if rnd.random() < 0.5:
                continue
        ev += [TraceEvent("free_requested", a, 512, 0, None), TraceEvent("free_completed", a, 512, 0, None)]
    s = Snapshot("fuzz", tuple(segs), (tuple(ev),), {"expandable_segments": rnd.random() < 0.4}, {})
    confs = ("", "expandable_segments:True", "max_split_size_mb:20", "garbage_collection_threshold:0.5")
    _same_or_same_error(monkeypatch, s, [(c, cap) for c in confs for cap in (None, 200 * MiB)], device_bytes=INF)
