#!/usr/bin/env python
"""Batch inference with a ViT image encoder the way feature-extraction
scripts are written: no training at all, ``torch.no_grad()``, batch after
batch, each batch's output appended to a list for later use.

    python inference_keep.py --batches 400 --batch_size 64 --keep features     # every batch's features on the GPU
    python inference_keep.py --batches 400 --batch_size 64 --keep cpu          # ... moved to the host
    python inference_keep.py --batches 1 --batch_size 2048 --hidden_states     # one batch, every layer's output
    python inference_keep.py --arch resnet50 --batches 600 --keep features     # a CNN backbone's feature maps

``--hidden_states`` asks the model for every layer's hidden states
(``output_hidden_states=True``), as probing scripts do, and keeps them.  Images
are random; the model is built from ViT-Base/16's published config, or (``--arch resnet50``) is torchvision's
ResNet-50 without its pooling and classifier, as feature-extraction scripts cut it.  Options
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
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--keep", choices=("features", "cpu", "none"), default="features")
    p.add_argument("--hidden_states", action="store_true")
    p.add_argument("--arch", choices=("vit-b16", "resnet50"), default="vit-b16")
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from transformers import ViTConfig, ViTModel

    allowed = start_scenario(args)
    torch.manual_seed(0)
    if args.arch == "resnet50":
        import torchvision

        net = torchvision.models.resnet50(weights=None)
        model = torch.nn.Sequential(*list(net.children())[:-2]).cuda().eval()
        name = "ResNet-50 backbone"
    else:
        cfg = ViTConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                        image_size=args.image_size, patch_size=16)
        model = ViTModel(cfg, add_pooling_layer=False).cuda().eval()
        name = "ViT-B/16 encoder"
    n = sum(q.numel() for q in model.parameters())
    print(f"{name}: {n / 1e6:.1f}M parameters; {args.batches} batches of {args.batch_size} images "
          f"{args.image_size}x{args.image_size}", flush=True)
    kept: list = []
    t0 = time.time()
    with torch.no_grad():
        for i in range(1, args.batches + 1):
            pixels = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device="cuda")
            if args.arch == "resnet50":
                feats = model(pixels)
            else:
                out = model(pixel_values=pixels, output_hidden_states=args.hidden_states)
                feats = out.last_hidden_state
            if args.hidden_states:
                kept.append(out.hidden_states)
            elif args.keep == "features":
                kept.append(feats)
            elif args.keep == "cpu":
                kept.append(feats.cpu())
            if i % 20 == 0 or i == args.batches:
                print(f"batch {i}/{args.batches} ({time.time() - t0:.1f}s)", flush=True)
    print(f"extracted {len(kept)} batches", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, args.batches, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
