"""LEAK003 — a snapshot shows tensors kept from every earlier step.

**Cause**  A training step frees what its forward allocated before the next
optimizer step.  In this snapshot, live blocks at the OOM that a forward
allocated before the last optimizer step are still there, and one allocation
site holds more of them than a whole step allocates there: each step leaves
one behind (logits appended to a list for metrics, ``total_loss += loss``
keeping every step's graph, a forward hook that stores features).  Allocated
memory at the same point of the step rises by that much every step until the
limit — DESIGN.md's leak, read from its end instead of from step lines.

**Fix**  Keep Python numbers (``loss.item()``) or host copies
(``logits.argmax(-1).cpu()``, ``.detach().cpu()``) of what you keep; clear
lists that hooks fill; evaluate under ``torch.no_grad()``.  A smaller batch or
a larger card only delays the OOM; ``empty_cache()`` cannot free live tensors.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, confidence
from ._common import LEAK_NOT_FIXES, NO_GRAD_FIX, b, kept_signals, of_live, oom_refs, site_label


class KeptAcrossSteps:
    code = "LEAK003"
    cause = Cause.LEAK

    def evaluate(self, ctx: Context) -> list[Finding]:
        r = ctx.retention
        if r is None or not r.sites:
            return []
        top = r.sites[0]
        site = site_label(top.label)
        signals = [(f"{top.kept} live blocks of {b(top.block_bytes)} from {site} were allocated before the last "
                    f"optimizer step; one step allocates {top.per_step} there", 0.6)]
        signals += kept_signals(r, r.kept_bytes, "memory kept from earlier steps is")
        numbers = [("kept from earlier steps", f"{b(r.kept_bytes)} in {r.kept_blocks} blocks {of_live(r, r.kept_bytes)}"),
                   ("largest kept site", f"{top.kept} × {b(top.block_bytes)} at {site}"),
                   ("one step allocates there", str(top.per_step)),
                   ("optimizer-step boundaries in the trace", str(r.boundaries))]
        return [Finding(
            self.code, self.cause, "Tensors from every earlier step are still alive at the OOM",
            confidence(signals), evidence=oom_refs(ctx),
            fixes=(Fix("code", "keep host copies", "loss.item() / logits.argmax(-1).cpu() / .detach().cpu()",
                       f"{site} keeps {b(top.block_bytes)} on the GPU every step"),
                   NO_GRAD_FIX),
            not_fixes=LEAK_NOT_FIXES,
            signals=tuple(signals), numbers=tuple(numbers),
            detail=(f"At the OOM, {b(r.kept_bytes)} of live memory was allocated by forward passes before the last "
                    f"optimizer step, {top.kept} blocks of {b(top.block_bytes)} of it at {site}, where one step "
                    f"allocates {top.per_step}. A step frees its activations before the next optimizer step; these "
                    "survive every step, so allocated memory rises step after step until the limit."))]

