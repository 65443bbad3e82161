"""Everything the rules reason with, computed once from the Evidence.

``build_context`` picks the first failing rank and its OOM, the memory limit
(the ``allowed`` cap when a memory fraction was set, else the capacity), the
phase of the failing allocation, the run's configuration, the step series of
that rank, the snapshot of that rank with its metrics and allocator-replay
counterfactuals, and the memory model's estimates for the configured run and
for its smallest form (micro-batch 1, full recompute) — the capacity test.
Pure: no I/O, nothing mutated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..estimate.memory import Estimate, TrainSetup, estimate
from ..estimate.models import ModelSpec, spec_from_param_count
from ..model import OWN_RUNTIMES, RUNTIME_FRAMES, SERVING_FORMATS, TRAINING_RUNTIMES, Evidence, Failure, Fact, Frame, OomEvent, Snapshot
from .phase import Phase, PhaseMatch, classify_frames, user_location
from .ranks import RankRow, first_failing_rank, rank_table
from .setup import RunSetup, build_setup
from .shared_card import other_processes_bytes
from .steps import StepPoint, step_series

if TYPE_CHECKING:  # pragma: no cover - numpy stays out of the CLI's start-up
    from .generation import GenerationGrowth
    from .retention import Retention
    from .site_history import SiteHistory
    from .snapshot_states import SnapshotStates


_ALLOCATOR_CAPS = ("allowed", "allowed_inferred")   # limits that set_per_process_memory_fraction imposes


@dataclass(frozen=True)
class Context:
    evidence: Evidence
    setup: RunSetup
    ranks: tuple[RankRow, ...]
    first_rank: int | None
    oom: OomEvent | None
    limit_bytes: int | None
    limit_source: str                              # "allowed" | "allowed_inferred" | "capacity" | "snapshot" | ""
    phase: PhaseMatch
    location: str
    steps: tuple[StepPoint, ...]
    snapshot: Snapshot | None
    snapshot_metrics: Any = None                   # analysis.snapshot_metrics.SnapshotMetrics
    counterfactuals: tuple[Any, ...] = ()          # analysis.replay.Counterfactual
    spec: ModelSpec | None = None
    train_setup: TrainSetup | None = None
    estimate: Estimate | None = None               # the configured run
    estimate_min: Estimate | None = None           # micro-batch 1, full recompute
    notes: tuple[str, ...] = field(default_factory=tuple)
    retention: "Retention | None" = None           # kept across steps or batches (a snapshot's live blocks)
    snapshot_states: "SnapshotStates | None" = None  # weights, gradients, optimizer state live at the OOM
    snapshot_steps: int = 0                        # optimizer steps the snapshot's trace shows finished before the OOM
    site_history: "SiteHistory | None" = None      # the failing line's earlier allocations in the snapshot's trace
    generation: "GenerationGrowth | None" = None   # a generation's positions and per-position growth (the trace)

    # ---- convenience for rules
    @property
    def allocator_cap(self) -> bool:
        """The limit caps PyTorch's allocator only (a memory fraction): the CUDA context and NCCL are outside it."""
        return self.limit_source in _ALLOCATOR_CAPS

    def failures_of(self, *kinds: Any) -> tuple[Failure, ...]:
        return tuple(f for f in self.evidence.failures if f.kind in kinds)

    @property
    def silent_kill(self) -> Fact | None:
        """The launcher's "Killing subprocess N" with nothing else failing anywhere (no OOM, no failure line,
        no exit code): a rank died without a word, which is how the kernel's OOM killer looks from the log.
        The first such line's fact, else None."""
        ev = self.evidence
        if ev.ooms or ev.failures or any(e.exitcode not in (0, None) for e in ev.exits):
            return None
        return ev.fact("launcher.killed_pid")

    @property
    def own_runtime(self) -> str:
        """The runtime other than PyTorch whose own allocator failed, else "": an inference runtime ("ggml":
        llama.cpp, llama-cpp-python, ollama; "tensorrt": TensorRT / TensorRT-LLM; "onnxruntime": ONNX Runtime's
        CUDA arena; "nvmap": a Jetson's shared memory; "rmm": RAPIDS' memory manager under cuDF / cuML / XGBoost;
        Faiss, XGBoost, CatBoost) or a training framework ("xla": JAX and TF/XLA; "tensorflow"; "paddle":
        PaddlePaddle; "mlx": Apple MLX).  Its knobs are its own (context size, layers offloaded; the builder's
        profiles; partitions and spilling; remat, preallocation, allocator flags), not PyTorch's allocator
        settings, a trainer's arguments or a ds_config."""
        fmt = self.oom.message_format if self.oom is not None else ""
        return fmt if fmt in OWN_RUNTIMES else ""

    @property
    def is_serving(self) -> bool:
        """An inference server's log (vLLM, TGI, sglang: their start-up and KV-cache lines) with no training in
        it, or an OOM message only a server prints (model.SERVING_FORMATS): batch size, checkpointing and ZeRO are
        not its knobs."""
        ev = self.evidence
        if self.oom is not None and self.oom.message_format in SERVING_FORMATS:
            return True
        return (ev.fact("cue.serving") is not None and ev.fact("cue.training_progress") is None
                and not self.setup.deepspeed and not self.steps)

    @property
    def growth_shown(self) -> bool:
        """Some input shows memory rising across steps (DESIGN.md's leak): a step series that rises, a memory
        print or reading that grows, outputs accumulated on the GPU at the failing frame or by the loop it runs in
        (the HF Trainer's evaluation), a snapshot whose live blocks were kept from earlier steps
        (analysis.retention), or PyTorch's own warning that a summed loss still holds its graph."""
        from .phase import Phase
        from .steps import leak_trend

        return (leak_trend(self.steps) is not None or self.evidence.fact("cue.memory_growing") is not None
                or self.phase.phase is Phase.RETAINED or self.retention is not None or self.in_keeping_loop
                or self.evidence.fact("cue.graph_kept") is not None)

    @property
    def keeping_loop(self) -> Frame | None:
        """The frame of the HF Trainer's evaluation (or legacy prediction) loop the failing allocation runs in:
        it keeps every batch's outputs on the GPU until the loop ends unless eval_accumulation_steps is set, so
        the kept set grows batch after batch, whichever allocation then fails.  None outside such a loop, and
        when the failing request is larger than everything allocated."""
        o = self.oom
        if o is None:
            return None
        if o.requested_bytes and o.allocated_bytes is not None and o.allocated_bytes < o.requested_bytes:
            # everything live, kept outputs included, is smaller than this one allocation of the current batch:
            # the loop cannot yet hold even one batch of what fails, so the batch's own demand is what outgrew
            # the limit (an evaluation batch far larger than the training batch), not a kept set
            return None
        return next((fr for fr in o.stack.frames if fr.name in ("evaluation_loop", "prediction_loop")
                     and "trainer" in fr.filename.replace("\\", "/").rsplit("/", 1)[-1]), None)

    @property
    def in_keeping_loop(self) -> bool:
        return self.keeping_loop is not None

    @property
    def under_hf_trainer(self) -> bool:
        """The failing allocation ran under the HF Trainer (a frame of transformers' trainer in the OOM's
        traceback or in the snapshot's OOM stack): its own knobs (eval_accumulation_steps...) apply there only."""
        frames = list(self.oom.stack.frames) if self.oom is not None else []
        m = self.snapshot_metrics
        if m is not None and getattr(m, "oom", None) is not None:
            frames += list(m.oom.frames)
        return any("transformers/trainer" in fr.filename.replace("\\", "/") for fr in frames)

    @property
    def adapters_apply(self) -> bool:
        """Adapters (LoRA) are a remedy for this run: it may fine-tune a pretrained transformer or diffusion model.
        False only on positive evidence of a network trained from scratch (a CNN, a GAN, a detector: the failing
        stack runs through convolution or normalisation layers or a vision toolkit) with nothing of a language or
        diffusion model in the inputs (DeepSpeed, FSDP, a LoRA rank, a sequence length, a model size, a stack
        through transformers / peft / diffusers...).  A bare OOM message says neither, and most of the crashes
        people post come from fine-tuning, so it keeps the adapters."""
        s = self.setup
        if s.deepspeed or s.fsdp or any(v is not None for v in (s.lora_r, s.seq_len, s.model_params)):
            return True
        if self.evidence.fact("model.params_from_name") is not None:
            return True
        frames = self.oom.stack.frames if self.oom is not None else ()
        if any(k in f.filename for f in frames for k in _ADAPTER_STACKS):
            return True
        return not any(k in f.filename for f in frames for k in _SCRATCH_STACKS)

    @property
    def has_memory_failure(self) -> bool:
        from ..model import FailureKind

        return bool(self.evidence.ooms) or any(
            f.kind in (FailureKind.NCCL_CUDA_OOM, FailureKind.HOST_OOM_KILL, FailureKind.NCCL_HOST_ALLOC,
                       FailureKind.PINNED_HOST) for f in self.evidence.failures)


# the libraries a stack of a pretrained transformer or diffusion model runs through
_ADAPTER_STACKS = ("transformers/", "peft/", "trl/", "diffusers/", "megatron/", "modeling_", "vllm/", "accelerate/",
                   "sd-scripts", "library/train_util", "lit_gpt/", "litgpt/", "torchtune/", "llama")
# ... and those of a network usually trained from scratch (convolutions, normalisation, vision toolkits)
_SCRATCH_STACKS = ("nn/modules/conv.py", "nn/modules/batchnorm.py", "torchvision/", "basicsr/", "mmcv/", "mmdet/",
                   "mmseg/", "detectron2/", "ultralytics/", "timm/", "segmentation_models_pytorch/", "monai/",
                   "nnunet", "models/yolo.py")


def _first_oom(ev: Evidence, first_rank: int | None) -> OomEvent | None:
    """The first failing rank's OOM; GPU OOMs before host ones.  A complete message wins over a truncated one,
    and among truncated ones, the first that still names its request (a cut runtime line often precedes the
    library's own line with the size)."""
    if not ev.ooms:
        return None
    mine = [o for o in ev.ooms if first_rank is None or o.rank in (first_rank, None)] or list(ev.ooms)
    best = [o for o in mine if not o.truncated] or [o for o in mine if o.requested_bytes] or mine
    return best[0]


def _stack_near(ev: Evidence, oom: OomEvent, window: int = 400) -> tuple:
    """Frames of the traceback closest to an OOM message that came without one (same file)."""
    best, dist = (), window + 1
    for r, st in ev.stacks:
        if r.source != oom.ref.source or r.line is None or oom.ref.line is None:
            continue
        d = abs(r.line - oom.ref.line)
        if d < dist:
            best, dist = st.frames, d
    return best


def _snapshot_for(ev: Evidence, rank: int | None) -> Snapshot | None:
    if not ev.snapshots:
        return None
    if rank is not None:
        for s in ev.snapshots:
            if s.meta.get("rank") == rank:
                return s
    from .snapshot_metrics import has_oom

    with_oom = [s for s in ev.snapshots if has_oom(s)]
    return (with_oom or list(ev.snapshots))[0]


def _limit(oom: OomEvent | None, snap: Snapshot | None, metrics: Any, ev: Evidence) -> tuple[int | None, str]:
    if oom is not None:
        if oom.allowed_bytes is not None:
            cb = getattr(metrics, "cap_bounds", None) if metrics is not None else None
            inferred = oom.message_format == "snapshot" and cb is not None and cb.source == "inferred"
            return oom.allowed_bytes, "allowed_inferred" if inferred else "allowed"
        if oom.capacity_bytes is not None:
            others = other_processes_bytes(oom)
            if others:
                return oom.capacity_bytes - others, "capacity_shared"
            return oom.capacity_bytes, "capacity"
    if snap is not None:
        lim = snap.meta.get("limit")
        if isinstance(lim, int) and lim > 0:
            return lim, "snapshot"
        cb = getattr(metrics, "cap_bounds", None) if metrics is not None else None
        if cb is not None and cb.exact:
            return cb.exact, "snapshot"
        total = snap.meta.get("device_total")
        if isinstance(total, int):
            return total, "snapshot"
        free, reserved = getattr(metrics, "free_cuda", None), getattr(metrics, "reserved", None)
        if cb is None and isinstance(free, int) and isinstance(reserved, int):
            # a plain _dump_snapshot without a cap: the card gave this process at most what PyTorch held
            # plus what the driver still reported free at the OOM
            return reserved + free, "snapshot"
    from .gpus import capacity_from_name

    by_name = capacity_from_name(ev.fact_value("gpu.name"))
    if by_name:
        return by_name, "gpu name"
    return None, ""


def _oom_from_snapshot(snap: Snapshot, m: Any) -> OomEvent:
    """An OomEvent built from the trace's ``oom`` entry when the logs lack the message."""
    from ..model import OomKind, SourceRef, Stack

    e = m.oom
    meta = snap.meta
    total = meta.get("device_total") if isinstance(meta.get("device_total"), int) else None
    limit = meta.get("limit") if isinstance(meta.get("limit"), int) else None
    cb = getattr(m, "cap_bounds", None)
    allowed = limit if limit is not None and (total is None or limit < total) else (
        cb.exact if cb is not None and cb.exact else None)
    if allowed is None and cb is not None and cb.source == "inferred":
        # a plain _dump_snapshot under a memory fraction: the cap lies in [low, high); its midpoint stands in
        allowed = (cb.low + cb.high) // 2
    alloc_size = getattr(m, "request_alloc_size", None) or e.size
    text = (f"allocator trace 'oom' entry: request {e.size:,} bytes, device_free {e.device_free or 0:,} bytes "
            f"({len(snap.segments)} segments in the snapshot)")
    return OomEvent(OomKind.CACHING_ALLOCATOR, SourceRef(snap.path, None, text),
                    rank=meta.get("rank") if isinstance(meta.get("rank"), int) else None,
                    device=getattr(m, "device", 0), requested_bytes=alloc_size, capacity_bytes=total,
                    free_bytes=e.device_free, allowed_bytes=allowed, allocated_bytes=m.allocated,
                    reserved_bytes=m.reserved, reserved_unallocated_bytes=m.reserved - m.allocated,
                    message_format="snapshot", stack=Stack(tuple(reversed(e.frames))))


def _spec(setup: RunSetup) -> ModelSpec | None:
    n = setup.get("model_params")
    if not n:
        return None
    try:
        return spec_from_param_count(int(n))
    except (ValueError, KeyError):
        return None


def make_train_setup(setup: RunSetup, **overrides: Any) -> TrainSetup:
    """The estimator's TrainSetup for this run (overrides win)."""
    attn = str(setup.get("attn", "sdpa"))
    attn = "flash" if attn.startswith("flash") else ("eager" if attn == "eager" else "sdpa")
    base: dict[str, Any] = {
        "zero_stage": int(setup.get("zero_stage", 0) or 0) if setup.deepspeed else 0,
        "offload_optimizer": setup.offload_optimizer, "offload_param": setup.offload_param,
        "dtype": setup.dtype, "world_size": int(setup.get("world_size", 1) or 1),
        "micro_batch": int(setup.get("micro_batch", 1) or 1), "seq_len": int(setup.get("seq_len", 1024) or 1024),
        "grad_ckpt": bool(setup.get("grad_ckpt", False)), "attn": attn,
        "lora_rank": setup.get("lora_r"), "deepspeed": setup.deepspeed,
        "grad_accum_steps": int(setup.get("grad_accum", 1) or 1),
    }
    base.update(overrides)
    if setup.ds_config:
        try:
            return TrainSetup.from_ds_config(setup.ds_config, **base)
        except (TypeError, ValueError):
            pass
    return TrainSetup(**base)


def iterations_before_oom(ev: Evidence, oom: OomEvent | None) -> Fact | None:
    """The log line showing a finished training iteration before the OOM, in the OOM's own file (None: none)."""
    f = ev.fact("cue.iterations_done")
    if f is None or oom is None or f.ref.source != oom.ref.source or f.ref.line is None or oom.ref.line is None:
        return None
    return f if f.ref.line < oom.ref.line else None


# the runtimes among OWN_RUNTIMES that run no training step
_NOT_TRAINING_RUNTIMES = frozenset(OWN_RUNTIMES) - frozenset(TRAINING_RUNTIMES)


def build_context(ev: Evidence) -> Context:
    from .snapshot_metrics import oom_metrics

    setup = build_setup(ev)
    ranks = rank_table(ev)
    first = first_failing_rank(ev)
    oom = _first_oom(ev, first)
    if first is None and oom is not None:
        first = oom.rank
    snap = _snapshot_for(ev, oom.rank if oom else first)
    metrics = None
    notes: list[str] = []
    if snap is not None:
        try:
            metrics = oom_metrics(snap, request_bytes=oom.requested_bytes if oom else None,
                                  limit_bytes=(oom.limit_bytes if oom else None))
        except Exception as e:  # a malformed snapshot must not stop the analysis
            notes.append(f"snapshot metrics unavailable: {type(e).__name__}: {e}")
    if oom is None and snap is not None and metrics is not None and getattr(metrics, "oom", None) is not None:
        oom = _oom_from_snapshot(snap, metrics)
        notes.append("the OOM numbers come from the snapshot's allocator trace (no OOM message in the logs)")
    limit, limit_source = _limit(oom, snap, metrics, ev)
    frames = oom.stack.frames if oom is not None else ()
    if oom is not None and (not frames or oom.stack.statement_only):
        near = _stack_near(ev, oom)
        if near:
            frames = near
            notes.append("the OOM message and its traceback were pasted apart; the nearest traceback gives the phase")
    if frames:
        phase = classify_frames(frames, innermost_first=False, constructors=True)
        loc = user_location(frames, innermost_first=False)
    else:
        phase, loc = PhaseMatch(Phase.UNKNOWN), None
    if metrics is not None and getattr(metrics, "oom", None) is not None:
        snap_phase = classify_frames(metrics.oom.frames, innermost_first=True)
        if phase.phase is Phase.UNKNOWN or (phase.phase in (Phase.BACKWARD, Phase.FORWARD)
                                            and snap_phase.phase not in (Phase.UNKNOWN,)):
            if snap_phase.phase is not Phase.UNKNOWN:
                phase = snap_phase
        if loc is None:
            loc = user_location(metrics.oom.frames, innermost_first=True)
    if setup.get("model_params") is None:
        from dataclasses import replace

        from .model_size import infer_params
        from .setup import Value

        inferred = infer_params(ev, oom, phase, setup.dtype)
        if inferred is not None:
            setup = replace(setup, model_params=Value(inferred.params, inferred.ref))
            notes.append(f"model size inferred: {inferred.params / 1e9:.2f} B parameters from {inferred.how}")
    steps = step_series(ev.memory, oom.rank if oom else first)
    cfs: tuple[Any, ...] = ()
    if snap is not None and any(snap.traces):
        try:
            from .replay import counterfactuals

            cap = oom.allowed_bytes if oom is not None else None
            cfs = tuple(counterfactuals(snap, cap=cap))
        except Exception as e:
            notes.append(f"allocator replay unavailable: {type(e).__name__}: {e}")
    spec = _spec(setup)
    ts = est = est_min = None
    if spec is not None and setup.fsdp:
        # FSDP shards weights, gradients and optimizer state (1/N each, in the run's own dtypes): the memory model
        # prices plain PyTorch and DeepSpeed only, and a full replica per GPU would call any FSDP run capacity
        notes.append("memory model skipped: the run shards its model states with FSDP, which it does not model")
    elif spec is not None and oom is not None and oom.message_format in _NOT_TRAINING_RUNTIMES:
        # llama.cpp, TensorRT, ONNX Runtime, RAPIDS...: an inference or data runtime holds no optimizer state and
        # no autograd activations, so the training memory model says nothing about it (a JAX or TensorFlow
        # training run's model states are priced the same way as PyTorch's, and stay)
        notes.append(f"memory model skipped: the OOM is {oom.message_format}'s allocator, an inference or data "
                     "runtime it does not model")
    elif spec is not None:
        try:
            ts = make_train_setup(setup)
            cap = limit_source in _ALLOCATOR_CAPS
            est = estimate(spec, ts, device_bytes=limit, allocator_cap=cap)
            est_min = estimate(spec, make_train_setup(setup, micro_batch=1, grad_ckpt=True), device_bytes=limit,
                               allocator_cap=cap)
        except (TypeError, ValueError) as e:
            notes.append(f"memory model unavailable: {e}")
    ran = iterations_before_oom(ev, oom)
    if est is not None and limit and est.model_states_bytes > 1.03 * limit and (len(steps) >= 2 or ran is not None):
        # every weight, gradient and optimizer state was on the GPU at once when an iteration finished, under this
        # limit: states priced above it mean the memory model assumed a dtype or optimizer the run does not use
        where = f"log line {ran.ref.line}" if ran is not None else "the step series"
        notes.append(f"memory model set aside: it prices the model states at {est.model_states_bytes / 2**30:.2f} "
                     f"GiB, above the {limit / 2**30:.2f} GiB limit, but training iterations finished under that "
                     f"limit before the OOM ({where})")
        est = est_min = None
    kept = None
    snap_steps = 0
    if snap is not None and any(snap.traces):
        try:
            from .retention import retention, steps_finished

            kept = retention(snap)
            snap_steps = steps_finished(snap)
        except Exception as e:  # a malformed trace must not stop the analysis
            notes.append(f"retention analysis unavailable: {type(e).__name__}: {e}")
    hist = gen = None
    if snap is not None and oom is not None and any(snap.traces):
        try:
            from .site_history import site_history

            hist = site_history(snap, oom.requested_bytes)
        except Exception as e:  # a malformed trace must not stop the analysis
            notes.append(f"failing-line history unavailable: {type(e).__name__}: {e}")
        if phase.phase is Phase.GENERATION:
            try:
                from .generation import generation_growth
                from .snapshot_metrics import oom_device

                gen = generation_growth(snap, oom_device(snap))
            except Exception as e:  # a malformed trace must not stop the analysis
                notes.append(f"generation growth unavailable: {type(e).__name__}: {e}")
    states = None
    if snap is not None:
        try:
            from .snapshot_states import snapshot_states

            states = snapshot_states(snap)
        except Exception as e:  # a malformed snapshot must not stop the analysis
            notes.append(f"model-state accounting unavailable: {type(e).__name__}: {e}")
    location = (f"{loc.name} ({RUNTIME_FRAMES[loc.filename]}, log line {loc.line})" if loc and loc.filename in RUNTIME_FRAMES
                else f"{loc.filename}:{loc.line} in {loc.name}" if loc else "")
    return Context(ev, setup, ranks, first, oom, limit, limit_source, phase, location, steps, snap, metrics, cfs,
                   spec, ts, est, est_min, tuple(notes), kept, states, snap_steps, hist, gen)
