#!/usr/bin/env python
"""Image-classification fine-tune of a ViT with a DataLoader whose Dataset
caches every decoded image in a dict "so the next epoch is faster" -- in each
worker process, so every worker keeps its own growing copy in host RAM.

    python vit_cached_loader.py --num_workers 4 --batch_size 32 --max_steps 60

Images are synthetic (random full-resolution uint8 frames, decoded to float
and resized to 224x224 as an image pipeline would).  It produced sample_logs/
captures (every line in their run.log was printed by a real run of it on the
GPU machine).  Options that only stage a scenario say "scenario:" in their help.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="vit-base")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--num_workers", type=int, default=4)
    p.add_argument("--num_images", type=int, default=50000)
    p.add_argument("--source_resolution", type=int, default=768, help="side of the 'decoded' source frames")
    p.add_argument("--max_steps", type=int, default=60)
    p.add_argument("--no_cache", action="store_true", help="decode every time instead of caching decoded frames")
    p.add_argument("--emulate_card", default=None, help="scenario: cap memory like this card (cards.py)")
    p.add_argument("--oompost_capture", default=None, help="dir: dump a memory snapshot at the OOM")
    p.add_argument("--max_entries", type=int, default=15000)
    args = p.parse_args()

    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForImageClassification

    from cards import apply_limit
    from models import hf_config

    if args.oompost_capture:
        import oompost.record

        oompost.record.enable(args.oompost_capture, max_entries=args.max_entries)
    apply_limit(args.emulate_card, None, print)

    class Frames(torch.utils.data.Dataset):
        def __init__(self, n: int, side: int, cache: bool) -> None:
            self.n, self.side, self.cache = n, side, cache
            self._decoded: dict[int, torch.Tensor] = {}

        def __len__(self) -> int:
            return self.n

        def decode(self, i: int) -> torch.Tensor:
            g = torch.Generator().manual_seed(i)
            raw = torch.randint(0, 256, (3, self.side, self.side), dtype=torch.uint8, generator=g)
            return raw.float().div_(255.0)

        def __getitem__(self, i: int):
            if self.cache:
                img = self._decoded.get(i)
                if img is None:
                    img = self._decoded[i] = self.decode(i)
            else:
                img = self.decode(i)
            x = F.interpolate(img[None], size=(224, 224), mode="bilinear", align_corners=False)[0]
            return (x - 0.5) / 0.5, i % 1000

    ds = Frames(args.num_images, args.source_resolution, not args.no_cache)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
                                         pin_memory=True, persistent_workers=True, drop_last=True)
    cfg = hf_config(args.model)
    model = AutoModelForImageClassification.from_config(cfg).cuda().train()
    print(f"{type(model).__name__} ({args.model}): {sum(q.numel() for q in model.parameters()):,} parameters; "
          f"{len(ds)} images, batch_size={args.batch_size}, num_workers={args.num_workers}, "
          f"cache decoded frames={not args.no_cache}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t0 = time.time()
    step = 0
    while step < args.max_steps:
        for x, y in loader:
            step += 1
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(pixel_values=x, labels=y).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % 5 == 0:
                print(f"step {step}/{args.max_steps} loss {loss.item():.4f} "
                      f"({(time.time() - t0) / step:.2f}s/step, gpu mem {torch.cuda.memory_allocated() / 2**30:.2f} GiB)",
                      flush=True)
            if step >= args.max_steps:
                break
    print(f"training finished: {step} steps in {time.time() - t0:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
