#!/usr/bin/env python
"""An image-classification loop whose DataLoader pins its batches
(``pin_memory=True``) with many workers and a deep prefetch queue, the way
"faster data loading" tips set it: every prefetched batch is copied into
page-locked host memory, which the kernel cannot swap and a container's
memory limit counts in full.

    python pinned_loader.py --num_workers 8 --prefetch_factor 8 --batch_size 64 --image_size 512

Images are random (decoding is not the point); the model is a small
convolutional network.  Options that only stage a scenario say "scenario:"
in their help.
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
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--image_size", type=int, default=512)
    p.add_argument("--num_images", type=int, default=4096)
    p.add_argument("--num_workers", type=int, default=8)
    p.add_argument("--prefetch_factor", type=int, default=8)
    p.add_argument("--pin_memory", default="true", choices=["true", "false"],
                   help="scenario: DataLoader(pin_memory=...)")
    p.add_argument("--max_steps", type=int, default=40)
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from torch import nn
    from tqdm import tqdm

    start_scenario(args)

    class RandomImages(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return args.num_images

        def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
            g = torch.Generator().manual_seed(i)
            return torch.rand(3, args.image_size, args.image_size, generator=g), i % 10

    pin = args.pin_memory == "true"
    loader = torch.utils.data.DataLoader(RandomImages(), batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.num_workers, pin_memory=pin,
                                         prefetch_factor=args.prefetch_factor if args.num_workers else None,
                                         persistent_workers=args.num_workers > 0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    per_batch = args.batch_size * 3 * args.image_size ** 2 * 4
    print(f"DataLoader: batch_size={args.batch_size}, num_workers={args.num_workers}, "
          f"prefetch_factor={args.prefetch_factor}, pin_memory={pin}; one batch is {per_batch / 2**20:.0f} MiB",
          flush=True)
    t0 = time.time()
    step = 0
    for images, labels in tqdm(loader, total=args.max_steps, desc="train"):
        images = images.cuda(non_blocking=pin)
        labels = labels.cuda(non_blocking=pin)
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step >= args.max_steps:
            break
    print(f"done: {step} steps in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
