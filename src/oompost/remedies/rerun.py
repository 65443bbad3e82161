"""The rerun plan: the smallest change predicted to fit, as a config to run.

From the primary finding and what the run was (its DeepSpeed config, model
size, world size, the limit it ran under), choose in the order the issue
asks for: allocator settings for fragmentation; micro-batch (keeping the
global batch through accumulation) or checkpointing for activations; bucket
sizes for communication buffers; ZeRO stage / offload / LoRA for capacity;
the corrected key for a configuration error.  Each candidate is priced by
the memory model; the first whose predicted peak stays under 90% of the
limit wins.  The emitted ds_config is complete and checked with DeepSpeed's
own validation when DeepSpeed is installed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ..analysis.context import Context
from ..analysis.evaluation import EvalPass, evaluation_pass, generating, smaller_eval_batch
from ..analysis.whatif import WhatIf, fits
from ..classify.base import Cause, Finding
from ..units import fmt_bytes
from .pricing import MARGIN, Pricer


@dataclass(frozen=True)
class RerunPlan:
    ds_config: dict[str, Any] | None
    ds_config_diff: dict[str, Any]
    env: dict[str, str]
    trainer_args: dict[str, Any]
    predicted_peak_bytes: int | None
    device_bytes: int | None
    changes: tuple[str, ...] = ()
    fits: bool | None = None
    host_bytes: int | None = None
    global_batch_kept: float | None = None
    validated_by_deepspeed: bool | None = None
    validation_errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    breakdown: dict[str, int] = field(default_factory=dict)
    global_batch: tuple[int | None, int | None] = (None, None)     # per optimizer step, before → after
    overrides: dict[str, Any] | None = None                          # the priced change (estimator fields)
    basis: str = "model"                                 # "model" (memory model) | "replay" | "scaled" | ""
    assumed: tuple[str, ...] = ()                                    # the config a partial plan was priced for

    @property
    def changes_global_batch(self) -> bool:
        a, b = self.global_batch
        return a is not None and b is not None and a != b

    def to_json(self) -> dict[str, Any]:
        """DESIGN.md's ``rerun`` object plus what a person needs to trust it."""
        return {"ds_config": self.ds_config, "ds_config_diff": self.ds_config_diff, "env": self.env,
                "trainer_args": self.trainer_args, "predicted_peak_bytes": self.predicted_peak_bytes,
                "device_bytes": self.device_bytes, "changes": list(self.changes), "fits": self.fits,
                "host_bytes": self.host_bytes, "global_batch_kept": self.global_batch_kept,
                "validated_by_deepspeed": self.validated_by_deepspeed,
                "validation_errors": list(self.validation_errors), "notes": list(self.notes),
                "alternatives": list(self.alternatives), "breakdown": dict(self.breakdown),
                "basis": self.basis, "assumed": list(self.assumed), "global_batch": {"before": self.global_batch[0], "after": self.global_batch[1]}}


@dataclass
class _Draft:
    cfg: dict[str, Any] | None
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    estimate: WhatIf | None = None
    predicted: int | None = None
    alternatives: list[str] = field(default_factory=list)
    pricer: Pricer = None  # type: ignore[assignment]
    basis: str = ""                    # "replay" when the predicted peak is an allocator replay's
    partial_diff: dict[str, Any] = field(default_factory=dict)   # the change, when the config is unknown
    assumed: tuple[str, ...] = ()      # what the prediction assumed about an unknown config
    fits: bool | None = None           # set where the peak is one the run already survived (not the margin's call)


def plan(ctx: Context, primary: Finding, pricer: Pricer | None = None) -> RerunPlan | None:
    cfg = copy.deepcopy(ctx.setup.ds_config) if ctx.setup.ds_config else None
    d = _Draft(cfg, pricer=pricer or Pricer(ctx))
    cause = primary.cause
    if (ctx.is_serving or ctx.own_runtime) and cause in (Cause.ACTIVATION_SPIKE, Cause.CAPACITY, Cause.FRAGMENTATION):
        return None                # a server's flags (the finding's fixes), not trainer arguments or a ds_config
    if cause is Cause.FRAGMENTATION:
        _fragmentation(ctx, d)
    elif cause is Cause.ACTIVATION_SPIKE and generating(ctx):
        return None                # inference: the finding's fixes (attention kernel, batch, prompt), not a training plan
    elif cause is Cause.ACTIVATION_SPIKE and (ev := evaluation_pass(ctx)) is not None:
        if not _eval_batch(ctx, ev, d):
            return None
    elif cause is Cause.ACTIVATION_SPIKE:
        if not _batch_search(ctx, d, allow_ckpt=True):
            return None
    elif cause is Cause.COMM_BUFFER:
        if primary.sub_cause == "nccl" or not _buckets(ctx, d):
            return None
    elif cause is Cause.CAPACITY:
        if not _capacity(ctx, d):
            return None
    elif cause is Cause.CONFIG_ERROR:
        if not _config(ctx, primary, d):
            return None
    elif cause is Cause.HOST_OOM:
        if not _host(ctx, d):
            return None
    else:
        return None
    return _finish(ctx, d)


# ------------------------------------------------------------------ causes

def _fragmentation(ctx: Context, d: _Draft) -> None:
    already = ctx.snapshot is not None and ctx.snapshot.expandable
    exp = [c for c in ctx.counterfactuals if getattr(c, "setting", "") == "expandable_segments:True"]
    if already:
        ms = [c for c in ctx.counterfactuals if getattr(c, "setting", "").startswith("max_split_size_mb") and not c.oom]
        conf = ms[0].setting if ms else "max_split_size_mb:128"
        d.env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        d.changes.append(f"PYTORCH_CUDA_ALLOC_CONF={conf} (expandable segments were already on)")
        if ms:
            d.predicted, d.basis = ms[0].peak_reserved_bytes, "replay"
    else:
        d.env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        d.changes.append("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: free pages anywhere can serve a request")
        if exp and not exp[0].oom:
            d.predicted, d.basis = exp[0].peak_reserved_bytes, "replay"
            d.notes.append("the recorded trace replays without failing under expandable_segments:True (peak "
                           f"{fmt_bytes(exp[0].peak_reserved_bytes)} reserved); the replay ends where the run "
                           "died, so what came after is not covered")
    if d.predicted is None and ctx.estimate is not None:
        d.predicted = ctx.estimate.predicted_peak_bytes
        d.notes.append("predicted peak from the memory model (no snapshot to replay)")
    d.notes.append("nothing else changes: the live memory fits, only its layout did not")


def _eval_batch(ctx: Context, ev: EvalPass, d: _Draft) -> bool:
    """An OOM inside evaluation: the evaluation batch, the largest halving whose scaled peak fits (the training
    steps ran, so their settings stay).  No plan without the batch and the OOM's figures."""
    found = smaller_eval_batch(ctx, ev, MARGIN)
    if found is None:
        return False
    new, peak = found
    key = "per_device_eval_batch_size" if ev.hf else "evaluation batch size"
    d.args[key] = new
    d.changes.append(f"{key} {ev.batch} → {new}: the evaluation batch's forward shrinks with it")
    d.predicted, d.basis = peak, "scaled"
    d.notes.append(f"the evaluation at batch {new} needs about {fmt_bytes(peak)}: the failing allocation scaled to "
                   "the new batch" + (" (with the loss's fp32 temporaries)" if ev.logits_bytes_per_value else "")
                   + " on top of what PyTorch held at the OOM, live and cached")
    train = ctx.estimate.predicted_peak_bytes if ctx.estimate is not None else None
    L = ctx.limit_bytes
    if train is not None and L and train > peak:
        # the run's peak stays the training step's, which ran at these settings before the evaluation failed
        d.predicted = min(train, L)
        d.fits = peak <= MARGIN * L
        d.notes.append(f"the run's peak stays the training step's (memory model {fmt_bytes(train)}), which ran at "
                       "these settings before the evaluation failed; they stay")
    if ev.batch_inferred:
        d.assumed = (f"evaluation batch {ev.batch} (inferred: the failing request is that many sequences' logits)",)
    return True


def _batch_search(ctx: Context, d: _Draft, allow_ckpt: bool) -> bool:
    if d.pricer.blind_spot() is not None:
        # the batch that failed was larger than any the inputs describe: no setting can be priced for it.
        # The finding's own fixes (cap the longest document, a chunked loss) stand; no plan is invented
        return False
    s = ctx.setup
    L = ctx.limit_bytes
    mb = int(s.get("micro_batch", 1) or 1)
    gas = int(s.get("grad_accum", 1) or 1)
    ckpt = bool(s.get("grad_ckpt", False))
    cands: list[tuple[int, bool]] = []
    m = mb
    while True:
        cands.append((m, ckpt))
        if allow_ckpt and not ckpt:
            cands.append((m, True))
        if m == 1:
            break
        m = max(1, m // 2)
    best: tuple[int, bool, WhatIf] | None = None
    for m, c in cands:
        if (m, c) == (mb, ckpt):
            continue
        w = d.pricer.what_if(f"micro-batch {m}" + (" + checkpointing" if c else ""), micro_batch=m, grad_ckpt=c,
                    grad_accum_steps=gas * mb // m if mb % m == 0 else gas * -(-mb // m))
        if w is None:
            break
        if fits(w, L, MARGIN):
            best = (m, c, w)
            break
    if ctx.spec is None and not ctx.adapters_apply:
        # a network trained from scratch, size unknown: no trainer argument turns checkpointing on; a known batch
        # is halved (the finding's fixes name the rest: input size, autocast, torch.utils.checkpoint)
        if s.get("micro_batch") is None or mb <= 1:
            return False
        _set_batch(ctx, d, max(1, mb // 2), gas * 2)
        d.notes.append("model size unknown: no predicted peak")
        return True
    if ctx.spec is None:
        # no model size, so no prediction: the generic move, said as such
        if not ckpt:
            _set_ckpt(d)
        if s.get("micro_batch") is not None and mb > 1:
            m = max(1, mb // 2)
            _set_batch(ctx, d, m, gas * 2)
        else:
            d.notes.append("the micro-batch is not in the inputs: if checkpointing is not enough, halve "
                           "per_device_train_batch_size and double gradient_accumulation_steps")
        d.notes.append("model size unknown: no predicted peak (give the log with its parameter count, or run "
                       "`oompost estimate`)")
        return bool(d.changes)
    if best is None:
        w = d.pricer.what_if("micro-batch 1 + checkpointing", micro_batch=1, grad_ckpt=True)
        d.notes.append(f"no micro-batch / checkpointing combination fits {int(s.get('seq_len', 0) or 0):,}-token "
                       "sequences" + (f" (micro-batch 1 with checkpointing: {fmt_bytes(w.peak)})" if w else ""))
        if _seq_cap(ctx, d, mb, gas, ckpt):
            return True
        if not ctx.setup.deepspeed or ctx.setup.offload_param != "none":
            return False
        return _capacity(ctx, d)
    m, c, w = best
    if s.get("micro_batch") is None or s.get("seq_len") is None:
        d.assumed = _assumed(ctx)
        d.notes.append("the micro-batch or the sequence length is not in the inputs: the prediction assumes "
                       + "; ".join(a for a in d.assumed if "(assumed)" in a))
    new_gas = gas * mb // m if mb % m == 0 else gas * -(-mb // m)
    if m != mb:
        _set_batch(ctx, d, m, new_gas)
    if c and not ckpt:
        _set_ckpt(d)
    d.estimate = w
    if str(s.get("attn", "")) == "eager":
        d.alternatives.append("attn_implementation=sdpa would remove the s² attention scores as well")
    return True


def _seq_cap(ctx: Context, d: _Draft, mb: int, gas: int, ckpt: bool) -> bool:
    """Longest sequence cap (truncation) that fits, changing the batch as little as possible."""
    seq = int(ctx.setup.get("seq_len", 0) or 0)
    cap = seq // 2
    while cap >= 256:
        for m in _halvings(mb):
            for c in (True,):
                w = d.pricer.what_if(f"max_seq_length {cap}", seq_len=cap, micro_batch=m, grad_ckpt=c,
                            grad_accum_steps=gas * mb // m if mb % m == 0 else gas * -(-mb // m))
                if w is not None and fits(w, ctx.limit_bytes, MARGIN):
                    if m != mb:
                        _set_batch(ctx, d, m, gas * mb // m if mb % m == 0 else gas * -(-mb // m))
                    if c and not ckpt:
                        _set_ckpt(d)
                    d.args["max_seq_length"] = cap
                    d.changes.append(f"truncate sequences to {cap:,} tokens (the longest batch had {seq:,})")
                    d.alternatives.append("keep the long sequences with a chunked cross-entropy (e.g. Liger's fused "
                                          "linear cross-entropy): the fp32 loss over the vocabulary is what needs "
                                          "the memory")
                    d.estimate = w
                    return True
        cap //= 2
    return False


def _buckets(ctx: Context, d: _Draft) -> bool:
    if d.cfg is None:
        return False
    zero = d.cfg.setdefault("zero_optimization", {})
    changed = False
    from ..dsconfig.model import DEFAULT_BUCKET, recommended_bucket

    elem = 4 if ctx.setup.dtype == "fp32" else 2
    for key in ("reduce_bucket_size", "allgather_bucket_size"):
        v = zero.get(key)
        if isinstance(v, (int, float)) and v > DEFAULT_BUCKET:
            new = recommended_bucket(int(v), elem * 2)          # the size `oompost check` suggests too
            zero[key] = new
            d.changes.append(f"zero_optimization.{key}: {_num(v)} → {_num(new)} (DeepSpeed's default; "
                             "`oompost check` suggests the same)")
            changed = True
    if ctx.phase.phase.value == "zero3_gather":
        for key, div in (("stage3_max_live_parameters", 4), ("stage3_prefetch_bucket_size", 2)):
            v = zero.get(key, 1_000_000_000 if "live" in key else 50_000_000)
            if isinstance(v, (int, float)):
                zero[key] = int(v) // div
                d.changes.append(f"zero_optimization.{key}: {int(v):,} → {int(v) // div:,}")
                changed = True
    if not changed:
        v = zero.get("reduce_bucket_size", DEFAULT_BUCKET)
        if isinstance(v, (int, float)):
            new = recommended_bucket(int(v), elem * 2)
            zero["reduce_bucket_size"] = new
            d.changes.append(f"zero_optimization.reduce_bucket_size: {_num(v)} → {_num(new)}")
            changed = True
    over = {"reduce_bucket_size": int(zero.get("reduce_bucket_size", 500_000_000))}
    w = d.pricer.what_if("smaller buckets", **over)
    if w is not None:
        d.estimate = w
        if not fits(w, ctx.limit_bytes, MARGIN):
            d.notes.append("smaller buckets alone are predicted not to be enough")
            _batch_search(ctx, d, allow_ckpt=True)
    return changed


def _capacity(ctx: Context, d: _Draft) -> bool:
    s = ctx.setup
    L = ctx.limit_bytes
    stage = int(s.get("zero_stage", 0) or 0)
    ws = int(s.get("world_size", 1) or 1)
    cands: list[tuple[str, dict[str, Any]]] = []
    if ws > 1 and stage < 2:
        cands.append(("ZeRO-2", {"zero_stage": 2}))
    if ws > 1 and stage < 3:
        cands.append(("ZeRO-3", {"zero_stage": 3}))
    if s.offload_optimizer == "none":
        cands.append(("offload_optimizer=cpu", {"zero_stage": max(stage, 2 if stage < 3 else 3),
                                                "offload_optimizer": "cpu"}))
    cands.append(("ZeRO-3 + offload_param + offload_optimizer", {"zero_stage": 3, "offload_optimizer": "cpu",
                                                                 "offload_param": "cpu"}))
    chosen = None
    for label, over in cands:
        for extra in ({}, {"grad_ckpt": True}):
            w = d.pricer.what_if(label, **over, **extra)
            if w is not None and fits(w, L, MARGIN):
                chosen = (label, {**over, **extra}, w)
                break
        if chosen:
            break
    if chosen is None:
        # with the model states off the GPU, find the batch that fits
        label, over = cands[-1]
        for m in _halvings(int(s.get("micro_batch", 1) or 1)):
            w = d.pricer.what_if(label, **over, micro_batch=m, grad_ckpt=True)
            if w is not None and fits(w, L, MARGIN):
                chosen = (label + f", micro-batch {m}", {**over, "micro_batch": m, "grad_ckpt": True}, w)
                break
    lora = d.pricer.what_if("LoRA r=16 + checkpointing", lora_rank=16, grad_ckpt=True)
    if lora is not None:
        d.alternatives.append(f"LoRA (r=16) with checkpointing instead: predicted {fmt_bytes(lora.peak)}, no "
                              "host RAM for offload, but it trains adapters rather than the full model")
    if chosen is None:
        if lora is not None and fits(lora, L, MARGIN):
            d.args["lora_r"] = 16
            _set_ckpt(d)
            d.changes.append("train LoRA adapters (r=16) instead of all weights: nothing else fits this GPU")
            if not s.deepspeed:
                # the prediction holds the frozen base in 16-bit (estimate/states.py): say so, a base left in
                # fp32 takes twice that (a capture's rerun kept its fp32 build: 17.2 GiB against 12.8)
                d.args["torch_dtype"] = "bfloat16"
                d.changes.append("load the frozen base model in bfloat16 (from_pretrained(torch_dtype=torch."
                                 "bfloat16)): the prediction assumes 16-bit base weights")
            d.estimate = lora
            return True
        d.notes.append("no ZeRO / offload setting is predicted to fit on this GPU count; add GPUs or use a "
                       "smaller model")
        return False
    label, over, w = chosen
    d.estimate = w
    zero = d.cfg.setdefault("zero_optimization", {}) if d.cfg is not None else None
    if zero is not None:
        if over.get("zero_stage") is not None and over["zero_stage"] != stage:
            zero["stage"] = over["zero_stage"]
            d.changes.append(f"zero_optimization.stage: {stage} → {over['zero_stage']}")
            if over["zero_stage"] == 3 and s.offload_param != "none":
                d.changes.append("the offload_param already in the config takes effect (it was ignored at stage "
                                 f"{stage})")
        for what in ("optimizer", "param"):
            if over.get(f"offload_{what}") == "cpu" and getattr(s, f"offload_{what}") == "none":
                zero[f"offload_{what}"] = {"device": "cpu", "pin_memory": True}
                d.changes.append(f"zero_optimization.offload_{what}: cpu (pinned)")
        if over.get("offload_optimizer") == "cpu" and d.cfg is not None:
            d.cfg.setdefault("zero_force_ds_cpu_optimizer", False) if _client_optimizer(ctx) else None
        if zero.get("stage") == 3:
            for k in ("allgather_bucket_size", "allgather_partitions", "reduce_scatter"):
                zero.pop(k, None)
        else:
            if "offload_param" in zero and zero.get("stage", stage) < 3:
                zero.pop("offload_param")
                d.changes.append("zero_optimization.offload_param removed (ignored below stage 3)")
    elif s.deepspeed:
        # a DeepSpeed run whose config is not in the inputs: the plan is the minimal diff, priced for the
        # configuration the inputs show (and said to be assumed where they do not show it)
        zdiff: dict[str, Any] = {}
        if over.get("zero_stage") is not None and over["zero_stage"] != stage:
            zdiff["stage"] = over["zero_stage"]
            d.changes.append(f"zero_optimization.stage: {stage if s.get('zero_stage') is not None else '?'} → "
                             f"{over['zero_stage']}")
        for what in ("optimizer", "param"):
            if over.get(f"offload_{what}") == "cpu" and getattr(s, f"offload_{what}") == "none":
                zdiff[f"offload_{what}"] = {"device": "cpu", "pin_memory": True}
                d.changes.append(f"zero_optimization.offload_{what}: cpu (pinned)")
        d.partial_diff = {"zero_optimization": zdiff} if zdiff else {}
        d.assumed = _assumed(ctx)
        d.notes.append("the run's ds_config is not in the inputs (give it with --ds-config, or put it in the job "
                       "directory): apply this diff to it; the prediction assumes " + "; ".join(d.assumed))
    else:
        d.notes.append("the run did not use DeepSpeed: these are DeepSpeed settings to adopt")
        d.cfg = _minimal_ds_config(ctx, over)
        d.changes.append(f"adopt DeepSpeed ZeRO-{over.get('zero_stage', 2)}"
                         + ("".join(f", offload_{w}=cpu" for w in ("optimizer", "param")
                                    if over.get(f"offload_{w}") == "cpu")))
    if "micro_batch" in over:
        mb = int(s.get("micro_batch", 1) or 1)
        gas = int(s.get("grad_accum", 1) or 1)
        _set_batch(ctx, d, over["micro_batch"], gas * mb // over["micro_batch"])
    if over.get("grad_ckpt") and not s.get("grad_ckpt", False):
        _set_ckpt(d)
    if w.estimate.host_bytes:
        d.notes.append(f"needs about {fmt_bytes(w.estimate.host_bytes)} of host RAM per node for offloaded state")
    return True


def _config(ctx: Context, primary: Finding, d: _Draft) -> bool:
    if d.cfg is None:
        return False
    changed = False
    for fx in primary.fixes:
        if fx.kind != "ds_config" or not isinstance(fx.value, (int, float)) or isinstance(fx.value, bool):
            continue
        if fx.key == "train_batch_size" and _keep_global_batch(ctx, d):
            changed = True
            continue
        path = fx.key.split(".")
        node = d.cfg
        for p in path[:-1]:
            node = node.setdefault(p, {})
        old = node.get(path[-1])
        node[path[-1]] = fx.value
        d.changes.append(f"{fx.key}: {old!r} → {fx.value!r}")
        changed = True
    # the lint catches what the primary does not name (more floats, more "auto")
    try:
        from ..dsconfig.lint import lint

        for msg in lint(d.cfg, world_size=int(ctx.setup.get("world_size", 1) or 1)):
            if msg.code == "DSC031" and msg.severity == "error":
                path = msg.key.split(".")
                node = d.cfg
                for p in path[:-1]:
                    node = node.get(p, {})
                v = node.get(path[-1]) if isinstance(node, dict) else None
                if isinstance(v, float) and isinstance(node, dict):
                    node[path[-1]] = int(v)
                    d.changes.append(f"{msg.key}: {v!r} → {int(v)}")
                    changed = True
    except Exception:  # the lint is optional help here
        pass
    d.estimate = d.pricer.what_if("as configured")
    return changed


def _keep_global_batch(ctx: Context, d: _Draft) -> bool:
    """A train_batch_size that disagrees with micro-batch × accumulation × GPUs: keep the
    user's global batch and change the accumulation when it divides evenly."""
    assert d.cfg is not None
    tbs, mb = _int(d.cfg.get("train_batch_size")), _int(d.cfg.get("train_micro_batch_size_per_gpu"))
    ws_known = ctx.setup.get("world_size") is not None
    ws = int(ctx.setup.get("world_size", 1) or 1)
    if not tbs or not mb or tbs % (mb * ws):
        return False
    old = d.cfg.get("gradient_accumulation_steps")
    gas = tbs // (mb * ws)
    d.cfg["gradient_accumulation_steps"] = gas
    d.changes.append(f"gradient_accumulation_steps: {old!r} → {gas} (keeps train_batch_size {tbs} = {mb} × {gas} × "
                     f"{ws} GPU{'s' if ws != 1 else ''})")
    if not ws_known:
        d.notes.append("the world size is not in the inputs: 1 GPU assumed; with N GPUs use "
                       f"gradient_accumulation_steps = {tbs} / ({mb} × N)")
    d.alternatives.append(f"train_batch_size={mb * (_int(old) or 1) * ws} instead keeps the accumulation but changes "
                          "the global batch (and the learning-rate schedule it was tuned for)")
    return True


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v <= 0:
        return None
    return int(v)


def _global_batch(cfg: dict[str, Any] | None, micro: Any, gas: Any, ws: int) -> int | None:
    if cfg is not None and _int(cfg.get("train_batch_size")):
        return _int(cfg["train_batch_size"])
    m = _int(cfg.get("train_micro_batch_size_per_gpu")) if cfg else None
    g = _int(cfg.get("gradient_accumulation_steps")) if cfg else None
    m, g = _int(micro) or m, _int(gas) or g
    return m * g * ws if m and g else None


def _host(ctx: Context, d: _Draft) -> bool:
    s = ctx.setup
    if d.cfg is None or (s.offload_optimizer == "none" and s.offload_param == "none"):
        return False
    zero = d.cfg.setdefault("zero_optimization", {})
    w = d.pricer.what_if("no offload", offload_optimizer="none", offload_param="none")
    if w is not None and fits(w, ctx.limit_bytes, MARGIN):
        zero.pop("offload_optimizer", None)
        zero.pop("offload_param", None)
        d.changes.append("zero_optimization.offload_optimizer/offload_param removed: the model states fit on the "
                         "GPU, so nothing needs the host's RAM")
        d.estimate = w
        return True
    for k in ("offload_optimizer", "offload_param"):
        if isinstance(zero.get(k), dict):
            zero[k]["pin_memory"] = False
    d.changes.append("offload pin_memory: false (pageable buffers; same RAM, fewer locked pages)")
    d.notes.append("the model states do not fit on the GPU without offload: the job needs more host RAM, "
                   "NVMe offload (device: nvme, nvme_path) or more nodes")
    d.estimate = d.pricer.what_if("as configured")
    return True


# ------------------------------------------------------------------ helpers

def _assumed(ctx: Context) -> tuple[str, ...]:
    """The configuration a prediction was made for, each value with where it came from."""
    s = ctx.setup
    out = []
    for label, name, default in (("ZeRO stage", "zero_stage", 0), ("micro-batch", "micro_batch", 1),
                                 ("gradient accumulation", "grad_accum", 1), ("world size", "world_size", 1),
                                 ("sequence length", "seq_len", 1024)):
        v = s.get(name)
        out.append(f"{label} {v} (from the log)" if v is not None else f"{label} {default} (assumed)")
    out.append(f"offload optimizer={s.offload_optimizer}, param={s.offload_param} (from the log, else none)")
    out.append(f"{s.dtype}" + (" (from the log)" if ctx.evidence.fact_value("deepspeed.dtype") else " (assumed)"))
    return tuple(out)


def _num(v: Any) -> str:
    """5e8 as '500,000,000' (what the config and `oompost check` show)."""
    return f"{int(v):,}" if isinstance(v, (int, float)) and float(v).is_integer() else repr(v)


def _halvings(mb: int) -> list[int]:
    out = [mb]
    while mb > 1:
        mb = max(1, mb // 2)
        out.append(mb)
    return out


def _client_optimizer(ctx: Context) -> bool:
    cfg = ctx.setup.ds_config or {}
    return "optimizer" not in cfg


def _minimal_ds_config(ctx: Context, over: dict[str, Any]) -> dict[str, Any]:
    mb = int(over.get("micro_batch", ctx.setup.get("micro_batch", 1) or 1))
    zero: dict[str, Any] = {"stage": over.get("zero_stage", 2), "overlap_comm": True, "contiguous_gradients": True}
    for what in ("optimizer", "param"):
        if over.get(f"offload_{what}") == "cpu":
            zero[f"offload_{what}"] = {"device": "cpu", "pin_memory": True}
    return {"train_micro_batch_size_per_gpu": mb,
            "gradient_accumulation_steps": int(ctx.setup.get("grad_accum", 1) or 1),
            "bf16": {"enabled": ctx.setup.dtype == "bf16"}, "fp16": {"enabled": ctx.setup.dtype == "fp16"},
            "zero_optimization": zero, "gradient_clipping": 1.0, "zero_force_ds_cpu_optimizer": False}


def _set_batch(ctx: Context, d: _Draft, micro: int, gas: int) -> None:
    mb0 = int(ctx.setup.get("micro_batch", 1) or 1)
    gas0 = int(ctx.setup.get("grad_accum", 1) or 1)
    d.args["per_device_train_batch_size"] = micro
    d.args["gradient_accumulation_steps"] = gas
    d.changes.append(f"micro-batch {mb0} → {micro}, gradient accumulation {gas0} → {gas} "
                     f"(global batch {mb0 * gas0} → {micro * gas} per GPU)")
    if d.cfg is not None:
        for key, val in (("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", gas)):
            if d.cfg.get(key) == "auto":
                continue                       # the HF integration fills it from the trainer argument
            d.cfg[key] = val
        if isinstance(d.cfg.get("train_batch_size"), int):
            d.cfg["train_batch_size"] = micro * gas * int(ctx.setup.get("world_size", 1) or 1)


def _set_ckpt(d: _Draft) -> None:
    d.args["gradient_checkpointing"] = True
    d.changes.append("gradient checkpointing on (recompute each layer in backward)")


def _diff(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        out: dict[str, Any] = {}
        for k in [*new, *(k for k in old if k not in new)]:  # the config's own order, deterministically
            if k not in new:
                out[k] = None
            elif k not in old:
                out[k] = new[k]
            elif old[k] != new[k]:
                out[k] = _diff(old[k], new[k])
        return out
    return new


def _finish(ctx: Context, d: _Draft) -> RerunPlan:
    old = ctx.setup.ds_config or {}
    diff = _diff(old, d.cfg) if d.cfg is not None else dict(d.partial_diff)
    validated = None
    errors: tuple[str, ...] = ()
    if d.cfg is not None:
        try:
            from ..dsconfig.validate import validate_prefetched

            out = validate_prefetched(d.cfg, int(ctx.setup.get("world_size", 1) or 1), hf_auto=True)
            if out.available:
                validated = out.passed
                errors = tuple(out.errors)
                run_v = ctx.setup.deepspeed_version
                if run_v and out.version and run_v.split("+")[0] != out.version.split("+")[0]:
                    d.notes.append(f"validated with the installed DeepSpeed {out.version}; the run used {run_v}")
        except Exception as e:  # validation is a check on our output, never a reason to fail
            errors = (f"validation unavailable: {type(e).__name__}",)
    est = d.estimate.estimate if d.estimate is not None else None
    predicted = d.predicted if d.predicted is not None else (est.predicted_peak_bytes if est else None)
    ws = int(ctx.setup.get("world_size", 1) or 1)
    gb0 = _global_batch(ctx.setup.ds_config, ctx.setup.get("micro_batch"), ctx.setup.get("grad_accum"), ws)
    gb1 = _global_batch(d.cfg, d.args.get("per_device_train_batch_size", ctx.setup.get("micro_batch")),
                        d.args.get("gradient_accumulation_steps", ctx.setup.get("grad_accum")), ws)
    if d.cfg is not None and ctx.setup.ds_config and _int(d.cfg.get("train_batch_size")):
        gb1 = _int(d.cfg.get("train_batch_size"))
    L = ctx.limit_bytes
    return RerunPlan(
        ds_config=d.cfg, ds_config_diff=diff, env=d.env, trainer_args=d.args, predicted_peak_bytes=predicted,
        device_bytes=L, changes=tuple(d.changes),
        fits=d.fits if d.fits is not None else (predicted <= MARGIN * L) if predicted is not None and L else None,
        host_bytes=est.host_bytes if est else None,
        global_batch_kept=round(gb1 / gb0, 3) if gb0 and gb1 else None, global_batch=(gb0, gb1),
        overrides=dict(d.estimate.overrides) if d.estimate is not None else None,
        basis=d.basis or ("model" if predicted is not None else ""), assumed=tuple(d.assumed),
        validated_by_deepspeed=validated, validation_errors=errors, notes=tuple(d.notes),
        alternatives=tuple(d.alternatives), breakdown=dict(est.breakdown) if est else {})
