#!/usr/bin/env python
"""A causal-LM fine-tuning loop under PyTorch FSDP2 (``fully_shard``), as torchtitan-style recipes write it:
one ``fully_shard`` per decoder layer and one on the root, bf16 parameters in compute with fp32 gradient
reduction (``MixedPrecisionPolicy``), AdamW, launched with torchrun.  Each step prints the loss and the
allocator's numbers the way such recipes log them.

    torchrun --nproc_per_node 1 fsdp_loop.py --model qwen2.5-0.5b --batch_size 4 --seq_len 1024

On one GPU the world size is 1, so nothing is sharded: every rank holds the whole model, its gradients and
AdamW's two moments (16 bytes a parameter in fp32), as it would on N GPUs for a model N times larger.  Every
line a capture's run.log holds was printed by a real run of this script on the GPU machine.  Options that only
stage a scenario say "scenario:" in their help.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from loop_setup import add_scenario_args, start_scenario  # noqa: E402

GiB = 1024**3


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-0.5b", help="preset name (tools/capture/models.py)")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--long_doc_step", type=int, default=None,
                   help="scenario: at this step one document is --long_doc_len tokens (the batch is padded to it)")
    p.add_argument("--long_doc_len", type=int, default=8192)
    p.add_argument("--activation_checkpointing", "--gradient_checkpointing", dest="activation_checkpointing",
                   action="store_true", help="recompute each decoder layer in backward (HF gradient checkpointing)")
    add_scenario_args(p, max_entries=15000)
    args = p.parse_args()

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    from models import from_config, hf_config

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    allowed = start_scenario(args)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    cfg = hf_config(args.model)
    t_build = time.time()
    with torch.device("cuda"):
        model = from_config(AutoModelForCausalLM, cfg, torch.float32)
    nparams = sum(q.numel() for q in model.parameters())
    print(f"[rank{rank}] built {type(model).__name__} ({args.model}, {nparams / 1e9:.2f}B parameters, fp32) "
          f"in {time.time() - t_build:.1f}s", flush=True)
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layers = model.model.layers
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    print(f"[rank{rank}] applied FSDP2 (fully_shard) to {len(layers)} decoder layers and the root, "
          f"param_dtype=bfloat16 reduce_dtype=float32, world_size={dist.get_world_size()}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model.train()
    t0 = time.time()
    step = 0
    for step in range(1, args.steps + 1):
        g = torch.Generator().manual_seed(args.seed * 1000 + step)
        lens = [args.seq_len] * args.batch_size
        if args.long_doc_step and step == args.long_doc_step:
            lens[0] = args.long_doc_len
        s = max(lens)
        ids = torch.randint(5, cfg.vocab_size, (args.batch_size, s), generator=g)
        mask = torch.zeros(args.batch_size, s, dtype=torch.long)
        for i, n in enumerate(lens):
            mask[i, :n] = 1
        ids, mask = ids.cuda(), mask.cuda()
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        peak = torch.cuda.max_memory_reserved()
        total = torch.cuda.get_device_properties(local_rank).total_memory
        print(f"[rank{rank}] step: {step:2d}  loss: {loss.item():7.4f}  memory: {peak / GiB:5.2f}GiB"
              f"({100 * peak / total:.2f}%)  seq: {s}", flush=True)
    print(f"[rank{rank}] training done: {step} steps in {time.time() - t0:.0f}s, "
          f"max_memory_allocated: {torch.cuda.max_memory_allocated() / GiB:.2f} GB", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, step, t0)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
