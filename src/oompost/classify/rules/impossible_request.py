"""CFG004 — the failing request is larger than any tensor a model can make: its size is corrupt.

**Cause**  No model allocates petabytes in one tensor, nor hundreds of times its card's memory (a spike
that is merely too large asks a few times the card at most).  A request of millions of GiB ("Tried to allocate
67109892.01 GiB") is a size computed wrong before the allocator saw it: an integer overflow or an
uninitialised count inside a compiled CUDA extension, most often one built for another CUDA toolkit, GPU
architecture or torch version than the one it runs with (the rasteriser of 3D Gaussian splatting under CUDA
12.3 is a known case), or a negative size cast to unsigned.  The card's memory has nothing to do with it: a
larger GPU or a smaller batch does not help (DESIGN.md: a set-up mistake, ``config_error``).

**Fix**  Rebuild the extension against the installed torch and toolkit (matching ``TORCH_CUDA_ARCH_LIST``), or
install the toolkit it supports; check the inputs the failing call received (empty or NaN tensors give such
sizes too, and so does a shape taken from the wrong dimension: a dataloader's batch read as its sequence).
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b, oom_refs

# a thousand times the largest card there is: no tensor of a real model comes near it
IMPOSSIBLE_BYTES = 2**50
# a request this many times the card's whole memory is a shape gone wrong, not a batch that is a little too big:
# the corpus's real spikes ask at most 25x the card, its wrong shapes 475x and more
CARD_MULTIPLE = 100


def impossible_request(ctx: Context) -> bool:
    """The failing request is no real tensor: more than a petabyte, or more than CARD_MULTIPLE times the card."""
    o = ctx.oom
    if o is None or not o.requested_bytes:
        return False
    cap = o.capacity_bytes or ctx.limit_bytes
    return o.requested_bytes >= IMPOSSIBLE_BYTES or bool(cap and o.requested_bytes >= CARD_MULTIPLE * cap)


class ImpossibleRequest:
    code = "CFG004"
    cause = Cause.CONFIG_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        if o is None or not impossible_request(ctx):
            return []
        R = o.requested_bytes
        if R >= IMPOSSIBLE_BYTES:
            signals = [(f"the failing request ({b(R)}) is more than a petabyte: no tensor is that large", 0.75)]
        else:
            cap = o.capacity_bytes or ctx.limit_bytes
            signals = [(f"the failing request ({b(R)}) is {R / cap:,.0f} times the card's {b(cap)}: a shape "
                        "computed from wrong inputs, not a batch a little too large", 0.65)]
        where = ctx.location or None
        fixes = (Fix("code", "rebuild the CUDA extension in the failing call",
                     "against the installed torch and CUDA toolkit (TORCH_CUDA_ARCH_LIST for this GPU)",
                     "a size computed wrong inside compiled code (overflow, uninitialised count) reaches the "
                     "allocator"),
                 Fix("code", "check the inputs of the failing call", "",
                     "empty or NaN inputs, or a batch / sequence dimension read from the wrong axis, give such "
                     "sizes"))
        return [Finding(
            self.code, self.cause, "The failing request's size is corrupt, not a real tensor",
            confidence(signals), evidence=oom_refs(ctx),
            fixes=fixes if R >= IMPOSSIBLE_BYTES else fixes[::-1],
            not_fixes=(NotAFix("a smaller batch, a larger GPU or expandable_segments",
                               f"no GPU holds {b(R)}: the size is wrong, not the memory"),),
            signals=tuple(signals), numbers=(("failed request", b(R)),),
            detail=f"The run asked the allocator for {b(R)} at once"
                   + (f" in {where}" if where else "") + ": a size no model produces, so the number itself is "
                   "wrong (an overflow or an uninitialised size in compiled code, usually an extension built for "
                   "another CUDA toolkit or torch).")]
