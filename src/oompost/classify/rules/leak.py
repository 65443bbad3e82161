"""LEAK001 — memory that should be freed every step is kept.

**Cause**  Allocated memory at the same point of the step rises step after
step until the limit.  The usual culprits: tensors that still hold the graph
or GPU storage are kept across steps — ``total_loss += loss`` instead of
``loss.item()``, outputs/logits appended to a list for metrics, a cache that
grows, hooks that store activations.

**Fix**  Keep Python numbers (``.item()``) or CPU copies
(``.detach().cpu()``) of what you log; ``del`` outputs you do not need;
evaluate under ``torch.no_grad()``.  A bigger GPU or a smaller batch only
delays the OOM; ``empty_cache()`` cannot free live tensors.
"""

from __future__ import annotations

from ...analysis.context import Context
from ...analysis.steps import leak_trend, noun
from ..base import Cause, Finding, Fix, confidence
from ._common import LEAK_NOT_FIXES, NO_GRAD_FIX, b, limit_label, oom_refs


class Leak:
    code = "LEAK001"
    cause = Cause.LEAK

    def evaluate(self, ctx: Context) -> list[Finding]:
        trend = leak_trend(ctx.steps)
        if trend is None:
            return []
        L = ctx.limit_bytes
        step = noun(trend.points)
        signals = [(f"allocated memory rose in {trend.rising_steps} consecutive {step}s "
                    f"({trend.first_step}→{trend.last_step})", 0.45 + min(0.2, 0.02 * (trend.rising_steps - 3)))]
        grown = trend.end_bytes - trend.start_bytes
        if L:
            if trend.end_bytes >= 0.5 * L or (ctx.oom is not None and trend.per_step_bytes * 3 + trend.end_bytes >= 0.8 * L):
                signals.append(("the growth carries the run to " + limit_label(ctx), 0.15))
            if grown >= 0.2 * L:
                signals.append((f"it grew by {b(grown)}, {100 * grown / L:.0f}% of the limit", 0.1))
        if ctx.oom is not None:
            signals.append(("the run then died of an OOM", 0.1))
        numbers = [(f"growth per {step} (median)", b(trend.per_step_bytes)),
                   (f"allocated at {step} {trend.first_step}", b(trend.start_bytes)),
                   (f"allocated at {step} {trend.last_step}", b(trend.end_bytes))]
        if L:
            # what runs out is the step's peak, not the memory at the point the lines measure
            last = ctx.steps[-1] if ctx.steps else None
            peak = getattr(last, "max_allocated", None) or trend.end_bytes
            if ctx.oom is not None:
                numbers.append((f"{step}s left at that rate", f"none: {step} {trend.last_step + 1} needed more "
                                                               f"than {limit_label(ctx)}"))
            else:
                left = max(0, L - max(peak, trend.end_bytes))
                numbers.append((f"{step}s left at that rate (from the step's peak)",
                                f"{left // max(1, trend.per_step_bytes)}"))
        where = self._where(ctx, trend.per_step_bytes)
        if where:
            signals.append((f"{where[1]} live blocks of ~{b(where[2])} allocated at {where[0]} at the OOM", 0.1))
            numbers.append(("retained allocations at the OOM", f"{where[1]} × ~{b(where[2])} from {where[0]}"))
        refs = tuple(p.reading.ref for p in trend.points[:2]) + tuple(p.reading.ref for p in trend.points[-2:])
        return [Finding(
            self.code, self.cause, "Memory grows every step: tensors are kept across steps", confidence(signals),
            evidence=refs + oom_refs(ctx),
            fixes=(Fix("code", "log scalars, not tensors", "loss.item() / tensor.detach().cpu()",
                       "a kept GPU tensor (or one that holds the graph) survives every step"),
                   Fix("code", "metrics on the host", "append logits.argmax(-1).cpu() or running sums",
                       f"each step keeps ~{b(trend.per_step_bytes)} alive" + (f" ({where[0]})" if where else "")),
                   NO_GRAD_FIX),
            not_fixes=LEAK_NOT_FIXES,
            signals=tuple(signals), numbers=tuple(numbers),
            detail=(f"Allocated memory measured at the same point of every step grew by {b(trend.per_step_bytes)} "
                    f"per step from step {trend.first_step} ({b(trend.start_bytes)}) to step {trend.last_step} "
                    if step == "step" else
                    f"The loop's memory prints (a line of the same shape, printed again and again, without a step "
                    f"number) grew by {b(trend.per_step_bytes)} per print from print {trend.first_step} "
                    f"({b(trend.start_bytes)}) to print {trend.last_step} ")
                   + f"({b(trend.end_bytes)}). Memory that is freed each step cannot do that: something keeps a "
                   "tensor from every step.")]

    @staticmethod
    def _where(ctx: Context, per_step: int) -> tuple[str, int, int] | None:
        """The allocation site of many similar live blocks at the OOM (the retained tensors)."""
        if ctx.snapshot is None:
            return None
        try:
            from ...analysis.snapshot_metrics import top_stacks

            groups = top_stacks(ctx.snapshot, n=5)
        except Exception:
            return None
        for g in groups:
            if g.count >= 3 and per_step > 0 and 0.3 * per_step <= g.bytes / g.count <= 3 * per_step:
                return g.frame_label, g.count, g.bytes // g.count
        return None
