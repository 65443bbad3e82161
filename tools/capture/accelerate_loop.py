#!/usr/bin/env python
"""A causal-LM fine-tuning loop driven by HuggingFace Accelerate, written the
way ``run_clm_no_trainer.py`` and its many copies are: ``accelerate.logging``
lines ("***** Running training *****"), a tqdm bar over the optimisation
steps, ``accelerator.accumulate`` for gradient accumulation, and an
evaluation every ``--eval_every`` steps that reports perplexity.

    accelerate launch --num_processes 1 --mixed_precision bf16 accelerate_loop.py --model opt-350m

``--keep_eval_logits gpu`` stages a scenario: the evaluation keeps every
batch's gathered logits (``accelerator.gather_for_metrics(outputs.logits)``)
in a list on the GPU for a token-accuracy metric; ``argmax_cpu`` keeps
``logits.argmax(-1).cpu()`` instead (the usual fix).  Data are random token
ids.  Options that only stage a scenario say "scenario:" in their help.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from loop_setup import add_scenario_args  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="opt-350m")
    p.add_argument("--per_device_train_batch_size", type=int, default=8)
    p.add_argument("--per_device_eval_batch_size", type=int, default=8)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--block_size", type=int, default=512)
    p.add_argument("--max_train_steps", type=int, default=12)
    p.add_argument("--num_eval_samples", type=int, default=0, help="held-out sequences (0: no evaluation)")
    p.add_argument("--eval_every", type=int, default=4)
    p.add_argument("--learning_rate", type=float, default=5e-5)
    p.add_argument("--keep_eval_logits", default="none", choices=["none", "gpu", "argmax_cpu"],
                   help="scenario: what the evaluation keeps of each batch's logits for a token accuracy")
    add_scenario_args(p, max_entries=30000)
    args = p.parse_args()

    import torch
    from accelerate import Accelerator
    from accelerate.logging import get_logger
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM

    import logging

    from cards import apply_limit
    from models import hf_config

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
                        datefmt="%m/%d/%Y %H:%M:%S", level=logging.INFO)
    logger = get_logger(__name__)
    if args.oompost_capture:
        import oompost.record

        oompost.record.enable(args.oompost_capture, max_entries=args.max_entries)
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    logger.info(accelerator.state, main_process_only=False)
    apply_limit(args.emulate_card, args.memory_limit_gib, accelerator.print)
    set_seed(42)
    cfg = hf_config(args.model)
    model = AutoModelForCausalLM.from_config(cfg)
    vocab = cfg.vocab_size
    n_train = args.max_train_steps * args.gradient_accumulation_steps * args.per_device_train_batch_size
    train = torch.randint(0, vocab, (n_train, args.block_size), generator=torch.Generator().manual_seed(0))
    evals = torch.randint(0, vocab, (max(args.num_eval_samples, 1), args.block_size),
                          generator=torch.Generator().manual_seed(1))
    train_loader = torch.utils.data.DataLoader(train, batch_size=args.per_device_train_batch_size, shuffle=True)
    eval_loader = torch.utils.data.DataLoader(evals, batch_size=args.per_device_eval_batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)

    total_batch_size = (args.per_device_train_batch_size * accelerator.num_processes
                        * args.gradient_accumulation_steps)
    logger.info("***** Running training *****")
    logger.info(f"  Num examples = {n_train}")
    logger.info(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    logger.info(f"  Total train batch size (w. parallel, distributed & accumulation) = {total_batch_size}")
    logger.info(f"  Gradient Accumulation steps = {args.gradient_accumulation_steps}")
    logger.info(f"  Total optimization steps = {args.max_train_steps}")
    progress_bar = tqdm(range(args.max_train_steps), disable=not accelerator.is_local_main_process)
    completed_steps = 0
    t0 = time.time()

    def evaluate() -> None:
        model.eval()
        losses, kept = [], []
        for batch in eval_loader:
            with torch.no_grad():
                outputs = model(input_ids=batch, labels=batch)
            loss = outputs.loss
            losses.append(accelerator.gather_for_metrics(loss.repeat(args.per_device_eval_batch_size)))
            if args.keep_eval_logits == "gpu":
                kept.append(accelerator.gather_for_metrics(outputs.logits))
            elif args.keep_eval_logits == "argmax_cpu":
                kept.append(accelerator.gather_for_metrics(outputs.logits).argmax(-1).cpu())
        losses = torch.cat(losses)
        eval_loss = torch.mean(losses)
        try:
            perplexity = math.exp(eval_loss)
        except OverflowError:
            perplexity = float("inf")
        extra = ""
        if kept:
            preds = torch.cat([k.argmax(-1).cpu() if k.dim() == 3 else k for k in kept])
            labels = evals[:preds.shape[0]]
            extra = f" token_accuracy: {(preds[:, :-1] == labels[:, 1:]).float().mean().item():.4f}"
        logger.info(f"step {completed_steps}: perplexity: {perplexity} eval_loss: {eval_loss}{extra}")
        model.train()

    model.train()
    for batch in train_loader:
        with accelerator.accumulate(model):
            outputs = model(input_ids=batch, labels=batch)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            progress_bar.update(1)
            completed_steps += 1
            if args.num_eval_samples and completed_steps % args.eval_every == 0:
                evaluate()
        if completed_steps >= args.max_train_steps:
            break
    progress_bar.close()
    logger.info(f"training finished: {completed_steps} steps in {time.time() - t0:.1f}s, "
                f"max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
