"""The compiled path of the counterfactual replays: ``_allocsim`` drives a whole run.

``oompost.analysis._allocsim`` (optional C extension, built by setup.py) is a
port of ``allocator.CachingAllocator`` plus ``replay._Run.step``: it reads the
trace columns directly, so a replay of millions of entries builds no Python
object per entry.  The Python model stays the reference: a run goes through C
from its starting state (empty, or the layout seeded for a truncated
trace is rebuilt in Python, then handed over as arrays: ``_state``), and the
extension itself declines (returns None) on values outside what it holds
safely; the run then steps through Python exactly as before.  Results are
identical by construction and checked by ``tests/test_allocsim_diff.py``.

The extension releases the GIL for the replay loop, so several runs share the
cores as threads of this process: no fork, no second copy of anything.
Set ``OOMPOST_NO_ALLOCSIM=1`` to force the Python model."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from .allocator import SimSegmentEvent
from .allocator_rules import KSMALL_BUFFER, N_INTERVALS, ceil_to

if TYPE_CHECKING:  # pragma: no cover
    from .replay import _Prepared, _Run

try:  # pragma: no cover - depends on the build
    from . import _allocsim
except ImportError:  # pragma: no cover - no compiler at install time
    _allocsim = None

_EVENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
THREADS_FROM_ENTRIES = 50_000       # below this a thread costs more than it saves


def available() -> bool:
    """Whether the compiled replay is built and not switched off."""
    return _allocsim is not None and not os.environ.get("OOMPOST_NO_ALLOCSIM")


def _state(r: "_Run") -> tuple[Any, ...] | None:
    """The allocator as seeding left it (``seed_layout`` / ``_seed_fresh`` for a
    trace that starts mid-run), in the arrays ``_allocsim.run`` loads: every block
    reachable from the live map, the pending frees and the pools, with its chain
    links as indices; the pools and the pending frees in their own order.  None
    when the allocator is empty (the common case: nothing to load).  Raises
    OverflowError for a value no int64 holds (the caller declines)."""
    import numpy as np

    sim = r.sim
    roots = [*r.live.values(), *sim.pending.values(), *(e[-1] for p in sim.free_pools.values() for e in p),
             *(e[-1] for p in sim.unmapped.values() for e in p)]
    if not roots:
        return None
    index: dict[int, int] = {}
    order: list[Any] = []
    for b in roots:
        if id(b) in index:
            continue
        while b.prev is not None:               # the whole chain, from its head
            b = b.prev
        while b is not None:
            if id(b) not in index:
                index[id(b)] = len(order)
                order.append(b)
            b = b.next
    segs: dict[int, int] = {}
    seg_rows: list[tuple[int, int]] = []
    for b in order:
        if b.seg is not None and id(b.seg) not in segs:
            segs[id(b.seg)] = len(seg_rows)
            seg_rows.append((b.seg.base, b.seg.page))

    def ix(b: Any) -> int:
        return -1 if b is None else index[id(b)]

    rows = [(b.ptr, b.size, b.stream, b.small, b.allocated, b.pending, b.mapped, ix(b.prev), ix(b.next),
             -1 if b.seg is None else segs[id(b.seg)], b.gc_base) for b in order]

    def arr(v: Any) -> bytes:
        return np.array(v, np.int64).tobytes()

    return (arr(rows), arr(seg_rows), arr([index[id(e[-1])] for e in sim.free_pools[False]]),
            arr([index[id(e[-1])] for e in sim.free_pools[True]]),
            arr([index[id(e[-1])] for e in sim.unmapped[False]]), arr([index[id(e[-1])] for e in sim.unmapped[True]]),
            arr([index[id(b)] for b in sim.pending.values()]),
            arr([(a, index[id(b)]) for a, b in r.live.items()]),
            (sim.peak_reserved, sim.allocated, sim.peak_allocated, sim.retries, sim.device_allocs,
             sim.gc_clock[False], sim.gc_clock[True]))


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _settings(r: "_Run", prep: "_Prepared") -> tuple[Any, ...] | None:
    """The tuple ``_allocsim.run`` takes, or None where a value is not a plain int
    (the extension range-checks the ints themselves)."""
    sim, st = r.sim, r.sim.s
    divs = tuple(st.roundup_power2_divisions[:N_INTERVALS])
    divs += (0,) * (N_INTERVALS - len(divs))
    ms = st.max_split_size
    if not all(_int(v) for v in divs) or not (ms is None or _int(ms)) \
            or not _int(st.max_non_split_rounding) or not _int(st.large_segment_size) or st.large_segment_size <= 0:
        return None
    cap = sim.cap
    if cap is not None and not _int(cap):
        return None
    try:
        gc = int(st.garbage_collection_threshold * cap) if sim.gc_on and cap is not None else None
    except (OverflowError, ValueError):  # a cap no float holds: Python meets it only if GC runs
        return None
    avail = sim.avail
    if isinstance(avail, float):                # Python compares ints with it exactly:
        if math.isnan(avail):
            return None
        if math.isinf(avail):
            avail = None if avail > 0 else -(1 << 63)   # None: unbounded
        else:
            avail = math.floor(avail)           # n > x.5  <=>  n > floor(x.5) for an int n
    elif not _int(avail):
        return None
    if not all(_int(c) for c in sim.twin_caps) or not _int(sim.total) or not _int(sim.reserved):
        return None
    grown = sim.total + sim.total // 8
    return (ms, st.max_non_split_rounding, bool(st.expandable_segments), gc, st.large_segment_size, divs, cap, avail,
            ceil_to(grown, KSMALL_BUFFER), ceil_to(grown, st.large_segment_size), sim.next_addr, sim.reserved,
            tuple(sim.twin_caps), bool(prep.has_completed))


def _columns(prep: "_Prepared") -> tuple[Any, ...]:
    import numpy as np

    t = prep.trace
    return (np.ascontiguousarray(prep.sel, np.int64), np.ascontiguousarray(prep.kind, np.int8),
            np.ascontiguousarray(t.addr, np.int64), np.ascontiguousarray(t.size, np.int64),
            np.ascontiguousarray(t.stream, np.int64))


def run(r: "_Run", prep: "_Prepared", cols: tuple[Any, ...] | None = None) -> bool:
    """Replay ``r`` to its end in C and leave it as ``_pass`` would (done, its
    allocator's counters and events set).  False: not taken (the caller steps it
    through Python)."""
    if not available() or r.replayed or r.done:
        return False
    settings = _settings(r, prep)
    if settings is None:
        return False
    try:
        state = _state(r)
    except OverflowError:                       # an address or size beyond int64 in the seeded layout
        return False
    out = _allocsim.run(*(cols if cols is not None else _columns(prep)), settings, state)
    if out is None:
        return False
    _apply(r, prep, out)
    return True


def _apply(r: "_Run", prep: "_Prepared", out: tuple[Any, ...]) -> None:
    import numpy as np

    (replayed, orphans, first_oom, res_oom, alloc_oom, stopped, fits, peak_res, peak_alloc, device_allocs, reserved,
     allocated, retries, diverged, *ev) = out
    sim, st = r.sim, r.st
    r.replayed, r.orphans = replayed, orphans
    if first_oom >= 0:
        r.first_oom = first_oom
        r.oom_req = st.round(int(prep.trace.size[first_oom]))
        r.oom_asz = st.alloc_size(r.oom_req)
        r.res_oom, r.alloc_oom = res_oom, alloc_oom
    r.stopped = stopped if stopped >= 0 else None
    r.fits_recorded = None if fits < 0 else bool(fits)
    if fits == 1:
        r.notes.append(f"the request that failed at entry {stopped} fits here; what follows in the trace is the "
                       "original program's reaction to the OOM, so the replay stops")
    r.done = True
    sim.peak_reserved, sim.peak_allocated, sim.device_allocs = peak_res, peak_alloc, device_allocs
    sim.reserved, sim.allocated, sim.retries = reserved, allocated, retries
    if diverged:
        sim.diverged, sim.twin_caps = True, ()
    cols = [np.frombuffer(b, np.int64).tolist() for b in ev]
    sim.events = sim.events + [SimSegmentEvent(_EVENT_ACTIONS[a], addr, size, None if a < 2 else off, index)
                               for a, addr, size, off, index in zip(*cols)]    # after any from seeding
    if sim.events:
        sim.index = sim.events[-1].index


def run_all(runs: list["_Run"], prep: "_Prepared") -> list[bool]:
    """``run`` for each; on long traces the runs go side by side on threads (the
    extension releases the GIL), one per core at most."""
    if not runs or not available():
        return [False] * len(runs)
    cols = _columns(prep)
    workers = min(len(runs), cores())
    if workers < 2 or len(prep.sel) < THREADS_FROM_ENTRIES:
        return [run(r, prep, cols) for r in runs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda r: run(r, prep, cols), runs))


def cores() -> int:
    try:
        want = int(os.environ.get("OOMPOST_JOBS", "0"))
    except ValueError:
        want = 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return want if want > 0 else cores


def alloc_deltas(trace: Any, sel: Any, codes: tuple[int, int, int], settings: Any) -> tuple[Any, ...] | None:
    """``snapshot_metrics._trace_start``'s walk of the trace, compiled: the per-entry
    allocated deltas (int64 array), their sum, the orphan frees, and the addresses
    still live / still pending at the end (lists).  None: not built, switched off,
    or declined (the caller walks the trace in Python)."""
    import numpy as np

    if not available() or trace.action.dtype != np.uint8:
        return None
    divs = tuple(settings.roundup_power2_divisions[:N_INTERVALS])
    divs += (0,) * (N_INTERVALS - len(divs))
    if not all(_int(v) for v in divs):
        return None
    out = _allocsim.alloc_deltas(np.ascontiguousarray(sel, np.int64), np.ascontiguousarray(trace.action),
                                 np.ascontiguousarray(trace.addr, np.int64), np.ascontiguousarray(trace.size, np.int64),
                                 codes, divs)
    if out is None:
        return None
    delta, total, orphan, live, pending = out
    return (np.frombuffer(delta, np.int64), total, orphan, np.frombuffer(live, np.int64).tolist(),
            np.frombuffer(pending, np.int64).tolist())
