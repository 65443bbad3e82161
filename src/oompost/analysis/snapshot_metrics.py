"""What a memory snapshot says about an OOM: pure functions over ``Snapshot``.

The numbers follow reference/pytorch.md §5.2: the request R, the free bytes
inside reserved segments (F_total, in how many holes), the largest hole that
the request could have used (F_max: same pool and stream), and the memory the
process could still get (the card's free bytes, or a memory-fraction cap).

A snapshot taken *after* the exception unwound shows blocks that were freed on
the way out; the trace tells which.  ``state_after`` undoes trace entries from
the end of the trace back to any index, starting from the final segments, so
metrics describe the allocator at the moment of the ``oom`` entry.  The same
machinery rebuilds the live set at the start of a truncated trace for the
replay (allocator.md §8.1).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..model import NO_TIME, Block, Frame, Segment, Snapshot, Trace, TraceEvent
from ..units import fmt_bytes
from . import allocsim
from .allocator_rules import (ALLOCATED, INACTIVE, KMIN_BLOCK, KSMALL_BUFFER, KSMALL_SIZE, PENDING, AllocatorSettings,
                              should_split)

_SEGMENT_ACTIONS = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
_EMPTY = Trace.from_events(())


# ------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class PoolBreakdown:
    """One (pool, stream, private-pool id) slice of the reserved memory."""

    pool: str                      # "small" | "large"
    stream: int
    pool_id: tuple[int, int]
    segments: int
    reserved: int
    allocated: int
    active: int
    free: int
    holes: int
    largest_free: int


@dataclass(frozen=True, slots=True)
class CapBounds:
    """The memory-fraction cap in force, exact or bracketed as [low, high)."""

    low: int
    high: int | None               # exclusive; None when unbounded above
    exact: int | None
    source: str                    # "argument" | "oompost_meta" | "allocator_settings" | "inferred"
    note: str


@dataclass(frozen=True, slots=True)
class SnapshotMetrics:
    device: int
    request_bytes: int | None          # R: the oom entry's size (rounded request), else the argument
    request_alloc_size: int | None     # the segment it needed: "Tried to allocate"
    request_pool: str | None           # "small" | "large"
    request_stream: int | None
    free_total: int                    # F_total: inactive bytes on the device
    holes: int                         # inactive blocks
    free_max: int                      # F_max: largest inactive block, same pool and stream, default pool
    free_max_any: int                  # largest inactive block anywhere on the device
    free_cuda: int | None              # device_free of the oom entry (cudaMemGetInfo after the flush)
    reserved: int
    allocated: int
    active: int                        # allocated + pending free
    requested: int                     # sum of requested_size over active blocks
    internal_waste: int                # size − requested over active blocks (rounding, unsplit slack)
    private_pool_bytes: int            # reserved in CUDA-graph / MemPool private pools
    pools: tuple[PoolBreakdown, ...]
    captured_at: str                   # "oom_observer" | "after_exception" | "no_oom"
    oom: TraceEvent | None
    oom_index: int | None
    trace_truncated: bool
    expandable: bool
    cap_bounds: CapBounds | None
    headroom_bytes: int | None         # what a new segment could still take: cap − reserved, else free_cuda
    fragmentation_suspected: bool      # fits in free + headroom, but no hole and no new segment fits
    state_source: str                  # "segments" | "reconstructed" (state rebuilt at the oom entry)
    peak_reserved_in_trace: int | None
    segments: int
    notes: tuple[str, ...] = ()

    @property
    def reserved_unallocated(self) -> int:
        """What the OOM message calls "reserved by PyTorch but unallocated" (default pools)."""
        return self.reserved - self.allocated


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    index: int                     # trace index
    time_us: int | None
    allocated: int
    reserved: int


@dataclass(frozen=True, slots=True)
class StackGroup:
    frame_label: str               # "repro/lab.py:190 in <module>"
    bytes: int
    count: int
    sample_frames: tuple[Frame, ...]   # filtered (memory_viz rules), innermost first, of the largest block


@dataclass(frozen=True, slots=True)
class BlockView:
    offset: int                    # from the segment start
    size: int
    state: str
    requested_size: int


@dataclass(frozen=True, slots=True)
class SegmentView:
    address: int
    total_size: int
    stream: int
    segment_type: str
    pool_id: tuple[int, int]
    is_expandable: bool
    blocks: tuple[BlockView, ...]


@dataclass(frozen=True, slots=True)
class TraceStart:
    """How the trace relates to an empty allocator."""

    truncated: bool                # the trace does not start at an empty allocator
    orphan_frees: int              # frees whose alloc is not in the trace
    preexisting_live: int          # live blocks at the end that the trace never allocated
    reserved_at_start: int
    allocated_at_start: int


# ------------------------------------------------------------------ memo
#
# The metrics, the counterfactual replays, the top stacks and the segment map
# all need the same few facts about one snapshot: the state at the OOM and at
# the trace start (each a full backwards pass over the trace), whether the
# trace starts mid-run (a forward pass), the settings.  They are pure functions
# of the (immutable) snapshot, so each is computed once per snapshot and kept
# here.  Only the most recent snapshot is remembered (``Snapshot`` has no
# room for a cache of its own); ``forget`` drops it.

_MEMO: dict[int, tuple[Snapshot, dict]] = {}


def memo(snap: Snapshot) -> dict:
    """The per-snapshot cache of derived facts (keys are the caller's)."""
    ent = _MEMO.get(id(snap))
    if ent is not None and ent[0] is snap:
        return ent[1]
    _MEMO.clear()
    d: dict = {}
    _MEMO[id(snap)] = (snap, d)
    return d


def forget(snap: Snapshot | None = None) -> None:
    """Drop the cache (of ``snap`` only, when given) so the snapshot can be freed."""
    if snap is None:
        _MEMO.clear()
    else:
        _MEMO.pop(id(snap), None)


def _cached(snap: Snapshot, key: tuple, make):  # type: ignore[no-untyped-def]
    m = memo(snap)
    try:
        return m[key]
    except KeyError:
        v = m[key] = make()
        return v


# ------------------------------------------------------------------ helpers


def device_trace(snap: Snapshot, device: int) -> Trace:
    """One device's trace as columns (a ``Trace``; tuples of ``TraceEvent`` built by
    hand are converted once per snapshot)."""
    if not 0 <= device < len(snap.traces):
        return _EMPTY
    t = snap.traces[device]
    if isinstance(t, Trace):
        return t
    return _cached(snap, ("columns", device), lambda: Trace.from_events(t))


def as_trace(trace: Sequence[TraceEvent]) -> Trace:
    return trace if isinstance(trace, Trace) else Trace.from_events(trace)


def _has(trace: Trace, action: str, start: int = 0, stop: int | None = None) -> bool:
    """Whether ``trace[start:stop]`` holds an entry with ``action``."""
    c = trace.code_of(action)
    return c >= 0 and bool(np.any(trace.action[start:stop] == c))


def has_oom(snap: Snapshot) -> bool:
    """Whether any device's trace records an OOM."""
    return any(_has(device_trace(snap, d), "oom") for d in range(len(snap.traces)))


def device_segments(snap: Snapshot, device: int) -> list[Segment]:
    return [s for s in snap.segments if s.device == device]


def oom_index(trace: Sequence[TraceEvent]) -> int | None:
    """Index of the last ``oom`` entry: the failure that ended the run."""
    t = as_trace(trace)
    c = t.code_of("oom")
    if c < 0:
        return None
    hits = np.flatnonzero(t.action == c)
    return int(hits[-1]) if len(hits) else None


def oom_device(snap: Snapshot) -> int:
    """The device whose trace holds an OOM (else the first device with segments, else 0)."""
    return _cached(snap, ("oom_device",), lambda: _oom_device(snap))


def _oom_device(snap: Snapshot) -> int:
    for d in range(len(snap.traces)):
        if _has(device_trace(snap, d), "oom"):
            return d
    return snap.segments[0].device if snap.segments else 0


def captured_at(snap: Snapshot, device: int | None = None) -> str:
    """"oom_observer": an oom entry with no ``snapshot`` entry after it (taken inside the
    OOM observer); "after_exception": a ``snapshot`` entry follows it; "no_oom" otherwise."""
    dev = oom_device(snap) if device is None else device
    trace = device_trace(snap, dev)
    i = oom_index(trace)
    if i is None:
        if not any(snap.traces) and snap.meta.get("reason") == "oom":
            return "oom_observer"
        return "no_oom"
    if _has(trace, "snapshot", i + 1):
        return "after_exception"
    return "oom_observer"


def settings_of(snap: Snapshot) -> AllocatorSettings:
    return _cached(snap, ("settings",), lambda: _settings_of(snap))


def _settings_of(snap: Snapshot) -> AllocatorSettings:
    s = AllocatorSettings.from_snapshot(snap.allocator_settings)
    if not snap.allocator_settings and any(seg.is_expandable for seg in snap.segments):
        s = s.with_conf("expandable_segments:True")
    return s


_OMIT_FUNCTIONS = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
                   "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_")
_OMIT_FILENAMES = ("core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c", "Objects/call.c",
                   "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h")


def frame_filter(f: Frame) -> bool:
    """``_memory_viz._frame_filter``: drop unwinder, interpreter and dispatcher frames."""
    name, filename = f.name, f.filename
    return not (any(o in name for o in _OMIT_FUNCTIONS) or any(o in filename for o in _OMIT_FILENAMES))


def _is_torch_file(filename: str) -> bool:
    fn = filename.replace("\\", "/")
    return "site-packages/torch/" in fn or "dist-packages/torch/" in fn or fn.startswith("torch/")


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The first frame (innermost first) that is user code: a Python frame (line > 0)
    outside torch and not dropped by the memory_viz filter."""
    for f in frames:
        if f.line > 0 and not _is_torch_file(f.filename) and frame_filter(f):
            return f
    return None


def frame_label(f: Frame | None) -> str:
    return "<no stack recorded>" if f is None else f"{f.filename}:{f.line} in {f.name}"


_BACKWARD_NODE = re.compile(r"autograd::generated::(\w+Backward\d*)")


def stack_label(frames: Sequence[Frame]) -> str:
    """A group label for an allocation stack: its user frame, else what the C++
    part says (allocations on the autograd thread have no Python frames)."""
    uf = user_frame(frames)
    if uf is not None:
        return frame_label(uf)
    if not frames:
        return "<no stack recorded>"
    for f in frames:
        m = _BACKWARD_NODE.search(f.name)
        if m:
            return f"<autograd backward: {m.group(1)}>"
    if any("autograd::Engine" in f.name for f in frames):
        return "<autograd backward>"
    py = [f for f in frames if f.line > 0]
    if py:
        return f"<torch: {frame_label(py[-1])}>"
    return "<no Python frame>"


# ------------------------------------------------------ state reconstruction


class _MBlock:
    __slots__ = ("address", "size", "requested", "state", "frames")

    def __init__(self, address: int, size: int, requested: int, state: str, frames: tuple[Frame, ...]) -> None:
        self.address = address
        self.size = size
        self.requested = requested
        self.state = state
        self.frames = frames


class _MSeg:
    __slots__ = ("address", "stream", "small", "expandable", "pool_id", "blocks")

    def __init__(self, address: int, stream: int, small: bool, expandable: bool, pool_id: tuple[int, int],
                 blocks: list[_MBlock]) -> None:
        self.address = address
        self.stream = stream
        self.small = small
        self.expandable = expandable
        self.pool_id = pool_id
        self.blocks = blocks

    @property
    def end(self) -> int:
        b = self.blocks[-1]
        return b.address + b.size

    def index_of(self, addr: int) -> int:
        """Index of the block containing addr (blocks are contiguous and sorted)."""
        return bisect.bisect_right(self.blocks, addr, key=_addr) - 1


def _addr(b: _MBlock | _MSeg) -> int:
    return b.address


class _Layout:
    """Mutable copy of one device's segments, for undoing trace entries."""

    def __init__(self, segments: Sequence[Segment], settings: AllocatorSettings) -> None:
        self.settings = settings
        self.segs: list[_MSeg] = []
        self.inconsistent = 0
        for s in sorted(segments, key=lambda s: s.address):
            blocks = [_MBlock(b.address, b.size, b.requested_size, b.state, b.frames) for b in s.blocks]
            if not blocks:
                blocks = [_MBlock(s.address, s.total_size, 0, INACTIVE, ())]
            self.segs.append(_MSeg(s.address, s.stream, s.segment_type == "small", s.is_expandable,
                                   s.pool_id, blocks))

    # ---- lookup
    def seg_index(self, addr: int) -> int | None:
        i = bisect.bisect_right(self.segs, addr, key=_addr) - 1
        if i >= 0 and addr < self.segs[i].end:
            return i
        return None

    def block_at(self, addr: int) -> tuple[_MSeg, int] | None:
        """The segment holding ``addr`` and the index of its block there."""
        si = self.seg_index(addr)
        if si is None:
            return None
        seg = self.segs[si]
        return seg, seg.index_of(addr)

    # ---- block state changes
    def make_free(self, addr: int) -> None:
        found = self.block_at(addr)
        if found is None:
            self.inconsistent += 1
            return
        seg, bi = found
        b = seg.blocks[bi]
        if b.address != addr or b.state == INACTIVE:
            self.inconsistent += 1
            return
        b.state, b.requested, b.frames = INACTIVE, 0, ()
        self._merge_around(seg, bi)

    def _merge_around(self, seg: _MSeg, bi: int) -> None:
        blocks = seg.blocks
        if bi + 1 < len(blocks) and blocks[bi + 1].state == INACTIVE and blocks[bi].state == INACTIVE:
            blocks[bi].size += blocks[bi + 1].size
            del blocks[bi + 1]
        if bi > 0 and blocks[bi - 1].state == INACTIVE and blocks[bi].state == INACTIVE:
            blocks[bi - 1].size += blocks[bi].size
            del blocks[bi]

    def set_state(self, addr: int, state: str) -> bool:
        found = self.block_at(addr)
        if found is None:
            return False
        seg, bi = found
        b = seg.blocks[bi]
        if b.address == addr and b.state != INACTIVE:
            b.state = state
            return True
        return False

    def carve(self, addr: int, requested: int, state: str, frames: tuple[Frame, ...]) -> None:
        """Mark [addr, addr + rounded size) of a free block as live again."""
        found = self.block_at(addr)
        if found is None:
            self.inconsistent += 1
            return
        seg, bi = found
        b = seg.blocks[bi]
        if b.state != INACTIVE:
            if b.address == addr:            # already live (e.g. free_requested undone first): just set state
                b.state = state
            else:
                self.inconsistent += 1
            return
        size = self.settings.round(requested)
        b_end = b.address + b.size
        end = min(addr + size, b_end)
        leftover = b_end - end
        # a leftover that could not exist as its own free block was part of this block (should_split)
        if leftover and not should_split(size, leftover, seg.small, seg.expandable, self.settings.max_split):
            end = b_end
        new: list[_MBlock] = []
        if addr > b.address:
            new.append(_MBlock(b.address, addr - b.address, 0, INACTIVE, ()))
        new.append(_MBlock(addr, end - addr, requested, state, frames))
        if end < b_end:
            new.append(_MBlock(end, b_end - end, 0, INACTIVE, ()))
        seg.blocks[bi:bi + 1] = new

    # ---- segment changes
    def remove_segment(self, addr: int) -> None:
        i = bisect.bisect_left(self.segs, addr, key=_addr)
        if i < len(self.segs) and self.segs[i].address == addr:
            if any(b.state != INACTIVE for b in self.segs[i].blocks):
                self.inconsistent += 1
            del self.segs[i]
        else:
            self.inconsistent += 1

    def add_segment(self, addr: int, size: int, stream: int, pool_id: tuple[int, int]) -> None:
        seg = _MSeg(addr, stream, size <= KSMALL_BUFFER, False, pool_id, [_MBlock(addr, size, 0, INACTIVE, ())])
        bisect.insort(self.segs, seg, key=_addr)

    def remove_range(self, addr: int, size: int) -> None:
        """Undo a segment_map: cut [addr, addr+size) out of an expandable range."""
        si = self.seg_index(addr)
        if si is None:
            self.inconsistent += 1
            return
        seg = self.segs[si]
        end = addr + size
        left: list[_MBlock] = []
        right: list[_MBlock] = []
        for b in seg.blocks:
            b_end = b.address + b.size
            if b_end <= addr:
                left.append(b)
            elif b.address >= end:
                right.append(b)
            else:
                if b.state != INACTIVE:
                    self.inconsistent += 1
                if b.address < addr:
                    left.append(_MBlock(b.address, addr - b.address, 0, INACTIVE, ()))
                if b_end > end:
                    right.append(_MBlock(end, b_end - end, 0, INACTIVE, ()))
        repl = [_MSeg(blocks[0].address, seg.stream, seg.small, True, seg.pool_id, blocks)
                for blocks in (left, right) if blocks]
        self.segs[si:si + 1] = repl

    def add_range(self, addr: int, size: int, stream: int, pool_id: tuple[int, int]) -> None:
        """Undo a segment_unmap: [addr, addr+size) is mapped (and free) again."""
        end = addr + size
        i = bisect.bisect_left(self.segs, addr, key=_addr)
        before = self.segs[i - 1] if i > 0 and self.segs[i - 1].expandable and self.segs[i - 1].end == addr \
            and self.segs[i - 1].stream == stream else None
        after = self.segs[i] if i < len(self.segs) and self.segs[i].expandable and self.segs[i].address == end \
            and self.segs[i].stream == stream else None
        if before is not None and after is not None and before.small != after.small:
            after = None
        ref = before or after
        small = ref.small if ref is not None else size % (20 << 20) != 0
        blk = _MBlock(addr, size, 0, INACTIVE, ())
        if before is not None:
            before.blocks.append(blk)
            self._merge_around(before, len(before.blocks) - 1)
            if after is not None:
                n = len(before.blocks)
                before.blocks.extend(after.blocks)
                self._merge_around(before, n - 1)
                del self.segs[i]
        elif after is not None:
            after.blocks.insert(0, blk)
            after.address = addr
            self._merge_around(after, 0)
        else:
            self.segs.insert(i, _MSeg(addr, stream, small, True, pool_id, [blk]))

    def freeze(self, device: int) -> tuple[Segment, ...]:
        out: list[Segment] = []
        for s in self.segs:
            blocks = tuple(Block(b.address, b.size, b.requested, b.state, b.frames) for b in s.blocks if b.size > 0)
            out.append(Segment(device=device, address=s.address, total_size=sum(b.size for b in blocks),
                               allocated_size=sum(b.size for b in blocks if b.state == ALLOCATED),
                               stream=s.stream, segment_type="small" if s.small else "large", pool_id=s.pool_id,
                               is_expandable=s.expandable, blocks=blocks))
        return tuple(out)


def _alloc_frames_for_frees(trace: Trace) -> dict[int, tuple[Frame, ...]]:
    """free index → frames of the alloc it pairs with (blocks show the alloc stack)."""
    A, RQ, CP = trace.code_of("alloc"), trace.code_of("free_requested"), trace.code_of("free_completed")
    sel = np.flatnonzero(np.isin(trace.action, [c for c in (A, RQ, CP) if c >= 0]))
    last: dict[int, int] = {}
    out: dict[int, tuple[Frame, ...]] = {}
    stacks = trace.stacks
    for i, a, addr, st in zip(sel.tolist(), trace.action[sel].tolist(), trace.addr[sel].tolist(),
                              trace.stack[sel].tolist()):
        if a == A:
            last[addr] = st
        else:
            f = last.get(addr)
            if f is not None:
                out[i] = stacks[f]
    return out


def state_after(snap: Snapshot, device: int, index: int,
                settings: AllocatorSettings | None = None) -> tuple[tuple[Segment, ...], int]:
    """The device's segments as they were just after trace entry ``index``
    (``-1``: before the first entry).  Returns (segments, entries that did not
    fit the layout) — a non-zero count means the reconstruction is approximate.
    Computed once per (device, index, settings) and snapshot."""
    st = settings or settings_of(snap)
    return _cached(snap, ("state_after", device, index, st), lambda: _state_after(snap, device, index, st))


def _state_after(snap: Snapshot, device: int, index: int,
                 settings: AllocatorSettings) -> tuple[tuple[Segment, ...], int]:
    trace = device_trace(snap, device)
    segs = device_segments(snap, device)
    if index >= len(trace) - 1:
        return tuple(segs), 0
    layout = _Layout(segs, settings)
    frames_of = _cached(snap, ("frames_of", device), lambda: _alloc_frames_for_frees(trace))
    codes = {trace.code_of(a): a for a in ("alloc", "free_completed", "free_requested", "segment_alloc",
                                           "segment_free", "segment_map", "segment_unmap")}
    codes.pop(-1, None)
    sel = index + 1 + np.flatnonzero(np.isin(trace.action[index + 1:], list(codes)))
    sel = sel[::-1]                 # undo from the end back to index
    extra = trace.extra
    # free_completed undone first makes a block pending; its free_requested then makes it allocated.
    has_requested: set[int] = set()
    for i, c, addr, size, stream in zip(sel.tolist(), trace.action[sel].tolist(), trace.addr[sel].tolist(),
                                        trace.size[sel].tolist(), trace.stream[sel].tolist()):
        a = codes[c]
        if a == "alloc":
            layout.make_free(addr)
        elif a == "free_completed":
            layout.carve(addr, size, PENDING, frames_of.get(i, ()))
        elif a == "free_requested":
            if not layout.set_state(addr, ALLOCATED):
                layout.carve(addr, size, ALLOCATED, frames_of.get(i, ()))
            has_requested.add(addr)
        else:
            pid = (extra[i][1] if i in extra else None) or (0, 0)
            if a == "segment_alloc":
                layout.remove_segment(addr)
            elif a == "segment_free":
                layout.add_segment(addr, size, stream, pid)
            elif a == "segment_map":
                layout.remove_range(addr, size)
            else:
                layout.add_range(addr, size, stream, pid)
    return layout.freeze(device), layout.inconsistent


def trace_start(snap: Snapshot, device: int, settings: AllocatorSettings | None = None) -> TraceStart:
    """Does the trace start at an empty allocator?  One forward pass, no reconstruction
    (once per device, settings and snapshot)."""
    st = settings or settings_of(snap)
    return _cached(snap, ("trace_start", device, st), lambda: _trace_start(snap, device, st))


def _rows(sel: np.ndarray, *cols: np.ndarray, index: bool = False, chunk: int = 1 << 16):  # type: ignore[no-untyped-def]
    """The columns at ``sel`` as tuples of Python ints (``sel``'s own index first if
    ``index``), a chunk at a time: whole-trace lists cost ~40 bytes per entry and
    column, hundreds of MB at the peak of a big snapshot's analysis."""
    for lo in range(0, len(sel), chunk):
        s = sel[lo:lo + chunk]
        lists = [c[s].tolist() for c in cols]
        yield from zip(s.tolist(), *lists) if index else zip(*lists)


def _trace_start(snap: Snapshot, device: int, s: AllocatorSettings) -> TraceStart:
    trace = device_trace(snap, device)
    segs = device_segments(snap, device)
    live: dict[int, int] = {}          # allocated in the trace, not yet free_requested: addr → rounded size
    pending: set[int] = set()          # free_requested, not yet free_completed
    orphan = 0
    alloc_delta = 0
    seg_delta = int(np.dot(_segment_signs(trace), trace.size)) if len(trace) else 0
    A, RQ, CP = trace.code_of("alloc"), trace.code_of("free_requested"), trace.code_of("free_completed")
    sel = np.flatnonzero(np.isin(trace.action, [c for c in (A, RQ, CP) if c >= 0]))
    rnd = s.rounder()
    # the same pass gives ``timeline`` its per-entry allocated deltas (kept in the memo
    # until it takes them): one walk of a big trace instead of two; compiled where built
    delta: np.ndarray | None
    fast = allocsim.alloc_deltas(trace, sel, (A, RQ, CP), s)
    if fast is not None:
        delta, alloc_delta, orphan, live_at_end, pending_at_end = fast
        live = dict.fromkeys(live_at_end, 0)      # (only membership is read below)
        pending = set(pending_at_end)
    else:
        delta = np.zeros(len(trace), np.int64)
        for i, a, addr, size in _rows(sel, trace.action, trace.addr, trace.size, index=True):
            if a == A:
                sz = rnd(size)
                live[addr] = sz
                alloc_delta += sz
            elif a == RQ:
                sz = live.pop(addr, None)
                if sz is None:
                    orphan += 1
                    sz = rnd(size)
                alloc_delta -= sz
                pending.add(addr)
                sz = -sz
            else:
                if addr in pending:
                    pending.discard(addr)
                    continue
                sz = live.pop(addr, None)
                if sz is None:
                    orphan += 1
                    sz = rnd(size)
                alloc_delta -= sz
                sz = -sz
            if delta is not None:
                try:
                    delta[i] = sz
                except OverflowError:       # a size no int64 holds: timeline makes its own pass
                    delta = None
    if delta is not None:
        memo(snap)[("alloc_deltas", device, s)] = delta
    final_reserved = sum(x.total_size for x in segs)
    final_alloc = sum(b.size for x in segs for b in x.blocks if b.state == ALLOCATED)
    pre = sum(1 for x in segs for b in x.blocks if b.state != INACTIVE and b.address not in live
              and b.address not in pending) if trace else 0
    reserved0 = max(0, final_reserved - seg_delta)
    allocated0 = max(0, final_alloc - alloc_delta)
    truncated = bool(trace) and (orphan > 0 or pre > 0 or reserved0 > 0)
    return TraceStart(truncated, orphan, pre, reserved0, allocated0)


# ------------------------------------------------------------------ metrics


def _cap_margin(alloc_size: int) -> int:
    return max(64 << 20, alloc_size // 10)


def _segment_signs(trace: Trace) -> np.ndarray:
    """+1 for segment_alloc/map, −1 for segment_free/unmap, 0 otherwise (int64 per entry)."""
    lut = np.zeros(256, np.int64)
    for a, d in _SEGMENT_ACTIONS.items():
        c = trace.code_of(a)
        if c >= 0:
            lut[c] = d
    return lut[trace.action]


def _reserved_series(trace: Trace, start: int) -> int:
    if not len(trace):
        return start
    cur = start + np.cumsum(_segment_signs(trace) * trace.size)
    return max(start, int(cur.max()))


def _cap_bounds(snap: Snapshot, limit_bytes: int | None, reserved: int, alloc_size: int | None,
                free_cuda: int | None, peak_reserved: int | None) -> CapBounds | None:
    if limit_bytes is not None:
        return CapBounds(limit_bytes, limit_bytes + 1, limit_bytes, "argument",
                         f"memory-fraction cap of {fmt_bytes(limit_bytes)} (given)")
    meta = snap.meta
    limit = meta.get("limit")
    total = meta.get("device_total")
    fraction = settings_of(snap).per_process_memory_fraction
    if fraction is not None and 0.0 < fraction < 1.0 and isinstance(total, int) and total > 0:
        cap = int(fraction * total)
        return CapBounds(cap, cap + 1, cap, "allocator_settings",
                         f"per_process_memory_fraction:{fraction:g} of {fmt_bytes(total)} = {fmt_bytes(cap)}")
    if isinstance(limit, int) and limit > 0:
        if isinstance(total, int) and total > 0:
            if limit < total:
                return CapBounds(limit, limit + 1, limit, "oompost_meta",
                                 f"memory-fraction cap of {fmt_bytes(limit)} recorded by the capture hook "
                                 f"(card: {fmt_bytes(total)})")
            return None
        if free_cuda is not None and limit < reserved + free_cuda:
            return CapBounds(limit, limit + 1, limit, "oompost_meta",
                             f"memory-fraction cap of {fmt_bytes(limit)} recorded by the capture hook")
        if free_cuda is not None:
            return None
    if alloc_size is None or free_cuda is None:
        return None
    if free_cuda < alloc_size + _cap_margin(alloc_size):
        return None
    low = max(peak_reserved or 0, reserved)
    high = reserved + alloc_size
    return CapBounds(low, high, None, "inferred",
                     f"the card still had {fmt_bytes(free_cuda)} free, far more than the "
                     f"{fmt_bytes(alloc_size)} segment the request needed, so a per-process memory-fraction cap "
                     f"refused it: the cap was at least the peak reserved {fmt_bytes(low)} and below "
                     f"reserved + request = {fmt_bytes(high)}")


def oom_metrics(snap: Snapshot, request_bytes: int | None = None, limit_bytes: int | None = None,
                device: int | None = None) -> SnapshotMetrics:
    """The §5.2 numbers at the OOM (or at the end of the snapshot when it holds none).

    ``request_bytes`` stands in for R when the trace has no ``oom`` entry (e.g.
    "Tried to allocate" from the log); ``limit_bytes`` is the ``allowed`` cap
    from the OOM message when known.  Computed once per arguments and snapshot."""
    dev = oom_device(snap) if device is None else device
    return _cached(snap, ("oom_metrics", request_bytes, limit_bytes, dev),
                   lambda: _oom_metrics(snap, request_bytes, limit_bytes, dev))


def _oom_metrics(snap: Snapshot, request_bytes: int | None, limit_bytes: int | None, dev: int) -> SnapshotMetrics:
    settings = settings_of(snap)
    trace = device_trace(snap, dev)
    oi = oom_index(trace)
    oom = trace[oi] if oi is not None else None
    notes: list[str] = []
    if oi is not None and oi < len(trace) - 1 and bool(np.any(trace.action[oi + 1:] != trace.code_of("snapshot"))):
        segs, bad = state_after(snap, dev, oi, settings)
        source = "reconstructed"
        if bad:
            notes.append(f"{bad} trace entries after the OOM did not match the final segments; "
                         "the state at the OOM is approximate")
    else:
        segs, source = tuple(device_segments(snap, dev)), "segments"

    R = oom.size if oom is not None else request_bytes
    rounded = settings.round(R) if R is not None else None
    pool = None if rounded is None else ("small" if rounded <= KSMALL_SIZE else "large")
    alloc_size = settings.alloc_size(rounded) if rounded is not None else None
    stream = oom.stream if oom is not None else (0 if R is not None else None)

    reserved = allocated = active = requested = waste = free_total = holes = 0
    free_max = free_max_any = private = 0
    groups: dict[tuple[str, int, tuple[int, int]], list[int]] = {}
    for s in segs:
        reserved += s.total_size
        if s.pool_id != (0, 0):
            private += s.total_size
        key = (s.segment_type, s.stream, s.pool_id)
        g = groups.setdefault(key, [0, 0, 0, 0, 0, 0, 0])   # segments reserved allocated active free holes largest
        g[0] += 1
        g[1] += s.total_size
        for b in s.blocks:
            if b.state == INACTIVE:
                free_total += b.size
                holes += 1
                g[4] += b.size
                g[5] += 1
                g[6] = max(g[6], b.size)
                free_max_any = max(free_max_any, b.size)
                if s.segment_type == pool and s.stream == stream and s.pool_id == (0, 0):
                    free_max = max(free_max, b.size)
            else:
                active += b.size
                g[3] += b.size
                requested += b.requested_size
                waste += max(0, b.size - b.requested_size)
                if b.state == ALLOCATED:
                    allocated += b.size
                    g[2] += b.size
    pools = tuple(PoolBreakdown(k[0], k[1], k[2], *v) for k, v in sorted(groups.items()))

    ts = trace_start(snap, dev, settings)
    peak = _reserved_series(trace[: (oi + 1) if oi is not None else len(trace)], ts.reserved_at_start) \
        if trace else None
    free_cuda = oom.device_free if oom is not None else None
    cap = _cap_bounds(snap, limit_bytes, reserved, alloc_size if oom is not None else None, free_cuda, peak) \
        if (oom is not None or limit_bytes is not None) else None
    if cap is not None and cap.source == "inferred":
        notes.append(cap.note)
    headroom: int | None
    if cap is not None and cap.exact is not None:
        headroom = max(0, cap.exact - reserved)
    elif cap is not None:
        headroom = max(0, cap.low - reserved)
    else:
        headroom = free_cuda
    frag = False
    if R is not None and alloc_size is not None:
        need = rounded or R
        usable = free_total + (headroom or 0)
        frag = usable >= need and free_max < need and (headroom is None or headroom < alloc_size)
    if ts.truncated:
        notes.append(f"trace starts mid-run ({ts.orphan_frees} frees without their alloc, "
                     f"{ts.preexisting_live} blocks allocated before it)")
    return SnapshotMetrics(
        device=dev, request_bytes=R, request_alloc_size=alloc_size, request_pool=pool, request_stream=stream,
        free_total=free_total, holes=holes, free_max=free_max, free_max_any=free_max_any, free_cuda=free_cuda,
        reserved=reserved, allocated=allocated, active=active, requested=requested, internal_waste=waste,
        private_pool_bytes=private, pools=pools, captured_at=captured_at(snap, dev), oom=oom, oom_index=oi,
        trace_truncated=ts.truncated, expandable=settings.expandable_segments or any(s.is_expandable for s in segs),
        cap_bounds=cap, headroom_bytes=headroom, fragmentation_suspected=frag, state_source=source,
        peak_reserved_in_trace=peak, segments=len(segs), notes=tuple(notes))


# ----------------------------------------------------------------- timeline


def _alloc_deltas(trace: Trace, settings: AllocatorSettings) -> np.ndarray:
    """Allocated bytes gained (+rounded size at alloc) or lost (−its size at
    free_requested, or at free_completed when no request preceded it) at each entry."""
    n = len(trace)
    delta = np.zeros(n, np.int64)
    AL, RQ, CP = trace.code_of("alloc"), trace.code_of("free_requested"), trace.code_of("free_completed")
    sel = np.flatnonzero(np.isin(trace.action, [c for c in (AL, RQ, CP) if c >= 0]))
    sizes: dict[int, int] = {}
    pending: set[int] = set()
    rnd = settings.rounder()
    for i, a, addr, size in _rows(sel, trace.action, trace.addr, trace.size, index=True):
        if a == AL:
            sz = rnd(size)
            sizes[addr] = sz
            delta[i] = sz
        elif a == RQ:
            sz = sizes.pop(addr, None)
            delta[i] = -(rnd(size) if sz is None else sz)
            pending.add(addr)
        elif addr in pending:
            pending.discard(addr)
        else:
            sz = sizes.pop(addr, None)
            delta[i] = -(rnd(size) if sz is None else sz)
    return delta


def alloc_deltas(snap: Snapshot, device: int, settings: AllocatorSettings) -> np.ndarray:
    """Allocated bytes gained or lost at each trace entry (``_alloc_deltas``): the ones ``trace_start``'s pass
    left in the memo when it could, else a pass of their own, kept there until ``timeline`` takes them."""
    key = ("alloc_deltas", device, settings)
    cache = memo(snap)
    delta = cache.get(key)
    if delta is None:
        delta = cache[key] = _alloc_deltas(device_trace(snap, device), settings)
    return delta


def timeline(snap: Snapshot, device: int = 0, max_points: int = 600) -> list[TimelinePoint]:
    """Allocated and reserved bytes after every trace entry, downsampled to at
    most ``max_points`` while keeping each bucket's peaks, the global peaks and
    the OOM entry (so the chart never hides the spike that mattered).

    Allocated counts rounded request sizes (the trace carries requested bytes;
    unsplit slack is invisible to it) and drops at ``free_requested`` like
    ``allocated_bytes``; reserved follows the ``segment_*`` entries.  Both start
    from the state before the first entry, inferred from the final segments."""
    trace = device_trace(snap, device)
    if not trace:
        return []
    settings = settings_of(snap)
    ts = trace_start(snap, device, settings)
    n = len(trace)
    # allocated: +rounded size at alloc, −(its size) at free_requested, or at free_completed
    # when no request preceded it; reserved: the segment events
    delta = alloc_deltas(snap, device, settings)
    memo(snap).pop(("alloc_deltas", device, settings), None)           # the chart is their last reader
    A = np.maximum(ts.allocated_at_start + np.cumsum(delta), 0)
    Rv = np.maximum(ts.reserved_at_start + np.cumsum(_segment_signs(trace) * trace.size), 0)
    keep: set[int] = {0, n - 1, int(np.argmax(A)), int(np.argmax(Rv))}
    oi = oom_index(trace)
    if oi is not None:
        keep.add(oi)
    if n <= max_points:
        idx = list(range(n))
    else:
        buckets = max(1, (max_points - len(keep)) // 3)
        step = n / buckets
        for b in range(buckets):
            lo, hi = int(b * step), min(n, int((b + 1) * step))
            if lo >= hi:
                continue
            keep.add(lo)
            keep.add(lo + int(np.argmax(A[lo:hi])))
            keep.add(lo + int(np.argmax(Rv[lo:hi])))
        idx = sorted(keep)[:max_points] if len(keep) > max_points else sorted(keep)
    times = trace.time_us
    return [TimelinePoint(i, None if times[i] == NO_TIME else int(times[i]), int(A[i]), int(Rv[i])) for i in idx]


# --------------------------------------------------------------- top stacks


def segments_at(snap: Snapshot, device: int, at: Literal["oom", "end"] | int) -> tuple[Segment, ...]:
    trace = device_trace(snap, device)
    if at == "end":
        return tuple(device_segments(snap, device))
    if at == "oom":
        i = oom_index(trace)
        if i is None:
            return tuple(device_segments(snap, device))
    else:
        i = int(at)
    return state_after(snap, device, i)[0]


def top_stacks(snap: Snapshot, n: int = 10, at: Literal["oom", "end"] | int = "oom",
               device: int | None = None) -> list[StackGroup]:
    """Live bytes at the OOM (or "end", or after trace index ``at``) grouped by
    the first user frame of each block's allocation stack, largest first."""
    dev = oom_device(snap) if device is None else device
    groups: dict[str, list] = {}
    for s in segments_at(snap, dev, at):
        for b in s.blocks:
            if b.state == INACTIVE:
                continue
            label = stack_label(b.frames)
            g = groups.get(label)
            if g is None:
                groups[label] = [b.size, 1, b.size, b.frames]
            else:
                g[0] += b.size
                g[1] += 1
                if b.size > g[2]:
                    g[2], g[3] = b.size, b.frames
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))[:n]
    return [StackGroup(label, g[0], g[1], tuple(f for f in g[3] if frame_filter(f))) for label, g in ranked]


# -------------------------------------------------------------- segment map


def segment_map(snap: Snapshot, device: int = 0, at: Literal["oom", "end"] | int = "oom") -> list[SegmentView]:
    """Segments with their blocks (offset, size, state) for drawing the holes,
    at the OOM by default (reconstructed when the snapshot came later)."""
    out: list[SegmentView] = []
    for s in segments_at(snap, device, at):
        out.append(SegmentView(s.address, s.total_size, s.stream, s.segment_type, s.pool_id, s.is_expandable,
                               tuple(BlockView(b.address - s.address, b.size, b.state, b.requested_size)
                                     for b in s.blocks)))
    return out


def live_blocks_at_oom(snap: Snapshot) -> list[Block]:
    """The blocks allocated (live) on the OOM's device at the moment of the OOM."""
    return [blk for seg in segments_at(snap, oom_device(snap), "oom") for blk in seg.blocks
            if blk.state == "active_allocated"]
