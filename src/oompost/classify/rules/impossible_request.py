"""CFG004 — the failing request is larger than any tensor a model can make: its size is corrupt.

**Cause**  No model allocates petabytes in one tensor.  A request of millions of GiB ("Tried to allocate
67109892.01 GiB") is a size computed wrong before the allocator saw it: an integer overflow or an
uninitialised count inside a compiled CUDA extension, most often one built for another CUDA toolkit, GPU
architecture or torch version than the one it runs with (the rasteriser of 3D Gaussian splatting under CUDA
12.3 is a known case), or a negative size cast to unsigned.  The card's memory has nothing to do with it: a
larger GPU or a smaller batch does not help (DESIGN.md: a set-up mistake, ``config_error``).

**Fix**  Rebuild the extension against the installed torch and toolkit (matching ``TORCH_CUDA_ARCH_LIST``), or
install the toolkit it supports; check the inputs the failing call received (empty or NaN tensors give such
sizes too).
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b, oom_refs

# a thousand times the largest card there is: no tensor of a real model comes near it
IMPOSSIBLE_BYTES = 2**50


class ImpossibleRequest:
    code = "CFG004"
    cause = Cause.CONFIG_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        if o is None or o.requested_bytes is None or o.requested_bytes < IMPOSSIBLE_BYTES:
            return []
        R = o.requested_bytes
        signals = [(f"the failing request ({b(R)}) is more than a petabyte: no tensor is that large", 0.75)]
        where = ctx.location or None
        return [Finding(
            self.code, self.cause, "The failing request's size is corrupt, not a real tensor",
            confidence(signals), evidence=oom_refs(ctx),
            fixes=(Fix("code", "rebuild the CUDA extension in the failing call",
                       "against the installed torch and CUDA toolkit (TORCH_CUDA_ARCH_LIST for this GPU)",
                       "a size computed wrong inside compiled code (overflow, uninitialised count) reaches the "
                       "allocator"),
                   Fix("code", "check the inputs of the failing call", "",
                       "empty or NaN inputs can make a kernel compute a garbage size")),
            not_fixes=(NotAFix("a smaller batch, a larger GPU or expandable_segments",
                               f"no GPU holds {b(R)}: the size is wrong, not the memory"),),
            signals=tuple(signals), numbers=(("failed request", b(R)),),
            detail=f"The run asked the allocator for {b(R)} at once"
                   + (f" in {where}" if where else "") + ": a size no model produces, so the number itself is "
                   "wrong (an overflow or an uninitialised size in compiled code, usually an extension built for "
                   "another CUDA toolkit or torch).")]
