"""LEAK002 — every batch's outputs are kept on the GPU until they no longer fit.

**Cause**  The failing allocation concatenates (or gathers) per-batch results —
logits, predictions, embeddings — onto what earlier batches left on the GPU.
The HF Trainer's evaluation/prediction loop does this with ``nested_concat``
unless ``eval_accumulation_steps`` moves the results to the host; hand-written
loops do it with ``torch.cat(all_logits)``.  The kept set grows batch after
batch, so the OOM comes late in the loop (a retained-memory leak, DESIGN's
``leak``), whatever the batch size.

A snapshot shows the same without the failing frame: the buffer the outputs are
concatenated into is live at the OOM, a material share of memory, whichever
allocation failed (the next batch's loss, say).

**Fix**  Move results off the GPU as they are produced: ``eval_accumulation_steps``
(HF Trainer), ``preprocess_logits_for_metrics`` returning ``argmax`` instead of
full logits, ``.detach().cpu()`` (or running metric sums) in your own loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...analysis.context import Context
from ...analysis.phase import Phase
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b, frame_where, oom_refs


@dataclass(frozen=True)
class _Reading:
    """What one kind of evidence says: the signal it gives, its figures, whether the HF Trainer is the keeper,
    and the sentence for the report."""
    signal: tuple[str, float]
    numbers: tuple[tuple[str, str], ...]
    hf: bool
    detail: str


def _at_the_failing_frame(ctx: Context) -> _Reading | None:
    """The failing allocation itself concatenates per-batch outputs (nested_concat, torch.cat(all_logits))."""
    fr = ctx.phase.frame
    if ctx.phase.phase is not Phase.RETAINED:
        return None
    where = frame_where(fr) if fr else "a frame"
    return _Reading((f"the failing allocation concatenates per-batch outputs on the GPU: {where}", 0.55),
                    (("failing frame", where),), bool(fr and "transformers" in fr.filename.replace("\\", "/")),
                    "The OOM is raised while per-batch outputs are appended to what earlier batches left on the "
                    "GPU: the kept set grows with every batch until it no longer fits, however small the batch.")


def _in_the_snapshot(ctx: Context) -> _Reading | None:
    """The buffer per-batch outputs are concatenated into is live at the OOM, whichever allocation failed."""
    r = ctx.retention
    cat = r.concatenated if r is not None else None
    if cat is None:
        return None
    where = cat.label.rsplit("/", 1)[-1]
    share = cat.bytes / r.live_bytes if r.live_bytes else 0.0
    grown = (f"; the trace shows it re-allocated larger by {b(cat.step)} each time, one batch's outputs "
             "concatenated onto the whole") if cat.step else ""
    return _Reading((f"{b(cat.bytes)} of live memory ({100 * share:.0f}%) is the buffer per-batch outputs are "
                     f"concatenated into ({where}) at the OOM", 0.55),
                    (("concatenated outputs at the OOM",
                      f"{b(cat.bytes)} in {cat.blocks} block(s), {100 * share:.0f}% of {b(r.live_bytes)} live"),
                     ("allocated at", where))
                    + ((("grows per batch (trace)", b(cat.step)),) if cat.step else ()), "transformers" in cat.label,
                    f"At the OOM, {b(cat.bytes)} of live memory is the buffer every batch's outputs are concatenated "
                    f"into ({where}){grown}: it grows with every batch until the next allocation, whatever it is, "
                    "no longer fits, however small the batch.")


def _inside_the_loop(ctx: Context) -> _Reading | None:
    """Only the loop is known: the HF Trainer's evaluation, which keeps every batch's outputs on the GPU unless
    eval_accumulation_steps is set (or no compute_metrics asks for them)."""
    loop = ctx.keeping_loop
    if loop is None:
        return None
    where = frame_where(loop)
    return _Reading((f"the OOM struck inside the HF Trainer's {loop.name}, which keeps every batch's outputs on "
                     "the GPU unless eval_accumulation_steps is set", 0.45), (("failing inside", where),), True,
                    f"The OOM struck inside {where}: the HF Trainer keeps every evaluated batch's outputs (logits) "
                    "on the GPU until the loop ends unless eval_accumulation_steps is set, so the kept set grows "
                    "batch after batch and the next allocation, whatever it is, fails. A snapshot shows the kept "
                    "buffer; without one this rests on the loop alone.")


class RetainedOutputs:
    code = "LEAK002"
    cause = Cause.LEAK

    def evaluate(self, ctx: Context) -> list[Finding]:
        if ctx.oom is None:
            return []
        # the strongest reading the inputs allow: the failing frame, the snapshot's buffer, the loop alone
        r = _at_the_failing_frame(ctx) or _in_the_snapshot(ctx) or _inside_the_loop(ctx)
        if r is None:
            return []
        signals = [r.signal]
        if r.hf:
            signals.append(("the HF Trainer keeps every batch's logits on the GPU unless eval_accumulation_steps "
                            "is set", 0.1))
        cue = ctx.evidence.fact("cue.evaluation")
        if cue is not None:
            signals.append(("it happens in an evaluation / prediction loop", 0.05))
        fixes = []
        if r.hf:
            fixes.append(Fix("trainer_arg", "eval_accumulation_steps", "8",
                             "moves the accumulated predictions to the host every 8 batches"))
            fixes.append(Fix("code", "preprocess_logits_for_metrics", "return logits.argmax(-1)",
                             "keeps one id per token instead of a vocabulary-wide row of logits"))
        fixes.append(Fix("code", "keep results on the host", "outputs.detach().cpu() / running metric sums",
                         "what is kept for metrics no longer grows on the GPU batch after batch"))
        return [Finding(
            self.code, self.cause, "Every batch's outputs are kept on the GPU", confidence(signals),
            evidence=oom_refs(ctx) + ((cue.ref,) if cue is not None else ()),
            fixes=tuple(fixes),
            not_fixes=(NotAFix("a smaller eval batch size", "the kept outputs of the whole dataset stay the same size"),
                       NotAFix("torch.cuda.empty_cache()", "the kept outputs are live tensors")),
            signals=tuple(signals), numbers=r.numbers, detail=r.detail)]
