#!/usr/bin/env python
"""An RL rollout worker: it loads the policy, pre-allocates a KV-cache pool
sized like vLLM's ``gpu_memory_utilization`` / sglang's ``--mem-fraction-static``
(a fraction of the card's total memory), then joins the trainer's process group
and receives the new weights by broadcast.

    torchrun --nproc_per_node 1 rollout_worker.py --mem_fraction_static 0.995

The process group is created lazily by torch: the NCCL communicator is built
at the first collective, i.e. after the pool has taken the card.
``--eager_nccl_init`` creates it up front (``init_process_group(device_id=...)``
plus a warm-up all_reduce) before the pool is sized.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
GiB = 1024**3


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--mem_fraction_static", type=float, default=0.9)
    p.add_argument("--eager_nccl_init", action="store_true")
    p.add_argument("--sync_rounds", type=int, default=20)
    args = p.parse_args()

    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from models import hf_config

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    if args.eager_nccl_init:
        dist.init_process_group("nccl", device_id=dev)
        dist.all_reduce(torch.zeros(1, device=dev))
    else:
        dist.init_process_group("nccl")
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} joined the weight-sync group", flush=True)
    with torch.device(dev):
        try:
            policy = AutoModelForCausalLM.from_config(hf_config(args.model), dtype=torch.bfloat16)
        except TypeError:
            policy = AutoModelForCausalLM.from_config(hf_config(args.model), torch_dtype=torch.bfloat16)
    n = sum(q.numel() for q in policy.parameters())
    print(f"policy {args.model}: {n:,} parameters on {torch.cuda.get_device_name(dev)}", flush=True)
    free, total = torch.cuda.mem_get_info(dev)
    used = total - free
    pool_bytes = int(args.mem_fraction_static * total) - used
    kv_pool = torch.empty(pool_bytes, dtype=torch.uint8, device=dev)
    free_after, _ = torch.cuda.mem_get_info(dev)
    print(f"KV cache pool: {pool_bytes / GiB:.2f} GiB (mem_fraction_static={args.mem_fraction_static}, "
          f"total {total / GiB:.2f} GiB); free after allocation: {free_after / 2**20:.0f} MiB", flush=True)
    for r in range(1, args.sync_rounds + 1):
        for param in policy.parameters():
            dist.broadcast(param.data, src=0)
        torch.cuda.synchronize()
        print(f"weight sync {r}/{args.sync_rounds} done", flush=True)
    del kv_pool
    dist.destroy_process_group()
    print("rollout worker finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
