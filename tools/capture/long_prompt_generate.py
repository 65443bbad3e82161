#!/usr/bin/env python
"""Generation from one long prompt (a document to summarise, a long chat
history) with ``model.generate``, the way a quick inference script does it:
the prompt's prefill computes attention over every pair of its tokens at once.

    python long_prompt_generate.py --model qwen2.5-0.5b --prompt_tokens 32768 --attn_implementation eager

With ``--attn_implementation sdpa`` the attention scores are never
materialised (the fix).  The prompt is random token ids; the model is built
from its config.  Options that only stage a scenario say "scenario:" in their
help.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from loop_setup import add_scenario_args, start_scenario  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--prompt_tokens", type=int, default=32768)
    p.add_argument("--max_new_tokens", type=int, default=32)
    p.add_argument("--attn_implementation", default="eager", choices=["eager", "sdpa"])
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from models import from_config, hf_config

    start_scenario(args)
    cfg = hf_config(args.model, args.attn_implementation)
    cfg.use_cache = True
    cfg.max_position_embeddings = max(cfg.max_position_embeddings, args.prompt_tokens + args.max_new_tokens)
    with torch.device("cuda"):
        model = from_config(AutoModelForCausalLM, cfg, torch.bfloat16)
    model.eval()
    print(f"Loaded {args.model} (attn_implementation={model.config._attn_implementation})", flush=True)
    ids = torch.randint(5, cfg.vocab_size, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(0))
    print(f"Prompt length: {args.prompt_tokens} tokens", flush=True)
    t0 = time.time()
    with torch.no_grad():
        out = model.generate(ids.cuda(), attention_mask=torch.ones_like(ids).cuda(),
                             max_new_tokens=args.max_new_tokens, do_sample=False)
    print(f"Generated {out.shape[1] - args.prompt_tokens} tokens in {time.time() - t0:.1f}s, "
          f"max_allocated={torch.cuda.max_memory_allocated() / 2**30:.2f}GiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
