#!/usr/bin/env python
"""A hand-written PyTorch training loop of the kind found in notebooks and
small repos: fp32 weights, fp16 autocast with a GradScaler, a held-out batch
whose loss is printed next to the training loss, and memory reported with
``torch.cuda.memory_allocated()`` in the loop's own print.

    python plain_loop.py --model gpt2 --batch_size 4 --seq_len 1024
    torchrun --nproc_per_node N plain_loop.py --ddp ...

It produced sample_logs/ captures (every line in their run.log was printed by
a real run of it on the GPU machine).  Options that only stage a scenario say
"scenario:" in their help.
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
    p = argparse.ArgumentParser(description="plain PyTorch causal-LM loop")
    p.add_argument("--model", default="gpt2")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=1024)
    p.add_argument("--val_batch_size", type=int, default=1)
    p.add_argument("--val_seq_len", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--ddp", action="store_true", help="wrap the model in DistributedDataParallel (torchrun)")
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--lora_r", type=int, default=None, help="train LoRA adapters of this rank (PEFT)")
    p.add_argument("--val_loss_no_grad", action="store_true",
                   help="compute the held-out loss under torch.no_grad() and keep it as a float (.item())")
    p.add_argument("--print_style", choices=("step", "bare"), default="step",
                   help="step: a progress line with the step number; bare: only the memory, no step number, "
                        "as notebook loops print it")
    p.add_argument("--emulate_card", default=None, help="scenario: cap memory like this card (cards.py)")
    p.add_argument("--memory_limit_gib", type=float, default=None, help="scenario: cap memory at this many GiB")
    p.add_argument("--oompost_capture", default=None, help="dir: dump a memory snapshot at the OOM")
    p.add_argument("--max_entries", type=int, default=15000)
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from cards import apply_limit
    from models import hf_config

    if args.oompost_capture:
        import oompost.record

        oompost.record.enable(args.oompost_capture, max_entries=args.max_entries)
    apply_limit(args.emulate_card, args.memory_limit_gib, print)
    rank = 0
    if args.ddp:
        import torch.distributed as dist

        dist.init_process_group("nccl")
        rank = dist.get_rank()
        print(f"rank {rank}/{dist.get_world_size()} initialised (LOCAL_RANK={os.environ.get('LOCAL_RANK')})",
              flush=True)
    device = "cuda"
    torch.manual_seed(0)
    cfg = hf_config(args.model)
    model = AutoModelForCausalLM.from_config(cfg).to(device)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.lora_r:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                                 task_type="CAUSAL_LM"))
    print(f"{args.model}: {sum(q.numel() for q in model.parameters()) / 1e6:.1f}M params", flush=True)
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=args.lr)
    scaler = torch.amp.GradScaler("cuda")
    vocab = cfg.vocab_size
    g = torch.Generator().manual_seed(1)
    val_ids = torch.randint(0, vocab, (args.val_batch_size, args.val_seq_len), generator=g).to(device)
    val_total = 0.0
    t0 = time.time()
    for step in range(1, args.steps + 1):
        ids = torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=g).to(device)
        model.train()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(input_ids=ids, labels=ids).loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        # held-out loss for the progress line
        model.eval()
        if args.val_loss_no_grad:
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                val_loss = model(input_ids=val_ids, labels=val_ids).loss
            val_total += val_loss.item()
        else:
            with torch.autocast("cuda", dtype=torch.float16):
                val_loss = model(input_ids=val_ids, labels=val_ids).loss
            val_total += val_loss
        if rank == 0 and args.print_style == "bare":
            print(f"allocated: {torch.cuda.memory_allocated() / 2**20:.2f} MB, "
                  f"reserved: {torch.cuda.memory_reserved() / 2**20:.2f} MB", flush=True)
        elif rank == 0:
            print(f"step {step} | loss {loss.item():.4f} | val_loss {val_loss.item():.4f} | "
                  f"avg val {float(val_total) / step:.4f} | "
                  f"memory_allocated: {torch.cuda.memory_allocated() / 1024**3:.2f} GB", flush=True)
    if rank == 0:
        print(f"done: {args.steps} steps in {time.time() - t0:.0f}s, "
              f"max_memory_allocated: {torch.cuda.max_memory_allocated() / 1024**3:.2f} GB", flush=True)
    if args.ddp:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
