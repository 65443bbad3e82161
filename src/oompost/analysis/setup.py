"""What the run was configured to do, gathered from every source.

Precedence: a ds_config.json the user gave (or found next to the logs), then
the ``json = {...}`` the engine printed, then a config printed as JSON by
the script; batch and sequence settings from the config, then from
``key=value`` lines and HF Trainer's banner; the model size from the log's
parameter count.  Each value keeps the SourceRef it came from, so a report
can say where it read "ZeRO-2" or "micro-batch 16".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..dsconfig.model import DsConfig, parse_ds_config
from ..model import DsConfigSeen, Evidence, SourceRef, Stack

@dataclass(frozen=True, slots=True)
class Value:
    value: Any
    ref: SourceRef | None = None


@dataclass(frozen=True, slots=True)
class RunSetup:
    deepspeed: bool = False
    ds_config: dict[str, Any] | None = None
    ds_config_ref: SourceRef | None = None
    ds_config_origin: str = ""                 # "file" | "log"
    zero_stage: Value | None = None
    offload_optimizer: str = "none"
    offload_param: str = "none"
    dtype: str = "bf16"
    world_size: Value | None = None
    fsdp: bool = False                         # model states sharded by FSDP (not priced by the memory model)
    micro_batch: Value | None = None
    eval_batch: Value | None = None            # the evaluation batch per device (HF's banner or arguments)
    grad_accum: Value | None = None
    seq_len: Value | None = None
    grad_ckpt: Value | None = None
    attn: Value | None = None
    lora_r: Value | None = None
    model_params: Value | None = None
    trainable_params: Value | None = None
    deepspeed_version: str | None = None
    torch_version: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    ds: DsConfig | None = None                 # the typed ds_config (stated vs defaulted values)

    def get(self, name: str, default: Any = None) -> Any:
        v = getattr(self, name)
        return default if v is None else (v.value if isinstance(v, Value) else v)


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None or v == "auto":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if f == int(f) else None


def _pick_config(ev: Evidence) -> DsConfigSeen | None:
    files = [c for c in ev.ds_configs if c.origin == "file"]
    if files:
        return files[-1]                      # --ds-config is appended last
    logs = [c for c in ev.ds_configs if c.origin == "log"]
    return logs[0] if logs else None


def _fact(ev: Evidence, *names: str) -> Value | None:
    for n in names:
        f = ev.fact(n)
        if f is not None:
            return Value(f.value, f.ref)
    return None


def _stack_mentions(stacks: list[Stack], *needles: str) -> bool:
    return any(any(n in fr.filename or n in fr.name for n in needles) for st in stacks for fr in st.frames)


def build_setup(ev: Evidence) -> RunSetup:
    seen = _pick_config(ev)
    cfg = seen.config if seen else None
    zero = cfg.get("zero_optimization") if isinstance(cfg, dict) else None
    zero = zero if isinstance(zero, dict) else {}
    stacks = [o.stack for o in ev.ooms] + [f.stack for f in ev.failures]
    deepspeed = bool(cfg) or any(f.name.startswith("deepspeed") for f in ev.facts) or _stack_mentions(
        stacks, "deepspeed/")

    stage = None
    if _int(zero.get("stage")) is not None:
        stage = Value(_int(zero.get("stage")), seen.ref if seen else None)
    else:
        stage = _fact(ev, "deepspeed.zero_stage")
    offload_opt = _offload(zero.get("offload_optimizer"))
    offload_par = _offload(zero.get("offload_param"))
    if zero.get("cpu_offload") is True:
        offload_opt = "cpu"
    if not zero:  # no config file: the engine's printed zero_config says where the states live
        offload_opt = ev.fact_value("deepspeed.offload_optimizer") or offload_opt
        offload_par = ev.fact_value("deepspeed.offload_param") or offload_par
    if offload_opt == "none" and ev.fact_value("deepspeed.cpu_offload") is True:
        offload_opt = "cpu"

    # one reader of the ds_config for everyone (dsconfig.model): what the file states, else what the
    # engine printed, else DeepSpeed's own default (fp32 without a bf16/fp16 section)
    model = parse_ds_config(cfg) if isinstance(cfg, dict) else None
    logged = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(ev.fact_value("deepspeed.dtype"))
    if model is not None and model.precision.stated:
        dtype = model.precision.value
    elif logged is not None:
        dtype = logged
    elif model is not None:
        dtype = model.precision.value
    else:
        dtype = "bf16"                        # no DeepSpeed config at all: the usual mixed-precision run

    world = _fact(ev, "world_size", "nccl.nranks")
    if world is None and (nproc := _fact(ev, "nproc_per_node")) is not None:
        nodes = _int(ev.fact_value("nnodes")) or 1
        world = Value(int(nproc.value) * nodes, nproc.ref)
    if world is None:
        ranks = {o.rank for o in ev.ooms if o.rank is not None} | {e.rank for e in ev.exits if e.rank is not None}
        if len(ranks) > 1:
            world = Value(max(ranks) + 1, None)

    micro = None
    if isinstance(cfg, dict) and _int(cfg.get("train_micro_batch_size_per_gpu")) is not None:
        micro = Value(_int(cfg["train_micro_batch_size_per_gpu"]), seen.ref if seen else None)
    micro = micro or _fact(ev, "train.per_device_train_batch_size")
    gas = None
    if isinstance(cfg, dict) and _int(cfg.get("gradient_accumulation_steps")) is not None:
        gas = Value(_int(cfg["gradient_accumulation_steps"]), seen.ref if seen else None)
    gas = gas or _fact(ev, "train.gradient_accumulation_steps")

    seq = _fact(ev, "train.max_seq_length")
    step_lens = [f for f in ev.facts_named("train.step_seq_len")]
    if step_lens:
        longest = max(step_lens, key=lambda f: f.value)
        if seq is None or longest.value > seq.value:
            seq = Value(longest.value, longest.ref)

    ckpt = _fact(ev, "train.gradient_checkpointing")
    if _stack_mentions(stacks, "torch/utils/checkpoint"):
        ckpt = Value(True, ckpt.ref if ckpt else None)
    attn = _fact(ev, "train.attn_implementation")
    if attn is None:
        if _stack_mentions(stacks, "sdpa_attention"):
            attn = Value("sdpa")
        elif _stack_mentions(stacks, "eager_attention_forward"):
            attn = Value("eager")
        elif _stack_mentions(stacks, "flash_attention"):
            attn = Value("flash")
    lora = _fact(ev, "train.lora_r")
    params = _fact(ev, "model.params")
    trainable = _fact(ev, "model.trainable_params")
    if lora is None and params and trainable and trainable.value < 0.2 * params.value:
        lora = Value(16, trainable.ref)        # adapters: rank unknown, 16 is the common default
    return RunSetup(
        deepspeed=deepspeed, ds_config=cfg, ds_config_ref=seen.ref if seen else None,
        ds_config_origin=seen.origin if seen else "", zero_stage=stage, offload_optimizer=offload_opt,
        offload_param=offload_par, dtype=dtype, world_size=world,
        fsdp=not deepspeed and ev.fact("cue.fsdp") is not None, micro_batch=micro,
        eval_batch=_fact(ev, "train.per_device_eval_batch_size"), grad_accum=gas, seq_len=seq,
        grad_ckpt=ckpt, attn=attn, lora_r=lora, model_params=params, trainable_params=trainable,
        deepspeed_version=ev.fact_value("deepspeed.version") or None,
        torch_version=ev.fact_value("torch.version") or None, ds=model)


def _offload(section: Any) -> str:
    if isinstance(section, dict):
        dev = section.get("device", "none")
        return dev if dev in ("cpu", "nvme") else "none"
    return "none"
