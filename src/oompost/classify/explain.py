"""A finding for the best-supported cause when no rule spelled one out.

Other people's logs are partial: an OOM message without its traceback, a
launcher line, an exception tail.  The verdict model can still say which
cause the evidence supports best (``verdict.decide``); this module turns that
into a finding a person can act on: the cause's usual fixes (DESIGN.md's
taxonomy), the lines it rests on, the signals that weighed most, and what
would settle it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import DATA_RUNTIMES, SourceRef
from .base import Cause, Finding, Fix, NotAFix
from .rules._common import (CAPACITY_FROM_SCRATCH, CAPACITY_NO_DEEPSPEED, LARGER_CARD, SERVING_CAPACITY_FIXES,
                            SPIKE_FROM_SCRATCH)
from .rules._runtimes import runtime_fixes, runtime_not_fixes

if TYPE_CHECKING:  # pragma: no cover
    from ..analysis.context import Context
    from .verdict import Verdict

_TITLES = {
    Cause.CONFIG_ERROR: "A configuration mistake stops the run",
    Cause.HOST_OOM: "Host RAM ran out",
    Cause.NCCL_ERROR: "A distributed (NCCL) failure, not memory",
    Cause.CAPACITY: "Model states do not fit on this GPU",
    Cause.LEAK: "Memory grows across steps (a leak)",
    Cause.COMM_BUFFER: "A communication buffer does not fit",
    Cause.FRAGMENTATION: "Fragmentation: the request fits in total free memory but in no single block",
    Cause.ACTIVATION_SPIKE: "Activations do not fit",
}

_DETAIL = {
    Cause.CONFIG_ERROR: "The run stops on a setting or set-up mistake, before memory is the question.",
    Cause.HOST_OOM: "The process was killed or failed for lack of host RAM (CPU offload, pinned buffers, "
                    "loader workers or checkpoint loading), not GPU memory.",
    Cause.NCCL_ERROR: "A collective failed or timed out with no memory failure: the other ranks' errors are "
                      "consequences of the first one.",
    Cause.CAPACITY: "The failing allocation belongs to what a run must hold before any batch (weights, "
                    "gradients, optimizer state, start-up copies): no batch size makes it fit.",
    Cause.LEAK: "Memory that should be released each step is retained, so live memory climbs until the limit.",
    Cause.COMM_BUFFER: "The allocation that failed belongs to communication (NCCL buffers or a DeepSpeed/FSDP "
                       "bucket), on a GPU that live tensors or the cache already fill.",
    Cause.FRAGMENTATION: "Enough memory is free inside PyTorch's reserved segments, but not in one block: the "
                         "allocator cannot place the request.",
    Cause.ACTIVATION_SPIKE: "Model states fit; what no longer fits is what the step creates: activations, "
                            "attention scores, logits and the loss, or a KV cache.",
}


# a library that keeps data, not activations, on the card (model.DATA_RUNTIMES): its capacity is the data's
_DATA_TITLE = "The data does not fit on this GPU"
_DATA_DETAIL = ("The library holds its working data on the card (a vector index, the quantised training matrix and "
                "its histograms, a dataframe): it needs more than the card has, and there are no activations or batch "
                "to shrink — shard the data over more GPUs, compress it, or keep part of it in host memory.")


_HEDGED_DETAIL = {
    Cause.CAPACITY: "The card is full of what the run holds, and nothing in the inputs points to one step's "
                    "activations: most likely the weights, gradients and optimizer state do not fit.",
    Cause.ACTIVATION_SPIKE: "The card is full of what the run holds, and what points to a step's activations "
                            "(the phase, the numbers) makes them the more likely excess.",
}


_FIXES = {
    Cause.CONFIG_ERROR: (Fix("ds_config", "the setting the error names", "correct it",
                             "the run stops on validation; memory was never the problem"),),
    Cause.HOST_OOM: (Fix("ds_config", "offload_optimizer.pin_memory", False,
                         "pinned host buffers cannot be swapped; pinning the whole optimizer needs its full size "
                         "in RAM per rank"),
                     Fix("trainer_arg", "dataloader_num_workers", "fewer (e.g. 2)",
                         "each worker holds its own copy of the dataset indices and prefetched batches"),
                     Fix("code", "load the checkpoint with low_cpu_mem_usage=True / mmap",
                         "one rank at a time", "every rank loading a full copy multiplies host RAM"),
                     Fix("env", "shm size", "--shm-size=16g (docker) or a larger /dev/shm",
                         "DataLoader workers pass batches through /dev/shm")),
    Cause.NCCL_ERROR: (Fix("env", "NCCL_DEBUG", "INFO",
                           "the first failing rank's NCCL lines say which link or peer failed"),
                       Fix("code", "find the first failing rank", "read its own error before the timeouts",
                           "the other ranks' timeouts and SIGTERMs are consequences")),
    Cause.CAPACITY: (Fix("ds_config", "zero_optimization.stage", 3,
                         "partitions weights, gradients and optimizer state across GPUs"),
                     Fix("ds_config", "zero_optimization.offload_optimizer.device", "cpu",
                         "moves the optimizer state (12 bytes per parameter) to host RAM"),
                     Fix("code", "LoRA / QLoRA", "train adapters instead of every weight",
                         "optimizer state only for the adapters"),
                     LARGER_CARD),
    Cause.LEAK: (Fix("code", "release per-step tensors", "loss.item() / .detach().cpu() before storing",
                     "a stored tensor keeps its whole autograd graph alive"),
                 Fix("code", "evaluation under torch.no_grad()", "with torch.no_grad(): ...",
                     "evaluation without no_grad builds graphs that are never freed")),
    Cause.COMM_BUFFER: (Fix("ds_config", "zero_optimization.reduce_bucket_size", 50_000_000,
                            "smaller buckets leave headroom for the rest of the step"),
                        Fix("code", "init_process_group(device_id=...)", "create communicators early",
                            "NCCL allocates its buffers at the first collective: before the model fills the card"),
                        Fix("env", "NCCL_NVLS_ENABLE", "0", "NVLS buffers take extra GPU memory per communicator")),
    Cause.FRAGMENTATION: (Fix("env", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                              "segments grow in place, so free memory is one block"),
                          Fix("env", "PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512",
                              "large blocks are not split for small requests (older torch)"),
                          Fix("code", "stable shapes", "pad to a few fixed lengths (bucketing)",
                              "varying shapes leave holes of varying sizes")),
    Cause.ACTIVATION_SPIKE: (Fix("trainer_arg", "gradient_checkpointing", True,
                                 "keeps only each layer's input; recomputes the rest in backward"),
                             Fix("trainer_arg", "per_device_train_batch_size", "halve it",
                                 "with gradient_accumulation_steps doubled the global batch is unchanged"),
                             Fix("trainer_arg", "max_seq_length", "cap it (or pack sequences)",
                                 "activations grow with micro-batch × sequence length"),
                             Fix("trainer_arg", "attn_implementation", "sdpa",
                                 "eager attention materialises batch × heads × seq² scores")),
}

# LoRA is already on: what is left of the model states is mostly the frozen 16-bit base.
_QLORA = Fix("code", "QLoRA", "load the frozen base in 4-bit (bitsandbytes nf4)",
             "with adapters already on, the 16-bit frozen weights are most of the model states")

_NOT = {
    Cause.CAPACITY: (NotAFix("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                             "nothing is fragmented: the model states themselves do not fit"),
                     NotAFix("torch.cuda.empty_cache()", "the memory is held by live tensors")),
    Cause.ACTIVATION_SPIKE: (NotAFix("offload_param / offload_optimizer", "they move model states, not activations"),
                             NotAFix("torch.cuda.empty_cache()", "the activations are live tensors")),
    Cause.FRAGMENTATION: (NotAFix("a smaller model", "the memory exists; it is split into pieces"),),
    Cause.HOST_OOM: (NotAFix("a smaller GPU batch", "the GPU did not run out"),),
    Cause.NCCL_ERROR: (NotAFix("smaller batch or expandable_segments", "no rank ran out of memory"),),
}

_KV_FIXES = (Fix("code", "generation batch size", "halve it (or cap max_new_tokens / max_model_len)",
                 "the KV cache grows with batch × (prompt + generated) tokens"),
             Fix("code", "gpu_memory_utilization", "lower it on a shared GPU, raise it on a dedicated one (vLLM)",
                 "it sets how much of the card the KV cache may take"),
             Fix("code", "--max-batch-prefill-tokens / --max-batch-total-tokens (TGI), --mem-fraction-static "
                 "(sglang)", "lower them",
                 "the server sizes its warm-up prefill and KV cache from them"))



def _growth(ctx: "Context") -> "tuple[str, tuple[SourceRef, ...]] | None":
    """What a rising memory figure the cue parser found shows, and its first and last lines."""
    n = ctx.evidence.fact("cue.memory_growing")
    span = ctx.evidence.fact("cue.memory_growing_range")
    if n is None or span is None:
        return None
    first, last = span.value

    def num(x: float) -> str:
        return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"

    times = f" ({last / first:.1f}×)" if 0 < first and last < 100 * first else ""
    return (f"A memory figure printed {n.value} times rises from {num(first)} to {num(last)}{times} "
            f"between the lines cited.", (n.ref, span.ref))


# Capacity and a step's activations fill the card alike: when the verdict leaves the other one close, the finding says
# so and its first fix is the one run that tells them apart, instead of stating either as fact.
CLOSE_ALTERNATIVE = 0.2
_SIZE_TEST = Fix("code", "one test step at micro-batch 1 (same sequence length / image size)", "",
                 "still fails: the model states do not fit (capacity); fits: this batch's activations were the excess")
_PAIR = {Cause.CAPACITY: Cause.ACTIVATION_SPIKE, Cause.ACTIVATION_SPIKE: Cause.CAPACITY}


def close_alternative(v: "Verdict") -> float:
    """The probability of the other of capacity / activation_spike when it is close behind ``v.cause``; 0 otherwise."""
    other = _PAIR.get(v.cause)
    p = dict(v.probabilities).get(other, 0.0) if other is not None else 0.0
    return p if p >= CLOSE_ALTERNATIVE else 0.0


def finding_for(ctx: "Context", v: "Verdict", settle: tuple[str, ...]) -> Finding:
    """The finding of ``v.cause`` built from the verdict's signals and the failure lines."""
    cause = v.cause
    refs = []
    if ctx.oom is not None:
        refs.append(ctx.oom.ref)
    refs += [f.ref for f in ctx.evidence.failures[:3]]
    refs += [e.ref for e in ctx.evidence.exits[:2]]
    sub = None
    fixes = _FIXES.get(cause, ())
    # another runtime's OOM gets that runtime's knobs (a setting blamed for it is one of its own settings too)
    if ctx.own_runtime and (cause in (Cause.ACTIVATION_SPIKE, Cause.CAPACITY, Cause.FRAGMENTATION)
                            or (cause is Cause.CONFIG_ERROR and ctx.oom is not None)):
        fixes = runtime_fixes(ctx.own_runtime, cause)
    elif cause is Cause.ACTIVATION_SPIKE and (ctx.phase.phase.value == "generation"
                                            or ctx.evidence.fact("cue.serving") is not None):
        sub, fixes = "kv_cache", _KV_FIXES + (() if ctx.is_serving else fixes[:1])
    elif cause is Cause.ACTIVATION_SPIKE and not ctx.adapters_apply:
        fixes = SPIKE_FROM_SCRATCH
    elif cause is Cause.CAPACITY and ctx.is_serving:
        fixes = SERVING_CAPACITY_FIXES
    elif cause is Cause.CAPACITY and not ctx.setup.deepspeed and not ctx.adapters_apply:
        fixes = CAPACITY_FROM_SCRATCH
    elif cause is Cause.CAPACITY and not ctx.setup.deepspeed:
        fixes = CAPACITY_NO_DEEPSPEED if ctx.setup.lora_r is None else (_QLORA,) + CAPACITY_NO_DEEPSPEED[1:]
    signals = tuple((f"{name} (learned weight)", round(w, 3)) for name, w in v.contributions)
    detail = _DETAIL.get(cause, "")
    title = _TITLES.get(cause, cause.value)
    if cause is Cause.CAPACITY and ctx.own_runtime in DATA_RUNTIMES:
        title, detail = _DATA_TITLE, _DATA_DETAIL
    not_fixes = (runtime_not_fixes(ctx.own_runtime) if ctx.own_runtime
                 else () if ctx.is_serving else _NOT.get(cause, ()))
    other = close_alternative(v)
    if other and sub is None and not ctx.is_serving and not ctx.own_runtime:
        alt = _PAIR[cause].value
        title += " (or this batch's activations)" if cause is Cause.CAPACITY else " (or the model states)"
        detail = (_HEDGED_DETAIL[cause] + f" The inputs do not tell it from {alt} ({other:.0%}): one run at "
                  "micro-batch 1 does — if it still fails the model states do not fit, if it fits the batch was "
                  "the excess.")
        fixes = (_SIZE_TEST,) + tuple(f for f in fixes if f.key != _SIZE_TEST.key)
        not_fixes = tuple(n for n in not_fixes if "empty_cache" in n.what)
    if cause is Cause.LEAK:
        grew = _growth(ctx)
        if grew:
            text, lines = grew
            detail += " " + text
            refs = list(lines) + refs
    if ctx.phase.phase.value != "unknown" and ctx.oom is not None:
        detail += f" The failing allocation is in {ctx.phase.phase.value}"
        detail += f" ({ctx.phase.why})." if ctx.phase.why else "."
    # one line can be both the OOM and a failure (another runtime's message): cite it once
    cited: list[SourceRef] = []
    for r in refs:
        if not any((r.source, r.line) == (c.source, c.line) for c in cited):
            cited.append(r)
    refs = cited
    return Finding("VERDICT", cause, title, v.probability, evidence=tuple(refs[:5]),
                   fixes=fixes, not_fixes=not_fixes,
                   signals=signals,
                   detail=detail, sub_cause=sub)
