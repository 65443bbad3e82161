"""Activation, logits and KV-cache terms: the tensors autograd saves, by name."""

from __future__ import annotations

from .calibration import CALIBRATION
from .models import ModelSpec
from .params import _lora_roles
from .setup import TrainSetup


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
