"""What ACT001 says when the failing step is no training step: an evaluation pass or a generation.

Neither runs a backward, so gradient checkpointing saves nothing and the training micro-batch is not what
failed.  An evaluation's knob is its own batch (``per_device_eval_batch_size``), priced by scaling the failing
allocation; a generation's are the attention kernel (an eager prefill holds batch × heads × prompt² scores) and
the batch or prompt.  The evidence an evaluation gives: its batch against the training batch, and a request that
is exactly one evaluation batch's logits, both only where less is live than the request (more could be outputs
the evaluation kept, which these cannot tell from a batch too large).
"""

from __future__ import annotations

from ...analysis.context import Context
from ...analysis.evaluation import EvalPass, smaller_eval_batch
from ...analysis.site_history import LARGER_BATCH, SiteHistory
from ..base import Fix, NotAFix
from ._common import b, frame_where


def inference_not_fixes(ev: EvalPass | None, gen: bool) -> list[NotAFix]:
    """The training knobs that do nothing in an evaluation pass or a generation."""
    if ev is None and not gen:
        return []
    what = "evaluation" if ev is not None else "generation"
    out = [NotAFix("gradient checkpointing", f"{what} runs no backward: nothing is saved for it to recompute"),
           NotAFix("a smaller per_device_train_batch_size",
                   "the training steps fit; the evaluation batch is what fails" if ev is not None
                   else "nothing is training: the generation's batch and prompt are what fail")]
    if ev is not None and ev.hf:
        out.append(NotAFix("eval_accumulation_steps", "it moves earlier batches' kept outputs to the host; this "
                           "batch's own forward is what does not fit"))
    return out


def generation_fixes(ctx: Context, sub: str | None) -> list[Fix]:
    out: list[Fix] = []
    if sub == "attention" or str(ctx.setup.get("attn", "")) == "eager":
        out.append(Fix("trainer_arg", "attn_implementation", "sdpa",
                       "eager attention materialises batch × heads × prompt² scores in the prefill; SDPA or "
                       "flash attention never holds them"))
    if sub == "kv_cache":
        out.append(Fix("code", "generation batch size", "halve it (or cap max_new_tokens)",
                       "the KV cache grows with batch × (prompt + generated) tokens"))
    else:
        out.append(Fix("code", "generation batch size / prompt length", "halve the batch, or cap the prompt",
                       "the prefill's activations grow with batch × prompt tokens"))
    return out


def evaluation_signals(ctx: Context, ev: EvalPass) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    o = ctx.oom
    if o is not None and o.allocated_bytes is not None and o.requested_bytes and o.allocated_bytes >= o.requested_bytes:
        # what is live could be outputs the evaluation kept from earlier batches (a list of logits): the
        # batch's size is no evidence either way (a captured Accelerate evaluation keeping every batch's
        # logits failed in a batch twice the training one)
        return out
    mb = ctx.setup.get("micro_batch")
    if ev.batch is not None and mb and ev.batch > int(mb):
        out.append((f"the evaluation batch ({ev.batch}) is {ev.batch / int(mb):.0f}x the training micro-batch "
                    f"({mb}) whose steps ran", 0.15))
    if ev.logits_bytes_per_value is not None and ctx.oom is not None:
        out.append((f"the failing allocation is exactly one evaluation batch's logits: {ev.batch} × "
                    f"{ctx.setup.get('seq_len')} × {ctx.spec.vocab if ctx.spec else '?':,} × "
                    f"{ev.logits_bytes_per_value} bytes = {b(ctx.oom.requested_bytes)}", 0.2))
    return out


def evaluation_numbers(ev: EvalPass | None) -> tuple[tuple[str, str], ...]:
    if ev is None:
        return ()
    out = (("failing inside", frame_where(ev.frame)),)
    said = f"{ev.batch} (inferred: the request is that many sequences' logits)" if ev.batch_inferred else str(ev.batch)
    return out + ((("evaluation batch", said),) if ev.batch is not None else ())


def evaluation_detail(ctx: Context, ev: EvalPass) -> str:
    return (f"The OOM is in {ctx.phase.phase.value} inside the evaluation pass ({frame_where(ev.frame)})"
            + (f" at evaluation batch {ev.batch}" if ev.batch is not None else "")
            + ". Evaluation keeps no activations for a backward, but one batch's forward still holds its "
            "logits and the loss's fp32 temporaries at once; the training steps fit, this batch does not.")


def evaluation_fixes(ctx: Context, ev: EvalPass, sub: str | None, hist: SiteHistory | None) -> list[Fix]:
    L = ctx.limit_bytes
    key = "per_device_eval_batch_size" if ev.hf else "evaluation batch size"
    kind = "trainer_arg" if ev.hf else "code"
    found = smaller_eval_batch(ctx, ev)
    out: list[Fix] = []
    if found is not None:
        new, peak = found
        out.append(Fix(kind, key, new, f"the failing allocation scales with the batch: {ev.batch} → {new} "
                       f"takes it to {b(ctx.oom.requested_bytes * new // ev.batch)}; predicted peak {b(peak)} "
                       f"of {b(L)} (what PyTorch held at the OOM plus the scaled allocation"
                       + (" and the loss's fp32 temporaries" if ev.logits_bytes_per_value else "") + ")"))
    elif ev.batch is None and hist is not None and hist.ratio >= LARGER_BATCH:
        out.append(Fix(kind, key, f"divide it by {hist.ratio:.0f} or more",
                       f"the failing line ({hist.site}) allocated {hist.ratio:.0f}x less in the training steps "
                       "that fitted: an evaluation batch that size needs what they needed there"))
    else:
        out.append(Fix(kind, key, "halve it (the training batch fits)" if ev.batch is None else max(1, ev.batch // 4),
                       "one evaluation batch's forward (its logits above all) grows with the batch"))
    if sub == "logits" or (ctx.spec is not None and ctx.spec.vocab >= 100_000):
        out.append(Fix("code", "chunked cross-entropy", "e.g. Liger kernel's fused linear cross-entropy",
                       "the loss then never holds batch × seq × vocabulary fp32 logits"))
    return out
