"""The failing request against what its line of code allocated in the steps the snapshot's trace recorded.

A forward allocates at the same lines step after step, at sizes set by the batch.  When the failing request is
many times larger than anything its line allocated in the steps the trace recorded, the batch that failed was far
larger than the batches that ran (an evaluation batch 16 times the training batch, one long document): a spike of
demand, read from the snapshot alone.  The line is the innermost frame outside torch (``modeling_qwen2.py:465``,
the ``lm_head`` call), which training and evaluation share.  Pure: it reads the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Frame, Snapshot
from .phase import is_torch_internal
from .retention import last_step_start
from .snapshot_metrics import device_trace, oom_device, oom_index

MIN_EARLIER = 2                    # earlier allocations at the line: a pattern, not one stray tensor
MIN_BYTES = 2**20                  # what the line allocated before must be a batch's tensor, not a scalar or a counter
LARGER_BATCH = 4.0                 # a request this many times anything its line allocated before: a far larger batch


@dataclass(frozen=True, slots=True)
class SiteHistory:
    site: str                      # file:line of the innermost frame outside torch
    earlier: int                   # allocations at that line before the OOM, in the trace
    earlier_max: int               # the largest of them
    request: int
    demand_after: int | None = None  # what the earlier step needed from that line until its backward (None: unread)

    @property
    def scaled_demand(self) -> int | None:
        """The failing phase's remaining demand, if everything after the line grows with the batch as the request
        did: the earlier step's demand from the line on, times the ratio."""
        return int(self.demand_after * self.ratio) if self.demand_after and self.earlier_max else None

    @property
    def ratio(self) -> float:
        return self.request / self.earlier_max if self.earlier_max else float("inf")


def _site(frames: tuple[Frame, ...]) -> str | None:
    """The innermost frame (snapshot frames come innermost first) outside torch, in a Python file."""
    for f in frames:
        if f.filename.endswith(".py") and not is_torch_internal(f):
            return f"{f.filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{f.line}"
    return None


def site_history(snap: Snapshot, request: int | None) -> SiteHistory | None:
    """The failing line's earlier allocations in the trace, or None (no OOM entry, no readable line, fewer than
    MIN_EARLIER earlier allocations)."""
    if not request:
        return None
    trace = device_trace(snap, oom_device(snap))
    end = oom_index(trace) if len(trace) else None
    if end is None or "alloc" not in trace.actions:
        return None
    site = _site(trace.stacks[int(trace.stack[end])])
    if site is None:
        return None
    # the steps that ran: allocations before the last optimizer step started (the failing step's own forward,
    # or an evaluation after it, allocates at the same lines); no optimizer step in the trace: all before the OOM
    cut = last_step_start(snap)
    act = np.asarray(trace.action[:end if cut is None else cut])
    allocs = np.nonzero(act == trace.actions.index("alloc"))[0]
    stack = np.asarray(trace.stack[:end])[allocs]
    same = [int(st) for st in np.unique(stack) if _site(trace.stacks[int(st)]) == site]
    if not same:
        return None
    at = allocs[np.isin(stack, same)]
    sizes = np.asarray(trace.size[:end])[at]
    if len(sizes) < MIN_EARLIER or sizes.max() < MIN_BYTES:
        return None
    i0 = int(at[int(np.argmax(sizes))])
    return SiteHistory(site, int(len(sizes)), int(sizes.max()), int(request),
                       _demand_after(trace, end, i0, set(same)))


def _demand_after(trace, end: int, i0: int, same: set[int]) -> int | None:  # type: ignore[no-untyped-def]
    """The most allocated memory rose above its level before entry ``i0`` while the forward it belongs to went on:
    from ``i0`` to the first backward allocation, the next allocation at the same line, or the OOM."""
    from .phase import Phase, block_phase

    free = "free_completed" if "free_completed" in trace.actions else "free_requested"
    if free not in trace.actions:
        return None
    act = np.asarray(trace.action[i0:end])
    st = np.asarray(trace.stack[i0:end])
    a, f = trace.actions.index("alloc"), trace.actions.index(free)
    stop = len(act)
    for k in np.nonzero(act == a)[0][1:]:
        s = int(st[k])
        if s in same or block_phase(trace.stacks[s]) is Phase.BACKWARD:
            stop = int(k)
            break
    size = np.asarray(trace.size[i0:i0 + stop]).astype(np.int64)
    delta = np.where(act[:stop] == a, size, np.where(act[:stop] == f, -size, 0))
    return int(np.cumsum(delta).max()) if stop else None
