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

An evaluation loop has no optimizer step to date blocks by, but what it keeps
is allocated where it keeps it: the buffer into which every batch's outputs
are concatenated (the HF Trainer's ``nested_concat`` /
``torch_pad_and_concatenate``, ``torch.cat(all_logits)``) is live at the OOM,
whichever allocation failed.  That buffer only grows, batch after batch — and
the trace shows it growing even where no frame names it: one site whose
successive allocations grow by the same step (``x = torch.cat((x, out))``).
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass

import numpy as np

from ..model import Snapshot
from .phase import Phase, block_phase
from .snapshot_metrics import device_trace, live_blocks_at_oom, oom_device, oom_index, stack_label

# the phases of memory a step allocates and frees again
_STEP_PHASES = frozenset((Phase.FORWARD, Phase.LOGITS, Phase.LOSS, Phase.GENERATION, Phase.RETAINED))
# an optimizer's own files: torch.optim, bitsandbytes.optim, timm.optim, apex.optimizers, DeepSpeed's Adam
_OPTIMIZER_FILES = ("/optim/", "/optimizers/", "deepspeed/ops/adam", "transformers/optimization")
MIN_KEPT = 3                                  # blocks from one site: more than a variable holding one output
MATERIAL_SHARE = 0.05                         # kept memory that much of the live memory: the leak holds
GROWTH_MIN = 4                                # allocations of one site, each larger by the same step: a growing cat


@dataclass(frozen=True, slots=True)
class KeptSite:
    label: str                                # the allocation site (stack_label)
    block_bytes: int
    kept: int                                 # live blocks allocated before the last step boundary
    per_step: int                             # what one step allocates at this site (from the trace)


@dataclass(frozen=True, slots=True)
class Concatenated:
    label: str                                # the frame that concatenates per-batch outputs (stack_label)
    bytes: int                                # live bytes it holds at the OOM
    blocks: int
    step: int = 0                             # the trace shows it grow by this much per allocation (0: not read)


@dataclass(frozen=True, slots=True)
class Retention:
    """Live memory at the OOM kept from earlier steps or batches: blocks a forward allocated before the last
    optimizer step (``sites``), blocks successive batches allocated after it and kept (``batch_sites``: an
    evaluation keeping every batch's outputs), the buffer per-batch outputs are concatenated into
    (``concatenated``) and per-token outputs kept from earlier ``generate()`` calls (``generated``)."""
    kept_bytes: int                           # of the sites
    kept_blocks: int
    sites: tuple[KeptSite, ...]               # largest first; () when only a concatenation buffer was found
    boundaries: int                           # optimizer-step boundaries the trace shows
    live_bytes: int                           # all live memory at the OOM, for scale
    concatenated: Concatenated | None = None
    batch_sites: tuple[KeptSite, ...] = ()    # kept batch after batch since the last optimizer step (largest first)
    # per-token outputs of earlier generate() calls (``per_step``: the positions of the sequence being generated)
    generated: tuple[KeptSite, ...] = ()

    @property
    def material(self) -> bool:
        """The kept memory is a material part of what filled the card (not a few stray tensors)."""
        cat = self.concatenated.bytes if self.concatenated else 0
        return self.kept_bytes + cat >= MATERIAL_SHARE * self.live_bytes

    def share(self, nbytes: int) -> float:
        """``nbytes`` as a share of all live memory at the OOM (0 when none is known)."""
        return nbytes / self.live_bytes if self.live_bytes else 0.0


@functools.lru_cache(maxsize=65536)
def _is_optimizer(frames: tuple) -> bool:
    return any(any(s in f.filename.replace("\\", "/") for s in _OPTIMIZER_FILES) for f in frames)


def _step_starts(trace, stack: np.ndarray, allocs: np.ndarray) -> list[int]:  # type: ignore[no-untyped-def]
    """Trace indices where an optimizer step starts allocating (a run of optimizer allocations after others)."""
    opt_stacks = np.fromiter((_is_optimizer(fr) for fr in trace.stacks), dtype=bool, count=len(trace.stacks))
    is_opt = opt_stacks[stack[allocs]]
    starts = allocs[1:][is_opt[1:] & ~is_opt[:-1]]
    return ([int(allocs[0])] if is_opt[0] else []) + [int(i) for i in starts]


def trace_until_oom(snap: Snapshot, dev: int):  # type: ignore[no-untyped-def]
    """The device's trace up to the OOM: (trace, its end, the stack index of each entry, the indices of its
    allocations), or None when it has no allocation."""
    trace = device_trace(snap, dev)
    if not len(trace) or "alloc" not in trace.actions:
        return None
    end = oom_index(trace)
    end = len(trace) if end is None else end
    stack = np.asarray(trace.stack[:end])
    allocs = np.nonzero(np.asarray(trace.action[:end]) == trace.actions.index("alloc"))[0]
    return (trace, end, stack, allocs) if len(allocs) else None


def _trace_to_oom(snap: Snapshot, dev: int):  # type: ignore[no-untyped-def]
    """``trace_until_oom`` and the optimizer-step starts, or None when the trace shows no optimizer step."""
    found = trace_until_oom(snap, dev)
    if found is None:
        return None
    bounds = _step_starts(found[0], found[2], found[3])
    return (*found, bounds) if bounds else None


def last_step_start(snap: Snapshot) -> int | None:
    """The trace index where the last optimizer step before the OOM started allocating (what comes after belongs
    to the failing step or to an evaluation after it), or None when the trace shows no optimizer step."""
    found = _trace_to_oom(snap, oom_device(snap))
    return found[4][-1] if found is not None else None


def steps_finished(snap: Snapshot) -> int:
    """Optimizer steps the trace shows finished before the OOM (a lower bound: a ring buffer keeps only the
    last entries).  A step whose allocations the OOM interrupts is not counted; one the OOM follows is."""
    found = _trace_to_oom(snap, oom_device(snap))
    if found is None:
        return 0
    trace, end, stack, allocs, bounds = found
    # the OOM inside an optimizer step: its last allocations are the optimizer's, so that step did not finish
    in_step = _is_optimizer(trace.stacks[int(stack[allocs[-1]])])
    return len(bounds) - (1 if in_step else 0)


def retention(snap: Snapshot) -> Retention | None:
    """The memory kept across steps or batches at the OOM, or None when nothing beyond one step's worth is kept
    (and no concatenation buffer holds a material share of live memory)."""
    dev = oom_device(snap)
    blocks = live_blocks_at_oom(snap)
    live = sum(blk.size for blk in blocks)
    cat = _concatenated(blocks, block_phase, live) or _growing_buffer(snap, dev, blocks, live)
    sites, bounds, batch = _kept_sites(snap, dev, blocks, block_phase)
    if not batch and bounds < 2:
        batch = _kept_by_forwards(snap, dev, blocks)
    gen = () if sites or batch else _kept_by_generations(snap, dev, blocks)
    if not sites and not batch and not gen and cat is None:
        return None
    every = sites + batch + gen
    return Retention(sum(s.kept * s.block_bytes for s in every), sum(s.kept for s in every), sites, bounds, live,
                     cat, batch, gen)


def _concatenated(blocks: list, phase, live: int) -> Concatenated | None:  # type: ignore[no-untyped-def]
    """The live buffer(s) built where per-batch outputs are concatenated, when they are a material share."""
    by: collections.Counter = collections.Counter()
    n: collections.Counter = collections.Counter()
    for blk in blocks:
        if blk.frames and phase(blk.frames) is Phase.RETAINED:
            lab = stack_label(blk.frames)
            by[lab] += blk.size
            n[lab] += 1
    if not by:
        return None
    lab, size = max(by.items(), key=lambda kv: (kv[1], kv[0]))
    return Concatenated(lab, size, n[lab]) if size >= MATERIAL_SHARE * live else None


def _growing_buffer(snap: Snapshot, dev: int, blocks: list, live: int) -> Concatenated | None:  # type: ignore[no-untyped-def]
    """A tensor concatenated onto itself batch after batch (``x = torch.cat((x, out))``), read off the trace
    where no frame's code shows it (a snapshot's frames carry none): one allocation site whose last GROWTH_MIN
    allocations each grow by the same step (one batch's output, within 5%), each earlier one freed, and whose
    latest is live at the OOM and a material share of live memory.  A KV cache grows the same way during
    generation: that is the generation's own demand, not a kept set, and is left out."""
    big = [blk for blk in blocks if blk.frames and blk.size >= MATERIAL_SHARE * live
           and block_phase(blk.frames) is not Phase.GENERATION and not _is_optimizer(blk.frames)
           and not any("cache_utils" in f.filename for f in blk.frames)]
    if not big:
        return None
    found = trace_until_oom(snap, dev)
    if found is None:
        return None
    trace, end, stack, allocs = found
    addr = np.asarray(trace.addr[:end])
    size = np.asarray(trace.size[:end])
    for blk in sorted(big, key=lambda x: -x.size):
        at = allocs[addr[allocs] == blk.address]
        if not len(at):
            continue
        st = int(stack[at[-1]])
        if st == 0:
            continue
        series = size[allocs[(stack[allocs] == st) & (allocs <= at[-1])]].astype(np.int64)[-GROWTH_MIN:]
        if len(series) < GROWTH_MIN:
            continue
        steps = np.diff(series)
        if steps.min() <= 0 or steps.max() > 1.05 * steps.min():
            continue
        return Concatenated(stack_label(trace.stacks[st]), int(blk.size), 1, int(steps.min()))
    return None


def _kept_sites(snap: Snapshot, dev: int, blocks: list, phase) -> tuple[tuple[KeptSite, ...], int, tuple[KeptSite, ...]]:  # type: ignore[no-untyped-def]
    """Sites holding more live blocks from before the last optimizer step than a step allocates there, how
    many optimizer-step boundaries the trace shows (no boundary: nothing can be dated), and the sites kept
    batch after batch since the last one (``_kept_by_batches``)."""
    found = _trace_to_oom(snap, dev)
    if found is None:
        return (), 0, ()
    trace, end, stack, allocs, bounds = found
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
        for (st, sz), k in c.items():
            lab = labels.get(st)
            if lab is None:
                lab = labels[st] = stack_label(trace.stacks[st])
            here[(lab, sz)] += k
        for key, k in here.items():
            per_step[key] = max(per_step[key], k)
    kept: collections.Counter = collections.Counter()
    for blk in blocks:
        if alloc_at.get(blk.address, -1) >= last or not blk.frames:
            continue
        if phase(blk.frames) in _STEP_PHASES and not _is_optimizer(blk.frames):
            kept[(stack_label(blk.frames), blk.size)] += 1
    sites = tuple(sorted((KeptSite(lab, sz, k, per_step.get((lab, sz), 0)) for (lab, sz), k in kept.items()
                          if k >= MIN_KEPT and k > per_step.get((lab, sz), 0)),
                         key=lambda s: (-s.kept * s.block_bytes, s.label)))
    return sites, len(bounds), _kept_by_batches(blocks, alloc_at, allocs, bounds, phase)


def _kept_by_batches(blocks: list, alloc_at: dict, allocs: np.ndarray, bounds: list[int],  # type: ignore[no-untyped-def]
                     phase) -> tuple[KeptSite, ...]:
    """Sites holding MIN_KEPT or more live blocks allocated after the last optimizer step, each by a different
    batch: an evaluation (or any loop without optimizer steps) keeping every batch's output.  One forward also
    allocates a block per layer at one site (same code line, same size), so the blocks must lie a batch apart:
    every gap between them at least an eighth of the allocations a whole training step makes (a layer's share of
    a forward is far smaller).  Needs a whole step in the trace, for that scale.  (``per_step`` is 0: the batches
    are not training steps.)"""
    if len(bounds) < 2:
        return ()
    last = bounds[-1]
    step_allocs = int(np.count_nonzero((allocs >= bounds[-2]) & (allocs < last)))
    if step_allocs < 8:
        return ()
    after: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    for blk in blocks:
        at = alloc_at.get(blk.address, -1)
        if at < last or not blk.frames:
            continue
        if phase(blk.frames) in _STEP_PHASES and not _is_optimizer(blk.frames):
            after[(stack_label(blk.frames), blk.size)].append(int(np.searchsorted(allocs, at)))
    out = []
    for (lab, sz), pos in after.items():
        if len(pos) < MIN_KEPT:
            continue
        gaps = np.diff(np.sort(np.asarray(pos)))
        if gaps.min() * 8 >= step_allocs:
            out.append(KeptSite(lab, sz, len(pos), 0))
    return tuple(sorted(out, key=lambda s: (-s.kept * s.block_bytes, s.label)))


# a whole forward pass between two kept blocks: some (site, size) of the model allocates in this many separate
# runs in every gap (a per-layer site once a layer, so a forward of 8 or more layers; two blocks one layer apart
# see each site in a run or two: GELU's eight temporaries of one line are one run)
FORWARD_REPEATS = 8
_GAPS_READ = 16                               # gaps whose runs are counted (evenly spread, first and last included)


def _kept_by_forwards(snap: Snapshot, dev: int, blocks: list) -> tuple[KeptSite, ...]:  # type: ignore[no-untyped-def]
    """``_kept_by_batches`` where the trace holds no whole training step to scale the gaps by (an inference
    script, or a trace that only reaches back into an evaluation run after training): a forward-side site whose
    MIN_KEPT or more live blocks of one size each lie a whole forward pass apart, with the forward's own memory
    freed in between.  In every gap between two of them, some other (site, size) allocates in FORWARD_REPEATS or
    more separate runs, as a model's per-layer sites do once a layer; and what the gap allocated is gone by the
    OOM but for less than half a kept block (a batch's inputs kept beside its outputs, say).  One forward's
    per-layer outputs fail both: a layer apart, each site runs once or twice between them, and under autograd
    the layer's saved activations are still alive.  The site's live blocks older than the trace (a ring buffer)
    count as kept too, and so do its blocks of the same size class (``_size_class``: one tensor size, two block
    sizes).  Blocks allocated inside a ``generate()`` call are left to ``_kept_by_generations``.
    (``per_step`` is 0: the batches are not training steps.)"""
    found = trace_until_oom(snap, dev)
    if found is None:
        return ()
    trace, end, stack, allocs = found
    addr = np.asarray(trace.addr[:end])[allocs]
    size = np.asarray(trace.size[:end])[allocs]
    alloc_at = dict(zip(addr.tolist(), range(len(allocs))))       # position among the allocations
    by_site: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    live: collections.Counter = collections.Counter()     # live blocks per site, dated by the trace or older
    sizes: dict[tuple[str, int], collections.Counter] = collections.defaultdict(collections.Counter)
    live_bytes_at = np.zeros(len(allocs) + 1, dtype=np.int64)     # live bytes by allocation position
    for blk in blocks:
        pos = alloc_at.get(blk.address)
        if pos is not None:
            live_bytes_at[pos] += blk.size
        if not blk.frames or block_phase(blk.frames) not in _STEP_PHASES or _is_optimizer(blk.frames):
            continue
        if _in_generation(blk.frames):
            continue                        # a generate() call's per-token outputs: _kept_by_generations dates them
        key = (stack_label(blk.frames), _size_class(blk.size))
        live[key] += 1
        sizes[key][blk.size] += 1
        if pos is not None:
            by_site[key].append(pos)
    live_cum = np.concatenate(([0], np.cumsum(live_bytes_at)))
    keys = None
    out = []
    for (lab, cls), pos in by_site.items():
        if len(pos) < MIN_KEPT:
            continue
        if keys is None:                                              # (stack, size) of every allocation
            keys = stack[allocs].astype(np.int64) * (1 << 40) + size.astype(np.int64)
        pos.sort()
        sz = sizes[(lab, cls)].most_common(1)[0][0]
        gaps = list(zip(pos, pos[1:]))
        if any(int(live_cum[b_] - live_cum[a + 1]) >= sz // 2 for a, b_ in gaps):
            continue                                                  # the gaps' own memory is still alive
        if len(gaps) > _GAPS_READ:                                    # the runs are costlier: read a spread of gaps
            gaps = [gaps[i] for i in np.linspace(0, len(gaps) - 1, _GAPS_READ).round().astype(int)]
        if all(_most_runs(keys[a + 1:b_]) >= FORWARD_REPEATS for a, b_ in gaps):
            # the site's live blocks allocated before the trace begins are older still: kept as well
            out.append(KeptSite(lab, sz, live[(lab, cls)], 0))
    return tuple(sorted(out, key=lambda s: (-s.kept * s.block_bytes, s.label)))


def _size_class(n: int) -> int:
    """Blocks of one tensor size differ by the unsplit remainder the allocator leaves in a large block (under
    1 MiB: 38,731,776 and 38,993,920 bytes for one ViT batch's features): large blocks are compared by the 2 MiB
    they round up to, small ones as they are."""
    return -(-n // (2 << 20)) * (2 << 20) if n >= (1 << 20) else n


@functools.lru_cache(maxsize=65536)
def _in_generation(frames: tuple) -> bool:
    """Allocated inside a ``generate()`` call (any frame of the stack is generation's), where each token's
    forward is a whole forward pass and its scores are the call's own until it returns."""
    return any(block_phase((fr,)) is Phase.GENERATION for fr in frames)


def _most_runs(keys: np.ndarray) -> int:
    """The most separate runs (maximal stretches of consecutive allocations) any one (site, size) makes in this
    stretch of the trace."""
    if not len(keys):
        return 0
    starts = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return int(np.unique(starts, return_counts=True)[1].max())


def _kept_by_generations(snap: Snapshot, dev: int, blocks: list) -> tuple[KeptSite, ...]:  # type: ignore[no-untyped-def]
    """Per-token outputs kept from earlier ``generate()`` calls: a generation has no optimizer step to date its
    blocks by, but its KV cache dates it (``generation.generation_growth``: a cache growing by concatenation
    bounds the positions of the sequence being generated).  A generation-phase site outside the cache that holds
    more live blocks of one size than that (one per token at most: the scores or logits ``output_scores`` keeps)
    holds tokens of earlier calls: outputs appended to a list with their scores or logits still on the GPU.
    Twice as many are asked for, since the trace's sizes are rounded and the step read off them may be coarser
    than one position.  No growing cache in the trace (a static or paged cache): nothing is dated."""
    from .generation import generation_growth, is_kv_cache

    growth = generation_growth(snap, dev)
    if growth is None:
        return ()
    positions = growth.positions
    kept: collections.Counter = collections.Counter()
    for blk in blocks:
        if not blk.frames or is_kv_cache(blk.frames):
            continue
        if block_phase(blk.frames) is Phase.GENERATION:
            kept[(stack_label(blk.frames), blk.size)] += 1
    return tuple(sorted((KeptSite(lab, sz, k, positions) for (lab, sz), k in kept.items()
                         if k >= MIN_KEPT and k > 2 * positions),
                        key=lambda x: (-x.kept * x.block_bytes, x.label)))
