#!/usr/bin/env python
"""Contrastive image-text pre-training of a CLIP-shaped dual encoder
(ViT-B/16 vision tower, 12-layer text tower, ``CLIPModel(return_loss=True)``)
the way open_clip-style scripts write it: fp32 weights, bf16 autocast, AdamW,
a large global batch because contrastive learning wants many negatives.

    python clip_loop.py --batch_size 512 --steps 20

Images and captions are random; the model is built from its config.  Options
that only stage a scenario say "scenario:" in their help.
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
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from transformers import CLIPConfig, CLIPModel

    start_scenario(args)
    torch.manual_seed(0)
    cfg = CLIPConfig(
        text_config=dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
                         max_position_embeddings=77, vocab_size=49408),
        vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                           image_size=args.image_size, patch_size=16),
        projection_dim=512)
    model = CLIPModel(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.2)
    n = sum(q.numel() for q in model.parameters())
    print(f"CLIP ViT-B/16: {n / 1e6:.1f}M parameters; batch size {args.batch_size}, images "
          f"{args.image_size}x{args.image_size}, 77-token captions", flush=True)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        pixels = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device="cuda")
        text = torch.randint(1, 49407, (args.batch_size, 77), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=text, pixel_values=pixels, return_loss=True).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step}/{args.steps} contrastive loss {loss.item():.4f} ({time.time() - t0:.1f}s)",
              flush=True)
    print("Training finished", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, None, args.steps, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
