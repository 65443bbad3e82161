"""ACT001 — activations (or the loss, or a KV cache) do not fit.

**Cause**  Model states fit, and the failing allocation sits in forward,
backward, the loss or generation: saved activations grow with micro-batch ×
sequence length (attention scores with s² under eager attention), the fp32
logits and cross-entropy temporaries grow with micro-batch × sequence ×
vocabulary, a KV cache with batch × tokens.  Either one long batch after
quieter steps, or every step at the configured size.

**Fix**  Gradient checkpointing; a smaller micro-batch with more gradient
accumulation (same global batch); SDPA/flash attention instead of eager; a
chunked loss for large vocabularies; a cap on sequence length (or packing);
a smaller generation batch.  Offloading parameters or the optimizer does not
touch activations; fp16 and bf16 are both 2 bytes.  When the OOM is in an
evaluation pass (training steps fit), the evaluation batch is the knob:
``per_device_eval_batch_size`` — checkpointing saves nothing there, as no
backward runs.
"""

from __future__ import annotations

from ...analysis.context import Context, iterations_before_oom
from ...analysis.evaluation import evaluation_pass, generating
from ...analysis.site_history import LARGER_BATCH
from ...analysis.phase import Phase
from ...analysis.steps import larger_step, leak_trend, max_peak_allocated, noun
from ...analysis.whatif import fit_words, what_if
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import SPIKE_FROM_SCRATCH, b, headroom, limit_label, oom_refs
from ._inference import (evaluation_detail, evaluation_fixes, evaluation_numbers, evaluation_signals,
                         generation_fixes, inference_not_fixes)
from ._runtimes import runtime_fixes, runtime_not_fixes


def _configured_step_ran(ctx: Context) -> bool:
    """Training iterations at the configured batch finished before the OOM (a logged iteration, a tqdm bar of the
    training loop past 0, or optimizer steps in the snapshot's trace): a memory model pricing that step above the
    limit is contradicted by the run, so its price is no evidence that the step's activations fail."""
    return ctx.snapshot_steps > 0 or iterations_before_oom(ctx.evidence, ctx.oom) is not None


class ActivationSpike:
    code = "ACT001"
    cause = Cause.ACTIVATION_SPIKE

    def evaluate(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        if o is None or not ctx.phase.phase.is_activation:
            return []
        L = ctx.limit_bytes
        A = o.allocated_bytes
        signals: list[tuple[str, float]] = [(f"the failing allocation is in {ctx.phase.phase.value} "
                                             f"({ctx.phase.why})", 0.25)]
        numbers: list[tuple[str, str]] = []
        if L:
            numbers.append((limit_label(ctx), b(L)))
        if A is not None:
            numbers.append(("allocated at the OOM", b(A)))
        prior = max_peak_allocated(ctx.steps)
        completed = len(ctx.steps)
        if completed:
            signals.append((f"{completed} {noun(ctx.steps)}(s) of a running loop before it: model states fit", 0.1))
        elif ctx.estimate_min is not None and L and ctx.estimate_min.predicted_peak_bytes < 0.9 * L:
            signals.append((f"the smallest run (micro-batch 1, full recompute) needs "
                            f"{b(ctx.estimate_min.predicted_peak_bytes)}", 0.1))
        ev = evaluation_pass(ctx)
        gen = ev is None and generating(ctx)
        if ev is not None:
            signals += evaluation_signals(ctx, ev)
        spike = False
        hist = ctx.site_history
        if hist is not None and hist.ratio >= LARGER_BATCH and prior is None:
            spike = ev is None
            signals.append((f"the failing line ({hist.site}) allocated at most {b(hist.earlier_max)} in its "
                            f"{hist.earlier} earlier allocations in the trace; this request is {hist.ratio:.0f}x "
                            "that: a batch far larger than the ones that ran", 0.3))
        if prior is not None and A is not None:
            numbers.append(("peak allocated in earlier steps", b(prior)))
            if grow := larger_step(ctx.steps, A):
                spike = True
                signals.append((f"live memory at the OOM is {grow:.1f}x the earlier peak: one "
                                "larger batch", 0.3))
        elif ctx.estimate is not None and L and ev is None:
            act = ctx.estimate.step_peak_bytes
            numbers.append(("memory model: configured step peak", b(act)))
            least = ctx.estimate_min.predicted_peak_bytes if ctx.estimate_min is not None else None
            if least is not None and least > 1.03 * L:
                # the configured step's excess is the model states': micro-batch 1 with full recompute does
                # not fit either, so the activations are not what fails (DESIGN.md: capacity)
                signals.append((f"even micro-batch 1 with full recompute needs {b(least)} > {b(L)}: model "
                                "states, not activations", -0.3))
            elif act > L and not _configured_step_ran(ctx):
                signals.append((f"the configured micro-batch × sequence length needs {b(act)} per step", 0.25))
        elif A is not None and L and A >= 0.9 * L and (o.reserved_unallocated_bytes or 0) < 0.1 * L:
            signals.append(("live tensors fill the limit during the step (little is cached or fragmented)", 0.25))
        if leak_trend(ctx.steps) is not None:
            signals.append(("allocated memory grows every step: a leak, not the step's own activations", -0.3))
        if ctx.in_keeping_loop:
            # the HF Trainer's evaluation keeps every earlier batch's outputs on the GPU unless
            # eval_accumulation_steps is set: what filled the card may be those, not this batch
            signals.append(("the OOM is inside the HF Trainer's evaluation loop, which keeps every earlier batch's "
                            "outputs on the GPU unless eval_accumulation_steps is set", -0.2))
        ru = o.reserved_unallocated_bytes
        h = headroom(ctx)
        if o.requested_bytes and ru is not None and h is not None and o.requested_bytes > ru + h:
            signals.append(("even unfragmented, the request does not fit", 0.05))
        sub = self._sub(ctx)
        if ctx.own_runtime:
            fixes = list(runtime_fixes(ctx.own_runtime, self.cause))
        elif ev is not None:
            fixes = evaluation_fixes(ctx, ev, sub, hist)
        elif gen:
            fixes = generation_fixes(ctx, sub)
        else:
            fixes = self._fixes(ctx, sub, spike)
        numbers += [(k, v) for k, v in self._shape(ctx)]
        title = {"kv_cache": "The KV cache of generation does not fit",
                 "logits": "The logits and loss temporaries do not fit",
                 "attention": "Eager attention scores do not fit"}.get(
            sub or "", "Activations do not fit" + (" (one larger batch)" if spike else ""))
        if ev is not None and sub != "kv_cache":
            title = ("The evaluation batch's logits do not fit" if sub == "logits"
                     else "The evaluation batch does not fit")
        if ctx.own_runtime:
            # another runtime's program (JAX, TensorFlow, llama.cpp...): DeepSpeed's offload, PyTorch's cache and
            # DataLoader are not its settings
            not_fixes = [*runtime_not_fixes(ctx.own_runtime),
                         NotAFix("bf16 instead of fp16 (or back)", "both are 2 bytes per value")]
        else:
            not_fixes = [NotAFix("offload_param / offload_optimizer", "they move model states, not activations"),
                         NotAFix("bf16 instead of fp16 (or back)", "both are 2 bytes per value"),
                         NotAFix("torch.cuda.empty_cache()", "the activations are live tensors"),
                         NotAFix("lower DataLoader num_workers / pin_memory", "they use host memory")]
        not_fixes += inference_not_fixes(ev, gen)
        return [Finding(
            self.code, self.cause, title,
            confidence(signals), evidence=oom_refs(ctx) + tuple(p.reading.ref for p in ctx.steps[-2:]),
            fixes=tuple(fixes), not_fixes=tuple(not_fixes),
            signals=tuple(signals), numbers=tuple(numbers) + evaluation_numbers(ev), sub_cause=sub,
            detail=(evaluation_detail(ctx, ev) if ev is not None else
                    f"The OOM is in {ctx.phase.phase.value}" + (f" at {ctx.location}" if ctx.location else "")
                    + ". Model states fit; what no longer fits is what the step creates"
                    + (": this batch needed far more than the earlier ones." if spike else "."))
                   )]

    @staticmethod
    def _sub(ctx: Context) -> str | None:
        if ctx.phase.phase is Phase.GENERATION:
            return "kv_cache"
        if ctx.phase.phase in (Phase.LOSS, Phase.LOGITS):
            return "logits"
        frames = ctx.oom.stack.frames if ctx.oom else ()
        if any("eager_attention" in f.name or ("softmax" in f.name and "attention" in f.filename) for f in frames):
            return "attention"
        return None

    @staticmethod
    def _shape(ctx: Context) -> list[tuple[str, str]]:
        s = ctx.setup
        out = []
        for label, key in (("micro-batch", "micro_batch"), ("sequence length", "seq_len"),
                           ("gradient accumulation", "grad_accum"), ("gradient checkpointing", "grad_ckpt"),
                           ("attention", "attn")):
            v = s.get(key)
            if v is not None:
                out.append((label, str(v)))
        return out

    @staticmethod
    def _fixes(ctx: Context, sub: str | None, spike: bool = False) -> list[Fix]:
        s = ctx.setup
        L = ctx.limit_bytes
        out: list[Fix] = []
        if sub != "kv_cache" and not ctx.adapters_apply:
            # a network trained from scratch (a CNN, a detector): no trainer arguments, its own knobs
            return list(SPIKE_FROM_SCRATCH)
        if spike and sub != "kv_cache":
            # one batch far larger than every step that ran: its longest sample is the change that removes it
            # (checkpointing leaves the logits and the fp32 loss of a long document in place: two
            # long-document captures failed with it on the GPU and completed with the documents truncated)
            out.append(Fix("trainer_arg", "max_seq_length", "cap it at the longest that ran (or drop overlong "
                           "samples)", "one sample made this batch far larger than every step that ran; capped, "
                           "every batch stays the shape that fitted"))
        mb = int(s.get("micro_batch", 1) or 1)
        gas = int(s.get("grad_accum", 1) or 1)

        def pred(w) -> str:  # type: ignore[no-untyped-def]
            if w is None:
                return ""
            return f"; predicted peak {b(w.peak)} ({fit_words(w, L)})"

        if sub == "kv_cache":
            out.append(Fix("code", "generation batch size", "halve it (or cap max_new_tokens)",
                           "the KV cache grows with batch × (prompt + generated) tokens"))
        if not s.get("grad_ckpt", False) and sub != "kv_cache":
            w = what_if(ctx, "gradient checkpointing", grad_ckpt=True)
            out.append(Fix("trainer_arg", "gradient_checkpointing", True,
                           "keeps only each layer's input; recomputes the rest in backward" + pred(w)))
        if mb > 1:
            new = max(1, mb // 4) if mb >= 8 else max(1, mb // 2)
            w = what_if(ctx, "smaller micro-batch", micro_batch=new, grad_accum_steps=gas * (mb // new))
            out.append(Fix("trainer_arg", "per_device_train_batch_size", new,
                           f"with gradient_accumulation_steps={gas * (mb // new)} the global batch is unchanged"
                           + pred(w)))
        if str(s.get("attn", "")) == "eager" or sub == "attention":
            out.append(Fix("trainer_arg", "attn_implementation", "sdpa",
                           "eager attention materialises batch × heads × seq² scores"))
        if sub == "logits" or (ctx.spec is not None and ctx.spec.vocab >= 100_000):
            out.append(Fix("code", "chunked cross-entropy", "e.g. Liger kernel's fused linear cross-entropy",
                           "fp32 logits and their gradient take ~12 bytes × batch × seq × vocabulary"))
        if s.get("seq_len") is not None and not (spike and sub != "kv_cache"):
            out.append(Fix("trainer_arg", "max_seq_length", "cap it (or pack sequences)",
                           "one long document pads the whole batch to its length"))
        return out
