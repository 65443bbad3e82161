"""LEAK004 — a snapshot shows every batch's output kept since the last optimizer step (or, where the trace
holds no optimizer step, every batch's output a whole forward pass apart).

**Cause**  After the last optimizer step the program ran batch after batch
without stepping — an evaluation, a prediction loop, a metric pass — and
each batch left a tensor of the same size from the same line alive: the
batch's logits or outputs appended to a list on the GPU (``all_logits.append(
accelerator.gather_for_metrics(outputs.logits))``, ``preds.append(out)``).
The live set grows by one output per batch until the limit, however small
the batch — DESIGN.md's leak, within one loop instead of across steps.  An
inference script (no training at all), or an evaluation whose trace no longer
reaches back to a training step, has no optimizer step to date by: there
each block must lie a whole forward pass from the next (the model's
per-layer sites run again in between) with that forward's own memory gone.  The
blocks lie a batch apart in the allocator's trace, which is what tells them
from one forward's per-layer activations (same line, same size, but a layer
apart).

**Fix**  Keep what the metric needs on the host, reduced
(``logits.argmax(-1).cpu()``, ``.detach().cpu()``), or update the metric
batch by batch; under the HF Trainer, ``eval_accumulation_steps`` and
``preprocess_logits_for_metrics``.  A smaller evaluation batch only delays
the OOM.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, confidence
from ._common import LEAK_NOT_FIXES, b, kept_signals, of_live, oom_refs, site_label


class KeptAcrossBatches:
    code = "LEAK004"
    cause = Cause.LEAK

    def evaluate(self, ctx: Context) -> list[Finding]:
        r = ctx.retention
        if r is None or not r.batch_sites:
            return []
        top = r.batch_sites[0]
        site = site_label(top.label)
        kept = top.kept * top.block_bytes
        # with no optimizer step in the trace (an inference script, an evaluation after training) the batches
        # are dated by the whole forward pass between them (retention._kept_by_forwards)
        since = "after the last optimizer step" if r.boundaries else "a whole forward pass apart"
        signals = [(f"{top.kept} live blocks of {b(top.block_bytes)} from {site}, each allocated by a different "
                    f"batch {since}", 0.55)]
        signals += kept_signals(r, kept, "those batches' outputs are")
        numbers = [("kept batch after batch", f"{top.kept} × {b(top.block_bytes)} at {site} {of_live(r, kept)}"),
                   ("optimizer-step boundaries in the trace", str(r.boundaries))]
        return [Finding(
            self.code, self.cause, "Every batch's output " + ("since the last optimizer step " if r.boundaries else "")
            + "is still alive at the OOM",
            confidence(signals), evidence=oom_refs(ctx),
            fixes=(Fix("code", "keep reduced host copies", "logits.argmax(-1).cpu() / .detach().cpu(), or update "
                       "the metric batch by batch",
                       f"{site} leaves {b(top.block_bytes)} on the GPU for every batch"),)
            + ((Fix("trainer_arg", "eval_accumulation_steps", "e.g. 8 (with preprocess_logits_for_metrics)",
                    "the HF Trainer moves accumulated predictions to the host every N evaluation batches"),)
               if ctx.under_hf_trainer else ()),
            not_fixes=LEAK_NOT_FIXES,
            signals=tuple(signals), numbers=tuple(numbers),
            detail=(f"At the OOM, {top.kept} blocks of {b(top.block_bytes)} allocated at {site} by successive "
                    f"batches {since} are still alive. A loop that only reads its outputs "
                    "frees each batch's before the next; these were kept, so live memory grew by one output per "
                    "batch until the limit."))]
