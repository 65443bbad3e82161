"""analyze(): inputs → Evidence → Context → Findings → RerunPlan → Report.

The only place the stages are wired together; each stage is a pure function
of the one before it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from . import __version__
from .analysis.context import Context, build_context
from .analysis.steps import noun
from .classify import classify
from .classify.base import Cause, Finding
from .errors import InputError
from .model import Evidence, InputKind
from .parsers import parse_paths
from .progress import stage
from .remedies.ranking import rank
from .remedies.rerun import RerunPlan, plan
from .report import (CounterfactualView, OomSummary, RankView, Report, SegmentBlockView, SegmentView,
                     SeriesPoint, StackView)
from .units import fmt_bytes

_CAUSE_WORDS = {
    Cause.CONFIG_ERROR: "a configuration error",
    Cause.HOST_OOM: "host RAM ran out",
    Cause.NCCL_ERROR: "a distributed (NCCL) failure, not memory",
    Cause.CAPACITY: "capacity: the configured run cannot fit on this GPU",
    Cause.LEAK: "a memory leak across steps",
    Cause.COMM_BUFFER: "a communication buffer does not fit",
    Cause.FRAGMENTATION: "fragmentation of the allocator's memory",
    Cause.ACTIVATION_SPIKE: "activations do not fit",
    Cause.UNKNOWN: "unknown",
}


def analyze(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
            ds_config: str | os.PathLike[str] | None = None) -> Report:
    """Analyse crash artifacts (logs, snapshot pickles, directories holding them)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    ds_config = os.fspath(ds_config) if ds_config is not None else None
    stage(f"reading {len(paths)} input(s)")
    from .dsconfig.validate import prefetch

    if _config_file_given(paths, ds_config):
        prefetch()                 # DeepSpeed's import overlaps the parsing (it validates the rerun config)
    # a config dumped in a log: DeepSpeed's import starts when the dump is read, and overlaps the
    # rest of the parsing and the analysis (on the other core)
    ev = parse_paths(paths, ds_config=ds_config, on_ds_config=prefetch)
    usable = [i for i in ev.inputs if i.kind is not InputKind.UNKNOWN and not (
        i.kind is InputKind.SNAPSHOT and not ev.snapshots)]
    if not usable:
        reasons = "; ".join(_said_of(i.path, ", ".join(i.warnings) or "not a log, snapshot or config")
                            for i in ev.inputs) or "no files found"
        raise InputError(f"nothing usable in the inputs ({reasons})")
    return report_from_evidence(ev)


def _config_file_given(paths: list[str], ds_config: str | None) -> bool:
    """Whether a ds_config file is among the inputs (sniffing reads only file heads).  Without a
    config there is nothing for DeepSpeed to validate, so no process importing it is started."""
    from .sources import expand_paths, sniff

    if ds_config is not None:
        return True
    for p in expand_paths(paths):
        try:
            if sniff(p).kind == InputKind.DS_CONFIG:
                return True
        except InputError:
            continue
    return False


def _said_of(path: str, why: str) -> str:
    """``path: why``, without the path twice when the warning already starts with it."""
    return why if why.startswith(f"{path}:") else f"{path}: {why}"


def report_from_evidence(ev: Evidence) -> Report:
    from .analysis.snapshot_metrics import forget

    stage("analysing the evidence")
    try:
        ctx = build_context(ev)
        findings = classify(ctx)
        primary = findings[0]
        rerun = plan(ctx, primary)
        return _report(ctx, findings, rerun)
    finally:
        forget()                   # the per-snapshot memo: let the snapshot go with the analysis


# ------------------------------------------------------------------ views

def _report(ctx: Context, findings: tuple[Finding, ...], rerun: RerunPlan | None) -> Report:
    primary = findings[0]
    timeline, source, unit = _timeline(ctx, primary)
    show_segments = primary.cause is Cause.FRAGMENTATION or bool(
        ctx.snapshot_metrics is not None and getattr(ctx.snapshot_metrics, "fragmentation_suspected", False))
    fixes, not_worth = rank(ctx, findings, rerun)
    parts, peak_phase = _estimate_parts(ctx)
    return Report(
        cause=primary.cause.value, sub_cause=primary.sub_cause, confidence=primary.confidence,
        summary=_summary(ctx, primary, rerun, fixes), findings=findings, oom=_oom(ctx),
        ranks=tuple(RankView(r.rank, r.failed, r.first, r.peak_bytes, r.exitcode, r.cause_hint, r.first_failure_line)
                    for r in ctx.ranks),
        rerun=rerun, counterfactuals=_counterfactuals(ctx), inputs=ctx.evidence.inputs,
        timeline=timeline, timeline_source=source, timeline_unit=unit, top_stacks=_stacks(ctx),
        segments=_segments(ctx) if show_segments else (), estimate=_estimate(ctx), facts=_facts(ctx),
        warnings=tuple(f"{w.source}:{w.line or ''} {w.message}" for w in ctx.evidence.warnings) + ctx.notes,
        version=__version__, fixes=fixes, not_worth=not_worth, estimate_parts=parts,
        estimate_peak_phase=peak_phase)


_NOT_PHASED = (Cause.CONFIG_ERROR, Cause.HOST_OOM, Cause.NCCL_ERROR)


def _summary(ctx: Context, f: Finding, rerun: RerunPlan | None, fixes: tuple[Any, ...] = ()) -> str:
    """One sentence a person can act on: what failed, where, and what to change."""
    # where the OOM struck says something of a memory cause, nothing of a set-up mistake or a host failure
    where = f" {_PHASE_WORDS.get(ctx.phase.phase.value, '')}" if ctx.oom is not None and \
        ctx.phase.phase.value in _PHASE_WORDS and f.cause not in _NOT_PHASED else ""
    if where and f.cause is Cause.LEAK:
        # a leak keeps memory elsewhere: the phase says only where the last allocation failed
        where = f"; the OOM struck{where}"
    rank = f" on rank {ctx.first_rank}" if ctx.first_rank is not None and len(ctx.ranks) > 1 else ""
    s = f"{f.title}{rank}{where}."
    words = _plan_words(rerun) if rerun is not None else []
    if words:
        s += " Rerun with " + ", ".join(words[:4]) + ("…" if len(words) > 4 else "")
        if rerun is not None and rerun.predicted_peak_bytes and rerun.device_bytes:
            if rerun.basis == "replay":
                s += (f": the recorded trace replays without failing (peak {fmt_bytes(rerun.predicted_peak_bytes)}"
                      f" of {fmt_bytes(rerun.device_bytes)})")
            else:
                s += f": predicted peak {fmt_bytes(rerun.predicted_peak_bytes)} of {fmt_bytes(rerun.device_bytes)}"
                from .remedies.pricing import uncertainty

                width, _ = uncertainty(ctx)
                if width:
                    s += f" (±{width:.0%}, outside the measured range)"
                if rerun.fits is False:
                    s += " (still too large)"
        if rerun is not None and rerun.changes_global_batch:
            s += f"; this changes the global batch {rerun.global_batch[0]} → {rerun.global_batch[1]}"
        s += "."
    else:
        fx = next((x.fix for x in fixes if not x.plan), None) if fixes else (f.fixes[0] if f.fixes else None)
        if fx is not None:
            s += f" Fix: {fx.key}" + (f" = {fx.value}" if fx.kind != "code" and fx.value is not None else "") + "."
    return s


def _estimate_parts(ctx: Context) -> tuple[tuple[tuple[str, int], ...], str]:
    """The configured run's predicted peak as parts that add up to it: the
    start-up parts when start-up is the peak, else the step's."""
    e = ctx.estimate
    if e is None:
        return (), ""
    b = {k: int(v) for k, v in e.breakdown.items()}
    total = int(e.predicted_peak_bytes)
    if total == int(e.startup_peak_bytes) and total != int(e.step_peak_bytes):
        parts = [("weights", b.get("weights", 0)), ("held during initialize", b.get("startup_extra", 0)),
                 ("context", b.get("context", 0)), ("nccl", b.get("nccl", 0))]
        phase = "initialize"
    else:
        parts = [(k, v) for k, v in b.items() if k not in ("kv_cache", "startup_extra")]
        phase = e.peak_phase or "step"
    parts = [(k, v) for k, v in parts if v > 0]
    rest = total - sum(v for _, v in parts)
    if rest > 0:
        parts.append(("other (not itemised)", rest))
    return tuple(parts), phase


_PHASE_WORDS = {
    "model_init": "while building the model", "model_to_device": "while moving the model to the GPU",
    "zero_init": "during deepspeed.initialize", "optimizer_init": "while creating the optimizer state",
    "grad_partition": "while allocating the gradient buffers (ZeRO's partition, DDP's buckets)", "optimizer_step": "in the optimizer step",
    "ds_bucket": "in a DeepSpeed bucket allocation", "zero3_gather": "in a ZeRO-3 parameter gather",
    "collective": "in a collective", "forward": "in the forward pass", "logits": "at the logits",
    "loss": "in the loss", "backward": "in the backward pass", "generation": "during generation",
    "checkpoint_load": "while loading a checkpoint", "pin_memory": "while pinning host memory",
}


def _num(v: object) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 10**7:
        exp = len(str(v)) - 1
        if v % 10**exp == 0:
            return f"{v // 10**exp}e{exp}"
    return str(v)


def _plan_words(r: RerunPlan) -> list[str]:
    out = [f"{k}={v}" for k, v in r.env.items()]
    out += [f"{k}={v}" for k, v in r.trainer_args.items()]

    def leaves(d: dict, prefix: str = "") -> None:
        for k, v in d.items():
            if isinstance(v, dict) and v and not {"device"} & set(v):
                leaves(v, f"{prefix}{k}.")
            elif isinstance(v, dict) and "device" in v:
                out.append(f"{prefix}{k}={v['device']}")
            elif v is None:
                removed.append(f"no {prefix}{k}")
            else:
                out.append(f"{prefix}{k}={_num(v)}")

    removed: list[str] = []

    seen_args = set(r.trainer_args)
    leaves({k: v for k, v in r.ds_config_diff.items()
            if not (k == "train_micro_batch_size_per_gpu" and "per_device_train_batch_size" in seen_args)
            and not (k == "gradient_accumulation_steps" and k in seen_args)})
    return out or removed          # removed keys are only worth the sentence when nothing else changed


def _oom(ctx: Context) -> OomSummary | None:
    o = ctx.oom
    if o is None:
        return None
    tensor = None
    m = ctx.snapshot_metrics
    if m is not None and getattr(m, "oom", None) is not None:
        tensor = m.oom.size
    others = sum(b for _, b in o.other_processes) if o.other_processes else None
    return OomSummary(
        rank=o.rank if o.rank is not None else ctx.first_rank, device=o.device, requested_bytes=o.requested_bytes,
        requested_tensor_bytes=tensor, capacity_bytes=o.capacity_bytes, limit_bytes=ctx.limit_bytes,
        free_bytes=o.free_bytes, allocated_bytes=o.allocated_bytes,
        reserved_unallocated_bytes=o.reserved_unallocated_bytes, process_in_use_bytes=o.process_in_use_bytes,
        kind=o.kind.value, limit_source=ctx.limit_source, message_format=o.message_format, exception=o.exception,
        ref=o.ref, phase=ctx.phase.phase.value, location=ctx.location, other_processes_bytes=others,
        request_scope=o.request_scope)


def _counterfactuals(ctx: Context) -> tuple[CounterfactualView, ...]:
    """The allocator replays, in words no stronger than a replay that stops at the OOM allows."""
    from .remedies.pricing import HEADROOM_WARN

    out = []
    L = ctx.limit_bytes
    for c in ctx.counterfactuals:
        note = str(getattr(c, "note", "") or "")
        tight = bool(not c.oom and L and c.peak_reserved_bytes is not None
                     and L - c.peak_reserved_bytes < HEADROOM_WARN * L)
        if not c.oom:                  # the replay ends at the OOM: it gets past it, it does not prove a fit
            note = re.sub(r"\bfits(?=:)", "replays without failing", note)
        if tight:
            note += f"; less than {HEADROOM_WARN:.0%} headroom under the {fmt_bytes(L)} limit"
        out.append(CounterfactualView(getattr(c, "label", c.setting) or "(recorded settings)", bool(c.oom),
                                      c.peak_reserved_bytes, note, "replay", tight))
    return tuple(out)


def _timeline(ctx: Context, primary: Finding | None = None) -> tuple[tuple[SeriesPoint, ...], str, str]:
    """The picture that proves the verdict: a leak or a spike shows the per-step
    series (the growth, or the step that broke away), the OOM marked one step
    after the last logged step; otherwise the snapshot's allocator trace."""
    if primary is not None and primary.cause is Cause.LEAK and len(ctx.steps) >= 3:
        pts = _step_points(ctx)
        if ctx.oom is not None:
            pts.append(SeriesPoint(ctx.steps[-1].step + 1, None, None, "oom"))
        return tuple(pts), "steps", noun(ctx.steps)
    if primary is not None and primary.cause is Cause.ACTIVATION_SPIKE and len(ctx.steps) >= 2:
        # the peak of every logged step, and what the failing step needed at least (allocated + request)
        pts = [SeriesPoint(p.step, p.max_allocated if p.max_allocated is not None else p.allocated,
                           p.max_reserved if p.max_reserved is not None else p.reserved) for p in ctx.steps]
        o = ctx.oom
        if o is not None:
            need = (o.allocated_bytes + (o.requested_bytes or 0)) if o.allocated_bytes is not None else None
            held = (o.allocated_bytes + (o.reserved_unallocated_bytes or 0)) if o.allocated_bytes is not None else None
            pts.append(SeriesPoint(ctx.steps[-1].step + 1, need, held, "oom"))
        return tuple(pts), "steps", f"{noun(ctx.steps)} (peak within each; at the OOM: allocated + the request)"
    if ctx.snapshot is not None and any(ctx.snapshot.traces):
        try:
            from .analysis.snapshot_metrics import timeline

            dev = ctx.oom.device if ctx.oom is not None and ctx.oom.device is not None else 0
            pts = timeline(ctx.snapshot, device=dev if dev < len(ctx.snapshot.traces) else 0, max_points=600)
            if pts:
                oom_at = getattr(ctx.snapshot_metrics, "oom_index", None)
                return tuple(SeriesPoint(p.index, p.allocated, p.reserved, "oom" if p.index == oom_at else "")
                             for p in pts), "snapshot", "trace event"
        except Exception:
            pass
    if ctx.steps:
        return tuple(_step_points(ctx)), "steps", "step"
    return (), "", ""


def _step_points(ctx: Context) -> list[SeriesPoint]:
    return [SeriesPoint(p.step, p.allocated if p.allocated is not None else p.max_allocated,
                        p.reserved if p.reserved is not None else p.max_reserved) for p in ctx.steps]


def _stacks(ctx: Context) -> tuple[StackView, ...]:
    if ctx.snapshot is None:
        return ()
    try:
        from .analysis.snapshot_metrics import top_stacks

        groups = top_stacks(ctx.snapshot, n=10)
    except Exception:
        return ()
    return tuple(StackView(g.frame_label, g.bytes, g.count,
                           tuple(f"{fr.filename}:{fr.line} in {fr.name}" for fr in g.sample_frames[:12]))
                 for g in groups)


def _segments(ctx: Context) -> tuple[SegmentView, ...]:
    if ctx.snapshot is None:
        return ()
    try:
        from .analysis.snapshot_metrics import segment_map

        dev = ctx.oom.device if ctx.oom is not None and ctx.oom.device is not None else 0
        segs = segment_map(ctx.snapshot, device=dev)
    except Exception:
        return ()
    segs = sorted(segs, key=lambda s: -s.total_size)[:40]
    return tuple(SegmentView(s.address, s.total_size, s.segment_type, s.stream,
                             tuple(SegmentBlockView(b.offset, b.size, b.state) for b in s.blocks[:400]))
                 for s in segs)


def _estimate(ctx: Context) -> dict[str, Any] | None:
    if ctx.estimate is None:
        return None
    e = ctx.estimate.to_json()
    out = {k: e[k] for k in ("fits", "predicted_peak_bytes", "startup_peak_bytes", "device_bytes", "host_bytes",
                             "breakdown", "assumptions") if k in e}
    if ctx.limit_bytes is None:
        # no card, cap or capacity in the inputs: the memory model compared against its default device, which is
        # not a fact about this run, so whether it "fits" is not known (the default stays in the assumptions)
        out["fits"] = None
        out["device_assumed"] = True
    return out


def _facts(ctx: Context) -> tuple[tuple[str, str], ...]:
    s = ctx.setup
    out: list[tuple[str, str]] = []

    def add(label: str, v: Any) -> None:
        if v is not None and v != "":
            out.append((label, str(v)))

    add("model parameters", f"{int(s.get('model_params')):,}" if s.get("model_params") else None)
    add("model shape (memory model)", ctx.spec.describe() if ctx.spec else None)
    add("DeepSpeed", "yes" if s.deepspeed else None)
    m = s.ds                                   # the typed ds_config: defaults are said to be defaults
    if m is not None and s.ds_config_origin == "file":
        add("ZeRO stage", m.zero_stage.describe())
        add("offload", f"optimizer={m.offload_optimizer.describe()}, param={m.offload_param.describe()}")
        dtype_logged = ctx.evidence.fact_value("deepspeed.dtype") is not None
        add("dtype", m.precision.describe() if (m.precision.stated or not dtype_logged)
            else f"{s.dtype} (from the engine's log" + (', the config says "auto")' if m.precision.auto else ")"))
    else:
        add("ZeRO stage", s.get("zero_stage"))
        if s.deepspeed:
            add("offload", f"optimizer={s.offload_optimizer}, param={s.offload_param}")
        add("dtype", s.dtype if s.deepspeed else None)
    add("world size", s.get("world_size"))
    add("micro-batch", s.get("micro_batch"))
    add("gradient accumulation", s.get("grad_accum"))
    add("sequence length (longest seen)", s.get("seq_len"))
    add("gradient checkpointing", s.get("grad_ckpt"))
    add("attention", s.get("attn"))
    ev = ctx.evidence
    for label, name in (("torch", "torch.version"), ("DeepSpeed version", "deepspeed.version"),
                        ("NCCL", "nccl.version"), ("GPU", "gpu.name")):
        add(label, ev.fact_value(name))
    if ctx.limit_bytes:
        add("memory limit", f"{fmt_bytes(ctx.limit_bytes)} ({ctx.limit_source})")
    return tuple(out)
