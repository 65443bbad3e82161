"""Small helpers shared by the rules (formatting, evidence picking, and the advice every leak rule gives)."""

from __future__ import annotations

from ...analysis.context import Context
from ...analysis.retention import MATERIAL_SHARE, Retention
from ...model import Frame, SourceRef
from ...units import fmt_bytes
from ..base import Fix, NotAFix

HOLD = 0.5          # a finding "holds" (can be the primary cause) at this confidence

# what a leak rule always says, whichever evidence found the kept tensors
NO_GRAD_FIX = Fix("code", "torch.no_grad()", "wrap evaluation, metric and hook code", "tensors created there hold no graph")
LEAK_NOT_FIXES = (NotAFix("torch.cuda.empty_cache()", "the kept tensors are live"),
                  NotAFix("a smaller batch / a larger GPU / expandable_segments", "the OOM only moves later"))

LARGER_CARD = Fix("code", "more GPUs or a larger card", "", "model states scale with the parameter count")
# Without DeepSpeed in the inputs ZeRO is a change of framework, not a setting: the knobs of the run in hand come
# first (adapters, an 8-bit optimizer), sharding after them, and sharding on one GPU frees memory only with offload.
CAPACITY_NO_DEEPSPEED = (
    Fix("code", "LoRA / QLoRA", "train adapters (QLoRA: 4-bit frozen weights) instead of every weight",
        "gradients and optimizer state only for the adapters; 4-bit weights take a quarter of 16-bit ones"),
    Fix("code", "8-bit optimizer", "bitsandbytes AdamW8bit (optim=adamw_bnb_8bit / paged_adamw_8bit)",
        "Adam's two moments take 2 bytes per parameter instead of 8"),
    Fix("code", "shard the model states", "FSDP or DeepSpeed ZeRO-3 over several GPUs (with CPU offload on one)",
        "each GPU holds 1/N of weights, gradients and optimizer state; on one GPU only offload frees memory"),
    LARGER_CARD,
)

# A network trained from scratch (no pretrained transformer or diffusion model in the inputs): adapters are not its
# remedy; its size, precision and optimizer are.
CAPACITY_FROM_SCRATCH = (
    Fix("code", "a smaller network or input", "fewer channels / layers, smaller images or crops",
        "weights, gradients and optimizer state scale with the parameter count"),
    Fix("code", "mixed precision", "torch.autocast with bf16/fp16 (weights in 16-bit where the optimizer allows)",
        "16-bit tensors take half the bytes"),
    Fix("code", "a leaner optimizer", "SGD with momentum, or bitsandbytes AdamW8bit, instead of Adam",
        "Adam keeps two fp32 moments per parameter (8 bytes), SGD one or none"),
    LARGER_CARD,
)

# A network trained from scratch (positive evidence only: ``Context.adapters_apply`` False) whose step does not fit:
# no trainer arguments to flip; its batch, its input size, its precision and torch.utils.checkpoint are the knobs.
SPIKE_FROM_SCRATCH = (
    Fix("code", "batch size", "halve it (in training, accumulate gradients over 2 steps to keep the effective batch)",
        "activations scale with the batch"),
    Fix("code", "input size", "smaller crops / images / point sets per sample (or tile the input at inference)",
        "a convolution's activations scale with the pixels (or points) of each sample"),
    Fix("code", "mixed precision", "torch.autocast(device_type='cuda', dtype=torch.bfloat16) (fp16 with a GradScaler "
        "on cards without bf16)", "the activations kept for backward take half the bytes"),
    Fix("code", "activation checkpointing", "torch.utils.checkpoint around the heaviest blocks (the backbone's stages)",
        "keeps only each block's input and recomputes the rest in backward"),
)

# an inference server whose weights and KV cache do not fit: its own settings, not a trainer's
SERVING_CAPACITY_FIXES = (Fix("code", "--tensor-parallel-size", "the number of GPUs the weights must be split over",
                              "each GPU then holds 1/N of the weights"),
                          Fix("code", "a quantized checkpoint", "AWQ / GPTQ / fp8 (--quantization)",
                              "4-bit weights take a quarter of the 16-bit size"),
                          Fix("code", "--max-model-len / --max-total-tokens", "lower it",
                              "the server reserves KV cache for the longest sequence it accepts"))


def b(n: int | float | None) -> str:
    return fmt_bytes(n)


def oom_refs(ctx: Context) -> tuple[SourceRef, ...]:
    return (ctx.oom.ref,) if ctx.oom is not None else ()


def limit_label(ctx: Context) -> str:
    if ctx.limit_source == "allowed":
        return "the allowed cap"
    if ctx.limit_source == "allowed_inferred":
        return "the memory-fraction cap (inferred from the snapshot)"
    if ctx.limit_source == "capacity":
        return "the GPU's capacity"
    if ctx.limit_source == "capacity_shared":
        return "the GPU's capacity less what other processes hold"
    return "the memory limit"


def headroom(ctx: Context) -> int | None:
    """What the process could still reserve beyond what it holds at the OOM:
    the limit minus PyTorch's reserved memory (under a memory fraction) or the
    card's free memory (without one)."""
    o = ctx.oom
    if o is None:
        return None
    if o.allowed_bytes is not None and o.allocated_bytes is not None and o.reserved_unallocated_bytes is not None:
        return max(0, o.allowed_bytes - o.allocated_bytes - o.reserved_unallocated_bytes)
    return o.free_bytes


def step_ref(ctx: Context, n: int = 3) -> tuple[SourceRef, ...]:
    return tuple(p.reading.ref for p in ctx.steps[-n:])


def frame_where(fr: Frame) -> str:
    """A frame as a reader names it: ``evaluation_loop (trainer.py:2906)``."""
    return f"{fr.name} ({fr.filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{fr.line})"


def site_label(label: str) -> str:
    """An allocation site from its installed package on (``transformers/models/…:307 in forward``)."""
    for marker in ("site-packages/", "dist-packages/"):
        i = label.rfind(marker)
        if i >= 0:
            return label[i + len(marker):]
    return label


def kept_signals(r: Retention, nbytes: int, what: str) -> list[tuple[str, float]]:
    """The signal a kept set adds when it is a material share of live memory (``retention.MATERIAL_SHARE``): "{what}
    are N% of the live memory at the OOM"; none when it is not."""
    share = r.share(nbytes)
    return [(f"{what} {100 * share:.0f}% of the live memory at the OOM", 0.15)] if share >= MATERIAL_SHARE else []


def of_live(r: Retention, nbytes: int) -> str:
    """"(N% of X live)": a kept set against all live memory at the OOM, for a finding's figures."""
    return f"({100 * r.share(nbytes):.0f}% of {b(r.live_bytes)} live)"

