"""The named signals the verdict weighs, read off the context and the rules' findings.

Every feature is a number in [0, 1] with a name a person can read in the
report ("oom.request_fits_in_reserved_unallocated", "phase.model_state",
"rule.capacity").  They come from three places:

- the rules' findings (``rule.<cause>``: the strongest finding of that cause),
  which carry the rich evidence when there is any (a snapshot replay, the
  memory model, step series, a config);
- the failure itself: which kinds of failure lines exist, what the OOM
  message's numbers say relative to each other, the phase of the failing
  allocation from whatever frames exist;
- cues of where the run was (loading the model, training progress,
  evaluation, serving) that other people's logs carry even when they carry
  nothing else.

A feature that the inputs cannot show is 0 ("missing"), never a guess; the
``missing`` list says what would settle the verdict.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..analysis.phase import Phase
from ..model import DATA_RUNTIMES, FailureKind, OomKind
from ..units import printed_rounding
from ..analysis.shared_card import held_elsewhere
from .base import Cause, Finding, Severity
from .rules.impossible_request import IMPOSSIBLE_BYTES, impossible_request

if TYPE_CHECKING:  # pragma: no cover
    from ..analysis.context import Context

RULE_CAUSES = (Cause.CONFIG_ERROR, Cause.HOST_OOM, Cause.NCCL_ERROR, Cause.CAPACITY, Cause.LEAK,
               Cause.COMM_BUFFER, Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE)

_NCCL_NET = (FailureKind.NCCL_REMOTE, FailureKind.NCCL_SYSTEM, FailureKind.NCCL_INTERNAL,
             FailureKind.NCCL_INVALID_USAGE, FailureKind.NCCL_OTHER, FailureKind.NCCL_NVLS)
_HOST = (FailureKind.SHM, FailureKind.HOST_OOM_KILL, FailureKind.KILLED, FailureKind.PINNED_HOST,
         FailureKind.NCCL_HOST_ALLOC)

FEATURES = (
    *(f"rule.{c.value}" for c in RULE_CAUSES),
    "oom.gpu", "oom.host", "oom.numbers", "oom.request_large", "oom.request_small", "oom.request_exceeds_limit", "oom.allocated_near_limit",
    "oom.reserved_unallocated_covers_request", "oom.reserved_unallocated_large", "oom.free_covers_request",
    "oom.other_processes", "oom.cuda_error_text", "oom.lib_workspace", "oom.allocated_exceeds_capacity",
    "oom.small_card", "oom.tiny_card", "oom.held_elsewhere", "oom.request_ratio", "oom.allocated_ratio", "oom.allocated_low",
    "fail.nccl_cuda_oom", "fail.nccl_timeout", "fail.nccl_network", "fail.host", "fail.sigkill",
    "fail.config", "fail.duplicate_gpu", "fail.python_exception", "fail.launcher_kill", "fail.none",
    "phase.model_state", "phase.optimizer_step", "phase.activation", "phase.loss", "phase.generation",
    "phase.comm", "phase.checkpoint_load", "phase.retained_outputs", "phase.unknown",
    "cue.model_loading", "cue.training_progress", "cue.evaluation", "cue.serving", "cue.generation",
    "cue.memory_report", "cue.memory_growing", "cue.host_memory_growing", "cue.multi_process", "cue.long_run",
    "cue.progress_before_oom", "cue.loading_before_oom", "steps.some", "steps.growing", "snapshot",
    "ds_config",
)


def _frac(a: int | None, b: int | None) -> float:
    if a is None or not b:
        return 0.0
    return max(0.0, min(1.0, a / b))


def extract(ctx: "Context", findings: tuple[Finding, ...] | list[Finding]) -> dict[str, float]:
    """Every feature of ``FEATURES``, by name."""
    f = dict.fromkeys(FEATURES, 0.0)
    for fd in findings:
        if fd.severity is Severity.CAUSE and fd.cause in RULE_CAUSES:
            k = f"rule.{fd.cause.value}"
            f[k] = max(f[k], min(1.0, fd.confidence))
    ev = ctx.evidence
    kinds = {x.kind for x in ev.failures}
    o = ctx.oom
    if o is not None:
        gpu = o.kind not in (OomKind.HOST,)
        f["oom.gpu"] = 1.0 if gpu else 0.0
        f["oom.host"] = 0.0 if gpu else 1.0
        f["oom.cuda_error_text"] = 1.0 if o.kind is OomKind.CUDA_ERROR else 0.0
        f["oom.lib_workspace"] = 1.0 if o.kind in (OomKind.CUBLAS, OomKind.CUDNN) else 0.0
        L = ctx.limit_bytes
        req, alloc, ru = o.requested_bytes, o.allocated_bytes, o.reserved_unallocated_bytes
        if req is not None and L:
            f["oom.numbers"] = 1.0
            r = req / L
            f["oom.request_large"] = 1.0 if r >= 0.10 else 0.0
            f["oom.request_small"] = 1.0 if r < 0.01 else 0.0
            f["oom.request_exceeds_limit"] = 1.0 if r >= 1.0 else 0.0
            # the request's share of the limit on a log scale: 0.1 % → 0, 1 % → 1/3, 10 % → 2/3, all of it → 1
            f["oom.request_ratio"] = max(0.0, min(1.0, (math.log10(max(r, 1e-9)) + 3) / 3))
        if alloc is not None and L:
            f["oom.allocated_near_limit"] = 1.0 if alloc >= 0.85 * L else 0.0
            f["oom.allocated_ratio"] = _frac(alloc, L)
            f["oom.allocated_low"] = 1.0 if alloc < 0.5 * L else 0.0
        # more allocated than the card has: the driver spilled into host memory (Windows' "shared GPU
        # memory"), so the working set is larger than the card, not a moment of it
        if alloc is not None and o.capacity_bytes and alloc > 1.02 * o.capacity_bytes:
            f["oom.allocated_exceeds_capacity"] = 1.0
        if L and L < 6 * 2**30:
            f["oom.small_card"] = 1.0
        # a card of 2 GiB or less (a laptop GPU, an old GTX): the weights and the framework's own context take
        # most of it before any batch
        if L and L <= 2.1 * 2**30:
            f["oom.tiny_card"] = 1.0
        if ru is not None and req:
            f["oom.reserved_unallocated_covers_request"] = 1.0 if ru >= req else 0.0
        if ru is not None and L:
            f["oom.reserved_unallocated_large"] = 1.0 if ru >= 0.05 * L else 0.0
        if o.free_bytes is not None and req and o.allowed_bytes is None:
            # the message rounds both to 0.01 of their units (±5 MiB in GiB): a free figure equal to the request
            # as printed is the allocation that failed, not room for it
            f["oom.free_covers_request"] = 1.0 if o.free_bytes - req > printed_rounding(o.free_bytes) + \
                printed_rounding(req) else 0.0
        f["oom.other_processes"] = 1.0 if len(o.other_processes) > 1 else 0.0
        f["oom.held_elsewhere"] = 1.0 if held_elsewhere(o) is not None else 0.0
    f["fail.nccl_cuda_oom"] = 1.0 if FailureKind.NCCL_CUDA_OOM in kinds else 0.0
    f["fail.nccl_timeout"] = 1.0 if kinds & {FailureKind.NCCL_TIMEOUT, FailureKind.NCCL_HEARTBEAT} else 0.0
    f["fail.nccl_network"] = 1.0 if kinds & set(_NCCL_NET) else 0.0
    f["fail.host"] = 1.0 if kinds & set(_HOST) else 0.0
    f["fail.sigkill"] = 1.0 if FailureKind.SIGKILL in kinds or any(
        e.exitcode in (-9, 137) for e in ev.exits if getattr(e, "exitcode", None) is not None) else 0.0
    f["fail.config"] = 1.0 if FailureKind.CONFIG_VALIDATION in kinds else 0.0
    f["fail.duplicate_gpu"] = 1.0 if FailureKind.DUPLICATE_GPU in kinds else 0.0
    f["fail.python_exception"] = 1.0 if FailureKind.PYTHON_EXCEPTION in kinds else 0.0
    f["fail.launcher_kill"] = 1.0 if ctx.silent_kill is not None else 0.0
    f["fail.none"] = 1.0 if o is None and not kinds and not f["fail.launcher_kill"] and not any(
        getattr(e, "exitcode", 0) not in (0, None) for e in ev.exits) and ev.fact("cue.memory_growing") is None \
        and ev.fact("cue.host_memory_growing") is None \
        and not ctx.steps else 0.0
    ph = ctx.phase.phase
    if o is not None:
        if ph in (Phase.OPTIMIZER_STEP,):
            f["phase.optimizer_step"] = 1.0
        elif ph is Phase.CHECKPOINT_LOAD:
            f["phase.checkpoint_load"] = 1.0
        elif ph.is_model_state:
            f["phase.model_state"] = 1.0
        elif ph in (Phase.LOSS, Phase.LOGITS):
            f["phase.loss"] = 1.0
        elif ph is Phase.GENERATION:
            f["phase.generation"] = 1.0
        elif ph.is_activation:
            f["phase.activation"] = 1.0
        elif ph.is_comm:
            f["phase.comm"] = 1.0
        elif ph is Phase.RETAINED:
            f["phase.retained_outputs"] = 1.0
        else:
            f["phase.unknown"] = 1.0
    for name in ("model_loading", "training_progress", "evaluation", "serving", "generation", "memory_report",
                 "memory_growing", "host_memory_growing", "multi_process", "long_run"):
        if ev.fact(f"cue.{name}") is not None:
            f[f"cue.{name}"] = 1.0
    if o is not None and o.ref.line is not None:
        for cue, feat in (("cue.training_progress", "cue.progress_before_oom"),
                          ("cue.model_loading", "cue.loading_before_oom")):
            c = ev.fact(cue)
            if c is not None and c.ref.source == o.ref.source and c.ref.line is not None and c.ref.line < o.ref.line:
                f[feat] = 1.0
    if ctx.steps:
        f["steps.some"] = 1.0
        from ..analysis.steps import leak_trend

        if leak_trend(ctx.steps) is not None:
            f["steps.growing"] = 1.0
    f["snapshot"] = 1.0 if ctx.snapshot is not None else 0.0
    f["ds_config"] = 1.0 if ctx.setup.ds_config else 0.0
    return f


def has_failure(f: dict[str, float]) -> bool:
    """The inputs hold some failure (an OOM, a failure line, a non-zero exit)."""
    return f["fail.none"] == 0.0


def missing_evidence(ctx: "Context", cause: Cause | None = None) -> list[str]:
    """What would settle the verdict, in the order a user can most cheaply provide it.  Per-step memory
    lines tell a leak from a spike: they settle nothing for a set-up, host or NCCL verdict."""
    memory_cause = cause not in (Cause.CONFIG_ERROR, Cause.HOST_OOM, Cause.NCCL_ERROR)
    out = []
    runtime = ctx.oom.message_format if ctx.oom is not None else ""
    if runtime == "ggml":            # llama.cpp: no PyTorch allocator, no training steps
        return ["llama.cpp's start-up lines (the model, KV cache and compute buffer sizes it prints per device)"]
    if runtime == "tensorrt":
        return ["the TensorRT builder's [MemUsageChange] lines (GPU memory before the failure) and the engine's "
                "max batch size and sequence lengths"]
    if runtime in ("tensorflow", "onnxruntime"):
        return [f"{'TensorFlow' if runtime == 'tensorflow' else 'ONNX Runtime'}'s allocator summary printed with "
                "the OOM (in use, limit, largest free chunk)"]
    if runtime == "xla":
        return ["XLA's buffer assignment printed with the OOM (live-out and temporary sizes) or the device's "
                "memory_stats() (bytes_in_use, peak_bytes_in_use, bytes_limit)",
                "the batch and sequence sizes the step was compiled for"]
    if runtime == "paddle":
        return ["paddle.device.cuda.max_memory_allocated() / max_memory_reserved() per step, and the batch size"]
    if runtime == "mlx":
        return ["mx.get_peak_memory() per step (mx.metal.get_peak_memory() in older MLX), and the batch and "
                "sequence sizes"]
    if runtime in DATA_RUNTIMES:     # a library holding data, not a training loop: the data's size settles it
        return ["the size of the data on the GPU (vectors × dimension, or rows × features, and their dtype) and the "
                "card's free memory before the run (nvidia-smi)",
                "the library's own memory report at the failure (RMM's pool statistics, XGBoost at verbosity 3, "
                "Faiss's StandardGpuResources temporary memory)"]
    if ctx.oom is not None and (ctx.oom.requested_bytes or 0) >= IMPOSSIBLE_BYTES:
        # a corrupt size (CFG004): no memory figure settles it, the build does
        return ["the versions the failing extension was built for and runs with (torch.__version__, "
                "torch.version.cuda, nvcc --version, TORCH_CUDA_ARCH_LIST) and its build log"]
    if impossible_request(ctx):
        # a shape hundreds of times the card (CFG004): the shapes the failing call received settle it
        return ["the shapes of the failing call's inputs (batch and sequence dimensions), printed just before it"]
    if ctx.snapshot is None and ctx.oom is not None and runtime == "malloc_async":
        # cudaMallocAsync keeps no allocator history: _record_memory_history records nothing under it
        out.append("a memory snapshot of the OOM, taken with the native allocator (unset "
                   "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync; python -m oompost.record -o DIR -- train.py ...)")
    elif ctx.snapshot is None and ctx.oom is not None:
        out.append("a memory snapshot of the OOM (python -m oompost.record -o DIR -- train.py ...)")
    if not ctx.setup.ds_config and ctx.setup.deepspeed:
        out.append("the ds_config.json")
    shown_by_snapshot = ctx.retention is not None and ctx.retention.material      # LEAK003 read the growth
    if not ctx.steps and ctx.oom is not None and not ctx.is_serving and memory_cause and not shown_by_snapshot:
        out.append("per-step memory lines (torch.cuda.memory_allocated() each step), to tell a leak from a spike")
    if ctx.oom is not None and (not ctx.oom.stack.frames or ctx.oom.stack.statement_only) \
            and ctx.phase.phase is Phase.UNKNOWN:
        out.append("the full traceback of the first failing rank (the frames say which phase failed)")
    return out
