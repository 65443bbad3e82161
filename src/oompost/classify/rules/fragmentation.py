"""FRAG001 — free memory exists, but not in one piece.

**Cause**  The failing request would fit in what the process may still use —
free blocks inside PyTorch's segments ("reserved but unallocated") plus what
is left of the card or the ``allowed`` cap — but no single free block is
large enough and no new segment can be allocated.  Segments are returned to
CUDA only when wholly free, so a few long-lived tensors (optimizer state
created between activations, a cache) pin holes that varying shapes cannot
reuse.  Proof, when a snapshot exists: the largest free block in the request's
pool is smaller than the request, and replaying the allocator with
``expandable_segments:True`` serves it.  Under a memory fraction the
message's "free" is the whole card's: the ``allowed`` cap is the limit.

**Fix**  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; or
``max_split_size_mb`` (oversize blocks are not split), stable shapes (pad to
buckets), allocating long-lived state before the first forward.
"""

from __future__ import annotations

from ...analysis.context import Context
from ...analysis.phase import Phase
from ...analysis.steps import larger_step, leak_trend, max_peak_allocated
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ...analysis.allocator_rules import allocation_size
from ._common import b, headroom, limit_label, oom_refs
from ._runtimes import runtime_fixes, runtime_not_fixes


class Fragmentation:
    code = "FRAG001"
    cause = Cause.FRAGMENTATION

    def evaluate(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        if o is None or o.requested_bytes is None or o.reserved_unallocated_bytes is None:
            return []
        R, ru, A = o.requested_bytes, o.reserved_unallocated_bytes, o.allocated_bytes
        H = headroom(ctx)
        if H is None or A is None:
            return []
        if R > ru + H:
            return []            # would not fit even with zero fragmentation
        # the allocator asks CUDA for a whole new segment, not for the request: 2 MiB for a small request, 20 MiB
        # for one of 1-10 MiB (allocator.md, get_allocation_size)
        seg = allocation_size(R)
        if seg <= H:
            return []            # a new segment fits: not an allocator-layout failure
        signals: list[tuple[str, float]] = [
            (f"the {b(R)} request fits in reserved-but-unallocated {b(ru)} + headroom {b(H)}, "
             f"but not in a new segment" + (f" ({b(seg)})" if seg != R else ""), 0.3)]
        numbers = [("failed request (segment-rounded)", b(R)), ("allocated by PyTorch", b(A)),
                   ("reserved but unallocated", b(ru)), ("headroom below " + limit_label(ctx), b(H)),
                   (limit_label(ctx), b(ctx.limit_bytes))]
        if ru < R:
            signals.append(("no cached block can be that large (reserved-but-unallocated < request)", 0.05))
        else:
            signals.append((f"reserved-but-unallocated alone ({b(ru)}) exceeds the request, yet no cached block "
                            "could serve it: the free memory is in pieces", 0.2))
        # the remaining demand against the slack: fragmentation is the cause only if the rest of the step would
        # fit in everything still free, once in one piece.  On the dev fold, where the slack is under 3.5 % of
        # the limit, 3 of 50 such OOMs were fragmentation (from 10 %, 38 of 54: a large slack is the ordinary
        # case, already weighed by the verdict model's oom.reserved_unallocated_large)
        L = ctx.limit_bytes
        share = (ru + H) / L if L else None
        if share is not None:
            if share < 0.02:
                signals.append((f"everything still free ({b(ru + H)}) is {share:.1%} of {limit_label(ctx)}: the rest "
                                "of the step cannot fit in it even in one piece", -0.3))
            elif share < 0.035:
                signals.append((f"everything still free ({b(ru + H)}) is only {share:.1%} of {limit_label(ctx)}: "
                                "little room for the rest of the step even in one piece", -0.2))
        m = ctx.snapshot_metrics
        if m is not None and getattr(m, "free_max", None) is not None and getattr(m, "free_total", None):
            numbers += [("free in the request's pool (snapshot)", f"{b(m.free_total)} in {m.holes} holes"),
                        ("largest free block", b(m.free_max))]
            if m.free_max < R <= m.free_total + H:
                signals.append((f"the snapshot's largest hole ({b(m.free_max)}) is smaller than the request", 0.15))
            elif m.free_max >= R:
                signals.append(("a free block large enough exists in the snapshot", -0.2))
        exp = [c for c in ctx.counterfactuals if getattr(c, "setting", "") == "expandable_segments:True"]
        base = [c for c in ctx.counterfactuals if getattr(c, "baseline", False)]
        whole_step = _trace_goes_past_the_oom(ctx)
        if exp:
            if not exp[0].oom and whole_step:
                signals.append(("the allocator replay with expandable_segments:True serves the request and "
                                "the rest of the recorded step", 0.2))
            elif not exp[0].oom:
                signals.append(("the replay with expandable_segments:True serves the request, but the trace "
                                "ends at the OOM: what the step still had to allocate is not in it", 0.05))
                numbers.append(("replay peak reserved with expandable_segments", b(exp[0].peak_reserved_bytes)))
            else:
                signals.append(("the allocator replay with expandable_segments:True still fails", -0.3))
        if base and base[0].oom:
            signals.append(("the replay of the recorded settings reproduces the OOM", 0.05))
        prior = max_peak_allocated(ctx.steps)
        if prior is not None:
            numbers.append(("peak allocated in earlier steps", b(prior)))
            if prior >= A + R:
                signals.append((f"earlier steps already held {b(prior)} ≥ allocated + request", 0.25))
            elif (grow := larger_step(ctx.steps, A)) and exp and not exp[0].oom and (share is None or share >= 0.035):
                # both can hold (DESIGN: the order then decides): the replay without the layout problem
                # serves this larger step as far as it was recorded, and there is room for the rest of it.
                # With less than 3.5 % of the limit still free the replay's success says nothing: it ends at
                # the OOM, and the larger step still has the rest of its forward and backward to allocate (every
                # fragmentation capture failed with 6.5 % or more free; the larger-step spikes whose replay
                # served the request, with 1.9-3.5 %)
                signals.append((f"live memory ({b(A)}) is {grow:.1f}x the earlier peak: a larger "
                                "step, which the expandable-segments replay still serves", -0.1))
            elif grow := larger_step(ctx.steps, A):
                signals.append((f"live memory ({b(A)}) is {grow:.1f}x the earlier peak: "
                                "a spike, not fragmentation", -0.45))
        if ctx.estimate is not None and ctx.limit_bytes:
            step = ctx.estimate.step_peak_bytes
            if step <= 0.9 * ctx.limit_bytes:
                signals.append((f"the memory model's step peak ({b(step)}) fits", 0.1))
            elif step >= 1.05 * ctx.limit_bytes:
                signals.append((f"the memory model's step peak ({b(step)}) does not fit", -0.25))
        if leak_trend(ctx.steps) is not None:
            signals.append(("allocated memory grows every step: the live set, not its layout, is the problem", -0.4))
        if ctx.phase.phase is Phase.GENERATION:
            signals.append(("the OOM is in generation: the KV cache keeps growing after this request, so the "
                            "remaining demand, not the layout, decides", -0.3))
        flushes = ctx.evidence.fact_value("deepspeed.cache_flushes")
        if flushes:
            signals.append((f"DeepSpeed reports {flushes} allocator cache flushes", 0.05))
        retries = ctx.evidence.fact_value("memory_summary.retries")
        if retries:
            signals.append((f"memory_summary() counts {retries} cudaMalloc retries (the cache was freed and "
                            "the allocation retried)", 0.05))
        conf = confidence(signals)
        already = bool(ctx.snapshot is not None and ctx.snapshot.expandable)
        fixes = []
        if not already:
            fixes.append(Fix("env", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                             "one growable segment per stream: free pages anywhere can be remapped for the request"
                             + (f" (replay: fits, peak {b(exp[0].peak_reserved_bytes)})" if exp and not exp[0].oom
                                else "")))
        ms = [c for c in ctx.counterfactuals if getattr(c, "setting", "").startswith("max_split_size_mb")
              and not c.oom]
        if ms:
            fixes.append(Fix("env", "PYTORCH_CUDA_ALLOC_CONF", ms[0].setting,
                             f"large blocks are not split, so they stay reusable (replay: fits, peak "
                             f"{b(ms[0].peak_reserved_bytes)}); costs more cudaMalloc calls"))
        fixes.append(Fix("code", "stable shapes", "pad batches to a few fixed lengths (e.g. multiples of 256)",
                         "varying tensor sizes leave holes that the next size cannot reuse"))
        not_fixes = (NotAFix("torch.cuda.empty_cache()", "the holes sit in segments that still hold live tensors; "
                             "empty_cache only returns wholly free segments (the OOM path already did)"),
                     NotAFix("a larger ZeRO stage / offload", "the live memory fits; its layout does not"))
        if ctx.own_runtime:                 # another allocator: its own settings, not PYTORCH_CUDA_ALLOC_CONF
            fixes = list(runtime_fixes(ctx.own_runtime, self.cause))
            not_fixes = runtime_not_fixes(ctx.own_runtime)
        return [Finding(
            self.code, self.cause, "Fragmentation: enough memory is free, but no block is large enough", conf,
            evidence=oom_refs(ctx), fixes=tuple(fixes), not_fixes=not_fixes,
            signals=tuple(signals), numbers=tuple(numbers),
            detail=f"The failing request ({b(R)}) is smaller than the free memory PyTorch holds plus what "
                   f"{limit_label(ctx)} still allows ({b(ru + H)}), yet it failed: no free block is large enough "
                   "and there is no room for a new segment.")]


def _trace_goes_past_the_oom(ctx: Context) -> bool:
    """The snapshot's trace records allocations after the OOM (taken once the step went on or was retried),
    so a replay covers more than the moment of failure."""
    snap = ctx.snapshot
    if snap is None:
        return False
    import numpy as np

    for trace in snap.traces:
        if "oom" not in trace.actions or "alloc" not in trace.actions:
            continue
        ooms = np.flatnonzero(trace.action == trace.actions.index("oom"))
        if len(ooms):
            after = trace.action[int(ooms[-1]) + 1:]
            return int((after == trace.actions.index("alloc")).sum()) >= 10
    return False
