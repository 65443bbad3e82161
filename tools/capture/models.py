"""Model shapes used by the capture scripts: the published HF configs of real
models (random weights: the GPU machine has no network, and memory does not
depend on the values).  Only the fields that shape memory are given; the rest
are the transformers defaults."""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, tie_word_embeddings=True, rms_norm_eps=1e-6,
                         rope_theta=1000000.0),
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, tie_word_embeddings=True, rms_norm_eps=1e-6,
                         rope_theta=1000000.0),
    "qwen2.5-3b": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                       max_position_embeddings=32768, tie_word_embeddings=True, rms_norm_eps=1e-6,
                       rope_theta=1000000.0),
    "llama3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                        max_position_embeddings=131072, tie_word_embeddings=True, rms_norm_eps=1e-5,
                        rope_theta=500000.0, head_dim=64),
    "llama2-7b": dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                      max_position_embeddings=4096, tie_word_embeddings=False, rms_norm_eps=1e-5),
    "llama2-13b": dict(model_type="llama", hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                       num_attention_heads=40, num_key_value_heads=40, vocab_size=32000,
                       max_position_embeddings=4096, tie_word_embeddings=False, rms_norm_eps=1e-5),
    # --- other architectures (issue 6 §6): published configs, random weights
    "mistral-7b": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                       max_position_embeddings=32768, tie_word_embeddings=False, rms_norm_eps=1e-5,
                       rope_theta=10000.0, sliding_window=4096),
    "gpt2": dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257),
    "pythia-410m": dict(model_type="gpt_neox", hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                        num_attention_heads=16, vocab_size=50304, max_position_embeddings=2048,
                        rotary_pct=0.25, use_parallel_residual=True, tie_word_embeddings=False,
                        layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=0),
    "t5-base": dict(model_type="t5", d_model=768, d_ff=3072, d_kv=64, num_layers=12, num_decoder_layers=12,
                    num_heads=12, vocab_size=32128, relative_attention_num_buckets=32, dropout_rate=0.1,
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
    "vit-base": dict(model_type="vit", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, image_size=224, patch_size=16, num_labels=1000),
    # --- held-out captures (tests/heldout_captures): published configs, random weights
    "bert-large": dict(model_type="bert", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                       intermediate_size=4096, vocab_size=30522, max_position_embeddings=512,
                       type_vocab_size=2),
    "opt-1.3b": dict(model_type="opt", hidden_size=2048, ffn_dim=8192, num_hidden_layers=24,
                     num_attention_heads=32, vocab_size=50272, max_position_embeddings=2048,
                     word_embed_proj_dim=2048, do_layer_norm_before=True, pad_token_id=1, bos_token_id=2,
                     eos_token_id=2),
    "phi3-mini": dict(model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
                      max_position_embeddings=4096, tie_word_embeddings=False, rms_norm_eps=1e-5,
                      rope_theta=10000.0, pad_token_id=32000, bos_token_id=1, eos_token_id=32000),
    # --- held-out captures, second set (2026-12-04): published configs, random weights
    "pythia-1.4b": dict(model_type="gpt_neox", hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                        num_attention_heads=16, vocab_size=50304, max_position_embeddings=2048,
                        rotary_pct=0.25, use_parallel_residual=True, tie_word_embeddings=False,
                        layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=0),
    "t5-large": dict(model_type="t5", d_model=1024, d_ff=4096, d_kv=64, num_layers=24, num_decoder_layers=24,
                     num_heads=16, vocab_size=32128, relative_attention_num_buckets=32, dropout_rate=0.1,
                     decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
    "vit-huge": dict(model_type="vit", hidden_size=1280, num_hidden_layers=32, num_attention_heads=16,
                     intermediate_size=5120, image_size=224, patch_size=14, num_labels=1000),
    "gpt2-large": dict(model_type="gpt2", n_embd=1280, n_layer=36, n_head=20, n_positions=1024, vocab_size=50257),
    "gpt2-medium": dict(model_type="gpt2", n_embd=1024, n_layer=24, n_head=16, n_positions=1024, vocab_size=50257),
    # --- held-out captures, third set (2026-12-04): published configs, random weights
    "opt-350m": dict(model_type="opt", hidden_size=1024, ffn_dim=4096, num_hidden_layers=24,
                     num_attention_heads=16, vocab_size=50272, max_position_embeddings=2048,
                     word_embed_proj_dim=512, do_layer_norm_before=False, pad_token_id=1, bos_token_id=2,
                     eos_token_id=2),
}


def hf_config(name: str, attn_implementation: str = "sdpa"):
    from transformers import AutoConfig

    spec = dict(PRESETS[name])
    model_type = spec.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **spec)
    cfg._attn_implementation = attn_implementation
    cfg.use_cache = False
    return cfg


def from_config(auto, cfg, dtype=None):
    """``auto.from_config(cfg)`` in ``dtype`` (None: the config's default), whichever name this transformers
    gives the argument: ``dtype`` (≥ 4.56) or ``torch_dtype`` (older)."""
    if dtype is None:
        return auto.from_config(cfg)
    try:
        return auto.from_config(cfg, dtype=dtype)
    except TypeError:
        return auto.from_config(cfg, torch_dtype=dtype)
