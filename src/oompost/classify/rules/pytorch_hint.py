"""ADV003 — PyTorch's "try expandable_segments" hint does not apply here.

**Cause**  Every caching-allocator OOM message ends with "If reserved but
unallocated memory is large try setting expandable_segments:True", whatever
the numbers say — even when it is already on.  It helps only when the
request would fit in the reserved-but-unallocated memory plus the headroom.

**Fix**  Ignore the hint when allocated + request exceeds the limit, or when
expandable segments are already on; follow the primary finding instead.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Severity
from ._common import b, headroom, limit_label


class PytorchHint:
    code = "ADV003"
    cause = Cause.FRAGMENTATION

    def evaluate(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        if o is None or "expandable_segments" not in o.ref.text and "max_split_size_mb" not in o.ref.text:
            return []
        R, ru, h = o.requested_bytes, o.reserved_unallocated_bytes, headroom(ctx)
        if R is None or ru is None or h is None:
            return []
        on = ctx.snapshot is not None and ctx.snapshot.expandable
        if on:
            why = "expandable segments are already on in this run (the allocator settings in the snapshot)"
        elif R > ru + h:
            why = (f"even with no fragmentation the {b(R)} request needs more than the {b(ru)} reserved-but-"
                   f"unallocated plus {b(h)} left below {limit_label(ctx)}")
        else:
            return []
        return [Finding(
            self.code, self.cause, "PyTorch's expandable_segments hint does not apply", 0.9,
            evidence=(o.ref,), detail=f"The message suggests expandable_segments:True, but {why}.",
            severity=Severity.ADVICE, sub_cause="hint_not_applicable")]
