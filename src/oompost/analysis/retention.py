"""Tensors kept from earlier steps, read off one snapshot: DESIGN.md's leak without a step series.

A training step frees what its forward allocated: by the next optimizer step
the step's activations, logits and loss are gone, except what a Python
variable still holds until it is reassigned (one step's worth at most).  The
allocator trace shows where steps end — the optimizer's first allocation after
a step's backward — so the live blocks at the OOM that a forward allocated
*before* the last such boundary were kept across a step.  When one allocation
site (its stack and size) holds more of them than a whole step allocates
there, they are a tensor kept from every step: logits appended for metrics, a
loss that keeps its graph, a hook that stores features.  That is the rise of
allocated memory step after step, seen from its end.

Only forward-side allocations count (forward, logits, loss, generation,
outputs concatenated for metrics): parameters, gradients, optimizer state and
anything without a Python stack persist across steps by design.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np

from ..model import Snapshot
from .phase import Phase, classify_frames
from .snapshot_metrics import device_trace, oom_device, oom_index, segments_at, stack_label

# the phases of memory a step allocates and frees again
_STEP_PHASES = frozenset((Phase.FORWARD, Phase.LOGITS, Phase.LOSS, Phase.GENERATION, Phase.RETAINED))
# an optimizer's own files: torch.optim, bitsandbytes.optim, timm.optim, apex.optimizers, DeepSpeed's Adam
_OPTIMIZER_FILES = ("/optim/", "/optimizers/", "deepspeed/ops/adam", "transformers/optimization")
MIN_KEPT = 3                                  # blocks from one site: more than a variable holding one output
MATERIAL_SHARE = 0.05                         # kept memory that much of the live memory: the leak holds


@dataclass(frozen=True, slots=True)
class KeptSite:
    label: str                                # the allocation site (stack_label)
    block_bytes: int
    kept: int                                 # live blocks allocated before the last step boundary
    per_step: int                             # what one step allocates at this site (from the trace)


@dataclass(frozen=True, slots=True)
class Retention:
    """Live memory at the OOM that earlier steps' forwards allocated and nothing freed."""
    kept_bytes: int
    kept_blocks: int
    sites: tuple[KeptSite, ...]               # largest first
    boundaries: int                           # optimizer-step boundaries the trace shows
    live_bytes: int                           # all live memory at the OOM, for scale

    @property
    def material(self) -> bool:
        """The kept memory is a material part of what filled the card (not a few stray tensors)."""
        return self.kept_bytes >= MATERIAL_SHARE * self.live_bytes


def _is_optimizer(frames: tuple) -> bool:
    return any(any(s in f.filename.replace("\\", "/") for s in _OPTIMIZER_FILES) for f in frames)


def retention(snap: Snapshot) -> Retention | None:
    """The memory kept across steps at the OOM, or None when the trace shows no step boundary or nothing kept
    beyond one step's worth."""
    dev = oom_device(snap)
    trace = device_trace(snap, dev)
    if not len(trace) or "alloc" not in trace.actions:
        return None
    end = oom_index(trace)
    end = len(trace) if end is None else end
    action = np.asarray(trace.action[:end])
    stack = np.asarray(trace.stack[:end])
    allocs = np.nonzero(action == trace.actions.index("alloc"))[0]
    if not len(allocs):
        return None
    opt_stacks = np.fromiter((_is_optimizer(fr) for fr in trace.stacks), dtype=bool, count=len(trace.stacks))
    is_opt = opt_stacks[stack[allocs]]
    starts = allocs[1:][is_opt[1:] & ~is_opt[:-1]]
    bounds = ([int(allocs[0])] if is_opt[0] else []) + [int(i) for i in starts]
    if not bounds:
        return None
    last = bounds[-1]
    addr = np.asarray(trace.addr[:end])[allocs]
    size = np.asarray(trace.size[:end])[allocs]
    alloc_at = dict(zip(addr.tolist(), allocs.tolist()))          # the last allocation at each address wins
    # what one step allocates per (site, size): the last whole step, or the current one if it allocated more
    windows = [(bounds[-2], last)] if len(bounds) > 1 else []
    windows.append((last, end))
    per_step: collections.Counter = collections.Counter()
    labels: dict[int, str] = {}
    for lo, hi in windows:
        sel = (allocs >= lo) & (allocs < hi)
        c = collections.Counter(zip(stack[allocs[sel]].tolist(), size[sel].tolist()))
        here: collections.Counter = collections.Counter()
        for (st, sz), n in c.items():
            lab = labels.get(st)
            if lab is None:
                lab = labels[st] = stack_label(trace.stacks[st])
            here[(lab, sz)] += n
        for k, n in here.items():
            per_step[k] = max(per_step[k], n)
    kept: dict[tuple[str, int], int] = collections.Counter()
    live = 0
    phase_of: dict[tuple, bool] = {}
    for seg in segments_at(snap, dev, "oom"):
        for blk in seg.blocks:
            if blk.state != "active_allocated":
                continue
            live += blk.size
            if alloc_at.get(blk.address, -1) >= last or not blk.frames:
                continue
            step_side = phase_of.get(blk.frames)
            if step_side is None:
                step_side = phase_of[blk.frames] = (
                    classify_frames(blk.frames, innermost_first=True).phase in _STEP_PHASES
                    and not _is_optimizer(blk.frames))
            if step_side:
                kept[(stack_label(blk.frames), blk.size)] += 1
    sites = tuple(sorted((KeptSite(lab, sz, n, per_step.get((lab, sz), 0)) for (lab, sz), n in kept.items()
                          if n >= MIN_KEPT and n > per_step.get((lab, sz), 0)),
                         key=lambda s: (-s.kept * s.block_bytes, s.label)))
    if not sites:
        return None
    return Retention(sum(s.kept * s.block_bytes for s in sites), sum(s.kept for s in sites), sites, len(bounds),
                     live)
