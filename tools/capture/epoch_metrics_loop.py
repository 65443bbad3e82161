#!/usr/bin/env python
"""A notebook-style causal-LM fine-tuning loop that computes a training
token accuracy at the end of every epoch, for which it keeps each step's
``outputs.logits`` (and labels) in a list -- on the GPU, as they come out of
the model.  It prints ``torch.cuda.memory_allocated()`` every iteration the
way people do (``print(f"epoch {e} iter {i} ... mem {...:.2f}GB")``).

    python epoch_metrics_loop.py --model llama3.2-1b --batch_size 4 --seq_len 1024 --keep gpu

``--keep argmax_cpu`` keeps ``outputs.logits.argmax(-1).detach().cpu()``
instead (the usual fix).  Options that only stage a scenario say "scenario:"
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
    p.add_argument("--model", default="llama3.2-1b")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=1024)
    p.add_argument("--num_samples", type=int, default=480, help="training sequences per epoch")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--keep", default="gpu", choices=["gpu", "argmax_cpu"],
                   help="what is kept per step for the epoch's accuracy: gpu (outputs.logits as they are) or "
                        "argmax_cpu (outputs.logits.argmax(-1).detach().cpu())")
    add_scenario_args(p, max_entries=15000)
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from models import hf_config

    allowed = start_scenario(args)
    torch.manual_seed(args.seed)
    device = "cuda"
    cfg = hf_config(args.model)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg)
    model.train()
    print(f"{args.model}: {sum(q.numel() for q in model.parameters()) / 1e6:.0f}M params, fp32 weights, "
          f"bf16 autocast, batch {args.batch_size} x {args.seq_len}", flush=True)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return args.num_samples

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(args.seed * 100000 + i)
            return torch.randint(0, cfg.vocab_size, (args.seq_len,), generator=g)

    loader = torch.utils.data.DataLoader(Tokens(), batch_size=args.batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    t0 = time.time()
    steps = 0
    for epoch in range(args.epochs):
        all_logits, all_labels = [], []
        for i, input_ids in enumerate(loader):
            input_ids = input_ids.to(device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                outputs = model(input_ids=input_ids, labels=input_ids)
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            # keep predictions for the epoch's accuracy
            if args.keep == "gpu":
                all_logits.append(outputs.logits)
                all_labels.append(input_ids)
            else:
                all_logits.append(outputs.logits.argmax(-1).detach().cpu())
                all_labels.append(input_ids.cpu())
            print(f"epoch {epoch} iter {i} loss {loss.item():.4f} mem {torch.cuda.memory_allocated() / 1e9:.2f}GB",
                  flush=True)
        correct = total = 0
        for logits, labels in zip(all_logits, all_labels):
            preds = logits.argmax(-1) if logits.dim() == 3 else logits
            correct += (preds[:, :-1] == labels[:, 1:]).sum().item()
            total += labels[:, 1:].numel()
        print(f"epoch {epoch} done: train token accuracy {correct / total:.4f}", flush=True)
    print(f"training finished: {steps} steps in {time.time() - t0:.0f}s, "
          f"max_memory_allocated {torch.cuda.max_memory_allocated() / 1e9:.2f}GB", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, steps, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
