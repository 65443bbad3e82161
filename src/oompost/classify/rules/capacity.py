"""CAP001 — the configured run can never fit on this GPU.

**Cause**  Model states under the configured ZeRO stage and offload (16-bit
weights, gradients, fp32 master weights and Adam moments: ~18 bytes/param
before partitioning) plus DeepSpeed's start-up peak (ZeRO-1/2 hold the module
and its flat 16-bit copy: ~4 bytes/param during ``initialize``) plus the
activations of the smallest batch (micro-batch 1, the configured sequence
length, full recompute) exceed what the process may use.  A small request
failing next to some "reserved but unallocated" memory is still capacity when
what remains to be allocated — the rest of the optimizer state — cannot fit
either.  PyTorch's ``expandable_segments`` hint does not apply.  Training
iterations finished before the OOM (a step series, a tqdm bar of the training
loop, a logged loss) say the states fitted; a memory model pricing them above
the limit is then set aside (``analysis/context.py``).  With a
snapshot and no memory model, the live blocks stand in for it
(``analysis/snapshot_states.py``): weights, a gradient of each, optimizer state.

**Fix**  Partition or move model states: a higher ZeRO stage across more
GPUs, ``offload_optimizer`` (and at stage 3 ``offload_param``) to CPU/NVMe,
LoRA/QLoRA, or a smaller model.  A smaller micro-batch cannot help: model
states do not depend on it.  A run without DeepSpeed gets its own knobs first
(LoRA, an 8-bit optimizer), then sharding (FSDP or ZeRO-3, priced as ZeRO-3
with CPU offload), not ds_config keys it has no file for.
"""

from __future__ import annotations

from dataclasses import replace

from ...analysis.context import Context, iterations_before_oom
from ...analysis.phase import Phase
from ...analysis.steps import noun
from ...analysis.whatif import WhatIf, fit_words, what_if
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import CAPACITY_FROM_SCRATCH, CAPACITY_NO_DEEPSPEED, HOLD, SERVING_CAPACITY_FIXES, b, headroom, limit_label, oom_refs
from ._runtimes import runtime_fixes, runtime_not_fixes

_STARTUP = (Phase.MODEL_INIT, Phase.MODEL_TO_DEVICE, Phase.ZERO_INIT, Phase.OPTIMIZER_INIT, Phase.GRAD_PARTITION,
            Phase.OPTIMIZER_STEP, Phase.CHECKPOINT_LOAD)


class Capacity:
    code = "CAP001"
    cause = Cause.CAPACITY

    def evaluate(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        L = ctx.limit_bytes
        # (without a limit — a bare "out of memory" — only where the failing allocation sits can speak)
        if o is None or o.kind.value not in ("caching_allocator", "hip", "malloc_async", "cuda_error",
                                             "cublas", "cudnn", "other"):
            return []
        signals: list[tuple[str, float]] = []
        numbers: list[tuple[str, str]] = [(limit_label(ctx), b(L))] if L else []
        # a step series in the log, or optimizer steps the snapshot's trace shows finished before the OOM
        completed = len(ctx.steps) > 0 or ctx.snapshot_steps > 0
        startup_phase = ctx.phase.phase in _STARTUP
        e = ctx.estimate_min if L else None
        ran = iterations_before_oom(ctx.evidence, o)
        if e is not None:
            need = e.predicted_peak_bytes
            states = e.model_states_bytes
            ds = ctx.setup.deepspeed
            numbers += [("model", f"{int(ctx.setup.get('model_params')):,} params"),
                        ("model states per GPU (configured ZeRO/offload)" if ds else
                         "model states (weights, gradients, optimizer)", b(states)),
                        *((("start-up peak (deepspeed.initialize)", b(e.startup_peak_bytes)),) if ds else ()),
                        ("smallest run: micro-batch 1, full recompute", b(need))]
            if need > 1.03 * L:
                signals.append((f"even micro-batch 1 with full recompute needs {b(need)} > {b(L)}", 0.55))
                if states > L:
                    signals.append(("model states alone exceed " + limit_label(ctx), 0.15))
            elif need < 0.9 * L:
                if not startup_phase or completed:
                    return []
                signals.append(("the memory model says the smallest run fits", -0.2))
        ss = ctx.snapshot_states if e is None else None
        if ss is not None and L and ss.weights_bytes >= 0.15 * L:
            numbers += [("weights (the snapshot's model-building allocations)", b(ss.weights_bytes)),
                        ("gradients of those weights live at the OOM", b(ss.grad_bytes)),
                        ("optimizer state live at the OOM", b(ss.optimizer_bytes))]
            trained = "the weights and a gradient of each" if ss.trains_all_weights else "the weights"
            if ss.floor_bytes >= 0.97 * L:
                signals.append((f"{trained}{' plus the optimizer state' if ss.optimizer_bytes else ''} take "
                                f"{b(ss.floor_bytes)} of {b(L)}: no batch size fits (snapshot)", 0.55))
            elif ss.with_adam_bytes > 1.03 * L:
                signals.append((f"with Adam's two moments of every trained weight the states need "
                                f"{b(ss.with_adam_bytes)} > {b(L)} (snapshot)", 0.3))
        by_snapshot = any(w.endswith("(snapshot)") for w, _ in signals)
        if startup_phase and not completed:
            signals.append((f"the OOM is in a model-state phase ({ctx.phase.why}) before any step completed",
                            0.25 if e is not None else 0.45))
        h = headroom(ctx)
        if o.requested_bytes is not None and o.reserved_unallocated_bytes is not None and h is not None:
            if o.requested_bytes > o.reserved_unallocated_bytes + h:
                signals.append(("the request exceeds everything still free: not fragmentation", 0.1))
        if ctx.steps:
            signals.append((f"{len(ctx.steps)} {noun(ctx.steps)}(s) of a running loop before it, so the model states "
                            "did fit", -0.4))
        elif completed:
            signals.append((f"{ctx.snapshot_steps} optimizer step(s) in the snapshot's trace finished before it, so "
                            "the model states did fit", -0.4))
        elif ran is not None:
            signals.append(("training iterations finished before it (log line "
                            f"{ran.ref.line}), so the model states did fit", -0.4))
        if ctx.phase.phase is Phase.MODEL_TO_DEVICE and ctx.setup.get("zero_stage") != 3:
            n = ctx.setup.get("model_params")
            if n and L and int(n) * 2 > L:
                signals.append(("the 16-bit weights alone exceed " + limit_label(ctx), 0.2))
        conf = confidence(signals)
        if conf <= 0 or not any(w > 0 for _, w in signals):
            return []
        if o.allocated_bytes is not None:
            numbers.append(("allocated at the OOM", b(o.allocated_bytes)))
        if o.requested_bytes is not None:
            numbers.append(("failed request", b(o.requested_bytes)))
        # an inference runtime or server has its own knobs: LoRA, ZeRO and offload are a trainer's
        fixes = (list(runtime_fixes(ctx.own_runtime, self.cause)) if ctx.own_runtime else
                 list(SERVING_CAPACITY_FIXES) if ctx.is_serving else self._fixes(ctx))
        label = limit_label(ctx)
        where = ("Where in the run it failed is not in the inputs" if ctx.phase.phase is Phase.UNKNOWN
                 else f"The run fails in {ctx.phase.phase.value.replace('_', ' ')}")
        detail = (where + (f" at {ctx.location}" if ctx.location else "")
                  + (f". {label[:1].upper() + label[1:]} is {b(L)}. " if L else ". "))
        if e is not None and ctx.setup.deepspeed:
            detail += (f"Under the configured ZeRO stage {ctx.train_setup.zero_stage if ctx.train_setup else '?'} "
                       f"and offload, model states take {b(e.model_states_bytes)} per GPU and the start-up peak is "
                       f"{b(e.startup_peak_bytes)}; the smallest possible batch still needs {b(e.predicted_peak_bytes)}. "
                       "No batch size or allocator setting makes this fit.")
        elif e is not None:
            detail += (f"The weights, gradients and optimizer states this run keeps on the GPU take "
                       f"{b(e.model_states_bytes)}; the smallest possible batch still needs "
                       f"{b(e.predicted_peak_bytes)}. No batch size or allocator setting makes this fit.")
        elif ss is not None and by_snapshot:
            detail += (f"The snapshot's live blocks hold {b(ss.weights_bytes)} of weights (allocated where the model "
                       f"was built, loaded or moved to the GPU), {b(ss.grad_bytes)} of gradients (blocks of a "
                       f"weight's exact size) and {b(ss.optimizer_bytes)} of optimizer state. "
                       + ("Every weight is trained, so each needs a gradient of its size"
                          + (" and Adam two moments more" if ss.floor_bytes < 0.97 * L else "")
                          if ss.trains_all_weights else "No gradients are kept for these weights")
                       + ": no batch size or allocator setting makes this fit.")
        elif startup_phase and not completed:
            detail += "The failing allocation builds model states, before any training step ran."
        else:
            detail += ("Without the model size or the configuration, the argument rests on the OOM's numbers: "
                       "the request does not fit in what is still free.")
        # the strong claim only where a memory model, the snapshot's states or a start-up failure makes it; from the
        # OOM's numbers alone the finding says what they show
        proven = ((e is not None and e.predicted_peak_bytes > 1.03 * L) or by_snapshot
                  or (startup_phase and not completed))
        title = ("Model states do not fit: the run cannot fit at any batch size" if proven else
                 "The run needs more memory than is left: the request exceeds everything still free")
        return [Finding(
            self.code, self.cause, title, conf,
            evidence=oom_refs(ctx), fixes=tuple(fixes),
            not_fixes=(*(runtime_not_fixes(ctx.own_runtime) if ctx.own_runtime else (
                         NotAFix("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                                 "the memory is needed, not fragmented (PyTorch prints this hint on every OOM)"),
                         NotAFix("torch.cuda.empty_cache()", "nothing is cached that could be returned"))),
                       *((NotAFix("a smaller micro-batch or gradient accumulation", "model states do not shrink with it"),)
                         if (e is not None or by_snapshot or (startup_phase and not completed))
                         and not (ctx.own_runtime or ctx.is_serving) else ()),
                       *((NotAFix("offload_param at ZeRO stage < 3", "DeepSpeed ignores it below stage 3"),)
                         if ctx.setup.offload_param != "none" and ctx.setup.get("zero_stage") in (1, 2) else ())),
            signals=tuple(signals), numbers=tuple(numbers), detail=detail)]

    def _fixes(self, ctx: Context) -> list[Fix]:
        if not ctx.setup.deepspeed:
            return self._fixes_without_deepspeed(ctx)
        ws = int(ctx.setup.get("world_size", 1) or 1)
        stage = int(ctx.setup.get("zero_stage", 0) or 0)
        cands = []
        if ws > 1 and stage < 3:
            cands.append(("ds_config", "zero_optimization.stage", 3, what_if(ctx, "ZeRO-3", zero_stage=3),
                          f"shards the 16-bit weights too, across {ws} GPUs"))
        if ctx.setup.offload_optimizer == "none":
            cands.append(("ds_config", "zero_optimization.offload_optimizer",
                          {"device": "cpu", "pin_memory": True},
                          what_if(ctx, "offload_optimizer", offload_optimizer="cpu", zero_stage=max(stage, 1)),
                          "moves fp32 master weights and Adam moments (12 bytes/param) to host RAM"))
        if ctx.setup.offload_param == "none" or stage < 3:
            cands.append(("ds_config", "zero_optimization.stage + offload_param", {"stage": 3, "offload_param": {
                "device": "cpu", "pin_memory": True}, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
                _zero3_offload(ctx), "keeps only the layers being computed on the GPU (needs host RAM for the rest)"))
        if ctx.setup.get("lora_r") is None:
            cands.append(("trainer_arg", "lora_r", 16, _lora(ctx),
                          "trains adapters only: no gradients or optimizer state for the frozen weights"))
        return [Fix(kind, key, value, _priced(ctx, why, w)) for kind, key, value, w, why in cands]

    def _fixes_without_deepspeed(self, ctx: Context) -> list[Fix]:
        """A run without DeepSpeed: adapters and an 8-bit optimizer are changes to the run in hand; ZeRO or FSDP is
        a change of stack, priced as ZeRO-3 with CPU offload (on one GPU only offload frees memory)."""
        if not ctx.adapters_apply:          # a network trained from scratch: its size, precision, optimizer
            return list(CAPACITY_FROM_SCRATCH)
        lora, eight_bit, shard, larger = CAPACITY_NO_DEEPSPEED
        out = []
        if ctx.setup.get("lora_r") is None:
            out.append(Fix("trainer_arg", "lora_r", 16, _priced(
                ctx, "trains adapters only: no gradients or optimizer state for the frozen weights", _lora(ctx))))
        out.append(eight_bit)
        out.append(replace(shard, why=_priced(ctx, shard.why, _zero3_offload(ctx), "ZeRO-3 with CPU offload")))
        out.append(larger)
        return out


def _lora(ctx: Context) -> WhatIf | None:
    return what_if(ctx, "LoRA r=16", lora_rank=16, grad_ckpt=True)


def _zero3_offload(ctx: Context) -> WhatIf | None:
    return what_if(ctx, "ZeRO-3 + offload", deepspeed=True, zero_stage=3, offload_optimizer="cpu",
                   offload_param="cpu", micro_batch=1, grad_ckpt=True)


def _priced(ctx: Context, why: str, w: WhatIf | None, what: str = "") -> str:
    """``why`` with the what-if's predicted peak against the limit, when the memory model could price it."""
    if w is None:
        return why
    verdict = fit_words(w, ctx.limit_bytes, too_large="still does not fit")
    host = f", host RAM {b(w.estimate.host_bytes)}" if w.estimate.host_bytes else ""
    return f"{why}; {what + ': ' if what else ''}predicted peak {b(w.peak)} ({verdict}{host})"
