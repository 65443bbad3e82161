"""ADV005 — the snapshot's allocation history does not reach back to the start.

**Cause**  ``_record_memory_history(max_entries=N)`` keeps a ring buffer: a
long run keeps only its last N events, so the timeline starts mid-run and the
live state before it is inferred from the final segments.

**Fix**  Usually nothing: the moments before the OOM are what matter.  For
a full timeline raise ``max_entries`` (each entry costs a few hundred bytes
with Python stacks) or start recording later.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, Severity


class TraceTruncated:
    code = "ADV005"
    cause = Cause.UNKNOWN

    def evaluate(self, ctx: Context) -> list[Finding]:
        s = ctx.snapshot
        if s is None or not any("truncated" in w or "mid-run" in w for w in s.warnings):
            return []
        n = max((len(t) for t in s.traces), default=0)
        return [Finding(
            self.code, self.cause, f"The snapshot's history holds only the last {n:,} allocator events", 0.9,
            fixes=(Fix("code", "torch.cuda.memory._record_memory_history", f"max_entries={max(n * 4, 100_000)}",
                       "a longer ring buffer shows more of the run"),),
            detail=next(w for w in s.warnings if "truncated" in w or "mid-run" in w),
            severity=Severity.ADVICE, sub_cause="trace_truncated")]
