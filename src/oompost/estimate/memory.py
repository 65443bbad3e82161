"""Per-GPU memory estimate for one training set-up (DESIGN.md "Memory model").

Everything is bytes on one GPU unless a name says ``host``.  Ψ below is the
model's parameter count, N the data-parallel world size, e the element size of
the compute dtype (2 for bf16/fp16, 4 for fp32), b the micro-batch, s the
sequence length, h hidden, a heads, d head_dim, i FFN width, V vocabulary.

Model states (ZeRO paper, arXiv:1910.02054 §3; DeepSpeed's own accounting in
``estimate_zero2/3_model_states_mem_needs``, reference/deepspeed.md §2.2):
weights eΨ, gradients eΨ, optimizer 12Ψ (fp32 master 4 + Adam m, v 8) plus
the 4Ψ fp32 gradient copy DeepSpeed builds for the step — 18Ψ beyond the
16-bit weights.  ZeRO-1 divides the optimizer by N, ZeRO-2 also the
gradients, ZeRO-3 also the weights (keeping the gathered working set and the
persistent small parameters whole).  Offload moves optimizer (and at stage 3
the parameters) to host RAM, reported separately with its pinned buffers.

On top, what DeepSpeed's estimators leave out: the start-up peak of
``deepspeed.initialize`` (module + its flat 16-bit copy, ~4Ψ at ZeRO-0/1/2),
communication buckets, the ZeRO-3 prefetch working set, activations, logits
and loss temporaries, KV cache for generation, CUDA context and NCCL.

Activations are a sum of named per-tensor terms (what autograd saves for a
HuggingFace Llama-family block), each multiplied by its own factor in
``CALIBRATION``.  Nothing here imports torch or deepspeed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

from oompost.units import GiB, MiB

from .models import ModelSpec

__all__ = [
    "CALIBRATION",
    "DEFAULT_DEVICE_BYTES",
    "Estimate",
    "TrainSetup",
    "activation_terms",
    "estimate",
    "kv_cache_bytes",
    "logits_terms",
    "lora_adapter_params",
]

# ----------------------------------------------------------------- calibration
# Every tunable constant of the memory model lives here — to be fitted from
# docs/estimator_accuracy measurements (H200, DeepSpeed 0.19.8, torch 2.x).
# "act.*" / "logits.*" are dimensionless multipliers on the analytic byte
# count of one named term (1.0 = the tensor sizes autograd saves, as derived
# in activation_terms/logits_terms); byte-valued entries end in "_bytes".
CALIBRATION: dict[str, float] = {
    # --- per-layer saved activations (see activation_terms for each formula)
    "act.norm_fp32_input": 1.0,     # RMSNorm: fp32 upcast of its input, saved by pow/mul
    "act.norm_normalized": 1.0,     # RMSNorm: normalised 16-bit tensor saved by the weight multiply
    "act.norm_input": 1.0,          # LayerNorm: its input, saved by native_layer_norm
    "act.attn_input": 1.0,          # q/k/v projections' shared input
    "act.q": 1.0,                   # post-RoPE queries, saved by the attention kernel
    "act.k": 1.0,                   # post-RoPE keys (kv heads; all heads for eager + GQA)
    "act.v": 1.0,                   # values
    "act.attn_out": 1.0,            # SDPA/flash output saved by the kernel
    "act.attn_lse": 1.0,            # SDPA/flash log-sum-exp (fp32, b·a·s)
    "act.o_proj_input": 1.0,        # o_proj input (reshaped copy of the attention output)
    "act.attn_softmax": 1.0,        # eager: softmax output (fp32 in the Llama family)
    "act.attn_probs": 1.0,          # eager: 16-bit probabilities fed to probs @ v
    "act.attn_dropout": 1.0,        # eager with attention dropout: mask + output
    "act.hidden_dropout": 1.0,      # residual dropout masks (GPT-2/OPT)
    "act.mlp_input": 1.0,           # gate/up (fc1) shared input
    "act.mlp_gate": 1.0,            # gate_proj output, saved by SiLU
    "act.mlp_up": 1.0,              # up_proj output, saved by the product
    "act.mlp_act": 1.0,             # SiLU(gate) (GELU(fc1) for dense MLPs), saved by the product / fc2
    "act.mlp_product": 1.0,         # SiLU(gate)·up, down_proj's input
    "act.mlp_fc": 1.0,              # dense MLP: fc1 output saved by GELU
    # --- model-level activation terms
    "act.ckpt_layer_input": 1.0,    # full recompute: each layer's 16-bit input
    "act.final_norm": 1.0,          # final norm + lm_head input
    "act.attn_mask": 1.0,           # eager: the 4-D additive causal mask
    "act.backward_transient": 1.0,  # gradient tensors alive inside one layer's backward
    # --- logits and loss (HF ForCausalLMLoss in fp32)
    "logits.lm_head_out": 1.0,      # b·s·V logits in the compute dtype
    "logits.fp32_upcast": 1.0,      # logits.float() (forward) / dloss/dlogprobs (backward)
    "logits.log_softmax": 1.0,      # fp32 log-softmax output saved by cross-entropy
    "logits.ce_grad": 1.0,          # fp32 gradient out of log_softmax backward
    # --- ZeRO-3 working set and start-up
    "zero3.live_params": 1.0,       # gathered parameters (largest module) multiplier
    "startup.flat_copy": 1.0,       # multiplier on the flat 16-bit copy built in initialize
    # --- allocator: caching-allocator rounding/fragmentation on top of live tensors
    "allocator_overhead_states": 0.0,   # fraction of model-state bytes (few big long-lived tensors)
    "allocator_overhead_dynamic": 0.10,  # fraction of activations + logits + buckets (churn)
    # --- outside PyTorch's allocator
    "cuda_context_bytes": 0.5 * GiB,         # CUDA context + kernels, H200 (DESIGN.md)
    "nccl_first_comm_bytes": 578 * MiB,      # 1st communicator incl. NCCL kernel image (nccl.md §2.2)
    "nccl_comm_bytes": 388 * MiB,            # each further communicator (cuMem, 64 channels, measured)
    "nccl_peer_bytes": 128 * MiB,            # per communicator when it has peers (uncalibrated)
}

DEFAULT_DEVICE_BYTES = 80 * GiB
"""Compared against when no device size is given (an 80 GB A100/H100)."""

# Optimizer state bytes per trainable parameter (states kept in fp32 by DeepSpeed).
OPTIMIZER_STATE_BYTES: Mapping[str, int] = MappingProxyType({
    "adamw": 8, "adam": 8, "fusedadam": 8, "cpuadam": 8, "deepspeedcpuadam": 8, "onebitadam": 8,
    "zerooneadam": 8, "lamb": 8, "onebitlamb": 8, "adagrad": 4, "lion": 4, "sgd": 4, "adafactor": 0,
    "muon": 4,
})

_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_OFFLOAD = ("none", "cpu", "nvme")
_ATTN = ("eager", "sdpa", "flash")
MEMORY_OPT_ALLREDUCE_SIZE = 500_000_000  # deepspeed/runtime/constants.py, ZeRO-0 allreduce bucket

# HF/PEFT module names → the roles ModelSpec.modules() uses.
_LORA_ROLE = {
    "q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "out_proj": "o", "dense": "o",
    "c_proj": "o", "query_key_value": "qkv", "c_attn": "qkv", "qkv_proj": "qkv",
    "gate_proj": "gate", "up_proj": "up", "down_proj": "down", "fc1": "fc1", "c_fc": "fc1",
    "dense_h_to_4h": "fc1", "fc2": "fc2", "dense_4h_to_h": "fc2",
    "q": "q", "k": "k", "v": "v", "o": "o", "qkv": "qkv", "gate": "gate", "up": "up", "down": "down",
}
_ALL_LINEAR = ("q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2")


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
    auto_keys: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(self.zero_stage in (0, 1, 2, 3), f"zero_stage must be 0-3, not {self.zero_stage!r}")
        _check(self.offload_optimizer in _OFFLOAD, f"offload_optimizer must be one of {_OFFLOAD}")
        _check(self.offload_param in _OFFLOAD, f"offload_param must be one of {_OFFLOAD}")
        _check(self.dtype in _DTYPE_BYTES, f"dtype must be one of {tuple(_DTYPE_BYTES)}")
        _check(self.attn in _ATTN, f"attn must be one of {_ATTN}")
        _check(self.startup_flatten in ("gpu", "cpu", "auto"), "startup_flatten must be gpu, cpu or auto")
        for name in ("world_size", "nodes", "micro_batch", "seq_len", "gen_batch"):
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


# -------------------------------------------------------------------- Estimate


@dataclass(frozen=True)
class Estimate:
    """The result.  ``breakdown`` holds per-GPU bytes by component: summing
    every entry except ``kv_cache`` and ``startup_extra`` gives
    ``step_peak_bytes``; ``startup_peak_bytes`` = weights + startup_extra +
    context + nccl.  ``predicted_peak_bytes`` is the largest phase.  Host
    figures are per node (``host_bytes_per_rank`` for one rank)."""

    fits: bool
    predicted_peak_bytes: int
    startup_peak_bytes: int
    step_peak_bytes: int
    generation_peak_bytes: int | None
    device_bytes: int
    host_bytes: int
    host_bytes_per_rank: int
    host_pinned_bytes: int
    breakdown: Mapping[str, int]
    host_breakdown: Mapping[str, int]
    activation_terms: Mapping[str, int]
    assumptions: tuple[str, ...]
    model: str = ""
    n_params: int = 0
    trainable_params: int = 0
    setup: TrainSetup = field(default_factory=TrainSetup)

    @property
    def model_states_bytes(self) -> int:
        """weights + gradients + optimizer on the GPU (what DeepSpeed's
        ``estimate_zero*_model_states_mem_needs`` call gpu_mem)."""
        b = self.breakdown
        return b["weights"] + b["gradients"] + b["optimizer"]

    @property
    def headroom_bytes(self) -> int:
        return self.device_bytes - self.predicted_peak_bytes

    def to_json(self) -> dict[str, Any]:
        """DESIGN.md's ``estimate --format json`` contract, plus added fields."""
        return {
            "fits": self.fits,
            "predicted_peak_bytes": int(self.predicted_peak_bytes),
            "startup_peak_bytes": int(self.startup_peak_bytes),
            "device_bytes": int(self.device_bytes),
            "host_bytes": int(self.host_bytes),
            "breakdown": {k: int(v) for k, v in self.breakdown.items()},
            "assumptions": list(self.assumptions),
            "schema": "oompost.estimate/1",
            "step_peak_bytes": int(self.step_peak_bytes),
            "generation_peak_bytes": None if self.generation_peak_bytes is None else int(self.generation_peak_bytes),
            "model_states_bytes": int(self.model_states_bytes),
            "host_bytes_per_rank": int(self.host_bytes_per_rank),
            "host_pinned_bytes": int(self.host_pinned_bytes),
            "host_breakdown": {k: int(v) for k, v in self.host_breakdown.items()},
            "activation_terms": {k: int(v) for k, v in self.activation_terms.items()},
            "model": {"name": self.model, "n_params": self.n_params, "trainable_params": self.trainable_params},
            "setup": _setup_json(self.setup),
        }


def _setup_json(setup: TrainSetup) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(setup):
        v = getattr(setup, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    out["overlap_comm"] = setup.effective_overlap_comm
    return out


# ----------------------------------------------------------------- LoRA / params


def _lora_roles(targets: tuple[str, ...]) -> frozenset[str]:
    roles: set[str] = set()
    for t in targets:
        key = t.strip().lower()
        if key in ("all-linear", "all_linear", "all"):
            roles.update(_ALL_LINEAR)
        elif key in _LORA_ROLE:
            roles.add(_LORA_ROLE[key])
    if roles & {"q", "k", "v"}:
        roles.add("qkv")  # fused projections (GPT-NeoX, GPT-2, Falcon)
    return frozenset(roles)


def lora_adapter_params(spec: ModelSpec, rank: int, targets: tuple[str, ...]) -> int:
    """Σ over adapted linear modules of r·(in_features + out_features) (PEFT
    ``LoraConfig`` A: r×in, B: out×r), times the number of such modules."""
    roles = _lora_roles(targets)
    return sum(rank * (m.in_features + m.out_features) * m.count for m in spec.linear_modules() if m.role in roles)


def _lora_largest_tensor(spec: ModelSpec, rank: int, targets: tuple[str, ...]) -> int:
    roles = _lora_roles(targets)
    sizes = [rank * max(m.in_features, m.out_features) for m in spec.linear_modules() if m.role in roles]
    return max(sizes, default=0)


def _lora_persistent(spec: ModelSpec, rank: int, targets: tuple[str, ...], threshold: int) -> int:
    roles = _lora_roles(targets)
    total = 0
    for m in spec.linear_modules():
        if m.role in roles:
            for t in (rank * m.in_features, rank * m.out_features):
                if t <= threshold:
                    total += t * m.count
    return total


def _largest_param_tensor(spec: ModelSpec) -> int:
    """Largest single parameter tensor (DeepSpeed's ``largest_param_numel`` for
    the CPU-offload gradient staging buffers)."""
    return max(m.weight_numel for m in spec.modules())


# ----------------------------------------------------------------- activations


def _factor(name: str) -> float:
    return float(CALIBRATION.get(name, 1.0))


def _trains(role: str, roles: frozenset[str], lora: bool) -> bool:
    """Does this linear keep its input for a weight gradient?  Full fine-tune:
    yes; LoRA: only if adapted (lora_A saves the same input tensor)."""
    return (not lora) or role in roles or (role in ("q", "k", "v") and "qkv" in roles)


def _layer_terms(spec: ModelSpec, setup: TrainSetup, b: int, s: int) -> dict[str, float]:
    """Raw bytes (before calibration factors) that autograd keeps for ONE
    transformer block of a HF implementation in training, micro-batch b,
    sequence s, compute element size e.  Each entry is one tensor kind."""
    e = setup.element_bytes
    h, a, i = spec.hidden, spec.heads, spec.intermediate
    tok = b * s
    sbh = tok * h
    lora = setup.lora_rank is not None
    roles = _lora_roles(setup.lora_targets) if lora else frozenset()
    gqa_repeat = setup.attn == "eager" and spec.kv_heads != spec.heads
    kv_width = spec.q_dim if gqa_repeat else spec.kv_dim
    t: dict[str, float] = {}
    n_norm = spec.norms_per_layer

    # --- norms
    if spec.norm == "rmsnorm":
        # HF LlamaRMSNorm: x32 = x.to(float32) is saved by pow(2) and by x32*rsqrt(var)  → 4·b·s·h
        t["norm_fp32_input"] = n_norm * 4 * sbh
        # x_norm.to(dtype) is saved by `weight * x_norm` for the weight's gradient → e·b·s·h (not when frozen)
        t["norm_normalized"] = 0 if lora else n_norm * e * sbh
    else:
        # native_layer_norm saves its input (plus fp32 mean/rstd of b·s, negligible) → e·b·s·h
        t["norm_input"] = n_norm * e * sbh

    # --- attention
    qkv_trains = any(_trains(r, roles, lora) for r in (("qkv",) if spec.fused_qkv else ("q", "k", "v")))
    # input of the q/k/v projections (the norm output), one tensor shared by the three → e·b·s·h
    t["attn_input"] = e * sbh if qkv_trains else 0
    # post-RoPE q (b·s·a·d), k and v (b·s·kv·d; eager repeats K/V to all heads for GQA) saved by the kernel
    t["q"] = e * tok * spec.q_dim
    t["k"] = e * tok * kv_width
    t["v"] = e * tok * kv_width
    if setup.attn == "eager":
        scores = b * a * s * s
        # softmax(scores, dtype=float32) output saved for softmax backward → 4·b·a·s² (e when not upcast)
        t["attn_softmax"] = (4 if spec.softmax_fp32 else e) * scores
        if spec.attn_dropout > 0:
            # dropout keeps a 1-byte mask; its e-byte output is saved by probs @ v
            t["attn_dropout"] = (1 + e) * scores
        elif spec.softmax_fp32 and e < 4:
            # probs.to(dtype) saved by probs @ v → e·b·a·s² (same tensor as the softmax when not upcast)
            t["attn_probs"] = e * scores
        t["attn_out"] = 0  # probs @ v output is not saved
    else:
        # SDPA (flash / mem-efficient backends) and flash-attn save their output and fp32 logsumexp
        t["attn_out"] = e * tok * spec.q_dim
        t["attn_lse"] = 4 * b * a * s
    # o_proj input: transpose(1,2).reshape copy of the attention output (flash's output is already
    # (b, s, a·d): a view of the saved kernel output, no extra bytes)
    o_trains = _trains("o", roles, lora)
    t["o_proj_input"] = e * tok * spec.q_dim if (o_trains and setup.attn != "flash") else 0

    # --- residual dropout (GPT-2 / OPT): two 1-byte masks per block; outputs feed residual adds
    if spec.dropout > 0:
        t["hidden_dropout"] = 2 * 1 * sbh

    # --- MLP
    if spec.gated_mlp:
        up_roles = ("gate", "up")
        # gate/up shared input (post-attention norm output) → e·b·s·h
        t["mlp_input"] = e * sbh if any(_trains(r, roles, lora) for r in up_roles) else 0
        t["mlp_gate"] = e * tok * i      # gate_proj output, saved by SiLU (act_fn saves its input)
        t["mlp_up"] = e * tok * i        # up_proj output, saved by act(gate) * up
        t["mlp_act"] = e * tok * i       # SiLU(gate), saved by act(gate) * up
        # act(gate) * up → down_proj input, saved for down_proj's weight gradient
        t["mlp_product"] = e * tok * i if _trains("down", roles, lora) else 0
    else:
        t["mlp_input"] = e * sbh if _trains("fc1", roles, lora) else 0
        relu = spec.activation.lower() == "relu"
        t["mlp_fc"] = 0 if relu else e * tok * i  # fc1 output saved by GELU (ReLU saves its output instead)
        # activation output = fc2 input (ReLU saves it for its own backward too)
        t["mlp_act"] = e * tok * i if (relu or _trains("fc2", roles, lora)) else 0
    return t


def _model_level_terms(spec: ModelSpec, setup: TrainSetup, b: int, s: int) -> dict[str, float]:
    """Terms that appear once per model: final norm + lm_head input, eager's
    4-D mask, the backward transient of one layer, checkpointed inputs."""
    e = setup.element_bytes
    sbh = b * s * spec.hidden
    lora = setup.lora_rank is not None
    t: dict[str, float] = {}
    if spec.norm == "rmsnorm":
        norm = 4 * sbh + (0 if lora else e * sbh)
    else:
        norm = e * sbh
    # final norm's saved tensors + its output saved by lm_head (frozen under LoRA)
    t["final_norm"] = norm + (0 if lora else e * sbh)
    if setup.attn == "eager":
        t["attn_mask"] = e * b * s * s  # HF's additive 4-D causal mask (b, 1, s, s)
    # inside one layer's backward: dL/dx in and out (2·e·b·s·h) and two MLP-wide grads (2·e·b·s·i)
    t["backward_transient"] = 2 * e * sbh + 2 * e * b * s * spec.intermediate
    if setup.attn == "eager":
        # softmax backward: grad of probs (e) and the fp32 grad of the scores (4), b·a·s² each
        t["backward_transient"] += (4 + e) * b * spec.heads * s * s
    if setup.grad_ckpt:
        # full recompute: torch.utils.checkpoint keeps each block's 16-bit input → L·e·b·s·h
        t["ckpt_layer_input"] = spec.layers * e * sbh
    return t


def activation_terms(spec: ModelSpec, setup: TrainSetup, b: int | None = None, s: int | None = None) -> dict[str, int]:
    """Activation bytes by named term, calibration factors applied.

    Without checkpointing every block's terms count ``layers`` times; with full
    recompute (``grad_ckpt``) they count once (the block being recomputed in
    backward) and ``ckpt_layer_input`` keeps L·e·b·s·h.  Term keys are
    ``layer.<name>`` (all blocks together) and ``model.<name>``."""
    b = setup.micro_batch if b is None else b
    s = setup.seq_len if s is None else s
    mult = 1 if setup.grad_ckpt else spec.layers
    out: dict[str, int] = {}
    for name, raw in _layer_terms(spec, setup, b, s).items():
        if raw:
            out[f"layer.{name}"] = int(raw * mult * _factor(f"act.{name}"))
    for name, raw in _model_level_terms(spec, setup, b, s).items():
        if raw:
            out[f"model.{name}"] = int(raw * _factor(f"act.{name}"))
    return out


def logits_terms(spec: ModelSpec, setup: TrainSetup, b: int | None = None, s: int | None = None) -> dict[str, int]:
    """Logits and loss temporaries (HF ``ForCausalLMLoss``, labels padded not
    logits shifted — transformers ≥ 4.46), tokens T = b·s:

    * ``lm_head_out``  e·T·V — logits in the compute dtype, held by the model output
    * ``fp32_upcast``  4·T·V — ``logits.float()`` in forward; in backward the
      same-sized fp32 dloss/dlogprobs takes its place (0 extra when e = 4 in
      forward, but the backward gradient still exists, so it stays 4·T·V)
    * ``log_softmax``  4·T·V — cross-entropy's saved fp32 log-probabilities
    * ``ce_grad``      4·T·V — log_softmax backward output
    Peak (in backward) ≈ (e + 12)·T·V.
    """
    b = setup.micro_batch if b is None else b
    s = setup.seq_len if s is None else s
    tv = b * s * spec.vocab
    raw = {
        "lm_head_out": setup.element_bytes * tv,
        "fp32_upcast": 4 * tv,
        "log_softmax": 4 * tv,
        "ce_grad": 4 * tv,
    }
    return {k: int(v * _factor(f"logits.{k}")) for k, v in raw.items()}


def kv_cache_bytes(spec: ModelSpec, batch: int, kv_len: int, element_bytes: int) -> int:
    """KV cache: 2 (K and V) · L · batch · kv_len · kv_heads · head_dim · e."""
    return 2 * spec.layers * batch * kv_len * spec.kv_dim * element_bytes


# ----------------------------------------------------------------- model states


@dataclass
class _States:
    weights: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    buckets: float = 0.0
    startup_torch: float = 0.0  # PyTorch bytes at the start-up peak
    host: dict[str, float] = field(default_factory=dict)
    host_pinned: float = 0.0
    notes: list[str] = field(default_factory=list)


def _params(spec: ModelSpec, setup: TrainSetup) -> tuple[int, int, int]:
    """(all weights P, trainable T, largest trainable module) — LoRA adds r·(in+out) adapters."""
    if setup.lora_rank is None:
        return spec.n_params, spec.n_params, spec.largest_layer_params
    adapters = lora_adapter_params(spec, setup.lora_rank, setup.lora_targets)
    if adapters == 0:
        raise ValueError(f"LoRA targets {setup.lora_targets} match no linear module of {spec.name}")
    return spec.n_params + adapters, adapters, _lora_largest_tensor(spec, setup.lora_rank, setup.lora_targets)


def _model_states(spec: ModelSpec, setup: TrainSetup, device_bytes: int) -> _States:
    if not setup.deepspeed:
        return _torch_states(spec, setup)
    if setup.zero_stage == 3:
        return _zero3_states(spec, setup)
    return _zero012_states(spec, setup, device_bytes)


def _opt_bytes(setup: TrainSetup) -> tuple[int, int, int]:
    """(master, states, fp32 grads) bytes per trainable parameter under DeepSpeed.
    ZeRO ≥ 1 always clones an fp32 master partition and builds an fp32 gradient
    partition for the step (even in fp32 runs); ZeRO-0 only with 16-bit dtypes
    (FP16_Optimizer for fp16 and for bf16)."""
    states = OPTIMIZER_STATE_BYTES[setup.optimizer.lower()]
    mixed = setup.element_bytes < 4
    if setup.zero_stage >= 1 or mixed:
        return 4, states, 4
    return 0, states, 0


def _zero012_states(spec: ModelSpec, setup: TrainSetup, device_bytes: int) -> _States:
    """ZeRO-0/1/2 (``stage_1_and_2.py``, ``fp16/fused_optimizer.py``):

    * weights e·P on every GPU; gradients e·T (stage 0/1) or e·T/N (stage 2
      ``grads_in_partition``); with CPU offload stage 2 keeps only the
      ``temp_grad_buffer_for_gpu_offload`` (largest param · e).
    * optimizer (master + states + fp32 grads)·T, ÷N at stage 1/2, or on host.
    * buckets: ``reduce_bucket_size`` · e, ×2 with ``overlap_comm`` (stage 1/2,
      contiguous_gradients); stage 0 all-reduces in 5e8-element buffers.
    * start-up: module e·P on the GPU, then the flat copy e·T of the trainable
      params (4Ψ for a full fine-tune); then the fp32 partition is cloned on the GPU.
    """
    st = _States()
    e, N = setup.element_bytes, setup.world_size
    P, T, _largest_trainable = _params(spec, setup)
    master, states, fp32g = _opt_bytes(setup)
    stage = setup.zero_stage
    offload = setup.effective_offload_optimizer != "none"
    div = N if stage >= 1 else 1

    st.weights = e * P
    largest_param = _largest_param_tensor(spec) if setup.lora_rank is None else _largest_trainable
    if stage == 2:
        st.gradients = e * largest_param if offload else e * T / N
    else:
        st.gradients = e * T
    if offload:
        _host_offload_012(st, setup, T, largest_param)
    else:
        st.optimizer = (master + states + fp32g) * T / div

    bucket_e = 4 if (stage == 1 and setup.grad_accum_dtype in ("fp32", "float32") and e < 4) else e
    if stage >= 1:
        if setup.contiguous_gradients:
            st.buckets = setup.reduce_bucket_size * bucket_e * (2 if setup.effective_overlap_comm else 1)
    elif N > 1:
        st.buckets = min(MEMORY_OPT_ALLREDUCE_SIZE, T) * e

    # start-up peak (PyTorch bytes)
    flat = e * T * _factor("startup.flat_copy")
    flattens = stage >= 1 or e < 4
    on_gpu = setup.startup_flatten == "gpu"
    if setup.startup_flatten == "auto":
        # NVML free memory after module.to(device): card − context − NCCL − module
        free_after_module = device_bytes - CALIBRATION["cuda_context_bytes"] - _nccl_bytes(setup)[1] - e * P
        on_gpu = free_after_module >= e * T
    phase_flatten = e * P + (flat if (flattens and on_gpu) else 0)
    # fp32 master: partition.detach().clone() on the GPU (e·T/N), then .to(fp32) on GPU unless offloaded
    phase_master = e * P + (e * T / div if flattens else 0) + (0 if offload else master * T / div)
    st.startup_torch = max(phase_flatten, phase_master)
    if flattens and on_gpu:
        st.notes.append(
            f"start-up: deepspeed.initialize holds the module ({_g(e * P)}) plus its flat 16-bit copy "
            f"({_g(e * T)}) built on the GPU; DeepSpeed 0.19.8 does so when NVML reports that much free memory "
            f"(true under a memory-fraction cap on a large card: the measured ~27 GB 7B case), else it flattens "
            f"on the CPU and the start-up peak is {_g(max(e * P, phase_master))} of tensors")
    elif flattens:
        st.notes.append(
            f"start-up: flat 16-bit copy built on the CPU (DeepSpeed's fallback when NVML reports less free "
            f"memory than {_g(e * T)}); the GPU then holds the module or the flat copy, plus the partition "
            f"clone ({_g(e * T / div)})")
    return st


def _host_offload_012(st: _States, setup: TrainSetup, T: int, largest_param: int) -> None:
    """ZeRO-1/2 CPU offload host side per rank: fp32 master partition 4T/N
    (pinned), fp32 grad partition 4T/N (pinned), 16-bit param staging buffer
    e·T/N (pinned), Adam states (pageable), gradient staging buffer
    (largest param · e, pinned).  NVMe optimizer offload is not supported
    below stage 3 by DeepSpeed (treated as CPU)."""
    e, N = setup.element_bytes, setup.world_size
    master, states, fp32g = 4, OPTIMIZER_STATE_BYTES[setup.optimizer.lower()], 4
    host = {
        "fp32_master": master * T / N,
        "optimizer_states": states * T / N,
        "fp32_gradients": fp32g * T / N,
        "bit16_param_buffer": e * T / N,
        "grad_staging_buffer": e * largest_param,
    }
    st.host.update(host)
    if setup.pin_memory:
        st.host_pinned += sum(v for k, v in host.items() if k != "optimizer_states")
    if setup.effective_offload_optimizer == "nvme":
        st.notes.append("offload_optimizer device nvme needs ZeRO-3 (ZeRO-Infinity); estimated as cpu")


def _zero3_states(spec: ModelSpec, setup: TrainSetup) -> _States:
    """ZeRO-3 (``stage3.py``, ``partition_parameters.py``):

    * weights: e·(P − persistent)/N partition (host when ``offload_param``) +
      e·persistent (params with numel ≤ ``stage3_param_persistence_threshold``,
      whole on every GPU) + the gathered largest module e·largest_layer.
    * gradients: ``grad_partitions_flat_buffer`` e·T/N (host with optimizer
      offload) + the full gradient of the largest trainable module.
    * optimizer: (master 4 + states)·T/N + fp32 grads of one sub-group
      4·min(sub_group_size, T/N) (``_prepare_sub_group`` creates and frees them
      per sub-group — DeepSpeed's estimator counts 4·T/N instead).
    * buckets: one IPG buffer ``reduce_bucket_size``·e + prefetch
      min(prefetch_bucket_size, max_live − largest)·e.
    * start-up with ``zero_init``: partitions + their defragmented flat copy;
      without it the whole module e·P is moved to every GPU first.
    """
    st = _States()
    e, N = setup.element_bytes, setup.world_size
    P, T, largest_trainable = _params(spec, setup)
    master, states, fp32g = _opt_bytes(setup)
    thr = setup.param_persistence_threshold
    persistent = spec.persistent_params(thr)
    if setup.lora_rank is not None:
        persistent += _lora_persistent(spec, setup.lora_rank, setup.lora_targets, thr)
    partitioned = P - persistent
    largest = spec.largest_layer_params
    live = _factor("zero3.live_params") * largest
    off_param = setup.effective_offload_param != "none"
    off_opt = setup.effective_offload_optimizer != "none"

    part_w = e * partitioned / N
    st.weights = (0 if off_param else part_w) + e * persistent + e * live
    part_g = e * T / N
    st.gradients = (0 if off_opt else part_g) + e * largest_trainable
    per_rank_t = T / N
    if not off_opt:
        st.optimizer = (master + states) * per_rank_t + fp32g * min(setup.sub_group_size, per_rank_t)
    prefetch = min(setup.prefetch_bucket_size, max(0, setup.max_live_parameters - largest))
    st.buckets = (setup.reduce_bucket_size * e if setup.contiguous_gradients else 0) + prefetch * e

    # host side per rank
    if off_opt:
        host = {"fp32_master": master * per_rank_t, "fp32_gradients": fp32g * per_rank_t,
                "grad_partitions": part_g}
        if setup.effective_offload_optimizer == "nvme":
            swap = setup.nvme_optimizer_buffer_count * min(setup.sub_group_size, per_rank_t) * 4
            host["nvme_swap_buffers"] = swap
            st.notes.append(f"offload_optimizer nvme: optimizer states and fp32 master on NVMe "
                            f"({_g((master + states) * per_rank_t)} per rank); host keeps "
                            f"{setup.nvme_optimizer_buffer_count} pinned swap buffers of one sub-group")
            del host["fp32_master"]
        else:
            host["optimizer_states"] = states * per_rank_t
        st.host.update(host)
        if setup.pin_memory:
            st.host_pinned += sum(v for k, v in host.items() if k != "optimizer_states")
    if off_param:
        if setup.effective_offload_param == "nvme":
            buf = setup.nvme_param_buffer_count * setup.nvme_param_buffer_size * e
            st.host["nvme_param_buffers"] = buf
            st.host_pinned += buf
        else:
            st.host["param_partitions"] = part_w
            if setup.pin_memory:
                st.host_pinned += part_w

    # start-up peak
    if setup.zero_init:
        # partitions + their defragmented flat copy (_create_fp16_partitions_with_defragmentation)
        init = (0 if off_param else 2 * part_w) + e * persistent
        st.startup_torch = max(init, st.weights + (0 if off_opt else master * per_rank_t))
    else:
        # engine: module.to(device) of the whole model (not a zero.Init model), then partitioned
        st.startup_torch = e * P + (0 if off_param else part_w)
        st.notes.append(f"ZeRO-3 without zero.Init: every GPU first holds the whole model ({_g(e * P)}) before "
                        f"DeepSpeed partitions it, and every rank builds it in host RAM")
    return st


def _torch_states(spec: ModelSpec, setup: TrainSetup) -> _States:
    """Plain PyTorch / DDP.  16-bit dtypes mean AMP over an fp32 module
    (HF Trainer ``bf16=True``): weights 4P plus the autocast 16-bit copies
    (2P, saved for backward); fp32 gradients 4T; optimizer states (fp32) per
    trainable param; no master copy.  LoRA: frozen base loaded in the 16-bit
    dtype (e·base), fp32 adapters (PEFT upcasts them).  DDP buckets hold a
    copy of every gradient (``gradient_as_bucket_view=False``)."""
    st = _States()
    P, T, _ = _params(spec, setup)
    states = OPTIMIZER_STATE_BYTES[setup.optimizer.lower()]
    e = setup.element_bytes
    amp = e < 4
    if setup.lora_rank is None:
        st.weights = 4 * P + (2 * P if amp else 0)
    else:
        base = P - T
        st.weights = e * base + 4 * T + (2 * T if amp else 0)
    st.gradients = 4 * T
    st.optimizer = states * T
    if setup.world_size > 1:
        st.buckets = 4 * T
    st.startup_torch = st.weights - (2 * P if amp and setup.lora_rank is None else 0)
    return st


# ---------------------------------------------------------------------- NCCL


def _nccl_bytes(setup: TrainSetup) -> tuple[int, int]:
    """(communicators, bytes).  DeepSpeed always initialises NCCL, with the
    world group plus its clone (``groups._clone_world_group``) = 2
    communicators; DDP uses 1; a single plain process none.  First
    communicator 578 MiB (incl. kernel image), each further 388 MiB (measured
    on H200, nccl.md §2.2), plus peer connection buffers when world_size > 1."""
    if setup.deepspeed:
        comms = 2
    elif setup.world_size > 1:
        comms = 1
    else:
        return 0, 0
    total = CALIBRATION["nccl_first_comm_bytes"] + (comms - 1) * CALIBRATION["nccl_comm_bytes"]
    if setup.world_size > 1:
        total += comms * CALIBRATION["nccl_peer_bytes"]
    return comms, int(total)


# ------------------------------------------------------------------- estimate


def estimate(spec: ModelSpec, setup: TrainSetup, device_bytes: int | None = None) -> Estimate:
    """Per-GPU estimate of ``setup`` training ``spec``; ``device_bytes`` is
    the memory the process may use (default 80 GiB, said in assumptions)."""
    assumptions: list[str] = []
    if device_bytes is None:
        device_bytes = DEFAULT_DEVICE_BYTES
        assumptions.append(f"no device size given: compared against {_g(device_bytes)}")
    st = _model_states(spec, setup, device_bytes)
    P, T, _ = _params(spec, setup)

    acts = activation_terms(spec, setup)
    logit = logits_terms(spec, setup)
    act_total, logit_total = sum(acts.values()), sum(logit.values())
    context = int(CALIBRATION["cuda_context_bytes"])
    comms, nccl = _nccl_bytes(setup)
    states_total = st.weights + st.gradients + st.optimizer
    overhead = (CALIBRATION["allocator_overhead_states"] * states_total
                + CALIBRATION["allocator_overhead_dynamic"] * (act_total + logit_total + st.buckets))

    breakdown = {
        "weights": int(st.weights),
        "gradients": int(st.gradients),
        "optimizer": int(st.optimizer),
        "activations": int(act_total),
        "logits": int(logit_total),
        "buckets": int(st.buckets),
        "context": context,
        "nccl": nccl,
        "allocator_overhead": int(overhead),
        "kv_cache": 0,
        "startup_extra": 0,
    }
    step_peak = sum(v for k, v in breakdown.items() if k not in ("kv_cache", "startup_extra"))
    startup_peak = int(st.startup_torch) + context + nccl
    breakdown["startup_extra"] = max(0, startup_peak - breakdown["weights"] - context - nccl)

    gen_peak = None
    if setup.generation:
        kv = kv_cache_bytes(spec, setup.gen_batch, setup.kv_len, setup.element_bytes)
        breakdown["kv_cache"] = kv
        gen_peak = _generation_peak(spec, setup, st, kv, context, nccl)

    predicted = max(startup_peak, step_peak, gen_peak or 0)
    host_rank, host_breakdown = _host_side(spec, setup, st, P)
    assumptions += _assumptions(spec, setup, st, comms, T)
    return Estimate(
        fits=predicted <= device_bytes,
        predicted_peak_bytes=int(predicted),
        startup_peak_bytes=int(startup_peak),
        step_peak_bytes=int(step_peak),
        generation_peak_bytes=None if gen_peak is None else int(gen_peak),
        device_bytes=int(device_bytes),
        host_bytes=int(host_rank * setup.gpus_per_node),
        host_bytes_per_rank=int(host_rank),
        host_pinned_bytes=int(st.host_pinned * setup.gpus_per_node),
        breakdown=MappingProxyType(breakdown),
        host_breakdown=MappingProxyType({k: int(v) for k, v in host_breakdown.items()}),
        activation_terms=MappingProxyType({**acts, **{f"logits.{k}": v for k, v in logit.items()}}),
        assumptions=tuple(assumptions),
        model=spec.name,
        n_params=P,
        trainable_params=T,
        setup=setup,
    )


def _generation_peak(spec: ModelSpec, setup: TrainSetup, st: _States, kv: int, context: int, nccl: int) -> int:
    """Generation (eval / RLHF rollout) between steps: model states stay,
    plus KV cache, one block's prefill transient (no grad) and last-token
    logits with their fp32 upcast; stage-3 IPG bucket persists."""
    no_ckpt = replace(setup, grad_ckpt=False)
    prefill = sum(_layer_terms(spec, no_ckpt, setup.gen_batch, setup.kv_len).values())
    gen_logits = setup.gen_batch * spec.vocab * (setup.element_bytes + 4)
    buckets = st.buckets if setup.zero_stage == 3 else 0
    return int(st.weights + st.gradients + st.optimizer + buckets + kv + prefill + gen_logits + context + nccl)


def _host_side(spec: ModelSpec, setup: TrainSetup, st: _States, P: int) -> tuple[float, dict[str, float]]:
    """Host RAM per rank: max(model load before initialize, steady offload state)."""
    e = setup.element_bytes
    if setup.deepspeed and setup.zero_stage == 3 and setup.zero_init:
        load = e * P / setup.world_size
    elif not setup.deepspeed and e < 4 and setup.lora_rank is None:
        load = 4 * P  # AMP: the fp32 module
    else:
        load = e * P
    steady = sum(st.host.values())
    breakdown = dict(st.host)
    breakdown["model_load"] = load
    return max(load, steady), breakdown


def _assumptions(spec: ModelSpec, setup: TrainSetup, st: _States, comms: int, T: int) -> list[str]:
    out = [f"model {spec.describe()}" + (f" ({spec.source})" if spec.source not in ("preset", "config") else "")]
    if spec.approximate:
        out.append("model_type not known exactly: counted as Llama-shaped")
    e = setup.element_bytes
    if setup.deepspeed:
        master, states, fp32g = _opt_bytes(setup)
        out.append(f"DeepSpeed ZeRO-{setup.zero_stage}, {setup.dtype}, {setup.optimizer}: {e}-byte weights and "
                   f"gradients, optimizer {master}+{states} bytes/param (master + states) and {fp32g}-byte fp32 "
                   f"gradients (DeepSpeed's 18-byte accounting), world size {setup.world_size}")
    else:
        mode = "AMP over an fp32 model" if e < 4 else "fp32"
        out.append(f"plain PyTorch{' DDP' if setup.world_size > 1 else ''}, {mode}, {setup.optimizer}")
    if setup.lora_rank is not None:
        out.append(f"LoRA r={setup.lora_rank} on {', '.join(setup.lora_targets)}: {T:,} trainable params; "
                   f"frozen base weights keep no gradients or optimizer state; lora_dropout 0")
    if setup.deepspeed and setup.offload_param != "none" and setup.zero_stage != 3:
        out.append(f"offload_param is ignored below ZeRO-3: DeepSpeed keeps all weights on every GPU at stage "
                   f"{setup.zero_stage}")
    if setup.deepspeed and setup.offload_optimizer != "none" and setup.zero_stage == 0:
        out.append("offload_optimizer needs ZeRO ≥ 1: ignored at stage 0")
    if setup.deepspeed and setup.zero_stage in (1, 2):
        out.append(f"overlap_comm {'on' if setup.effective_overlap_comm else 'off'}"
                   f"{' (DeepSpeed default: on only at stage 3)' if setup.overlap_comm is None else ''}: "
                   f"{2 if setup.effective_overlap_comm else 1} reduce bucket(s) of {setup.reduce_bucket_size:,} elements")
        out.append("allgather_bucket_size ignored: torch has all_gather_into_tensor, so DeepSpeed gathers "
                   "parameters without it")
    if setup.deepspeed and setup.zero_stage == 3:
        per = setup.world_size
        if T / per > setup.sub_group_size and setup.effective_offload_optimizer == "none":
            out.append(f"ZeRO-3 fp32 gradients built one sub-group ({setup.sub_group_size:,} elements) at a time; "
                       f"DeepSpeed's estimator counts all {int(T / per):,}")
        out.append(f"ZeRO-3 working set: largest module ({spec.largest_layer_params:,} params) gathered plus "
                   f"prefetch ≤ {setup.prefetch_bucket_size:,} elements (max_live_parameters "
                   f"{setup.max_live_parameters:,}); persistent params ≤ {setup.param_persistence_threshold:,} "
                   f"elements stay whole")
    ckpt = "full recompute (layer inputs + one recomputed block)" if setup.grad_ckpt else "no checkpointing"
    out.append(f"activations: per-tensor model of a HF {spec.family} block, {setup.attn} attention, {ckpt}, "
               f"micro-batch {setup.micro_batch} × {setup.seq_len} tokens; factors uncalibrated (CALIBRATION)")
    if setup.attn == "sdpa" and spec.kv_heads != spec.heads:
        out.append("SDPA assumed to take GQA keys/values unrepeated (enable_gqa); eager repeats them")
    out.append("loss in fp32: logits.float() + log-softmax + its gradient (HF ForCausalLMLoss)")
    out.append(f"CUDA context {_g(CALIBRATION['cuda_context_bytes'])}; NCCL {comms} communicator(s)"
               + (" (DeepSpeed always initialises NCCL: world group + its clone)" if setup.deepspeed else ""))
    out.append(f"host RAM per node = {setup.gpus_per_node} rank(s) × per-rank offload state and pinned buffers; "
               f"model loaded in {setup.dtype if setup.deepspeed else 'its training dtype'} before initialize")
    out += st.notes
    out += _auto_notes(spec, setup)
    out += list(setup.notes)
    return out


def _auto_notes(spec: ModelSpec, setup: TrainSetup) -> list[str]:
    """Say what each ds_config "auto" was taken as, and for bucket sizes what
    HF Trainer's ``HfTrainerDeepSpeedConfig`` would write instead."""
    h = spec.hidden
    hf = {"reduce_bucket_size": f"hidden²={h * h:,}",
          "stage3_prefetch_bucket_size": f"0.9·hidden²={int(0.9 * h * h):,}",
          "stage3_param_persistence_threshold": f"10·hidden={10 * h:,}"}
    out = []
    sizes = []
    for key in setup.auto_keys:
        leaf = key.rsplit(".", 1)[-1]
        if key.endswith(".enabled"):
            out.append(f"ds_config {key} \"auto\": dtype taken as {setup.dtype}")
        elif leaf == "train_micro_batch_size_per_gpu":
            out.append(f"ds_config {key} \"auto\": micro-batch {setup.micro_batch} (option or default)")
        elif leaf in hf:
            sizes.append(f"{leaf} (HF Trainer would set {hf[leaf]})")
        else:
            sizes.append(leaf)
    if sizes:
        out.append(f"ds_config \"auto\" → DeepSpeed's code defaults for: {'; '.join(sizes)}")
    return out


def _g(n: float) -> str:
    return f"{n / GiB:.2f} GiB"
