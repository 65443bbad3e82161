"""UNK001 — no cause can be established from these inputs.

**Cause**  There is no failure evidence (no OOM message, no failing rank; or an
excerpt that ends inside a traceback, before the exception line that names
the error), or
the failure sits in a stack this version does not reason about (FSDP, ROCm,
MPS, a custom allocator), or the numbers are missing (a truncated message).
oompost says which, rather than guess.

**Fix**  Add what is missing: the complete stderr of the first failing rank,
and a memory snapshot taken in the OOM observer
(``python -m oompost.record -o DIR -- train.py ...``).
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix


class Unknown:
    code = "UNK001"
    cause = Cause.UNKNOWN

    def evaluate(self, ctx: Context) -> list[Finding]:
        ev = ctx.evidence
        reasons = []
        cut = ev.fact("traceback.cut")
        fixes = [Fix("code", "python -m oompost.record -o DIR -- train.py ARGS",
                     "a snapshot at the moment of the OOM",
                     "shows every live allocation with its stack, the free blocks and the allocator's history")]
        if not ev.ooms and not ev.failures and not ev.exits:
            if cut is not None:
                reasons.append(f"the inputs end inside a Python traceback (its last frame: {cut.value}) before the "
                               "exception line that names the error")
                fixes.insert(0, Fix("code", "the lines after the traceback's last frame",
                                    "paste the exception line (e.g. 'torch.OutOfMemoryError: CUDA out of memory. "
                                    "Tried to allocate ...') and what follows it",
                                    "the error and, for an OOM, its numbers decide the cause; the frames alone say "
                                    "only where it happened"))
            else:
                reasons.append("no OOM message, failure or rank exit was found in the inputs")
        o = ctx.oom
        if o is not None:
            frames = o.stack.frames
            if any("/fsdp/" in f.filename or "fully_sharded" in f.filename for f in frames):
                reasons.append("the OOM is inside FSDP, which this version does not model")
            if o.kind.value == "hip":
                reasons.append("a ROCm (HIP) OOM: allocator details differ from CUDA's")
            if o.truncated:
                reasons.append("the OOM message is truncated, so its numbers are missing")
            if (not frames or o.stack.statement_only) and not o.truncated:
                reasons.append("the OOM message comes without its traceback, so where the failing allocation "
                               "sits (model states, activations, a buffer) is unknown")
            if o.kind.value == "other":
                reasons.append(f"an allocator this version does not model ({o.message_format})")
        if not reasons:
            reasons.append("no rule's evidence was strong enough to decide")
        return [Finding(
            self.code, self.cause, "The cause cannot be established from these inputs", 0.3,
            evidence=((o.ref,) if o is not None else (cut.ref,) if cut is not None else ()),
            fixes=tuple(fixes),
            detail=_sentence("; ".join(reasons)), sub_cause=None)]


def _sentence(text: str) -> str:
    """``text`` with its first letter upper-cased and a full stop (str.capitalize would lower-case the rest: paths,
    "Python", "FSDP")."""
    return text[:1].upper() + text[1:] + "."
