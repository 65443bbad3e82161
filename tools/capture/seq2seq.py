#!/usr/bin/env python
"""A plain PyTorch seq2seq (T5) fine-tuning loop with dynamic padding: each
batch is padded to its own longest source and target, so the tensor shapes
change every step (summarisation-style data: sources 64-1024 tokens, targets
16-256).  A tqdm bar shows progress; every step also prints a line with the
batch shape and the allocator's numbers.

    python seq2seq.py --model t5-base --batch_size 8 --max_steps 30

It produced sample_logs/ captures (every line in their run.log was printed by
a real run of it on the GPU machine).  Options that only stage a scenario say
"scenario:" in their help.
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
    p.add_argument("--model", default="t5-base")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--min_source_len", type=int, default=64)
    p.add_argument("--max_source_len", type=int, default=1024)
    p.add_argument("--min_target_len", type=int, default=16)
    p.add_argument("--max_target_len", type=int, default=256)
    p.add_argument("--max_steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--attn_implementation", default="sdpa", choices=["eager", "sdpa"])
    p.add_argument("--long_source_step", type=int, default=None,
                   help="scenario: at this step one source document of --long_source_len tokens pads the batch")
    p.add_argument("--long_source_len", type=int, default=2048)
    p.add_argument("--max_source_length", type=int, default=None,
                   help="truncate sources to this many tokens (the tokenizer's max_length)")
    p.add_argument("--gradient_checkpointing", action="store_true")
    add_scenario_args(p, max_entries=30000)
    args = p.parse_args()

    import torch
    from tqdm import tqdm
    from transformers import AutoModelForSeq2SeqLM

    from models import from_config, hf_config

    allowed = start_scenario(args)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    cfg = hf_config(args.model, args.attn_implementation)
    model = from_config(AutoModelForSeq2SeqLM, cfg, torch.bfloat16)
    model.cuda().train()
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    print(f"{type(model).__name__} ({args.model}): {sum(q.numel() for q in model.parameters()):,} parameters, "
          f"bf16, attn_implementation={model.config._attn_implementation}, batch_size={args.batch_size}, "
          f"dynamic padding", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    t0 = time.time()
    bar = tqdm(range(1, args.max_steps + 1), desc="train", dynamic_ncols=False, ncols=100)
    for step in bar:
        s = max(rng.randint(args.min_source_len, args.max_source_len) for _ in range(args.batch_size))
        if args.long_source_step and step == args.long_source_step:
            s = args.long_source_len
        if args.max_source_length:
            s = min(s, args.max_source_length)
        t = max(rng.randint(args.min_target_len, args.max_target_len) for _ in range(args.batch_size))
        g = torch.Generator().manual_seed(args.seed * 1000 + step)
        src = torch.randint(2, cfg.vocab_size, (args.batch_size, s), generator=g).cuda()
        tgt = torch.randint(2, cfg.vocab_size, (args.batch_size, t), generator=g).cuda()
        loss = model(input_ids=src, labels=tgt).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}", src=s, tgt=t)
        tqdm.write(f"step {step} | loss {loss.item():.4f} | src {s} tgt {t} | "
                   f"allocated={torch.cuda.memory_allocated() / GiB:.2f}GiB "
                   f"reserved={torch.cuda.memory_reserved() / GiB:.2f}GiB "
                   f"max_reserved={torch.cuda.max_memory_reserved() / GiB:.2f}GiB")
    bar.close()
    print(f"training finished: {args.max_steps} steps in {time.time() - t0:.1f}s | "
          f"max_allocated={torch.cuda.max_memory_allocated() / GiB:.2f}GiB "
          f"max_reserved={torch.cuda.max_memory_reserved() / GiB:.2f}GiB", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, args.max_steps, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
