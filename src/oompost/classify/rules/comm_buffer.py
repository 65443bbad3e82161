"""COMM001 — a communication buffer is what no longer fits.

**Cause**  Either NCCL cannot allocate its own buffers (communicators are
created lazily at the first collective, each costs hundreds of MiB, and
PyTorch's cache or a pre-allocated pool leaves the GPU with no free bytes —
NCCL memory is invisible to PyTorch), or a DeepSpeed bucket is what fails:
``reduce_bucket_size`` elements in the model dtype, twice with
``overlap_comm`` at ZeRO-1/2, allocated at the first backward; the ZeRO-3
prefetch / live-parameter working set.

**Fix**  Smaller buckets (``reduce_bucket_size``: DeepSpeed's default 5e8 or
below; ``allgather_bucket_size`` does nothing on current torch); create
communicators before the model fills the card (``init_process_group(
device_id=...)`` plus a warm-up collective), leave headroom in static pools,
``NCCL_MAX_CTAS=8`` (~52 MiB per communicator instead of ~388 measured),
``NCCL_NVLS_ENABLE=0``; ``empty_cache()`` only when reserved ≫ allocated.
"""

from __future__ import annotations

from ...analysis.context import Context
from ...analysis.phase import Phase
from ...model import FailureKind, OomKind
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b, limit_label, oom_refs

_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
DEFAULT_BUCKET = 500_000_000


class CommBuffer:
    code = "COMM001"
    cause = Cause.COMM_BUFFER

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = self._nccl(ctx) or self._bucket(ctx)
        return out

    # ----------------------------------------------------------- NCCL
    def _nccl(self, ctx: Context) -> list[Finding]:
        fails = ctx.failures_of(FailureKind.NCCL_CUDA_OOM)
        if not fails:
            return []
        mine = [f for f in fails if ctx.first_rank is None or f.rank in (ctx.first_rank, None)] or list(fails)
        f = mine[0]
        # the caching allocator failed first on this rank (another runtime's device-memory message before the
        # library's line — Ascend's CANN under HCCL — is the same failure reported twice, not an earlier one)
        if ctx.oom is not None and ctx.oom.kind is not OomKind.OTHER and ctx.oom.rank == f.rank \
                and ctx.oom.ref.source == f.ref.source and (ctx.oom.ref.line or 0) < (f.ref.line or 0):
            return []
        signals = [("NCCL could not allocate device memory", 0.7)]
        numbers = []
        if f.bytes:
            numbers.append(("NCCL allocation that failed", b(f.bytes)))
        if getattr(f, "site", None):
            numbers.append(("what NCCL was allocating", str(f.site)))
        free = [x for x in ctx.evidence.facts_named("app.free_after_pool")]
        if f.last_error or "Last error" in f.message:
            signals.append(("PyTorch's NCCL error carries 'Last error: ... out of memory'", 0.1))
        signals.append(("no PyTorch allocation failed before it", 0.1))
        return [Finding(
            self.code, self.cause, "NCCL could not allocate its buffers: the GPU had no free memory left",
            confidence(signals), evidence=(f.ref,) + ((f.last_error_ref,) if f.last_error_ref else ()),
            sub_cause="nccl",
            fixes=(Fix("code", "init_process_group(device_id=torch.device('cuda', local_rank))",
                       "then a warm-up dist.all_reduce before loading the model",
                       "communicators are built lazily at the first collective; build them while memory is free"),
                   Fix("code", "leave headroom", "lower gpu_memory_utilization / mem_fraction_static or "
                       "torch.cuda.set_per_process_memory_fraction(0.9)",
                       "NCCL allocates outside PyTorch: ~0.6 GiB for the first communicator on H200, more with peers"),
                   Fix("env", "NCCL_MAX_CTAS", "8", "fewer channels: ~52 MiB per extra communicator instead of ~388 "
                       "(measured on H200, NCCL 2.28)"),
                   Fix("env", "NCCL_NVLS_ENABLE", "0", "NVLink SHARP buffers cost 0.25–1.5 GiB per GPU on NVSwitch "
                       "systems"),
                   Fix("code", "torch.cuda.empty_cache()", "before the first collective",
                       "only helps when PyTorch holds cached (reserved but unallocated) memory")),
            not_fixes=(NotAFix("NCCL_P2P_DISABLE=1", "changes the transport, the memory is still needed"),),
            signals=tuple(signals), numbers=tuple(numbers),
            detail="NCCL's own allocation failed ('Cuda failure out of memory'): the communicator was being set up "
                   "while PyTorch (its cache or a pre-allocated pool) held the card. NCCL memory is not part of "
                   "PyTorch's accounting, so the fix is headroom or building communicators early.")]

    # ------------------------------------------------------- DeepSpeed
    def _bucket(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        if o is None or not ctx.phase.phase.is_comm or ctx.phase.phase is Phase.COLLECTIVE and not o.stack.frames:
            return []
        signals: list[tuple[str, float]] = []
        numbers: list[tuple[str, str]] = []
        cfg = ctx.setup.ds_config or {}
        zero = cfg.get("zero_optimization", {}) if isinstance(cfg, dict) else {}
        elem = _DTYPE_BYTES.get(ctx.setup.dtype, 2)
        stage = ctx.setup.get("zero_stage")
        sub = "ds_bucket"
        fixes: list[Fix] = []
        if ctx.phase.phase is Phase.DS_BUCKET:
            signals.append((f"the failing allocation is a DeepSpeed bucket ({ctx.phase.frame.name if ctx.phase.frame else ''})",
                            0.55))
            rbs = _num(zero.get("reduce_bucket_size")) or ctx.evidence.fact_value("deepspeed.reduce_bucket_size")
            if rbs:
                bucket = int(rbs) * elem
                overlap = zero.get("overlap_comm", stage == 3)
                numbers += [("reduce_bucket_size", f"{int(rbs):,} elements"), ("one bucket", b(bucket)),
                            ("overlap_comm", str(bool(overlap)))]
                if o.requested_bytes and abs(o.requested_bytes - bucket) <= max(4 << 20, 0.02 * bucket):
                    signals.append(("the request equals one reduce bucket", 0.2))
                if int(rbs) > DEFAULT_BUCKET:
                    signals.append((f"reduce_bucket_size is {int(rbs) / DEFAULT_BUCKET:.0f}x DeepSpeed's default", 0.1))
                want = min(DEFAULT_BUCKET, int(rbs) // 4) if int(rbs) > DEFAULT_BUCKET else int(rbs) // 4
                fixes.append(Fix("ds_config", "zero_optimization.reduce_bucket_size", want,
                                 f"{b(bucket)} per bucket" + (" ×2 with overlap_comm" if overlap and stage in (1, 2)
                                                              else "") + f" → {b(want * elem)}"))
            agb = _num(zero.get("allgather_bucket_size"))
            if agb and int(agb) > DEFAULT_BUCKET:
                fixes.append(Fix("ds_config", "zero_optimization.allgather_bucket_size", DEFAULT_BUCKET,
                                 "inert on current torch (all_gather_into_tensor), but keep it sane for older ones"))
        else:  # ZeRO-3 gather working set
            sub = "zero3_gather"
            live = _num(zero.get("stage3_max_live_parameters")) or 1_000_000_000
            pref = _num(zero.get("stage3_prefetch_bucket_size")) or 50_000_000
            work = int(max(live, pref)) * elem
            numbers += [("stage3_max_live_parameters", f"{int(live):,}"), ("stage3_prefetch_bucket_size",
                                                                           f"{int(pref):,}"),
                        ("gathered working set bound", b(work))]
            weight = 0.55 if ctx.limit_bytes and work > 0.15 * ctx.limit_bytes else 0.3
            signals.append(("the failing allocation is a ZeRO-3 parameter gather", weight))
            fixes += [Fix("ds_config", "zero_optimization.stage3_max_live_parameters", int(live) // 4,
                          "bounds the gathered (full) parameters resident at once"),
                      Fix("ds_config", "zero_optimization.stage3_prefetch_bucket_size", int(pref) // 2,
                          "fewer parameters gathered ahead of use")]
        if ctx.limit_bytes:
            numbers.append((limit_label(ctx), b(ctx.limit_bytes)))
        if o.allocated_bytes is not None:
            numbers.append(("allocated at the OOM", b(o.allocated_bytes)))
        return [Finding(
            self.code, self.cause, "A DeepSpeed communication buffer does not fit" if sub == "ds_bucket"
            else "The ZeRO-3 gathered-parameter working set does not fit", confidence(signals),
            evidence=oom_refs(ctx), fixes=tuple(fixes), sub_cause=sub,
            not_fixes=(NotAFix("offload_param at ZeRO stage < 3", "ignored below stage 3"),
                       NotAFix("expandable_segments", "a bucket is one contiguous tensor that must exist whole")),
            signals=tuple(signals), numbers=tuple(numbers),
            detail=f"The OOM is inside DeepSpeed's {ctx.phase.frame.name if ctx.phase.frame else 'communication'} "
                   f"code: the {b(o.requested_bytes)} request is a communication buffer sized by the config, not "
                   "by the model or the batch.")]


def _num(v: object) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None
