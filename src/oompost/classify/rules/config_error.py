"""CFG001 — the configuration stopped the run before it could train.

**Cause**  DeepSpeed validates its config when the engine (or ``zero.Init``)
is created: an unknown key inside ``zero_optimization``, a non-integral size
(HF's old ``0.9·hidden²`` for ``stage3_prefetch_bucket_size``), a leftover
``"auto"``, or ``train_batch_size ≠ micro × accumulation × world size`` raise
before any memory is used.  Two ranks on one GPU (``Duplicate GPU detected``)
and an unknown ``PYTORCH_CUDA_ALLOC_CONF`` key (or a value under the allocator's minimum,
``max_split_size_mb:16``) stop a run the same way, as do vLLM's start-up checks (the card is already
occupied; the KV cache cannot hold one ``max_model_len`` sequence), and a batch scheduler that rejects the job's
resource request or cannot launch its step (Slurm's ``sbatch: error:`` / ``srun: error:``).

**Fix**  Correct the named key; ``oompost check ds_config.json --world-size N``
finds these before a job is queued.  No memory setting is involved.
"""

from __future__ import annotations

import re

from ...analysis.context import Context
from ...model import ConfigIssue, FailureKind
from ..base import Cause, Finding, Fix, NotAFix, confidence


# vLLM's start-up checks (parsers/failure_lines.py names them): title, sub-cause, fixes (key, value, why)
_VLLM_CHECKS = {
    "vllm_card_occupied": (
        "The GPU was already occupied when the server started", "card_occupied",
        (("free the GPU (nvidia-smi shows who holds it)", "",
          "vLLM found only {v} free at start-up: another process or another engine stage holds the card"),
         ("gpu_memory_utilization", "at most the free share of the card",
          "the engine reserves this fraction of the whole card for itself"))),
    "vllm_kv_cache_too_small": (
        "The KV cache cannot hold one sequence of max_model_len", "kv_cache_too_small",
        (("max_model_len", "at most the tokens the KV cache holds",
          "the model's {v}-token context does not fit the KV cache left after the weights"),
         ("gpu_memory_utilization", "raise it (a dedicated GPU)", "more of the card for the KV cache"))),
}


class ConfigError:
    code = "CFG001"
    cause = Cause.CONFIG_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        fails = [f for f in ctx.evidence.failures
                 if f.kind in (FailureKind.CONFIG_VALIDATION, FailureKind.DUPLICATE_GPU)
                 or (f.kind is FailureKind.NCCL_INVALID_USAGE and "Duplicate GPU" in (f.last_error or f.message))]
        if not fails:
            return []
        if ctx.first_rank is not None:
            fails = [f for f in fails if f.rank in (ctx.first_rank, None)] or fails
        f = fails[0]
        # an OOM printed before the config error on the same rank would make this a consequence — except two
        # processes on one GPU, whose allocations run each other out of memory before the framework notices
        if (ctx.oom is not None and ctx.oom.ref.source == f.ref.source and (ctx.oom.ref.line or 0) < (f.ref.line or 0)
                and f.kind is not FailureKind.DUPLICATE_GPU):
            return []
        signals = [("the run stopped on a configuration error", 0.8)]
        fixes: list[Fix] = []
        title = "The configuration was rejected before the run started"
        sub = None
        msg = f.message or f.exception
        c = f.config or ConfigIssue()
        sched = _SCHEDULER.search(msg)
        if f.kind is FailureKind.DUPLICATE_GPU or "Duplicate GPU" in msg + (f.last_error or ""):
            title, sub = "Two ranks were started on the same GPU", "duplicate_gpu"
            if "TensorFlow device" in msg:
                fixes.append(Fix("code", "gpu_options.visible_device_list", "str(hvd.local_rank())",
                                 "each TensorFlow process must see only its own GPU (or set CUDA_VISIBLE_DEVICES "
                                 "per process)"))
            else:
                fixes.append(Fix("code", "torch.cuda.set_device", "int(os.environ['LOCAL_RANK'])",
                                 "each process must select its own GPU before init_process_group"))
        elif c.batch is not None:
            _, micro, gas, ws = c.batch
            want = int(micro * gas * ws)
            title, sub = "train_batch_size does not equal micro-batch × accumulation × world size", "batch_size"
            fixes.append(Fix("ds_config", "train_batch_size", want,
                             f"{micro} × {gas} × {int(ws)} = {want}; or drop train_batch_size and let DeepSpeed "
                             "derive it from the other two"))
            signals.append(("DeepSpeed's batch assertion", 0.15))
        elif c.error_type in _VLLM_CHECKS:
            title, sub, rows = _VLLM_CHECKS[c.error_type]
            fixes += [Fix("code", key, value, why.format(v=c.input_value)) for key, value, why in rows]
        elif c.minimum is not None and c.key is not None:          # an allocator setting under its minimum
            key, least = c.key.split(":", 1)[-1], c.minimum
            title, sub = f"PYTORCH_CUDA_ALLOC_CONF sets {key} below the allocator's minimum ({least})", "alloc_conf"
            fixes.append(Fix("env", "PYTORCH_CUDA_ALLOC_CONF", f"{key}:{max(128, least)}",
                             f"the allocator refuses {key} < {least} when it starts; or drop {key} and use "
                             "expandable_segments:True against fragmentation"))
        elif c.key is not None:
            title, sub = f"DeepSpeed rejected {c.key}", "validation"
            fixes.append(Fix("ds_config", c.key, _fixed_value(c), _why(c, msg)))
            signals.append(("DeepSpeed's pydantic validation names the key", 0.15))
        elif "allocator config" in msg or "CachingAllocator option" in msg:
            title, sub = "PYTORCH_CUDA_ALLOC_CONF holds a key this torch does not know", "alloc_conf"
            fixes.append(Fix("env", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                             "valid keys: expandable_segments, max_split_size_mb, garbage_collection_threshold, "
                             "roundup_power2_divisions, ..."))
        elif "already been reduced" in msg or "computed twice" in msg:
            title, sub = "ZeRO-1/2 reduced a parameter's gradient twice in one step", "settings_conflict"
            fixes += [Fix("trainer_arg", "gradient_checkpointing_kwargs", {"use_reentrant": False},
                          "reentrant checkpointing runs backward through a module a second time, so its gradients "
                          "are reduced twice"),
                      Fix("ds_config", "zero_optimization.stage", 3,
                          "stage 3 hooks gradients per parameter and tolerates modules used twice in a step")]
        elif "Cannot set grad twice" in msg:
            title, sub = "Megatron's DDP was asked to set a gradient twice", "settings_conflict"
            fixes.append(Fix("code", "the DDP / optimizer options the assertion guards",
                             "drop one of the two options that both write main_grad (see the assertion's line)",
                             "two settings each accumulate the same gradient"))
        elif "incompatible with pipeline parallelism" in msg:
            title, sub = "ZeRO-2/3 was configured with pipeline parallelism", "settings_conflict"
            fixes += [Fix("ds_config", "zero_optimization.stage", 1,
                          "DeepSpeed's pipeline engine accepts ZeRO stage 0 or 1 only"),
                      Fix("code", "pipeline parallel size", "1 (e.g. --pipeline-model-parallel-size 1 / --no-pipeline-"
                          "parallel), to keep ZeRO-2/3",
                          "or drop the pipeline: ZeRO-3 then shards the model states instead")]
        elif "Address already in use" in msg:
            title, sub = "The rendezvous port is already taken", "port_in_use"
            fixes.append(Fix("env", "MASTER_PORT", "a free port (e.g. 29501), or --master_port / --main_process_port",
                             "another job (or a stale one) on this host listens on the port init_process_group uses"))
        elif "on a different device than the one you're training on" in msg:
            title, sub = "A k-bit model was loaded on another GPU than the rank trains on", "device_map"
            fixes.append(Fix("code", "device_map", "{'': int(os.environ['LOCAL_RANK'])} (or torch.cuda.current_device())",
                             "under torchrun / accelerate each rank loads the quantized model onto its own GPU; "
                             "device_map='auto' spreads one copy over every visible GPU"))
        elif "cudnn handle" in msg or "cublas handle" in msg or "cublasCreate" in msg:
            title, sub = "cuDNN / cuBLAS could not start: no memory left for its handle, or a library mismatch", \
                "library_init"
            preallocating = Fix("env", "TF_FORCE_GPU_ALLOW_GROWTH / XLA_PYTHON_CLIENT_PREALLOCATE",
                                "true / false (or XLA_PYTHON_CLIENT_MEM_FRACTION=.7)",
                                "TensorFlow and XLA take most of the card up front; the library's handle needs some "
                                "left")
            others = Fix("code", "who else holds the GPU", "nvidia-smi; an idle card via CUDA_VISIBLE_DEVICES, one "
                         "process per GPU (torch.cuda.set_device(local_rank))",
                         "another process on the card (or several ranks started on one GPU) leaves too little")
            # PyTorch's own form ("... when calling `cublasCreate(handle)`") comes from no TensorFlow or XLA
            fixes += [others] if "cublasCreate" in msg else [preallocating, others]
            fixes.append(Fix("code", "the cuDNN / CUDA build", "match the framework's cuDNN and CUDA to the driver",
                             "a mismatched library fails the same way with memory free"))
        elif sched is not None:
            title, sub = f"The batch scheduler ({sched.group(1)}) refused or could not launch the job", "scheduler"
            if "credential expired" in msg or "Task launch" in msg:
                fixes.append(Fix("code", "re-submit the job step", "launch srun once per job step (not in a loop), "
                                 "check the nodes' clocks and slurmd after a reboot",
                                 "the step could not start on a node: nothing of the job ran"))
            else:
                fixes.append(Fix("code", "the job's resource request",
                                 "--mem / --mem-per-gpu, --gres and the partition within what its nodes have",
                                 "the scheduler rejected the request before anything ran"))
        elif '"auto"' in msg or "'str'" in msg:
            title, sub = 'A DeepSpeed value is still "auto"', "auto"
            fixes.append(Fix("ds_config", "train_batch_size / train_micro_batch_size_per_gpu", "an integer",
                             '"auto" is filled only by the HF Trainer / Accelerate integration'))
        elif (m := _ASKS.search(msg)) is not None:
            # the error says what to set ("Please add <"zero_allow_untested_optimizer": true> in the configuration
            # file"): that is the fix, in its own words
            value: object = {"true": True, "false": False}.get(m.group("val").lower(), m.group("val"))
            title, sub = f"The run stops until {m.group('key')} is set", "asked_setting"
            fixes.append(Fix("ds_config" if "config" in msg else "code", m.group("key"), value,
                             "the error message asks for it"))
        if not fixes:
            fixes.append(Fix("code", "the setting the error names", "correct it (the message above names it)",
                             "the run stops on this check; memory was never the problem"))
        # the line that names the cause ("Duplicate GPU detected ...") is evidence beside the error line
        cited = (f.ref,) if f.last_error_ref is None or sub != "duplicate_gpu" else (f.ref, f.last_error_ref)
        return [Finding(
            self.code, self.cause, title, confidence(signals), evidence=cited, fixes=tuple(fixes),
            not_fixes=() if sub in ("card_occupied", "kv_cache_too_small") else (
                NotAFix("memory settings (offload, smaller batch, expandable_segments)",
                        "the run never allocated its model: nothing about memory failed"),),
            signals=tuple(signals), numbers=(
                (("scheduler", sched.group(1)) if sched is not None and sub == "scheduler" else
                 ("exception", f.exception or "error")), ("message", msg[:300])),
            detail=(f"The job never started: the scheduler answered {msg[:400]}" if sub == "scheduler" else
                    f"The first failing rank stopped with {f.exception or 'an error'}: {msg[:400]}"), sub_cause=sub)]


# Slurm's own error prefix: "sbatch: error: Memory specification can not be satisfied"
_SCHEDULER = re.compile(r"\b(sbatch|srun|salloc): error:")

# "Please add <"zero_allow_untested_optimizer": true>", "please set `use_reentrant` to False", "Please set key=value"
_ASKS = re.compile(r"[Pp]lease (?:add|set)\s+<?[\"'`]?(?P<key>[A-Za-z_][\w.]*)[\"'`]?\s*(?:[:=]|\bto\b)\s*[\"'`]?(?P<val>[\w.-]+)")


def _fixed_value(c: ConfigIssue) -> object:
    if c.error_type == "int_from_float" and c.input_value is not None:
        try:
            return int(float(c.input_value))
        except ValueError:
            pass
    if c.error_type == "extra_forbidden":
        return None
    return "see the error"


def _why(c: ConfigIssue, msg: str) -> str:
    if c.error_type == "int_from_float":
        return "DeepSpeed ≥ 0.15 (pydantic v2) accepts only integers for sizes; 0.9·hidden² is not one"
    if c.error_type == "extra_forbidden":
        return "the key is not a DeepSpeed ZeRO option (a typo, or one from another version)"
    return msg[:200]
