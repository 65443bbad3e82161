"""Per-GPU memory estimate for one training set-up (DESIGN.md "Memory model").

Everything is bytes on one GPU unless a name says ``host``.  Ψ below is the
model's parameter count, N the data-parallel world size, e the element size of
the compute dtype (2 for bf16/fp16, 4 for fp32), b the micro-batch, s the
sequence length, h hidden, a heads, d head_dim, i FFN width, V vocabulary,
T = b·s tokens.

Two layers:

1. **Named terms** (analytic, each explained where it is computed).  Model
   states as DeepSpeed accounts them (ZeRO paper arXiv:1910.02054 §3;
   ``estimate_zero2/3_model_states_mem_needs``, reference/deepspeed.md §2.2):
   weights eΨ, gradients eΨ, optimizer 12Ψ (fp32 master 4 + Adam m, v 8) plus
   the 4Ψ fp32 gradient copy DeepSpeed builds for the step, divided per ZeRO
   stage, offload moving them to host RAM.  Activations as the tensors
   autograd saves for a HuggingFace block (``activation_terms``), the logits
   chain (``logits_terms``), buckets, KV cache, CUDA context and NCCL.

2. **What coexists, and what the allocator reserves for it** (``_Program``):
   the allocations of a training run in order — model load, what
   ``deepspeed.initialize`` builds, forward, backward, optimizer step, two
   steps — each tensor sized from the terms above, replayed through a model of
   PyTorch's caching allocator (``_CachingAllocator``).  Peaks are not sums of
   terms: the backward peak (saved activations + the fp32 loss chain), the
   optimizer-step peak (fp32 gradient copy, Adam states, foreach temporaries)
   and the start-up peak of ``initialize`` are different moments, and the
   caching allocator keeps segments it cannot reuse for the next, differently
   sized big tensor (2–9 GiB on the measured runs).  The prediction is the
   replay's max reserved plus non-PyTorch memory (context, NCCL): what
   ``max_memory_reserved`` + NVML show, and what runs out.

Calibration (``CALIBRATION``) is against docs/estimator/measurements.json
(H200, torch 2.11, DeepSpeed 0.19.8; docs/estimator_accuracy.md).  Nothing
here imports torch or deepspeed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

from oompost.units import GiB, MiB

from ..analysis.allocator import Block, CachingAllocator
from ..analysis.allocator_rules import AllocatorSettings

from .models import ModelSpec, _tensors

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
# Every tunable constant of the memory model lives here, fitted on
# docs/estimator/measurements.json (16 runs, H200, torch 2.11, DeepSpeed
# 0.19.8; docs/estimator_accuracy.md).  "act.*" / "logits.*" are dimensionless
# multipliers on the analytic byte count of one named term (1.0 = the tensor
# sizes autograd saves, as derived in activation_terms/logits_terms);
# byte-valued entries end in "_bytes".
#
# What the measurements fixed:
# * act.* and logits.*: 1.0.  The tensors a Qwen2 block saves were read off a
#   real allocation trace (sample_logs/activation_spike_long_batch, torch 2.11,
#   SDPA): per block 2 × (fp32 norm input 4 + normalised 2 + norm output 2)·bsh,
#   post-RoPE q and k, v, the SDPA output and its fp32 logsumexp, and four
#   FFN-wide tensors (gate, SiLU, up, product) — 2705 MiB for 24 blocks of
#   4 × 512 tokens, the terms give 2704 MiB.  (Korthikanti et al.'s 34·sbh +
#   5·a·s²·b is for GPT-3 blocks with dropout and eager attention; a Llama-family
#   block has neither, and its gated MLP saves 4 FFN-wide tensors instead of 2.)
#   The loss chain is 14·T·V at its peak (bf16 logits + fp32 log-probs + two
#   fp32 gradients), the same trace.  The o_proj input is a view of the SDPA
#   output (flash / memory-efficient kernels write (b, s, a, d)): no term.
# * cuda_context_bytes: non-PyTorch memory of a 1-GPU DeepSpeed run is
#   1316 MiB (NVML − reserved, all 16 runs); minus the first NCCL communicator
#   (578 MiB, nccl.md §2.2) leaves 738 MiB for the context, kernel images and
#   cuBLAS handles.  Held out: plain-PyTorch OOM messages in sample_logs/ give
#   0.74 GiB of non-PyTorch memory with no NCCL at all.
# * cublas_workspace_bytes: max_allocated exceeds the replayed tensors by
#   64.0 MiB in the runs without checkpointing — the cuBLAS and cuBLASLt
#   workspaces (32 MiB each on Hopper), allocated through PyTorch at the first
#   matmul and kept.
# There is no fitted allocator-overhead fraction any more: the overhead is
# what the caching-allocator replay (``_CachingAllocator``) reserves.
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
    "act.o_proj_input": 1.0,        # eager: o_proj input (transpose+reshape copy of probs @ v)
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
    "zero3.live_params": 1.0,       # gathered parameters (largest module) in the resident-state account
    "startup.flat_copy": 1.0,       # multiplier on the flat 16-bit copy built in initialize
    # --- outside the tensors of the model
    "cuda_context_bytes": 738 * MiB,         # context + kernel images + handles, H200, torch 2.11 (fitted)
    "cublas_workspace_bytes": 64 * MiB,      # cuBLAS + cuBLASLt workspaces, through PyTorch's allocator (fitted)
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


# -------------------------------------------------------------------- Estimate


@dataclass(frozen=True)
class Estimate:
    """The result.  ``breakdown`` holds per-GPU bytes by component *at the
    peak*: the tensors alive when the replayed run's allocated memory peaks
    (``peak_phase``: initialize, forward, backward or optimizer step), sorted
    into weights / gradients / optimizer / activations / logits / buckets /
    workspace, plus ``allocator_overhead`` (what the caching allocator keeps
    reserved beyond that: segments no later request could reuse), ``context``
    and ``nccl``.  Summing every entry except ``kv_cache`` and
    ``startup_extra`` gives ``step_peak_bytes``; ``startup_peak_bytes`` =
    weights + startup_extra + context + nccl.  ``predicted_peak_bytes`` is the
    largest phase.  ``model_states_bytes`` is the resident model states as
    DeepSpeed accounts them (``resident_states_bytes``), not the mix at the
    peak.  ``allocated_peak_bytes`` is the peak of live tensors plus
    non-PyTorch memory: what a perfectly packing allocator would need.  Host
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
    allocated_peak_bytes: int = 0
    startup_allocated_bytes: int = 0
    peak_phase: str = ""
    phase_peaks: Mapping[str, int] = field(default_factory=dict)
    resident_states_bytes: int | None = None

    @property
    def model_states_bytes(self) -> int:
        """weights + gradients + optimizer resident on the GPU, as DeepSpeed's
        ``estimate_zero*_model_states_mem_needs`` count them (their gpu_mem,
        plus what they leave out: see the tests)."""
        if self.resident_states_bytes is not None:
            return self.resident_states_bytes
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
            "allocated_peak_bytes": int(self.allocated_peak_bytes),
            "startup_allocated_bytes": int(self.startup_allocated_bytes),
            "peak_phase": self.peak_phase,
            "phase_peaks": {k: int(v) for k, v in self.phase_peaks.items()},
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
    # o_proj input: eager's probs @ v is (b, a, s, d), so transpose(1,2).reshape copies it → e·b·s·a·d.
    # SDPA's flash / memory-efficient kernels and flash-attn write (b, s, a, d): the reshape is a view
    # of the saved kernel output, no extra bytes (measured: no such tensor in the torch 2.11 trace)
    o_trains = _trains("o", roles, lora)
    t["o_proj_input"] = e * tok * spec.q_dim if (o_trains and setup.attn == "eager") else 0

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
    * start-up (replayed in ``_Program._init_zero012``): module e·P on the
      GPU, then the flat copy e·T of the trainable params (4Ψ allocated for a
      full fine-tune), the fp32 partition cloned on the GPU, the fp32 gradient
      partition created and dropped.
    These are the resident states DeepSpeed's estimators count
    (``Estimate.model_states_bytes``); the peaks come from the replay.
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

    # where initialize flattens (the replay in _Program builds the start-up peak itself)
    flattens = stage >= 1 or e < 4
    on_gpu = setup.startup_flatten == "gpu"
    if setup.startup_flatten == "auto":
        # NVML free memory after module.to(device): card − context − NCCL − module
        free_after_module = device_bytes - CALIBRATION["cuda_context_bytes"] - _nccl_bytes(setup)[1] - e * P
        on_gpu = free_after_module >= e * T
    if flattens and on_gpu:
        st.notes.append(
            f"start-up: deepspeed.initialize holds the module ({_g(e * P)}) plus its flat 16-bit copy "
            f"({_g(e * T)}) built on the GPU; DeepSpeed 0.19.8 does so when NVML reports that much free memory "
            f"(true under a memory-fraction cap on a large card: the measured ~27 GB 7B case), else it flattens "
            f"on the CPU; the freed per-parameter blocks of the module stay cached")
    elif flattens:
        st.notes.append(
            f"start-up: flat 16-bit copy built on the CPU (DeepSpeed's fallback when NVML reports less free "
            f"memory than {_g(e * T)}): the module leaves the GPU and its cache is emptied first; the GPU then "
            f"holds the flat copy plus the partition clone ({_g(e * T / div)})")
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
    * start-up (replayed in ``_Program._init_zero3``): with ``zero_init`` the
      partitions, defragmented through the CPU into one flat buffer, fp32
      partitions per sub-group; without it the whole module e·P is moved to
      every GPU first.
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

    if not setup.zero_init:
        st.notes.append(f"ZeRO-3 without zero.Init: every GPU first holds the whole model ({_g(e * P)}) before "
                        f"DeepSpeed partitions it, and every rank builds it in host RAM")
    return st


def _torch_states(spec: ModelSpec, setup: TrainSetup) -> _States:
    """Plain PyTorch / DDP.  With ``torch_amp`` and a 16-bit dtype: AMP over an
    fp32 module (HF Trainer ``bf16=True``): weights 4P plus the autocast 16-bit
    copies (2P, saved for backward); fp32 gradients 4T; optimizer states
    (fp32) per trainable param; no master copy.  Without it the module itself
    is 16-bit: weights, gradients and states in e bytes.  LoRA: frozen base
    loaded in the 16-bit dtype (e·base), adapters fp32 under AMP (PEFT upcasts
    them).  DDP buckets hold a copy of every gradient
    (``gradient_as_bucket_view=False``)."""
    st = _States()
    P, T, _ = _params(spec, setup)
    states = OPTIMIZER_STATE_BYTES[setup.optimizer.lower()]
    e = setup.element_bytes
    amp = e < 4 and setup.torch_amp
    we = 4 if amp else e
    if setup.lora_rank is None:
        st.weights = we * P + (2 * P if amp else 0)
    else:
        base = P - T
        st.weights = e * base + we * T + (2 * T if amp else 0)
    st.gradients = we * T
    st.optimizer = states * we / 4 * T
    if setup.world_size > 1:
        st.buckets = we * T
    return st


# ------------------------------------------------------------ allocator model
# The allocation program runs through the one model of PyTorch's native caching
# allocator, ``analysis.allocator`` (reference/allocator.md §1–5), with the
# default settings; what the estimate adds is bookkeeping: live bytes per tag,
# the mix at the allocated peak, the peak per phase, and carrying on past an OOM.

_Block = Block
INF = float("inf")
_DEFAULT_TOTAL = 1 << 48           # only sizes expandable segments, which the estimate does not use


class _CachingAllocator(CachingAllocator):
    """The shared allocator model, default settings, plus the estimate's books.

    Without a cap segments are never returned (training code does not call
    empty_cache), which is what an unconstrained run reserves:
    ``peak_reserved`` is the measured ``max_memory_reserved``.  With a cap
    (the memory the process may use, less what is outside PyTorch) a request
    that needs a new segment beyond it first makes the allocator release every
    whole cached segment and retry (``release_cached_blocks``; counted in
    ``retries``, DeepSpeed's "allocator cache flushes"); if it still does not
    fit, that is the OOM (``oom``: the phase and the request) — and the
    estimate goes on past it, the segment taken anyway, to report the whole
    run's peak.  Live bytes are counted per tag, and the mix at the allocated
    peak is kept (``at_peak``)."""

    def __init__(self, cap: float | None = None) -> None:
        super().__init__(AllocatorSettings(), cap, INF, _DEFAULT_TOTAL, 0)
        self.oom: tuple[str, int] | None = None
        self.live: dict[str, int] = {}
        self.phase = ""
        self.at_peak: tuple[str, dict[str, int]] = ("", {})
        self.phase_peaks: dict[str, int] = {}

    def malloc(self, nbytes: float, stream: int = 0, tag: str = "other") -> Block:  # type: ignore[override]
        req = int(nbytes)
        peak = self.peak_allocated
        b = super().malloc(req, stream)
        if b is None:                   # beyond the cap even after releasing the cache: the OOM
            if self.oom is None:
                self.oom = (self.phase, self.s.round(req))
            cap, self.cap = self.cap, None
            b = super().malloc(req, stream)
            self.cap = cap
            assert b is not None        # no cap, unbounded device: always succeeds
        b.tag = tag
        self.live[tag] = self.live.get(tag, 0) + b.size
        if self.allocated > peak:
            self.at_peak = (self.phase, dict(self.live))
        if self.allocated > self.phase_peaks.get(self.phase, 0):
            self.phase_peaks[self.phase] = self.allocated
        return b

    def free(self, b: Block | None) -> None:
        if b is None or not b.allocated:
            return
        self.live[b.tag] -= b.size
        self.complete_free(b)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: whole free segments go back to CUDA."""
        self._release_cached()


# ------------------------------------------------------------ allocation program
_STEPS = 2  # optimizer steps replayed: the layout (and max reserved) is settled by the end of step 2
_MICRO_STEPS = 2  # micro-batches replayed per step: the 2nd is the first to accumulate; later ones repeat it


@dataclass
class _PMod:
    """One parameter-holding module instance: its tensors (numel, trainable)."""

    key: str
    role: str
    block: str                      # 'first' | 'attn' | 'mlp' | 'last'
    layer: int
    tensors: tuple[tuple[int, bool], ...]


@dataclass
class _SimResult:
    startup_allocated: int
    startup_reserved: int
    peak_allocated: int
    peak_reserved: int
    peak_phase: str
    live_at_peak: dict[str, int]
    phase_peaks: dict[str, int]
    retries: int = 0
    oom: tuple[str, int] | None = None


_ATTN_NORMS = ("input_layernorm", "ln_1", "self_attn_layer_norm", "q_norm", "k_norm")
_ATTN_ROLES = ("q", "k", "v", "qkv", "o")
_FORWARD_ROLE_ORDER = {"norm": 0, "q": 1, "k": 2, "v": 3, "qkv": 1, "o": 5, "gate": 6, "up": 7, "down": 8,
                       "fc1": 6, "fc2": 8}


def _module_plan(spec: ModelSpec, setup: TrainSetup) -> tuple[list[_PMod], list[list[_PMod]], list[_PMod]]:
    """(modules before the blocks, modules of each block in forward order, modules after)
    with their parameter tensors; LoRA freezes the base and adds r·in + r·out adapters."""
    L = spec.layers
    lora = setup.lora_rank is not None
    roles = _lora_roles(setup.lora_targets) if lora else frozenset()
    r = setup.lora_rank or 0
    first: list[_PMod] = []
    last: list[_PMod] = []
    per_layer: list[tuple[int, str, str, tuple[tuple[int, bool], ...]]] = []
    projections = 0
    for idx, m in enumerate(spec.modules()):
        if m.shared:
            continue
        tensors = tuple((t, not lora) for t in _tensors(m))
        if lora and m.in_features and m.role in roles and m.role not in ("embed", "pos_embed"):
            tensors += ((r * m.in_features, True), (r * m.out_features, True))
        if m.count >= L and m.count % L == 0 and m.role not in ("embed", "pos_embed", "lm_head"):
            for j in range(m.count // L):
                if m.role == "norm":
                    attn_side = m.name in _ATTN_NORMS or (m.name == "layernorms" and j == 0)
                    block = "attn" if attn_side else "mlp"
                else:
                    block = "attn" if m.role in _ATTN_ROLES else "mlp"
                per_layer.append((idx * 16 + j, m.role, block, tensors))
        elif m.role in ("embed", "pos_embed") or (m.role == "proj" and projections == 0):
            projections += m.role == "proj"       # OPT's project_in runs first, project_out last
            first.append(_PMod(m.name, m.role, "first", -1, tensors))
        else:
            last.append(_PMod(m.name, m.role, "last", -1, tensors))
    blocks: list[list[_PMod]] = []
    for layer in range(L):
        mods = [_PMod(f"{layer}.{key}", role, block, layer, t) for key, role, block, t in per_layer]
        mods.sort(key=lambda p: (p.block != "attn", _FORWARD_ROLE_ORDER.get(p.role, 9)))
        blocks.append(mods)
    return first, blocks, last


def _registration_order(spec: ModelSpec, first: list[_PMod], blocks: list[list[_PMod]],
                        last: list[_PMod]) -> list[_PMod]:
    """``model.parameters()`` order (what DeepSpeed flattens and groups): registration order."""
    order = list(first)
    for mods in blocks:
        order += sorted(mods, key=lambda p: int(p.key.split(".", 1)[1]))
    return order + last


class _Program:
    """What ``tools/capture/train.py``-style training allocates on one GPU, in
    order, replayed through ``_CachingAllocator``: the model load, what
    ``deepspeed.initialize`` builds (reference/deepspeed.md §2; DeepSpeed
    0.19.8 ``stage_1_and_2.py``/``stage3.py`` code paths), then ``_STEPS``
    optimizer steps of forward (every saved activation tensor of
    ``_layer_terms``, the residual stream, the logits chain), backward (each
    layer's saved tensors freed, its gradients and backward working set
    allocated, ZeRO's bucket and partition buffers) and the optimizer step (the
    fp32 gradient copy, Adam's lazily created states, foreach temporaries).
    Tags say what each allocation is, for the breakdown at the peak.

    Tensor sizes come from the analytic terms; the order and lifetimes from the
    libraries' code; nothing is fitted here except ``cublas_workspace_bytes``."""

    def __init__(self, spec: ModelSpec, setup: TrainSetup, device_bytes: int, cap: float | None = None) -> None:
        self.spec, self.setup = spec, setup
        self.al = _CachingAllocator(cap)
        self.e = setup.element_bytes
        self.N = setup.world_size
        self.ds = setup.deepspeed
        self.stage = setup.zero_stage if setup.deepspeed else -1
        self.off_opt = setup.effective_offload_optimizer != "none"
        self.off_param = setup.effective_offload_param != "none"
        self.tok = setup.micro_batch * setup.seq_len
        self.sbh = self.tok * spec.hidden
        self.TV = self.tok * spec.vocab
        self.ckpt = setup.grad_ckpt
        self.amp = (not self.ds) and setup.torch_amp and self.e < 4
        self.we = 4 if self.amp else self.e             # bytes per stored weight element
        self.ge = self.we if not self.ds else self.e    # bytes per gradient element
        self.first, self.blocks, self.last = _module_plan(spec, setup)
        self.order = _registration_order(spec, self.first, self.blocks, self.last)
        self.T = sum(n for m in self.order for n, t in m.tensors if t)
        overlap = setup.effective_overlap_comm and self.ds
        self.rs = 1 if overlap else 0                  # reduction stream
        self.ags = 2 if overlap else 0                 # ZeRO-3 all-gather stream
        self.device_bytes = device_bytes
        self.state_tensors = OPTIMIZER_STATE_BYTES[setup.optimizer.lower()] // 4
        self.held_logits: _Block | None = None
        self.cublas: _Block | None = None
        self.grads: list[_Block] = []
        self.states: list[list[_Block]] = []
        self.gathered: dict[str, list[_Block]] = {}
        self.trace: list[_PMod] | None = None
        self.rec: list[_PMod] = []
        self.pos = 0
        self.micro = 0
        self.boundary = True
        self.bufs: list[_Block | None] | None = None
        self.held_bufs: list[_Block] = []
        self.gip: _Block | None = None
        self.old_gip: _Block | None = None
        self.bucket_elems = 0
        self.bucket_tensors: list[int] = []
        self.persist: set[tuple[str, int]] = set()
        self.avail = 0
        self.modmap = {m.key: m for m in self.order}
        self._layer_sizes()

    # ---------------------------------------------------------------- helpers
    def A(self, nbytes: float, tag: str, stream: int = 0) -> _Block:
        return self.al.malloc(nbytes, stream, tag)

    def F(self, *blocks: _Block | None) -> None:
        for b in blocks:
            self.al.free(b)

    def phase(self, name: str) -> None:
        self.al.phase = name

    def _layer_sizes(self) -> None:
        """Saved activation tensors of one block, split into its attention and MLP halves."""
        spec, setup = self.spec, self.setup
        b, s = setup.micro_batch, setup.seq_len
        raw = _layer_terms(spec, setup, b, s)
        t = {k: v * _factor(f"act.{k}") for k, v in raw.items() if v}
        self.t = t
        # the HF Llama / Mistral / Qwen2 block, op by op as a torch 2.11 allocation trace shows it
        self.llama = (spec.family == "llama" and spec.norm == "rmsnorm" and spec.gated_mlp
                      and spec.norms_per_layer == 2 and not spec.fused_qkv)
        n_norm = max(1, spec.norms_per_layer)
        norm_keys = [k for k in ("norm_fp32_input", "norm_normalized", "norm_input") if k in t]
        norm1 = [t[k] / n_norm for k in norm_keys]
        attn = norm1 + [t[k] for k in ("attn_input", "q", "k", "v", "attn_softmax", "attn_probs", "attn_dropout",
                                        "attn_out", "attn_lse", "o_proj_input") if k in t]
        mlp = []
        for _ in range(n_norm - 1):
            mlp += [t[k] / n_norm for k in norm_keys]
        mlp += [t[k] for k in ("mlp_input", "mlp_gate", "mlp_act", "mlp_up", "mlp_product", "mlp_fc") if k in t]
        if "hidden_dropout" in t:
            attn.append(t["hidden_dropout"] / 2)
            mlp.append(t["hidden_dropout"] / 2)
        self.attn_saved, self.mlp_saved = attn, mlp
        self.attn_split = len(norm1)                     # attn[:attn_split] belong to the first norm
        self.mlp_split = (n_norm - 1) * len(norm_keys)   # mlp[:mlp_split] to the other norms
        model = _model_level_terms(spec, setup, b, s)
        self.final_saved = model.get("final_norm", 0) * _factor("act.final_norm")
        self.mask = model.get("attn_mask", 0) * _factor("act.attn_mask")
        e, tok = self.e, self.tok
        self.wide = e * tok * spec.intermediate         # an FFN-wide gradient in backward
        self.qwidth = e * tok * spec.q_dim
        self.kvwidth = e * tok * spec.kv_dim
        self.scores = b * spec.heads * s * s if setup.attn == "eager" else 0

    # ---------------------------------------------------------------- phases
    def run(self) -> _SimResult:
        self.phase("initialize")
        self.init()
        startup = (self.al.peak_allocated, self.al.peak_reserved)
        ga = min(max(1, self.setup.grad_accum_steps), _MICRO_STEPS)
        for step in range(1, _STEPS + 1):
            for micro in range(ga):
                self.micro = micro
                self.boundary = micro == ga - 1
                self.forward()
                self.backward()
            self.phase("optimizer step")
            self.step(step)
        phase, live = self.al.at_peak
        return _SimResult(startup_allocated=startup[0], startup_reserved=startup[1],
                          peak_allocated=self.al.peak_allocated, peak_reserved=self.al.peak_reserved,
                          peak_phase=phase, live_at_peak=live, phase_peaks=dict(self.al.phase_peaks),
                          retries=self.al.retries, oom=self.al.oom)

    # ---------------------------------------------------------------- init
    def init(self) -> None:
        if not self.ds:
            return self._init_torch()
        if self.stage == 3:
            return self._init_zero3()
        return self._init_zero012()

    def _module_to_device(self) -> dict[str, list[_Block]]:
        return {m.key: [self.A(self.e * n, "weights") for n, _ in m.tensors] for m in self.order}

    def _init_torch(self) -> None:
        """``model.cuda()``: every tensor (fp32 under AMP, adapters fp32 under LoRA), then DDP's buckets."""
        lora = self.setup.lora_rank is not None
        for m in self.order:
            for n, trainable in m.tensors:
                self.A((4 if (self.amp and (trainable or not lora)) else self.e) * n, "weights")
        if self.N > 1:
            # DDP Reducer: gradient buckets (bucket_cap_mb 25) holding a copy of every gradient
            left = self.ge * self.T
            while left > 0:
                self.A(min(left, 25 * MiB), "buckets")
                left -= 25 * MiB

    def _init_zero012(self) -> None:
        """stage_1_and_2.py / bf16_optimizer.py: module.to(device), the flat 16-bit copy of
        the trainable parameters, the fp32 master partition (a GPU clone first), the fp32
        gradient partition ``initialize_optimizer_states`` creates and drops."""
        e, N, T = self.e, self.N, self.T
        setup = self.setup
        blocks = self._module_to_device()
        trainable = [b for m in self.order for b, (n, t) in zip(blocks[m.key], m.tensors) if t]
        flat_bytes = e * T * _factor("startup.flat_copy")
        on_gpu = setup.startup_flatten == "gpu"
        if setup.startup_flatten == "auto":
            free_after_module = (self.device_bytes - CALIBRATION["cuda_context_bytes"] - _nccl_bytes(setup)[1]
                                 - self.al.reserved)
            on_gpu = free_after_module >= flat_bytes
        flattens = self.stage >= 1 or e < 4
        if not flattens:
            return
        if on_gpu:
            self.flat = self.A(flat_bytes, "weights")
            self.F(*trainable)
        else:
            self.F(*trainable)          # parameters moved to the CPU, flattened there
            self.al.empty_cache()
            self.flat = self.A(flat_bytes, "weights")
        if self.stage == 0:
            # BF16_Optimizer / FP16_Optimizer: fp32 master partition and a full fp32 gradient buffer
            self.master = self.A(4 * T / N, "optimizer")
            self.fp32_grads = self.A(4 * T, "gradients")
            return
        clone = self.A(e * T / N, "optimizer")       # partition.clone(), then .to(fp32 [, cpu])
        if self.off_opt:
            self.F(clone)
            self.A(e * max(n for m in self.order for n, t in m.tensors if t), "gradients")  # temp_grad_buffer_for_gpu_offload
            return
        self.master = self.A(4 * T / N, "optimizer")
        self.F(clone)
        z = self.A(4 * T / N, "optimizer")           # initialize_optimizer_states: zeros, then grad = None
        self.F(z)

    def _persistent(self, n: int) -> bool:
        return n <= self.setup.param_persistence_threshold

    def _init_zero3(self) -> None:
        """stage3.py: zero.Init builds each parameter on the GPU and partitions it; the
        optimizer defragments the trainable partitions into one flat buffer (via the CPU
        and empty_cache), clones fp32 partitions per sub-group (the previous sub-group's
        conversion still referenced), creates and drops a gradient buffer of the largest
        sub-group, then the IPG bucket, the flat gradient partitions, and gathers every
        parameter once to hook its AccumulateGrad."""
        e, N = self.e, self.N
        setup = self.setup
        parts: list[_Block] = []
        for m in self.order:
            for j, (n, t) in enumerate(m.tensors):
                if setup.zero_init:
                    full = self.A(e * n, "weights")
                    if not self.off_param:
                        parts.append(self.A(e * -(-n // N), "weights"))
                    self.F(full)
                else:
                    parts.append(self.A(e * n, "weights"))
                if self._persistent(n):
                    self.persist.add((m.key, j))
        if not setup.zero_init:
            whole = parts
            parts = []
            for m in self.order:
                for n, t in m.tensors:
                    if not self.off_param:
                        parts.append(self.A(e * -(-n // N), "weights"))
            self.F(*whole)
        # persistent parameters stay whole on every GPU (a real copy unless world size 1 on the GPU)
        if N > 1 or self.off_param:
            for m in self.order:
                for j, (n, _) in enumerate(m.tensors):
                    if (m.key, j) in self.persist:
                        self.A(e * n, "weights")
        tpart = [-(-n // N) for m in self.order for n, t in m.tensors if t]
        self.Tpart = sum(tpart)
        if not self.off_param:
            flags = [t for m in self.order for _, t in m.tensors]
            self.F(*[p for p, t in zip(parts, flags) if t])   # defragment: to the CPU, empty_cache, back
            self.al.empty_cache()
            self.lp = self.A(e * self.Tpart, "weights")
        subs, acc = [], 0
        for n in tpart:
            acc += n
            if acc >= setup.sub_group_size:
                subs.append(acc)
                acc = 0
        if acc:
            subs.append(acc)
        self.subs = subs
        if not self.off_opt:
            prev = None
            for n in subs:
                conv = self.A(4 * n, "optimizer")
                self.F(prev)
                self.A(4 * n, "optimizer")
                prev = conv
            self.F(prev)
            gb = self.A(4 * max(subs), "optimizer")
            self.F(gb)
        if setup.contiguous_gradients:
            self.A(e * setup.reduce_bucket_size, "buckets")
        gae = 4 if setup.grad_accum_dtype in ("fp32", "float32") else e
        if not self.off_opt:
            self.A(gae * self.Tpart, "gradients")
        for m in self.order:
            for j, (n, t) in enumerate(m.tensors):
                if t and (m.key, j) not in self.persist:
                    ft = self.A(e * n, "weights")
                    if self.off_param:
                        self.F(self.A(e * -(-n // N), "weights"))
                    self.F(ft)

    # ---------------------------------------------------------------- parameter fetch (ZeRO-3) / autocast copies
    def _needs_gather(self) -> bool:
        return self.stage == 3 and (self.N > 1 or self.off_param)

    def fetch(self, mods: list[_PMod]) -> None:
        if self.amp:
            # autocast: the 16-bit copy of each fp32 linear weight, saved by the matmul for backward
            for m in mods:
                if m.key not in self.gathered and m.role not in ("embed", "pos_embed", "norm"):
                    self.gathered[m.key] = [self.A(2 * n, "activations") for n, t in m.tensors
                                            if t or self.setup.lora_rank is None]
            return
        if not self._needs_gather():
            return
        for m in mods:
            self.rec.append(m)
            self._gather(m)
            if self.trace is not None:
                self.pos += 1
                self._prefetch()

    def _gather(self, m: _PMod) -> None:
        if m.key in self.gathered:
            return
        blocks = []
        for j, (n, _) in enumerate(m.tensors):
            if (m.key, j) not in self.persist:
                # the all-gathered full parameter: ZeRO-3's working set (a comm buffer in our taxonomy)
                blocks.append(self.A(self.e * n, "buckets", self.ags))
                self.avail += n
        self.gathered[m.key] = blocks

    def _prefetch(self) -> None:
        """partitioned_param_coordinator: after a fetch, gather the next modules of the
        recorded trace, up to prefetch_bucket_size elements and while fewer than
        max_live_parameters elements are gathered."""
        setup = self.setup
        budget = min(setup.prefetch_bucket_size, setup.max_live_parameters - self.avail)
        num = 0
        i = self.pos
        while self.trace is not None and i < len(self.trace) and num < budget:
            m = self.trace[i]
            if m.key not in self.gathered:
                self._gather(m)
                num += sum(n for n, _ in m.tensors)
            i += 1

    def release(self, mods: list[_PMod]) -> None:
        if self.amp or not self._needs_gather():
            return
        keep: set[str] = set()
        if self.trace is not None:
            # __params_to_release: keep what is used again within max_reuse_distance elements
            trav = 0
            for m2 in self.trace[self.pos:]:
                if trav >= self.setup.max_reuse_distance:
                    break
                keep.add(m2.key)
                trav += sum(n for n, _ in m2.tensors)
        for m in mods:
            if m.key not in keep:
                self._drop(m.key)

    def _drop(self, key: str) -> None:
        blocks = self.gathered.pop(key, None)
        if blocks:
            mod = self.modmap[key]
            self.avail -= sum(n for j, (n, _) in enumerate(mod.tensors) if (key, j) not in self.persist)
            self.F(*blocks)

    def release_casts(self, mods: list[_PMod]) -> None:
        if self.amp:
            for m in mods:
                self.F(*self.gathered.pop(m.key, ()))

    # ---------------------------------------------------------------- forward
    def forward(self) -> None:
        self.phase("forward")
        # ZeRO-3's coordinator resets at the start of every forward; the first full
        # forward + backward it saw is the trace it prefetches and releases by from then on
        if self.trace is None and self.rec:
            self.trace = self.rec
        self.rec, self.pos = [], 0
        e, tok = self.e, self.tok
        ids = self.A(8 * tok, "activations")           # input ids (int64; the capture loop passes them as labels too)
        self.fetch(self.first)
        x = self.A(e * self.sbh, "activations")        # embedding output
        if any(m.role == "pos_embed" for m in self.first):
            x2 = self.A(e * self.sbh, "activations")
            self.F(x)
            x = x2
        self.release(self.first)
        if self.cublas is None:
            self.cublas = self.A(CALIBRATION["cublas_workspace_bytes"], "other")
        mask = self.A(self.mask, "activations") if self.mask else None
        self.saved: list[Any] = []
        self.inputs: list[_Block] = []
        for mods in self.blocks:
            if self.ckpt:
                self.inputs.append(x)
                x, sv = self._block_forward(mods, x, keep_input=True)
                self.F(*_saved_blocks(sv))
                self.release_casts(mods)
                self.saved.append(None)
            else:
                x, sv = self._block_forward(mods, x, keep_input=False)
                self.saved.append(sv)
        self.fetch([m for m in self.last if m.role != "lm_head"])
        fin = [self.A(part, "activations") for part in self._final_parts()]
        self.F(x)
        self.release([m for m in self.last if m.role != "lm_head"])
        head = [m for m in self.last if m.role == "lm_head"] or [m for m in self.first if m.role == "embed"]
        self.fetch(head)
        logits = self.A(e * self.TV, "logits")
        self.release(head)
        # HF ForCausalLMLoss: logits.float(), log_softmax saved by cross-entropy
        up = self.A(4 * self.TV * _factor("logits.fp32_upcast"), "logits") if e < 4 else None
        lab = self.A(8 * tok, "activations")
        lsm = self.A(4 * self.TV * _factor("logits.log_softmax"), "logits")
        self.F(up)
        # the training loop's `out = model(...)` drops the previous step's output only now
        self.F(self.held_logits)
        self.held_logits = logits
        self.fwd_state = (ids, lab, mask, fin, lsm, head)

    def _final_parts(self) -> list[float]:
        total = self.final_saved
        if not total:
            return []
        if self.spec.norm == "rmsnorm":
            e, sbh = self.e, self.sbh
            raw = [4 * sbh, e * sbh, e * sbh]
            scale = total / sum(raw)
            return [r * scale for r in raw]
        return [total / 2, total / 2]

    def _block_forward(self, mods: list[_PMod], x: _Block, keep_input: bool) -> tuple[_Block, Any]:
        if self.llama:
            return self._llama_forward(mods, x, keep_input)
        e = self.e
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        self.fetch(attn)
        sa = [self.A(sz, "activations") for sz in self.attn_saved]
        r1 = self.A(e * self.sbh, "activations")       # residual after attention
        self.release(attn)
        self.fetch(mlp)
        sm = [self.A(sz, "activations") for sz in self.mlp_saved]
        y = self.A(e * self.sbh, "activations")        # block output
        self.F(r1)
        self.release(mlp)
        if not keep_input:
            self.F(x)
        return y, (sa, sm)

    # ---------------------------------------------------------------- backward
    def backward(self) -> None:
        self.phase("backward")
        e = self.e
        ids, lab, mask, fin, lsm, head = self.fwd_state
        nll = self.A(4 * self.TV * _factor("logits.fp32_upcast"), "logits")   # dloss/dlogprobs
        lsg = self.A(4 * self.TV * _factor("logits.ce_grad"), "logits")       # log_softmax backward
        self.F(nll, lsm)
        if e < 4:
            gl = self.A(e * self.TV, "logits")                                # .float() backward
            self.F(lsg)
        else:
            gl = lsg
        self.fetch(head)
        hm = head[0]
        emb_acc = None
        gW = None
        if hm.tensors[0][1]:
            gW = self.A(self.ge * hm.tensors[0][0], "gradients")
        gh = self.A(e * self.sbh, "activations")
        self.F(gl)
        if gW is not None:
            if hm.role == "lm_head":
                self.grad(hm.key, 0, gW)
            else:
                emb_acc = gW          # tied: accumulated with the embedding's own gradient at the end
        self.release(head)
        self.release_casts(head)
        tail = [m for m in self.last if m.role != "lm_head"]
        self.fetch(tail)
        g = self._norm_backward(fin, tail, gh)
        self.release(tail)
        self.release_casts(tail)
        for layer in reversed(range(len(self.blocks))):
            mods = self.blocks[layer]
            if self.ckpt:
                x = self.inputs[layer]
                y, sv = self._block_forward(mods, x, keep_input=True)
                self.F(y)
            else:
                sv = self.saved[layer]
            g = self._block_backward(mods, sv, g)
            if self.ckpt:
                self.F(x)
        self.fetch(self.first)
        emb = [m for m in self.first if m.role == "embed"]
        dense = self.A(self.ge * emb[0].tensors[0][0], "gradients") if emb and emb[0].tensors[0][1] else None
        self.F(g)
        if emb_acc is not None and dense is not None:
            self.F(dense)
            dense = emb_acc
        for m in self.first:
            for j, (n, t) in enumerate(m.tensors):
                if not t:
                    continue
                if m.role == "embed" and j == 0:
                    if dense is not None:
                        self.grad(m.key, j, dense)
                else:
                    self.grad(m.key, j, self.A(self.ge * n, "gradients"))
        self.release(self.first)
        self.release_casts(self.first)
        self.F(ids, lab, mask)
        self.epilogue()

    def _module_grads(self, mods: list[_PMod]) -> None:
        for m in mods:
            for j, (n, t) in enumerate(m.tensors):
                if t:
                    self.grad(m.key, j, self.A(self.ge * n, "gradients"))

    def _norm_backward(self, saved: list[_Block], norms: list[_PMod], g: _Block) -> _Block:
        e = self.e
        t = self.A(4 * self.sbh, "activations")
        self.F(*reversed(saved))
        self._module_grads(norms)
        gx = self.A(e * self.sbh, "activations")
        self.F(t, g)
        return gx

    def _block_backward(self, mods: list[_PMod], sv: Any, g: _Block) -> _Block:
        if self.llama:
            return self._llama_backward(mods, sv, g)
        e = self.e
        sa, sm = sv
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        attn_norms = [m for m in attn if m.role == "norm"]
        mlp_norms = [m for m in mlp if m.role == "norm"]
        # MLP (down / fc2 first)
        self.fetch(mlp)
        out_proj = [m for m in mlp if m.role in ("down", "fc2")]
        in_proj = [m for m in mlp if m.role in ("gate", "up", "fc1")]
        self._module_grads(out_proj)
        w1 = self.A(self.wide, "activations")
        body = sm[self.mlp_split:]
        w2 = self.A(self.wide, "activations")
        w3 = self.A(self.wide, "activations") if self.spec.gated_mlp else None
        self.F(w1)
        self.F(*reversed(body))
        self._module_grads(list(reversed(in_proj)))
        gx = self.A(e * self.sbh, "activations")
        self.F(w2, w3)
        g2 = self._norm_backward(sm[:self.mlp_split], mlp_norms, gx)
        gm = self.A(e * self.sbh, "activations")     # residual: g + dL/dx of the MLP branch
        self.F(g2, g)
        self.release(mlp)
        self.release_casts(mlp)
        # attention (o first, then q/k/v)
        self.fetch(attn)
        self._module_grads([m for m in attn if m.role == "o"])
        ga = self.A(self.qwidth, "activations")
        if self.scores:
            p1 = self.A(e * self.scores, "activations")
            p2 = self.A((4 if self.spec.softmax_fp32 else e) * self.scores, "activations")
            self.F(p1)
        gq = self.A(self.qwidth, "activations")
        gkv = self.A(2 * self.kvwidth, "activations")
        if self.scores:
            self.F(p2)
        self.F(ga)
        body = sa[self.attn_split:]
        self.F(*reversed(body))
        self._module_grads([m for m in reversed(attn) if m.role in ("q", "k", "v", "qkv")])
        gx = self.A(e * self.sbh, "activations")
        self.F(gq, gkv)
        g3 = self._norm_backward(sa[:self.attn_split], attn_norms, gx)
        gout = self.A(e * self.sbh, "activations")
        self.F(g3, gm)
        self.release(attn)
        self.release_casts(attn)
        return gout

    # ---------------------------------------------------------------- the Llama-family block
    def _rms_forward(self, saved_out: float) -> tuple[list[_Block], _Block]:
        """LlamaRMSNorm: x.float() (saved), pow/mean temporaries, rsqrt (saved), the fp32
        product (temporary), its 16-bit cast (saved for the weight's gradient), the output."""
        e, sbh, t = self.e, self.sbh, self.t
        x32 = self.A(t["norm_fp32_input"] / 2, "activations")
        self.F(self.A(4 * sbh, "activations"))                     # pow(2)
        var = self.A(4 * self.tok, "activations")
        rs = self.A(4 * self.tok, "activations")
        hs = self.A(4 * sbh, "activations")
        nrm = self.A(t["norm_normalized"] / 2, "activations") if t.get("norm_normalized") else None
        out = self.A(saved_out or e * sbh, "activations")
        self.F(hs, var)
        return [x32, rs, nrm], out

    def _rope(self, width: float, saved: float) -> _Block:
        """apply_rotary_pos_emb on one of q / k: x·cos, rotate_half (neg + cat), ·sin, sum."""
        a = self.A(width, "activations")
        n = self.A(width / 2, "activations")
        c = self.A(width, "activations")
        self.F(n)
        r = self.A(width, "activations")
        self.F(c)
        out = self.A(saved, "activations")
        self.F(r, a)
        return out

    def _llama_forward(self, mods: list[_PMod], x: _Block, keep_input: bool) -> tuple[_Block, dict]:
        e, sbh, t = self.e, self.sbh, self.t
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        sv: dict[str, Any] = {}
        self.fetch(attn)
        sv["n1"], out1 = self._rms_forward(t.get("attn_input", 0))
        q = self.A(self.qwidth, "activations")
        k = self.A(self.kvwidth, "activations")
        sv["v"] = self.A(t.get("v") or self.kvwidth, "activations")
        sv["q"] = self._rope(self.qwidth, t["q"])
        sv["k"] = self._rope(self.kvwidth, t["k"])
        self.F(q, k)
        if not t.get("attn_input"):
            self.F(out1)
            out1 = None
        sv["out1"] = out1
        if self.scores:
            w = self.A(e * self.scores, "activations")                      # q @ kᵀ
            sv["sm"] = self.A(t["attn_softmax"], "activations")
            self.F(w)
            sv["probs"] = self.A(t.get("attn_probs") or t.get("attn_dropout", 0), "activations")
            ao = self.A(self.qwidth, "activations")                          # probs @ v, (b, a, s, d)
            sv["o"] = self.A(t.get("o_proj_input") or self.qwidth, "activations")  # transpose + reshape copy
            self.F(ao)
            sv["lse"] = None
        else:
            sv["o"] = self.A(t["attn_out"], "activations")
            sv["lse"] = self.A(t["attn_lse"], "activations")
        op = self.A(e * sbh, "activations")                                  # o_proj output
        r1 = self.A(e * sbh, "activations")                                  # + residual
        self.F(op)
        self.release(attn)
        self.fetch(mlp)
        sv["n2"], out2 = self._rms_forward(t.get("mlp_input", 0))
        wide = self.wide
        sv["g"] = self.A(t.get("mlp_gate") or wide, "activations")
        sv["sl"] = self.A(t.get("mlp_act") or wide, "activations")
        sv["u"] = self.A(t.get("mlp_up") or wide, "activations")
        sv["pr"] = self.A(t.get("mlp_product") or wide, "activations")
        dn = self.A(e * sbh, "activations")                                  # down_proj output
        y = self.A(e * sbh, "activations")                                   # + residual
        self.F(dn, r1)
        if not t.get("mlp_input"):
            self.F(out2)
            out2 = None
        sv["out2"] = out2
        if not t.get("mlp_product"):
            self.F(sv["pr"])
            sv["pr"] = None
        self.release(mlp)
        if not keep_input:
            self.F(x)
        return y, sv

    def _grad_of(self, mods: list[_PMod], role: str) -> list[tuple[_PMod, int, int]]:
        return [(m, j, n) for m in mods if m.role == role for j, (n, tr) in enumerate(m.tensors) if tr]

    def _alloc_grads(self, mods: list[_PMod], role: str) -> list[tuple[_PMod, int, _Block]]:
        return [(m, j, self.A(self.ge * n, "gradients")) for m, j, n in self._grad_of(mods, role)]

    def _hook_all(self, grads: list[tuple[_PMod, int, _Block]]) -> None:
        for m, j, blk in grads:
            self.grad(m.key, j, blk)

    def _rms_backward(self, saved: list[_Block | None], out: _Block | None, norms: list[_PMod]) -> _Block:
        e, sbh = self.e, self.sbh
        x32, rs, nrm = saved
        gw = self._alloc_grads(norms, "norm")
        self.F(self.A(8 * sbh, "activations"))
        a1 = self.A(e * sbh, "activations")
        self.F(out, nrm)
        b1 = self.A(4 * sbh, "activations")
        b2 = self.A(4 * sbh, "activations")
        b3 = self.A(4 * sbh, "activations")
        self.F(b1, x32, rs)
        gx = self.A(e * sbh, "activations")
        self.F(b2, b3, a1)
        self._hook_all(gw)
        return gx

    def _rope_backward(self, g: _Block, width: float) -> _Block:
        t1 = self.A(width, "activations")
        t2 = self.A(width / 2, "activations")
        t3 = self.A(width, "activations")
        self.F(t2)
        t4 = self.A(width, "activations")
        self.F(t1, t3, g)
        return t4

    def _llama_backward(self, mods: list[_PMod], sv: dict, gy: _Block) -> _Block:
        e, sbh, wide = self.e, self.sbh, self.wide
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        adapters = [m for m in mods if m.role not in ("norm", "q", "k", "v", "o", "gate", "up", "down")]
        # MLP: down, then the SiLU·up product, then up and gate
        self.fetch(mlp)
        gwd = self._alloc_grads(mlp, "down")
        gpr = self.A(wide, "activations")
        self.F(sv["pr"])
        self._hook_all(gwd)
        gsl = self.A(wide, "activations")
        gu = self.A(wide, "activations")
        self.F(gpr, sv["u"], sv["sl"])
        gwu = self._alloc_grads(mlp, "up")
        gxu = self.A(e * sbh, "activations")
        self.F(gu)
        self._hook_all(gwu)
        gg = self.A(wide, "activations")
        self.F(gsl, sv["g"])
        gwg = self._alloc_grads(mlp, "gate")
        gxg = self.A(e * sbh, "activations")
        self.F(gg)
        self._hook_all(gwg)
        gx = self.A(e * sbh, "activations")
        self.F(gxu, gxg)
        gn = self._rms_backward(sv["n2"], sv["out2"], [m for m in mlp if m.role == "norm"])
        self.F(gx)
        gr = self.A(e * sbh, "activations")
        self.F(gn, gy)
        self.release(mlp)
        self.release_casts(mlp)
        # attention: o_proj, the attention kernel, RoPE, then v, k, q
        self.fetch(attn)
        gwo = self._alloc_grads(attn, "o")
        ga = self.A(self.qwidth, "activations")
        self._hook_all(gwo)
        if self.scores:
            p1 = self.A(e * self.scores, "activations")
            self.F(sv["sm"], sv["probs"])
            p2 = self.A((4 if self.spec.softmax_fp32 else e) * self.scores, "activations")
            self.F(p1)
        gq = self.A(self.qwidth, "activations")
        gk = self.A(self.kvwidth, "activations")
        gv = self.A(self.kvwidth, "activations")
        if self.scores:
            self.F(p2)
        else:
            self.F(self.A(4 * self.tok * self.spec.q_dim, "activations"))  # fp32 dq accumulator
        self.F(ga, sv["k"], sv["q"], sv["v"], sv["lse"], sv["o"])
        gq = self._rope_backward(gq, self.qwidth)
        gk = self._rope_backward(gk, self.kvwidth)
        gxs = None
        for role, gt in (("v", gv), ("k", gk), ("q", gq)):
            gws = self._alloc_grads(attn, role)
            gxp = self.A(e * sbh, "activations")
            self.F(gt)
            self._hook_all(gws)
            if gxs is None:
                gxs = gxp
            else:
                acc = self.A(e * sbh, "activations")
                self.F(gxs, gxp)
                gxs = acc
        self._module_grads(adapters)
        gn = self._rms_backward(sv["n1"], sv["out1"], [m for m in attn if m.role == "norm"])
        self.F(gxs)
        gin = self.A(e * sbh, "activations")
        self.F(gn, gr)
        self.release(attn)
        self.release_casts(attn)
        return gin

    # ---------------------------------------------------------------- gradients
    def grad(self, key: str, j: int, blk: _Block) -> None:
        """A parameter's gradient has been produced (its AccumulateGrad hook fires)."""
        numel = self.modmap[key].tensors[j][0]
        if not self.ds:
            if self.micro > 0:
                self.F(blk)       # accumulated into the existing .grad
            else:
                self.grads.append(blk)
            return
        if self.stage == 0:
            if self.e < 4:
                self.F(self.A(4 * numel, "gradients"), blk)   # hp_grad.add_(lp.grad.float())
            elif self.micro > 0:
                self.F(blk)
            else:
                self.grads.append(blk)
            return
        if self.stage == 3:
            return self._grad_zero3(numel, blk)
        return self._grad_zero12(numel, blk)

    def _grad_zero12(self, numel: int, blk: _Block) -> None:
        setup = self.setup
        if not self.bufs:
            # setup_buckets at the first gradient of each backward; a second one with overlap_comm
            be = 4 if (self.stage == 1 and setup.grad_accum_dtype in ("fp32", "float32") and self.e < 4) else self.e
            n = 2 if setup.effective_overlap_comm else 1
            self.bufs = [self.A(be * setup.reduce_bucket_size, "buckets") for _ in range(n)] \
                if setup.contiguous_gradients else [None]
            self.bucket_elems = 0
            self.bucket_tensors = []
        if numel > setup.reduce_bucket_size:
            self._flush12()
            self.bucket_tensors = [numel]
            self._flush12()
            self.F(blk)
            return
        if self.bucket_elems + numel > setup.reduce_bucket_size:
            self._flush12()
        self.F(blk)                               # copied into the contiguous bucket
        self.bucket_tensors.append(numel)
        self.bucket_elems += numel

    def _flush12(self) -> None:
        if not self.bucket_tensors:
            return
        N = self.N
        if self.off_opt:
            for n in self.bucket_tensors:
                part = n / N
                # set_norm_for_param_grad_in_gpu (fp64 copy) and the fp32 copy sent to the host
                self.F(self.A(8 * part, "gradients", self.rs))
                self.F(self.A(4 * part, "gradients", self.rs))
        elif self.gip is None:
            gae = 4 if self.setup.grad_accum_dtype in ("fp32", "float32") and self.stage == 1 else self.e
            self.gip = self.A(gae * self.T / N, "gradients", self.rs)
        self.bucket_tensors = []
        self.bucket_elems = 0

    def _grad_zero3(self, numel: int, blk: _Block) -> None:
        setup = self.setup
        if self.bucket_elems + numel > setup.reduce_bucket_size and self.bucket_elems > 0:
            self._flush3()
        self.F(blk)                               # copied into the IPG bucket on the reduction stream
        self.bucket_tensors.append(numel)
        self.bucket_elems += numel

    def _flush3(self) -> None:
        """__reduce_and_partition_ipg_grads: reduce_scatter_coalesced concatenates the
        bucket's gradients (one buffer), partition_grads copies this rank's share."""
        if not self.bucket_tensors:
            return
        N, e = self.N, self.e
        s = self.rs
        cat = self.A(e * self.bucket_elems, "buckets", s) if len(self.bucket_tensors) > 1 or N > 1 else None
        if self.off_opt:
            prev = None
            for n in self.bucket_tensors:
                part = -(-n // N)
                gbuf = self.A(e * part, "gradients", s)        # grad_buffer.to(device): back on the GPU
                self.F(prev)
                if self.boundary:
                    left = part
                    while left > 0:                             # _constant_buffered_norm2: fp64 chunks
                        c = min(left, 250_000_000)
                        self.F(self.A(8 * c, "gradients", s))
                        left -= c
                    self.F(self.A(4 * part, "gradients", s))     # fp32 copy for the host
                prev = gbuf
            self.F(prev)
        self.F(cat)
        self.bucket_tensors = []
        self.bucket_elems = 0

    def epilogue(self) -> None:
        if not self.ds:
            return
        if self.stage == 3:
            self._flush3()
            return
        if self.stage in (1, 2):
            self._flush12()
            if self.stage == 2:
                for b in self.bufs or ():
                    self.F(b)
            else:
                # stage 1: gradients outside this rank's partition stay as views into the bucket
                # until the step frees them, so the bucket storage lives on
                self.held_bufs += [b for b in self.bufs or () if b is not None]
            self.bufs = None
            if self.old_gip is not None:
                self.F(self.old_gip)
                self.old_gip = None
            if not self.boundary and not self.off_opt and self.gip is not None:
                # gradient accumulation: the next micro-step reduces into a new partition buffer;
                # this one lives (through the accumulated .grad views) until that copy is done
                self.old_gip, self.gip = self.gip, None

    # ---------------------------------------------------------------- optimizer step
    def _adam(self, n: float, key: int) -> None:
        """A torch AdamW step on n fp32 elements: lazily created states, the foreach sqrt temporary."""
        while len(self.states) <= key:
            self.states.append([self.A(4 * n, "optimizer") for _ in range(self.state_tensors)])
        if self.state_tensors:
            self.F(self.A(4 * n, "optimizer"))

    def step(self, step: int) -> None:
        N, T, e = self.N, self.T, self.e
        trainable = [n for m in self.order for n, t in m.tensors if t]
        if not self.ds or (self.stage == 0 and e == 4):
            se = 4 if (self.amp or e == 4) else e
            if not self.states:
                self.states = [[self.A(se * n, "optimizer") for _ in range(self.state_tensors)] for n in trainable]
            if self.state_tensors:
                tmp = [self.A(se * n, "optimizer") for n in trainable]
                self.F(*tmp)
            self.F(*self.grads)
            self.grads = []
            return
        if self.stage == 3:
            for key in list(self.gathered):   # _partition_all_parameters
                self._drop(key)
            if self.off_opt:
                return
            for n in trainable:
                self.F(self.A(8 * -(-n // N), "optimizer"))    # fp64 norm of each gradient partition
            for i, n in enumerate(self.subs):
                flat = self.A(e * n, "gradients")
                f32 = self.A(4 * n, "optimizer")
                self.F(flat)
                self._adam(n, i)
                self.F(f32)
            return
        if self.stage == 0:
            for n in trainable:
                self.F(self.A(8 * n / N, "optimizer"))
            self._adam(T / N, 0)
            return
        if self.off_opt:
            return
        for n in trainable:
            self.F(self.A(8 * n / N, "optimizer"))             # get_grad_norm_direct: fp64 copies
        flat = self.A(e * T / N, "gradients")                  # flatten(averaged_gradients)
        f32 = self.A(4 * T / N, "optimizer")                   # .to(fp32)
        self.F(flat, self.gip, *self.held_bufs)
        self.gip = None
        self.held_bufs = []
        self._adam(T / N, 0)
        self.F(f32)


def _saved_blocks(sv: Any) -> list[_Block | None]:
    """Every block a forward kept for backward (generic tuple or the Llama dict)."""
    if isinstance(sv, dict):
        out: list[_Block | None] = []
        for v in sv.values():
            out += v if isinstance(v, list) else [v]
        return out
    return list(sv[0]) + list(sv[1])


def _simulate(spec: ModelSpec, setup: TrainSetup, device_bytes: int, cap: float | None = None) -> _SimResult:
    """The replay, memoised: the analysis pipeline and the rerun planner ask for the same set-up
    several times.  The key includes CALIBRATION and the replay lengths, so changing them is seen."""
    key = (spec, setup, int(device_bytes), cap, tuple(sorted(CALIBRATION.items())), _STEPS, _MICRO_STEPS)
    hit = _SIM_CACHE.get(key)
    if hit is None:
        hit = _Program(spec, setup, device_bytes, cap).run()
        if len(_SIM_CACHE) >= 256:
            _SIM_CACHE.pop(next(iter(_SIM_CACHE)))
        _SIM_CACHE[key] = hit
    return hit


_SIM_CACHE: dict[tuple[Any, ...], _SimResult] = {}


# ---------------------------------------------------------------------- NCCL


def _nccl_bytes(setup: TrainSetup) -> tuple[int, int]:
    """(communicators, bytes).  DeepSpeed creates the world group plus its
    clone (``groups._clone_world_group``, the data-parallel group).  With more
    than one rank ``init_distributed`` binds ``device_id``, so torch creates the
    world communicator eagerly and splits the clone from it: 2 communicators.
    At world size 1 it does not (deepspeed/comm/torch.py), communicators are
    created lazily, and only the data-parallel group ever carries a
    collective: 1 (measured: 1316 MiB of non-PyTorch memory = context 738 +
    one communicator 578).  DDP uses 1; a single plain process none.  First
    communicator 578 MiB (incl. kernel image), each further 388 MiB (measured
    on H200, nccl.md §2.2), plus peer connection buffers when world_size > 1."""
    if setup.deepspeed:
        comms = 2 if setup.world_size > 1 else 1
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
    the memory the process may use (default 80 GiB, said in assumptions).

    The peaks come from replaying the run's allocations through the caching
    allocator model (``_Program``); the named terms give the tensor sizes, the
    resident model states (``model_states_bytes``) and the host side."""
    assumptions: list[str] = []
    if device_bytes is None:
        device_bytes = DEFAULT_DEVICE_BYTES
        assumptions.append(f"no device size given: compared against {_g(device_bytes)}")
    st = _model_states(spec, setup, device_bytes)
    P, T, _ = _params(spec, setup)

    acts = activation_terms(spec, setup)
    logit = logits_terms(spec, setup)
    context = int(CALIBRATION["cuda_context_bytes"])
    comms, nccl = _nccl_bytes(setup)
    # Unconstrained, the caching allocator keeps every segment it ever made: that max reserved is
    # what a run shows on a card with room to spare (and what the measurements are).  When it
    # exceeds the device, replay again under the cap: the allocator then frees whole cached
    # segments and retries before it gives up, and the run may still fit.
    sim = _simulate(spec, setup, device_bytes)
    capped = False
    if sim.peak_reserved + context + nccl > device_bytes:
        tight = _simulate(spec, setup, device_bytes, cap=device_bytes - context - nccl)
        if tight.oom is None:
            sim, capped = tight, True
        else:
            sim = replace(sim, oom=tight.oom)
    live = sim.live_at_peak

    breakdown = {
        "weights": int(live.get("weights", 0)),
        "gradients": int(live.get("gradients", 0)),
        "optimizer": int(live.get("optimizer", 0)),
        "activations": int(live.get("activations", 0)),
        "logits": int(live.get("logits", 0)),
        "buckets": int(live.get("buckets", 0)),
        "workspace": int(live.get("other", 0)),
        "context": context,
        "nccl": nccl,
        # cached segments the caching allocator keeps reserved beyond the live tensors at the peak
        "allocator_overhead": int(sim.peak_reserved - sim.peak_allocated),
        "kv_cache": 0,
        "startup_extra": 0,
    }
    step_peak = sum(v for k, v in breakdown.items() if k not in ("kv_cache", "startup_extra"))
    startup_peak = int(sim.startup_reserved) + context + nccl
    breakdown["startup_extra"] = startup_peak - breakdown["weights"] - context - nccl

    gen_peak = None
    if setup.generation:
        kv = kv_cache_bytes(spec, setup.gen_batch, setup.kv_len, setup.element_bytes)
        breakdown["kv_cache"] = kv
        gen_peak = _generation_peak(spec, setup, st, kv, context, nccl)

    predicted = max(startup_peak, step_peak, gen_peak or 0)
    host_rank, host_breakdown = _host_side(spec, setup, st, P)
    assumptions += _assumptions(spec, setup, st, comms, T, sim, context + nccl, capped)
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
        allocated_peak_bytes=int(sim.peak_allocated) + context + nccl,
        startup_allocated_bytes=int(sim.startup_allocated) + context + nccl,
        peak_phase=sim.peak_phase,
        phase_peaks=MappingProxyType({k: int(v) + context + nccl for k, v in sim.phase_peaks.items()}),
        resident_states_bytes=int(st.weights + st.gradients + st.optimizer),
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


_PHASE_TEXT = {"initialize": "deepspeed.initialize / model load", "forward": "the forward pass",
               "backward": "the backward pass", "optimizer step": "the optimizer step"}


def _assumptions(spec: ModelSpec, setup: TrainSetup, st: _States, comms: int, T: int, sim: _SimResult,
                 non_torch: int, capped: bool) -> list[str]:
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
        if e == 4:
            mode = "fp32"
        elif setup.torch_amp:
            mode = "AMP over an fp32 model"
        else:
            mode = f"the module in {setup.dtype} (16-bit weights, gradients and optimizer states)"
        out.append(f"plain PyTorch{' DDP' if setup.world_size > 1 else ''}, {mode}, {setup.optimizer} "
                   f"(torch.optim foreach: one temporary per state tensor in the step)")
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
    measured = spec.family == "llama" and setup.attn == "sdpa" and setup.lora_rank is None
    out.append(f"activations: the tensors autograd saves in a HF {spec.family} block, {setup.attn} attention, "
               f"{ckpt}, micro-batch {setup.micro_batch} × {setup.seq_len} tokens"
               + (f", {setup.grad_accum_steps} micro-batches per step" if setup.grad_accum_steps > 1 else "")
               + ("; measured exact on H200 for this family and attention (CALIBRATION)" if measured
                  else "; sizes from the same derivation, measured only for Llama-family SDPA blocks"))
    if setup.attn == "sdpa" and spec.kv_heads != spec.heads:
        out.append("SDPA assumed to take GQA keys/values unrepeated (enable_gqa); eager repeats them")
    out.append("loss in fp32: logits.float() + log-softmax + its gradient (HF ForCausalLMLoss); the training "
               "loop keeps the model output (its logits) through backward and the optimizer step, until the next "
               "forward replaces it (`out = model(...)`; HF Trainer drops it before backward)")
    where = _PHASE_TEXT.get(sim.peak_phase, sim.peak_phase or "start-up")
    cached = sim.peak_reserved - sim.peak_allocated
    out.append(f"peak: PyTorch's caching allocator replayed over the model load, initialize and {_STEPS} "
               f"steps: tensors peak at {_g(sim.peak_allocated)} in {where}; it reserves "
               f"{_g(sim.peak_reserved)} ({_g(cached)} cached in segments that later requests of other sizes "
               f"cannot reuse), plus {_g(non_torch)} outside PyTorch")
    if capped:
        out.append(f"fits only because the allocator frees its cached segments when the device is full: "
                   f"{sim.retries} cache flush(es) replayed (DeepSpeed warns \"pytorch allocator cache flushes\"); "
                   f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avoids them")
    elif sim.oom is not None:
        phase, request = sim.oom
        out.append(f"does not fit even after the allocator frees its cache: a {_g(request)} request in "
                   f"{_PHASE_TEXT.get(phase, phase)} finds no room")
    out.append(f"CUDA context {_g(CALIBRATION['cuda_context_bytes'])} and cuBLAS workspaces "
               f"{_g(CALIBRATION['cublas_workspace_bytes'])}; NCCL {comms} communicator(s)"
               + (" (world size 1: only the data-parallel group's communicator is ever created)"
                  if setup.deepspeed and setup.world_size == 1 else
                  " (DeepSpeed initialises NCCL: world group + its clone)" if setup.deepspeed else ""))
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
        elif leaf == "gradient_accumulation_steps":
            out.append(f"ds_config {key} \"auto\": {setup.grad_accum_steps} micro-batch(es) per step "
                       f"(option or default)")
        elif leaf in hf:
            sizes.append(f"{leaf} (HF Trainer would set {hf[leaf]})")
        else:
            sizes.append(leaf)
    if sizes:
        out.append(f"ds_config \"auto\" → DeepSpeed's code defaults for: {'; '.join(sizes)}")
    return out


def _g(n: float) -> str:
    return f"{n / GiB:.2f} GiB"
