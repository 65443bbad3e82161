#!/usr/bin/env python
"""Data-parallel training where one rank stalls inside a GPU operation, so the
gradient all-reduce never completes and the NCCL watchdog times out.

One GPU cannot host two NCCL ranks, so the stall is staged on the single rank:
at ``--stall_at_step`` a long-running kernel (``torch.cuda._sleep``) is queued
before the all-reduce, exactly as a hung peer would keep it from finishing.

    torchrun --nproc_per_node 1 straggler.py --timeout_s 20
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--timeout_s", type=int, default=20)
    p.add_argument("--stall_at_step", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=args.timeout_s))
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(1, args.steps + 1):
        x = torch.randn(64, 4096, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        if step == args.stall_at_step:
            print(f"[scenario] step {step}: this rank is stuck in a long GPU operation", flush=True)
            torch.cuda._sleep(int(1.98e9 * 10 * args.timeout_s))
        for q in model.parameters():
            dist.all_reduce(q.grad)
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
