#!/usr/bin/env python
"""A fine-tuning loop driven by HuggingFace Accelerate that samples
generations from the model every ``--sample_every`` steps to eyeball
progress (a common pattern: ``accelerator.unwrap_model(model).generate``
on a batch of held-out prompts, reusing the eval batch size).

    accelerate launch --num_processes 1 --mixed_precision bf16 gen_eval_accelerate.py --model pythia-410m

It produced sample_logs/ captures (every line in their run.log was printed by
a real run of it under ``accelerate launch`` on the GPU machine).  Options
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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="pythia-410m")
    p.add_argument("--train_batch_size", type=int, default=8)
    p.add_argument("--seq_len", type=int, default=512)
    p.add_argument("--max_steps", type=int, default=10)
    p.add_argument("--sample_every", type=int, default=5)
    p.add_argument("--eval_batch_size", type=int, default=32, help="prompts per generate() call")
    p.add_argument("--prompt_len", type=int, default=256)
    p.add_argument("--max_new_tokens", type=int, default=512)
    p.add_argument("--emulate_card", default=None, help="scenario: cap memory like this card (cards.py)")
    p.add_argument("--oompost_capture", default=None, help="dir: dump a memory snapshot at the OOM")
    p.add_argument("--max_entries", type=int, default=15000)
    args = p.parse_args()

    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM

    from cards import apply_limit
    from models import hf_config

    if args.oompost_capture:
        import oompost.record

        oompost.record.enable(args.oompost_capture, max_entries=args.max_entries)
    accelerator = Accelerator()
    apply_limit(args.emulate_card, None, accelerator.print)
    set_seed(42)
    cfg = hf_config(args.model)
    model = AutoModelForCausalLM.from_config(cfg)
    accelerator.print(f"model {args.model}: {sum(q.numel() for q in model.parameters()):,} parameters, "
                      f"mixed_precision={accelerator.mixed_precision}")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = cfg.vocab_size
    data = torch.randint(0, vocab, (args.max_steps * args.train_batch_size, args.seq_len),
                         generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(data, batch_size=args.train_batch_size)
    prompts = torch.randint(0, vocab, (args.eval_batch_size, args.prompt_len),
                            generator=torch.Generator().manual_seed(1))
    model, opt, loader = accelerator.prepare(model, opt, loader)
    progress = tqdm(range(args.max_steps), disable=not accelerator.is_local_main_process)
    t0 = time.time()
    for step, ids in enumerate(loader, start=1):
        model.train()
        out = model(input_ids=ids, labels=ids)
        accelerator.backward(out.loss)
        opt.step()
        opt.zero_grad()
        progress.update(1)
        progress.set_postfix(loss=f"{out.loss.item():.3f}")
        accelerator.print(f"step {step}: loss {out.loss.item():.4f}, "
                          f"cuda memory allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB, "
                          f"reserved {torch.cuda.memory_reserved() / 2**30:.2f} GiB")
        if step % args.sample_every == 0:
            model.eval()
            accelerator.print(f"sampling {args.eval_batch_size} generations "
                              f"(prompt {args.prompt_len} tokens, max_new_tokens={args.max_new_tokens})")
            ts = time.time()
            with torch.no_grad():
                gen = accelerator.unwrap_model(model).generate(
                    prompts.to(accelerator.device), attention_mask=torch.ones_like(prompts).to(accelerator.device),
                    max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens, do_sample=True,
                    top_p=0.9, use_cache=True, pad_token_id=0)
            accelerator.print(f"sampled {tuple(gen.shape)} in {time.time() - ts:.1f}s; "
                              f"max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    progress.close()
    accelerator.print(f"training finished: {args.max_steps} steps in {time.time() - t0:.1f}s, "
                      f"max_memory_reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
