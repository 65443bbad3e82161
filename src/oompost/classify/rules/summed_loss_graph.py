"""LEAK005 — PyTorch itself says a summed loss still holds its graph.

**Cause**  A validation (or running, total, epoch) loss summed as a tensor — ``val_loss += criterion(model(x),
y)`` outside ``torch.no_grad()``, or ``total_loss += loss`` with no backward through it — keeps the graph of every
term, and every saved activation the graph needs: memory kept from step to step, growing until the limit
(DESIGN.md's leak).  When the program turns that sum into a number, PyTorch warns "Converting a tensor with
requires_grad=True to a scalar may lead to unexpected behavior" and Python quotes the line: one naming an
accumulated loss is the leak's own source line, evidence where the log carries no memory series.  (A training
loss printed after its backward warns too but holds nothing; it names no accumulator and is not read.)

**Fix**  Evaluate under ``torch.no_grad()`` and sum ``loss.item()`` (or ``loss.detach()``).  A smaller batch or a
larger GPU only delays the OOM; ``empty_cache()`` cannot free the kept graphs.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, confidence
from ._common import LEAK_NOT_FIXES, NO_GRAD_FIX, oom_refs


class SummedLossGraph:
    code = "LEAK005"
    cause = Cause.LEAK

    def evaluate(self, ctx: Context) -> list[Finding]:
        cue = ctx.evidence.fact("cue.graph_kept")
        if cue is None or ctx.oom is None:
            return []
        name = str(cue.value)
        signals = [(f"PyTorch warned that `{name}` still requires grad when it was printed: the summed loss keeps "
                    "every term's graph and saved activations", 0.5)]
        if ctx.evidence.fact("cue.training_progress") is not None:
            signals.append(("iterations ran before the OOM: the kept graphs grew with them", 0.1))
        return [Finding(
            self.code, self.cause, f"The summed loss `{name}` keeps its graph from step to step",
            confidence(signals), evidence=(cue.ref,) + oom_refs(ctx),
            fixes=(Fix("code", f"{name} += loss.item()", "(or loss.detach())",
                       "a Python number keeps no graph; the sum then holds no activations"),
                   NO_GRAD_FIX),
            not_fixes=LEAK_NOT_FIXES, signals=tuple(signals), numbers=(("summed with its graph", name),),
            detail=(f"`{name}` is summed as a tensor that requires grad (PyTorch's warning quotes the line "
                    f"{cue.ref.text.strip()!r}): each term keeps its graph and the activations it saved, so live "
                    "memory grows with every term until the OOM."))]
