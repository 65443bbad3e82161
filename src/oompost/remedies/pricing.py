"""One price per configuration: the memory model's peak for a change to the run.

Every number the report prints for a change (a ranked fix, the rerun plan,
an alternative) comes from ``Pricer.what_if``: the change is resolved into the
estimator's ``TrainSetup`` first, and one ``TrainSetup`` has one estimate (a
cache keyed by it), so two descriptions of the same configuration can never
carry two predictions.  The estimator is called only through its public
``estimate()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.context import Context, make_train_setup
from ..analysis.whatif import WhatIf
from ..estimate.memory import Estimate, TrainSetup, estimate
from ..units import fmt_bytes

MARGIN = 0.90          # a plan must stay under this share of the limit ("fits")
HEADROOM_WARN = 0.02   # a replay that ends less than 2 % under the limit is flagged


@dataclass
class Pricer:
    """Memoised what-if estimates for one analysis context."""

    ctx: Context
    _cache: dict[Any, Estimate | None] = field(default_factory=dict)
    _blind: list[str | None] = field(default_factory=list)        # blind_spot(), once worked out

    def setup(self, **overrides: Any) -> TrainSetup | None:
        try:
            return make_train_setup(self.ctx.setup, **overrides)
        except (TypeError, ValueError):
            return None

    def what_if(self, label: str, **overrides: Any) -> WhatIf | None:
        if self.ctx.spec is None:
            return None
        ts = self.setup(**overrides)
        if ts is None:
            return None
        key = _key(ts)
        if key not in self._cache:
            try:
                self._cache[key] = estimate(self.ctx.spec, ts, device_bytes=self.ctx.limit_bytes,
                                            allocator_cap=self.ctx.allocator_cap)
            except (TypeError, ValueError):
                self._cache[key] = None
        est = self._cache[key]
        return None if est is None else WhatIf(label, dict(overrides), est)

    def blind_spot(self) -> str | None:
        """Why no setting can be priced for this failure, or None.  The failing step was larger than the
        inputs describe when the memory model fits the configuration as the inputs show it under the limit
        while live memory at the OOM was more than 1.3x the peak of every step that ran (one long document):
        a price for the logged shape says nothing about the batch that failed.  Two long-document captures
        (sample_logs/activation_spike_fsdp2_* and *_compiled_long_doc_*) showed it: gradient checkpointing,
        priced at the logged shape as fitting, failed on the GPU.  Without a step series, a snapshot whose failing
        line asked many times what it allocated in the steps that ran says the same."""
        if not self._blind:
            self._blind.append(self._blind_spot())
        return self._blind[0]

    def _blind_spot(self) -> str | None:
        from ..analysis.site_history import LARGER_BATCH
        from ..analysis.steps import larger_step

        ctx = self.ctx
        grow = larger_step(ctx.steps, ctx.oom.allocated_bytes if ctx.oom is not None else None)
        why = f"needed {grow:.1f}x the memory of every step that ran" if grow else ""
        if not grow and ctx.snapshot is not None and ctx.oom is not None:
            # the snapshot's trace: the failing line allocated far more than in the steps that ran
            hist = ctx.site_history
            if hist is not None and hist.ratio >= LARGER_BATCH:
                why = f"asked {hist.ratio:.0f}x what its line ({hist.site}) allocated in the steps that ran"
        L = ctx.limit_bytes
        if ctx.spec is None or not why or not L:
            return None
        as_logged = self.what_if("as the inputs show it")
        if as_logged is None or as_logged.peak > L:
            return None
        return (f"the batch that failed {why}, and its shape is not in the inputs (the memory model puts the "
                f"logged shape at {fmt_bytes(as_logged.peak)}, under the {fmt_bytes(L)} limit)")

    def same_config(self, a: dict[str, Any], b: dict[str, Any]) -> bool:
        """Whether two override sets describe one configuration."""
        ta, tb = self.setup(**a), self.setup(**b)
        return ta is not None and tb is not None and _key(ta) == _key(tb)


def _key(ts: TrainSetup) -> Any:
    # notes and auto_keys describe how the setup was read, not what runs
    from dataclasses import fields

    return tuple((f.name, getattr(ts, f.name)) for f in fields(ts) if f.name not in ("notes", "auto_keys"))


def verdict(peak: int | None, limit: int | None) -> str:
    """'fits' (under MARGIN of the limit), 'tight' (under the limit), 'too_large', or '' (not priced)."""
    if peak is None or not limit:
        return ""
    if peak <= MARGIN * limit:
        return "fits"
    if peak <= limit:
        return "tight"
    return "too_large"


# Where the memory model was measured (docs/estimator_accuracy.md, README "Limits").
MEASURED_FAMILIES = ("llama",)                   # Llama / Qwen-family decoders
MEASURED_DEEPSPEED = "0.19"
MEASURED_TORCH = ("2.11",)


def uncertainty(ctx: Context) -> tuple[float, str]:
    """(relative uncertainty, why) of a predicted peak for this run: 0 inside the
    measured range, wider outside it (another architecture, another DeepSpeed or
    torch release).  The widths are judgement, stated as such, not measurements."""
    why: list[str] = []
    width = 0.0
    spec = ctx.spec
    if spec is not None and getattr(spec, "family", "llama") not in MEASURED_FAMILIES:
        why.append(f"a {spec.family} model (measured: Llama/Qwen-family)")
        width = max(width, 0.20)
    ds = ctx.setup.deepspeed_version
    if ctx.setup.deepspeed and ds and not ds.startswith(MEASURED_DEEPSPEED):
        why.append(f"DeepSpeed {ds} (measured: {MEASURED_DEEPSPEED}.x)")
        width = max(width, 0.10)
    tv = ctx.setup.torch_version
    if tv and not tv.startswith(MEASURED_TORCH):
        why.append(f"torch {tv.split('+')[0]} (measured: {', '.join(MEASURED_TORCH)})")
        width = max(width, 0.05)
    if not why:
        return 0.0, ""
    return width, (f"±{width:.0%}: outside the memory model's measured range (" + "; ".join(why) + ")")
