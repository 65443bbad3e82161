"""ADV004 — one rank needs much more memory than the others.

**Cause**  Uneven data (a rank that gets the long samples), rank-0-only work
(logging, evaluation, checkpoint gathering), or pipeline stages with unequal
layers.  The first rank to fail is then the one with the skew.

**Fix**  Balance the data (length-grouped sampling), move rank-0 work off the
training GPU or after ``empty_cache``, balance pipeline stages.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Severity
from ._common import b


class RankSkew:
    code = "ADV004"
    cause = Cause.ACTIVATION_SPIKE

    def evaluate(self, ctx: Context) -> list[Finding]:
        peaks = {r.rank: r.peak_bytes for r in ctx.ranks if r.peak_bytes}
        if len(peaks) < 2:
            return []
        hi_rank = max(peaks, key=lambda k: peaks[k])
        others = sorted(v for k, v in peaks.items() if k != hi_rank)
        median = others[len(others) // 2]
        if median <= 0 or peaks[hi_rank] < 1.3 * median:
            return []
        return [Finding(
            self.code, self.cause, f"Rank {hi_rank} peaks {peaks[hi_rank] / median:.1f}x above the other ranks",
            0.7, numbers=((f"rank {hi_rank} peak", b(peaks[hi_rank])), ("median of the others", b(median))),
            detail="Memory is not balanced across ranks; the heaviest rank sets the limit for the whole job.",
            severity=Severity.ADVICE, sub_cause="rank_skew")]
