#!/usr/bin/env python
"""An image classifier trained from scratch the way course notebooks and
small research repos write it: a VGG-style CNN, fp32, Adam, a print every few
iterations, and a validation batch's loss summed every few steps.

    python cnn_loop.py --batch_size 256 --image_size 224 --steps 50
    python cnn_loop.py --val_every 5 --val_loss tensor   # val_loss += criterion(...): no torch.no_grad(),
                                                          # every validation's graph stays alive

``--val_loss item`` runs validation under ``torch.no_grad()`` and sums
``loss.item()`` (the fix).  Images are random; options that only stage a
scenario say "scenario:" in their help.
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
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--min_image_size", type=int, default=None,
                   help="scenario: multi-scale training, each step's images a random multiple of 32 pixels in "
                        "[min_image_size, image_size]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--val_every", type=int, default=0, help="a validation batch every N steps (0: none)")
    p.add_argument("--val_loss", default="item", choices=["item", "tensor"],
                   help="scenario: under no_grad with .item(), or summed as a tensor without no_grad")
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from torch import nn

    start_scenario(args)
    torch.manual_seed(args.seed)
    sizes = torch.Generator().manual_seed(args.seed)

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.MaxPool2d(2))

    model = nn.Sequential(block(3, 64), block(64, 128), block(128, 256), block(256, 512), block(512, 512),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 100)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    n = sum(q.numel() for q in model.parameters())
    print(f"Model: VGG-style CNN, {n / 1e6:.1f}M parameters; batch size {args.batch_size}, "
          f"images {args.image_size}x{args.image_size}", flush=True)
    losses: list[float] = []
    val_loss = 0.0
    t0 = time.time()
    model.train()
    for it in range(1, args.steps + 1):
        side = args.image_size
        if args.min_image_size:
            side = 32 * int(torch.randint(args.min_image_size // 32, args.image_size // 32 + 1, (1,),
                                          generator=sizes))
        x = torch.randn(args.batch_size, 3, side, side, device="cuda")
        y = torch.randint(0, 100, (args.batch_size,), device="cuda")
        out = model(x)
        loss = loss_fn(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if args.val_every and it % args.val_every == 0:
            xv = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device="cuda")
            yv = torch.randint(0, 100, (args.batch_size,), device="cuda")
            if args.val_loss == "tensor":
                val_loss = val_loss + loss_fn(model(xv), yv)
            else:
                with torch.no_grad():
                    val_loss = val_loss + loss_fn(model(xv), yv).item()
            print(f"Validation after {it} iterations: loss {float(val_loss) / (it // args.val_every):.4f}",
                  flush=True)
        if it % 5 == 0:
            print(f"Epoch 1 [{it}/{args.steps}] loss: {loss.item():.4f} size {side} ({time.time() - t0:.1f}s)",
                  flush=True)
    print(f"Finished training: mean loss {sum(losses) / len(losses):.4f}", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, None, args.steps, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
