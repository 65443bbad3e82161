"""Model shapes for the estimator: what a HuggingFace ``config.json`` says, and
the exact parameter inventory that follows from it.

``ModelSpec`` holds the numbers the memory model needs (hidden size, layers,
heads and KV heads, FFN width, vocabulary, tied embeddings, gated MLP, norm
type …).  ``ModelSpec.modules()`` lists every parameter-holding module the
HuggingFace implementation builds, with its own (``recurse=False``) parameter
count, so that

* ``n_params`` is exact — the number ``sum(p.numel() for p in
  model.parameters())`` gives (tied weights counted once), and
* ``largest_layer_params`` is DeepSpeed's definition (``estimate_zero3_*``):
  ``max(sum(p.numel() for p in m.parameters(recurse=False)) for m in
  model.modules())`` — usually the embedding or the ``lm_head``.

Families counted exactly: Llama / Mistral / Qwen2 / Qwen3 / Gemma (gated MLP,
RMSNorm), GPT-NeoX, GPT-2, OPT, Falcon.  Other ``model_type`` values with
Llama-style keys are counted as Llama-shaped and flagged ``approximate``.

Presets are the published ``config.json`` files of the named checkpoints,
written out here (no network).  Nothing here imports torch or transformers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from oompost.errors import InputError
from oompost.sources import load_json_object

__all__ = [
    "ModelSpec",
    "ModuleParams",
    "PRESETS",
    "PRESET_ALIASES",
    "load_model_spec",
    "spec_from_hf_config",
    "spec_from_param_count",
    "parse_param_count",
    "preset",
]


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class ModuleParams:
    """One kind of parameter-holding module.

    ``numel`` is the module's own parameters (``recurse=False``); ``count`` how
    many such modules the model has (``layers`` for per-block modules).
    ``shared`` marks a module whose parameter is another module's (a tied
    ``lm_head``): it counts for the largest layer but not for ``n_params``.
    ``role`` is a family-independent name (``q``, ``k``, ``v``, ``qkv``, ``o``,
    ``gate``, ``up``, ``down``, ``fc1``, ``fc2``, ``norm``, ``embed``,
    ``pos_embed``, ``lm_head``, ``proj``) used for LoRA targets.
    ``in_features``/``out_features`` are set for linear layers.
    """

    name: str
    role: str
    numel: int
    count: int = 1
    shared: bool = False
    in_features: int = 0
    out_features: int = 0
    bias: int = 0  # elements of the bias vector, included in numel

    @property
    def weight_numel(self) -> int:
        return self.numel - self.bias


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder-only transformer, as far as memory is concerned.

    ``head_dim`` defaults to ``hidden // heads``.  ``gated_mlp`` is True for
    SwiGLU/GeGLU blocks (three FFN matrices), ``norm`` is ``"rmsnorm"`` or
    ``"layernorm"``.  ``softmax_fp32`` records whether the eager attention
    computes its softmax in fp32 (HF Llama-family does).  ``dropout`` /
    ``attn_dropout`` are the training-time probabilities from the config.
    """

    name: str
    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool = True
    norm: str = "rmsnorm"
    max_positions: int = 2048
    head_dim: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    learned_positions: int = 0
    parallel_attn: bool = False
    norms_per_layer: int = 2
    fused_qkv: bool = False
    word_embed_proj_dim: int = 0
    final_norm: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    softmax_fp32: bool = True
    activation: str = "silu"
    approximate: bool = False
    source: str = "preset"

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden // max(self.heads, 1))
        for fname in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "head_dim"):
            if getattr(self, fname) <= 0:
                raise ValueError(f"model {self.name!r}: {fname} must be positive")
        if self.heads % self.kv_heads:
            raise ValueError(f"model {self.name!r}: heads ({self.heads}) not a multiple of kv_heads ({self.kv_heads})")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"model {self.name!r}: norm must be rmsnorm or layernorm")

    # ------------------------------------------------------------ inventory
    @property
    def q_dim(self) -> int:
        """Width of the query projection output: heads · head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projections: kv_heads · head_dim."""
        return self.kv_heads * self.head_dim

    def modules(self) -> tuple[ModuleParams, ...]:
        """Every parameter-holding module kind with its own parameter count."""
        builder = _BUILDERS.get(self.family, _llama_modules)
        return builder(self)

    @property
    def n_params(self) -> int:
        """Exact parameter count: Σ numel·count over non-shared modules."""
        return sum(m.numel * m.count for m in self.modules() if not m.shared)

    @property
    def largest_layer_params(self) -> int:
        """DeepSpeed's largest layer: max over modules of their own params."""
        return max(m.numel for m in self.modules())

    def persistent_params(self, threshold: int) -> int:
        """Parameters ZeRO-3 never partitions: every tensor with numel ≤
        ``stage3_param_persistence_threshold`` (DeepSpeed tests ``numel`` of
        each parameter, so a linear's bias and weight are judged separately)."""
        total = 0
        for m in self.modules():
            if m.shared:
                continue
            for t in _tensors(m):
                if t <= threshold:
                    total += t * m.count
        return total

    def linear_modules(self) -> tuple[ModuleParams, ...]:
        return tuple(m for m in self.modules() if m.in_features and m.role not in ("embed", "pos_embed"))

    def describe(self) -> str:
        kv = f", {self.kv_heads} kv heads" if self.kv_heads != self.heads else ""
        return (f"{self.name}: {self.n_params / 1e9:.2f}B params, {self.layers} layers, hidden {self.hidden}, "
                f"{self.heads} heads{kv}, ffn {self.intermediate}{' (gated)' if self.gated_mlp else ''}, "
                f"vocab {self.vocab}{', tied' if self.tied_embeddings else ''}")


def _tensors(m: ModuleParams) -> tuple[int, ...]:
    """The individual parameter tensors of a module (weight, bias; LayerNorm's
    weight and bias are each half of its numel)."""
    if m.bias:
        return (m.numel - m.bias, m.bias)
    return (m.numel,)


def _linear(name: str, role: str, fan_in: int, fan_out: int, count: int, bias: bool) -> ModuleParams:
    b = fan_out if bias else 0
    return ModuleParams(name, role, fan_in * fan_out + b, count, in_features=fan_in, out_features=fan_out, bias=b)


def _norm(name: str, width: int, count: int, with_bias: bool) -> ModuleParams:
    return ModuleParams(name, "norm", width * (2 if with_bias else 1), count, bias=width if with_bias else 0)


# ------------------------------------------------------------------ family builders


def _llama_modules(s: ModelSpec) -> tuple[ModuleParams, ...]:
    """HF LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM / Qwen3 / Gemma:
    embed V·h; per layer q (h·a·d), k and v (h·kv·d each), o (a·d·h), optional
    q/k/v biases (Qwen2), q_norm/k_norm of head_dim (Qwen3), gate/up (h·i each),
    down (i·h), two RMSNorm (h each); final RMSNorm h; lm_head V·h unless tied."""
    h, L, i = s.hidden, s.layers, s.intermediate
    mods = [
        ModuleParams("embed_tokens", "embed", s.vocab * h, 1, in_features=s.vocab, out_features=h),
        _linear("q_proj", "q", h, s.q_dim, L, s.qkv_bias),
        _linear("k_proj", "k", h, s.kv_dim, L, s.qkv_bias),
        _linear("v_proj", "v", h, s.kv_dim, L, s.qkv_bias),
        _linear("o_proj", "o", s.q_dim, h, L, s.o_bias),
    ]
    if s.qk_norm:
        mods += [_norm("q_norm", s.head_dim, L, False), _norm("k_norm", s.head_dim, L, False)]
    mods += [
        _linear("gate_proj", "gate", h, i, L, s.mlp_bias),
        _linear("up_proj", "up", h, i, L, s.mlp_bias),
        _linear("down_proj", "down", i, h, L, s.mlp_bias),
        _norm("input_layernorm", h, L, False),
        _norm("post_attention_layernorm", h, L, False),
    ]
    if s.norms_per_layer > 2:  # Gemma-2/3: pre/post feed-forward norms
        mods.append(_norm("extra_layernorms", h, L * (s.norms_per_layer - 2), False))
    mods.append(_norm("norm", h, 1, False))
    mods.append(_lm_head(s))
    return tuple(mods)


def _lm_head(s: ModelSpec) -> ModuleParams:
    width = s.word_embed_proj_dim or s.hidden
    return ModuleParams("lm_head", "lm_head", s.vocab * width, 1, shared=s.tied_embeddings,
                        in_features=width, out_features=s.vocab)


def _neox_modules(s: ModelSpec) -> tuple[ModuleParams, ...]:
    """HF GPTNeoXForCausalLM: embed_in V·h; per layer two LayerNorms (2h each),
    query_key_value h·3h (+3h bias), dense h·h (+h), dense_h_to_4h h·i (+i),
    dense_4h_to_h i·h (+h); final LayerNorm 2h; embed_out V·h unless tied."""
    h, L, i = s.hidden, s.layers, s.intermediate
    return (
        ModuleParams("embed_in", "embed", s.vocab * h, 1, in_features=s.vocab, out_features=h),
        _norm("input_layernorm", h, L, True),
        _norm("post_attention_layernorm", h, L, True),
        _linear("query_key_value", "qkv", h, s.q_dim + 2 * s.kv_dim, L, s.qkv_bias),
        _linear("dense", "o", s.q_dim, h, L, s.o_bias),
        _linear("dense_h_to_4h", "fc1", h, i, L, s.mlp_bias),
        _linear("dense_4h_to_h", "fc2", i, h, L, s.mlp_bias),
        _norm("final_layer_norm", h, 1, True),
        _lm_head(s),
    )


def _gpt2_modules(s: ModelSpec) -> tuple[ModuleParams, ...]:
    """HF GPT2LMHeadModel: wte V·h, wpe P·h; per layer ln_1 2h, c_attn h·3h+3h,
    c_proj h·h+h, ln_2 2h, c_fc h·i+i, c_proj i·h+h; ln_f 2h; lm_head tied."""
    h, L, i = s.hidden, s.layers, s.intermediate
    return (
        ModuleParams("wte", "embed", s.vocab * h, 1, in_features=s.vocab, out_features=h),
        ModuleParams("wpe", "pos_embed", s.learned_positions * h, 1),
        _norm("ln_1", h, L, True),
        _linear("c_attn", "qkv", h, 3 * h, L, True),
        _linear("attn.c_proj", "o", h, h, L, True),
        _norm("ln_2", h, L, True),
        _linear("c_fc", "fc1", h, i, L, True),
        _linear("mlp.c_proj", "fc2", i, h, L, True),
        _norm("ln_f", h, 1, True),
        _lm_head(s),
    )


def _opt_modules(s: ModelSpec) -> tuple[ModuleParams, ...]:
    """HF OPTForCausalLM: embed_tokens V·p (p = word_embed_proj_dim), learned
    positions (max_pos+2)·h, project_in/out p·h when p≠h; per layer q,k,v,out
    h·h+h, two LayerNorms 2h, fc1 h·f+f, fc2 f·h+h; final LayerNorm 2h when
    do_layer_norm_before; lm_head tied."""
    h, L, f = s.hidden, s.layers, s.intermediate
    p = s.word_embed_proj_dim or h
    mods = [
        ModuleParams("embed_tokens", "embed", s.vocab * p, 1, in_features=s.vocab, out_features=p),
        ModuleParams("embed_positions", "pos_embed", s.learned_positions * h, 1),
    ]
    if p != h:
        mods += [_linear("project_in", "proj", p, h, 1, False), _linear("project_out", "proj", h, p, 1, False)]
    mods += [
        _linear("q_proj", "q", h, h, L, s.qkv_bias),
        _linear("k_proj", "k", h, h, L, s.qkv_bias),
        _linear("v_proj", "v", h, h, L, s.qkv_bias),
        _linear("out_proj", "o", h, h, L, s.o_bias),
        _norm("self_attn_layer_norm", h, L, True),
        _linear("fc1", "fc1", h, f, L, s.mlp_bias),
        _linear("fc2", "fc2", f, h, L, s.mlp_bias),
        _norm("final_layer_norm", h, L, True),
    ]
    if s.final_norm:
        mods.append(_norm("decoder.final_layer_norm", h, 1, True))
    mods.append(_lm_head(s))
    return tuple(mods)


def _falcon_modules(s: ModelSpec) -> tuple[ModuleParams, ...]:
    """HF FalconForCausalLM: word_embeddings V·h; per layer query_key_value
    h·(a + 2·kv)·d, dense h·h, dense_h_to_4h h·i, dense_4h_to_h i·h (biases
    when ``bias``), LayerNorms (1 for the 7B parallel layout, 2 for
    new_decoder_architecture or sequential layout) 2h each; ln_f 2h; lm_head tied."""
    h, L, i = s.hidden, s.layers, s.intermediate
    return (
        ModuleParams("word_embeddings", "embed", s.vocab * h, 1, in_features=s.vocab, out_features=h),
        _linear("query_key_value", "qkv", h, s.q_dim + 2 * s.kv_dim, L, s.qkv_bias),
        _linear("dense", "o", s.q_dim, h, L, s.o_bias),
        _linear("dense_h_to_4h", "fc1", h, i, L, s.mlp_bias),
        _linear("dense_4h_to_h", "fc2", i, h, L, s.mlp_bias),
        _norm("layernorms", h, L * s.norms_per_layer, True),
        _norm("ln_f", h, 1, True),
        _lm_head(s),
    )


_BUILDERS = {
    "llama": _llama_modules,
    "gpt_neox": _neox_modules,
    "gpt2": _gpt2_modules,
    "opt": _opt_modules,
    "falcon": _falcon_modules,
}

# ------------------------------------------------------------ config.json → spec

_LLAMA_TYPES = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2", "granite",
                "phi3", "internlm2", "yi", "deepseek", "baichuan", "aquila"}


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def _req_int(cfg: Mapping[str, Any], name: str, *keys: str) -> int:
    v = _get(cfg, *keys)
    if v is None:
        raise InputError(f"config for {name!r} has none of {', '.join(keys)}")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise InputError(f"config for {name!r}: {keys[0]} is not an integer: {v!r}") from None


def spec_from_hf_config(cfg: Mapping[str, Any], name: str = "config.json", source: str = "config") -> ModelSpec:
    """Build a ``ModelSpec`` from a HuggingFace ``config.json`` dict.

    Multimodal configs are read through their ``text_config``.  Raises
    ``InputError`` (exit 3) when the keys needed are missing.
    """
    if "text_config" in cfg and "hidden_size" not in cfg and isinstance(cfg["text_config"], Mapping):
        cfg = cfg["text_config"]
    mtype = str(cfg.get("model_type", "")).lower()
    if mtype in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx"):
        raise InputError(f"{name}: mixture-of-experts model_type {mtype!r} is not supported by the estimator")
    if mtype == "gpt2":
        return _gpt2_spec(cfg, name, source)
    if mtype == "gpt_neox":
        return _neox_spec(cfg, name, source)
    if mtype == "opt":
        return _opt_spec(cfg, name, source)
    if mtype in ("falcon", "refinedweb", "refinedwebmodel"):
        return _falcon_spec(cfg, name, source)
    return _llama_spec(cfg, name, source, approximate=mtype not in _LLAMA_TYPES)


def _llama_spec(cfg: Mapping[str, Any], name: str, source: str, approximate: bool) -> ModelSpec:
    mtype = str(cfg.get("model_type", "")).lower()
    h = _req_int(cfg, name, "hidden_size", "d_model", "n_embd")
    heads = _req_int(cfg, name, "num_attention_heads", "n_head")
    kv = int(_get(cfg, "num_key_value_heads", "num_kv_heads", default=heads))
    qkv_bias = bool(_get(cfg, "attention_bias", default=False)) or mtype == "qwen2"
    gemma = mtype.startswith("gemma")
    return ModelSpec(
        name=name,
        family="llama",
        hidden=h,
        layers=_req_int(cfg, name, "num_hidden_layers", "n_layer", "num_layers"),
        heads=heads,
        kv_heads=kv,
        intermediate=_req_int(cfg, name, "intermediate_size", "ffn_dim", "n_inner"),
        vocab=_req_int(cfg, name, "vocab_size"),
        tied_embeddings=bool(_get(cfg, "tie_word_embeddings", default=gemma)),
        gated_mlp=True,
        norm="rmsnorm",
        max_positions=int(_get(cfg, "max_position_embeddings", default=2048)),
        head_dim=int(_get(cfg, "head_dim", default=0) or 0),
        qkv_bias=qkv_bias,
        o_bias=bool(_get(cfg, "attention_bias", default=False)),
        mlp_bias=bool(_get(cfg, "mlp_bias", default=False)),
        qk_norm=mtype == "qwen3" or mtype.startswith("gemma3"),
        norms_per_layer=4 if mtype in ("gemma2", "gemma3_text") else 2,
        dropout=float(_get(cfg, "hidden_dropout", default=0.0) or 0.0),
        attn_dropout=float(_get(cfg, "attention_dropout", default=0.0) or 0.0),
        softmax_fp32=True,
        activation=str(_get(cfg, "hidden_act", "hidden_activation", default="silu")),
        approximate=approximate,
        source=source,
    )


def _gpt2_spec(cfg: Mapping[str, Any], name: str, source: str) -> ModelSpec:
    h = _req_int(cfg, name, "n_embd", "hidden_size")
    return ModelSpec(
        name=name, family="gpt2", hidden=h,
        layers=_req_int(cfg, name, "n_layer", "num_hidden_layers"),
        heads=_req_int(cfg, name, "n_head", "num_attention_heads"),
        kv_heads=_req_int(cfg, name, "n_head", "num_attention_heads"),
        intermediate=int(_get(cfg, "n_inner", default=4 * h) or 4 * h),
        vocab=_req_int(cfg, name, "vocab_size"),
        tied_embeddings=bool(_get(cfg, "tie_word_embeddings", default=True)),
        gated_mlp=False, norm="layernorm",
        max_positions=int(_get(cfg, "n_positions", "n_ctx", default=1024)),
        learned_positions=int(_get(cfg, "n_positions", "n_ctx", default=1024)),
        qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
        dropout=float(_get(cfg, "resid_pdrop", default=0.1)),
        attn_dropout=float(_get(cfg, "attn_pdrop", default=0.1)),
        softmax_fp32=False, activation=str(_get(cfg, "activation_function", default="gelu_new")),
        source=source,
    )


def _neox_spec(cfg: Mapping[str, Any], name: str, source: str) -> ModelSpec:
    h = _req_int(cfg, name, "hidden_size")
    heads = _req_int(cfg, name, "num_attention_heads")
    return ModelSpec(
        name=name, family="gpt_neox", hidden=h,
        layers=_req_int(cfg, name, "num_hidden_layers"), heads=heads, kv_heads=heads,
        intermediate=int(_get(cfg, "intermediate_size", default=4 * h)),
        vocab=_req_int(cfg, name, "vocab_size"),
        tied_embeddings=bool(_get(cfg, "tie_word_embeddings", default=False)),
        gated_mlp=False, norm="layernorm",
        max_positions=int(_get(cfg, "max_position_embeddings", default=2048)),
        qkv_bias=bool(_get(cfg, "attention_bias", default=True)),
        o_bias=bool(_get(cfg, "attention_bias", default=True)), mlp_bias=True, fused_qkv=True,
        parallel_attn=bool(_get(cfg, "use_parallel_residual", default=True)),
        dropout=float(_get(cfg, "hidden_dropout", default=0.0) or 0.0),
        attn_dropout=float(_get(cfg, "attention_dropout", default=0.0) or 0.0),
        softmax_fp32=True, activation=str(_get(cfg, "hidden_act", default="gelu")),
        source=source,
    )


def _opt_spec(cfg: Mapping[str, Any], name: str, source: str) -> ModelSpec:
    h = _req_int(cfg, name, "hidden_size")
    heads = _req_int(cfg, name, "num_attention_heads")
    maxpos = int(_get(cfg, "max_position_embeddings", default=2048))
    bias = bool(_get(cfg, "enable_bias", default=True))
    return ModelSpec(
        name=name, family="opt", hidden=h,
        layers=_req_int(cfg, name, "num_hidden_layers"), heads=heads, kv_heads=heads,
        intermediate=_req_int(cfg, name, "ffn_dim"),
        vocab=_req_int(cfg, name, "vocab_size"),
        tied_embeddings=bool(_get(cfg, "tie_word_embeddings", default=True)),
        gated_mlp=False, norm="layernorm", max_positions=maxpos,
        learned_positions=maxpos + 2,  # OPTLearnedPositionalEmbedding offset of 2
        qkv_bias=bias, o_bias=bias, mlp_bias=bias,
        word_embed_proj_dim=int(_get(cfg, "word_embed_proj_dim", default=h)),
        final_norm=bool(_get(cfg, "do_layer_norm_before", default=True))
        and not bool(_get(cfg, "_remove_final_layer_norm", default=False)),
        dropout=float(_get(cfg, "dropout", default=0.1)),
        attn_dropout=float(_get(cfg, "attention_dropout", default=0.0)),
        softmax_fp32=False, activation=str(_get(cfg, "activation_function", default="relu")),
        source=source,
    )


def _falcon_spec(cfg: Mapping[str, Any], name: str, source: str) -> ModelSpec:
    h = _req_int(cfg, name, "hidden_size", "n_embed")
    heads = _req_int(cfg, name, "num_attention_heads", "n_head")
    new_arch = bool(_get(cfg, "new_decoder_architecture", default=False))
    if new_arch:
        kv = int(_get(cfg, "num_kv_heads", "n_head_kv", default=heads))
    elif bool(_get(cfg, "multi_query", default=True)):
        kv = 1
    else:
        kv = heads
    parallel = bool(_get(cfg, "parallel_attn", default=True))
    if new_arch:  # ln_attn + ln_mlp, or one input_layernorm when num_ln_in_parallel_attn == 1
        n_ln = int(_get(cfg, "num_ln_in_parallel_attn", default=2))
    else:  # 7B layout: one input_layernorm feeding both branches; sequential: two
        n_ln = 1 if parallel else 2
    ffn = int(_get(cfg, "ffn_hidden_size", default=4 * h) or 4 * h)
    bias = bool(_get(cfg, "bias", default=False))
    return ModelSpec(
        name=name, family="falcon", hidden=h,
        layers=_req_int(cfg, name, "num_hidden_layers", "n_layer"), heads=heads, kv_heads=kv,
        intermediate=ffn, vocab=_req_int(cfg, name, "vocab_size"),
        tied_embeddings=bool(_get(cfg, "tie_word_embeddings", default=True)),
        gated_mlp=False, norm="layernorm",
        max_positions=int(_get(cfg, "max_position_embeddings", default=2048)),
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, fused_qkv=True,
        parallel_attn=parallel, norms_per_layer=n_ln,
        dropout=float(_get(cfg, "hidden_dropout", default=0.0) or 0.0),
        attn_dropout=float(_get(cfg, "attention_dropout", default=0.0) or 0.0),
        softmax_fp32=False, activation="gelu", source=source,
    )


# ----------------------------------------------------------------------- presets
# The published config.json of each checkpoint (the keys that shape the model).

_PRESET_CONFIGS: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-2-7b-hf
    "llama2-7b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                  "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
                  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
                  "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "vocab_size": 32000,
                  "torch_dtype": "float16"},
    # meta-llama/Llama-2-13b-hf
    "llama2-13b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                   "hidden_size": 5120, "intermediate_size": 13824, "max_position_embeddings": 4096,
                   "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 40,
                   "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "vocab_size": 32000,
                   "torch_dtype": "float16"},
    # meta-llama/Llama-2-70b-hf
    "llama2-70b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                   "hidden_size": 8192, "intermediate_size": 28672, "max_position_embeddings": 4096,
                   "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
                   "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "vocab_size": 32000,
                   "torch_dtype": "float16"},
    # meta-llama/Meta-Llama-3-8B
    "llama3-8b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
                  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
                  "vocab_size": 128256, "torch_dtype": "bfloat16"},
    # meta-llama/Llama-3.2-1B
    "llama3.2-1b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                    "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
                    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
                    "head_dim": 64, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
                    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                    "tie_word_embeddings": True, "vocab_size": 128256, "torch_dtype": "bfloat16"},
    # meta-llama/Llama-3.2-3B
    "llama3.2-3b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                    "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 131072,
                    "num_attention_heads": 24, "num_hidden_layers": 28, "num_key_value_heads": 8,
                    "head_dim": 128, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
                    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                    "tie_word_embeddings": True, "vocab_size": 128256, "torch_dtype": "bfloat16"},
    # Qwen/Qwen2.5-0.5B
    "qwen2.5-0.5b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                     "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768,
                     "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
                     "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
                     "use_sliding_window": False, "max_window_layers": 24, "attention_dropout": 0.0,
                     "tie_word_embeddings": True, "vocab_size": 151936, "torch_dtype": "bfloat16"},
    # Qwen/Qwen2.5-1.5B
    "qwen2.5-1.5b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                     "hidden_size": 1536, "intermediate_size": 8960, "max_position_embeddings": 131072,
                     "num_attention_heads": 12, "num_hidden_layers": 28, "num_key_value_heads": 2,
                     "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
                     "use_sliding_window": False, "max_window_layers": 28, "attention_dropout": 0.0,
                     "tie_word_embeddings": True, "vocab_size": 151936, "torch_dtype": "bfloat16"},
    # Qwen/Qwen2.5-3B
    "qwen2.5-3b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                   "hidden_size": 2048, "intermediate_size": 11008, "max_position_embeddings": 32768,
                   "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 2,
                   "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
                   "use_sliding_window": False, "max_window_layers": 36, "attention_dropout": 0.0,
                   "tie_word_embeddings": True, "vocab_size": 151936, "torch_dtype": "bfloat16"},
    # Qwen/Qwen2.5-7B
    "qwen2.5-7b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                   "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 131072,
                   "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
                   "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
                   "use_sliding_window": False, "max_window_layers": 28, "attention_dropout": 0.0,
                   "tie_word_embeddings": False, "vocab_size": 152064, "torch_dtype": "bfloat16"},
    # openai-community/gpt2-medium, gpt2-large, gpt2-xl (n_inner null: 4 x n_embd; tied embeddings)
    "gpt2-medium": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
                    "n_embd": 1024, "n_layer": 24, "n_head": 16, "n_ctx": 1024, "n_positions": 1024,
                    "vocab_size": 50257, "resid_pdrop": 0.1, "attn_pdrop": 0.1},
    "gpt2-large": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
                   "n_embd": 1280, "n_layer": 36, "n_head": 20, "n_ctx": 1024, "n_positions": 1024,
                   "vocab_size": 50257, "resid_pdrop": 0.1, "attn_pdrop": 0.1},
    "gpt2-xl": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
                "n_embd": 1600, "n_layer": 48, "n_head": 25, "n_ctx": 1024, "n_positions": 1024,
                "vocab_size": 50257, "resid_pdrop": 0.1, "attn_pdrop": 0.1},
    # mistralai/Mistral-7B-v0.1
    "mistral-7b": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
                   "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
                   "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                   "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
                   "tie_word_embeddings": False, "vocab_size": 32000, "torch_dtype": "bfloat16"},
}

PRESET_ALIASES: dict[str, str] = {
    "7b": "llama2-7b", "13b": "llama2-13b", "70b": "llama2-70b", "8b": "llama3-8b",
    "llama-2-7b": "llama2-7b", "llama-2-13b": "llama2-13b", "llama-2-70b": "llama2-70b",
    "llama-3-8b": "llama3-8b", "llama3.1-8b": "llama3-8b", "llama-3.2-1b": "llama3.2-1b",
    "llama-3.2-3b": "llama3.2-3b", "mistral-7b-v0.1": "mistral-7b",
}

PRESETS: Mapping[str, Mapping[str, Any]] = _PRESET_CONFIGS

# Llama-shaped family members that a bare parameter count maps to (spec_from_param_count).
_COUNT_FAMILY = ("qwen2.5-0.5b", "llama3.2-1b", "llama3.2-3b", "llama2-7b", "llama3-8b", "llama2-13b", "llama2-70b")


def preset(name: str) -> ModelSpec:
    """The named preset (aliases such as ``7b`` accepted)."""
    key = PRESET_ALIASES.get(name.lower(), name.lower())
    if key not in _PRESET_CONFIGS:
        raise KeyError(name)
    return spec_from_hf_config(_PRESET_CONFIGS[key], name=key, source="preset")


_COUNT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_param_count(text: str) -> int | None:
    """'7B' → 7e9, '1.5b' → 1.5e9, '500M' → 5e8, '6738415616' → itself; None otherwise."""
    m = _COUNT_RE.match(text)
    if not m:
        return None
    return int(float(m.group(1)) * _SCALE[m.group(2).lower()])


def spec_from_param_count(n: int | float | str) -> ModelSpec:
    """The Llama-shaped family member whose parameter count is nearest to ``n``
    in log space (7e9 → Llama-2-7B, 8e9 → Llama-3-8B, 1e9 → Llama-3.2-1B …),
    for a log that only says "7B" or prints a parameter count.  The returned
    spec's ``source`` records that it stands in for a bare count."""
    count = parse_param_count(n) if isinstance(n, str) else int(n)
    if not count or count <= 0:
        raise ValueError(f"not a parameter count: {n!r}")
    # an exact published model first (a log that prints 1,543,714,304 is Qwen2.5-1.5B)
    for key in _PRESET_CONFIGS:
        spec = preset(key)
        if abs(spec.n_params - count) <= 0.002 * count:
            return replace(spec, source=f"preset {key} (same parameter count as the log's {count:,})")
    best = min(_COUNT_FAMILY, key=lambda k: abs(math.log(preset(k).n_params / count)))
    spec = preset(best)
    # scale the depth so the count matches: model states depend on the count, activations on the shape
    embed = spec.vocab * spec.hidden * (1 if spec.tied_embeddings else 2)
    per_layer = max(1, (spec.n_params - embed) // spec.layers)
    layers = max(1, round((count - embed) / per_layer))
    scaled = replace(spec, layers=layers, approximate=True,
                     source=f"{best} shape with {layers} layers, standing in for {count:,} params")
    if not 0.75 <= scaled.n_params / count <= 1.33:
        # fewer parameters than the family's embedding table alone (a CNN, a small encoder): no language-model
        # shape stands in for it, and activations from a borrowed shape would be fiction
        raise ValueError(f"{count:,} parameters: too few for a language-model shape ({best}'s embedding alone "
                         f"holds {embed:,})")
    return scaled


def load_model_spec(arg: str) -> ModelSpec:
    """``arg`` is a path to a HF ``config.json`` (or a directory holding one),
    a preset name (``llama2-7b``, ``7b``, ``qwen2.5-0.5b`` …), or a bare
    parameter count (``34B``).  Unreadable files raise ``InputError`` (exit 3);
    anything else that is not understood raises ``ValueError``."""
    path = Path(arg).expanduser()
    looks_like_path = arg.endswith(".json") or "/" in arg or "\\" in arg or path.exists()
    if looks_like_path:
        return _load_config_file(path)
    try:
        return preset(arg)
    except KeyError:
        pass
    if parse_param_count(arg):
        return spec_from_param_count(arg)
    names = ", ".join(sorted(_PRESET_CONFIGS) + sorted(PRESET_ALIASES))
    raise ValueError(f"unknown model {arg!r}: not a config.json, a preset ({names}) or a parameter count")


def _load_config_file(path: Path) -> ModelSpec:
    if path.is_dir():
        path = path / "config.json"
    cfg = load_json_object(path, "model config")
    return spec_from_hf_config(cfg, name=str(cfg.get("_name_or_path") or path.parent.name or path.name),
                               source=str(path))
