"""``TrainSetup``: one training set-up, from arguments or a ds_config."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from .calibration import OPTIMIZER_STATE_BYTES, _ATTN, _DTYPE_BYTES, _OFFLOAD


# ------------------------------------------------------------------- TrainSetup


@dataclass(frozen=True)
class TrainSetup:
    """One training configuration.

    ``world_size`` is the data-parallel degree (GPUs × nodes); ``nodes`` only
    matters for host RAM per node.  ``deepspeed=False`` means plain PyTorch
    (DDP when ``world_size > 1``; 16-bit dtypes mean AMP over an fp32 model).
    ``overlap_comm=None`` is DeepSpeed's dynamic default: True only at stage 3.
    Bucket sizes are element counts, DeepSpeed's code defaults
    (``deepspeed/runtime/zero/config.py``; deepspeed.md §2.3).
    ``startup_flatten``: where ZeRO-0/1/2 builds the flat 16-bit copy —
    ``"gpu"`` (what DeepSpeed 0.19.8 does when NVML reports enough free
    memory, e.g. under a memory-fraction cap on a large card; the measured
    ~27 GB case), ``"cpu"`` (its fallback), ``"auto"`` (decide from the
    device size like DeepSpeed does).
    ``grad_accum_steps``: micro-batches per optimizer step (ds_config
    ``gradient_accumulation_steps``).  ``torch_amp`` (plain PyTorch only):
    True = AMP over an fp32 module (HF Trainer ``bf16=True``); False = the
    module itself is in the 16-bit dtype (``model.to(torch.bfloat16)``, as in
    tools/capture/train.py), so weights, gradients and AdamW states are 16-bit.
    ``auto_keys`` names ds_config keys that said ``"auto"``; ``notes`` carries
    what ``from_ds_config`` noticed.
    """

    zero_stage: int = 0
    offload_optimizer: str = "none"
    offload_param: str = "none"
    dtype: str = "bf16"
    world_size: int = 1
    nodes: int = 1
    micro_batch: int = 1
    seq_len: int = 2048
    grad_ckpt: bool = False
    attn: str = "sdpa"
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    optimizer: str = "adamw"
    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    overlap_comm: bool | None = None
    contiguous_gradients: bool = True
    prefetch_bucket_size: int = 50_000_000
    max_live_parameters: int = 1_000_000_000
    max_reuse_distance: int = 1_000_000_000
    param_persistence_threshold: int = 100_000
    sub_group_size: int = 1_000_000_000
    zero_init: bool = True
    deepspeed: bool = True
    pin_memory: bool = True
    grad_accum_dtype: str | None = None
    nvme_param_buffer_count: int = 5
    nvme_param_buffer_size: int = 100_000_000
    nvme_optimizer_buffer_count: int = 4
    generation: bool = False
    gen_batch: int = 1
    gen_kv_len: int | None = None
    startup_flatten: str = "gpu"
    grad_accum_steps: int = 1
    torch_amp: bool = True
    auto_keys: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(self.zero_stage in (0, 1, 2, 3), f"zero_stage must be 0-3, not {self.zero_stage!r}")
        _check(self.offload_optimizer in _OFFLOAD, f"offload_optimizer must be one of {_OFFLOAD}")
        _check(self.offload_param in _OFFLOAD, f"offload_param must be one of {_OFFLOAD}")
        _check(self.dtype in _DTYPE_BYTES, f"dtype must be one of {tuple(_DTYPE_BYTES)}")
        _check(self.attn in _ATTN, f"attn must be one of {_ATTN}")
        _check(self.startup_flatten in ("gpu", "cpu", "auto"), "startup_flatten must be gpu, cpu or auto")
        for name in ("world_size", "nodes", "micro_batch", "seq_len", "gen_batch", "grad_accum_steps"):
            _check(getattr(self, name) >= 1, f"{name} must be ≥ 1")
        _check(self.world_size % self.nodes == 0, f"world_size {self.world_size} is not a multiple of nodes {self.nodes}")
        _check(self.lora_rank is None or self.lora_rank >= 1, "lora_rank must be ≥ 1")
        _check(self.optimizer.lower() in OPTIMIZER_STATE_BYTES,
               f"optimizer {self.optimizer!r} unknown (known: {', '.join(sorted(OPTIMIZER_STATE_BYTES))})")
        _check(not (self.deepspeed is False and self.zero_stage > 0), "ZeRO stages need deepspeed=True")
        if isinstance(self.lora_targets, list):
            object.__setattr__(self, "lora_targets", tuple(self.lora_targets))

    # ---------------------------------------------------------- derived
    @property
    def gpus_per_node(self) -> int:
        return self.world_size // self.nodes

    @property
    def element_bytes(self) -> int:
        """Element size of the compute dtype: 2 for bf16/fp16, 4 for fp32."""
        return _DTYPE_BYTES[self.dtype]

    @property
    def effective_overlap_comm(self) -> bool:
        """DeepSpeed's validator ``overlap_comm_valid``: None → stage == 3."""
        return self.zero_stage == 3 if self.overlap_comm is None else bool(self.overlap_comm)

    @property
    def effective_offload_param(self) -> str:
        """``offload_param`` only acts at ZeRO-3; DeepSpeed ignores it below."""
        return self.offload_param if (self.deepspeed and self.zero_stage == 3) else "none"

    @property
    def effective_offload_optimizer(self) -> str:
        """Optimizer offload needs ZeRO ≥ 1 (DeepSpeed rejects/ignores it at stage 0)."""
        return self.offload_optimizer if (self.deepspeed and self.zero_stage >= 1) else "none"

    @property
    def kv_len(self) -> int:
        return self.gen_kv_len or self.seq_len

    # ---------------------------------------------------------- ds_config
    @classmethod
    def from_ds_config(cls, cfg: Mapping[str, Any], **overrides: Any) -> "TrainSetup":
        """Read a real ds_config dict.  ``"auto"`` values are ignored (the
        DeepSpeed code default applies and the key is listed in
        ``auto_keys``); integral floats such as ``5e8`` become ints; defaults
        are those DeepSpeed's code sets (prefetch 5e7, sub_group 1e9,
        overlap_comm True only at stage 3).  ``overrides`` (TrainSetup field
        names) win over the file."""
        if not isinstance(cfg, Mapping):
            raise ValueError("ds_config must be a JSON object")
        values, auto, notes = _read_ds_config(cfg)
        values["deepspeed"] = True
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise TypeError(f"unknown TrainSetup fields: {', '.join(sorted(unknown))}")
        values["auto_keys"] = tuple(auto) + tuple(values.get("auto_keys", ()))
        values["notes"] = tuple(notes) + tuple(values.get("notes", ()))
        return cls(**values)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _ds_int(value: Any, key: str) -> int | None:
    """ds_config numbers: ints, integral floats (5e8), numeric strings; None for "auto"."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, bool):
        raise ValueError(f"ds_config {key}: expected a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"ds_config {key}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"ds_config {key}: not finite: {value!r}")
    return int(round(number))


def _ds_bool(value: Any) -> bool | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


_ZERO_INT_KEYS = {
    "reduce_bucket_size": "reduce_bucket_size",
    "allgather_bucket_size": "allgather_bucket_size",
    "stage3_prefetch_bucket_size": "prefetch_bucket_size",
    "prefetch_bucket_size": "prefetch_bucket_size",
    "stage3_max_live_parameters": "max_live_parameters",
    "max_live_parameters": "max_live_parameters",
    "stage3_max_reuse_distance": "max_reuse_distance",
    "max_reuse_distance": "max_reuse_distance",
    "stage3_param_persistence_threshold": "param_persistence_threshold",
    "param_persistence_threshold": "param_persistence_threshold",
    "sub_group_size": "sub_group_size",
}


def _read_ds_config(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    values: dict[str, Any] = {}
    auto: list[str] = []
    notes: list[str] = []
    zero = cfg.get("zero_optimization") or {}
    if isinstance(zero, bool):  # deprecated {"zero_optimization": true} → stage 1
        zero = {"stage": 1 if zero else 0}
    if not isinstance(zero, Mapping):
        raise ValueError("ds_config zero_optimization must be an object")

    stage = _ds_int(zero.get("stage", 0), "zero_optimization.stage")
    if stage is None:
        auto.append("zero_optimization.stage")
    values["zero_stage"] = stage or 0

    for key, fname in _ZERO_INT_KEYS.items():
        if key in zero:
            v = _ds_int(zero[key], f"zero_optimization.{key}")
            if v is None:
                auto.append(f"zero_optimization.{key}")
            else:
                values[fname] = v
    for key in ("overlap_comm", "contiguous_gradients"):
        if key in zero:
            v = _ds_bool(zero[key])
            if v is None:
                auto.append(f"zero_optimization.{key}")
            else:
                values[key] = v

    for key, fname, legacy in (("offload_optimizer", "offload_optimizer", "cpu_offload"),
                               ("offload_param", "offload_param", "cpu_offload_param")):
        section = zero.get(key)
        if isinstance(section, Mapping):
            device = str(section.get("device", "none") or "none").lower()
            values[fname] = device if device in _OFFLOAD else "none"
            if device not in _OFFLOAD:
                notes.append(f"zero_optimization.{key}.device {device!r} not understood; treated as none")
            if "pin_memory" in section and _ds_bool(section["pin_memory"]) is False:
                values["pin_memory"] = False
            if key == "offload_param":
                for sub, f2 in (("buffer_count", "nvme_param_buffer_count"), ("buffer_size", "nvme_param_buffer_size")):
                    if sub in section and _ds_int(section[sub], f"{key}.{sub}") is not None:
                        values[f2] = _ds_int(section[sub], f"{key}.{sub}")
            elif "buffer_count" in section and _ds_int(section["buffer_count"], "buffer_count") is not None:
                values["nvme_optimizer_buffer_count"] = _ds_int(section["buffer_count"], "buffer_count")
        elif _ds_bool(zero.get(legacy)):
            values[fname] = "cpu"
            notes.append(f"zero_optimization.{legacy} is deprecated; read as {key}.device=cpu")

    values["dtype"] = _read_dtype(cfg, auto)
    data_types = cfg.get("data_types")
    if isinstance(data_types, Mapping) and data_types.get("grad_accum_dtype"):
        values["grad_accum_dtype"] = str(data_types["grad_accum_dtype"]).lower()

    ga = cfg.get("gradient_accumulation_steps")
    if ga is not None:
        v = _ds_int(ga, "gradient_accumulation_steps")
        if v is None:
            auto.append("gradient_accumulation_steps")
        elif v >= 1:
            values["grad_accum_steps"] = v

    mb = cfg.get("train_micro_batch_size_per_gpu")
    if mb is not None:
        v = _ds_int(mb, "train_micro_batch_size_per_gpu")
        if v is None:
            auto.append("train_micro_batch_size_per_gpu")
        else:
            values["micro_batch"] = v

    opt = cfg.get("optimizer")
    if isinstance(opt, Mapping) and opt.get("type") and not _is_auto(opt.get("type")):
        name = str(opt["type"]).lower().replace("_", "")
        if name in OPTIMIZER_STATE_BYTES:
            values["optimizer"] = name
        else:
            notes.append(f"optimizer type {opt['type']!r} not modelled; assumed Adam-like (8 bytes/param of state)")
    if isinstance(cfg.get("activation_checkpointing"), Mapping):
        notes.append("activation_checkpointing section only acts when the model calls deepspeed.checkpointing; "
                     "HF models need gradient_checkpointing=True instead")
    return values, auto, notes


def _read_dtype(cfg: Mapping[str, Any], auto: list[str]) -> str:
    """bf16 (or its alias ``bfloat16``) / fp16 ``enabled``; "auto" is assumed bf16."""
    for key, name in (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16")):
        section = cfg.get(key)
        if isinstance(section, Mapping) and "enabled" in section:
            enabled = section["enabled"]
            if _is_auto(enabled):
                auto.append(f"{key}.enabled")
                if name == "bf16":
                    return "bf16"
                continue
            if _ds_bool(enabled):
                return name
    if any(a.endswith(".enabled") for a in auto):
        return "bf16"
    return "fp32"
