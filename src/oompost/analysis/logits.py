"""A failing request that is exactly one batch's logits, and what the loss still needs after it.

A causal LM's head writes batch × sequence × vocabulary values; the loss then upcasts them to fp32 and takes a
log-softmax of the same size.  When the failing request is exactly those logits, the phase's remaining demand
is known: the logits plus the loss's fp32 temporaries — several times the request.  That demand, not the single
request, is what fragmentation and capacity are judged against (DESIGN.md).  Pure: it reads the Context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .phase import Phase

if TYPE_CHECKING:  # pragma: no cover
    from .context import Context

# bytes live at the loss's peak per byte of the failing logits: the logits themselves, their fp32 copy and
# the fp32 log-softmax (2 + 4 + 4 bytes per value from 2-byte logits; 4 + 4 from fp32 logits)
LOSS_FACTOR = {2: 5.0, 4: 2.0}
_PRINTED = int(0.006 * 2**30)          # the OOM message prints GiB to two decimals: a request is known to ±0.005 GiB


def _sequence_logits(ctx: "Context") -> tuple[int, int] | None:
    """(the failing request, values of one sequence's logits: sequence × vocabulary) when the request fails in the
    logits or the loss and both sizes are known; None otherwise."""
    o = ctx.oom
    seq = ctx.setup.get("seq_len")
    if seq is None or ctx.spec is None or o is None or not o.requested_bytes:
        return None
    if ctx.phase.phase not in (Phase.LOGITS, Phase.LOSS):
        return None
    return o.requested_bytes, int(seq) * ctx.spec.vocab


def logits_width(ctx: "Context", batch: int | None) -> int | None:
    """2 or 4 when the failing request, in the logits or the loss, is exactly ``batch`` × sequence × vocabulary
    values of that many bytes (within 1%), else None."""
    known = _sequence_logits(ctx)
    if batch is None or known is None:
        return None
    request, values = known
    for width in (2, 4):
        want = batch * values * width
        if abs(request - want) <= 0.01 * want:
            return width
    return None


def inferred_logits_batch(ctx: "Context") -> tuple[int, int] | None:
    """(sequences, bytes per value) when the failing request, in the logits or the loss, is a whole number of
    sequences' logits (sequence × vocabulary values of 2 or 4 bytes, within 1% of one sequence or the OOM
    message's rounding): the batch the log does not state, read off the request.  None otherwise."""
    known = _sequence_logits(ctx)
    if known is None:
        return None
    request, values = known
    # 2 and 4 bytes fit the same request whenever the count is even: the run's dtype says which to try first
    for width in ((4, 2) if ctx.setup.dtype == "fp32" else (2, 4)):
        unit = values * width
        n = round(request / unit)
        if n >= 1 and abs(request - n * unit) <= max(0.01 * unit, _PRINTED):
            return n, width
    return None


def loss_demand(ctx: "Context") -> int | None:
    """What the failing phase needs from the failing request on, when the request is exactly one batch's logits
    (the evaluation batch inside an evaluation pass, else the micro-batch): the logits and the loss's fp32
    temporaries.  None when the request is not recognisably the logits."""
    from .evaluation import evaluation_pass

    o = ctx.oom
    if o is None or not o.requested_bytes:
        return None
    ev = evaluation_pass(ctx)
    if ev is not None:
        width = ev.logits_bytes_per_value
    else:
        width = logits_width(ctx, ctx.setup.get("micro_batch"))
        if width is None and ctx.setup.get("micro_batch") is None:
            width = (inferred_logits_batch(ctx) or (0, None))[1]
    return int(o.requested_bytes * LOSS_FACTOR[width]) if width else None
