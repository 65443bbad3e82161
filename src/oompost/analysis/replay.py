"""Replay a snapshot's allocation trace through a model of the CUDA caching allocator.

Why: "would ``expandable_segments:True`` (or ``max_split_size_mb``, or a GC
threshold) have avoided this OOM?" has a definite answer once the program's
sequence of requests and frees is known — it is in ``device_traces``.  The
allocator's decisions are deterministic given that sequence, the settings, a
memory-fraction cap and the physical memory left on the card, so replaying the
sequence under other settings is a counterfactual the report can state as a
fact rather than a rule of thumb.

The allocator itself is ``analysis.allocator.CachingAllocator`` (the one
model, shared with the estimator).  This module feeds it the trace: the
entries to replay are filtered once per snapshot (``_Prepared``), a trace that
starts mid-run is seeded with the layout rebuilt before its first entry, and
several settings are replayed together (``replay_many``): each run in compiled
code where the extension is built (``analysis.allocsim``; runs side by side on
threads), else all in one Python pass, on every core (forked processes) for
long traces.  Replaying the recorded settings must reproduce the trace's own
``segment_*`` entries; ``matches_trace`` says whether it did.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..model import Segment, Snapshot
from ..units import fmt_bytes
from . import allocsim
from .allocator import ADDR_ALIGN, Block, CachingAllocator, SimSegmentEvent
from .allocator_rules import AllocatorSettings, ceil_to
from .snapshot_metrics import (
    INACTIVE,
    PENDING,
    device_segments,
    device_trace,
    memo,
    oom_device,
    oom_index,
    oom_metrics,
    settings_of,
    state_after,
    trace_start,
)

__all__ = ["AllocatorSettings", "Counterfactual", "ReplayResult", "SimSegmentEvent", "counterfactuals",
           "default_device_bytes", "replay"]

INF = float("inf")
_DEFAULT_TOTAL = 1 << 48


# ------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class ReplayResult:
    oom: bool                      # the replay hit an OOM (at an alloc or at the recorded oom entry)
    oom_index: int | None          # trace index of the first OOM in the replay
    oom_request: int | None        # rounded bytes of the request that failed
    oom_alloc_size: int | None     # the segment it needed ("Tried to allocate")
    peak_reserved: int
    peak_allocated: int
    segments_allocated: int        # device allocations: cudaMalloc segments + expandable page maps
    reserved_at_oom: int | None
    allocated_at_oom: int | None
    reserved_end: int
    allocated_end: int
    retries: int                   # num_alloc_retries (release_cached_blocks + retry)
    events_replayed: int
    stopped_at: int | None         # index where the replay stopped because the future diverged
    fits_at_recorded_oom: bool | None   # the recorded oom request fitted in this replay
    segment_events: tuple[SimSegmentEvent, ...]
    matches_trace: bool | None     # same segment actions and sizes as the trace (meaningful for the recorded settings)
    mismatch: str
    seeded: int                    # allocations live before the trace started (truncated ring buffer)
    settings: AllocatorSettings
    cap: int | None
    device_bytes: int | None
    notes: tuple[str, ...] = ()

    @property
    def reserved_unallocated_at_oom(self) -> int | None:
        if self.reserved_at_oom is None or self.allocated_at_oom is None:
            return None
        return self.reserved_at_oom - self.allocated_at_oom


@dataclass(frozen=True, slots=True)
class Counterfactual:
    setting: str                   # PYTORCH_CUDA_ALLOC_CONF value ("" = defaults; see ``label``)
    oom: bool
    peak_reserved_bytes: int
    note: str
    baseline: bool = False         # the recorded settings (validates the model)
    oom_index: int | None = None
    peak_allocated_bytes: int = 0
    cap_bytes: int | None = None
    matches_trace: bool | None = None
    elapsed_s: float | None = None  # on the first counterfactual: wall time of all the replays

    @property
    def label(self) -> str:
        return self.setting or "(defaults)"

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "oom": self.oom, "peak_reserved_bytes": self.peak_reserved_bytes,
                "note": self.note, "baseline": self.baseline, "oom_index": self.oom_index,
                "peak_allocated_bytes": self.peak_allocated_bytes, "cap_bytes": self.cap_bytes,
                "matches_trace": self.matches_trace, "elapsed_s": self.elapsed_s}


# ------------------------------------------------------------------ driver


def default_device_bytes(snap: Snapshot, device: int | None = None) -> int | None:
    """Physical bytes PyTorch could hold on the card: reserved at the OOM plus the
    oom entry's ``device_free`` (read after the flush; allocator.md §8.1), else the
    capture hook's ``device_total``, else None (unbounded)."""
    dev = oom_device(snap) if device is None else device
    trace = device_trace(snap, dev)
    oi = oom_index(trace)
    if oi is not None and trace[oi].device_free is not None:
        m = oom_metrics(snap, device=dev)
        return m.reserved + int(trace[oi].device_free)
    total = snap.meta.get("device_total")
    return int(total) if isinstance(total, int) and total > 0 else None


def _device_total(snap: Snapshot, device_bytes: float) -> int:
    total = snap.meta.get("device_total")
    if isinstance(total, int) and total > 0:
        return total
    return int(device_bytes) if device_bytes != INF else _DEFAULT_TOTAL


def _private_ranges(segs: list[Segment]) -> list[tuple[int, int]]:
    return sorted((s.address, s.address + s.total_size) for s in segs if s.pool_id != (0, 0))


def _in_ranges(ranges: list[tuple[int, int]], addr: int) -> bool:
    i = bisect.bisect_right(ranges, (addr, INF)) - 1
    return i >= 0 and ranges[i][0] <= addr < ranges[i][1]


class _Prepared:
    """What every replay of one device's trace shares: the entries to replay
    (already filtered), the trace's own segment events, private-pool ranges,
    the address space to start at.  Built once per snapshot and device."""

    __slots__ = ("trace", "sel", "kind", "seg_events", "private", "fixed", "has_completed", "base_addr")

    def __init__(self, snap: Snapshot, device: int) -> None:
        import numpy as np

        trace = device_trace(snap, device)
        segs_final = device_segments(snap, device)
        self.trace = trace
        private = _private_ranges(segs_final)
        self.private = private
        self.fixed = sum(hi - lo for lo, hi in private)
        n = len(trace)
        max_addr = max([s.address + s.total_size for s in segs_final] + [0])
        if n:
            max_addr = max(max_addr, int((trace.addr + trace.size).max()))
        self.base_addr = ceil_to(max_addr + (1 << 40), ADDR_ALIGN)
        code = trace.code_of
        self.has_completed = code("free_completed") >= 0 and bool(np.any(trace.action == code("free_completed")))
        kind = np.full(256, -1, np.int8)             # action code → 0 alloc, 1 free_requested, 2 free_completed, 3 oom
        seg = np.zeros(256, bool)
        for a, k in _KINDS.items():
            if code(a) >= 0:
                kind[code(a)] = k
        for a in _SEG_ACTIONS:
            if code(a) >= 0:
                seg[code(a)] = True
        k = kind[trace.action]
        in_private = np.zeros(n, bool)
        for lo, hi in private:
            in_private |= (trace.addr >= lo) & (trace.addr < hi)
        seg_sel = np.flatnonzero(seg[trace.action] & ~in_private)
        self.seg_events = list(zip(seg_sel.tolist(), [trace.actions[c] for c in trace.action[seg_sel].tolist()],
                                   trace.size[seg_sel].tolist()))
        keep = (k >= 0) & ~(in_private & (k != 3))
        for i, (_, pid, _) in trace.extra.items():      # entries of a private pool (torch > 2.11 records it)
            if pid is not None and pid != (0, 0):
                keep[i] = False
        self.sel = np.flatnonzero(keep)
        self.kind = k

    def steps(self, chunk: int = 1 << 16):  # type: ignore[no-untyped-def]
        """(index, kind, addr, size, stream) of every entry to replay, built a chunk at a time."""
        t, sel, kind = self.trace, self.sel, self.kind
        for lo in range(0, len(sel), chunk):
            s = sel[lo:lo + chunk]
            yield from zip(s.tolist(), kind[s].tolist(), t.addr[s].tolist(), t.size[s].tolist(),
                           t.stream[s].tolist())


_KINDS = {"alloc": 0, "free_requested": 1, "free_completed": 2, "oom": 3}
_SEG_ACTIONS = frozenset({"segment_alloc", "segment_free", "segment_map", "segment_unmap"})


def _prepared(snap: Snapshot, device: int) -> _Prepared:
    m = memo(snap)
    key = ("replay_prepared", device)
    p = m.get(key)
    if p is None:
        p = m[key] = _Prepared(snap, device)
    return p


class _Run:
    """One replay in progress: a simulated allocator and its bookkeeping."""

    __slots__ = ("st", "cap", "sim", "live", "seeded", "notes", "first_oom", "oom_req", "oom_asz", "res_oom",
                 "alloc_oom", "stopped", "fits_recorded", "orphans", "replayed", "done", "has_completed")

    def __init__(self, snap: Snapshot, prep: _Prepared, recorded: AllocatorSettings, st: AllocatorSettings,
                 cap: int | None, avail: float, device: int, twins: tuple[int, ...] = ()) -> None:
        self.st, self.cap = st, cap
        self.sim = sim = CachingAllocator(st, cap, avail, _device_total(snap, avail), prep.base_addr)
        sim.twin_caps = twins
        self.notes: list[str] = []
        if prep.private:
            sim._grow(prep.fixed)
            self.notes.append(f"{fmt_bytes(prep.fixed)} in private pools (CUDA graphs / MemPool) held as fixed "
                              "reserved memory")
        self.live: dict[int, Block] = {}
        self.seeded = 0
        ts = trace_start(snap, device, recorded)
        if ts.truncated or ts.reserved_at_start > 0:
            start, bad = state_after(snap, device, -1, recorded)      # one starting layout, shared
            start_default = [s for s in start if s.pool_id == (0, 0)]
            if st.expandable_segments == recorded.expandable_segments:
                self.seeded = sim.seed_layout(start_default, self.live)
                self.notes.append(f"trace starts mid-run: the recorded layout before its first entry was rebuilt "
                                  f"({self.seeded} live blocks, {fmt_bytes(sim.reserved)} reserved)")
            else:
                self.seeded = _seed_fresh(sim, start_default, self.live)
                self.notes.append(f"trace starts mid-run: the {self.seeded} blocks live before its first entry "
                                  "were allocated afresh under these settings (their original layout is not "
                                  "comparable)")
            if bad:
                self.notes.append(f"{bad} trace entries did not fit the final segments while rebuilding the "
                                  "start state")
        self.first_oom: int | None = None
        self.oom_req = self.oom_asz = self.res_oom = self.alloc_oom = None
        self.stopped: int | None = None
        self.fits_recorded: bool | None = None
        self.orphans = 0
        self.replayed = 0
        self.done = False
        self.has_completed = prep.has_completed

    def step(self, i: int, k: int, addr: int, size: int, stream: int) -> None:
        """Replay one entry (``_Prepared.steps``); sets ``done`` when the replay stops."""
        sim = self.sim
        sim.index = i
        self.replayed += 1
        live = self.live
        if k == 0:                                   # alloc
            prev = live.pop(addr, None)
            if prev is not None:                     # its free was not recorded (skip_actions): free it now
                sim.complete_free(prev)
            b = sim.malloc(size, stream)
            if b is None:
                self._oom(i, size)
                self.stopped = i
                self.done = True
                return
            live[addr] = b
        elif k == 1:                                 # free_requested
            b = live.get(addr)
            if b is None:
                self.orphans += 1
                return
            if b.allocated:
                sim.request_free(b)
            if not self.has_completed:
                live.pop(addr, None)
                sim.complete_free(b)
        elif k == 2:                                 # free_completed
            b = live.pop(addr, None)
            if b is None:
                self.orphans += 1
                return
            sim.complete_free(b)
        else:                                        # oom: the recorded failed request (already rounded)
            b = sim.malloc(size, stream)
            if b is None:
                if self.first_oom is None:
                    self._oom(i, size)
                self.fits_recorded = False
                return                               # the program survived it (caught, or unwound): keep going
            self.fits_recorded = True
            self.stopped = i
            self.notes.append(f"the request that failed at entry {i} fits here; what follows in the trace is the "
                              "original program's reaction to the OOM, so the replay stops")
            self.done = True

    def _oom(self, i: int, size: int) -> None:
        st = self.st
        self.first_oom = i
        self.oom_req = st.round(size)
        self.oom_asz = st.alloc_size(self.oom_req)
        self.res_oom, self.alloc_oom = self.sim.reserved, self.sim.allocated

    def result(self, prep: _Prepared, recorded: AllocatorSettings, avail: float) -> ReplayResult:
        sim, st = self.sim, self.st
        notes = list(self.notes)
        if self.orphans:
            notes.append(f"{self.orphans} frees referred to allocations unknown to the replay and were ignored")
        # the trace's segment entries up to where this replay stopped
        stop = self.stopped
        expected = [(a, sz) for i, a, sz in prep.seg_events if stop is None or i < stop]
        matches, mismatch = _compare(expected, [(ev.action, ev.size) for ev in sim.events])
        if matches and self.fits_recorded and st == recorded:
            matches, mismatch = False, "the recorded OOM does not happen in the replay"
        fo = self.first_oom
        if matches and fo is not None and prep.trace[fo].action == "alloc" and st == recorded:
            matches, mismatch = False, f"the replay runs out of memory at entry {fo}, which the program survived"
        return ReplayResult(
            oom=fo is not None, oom_index=fo, oom_request=self.oom_req, oom_alloc_size=self.oom_asz,
            peak_reserved=sim.peak_reserved, peak_allocated=sim.peak_allocated, segments_allocated=sim.device_allocs,
            reserved_at_oom=self.res_oom, allocated_at_oom=self.alloc_oom, reserved_end=sim.reserved,
            allocated_end=sim.allocated, retries=sim.retries, events_replayed=self.replayed, stopped_at=stop,
            fits_at_recorded_oom=self.fits_recorded, segment_events=tuple(sim.events), matches_trace=matches,
            mismatch=mismatch, seeded=self.seeded, settings=st, cap=self.cap,
            device_bytes=None if avail == INF else int(avail), notes=tuple(notes))


def _avail(snap: Snapshot, device: int, device_bytes: int | float | None) -> float:
    if device_bytes is None:
        db = default_device_bytes(snap, device)
        return INF if db is None else db
    return device_bytes


def replay(snap: Snapshot, settings: AllocatorSettings | str | Mapping[str, Any] | None = None,
           cap: int | None = None, device_bytes: int | float | None = None, device: int = 0) -> ReplayResult:
    """Replay ``device``'s trace under ``settings`` (None: the recorded ones).

    ``cap`` is the memory-fraction cap in bytes (None: no cap — this function
    does not guess one; ``counterfactuals`` does).  ``device_bytes`` is the
    physical memory PyTorch could obtain; None infers it from the snapshot
    (``default_device_bytes``), ``float('inf')`` means unbounded."""
    return replay_many(snap, [(settings, cap)], device_bytes=device_bytes, device=device)[0]


def replay_many(snap: Snapshot, runs: Sequence[tuple[AllocatorSettings | str | Mapping[str, Any] | None, int | None]],
                device_bytes: int | float | None = None, device: int = 0) -> list[ReplayResult]:
    """Several replays — ``(settings, cap)`` each, as for ``replay`` — in one pass
    over the trace: every entry is read and filtered once and handed to each
    simulated allocator still running.  Same results as separate ``replay`` calls."""
    recorded = settings_of(snap)
    prep = _prepared(snap, device)
    avail = _avail(snap, device, device_bytes)
    specs = [(recorded if s is None else AllocatorSettings.coerce(s), c) for s, c in runs]
    # Runs that differ only in the cap (no GC) are one run until a cap test would differ.
    lead_of: dict[int, int] = {}
    same: dict[AllocatorSettings, list[int]] = {}
    for k, (st, c) in enumerate(specs):
        if c is not None and st.garbage_collection_threshold == 0.0:
            same.setdefault(st, []).append(k)
    for ks in same.values():
        ks = sorted(ks, key=lambda k: specs[k][1])        # type: ignore[arg-type, return-value]
        for k in ks[1:]:
            lead_of[k] = ks[0]
    leads = [k for k in range(len(specs)) if k not in lead_of]
    twins = {k: tuple(specs[j][1] for j, lead in lead_of.items() if lead == k) for k in leads}
    every = [_Run(snap, prep, recorded, specs[k][0], specs[k][1], avail, device, twins[k]) for k in leads]  # type: ignore[arg-type]
    compiled = allocsim.run_all(every, prep)          # the runs the compiled replay took, already done
    rest = [r for r, c in zip(every, compiled) if not c]
    rest_done: list[tuple[ReplayResult, bool]] | None = None
    jobs = _jobs(len(rest), len(prep.sel))
    if jobs > 1:
        rest_done = _in_processes(rest, prep, recorded, avail, jobs)
    if rest_done is None:
        if rest:                                      # (an empty pass would still walk every entry)
            _pass(rest, prep)
        rest_done = [(r.result(prep, recorded, avail), r.sim.diverged) for r in rest]
    it = iter(rest_done)
    done = [(r.result(prep, recorded, avail), r.sim.diverged) if c else next(it) for r, c in zip(every, compiled)]
    out: dict[int, ReplayResult] = {k: res for k, (res, _) in zip(leads, done)}
    diverged = {k for k, (_, d) in zip(leads, done) if d}
    redo = [k for k, lead in lead_of.items() if lead in diverged]
    for k, lead in lead_of.items():
        if lead not in diverged:
            out[k] = replace(out[lead], cap=specs[k][1])
    if redo:
        for k, res in zip(redo, replay_many(snap, [specs[k] for k in redo], device_bytes=avail, device=device)):
            out[k] = res
    return [out[k] for k in range(len(specs))]


PARALLEL_FROM_ENTRIES = 200_000     # below this a process costs more than it saves


def _jobs(runs: int, entries: int) -> int:
    """How many processes share the replays: one per core (OOMPOST_JOBS overrides),
    for long traces only, and only where ``fork`` shares the columns for free."""
    import multiprocessing
    import os
    import sys

    if runs < 2 or entries < PARALLEL_FROM_ENTRIES or not sys.platform.startswith("linux") \
            or "fork" not in multiprocessing.get_all_start_methods():
        return 1                        # fork after importing numpy is only safe where it is the norm
    try:
        want = int(os.environ.get("OOMPOST_JOBS", "0"))
    except ValueError:
        want = 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(runs, want if want > 0 else cores))


def _how(runs: int, entries: int) -> str:
    """How ``replay_many`` spread ``runs`` replays, for the timing note (short traces
    keep the wording they always had, so small reports stay diffable)."""
    if allocsim.available() and entries >= PARALLEL_FROM_ENTRIES:
        threads = min(runs, allocsim.cores())
        return "compiled" + (f", on {threads} threads" if threads > 1 else "")
    jobs = _jobs(runs, entries)
    return "sharing " + ("one pass" if jobs == 1 else f"{jobs} passes in {jobs} processes")


def _in_processes(every: list["_Run"], prep: _Prepared, recorded: AllocatorSettings, avail: float,
                  jobs: int) -> list[tuple[ReplayResult, bool]] | None:
    """The runs dealt round-robin to ``jobs`` groups; each group is one shared pass,
    in a forked child (the trace columns and the starting layouts are shared
    copy-on-write) except the last, which runs here.  None if a child fails:
    the caller then replays everything in this process."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    groups = [list(range(g, len(every), jobs)) for g in range(jobs)]
    children = []
    for g in groups[:-1]:
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=([every[i] for i in g], prep, recorded, avail, send), daemon=True)
        p.start()
        send.close()
        children.append((g, p, recv))
    mine = [every[i] for i in groups[-1]]
    _pass(mine, prep)
    out: list[tuple[ReplayResult, bool] | None] = [None] * len(every)
    for i, r in zip(groups[-1], mine):
        out[i] = (r.result(prep, recorded, avail), r.sim.diverged)
    ok = True
    for g, p, recv in children:
        try:
            res = recv.recv()       # our own child's results (ReplayResult records), never user data
        except (EOFError, OSError):
            res = None
        p.join()
        if not isinstance(res, list) or len(res) != len(g):
            ok = False
            continue
        for i, r in zip(g, res):
            out[i] = r
    return out if ok else None  # type: ignore[return-value]


def _child(runs: list["_Run"], prep: _Prepared, recorded: AllocatorSettings, avail: float, send) -> None:  # type: ignore[no-untyped-def]
    try:
        _pass(runs, prep)
        send.send([(r.result(prep, recorded, avail), r.sim.diverged) for r in runs])
    finally:
        send.close()


def _pass(every: list["_Run"], prep: _Prepared) -> None:
    """One pass over the prepared entries, each handed to every run still going."""
    active = list(every)
    if len(active) == 1:
        r = active[0]
        step = r.step
        for i, k, addr, size, stream in prep.steps():
            step(i, k, addr, size, stream)
            if r.done:
                break
    else:
        for i, k, addr, size, stream in prep.steps():
            stopped = False
            for r in active:
                r.step(i, k, addr, size, stream)
                stopped |= r.done
            if stopped:
                active = [r for r in active if not r.done]
                if not active:
                    break


def _seed_fresh(sim: CachingAllocator, segments: list[Segment], live: dict[int, Block]) -> int:
    n = 0
    blocks = sorted(((b, s.stream) for s in segments for b in s.blocks if b.state != INACTIVE),
                    key=lambda x: x[0].address)
    for b, stream in blocks:
        nb = sim.malloc(b.requested_size or b.size, stream)
        if nb is None:
            continue
        if b.state == PENDING:
            sim.request_free(nb)
        live[b.address] = nb
        n += 1
    return n


def _compare(expected: list[tuple[str, int]], got: list[tuple[str, int]]) -> tuple[bool, str]:
    if expected == got:
        return True, ""
    for k, (x, y) in enumerate(zip(expected, got)):
        if x != y:
            return False, (f"segment event {k}: trace has {x[0]} {fmt_bytes(x[1])}, "
                           f"replay did {y[0]} {fmt_bytes(y[1])}")
    if len(expected) > len(got):
        x = expected[len(got)]
        return False, f"the trace has {len(expected)} segment events, the replay {len(got)} (next: {x[0]} {fmt_bytes(x[1])})"
    y = got[len(expected)]
    return False, f"the replay did {len(got)} segment events, the trace has {len(expected)} (extra: {y[0]} {fmt_bytes(y[1])})"


# ----------------------------------------------------------- counterfactuals

MAX_SPLIT_CANDIDATES_MB = (128, 200, 512)
GC_CANDIDATE = "garbage_collection_threshold:0.6,max_split_size_mb:128"


def _candidates(rec: AllocatorSettings, has_cap: bool) -> list[tuple[str, AllocatorSettings]]:
    """Recorded settings first, then the fragmentation remedies on a neutral base
    (the recorded rounding kept; the fragmentation options cleared)."""
    base = replace(rec, expandable_segments=False, max_split_size=None, garbage_collection_threshold=0.0)
    out: list[tuple[str, AllocatorSettings]] = [(rec.to_conf(), rec)]
    extra: list[str] = []
    if base != rec:
        extra.append("")
    extra.append("expandable_segments:True")
    extra += [f"max_split_size_mb:{mb}" for mb in MAX_SPLIT_CANDIDATES_MB]
    if has_cap:
        extra.append(GC_CANDIDATE)
    seen = {rec}
    for conf in extra:
        st = base.with_conf(conf) if conf else base
        if st in seen:
            continue
        seen.add(st)
        out.append((st.to_conf(), st))
    return out


_BISECT_STEPS = 6
REPORT_TIME_FROM_S = 5.0


def _min_fitting_cap(snap: Snapshot, st: AllocatorSettings, lo: int, hi: int, db: int | float | None,
                     dev: int, steps: int = _BISECT_STEPS) -> int:
    """Smallest cap in (lo, hi] under which the replay fits, to 1/64 of the bracket
    (assumes more headroom never hurts, which holds for these fixtures but is
    not guaranteed once GC is involved)."""
    for _ in range(steps):
        mid = (lo + hi) // 2
        if replay(snap, st, cap=mid, device_bytes=INF if db is None else db, device=dev).oom:
            lo = mid
        else:
            hi = mid
    return hi


def counterfactuals(snap: Snapshot, cap: int | None = None, device_bytes: int | float | None = None,
                    device: int | None = None) -> list[Counterfactual]:
    """Replay the trace under the recorded settings (validation) and under the
    usual fragmentation remedies.

    The cap is ``cap`` if given, else the capture hook's recorded limit, else —
    when the card had far more free memory than the failed request — the
    bracket inferred from the trace (``CapBounds``): each setting is then
    replayed at both ends and called a fit only if it fits at both."""
    dev = oom_device(snap) if device is None else device
    rec = settings_of(snap)
    metrics = oom_metrics(snap, device=dev)
    caps: list[int | None]
    cap_note = ""
    if cap is not None:
        caps = [cap]
    elif metrics.cap_bounds is not None and metrics.cap_bounds.exact is not None:
        caps = [metrics.cap_bounds.exact]
    elif metrics.cap_bounds is not None and metrics.cap_bounds.high is not None:
        lo, hi = metrics.cap_bounds.low, metrics.cap_bounds.high - 1
        caps = [lo, hi] if hi > lo else [lo]
        cap_note = f"cap unknown, inferred in [{fmt_bytes(lo)}, {fmt_bytes(hi + 1)})"
    else:
        caps = [None]
    db = default_device_bytes(snap, dev) if device_bytes is None else device_bytes
    t0 = time.perf_counter()
    cands = _candidates(rec, caps[0] is not None)
    results = replay_many(snap, [(st, c) for _, st in cands for c in caps],
                          device_bytes=INF if db is None else db, device=dev)
    out: list[Counterfactual] = []
    for k, (conf, st) in enumerate(cands):
        runs = results[k * len(caps):(k + 1) * len(caps)]
        r0 = runs[0]
        ooms = [r.oom for r in runs]
        oom = any(ooms)
        baseline = st == rec
        parts: list[str] = []
        if baseline:
            parts.append("as recorded: " + ("the replay reproduces the trace's segment events"
                                            + (" and the OOM" if r0.oom else "")
                                            if r0.matches_trace else f"replay differs from the trace ({r0.mismatch})"))
        if oom:
            r = next(r for r in runs if r.oom)
            if r.oom_request is not None:
                parts.append(f"OOM at trace entry {r.oom_index} ({fmt_bytes(r.oom_request)} request, "
                             f"{fmt_bytes(r.reserved_at_oom)} reserved, {fmt_bytes(r.allocated_at_oom)} allocated)")
            if len(runs) > 1 and not all(ooms):
                need = _min_fitting_cap(snap, st, caps[0], caps[-1], db, dev)
                parts.append(f"fits only if the cap was at least ~{fmt_bytes(need)}")
        else:
            parts.append(f"replays without failing: peak reserved {fmt_bytes(r0.peak_reserved)}")
        if cap_note:
            parts.append(cap_note)
        peak = max(r.peak_reserved for r in runs)
        out.append(Counterfactual(setting=conf, oom=oom, peak_reserved_bytes=peak, note="; ".join(parts),
                                  baseline=baseline, oom_index=r0.oom_index if r0.oom else None,
                                  peak_allocated_bytes=max(r.peak_allocated for r in runs), cap_bytes=caps[0],
                                  matches_trace=r0.matches_trace if baseline else None))
    elapsed = time.perf_counter() - t0
    n = len(results) + sum(_BISECT_STEPS for c in out if c.oom and "fits only if" in c.note)
    timing = (f"{n} allocator replays of {len(device_trace(snap, dev)):,} trace entries "
              f"({len(results)} {_how(len(results), len(_prepared(snap, dev).sel))})")
    if elapsed >= REPORT_TIME_FROM_S:   # whole seconds, and only when it matters: reports of small inputs stay diffable
        timing += f" took {elapsed:.0f} s"
    if out:
        out[0] = replace(out[0], note=f"{out[0].note}; {timing}" if out[0].note else timing, elapsed_s=elapsed)
    return out

