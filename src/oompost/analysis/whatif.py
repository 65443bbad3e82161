"""What-if estimates: the memory model re-run with one change to the run.

Rules use it to say what a fix would buy ("offload_optimizer: 23.1 → 9.8
GiB"), the rerun planner to choose the smallest change that fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..estimate.memory import Estimate, estimate
from .context import Context, make_train_setup


@dataclass(frozen=True, slots=True)
class WhatIf:
    label: str
    overrides: dict[str, Any]
    estimate: Estimate

    @property
    def peak(self) -> int:
        return self.estimate.predicted_peak_bytes


def what_if(ctx: Context, label: str, **overrides: Any) -> WhatIf | None:
    if ctx.spec is None:
        return None
    try:
        ts = make_train_setup(ctx.setup, **overrides)
        return WhatIf(label, overrides, estimate(ctx.spec, ts, device_bytes=ctx.limit_bytes,
                                                 allocator_cap=ctx.allocator_cap))
    except (TypeError, ValueError):
        return None


def fits(w: WhatIf | None, limit: int | None, margin: float = 0.95) -> bool:
    return w is not None and limit is not None and w.peak <= margin * limit


def fit_words(w: WhatIf, limit: int | None, too_large: str = "still too large") -> str:
    """How a what-if's peak sits against the limit, in a fix's words: "fits" (``fits``' margin), "tight" (under
    the limit by less than that margin), or ``too_large``."""
    if fits(w, limit):
        return "fits"
    return "tight: under the limit by less than 5 %" if limit and w.peak <= limit else too_large

