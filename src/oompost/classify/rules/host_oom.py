"""HOST001 — host RAM ran out (the GPU did not).

**Cause**  The Linux OOM killer (or a container/Slurm cgroup limit, or Ray's
memory monitor, which kills a worker when the node's RAM passes a threshold) sends
SIGKILL (Google Colab restarts the runtime: "Your session crashed after using all
available RAM"): the rank vanishes with exit code −9 / 137 and no Python traceback (an
excerpt may show only DeepSpeed's launcher then "Killing subprocess" the others);
a report may show only the host's memory (RAM, RSS) rising step after step.
``DefaultCPUAllocator: can't allocate memory`` (or ``MemoryError``, a C++
``std::bad_alloc``, numpy's ``Unable to allocate``) is the same in-process;
a pinned-memory allocation (``pin_memory``, a ``non_blocking=True`` copy to the
CPU) can fail as ``CUDA error: out of memory``; an
exhausted ``/dev/shm`` kills DataLoader workers with a bus error.  ZeRO
offload is the usual culprit: the fp32 master weights, Adam moments and
gradients (~16 bytes/param) live in pinned host memory, on every node.

**Fix**  Give the job more RAM or less to hold: keep the optimizer (or the
parameters) on the GPU if they fit there, offload to NVMe, lower
``sub_group_size`` (ZeRO-3), build the model under ``zero.Init`` so ranks do
not each materialise it (outside DeepSpeed: ``low_cpu_mem_usage`` / ``mmap``
loading), blocking copies to the CPU, an evaluation that keeps only the token
ids (``preprocess_logits_for_metrics``) instead of every batch's logits,
fewer DataLoader workers, a larger
``--shm-size``; in a notebook, a high-RAM runtime or less held by the cells.
"""

from __future__ import annotations

import re

from ...analysis.context import Context
from ...analysis.phase import Phase
from ...model import FailureKind, OomKind
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b

_TO_CPU = re.compile(r"""['"]cpu['"]|\.cpu\(|device\(\s*['"]cpu""")


def _copy_to_pinned_host(frames) -> bool:
    """A copy to the CPU with ``non_blocking=True`` (block swapping, offloading) allocates its destination in
    pinned host memory: when that fails, CUDA says "out of memory" about the host (tdrussell/diffusion-pipe#306,
    where WSL2 caps pinned memory).  Both must show in the frames: the non-blocking copy and a CPU target."""
    codes = [fr.code or "" for fr in frames]
    return any("non_blocking=True" in c for c in codes) and any(_TO_CPU.search(c) for c in codes)


_PINNED_CALL = re.compile(r"pin_memory\s*=\s*True|\.pin_memory\(\)")


def _allocates_pinned(frames) -> bool:
    """The failing statement itself allocates page-locked host memory (``torch.empty(..., pin_memory=True)``,
    ``t.pin_memory()``): a "CUDA error: out of memory" there is the host's (FMInference/FlexLLMGen#47, WSL2)."""
    return bool(frames) and bool(_PINNED_CALL.search(frames[-1].code or ""))


# what the failing host allocation was, in the words of the message that reported it
_HOST_OOM_WORDS = {
    "DefaultCPUAllocator": "DefaultCPUAllocator could not allocate host memory",
    "numpy": "numpy could not allocate an array in host memory",
    "MemoryError": "Python raised MemoryError: a host allocation (or C++ std::bad_alloc) failed",
    "windows_pagefile": "Windows' paging file is too small for the allocation",
}

LOAD_LEAN = Fix("code", "load without a full host copy",
                "from_pretrained(..., low_cpu_mem_usage=True, device_map=...); a state dict: "
                "load it with map_location='cuda', or memory-mapped (mmap=True) into load_state_dict(assign=True)",
                "loading otherwise builds the whole model (or state dict) in host RAM before it moves, once per "
                "process")


class HostOom:
    code = "HOST001"
    cause = Cause.HOST_OOM

    def evaluate(self, ctx: Context) -> list[Finding]:
        ev = ctx.evidence
        gpu_ooms = [o for o in ev.ooms if o.kind not in (OomKind.HOST,)]
        kills = ctx.failures_of(FailureKind.HOST_OOM_KILL)
        sigkills = ctx.failures_of(FailureKind.SIGKILL, FailureKind.KILLED)
        shm = ctx.failures_of(FailureKind.SHM)
        host_ooms = [o for o in ev.ooms if o.kind is OomKind.HOST]
        copies = [o for o in ev.ooms if o.kind is OomKind.CUDA_ERROR and _copy_to_pinned_host(o.stack.frames)]
        pinned = [o for o in ev.ooms if o.kind is OomKind.CUDA_ERROR and o not in copies and
                  (ctx.phase.phase is Phase.PIN_MEMORY or any("pin_memory" in fr.name for fr in o.stack.frames)
                   or _allocates_pinned(o.stack.frames))]
        pinned += copies
        pinned += ctx.failures_of(FailureKind.PINNED_HOST)          # cudaHostAlloc / the caching host allocator
        signals: list[tuple[str, float]] = []
        refs = []
        sub = None
        ray = [f for f in kills if f.killer == "ray"]
        notebook = [f for f in kills if f.killer == "notebook"]
        if ray:
            signals.append(("Ray's memory monitor killed a worker: the node's RAM passed its threshold", 0.8))
            refs += [f.ref for f in ray[:3]]
        elif notebook:
            signals.append(("the notebook service restarted its runtime after it used all available RAM", 0.8))
            refs += [f.ref for f in notebook[:3]]
        elif kills:
            signals.append(("the kernel / cgroup OOM killer killed a rank", 0.8))
            refs += [f.ref for f in kills[:3]]
        if host_ooms:
            signals.append((_HOST_OOM_WORDS.get(host_ooms[0].message_format, "a host-memory allocation failed"), 0.8))
            refs += [o.ref for o in host_ooms[:2]]
        if pinned:
            signals.append(("a pinned host allocation failed", 0.7))
            refs += [o.ref for o in pinned[:2]]
            sub = "pinned"
        if shm:
            signals.append(("/dev/shm was exhausted", 0.75))
            refs += [f.ref for f in shm[:2]]
            sub = "shm"
        silent = ctx.silent_kill
        if silent is not None:
            signals.append(("the launcher killed its ranks after one died without a traceback or error anywhere",
                            0.45))
            refs.append(silent.ref)
            pct = ev.fact_value("host.percent")
            if isinstance(pct, (int, float)) and pct >= 80:
                signals.append((f"DeepSpeed reported host RAM {pct:.0f}% used before the kill", 0.15))
                refs.append(ev.fact("host.percent").ref)
        if sigkills and not gpu_ooms:
            signals.append(("a rank was SIGKILLed (-9) with no CUDA OOM anywhere", 0.6 if not kills else 0.1))
            refs += [f.ref for f in sigkills[:2]]
        grew, span = ev.fact("cue.host_memory_growing"), ev.fact("cue.host_memory_growing_range")
        if grew is not None and span is not None and not gpu_ooms:
            lo, hi = span.value
            signals.append((f"the host's memory, printed {grew.value} times, rises from {lo:,.4g} to {hi:,.4g}", 0.55))
            refs += [grew.ref, span.ref]
        if not signals:
            return []
        if gpu_ooms and not (kills or host_ooms or pinned or shm):
            return []
        offload = ctx.setup.offload_optimizer != "none" or ctx.setup.offload_param != "none"
        numbers = []
        if offload:
            signals.append(("ZeRO offload keeps optimizer state in pinned host memory", 0.1))
            numbers.append(("offload", f"optimizer={ctx.setup.offload_optimizer}, param={ctx.setup.offload_param}"))
        host_total = ev.fact_value("host.total_bytes")
        if host_total:
            numbers.append(("host RAM (from DeepSpeed's CPU Virtual Memory line)", b(host_total)))
        if ctx.estimate is not None and ctx.estimate.host_bytes:
            numbers.append(("host RAM this setup needs (estimate)", b(ctx.estimate.host_bytes)))
        fixes = []
        if offload:
            fixes.append(Fix("ds_config", "zero_optimization.offload_optimizer.device", "none",
                             "keep optimizer state on the GPU when it fits there (see the rerun plan)"))
            fixes.append(Fix("ds_config", "zero_optimization.offload_optimizer.device", "nvme",
                             "or offload to NVMe (nvme_path) instead of RAM"))
            if ctx.setup.get("zero_stage") == 3:
                fixes.append(Fix("ds_config", "zero_optimization.sub_group_size", 100_000_000,
                                 "ZeRO-3 stages the fp32 optimizer state per sub-group; smaller groups lower the "
                                 "host peak of the optimizer step"))
        if sub == "shm":
            fixes.append(Fix("code", "docker run --shm-size", "16g", "DataLoader workers and NCCL's SHM transport "
                             "use /dev/shm; the container default is 64 MB"))
            if any("NCCL" in f.message or "nccl-shm" in f.message for f in shm):
                fixes.append(Fix("env", "NCCL_SHM_DISABLE", 1, "NCCL then moves data between local GPUs by P2P or "
                                 "its network transport instead of /dev/shm segments (in Kubernetes, a memory-backed "
                                 "emptyDir at /dev/shm is the other way)"))
            else:
                fixes.append(Fix("trainer_arg", "dataloader_num_workers", 2,
                                 "fewer workers hold fewer shared batches"))
        if ray:
            fixes.append(Fix("code", "fewer Ray workers per node, or more RAM", "",
                             "every Ray worker on the node (rollout, reference, reward, actor) holds its own host "
                             "memory; fewer per node, or nodes with more RAM, keep the node under the monitor's "
                             "threshold"))
        if notebook:
            fixes.append(Fix("code", "a high-RAM runtime, or less held in the notebook", "",
                             "the notebook's process holds every array and model the cells created; load data "
                             "lazily (a Dataset reading from disk, memory-mapped arrays), del what is no longer "
                             "needed, or pick a runtime with more RAM"))
        if copies:
            fixes.append(Fix("code", "non_blocking=False on copies to the CPU, or fewer offloaded / swapped blocks",
                             "", "each non-blocking copy to the CPU allocates page-locked host memory, which the OS "
                             "(WSL2, a container's memlock limit) caps below the RAM"))
        if sub == "pinned" and not offload:
            fixes.append(Fix("code", "pin_memory=False (DataLoader), smaller pinned buffers", "",
                             "page-locked host memory comes out of RAM (and the locked-memory limit) and cannot be "
                             "swapped"))
        workers = [f for f in sigkills if "DataLoader worker" in f.message]
        if workers and sub != "shm":
            fixes.append(Fix("trainer_arg", "dataloader_num_workers", 2,
                             "each worker holds its own copy of the dataset object and its prefetched batches"))
        loading = ctx.phase.phase in (Phase.MODEL_INIT, Phase.CHECKPOINT_LOAD) or \
            ctx.evidence.fact("cue.model_loading") is not None
        if ctx.setup.deepspeed:
            fixes.append(Fix("code", "deepspeed.zero.Init", "build the model under zero.Init",
                             "otherwise every local rank materialises a full CPU copy of the model"))
        elif loading and not ray and not pinned and not workers:
            fixes.append(LOAD_LEAN)
        # killed inside an evaluation (its banner after the last training log line): what the evaluation keeps for
        # its metric piles up on the host (eval_accumulation_steps moves every batch's logits there; a captured
        # Trainer evaluation of 64 x 1,024 x 151,936 logits was killed in a 10 GiB container, argmax completed)
        evaluating = not fixes and not loading and ctx.evidence.fact("train.evaluating_at_end") is not None
        if evaluating:
            fixes.append(Fix("code", "preprocess_logits_for_metrics", "return logits.argmax(-1)",
                             "the evaluation keeps every batch's outputs for its metric, and with "
                             "eval_accumulation_steps they pile up in host RAM: batch × sequence × vocabulary "
                             "values each, where the token ids are all a metric needs"))
            fixes.append(Fix("trainer_arg", "prediction_loss_only", True,
                             "when no metric needs the logits, nothing is kept at all"))
        # a training loop was running with nothing offloaded: its DataLoader is what holds host memory (a captured
        # 8-worker, prefetch-8, pinned loader was killed in a 6 GiB container at its first batch)
        in_loop = not fixes and not loading and ctx.evidence.fact("cue.training_progress") is not None
        if in_loop:
            fixes.append(Fix("code", "DataLoader num_workers / prefetch_factor / pin_memory",
                             "fewer workers (e.g. 2), prefetch_factor 2, pin_memory=False",
                             "each worker keeps its own copy of the dataset and prefetch_factor batches in host "
                             "memory, and pinning copies every batch into page-locked RAM a container counts in "
                             "full"))
        if not fixes or in_loop or evaluating:
            fixes.append(Fix("code", "more host RAM (or swap), or less held on the host", "",
                             "the GPU did not run out: the host did"))
        return [Finding(
            self.code, self.cause, "Host RAM ran out" + (" (shared memory)" if sub == "shm" else ""),
            confidence(signals), evidence=tuple(refs[:5]), fixes=tuple(fixes),
            not_fixes=(NotAFix("GPU memory settings (expandable_segments, smaller micro-batch)",
                               "the GPU did not run out; the host did"),
                       NotAFix("torch.cuda.empty_cache()", "it frees GPU cache, not host RAM")),
            signals=tuple(signals), numbers=tuple(numbers),
            detail=("The notebook's runtime was killed for host memory, not GPU memory: " if notebook and not sigkills
                    else "The failing rank was killed for host memory, not GPU memory: " if kills or sigkills or silent
                    else "The failing rank ran out of host memory, not GPU memory: ") + "; ".join(s for s, _ in signals)
                   + ".", sub_cause=sub)]
