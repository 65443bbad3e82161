"""How a generation's memory grows, read off a snapshot's trace: DESIGN.md's remaining demand during generate().

A KV cache that grows by concatenation (the HF ``DynamicCache``: ``transformers/cache_utils``) allocates each
layer's key and value tensor one position larger at every token, so the sizes the trace shows it allocate
step by a fixed amount: the bytes of one position.  The largest of them over that step bounds the positions of
the sequence being generated, and the live memory gained between the trace's smallest cache and the OOM, over
the positions gained, is what one more token costs — the cache itself plus whatever the call keeps per token
(``output_scores``' scores, logits).  A static or paged cache allocates once: nothing is read then.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Snapshot
from .retention import trace_until_oom
from .snapshot_metrics import alloc_deltas, memo, settings_of, trace_start


@dataclass(frozen=True, slots=True)
class GenerationGrowth:
    positions: int                  # at most this many positions in the sequence being generated (the cache's size)
    gained: int                     # positions the cache grew by within the trace
    bytes_per_position: int | None  # live memory gained per position over the trace (None: it did not grow)


def is_kv_cache(frames) -> bool:  # type: ignore[no-untyped-def]
    """Allocated by the HF KV cache (``transformers/cache_utils``)."""
    return any("cache_utils" in f.filename for f in frames)


def generation_growth(snap: Snapshot, device: int) -> GenerationGrowth | None:
    """The positions of the sequence being generated and what each costs, or None when the trace up to the OOM
    shows no cache growing by a fixed step (at least three sizes, the smallest step seen twice).  Read once per
    snapshot and device (the retention analysis and the context both ask)."""
    key = ("generation_growth", device)
    cache = memo(snap)
    if key not in cache:
        cache[key] = _growth(snap, device)
    return cache[key]


def _growth(snap: Snapshot, device: int) -> GenerationGrowth | None:
    found = trace_until_oom(snap, device)
    if found is None:
        return None
    trace, end, stack, allocs = found
    cache = [i for i, fr in enumerate(trace.stacks) if is_kv_cache(fr)]
    if not cache:
        return None
    at = allocs[np.isin(stack[allocs], cache)]
    sizes = np.asarray(trace.size[:end])[at].astype(np.int64)
    distinct = np.unique(sizes)
    if len(distinct) < 3:
        return None
    steps = np.diff(distinct)
    step = int(steps.min())
    if step <= 0 or int(np.count_nonzero(steps == step)) < 2:
        return None
    positions = int(distinct.max()) // step
    gained = int(distinct.max() - distinct.min()) // step
    per: int | None = None
    first = int(at[np.argmin(sizes)])                       # the trace's smallest cache tensor
    if gained > 0:
        settings = settings_of(snap)
        live = trace_start(snap, device, settings).allocated_at_start + np.cumsum(alloc_deltas(snap, device, settings))
        grown = int(live[end - 1] - live[first]) if end - 1 > first else 0
        per = grown // gained if grown > 0 else None
    return GenerationGrowth(positions, gained, per)
