"""The memory model's fitted constants and fixed tables (docs/estimator_accuracy.md)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from ..units import GiB, MiB


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
