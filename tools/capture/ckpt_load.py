#!/usr/bin/env python
"""Resuming from a ``torch.save``'d state dict the way research code does it:
the model is built on the GPU, then ``model.load_state_dict(torch.load(path,
map_location="cpu"))`` reads the whole checkpoint into host RAM first.

    python ckpt_load.py --prepare DIR --model qwen2.5-1.5b          # writes DIR/ckpt.pt (outside any limit)
    python ckpt_load.py --load DIR --map_location cpu               # the run that resumes and trains

``--map_location cuda`` restores every tensor straight onto the GPU, one at a
time (the fix).  Options that only stage a scenario say "scenario:" in their
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
    p.add_argument("--model", default="qwen2.5-1.5b")
    p.add_argument("--prepare", default=None, help="scenario: write DIR/ckpt.pt (fp32 state dict) and exit")
    p.add_argument("--load", default=None, help="resume from DIR/ckpt.pt")
    p.add_argument("--map_location", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--seq_len", type=int, default=256)
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from models import from_config, hf_config

    cfg = hf_config(args.model)
    if args.prepare:
        os.makedirs(args.prepare, exist_ok=True)
        path = os.path.join(args.prepare, "ckpt.pt")
        if not os.path.exists(path):
            with torch.device("cuda"):
                model = from_config(AutoModelForCausalLM, cfg, torch.float32)
            torch.save(model.state_dict(), path)
        print(f"[capture] checkpoint {path}: {os.path.getsize(path) / 2**30:.2f} GiB", flush=True)
        return 0

    start_scenario(args)
    path = os.path.join(args.load, "ckpt.pt")
    with torch.device("cuda"):
        model = from_config(AutoModelForCausalLM, cfg, torch.float32)
    print(f"Model {args.model}: {sum(q.numel() for q in model.parameters()):,} parameters", flush=True)
    print(f"Resuming from checkpoint {path}", flush=True)
    state = torch.load(path, map_location=args.map_location)
    model.load_state_dict(state)
    del state
    print("Checkpoint loaded", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        ids = torch.randint(5, cfg.vocab_size, (args.batch_size, args.seq_len), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)
    print("training finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
