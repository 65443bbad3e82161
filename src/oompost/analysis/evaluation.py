"""The evaluation pass (or generation) an OOM struck in, and what a smaller evaluation batch would need.

Training fits and evaluation does not: the HF Trainer's ``per_device_eval_batch_size`` (or a validation loop's
batch) is often set far above the training batch, because evaluation "keeps no activations".  It keeps no
activations for a backward, but one batch's forward still needs its logits (batch × sequence × vocabulary) and
the loss's fp32 temporaries at once.  This module finds such a pass from the failing stack, reads the evaluation
batch the log states, and scales the failing allocation to a smaller batch.  Pure: it reads the Context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model import Frame, SourceRef
from .logits import LOSS_FACTOR, inferred_logits_batch, logits_width

if TYPE_CHECKING:  # pragma: no cover
    from .context import Context

# frames of an evaluation / validation pass: the HF Trainer's, Lightning's hooks, the names loops give them
EVAL_FRAMES = frozenset({"evaluation_loop", "prediction_loop", "prediction_step", "evaluate", "validation_step",
                         "validate", "eval_step", "evaluation_step", "predict_step", "test_step", "run_evaluation",
                         "validation_epoch", "eval_epoch", "evaluate_epoch", "run_validation"})
_TRAINING_FRAMES = frozenset({"backward", "training_step", "_inner_training_loop", "train_step"})


@dataclass(frozen=True)
class EvalPass:
    frame: Frame                       # the evaluation frame the failing allocation runs in
    batch: int | None                  # the evaluation batch per device, when the log states it
    batch_ref: SourceRef | None       # None when the batch was read off the request (``batch_inferred``)
    hf: bool                           # the HF Trainer's loop: per_device_eval_batch_size is the knob
    logits_bytes_per_value: int | None  # 2 or 4 when the request is exactly batch × seq × vocab of that size
    batch_inferred: bool = False       # the batch is the request's whole number of sequences' logits


def evaluation_pass(ctx: "Context") -> EvalPass | None:
    """The evaluation pass the failing allocation runs in (the innermost frame of one on the OOM's stack, no
    backward or training step inside it), else None."""
    o = ctx.oom
    if o is None or not o.stack.frames:
        return None
    frames = o.stack.frames                       # outermost first: evaluation runs inside the training loop
    at = [i for i, f in enumerate(frames) if f.name in EVAL_FRAMES]
    if not at or any(f.name in _TRAINING_FRAMES for f in frames[at[-1]:]):
        return None
    fr = frames[at[-1]]
    v = ctx.setup.eval_batch
    if v is None and (rows := inferred_logits_batch(ctx)) is not None:
        hf = _hf(frames)
        return EvalPass(fr, rows[0], None, hf, rows[1], batch_inferred=True)
    return EvalPass(fr, int(v.value) if v is not None else None, v.ref if v is not None else None, _hf(frames),
                    logits_width(ctx, int(v.value) if v is not None else None))


def _hf(frames: tuple[Frame, ...]) -> bool:
    """The HF Trainer's evaluation (its per_device_eval_batch_size is the knob)."""
    return any(f.name in ("evaluation_loop", "prediction_loop", "prediction_step")
               and "trainer" in f.filename.replace("\\", "/").rsplit("/", 1)[-1] for f in frames)


def scaled_peak(ctx: "Context", ev: EvalPass, new_batch: int) -> int | None:
    """The peak (reserved) at evaluation batch ``new_batch``: what PyTorch held at the OOM, live and cached (kept
    as it is, though the batch's own tensors would shrink too), plus the failing allocation scaled to the new
    batch — times the loss's temporaries when it is the logits.  None without the figures."""
    o = ctx.oom
    if o is None or ev.batch is None or not o.requested_bytes or o.allocated_bytes is None or new_batch >= ev.batch:
        return None
    factor = LOSS_FACTOR.get(ev.logits_bytes_per_value or 0, 1.0)
    held = o.allocated_bytes + (o.reserved_unallocated_bytes or 0)    # live, and cached in partly used segments
    return int(held + o.requested_bytes * factor * new_batch / ev.batch)


def smaller_eval_batch(ctx: "Context", ev: EvalPass, margin: float = 0.9) -> tuple[int, int] | None:
    """The largest halving of the evaluation batch whose scaled peak stays under ``margin`` of the limit, with
    that peak; None when nothing is known or no halving fits."""
    L = ctx.limit_bytes
    if ev.batch is None or not L:
        return None
    b = ev.batch // 2
    while b >= 1:
        peak = scaled_peak(ctx, ev, b)
        if peak is None:
            return None
        if peak <= margin * L:
            return b, peak
        b //= 2
    return None


def generating(ctx: "Context") -> bool:
    """The failing allocation runs inside ``generate()`` (a transformers generation loop, its prefill or a decode
    step): inference, with no backward for checkpointing to help and no training batch to shrink."""
    from .phase import Phase

    o = ctx.oom
    if ctx.phase.phase is Phase.GENERATION:
        return True
    return o is not None and any(f.name == "generate" and "generation" in f.filename.replace("\\", "/")
                                 for f in o.stack.frames)
