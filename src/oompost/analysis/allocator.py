"""The one model of PyTorch's CUDA caching allocator (``DeviceCachingAllocator``).

Used by the counterfactual replays of a snapshot's trace (``analysis.replay``)
and by the memory estimator's allocation program (``estimate.memory``), so a
rule fixed here is fixed for both.  It follows reference/allocator.md §1–5
rule for rule: ``round_size`` (with ``roundup_power2_divisions``), small and
large pools, best fit ordered by (stream, size, address) examining only the
first candidate, ``should_split``, ``max_split_size`` /
``max_non_split_rounding``, the malloc fallback chain (GC → new segment →
``release_available_cached_blocks`` → ``release_cached_blocks`` → OOM),
expandable segments with 2 MiB / 20 MiB pages, pending frees (a block is
reusable at ``free_completed``), and the cap test on the segment size.  The
sizing rules and the settings are ``allocator_rules``.

Not modelled (allocator.md §8.3): real cudaMalloc addresses (a bump pointer,
2 MiB aligned, keeps "later segments get higher addresses"), free-memory
callbacks (IPC), private pools beyond "fixed reserved bytes".

Stdlib only: free pools are sorted lists of ``(stream, size, ptr, block)``
tuples searched with ``bisect`` — ptr is unique, so comparisons never reach
the block object.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from ..model import Segment
from .allocator_rules import (ALLOCATED, INACTIVE, KMIN_BLOCK, KSMALL_BUFFER, KSMALL_SIZE, PENDING, AllocatorSettings,
                              ceil_to)

ADDR_ALIGN = 2 << 20


@dataclass(frozen=True, slots=True)
class SimSegmentEvent:
    """A segment-level decision of the simulated allocator (compare with the trace's)."""

    action: str                    # segment_alloc | segment_free | segment_map | segment_unmap
    addr: int                      # simulated address
    size: int
    offset: int | None             # from the expandable segment's base; None for cudaMalloc segments
    index: int                     # trace index being replayed when it happened


# ---------------------------------------------------------------- the model


class ExpandableSegment:
    __slots__ = ("base", "size", "page", "stream", "small")

    def __init__(self, base: int, size: int, page: int, stream: int, small: bool) -> None:
        self.base, self.size, self.page, self.stream, self.small = base, size, page, stream, small


class Block:
    __slots__ = ("ptr", "size", "stream", "small", "allocated", "pending", "prev", "next", "mapped", "seg",
                 "req", "gc_base", "tag")

    def __init__(self, ptr: int, size: int, stream: int, small: bool, seg: ExpandableSegment | None = None,
                 mapped: bool = True) -> None:
        self.ptr = ptr
        self.size = size
        self.stream = stream
        self.small = small
        self.allocated = False
        self.pending = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.mapped = mapped
        self.seg = seg
        self.req = 0
        self.gc_base = 0
        self.tag = ""                   # what the estimator's program allocated it for

    @property
    def free(self) -> bool:
        """Neither allocated nor waiting for its free to complete (reusable)."""
        return not self.allocated and not self.pending


class CachingAllocator:
    """One device's DeviceCachingAllocator, default pool."""

    def __init__(self, settings: AllocatorSettings, cap: int | None, avail: float, total: int,
                 next_addr: int) -> None:
        self.s = settings
        self.max_split = settings.max_split
        self.nsr = settings.max_non_split_rounding
        self.expandable = settings.expandable_segments
        self.cap = cap
        self.avail = avail
        self.total = total
        self.gc_on = cap is not None and settings.garbage_collection_threshold > 0.0
        self.free_pools: dict[bool, list[tuple]] = {True: [], False: []}      # (stream, size, ptr, blk)
        self.unmapped: dict[bool, list[tuple]] = {True: [], False: []}  # (stream, ptr, blk)
        self.gc_clock = {True: 0, False: 0}
        self.reserved = 0
        self.peak_reserved = 0
        self.allocated = 0
        self.peak_allocated = 0
        self.retries = 0
        self.device_allocs = 0
        self.next_addr = next_addr
        self.events: list[SimSegmentEvent] = []
        self.index = -1
        self.pending: dict[int, Block] = {}          # id(blk) → blk: free requested, not completed
        self.sizes: dict[int, tuple[int, int]] = {}  # request → (rounded, segment size): traces repeat sizes
        # Other caps this run stands for: the cap only matters through the test above, so
        # a run under a cap in twin_caps is this very run until that test would go the
        # other way (then ``diverged``).  Not for GC settings, whose threshold is a
        # fraction of the cap.
        self.twin_caps: tuple[int, ...] = ()
        self.diverged = False

    # ---- pools
    def _insert_free(self, b: Block) -> None:
        b.gc_base = self.gc_clock[b.small]
        bisect.insort(self.free_pools[b.small], (b.stream, b.size, b.ptr, b))

    def _remove_free(self, b: Block) -> None:
        lst = self.free_pools[b.small]
        i = bisect.bisect_left(lst, (b.stream, b.size, b.ptr))
        del lst[i]

    def _insert_unmapped(self, b: Block) -> None:
        bisect.insort(self.unmapped[b.small], (b.stream, b.ptr, b))

    def _remove_unmapped(self, b: Block) -> None:
        lst = self.unmapped[b.small]
        i = bisect.bisect_left(lst, (b.stream, b.ptr))
        del lst[i]

    def _new_address(self, size: int) -> int:
        a = self.next_addr
        self.next_addr = ceil_to(a + size, ADDR_ALIGN)
        return a

    def _emit(self, action: str, addr: int, size: int, seg: ExpandableSegment | None) -> None:
        self.events.append(SimSegmentEvent(action, addr, size, None if seg is None else addr - seg.base,
                                           self.index))

    def _grow(self, n: int) -> None:
        self.reserved += n
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved

    # ---- malloc
    def malloc(self, req: int, stream: int) -> Block | None:
        r = self.sizes.get(req)
        if r is None:
            n = self.s.round(req)
            r = self.sizes[req] = (n, self.s.alloc_size(n))
        n, asz = r
        small = n <= KSMALL_SIZE
        b = self._get_free_block(n, stream, small)
        if b is None:
            if self.gc_on:
                self._garbage_collect()
            b = self._alloc_block(n, asz, stream, small, False)
            if b is None and self._release_available(n, stream, small):
                b = self._alloc_block(n, asz, stream, small, False)
            if b is None:
                self._release_cached()
                b = self._alloc_block(n, asz, stream, small, True)
            if b is None:
                return None
        rem = b.size - n
        # should_split (allocator_rules), inlined: the hottest line of every replay
        if (rem >= KMIN_BLOCK) if (small or self.expandable) else (n < self.max_split and rem > KSMALL_SIZE):
            r = Block(b.ptr + n, rem, stream, small, b.seg)
            r.prev, r.next = b, b.next
            if b.next is not None:
                b.next.prev = r
            b.next = r
            b.size = n
            self._insert_free(r)
        b.allocated = True
        b.req = req
        self.allocated += b.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return b

    def _get_free_block(self, n: int, stream: int, small: bool) -> Block | None:
        if self.gc_on:
            self.gc_clock[small] += 1
        pool = self.free_pools[small]
        i = bisect.bisect_left(pool, (stream, n, 0))
        if i == len(pool) or pool[i][0] != stream:
            return None
        b = pool[i][3]
        if b.seg is not None and self.expandable:
            # best fit avoids the growable tail: prefer any fitting hole whose "expandable size" is smaller
            last = len(pool) - 1
            while b.seg is not None and i < last and pool[i + 1][0] == stream \
                    and _exp_size(pool[i + 1][3]) < _exp_size(b):
                i += 1
                b = pool[i][3]
        if n < self.max_split and b.size >= self.max_split:
            return None
        if n >= self.max_split and b.size >= n + self.nsr:
            return None
        del pool[i]
        return b

    def _alloc_block(self, n: int, asz: int, stream: int, small: bool, retry: bool) -> Block | None:
        if retry:
            self.retries += 1
        need = self.reserved + asz
        if self.twin_caps:
            over = self.cap is not None and need > self.cap
            if any((need > c) != over for c in self.twin_caps):
                self.diverged, self.twin_caps = True, ()
        if self.cap is not None and need > self.cap:
            return None
        if self.expandable:
            return self._alloc_expandable(n, stream, small)
        if self.reserved + asz > self.avail:
            return None
        b = Block(self._new_address(asz), asz, stream, small)
        self._grow(asz)
        self.device_allocs += 1
        self._emit("segment_alloc", b.ptr, asz, None)
        return b

    # ---- expandable segments
    def _alloc_expandable(self, n: int, stream: int, small: bool) -> Block | None:
        c = self._find_expandable_block(n, stream, small)
        if not c.mapped:
            c = self._map_block(c, min(c.size, n))
            if c is None:
                return None
        while c.size < n:
            nxt = c.next
            if nxt is None or nxt.mapped:
                return None
            c2 = self._map_block(nxt, min(n - c.size, nxt.size))
            if c2 is None:
                return None
            c = c2
        self._remove_free(c)
        return c

    def _find_expandable_block(self, n: int, stream: int, small: bool) -> Block:
        lst = self.unmapped[small]
        i = bisect.bisect_left(lst, (stream, 0))
        while i < len(lst) and lst[i][0] == stream:
            c = lst[i][2]
            p = c.prev
            if p is not None and not p.allocated and not p.pending:
                c = p
            total = 0
            x: Block | None = c
            while total < n and x is not None and not x.allocated and not x.pending:
                total += x.size
                x = x.next
            if total >= n:
                return c
            i += 1
        page = KSMALL_BUFFER if small else self.s.large_segment_size
        vs = ceil_to(self.total + self.total // 8, page)
        seg = ExpandableSegment(self._new_address(vs), vs, page, stream, small)
        u = Block(seg.base, vs, stream, small, seg, mapped=False)
        self._insert_unmapped(u)
        return u

    def _map_block(self, u: Block, nbytes: int) -> Block | None:
        seg = u.seg
        assert seg is not None
        start = u.ptr - seg.base
        m = ceil_to(start + nbytes, seg.page) - start
        if m <= 0 or self.reserved + m > self.avail:
            return None
        self._remove_unmapped(u)
        u.mapped = True
        if m < u.size:
            r = Block(u.ptr + m, u.size - m, u.stream, u.small, seg, mapped=False)
            r.prev, r.next = u, u.next
            if u.next is not None:
                u.next.prev = r
            u.next = r
            u.size = m
            self._insert_unmapped(r)
        mapped_at = u.ptr
        self._merge(u, u.prev)
        self._merge(u, u.next)
        self._insert_free(u)
        self._grow(m)
        self.device_allocs += 1
        self._emit("segment_map", mapped_at, m, seg)
        return u

    def _unmap_block(self, b: Block) -> None:
        seg = b.seg
        assert seg is not None
        P = seg.page
        lo = seg.base + ceil_to(b.ptr - seg.base, P)
        hi = seg.base + (b.ptr + b.size - seg.base) // P * P
        if hi <= lo:
            return
        self._remove_free(b)
        if lo > b.ptr:
            bf = Block(b.ptr, lo - b.ptr, b.stream, b.small, seg)
            bf.prev, bf.next = b.prev, b
            if b.prev is not None:
                b.prev.next = bf
            b.prev = bf
            self._insert_free(bf)
        end = b.ptr + b.size
        if end > hi:
            af = Block(hi, end - hi, b.stream, b.small, seg)
            af.prev, af.next = b, b.next
            if b.next is not None:
                b.next.prev = af
            b.next = af
            self._insert_free(af)
        b.ptr, b.size, b.mapped = lo, hi - lo, False
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self.reserved -= hi - lo
        self._emit("segment_unmap", lo, hi - lo, seg)
        if b.prev is None and b.next is None:
            return                      # release_expandable_segment: the whole range is gone
        self._insert_unmapped(b)

    # ---- free
    def _merge(self, dst: Block, src: Block | None) -> None:
        """try_merge_blocks: dst (not in any pool) absorbs a free neighbour."""
        if src is None or src.allocated or src.pending or dst.mapped != src.mapped:
            return
        if src.mapped:
            self._remove_free(src)
        else:
            self._remove_unmapped(src)
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size

    def request_free(self, b: Block) -> None:
        """free(): allocated_bytes drops now; the block is reusable at free_completed."""
        b.allocated = False
        self.allocated -= b.size
        b.pending = True
        self.pending[id(b)] = b

    def free_now(self, b: Block) -> None:
        """``request_free`` and ``complete_free`` at once (no stream work in between)."""
        if b.allocated:
            b.allocated = False
            self.allocated -= b.size
        elif not b.pending or self.pending.pop(id(b), None) is None:
            return                      # already free
        b.pending = False
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._insert_free(b)

    def complete_free(self, b: Block) -> None:
        if b.allocated:
            self.request_free(b)
        if self.pending.pop(id(b), None) is None:
            return                      # already completed by release_cached_blocks
        b.pending = False
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._insert_free(b)

    # ---- releasing memory
    def _release_block(self, b: Block) -> bool:
        if b.seg is not None or b.prev is not None or b.next is not None:
            return False                # only whole cudaMalloc segments go back to CUDA
        self._remove_free(b)
        self.reserved -= b.size
        self._emit("segment_free", b.ptr, b.size, None)
        return True

    def _release_cached(self) -> None:
        for b in list(self.pending.values()):   # synchronize_and_free_events
            self.complete_free(b)
        for small in (False, True):
            to_unmap: list[Block] = []
            for entry in list(self.free_pools[small]):
                b = entry[3]
                if b.seg is not None:
                    to_unmap.append(b)
                elif b.prev is None and b.next is None:
                    self._release_block(b)
            for b in to_unmap:
                self._unmap_block(b)

    def _release_available(self, n: int, stream: int, small: bool) -> bool:
        ms = self.s.max_split_size
        if ms is None:
            return False
        pool = self.free_pools[small]
        key = max(n, ms)
        i = bisect.bisect_left(pool, (stream, key, 0))
        if i == len(pool) or pool[i][0] != stream or pool[i][3].seg is not None:
            if i == 0:
                return False
            released = 0
            i -= 1
            while released < key and i >= 0 and pool[i][1] >= ms and pool[i][0] == stream:
                b = pool[i][3]
                i -= 1
                if b.seg is None and self._release_block(b):
                    released += b.size
            return released >= key
        return self._release_block(pool[i][3])

    def _garbage_collect(self) -> None:
        assert self.cap is not None
        threshold = int(self.s.garbage_collection_threshold * self.cap)
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        clock = self.gc_clock[False]
        pool = self.free_pools[False]
        freeable = [e[3] for e in pool if e[3].prev is None and e[3].next is None]
        if not freeable:
            return
        total_age = sum(clock - b.gc_base for b in freeable)
        count = len(freeable)
        reclaimed = 0
        freed = True
        while reclaimed < target and freed and count > 0:
            threshold_age = total_age / count
            freed = False
            for e in list(pool):
                b = e[3]
                if b.prev is None and b.next is None and b.seg is None and clock - b.gc_base >= threshold_age:
                    freed = True
                    reclaimed += b.size
                    total_age -= clock - b.gc_base
                    count -= 1
                    self._release_block(b)

    # ---- seeding (trace starts mid-run)
    # ---- what a snapshot of this allocator would show
    def segments(self, live: "Iterable[Block]", device: int = 0) -> tuple[Segment, ...]:
        """The layout as ``torch.cuda.memory._snapshot()`` would show it: one
        segment per cudaMalloc'd region or mapped run of an expandable range,
        its blocks in address order.  ``live`` holds the allocated (and pending)
        blocks, which only the caller tracks; free blocks are the pools'."""
        every: dict[int, Block] = {}
        for b in live:
            every[id(b)] = b
        for b in self.pending.values():
            every[id(b)] = b
        for pool in self.free_pools.values():
            for e in pool:
                every[id(e[3])] = e[3]
        heads = {id(h): h for h in (self._head(b) for b in every.values())}
        out: list[Segment] = []
        for h in sorted(heads.values(), key=lambda b: b.ptr):
            run: list[Block] = []
            x: Block | None = h
            while x is not None:
                if x.mapped:
                    run.append(x)
                if (not x.mapped or x.next is None) and run:
                    out.append(self._segment(run, device))
                    run = []
                x = x.next
        return tuple(out)

    @staticmethod
    def _head(b: Block) -> Block:
        while b.prev is not None:
            b = b.prev
        return b

    @staticmethod
    def _segment(run: list[Block], device: int) -> Segment:
        from ..model import Block as SnapBlock

        blocks = tuple(SnapBlock(b.ptr, b.size, b.req if (b.allocated or b.pending) else 0,
                                 ALLOCATED if b.allocated else PENDING if b.pending else INACTIVE)
                       for b in run)
        return Segment(device=device, address=run[0].ptr, total_size=sum(b.size for b in run),
                       allocated_size=sum(b.size for b in run if b.allocated), stream=run[0].stream,
                       segment_type="small" if run[0].small else "large", pool_id=(0, 0),
                       is_expandable=run[0].seg is not None, blocks=blocks)

    def seed_layout(self, segments: list[Segment], live: dict[int, Block]) -> int:
        """Rebuild the recorded layout at the trace start (same settings)."""
        seeded = 0
        groups: dict[tuple[int, bool], list[Segment]] = {}
        for s in segments:
            if s.is_expandable:
                groups.setdefault((s.stream, s.segment_type == "small"), []).append(s)
                continue
            small = s.segment_type == "small"
            chain = [self._seed_block(b.address, b.size, b.requested_size, b.state, s.stream, small, None)
                     for b in s.blocks]
            _link(chain)
            self._grow(s.total_size)
            seeded += self._register(chain, live)
        for (stream, small), segs in groups.items():
            segs.sort(key=lambda s: s.address)
            page = KSMALL_BUFFER if small else self.s.large_segment_size
            base = segs[0].address
            end = segs[-1].address + segs[-1].total_size
            vs = max(ceil_to(self.total + self.total // 8, page), ceil_to(end - base, page))
            seg = ExpandableSegment(base, vs, page, stream, small)
            chain: list[Block] = []
            cursor = base
            for s in segs:
                if s.address > cursor:
                    chain.append(Block(cursor, s.address - cursor, stream, small, seg, mapped=False))
                for b in s.blocks:
                    chain.append(self._seed_block(b.address, b.size, b.requested_size, b.state, stream, small, seg))
                cursor = s.address + s.total_size
                self._grow(s.total_size)
            if base + vs > cursor:
                chain.append(Block(cursor, base + vs - cursor, stream, small, seg, mapped=False))
            _link(chain)
            seeded += self._register(chain, live)
        return seeded

    def _seed_block(self, addr: int, size: int, req: int, state: str, stream: int, small: bool,
                    seg: ExpandableSegment | None) -> Block:
        b = Block(addr, size, stream, small, seg)
        b.req = req
        if state == ALLOCATED:
            b.allocated = True
        elif state == PENDING:
            b.pending = True
        return b

    def _register(self, chain: list[Block], live: dict[int, Block]) -> int:
        n = 0
        for b in chain:
            if not b.mapped:
                self._insert_unmapped(b)
            elif b.allocated:
                self.allocated += b.size
                live[b.ptr] = b
                n += 1
            elif b.pending:
                self.pending[id(b)] = b
                live[b.ptr] = b
                n += 1
            else:
                self._insert_free(b)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return n


def _link(chain: list[Block]) -> None:
    for a, b in zip(chain, chain[1:]):
        a.next, b.prev = b, a


def _exp_size(b: Block) -> int:
    nx = b.next
    return b.size + (nx.size if nx is not None and not nx.mapped else 0)
