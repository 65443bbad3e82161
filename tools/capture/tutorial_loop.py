#!/usr/bin/env python
"""A causal-LM fine-tune written the way many users write one, recording memory
the way PyTorch's own tutorial says to — not with oompost.

- console: Python ``logging`` in the HuggingFace example scripts' format and a
  ``tqdm`` progress bar (carriage-return updates on stderr); no memory figures
  unless ``--log_memory`` asks for them;
- data: a ``Dataset`` of random-length token sequences and a ``DataLoader``
  whose ``collate_fn`` pads each batch to its longest sequence;
- memory history: ``torch.cuda.memory._record_memory_history(max_entries=N)``
  at the start and ``torch.cuda.memory._dump_snapshot(...)`` in the
  ``except torch.cuda.OutOfMemoryError`` handler ("Understanding GPU Memory 1",
  pytorch.org/blog), so the snapshot carries no ``oompost_meta``: the cap, the
  card and the request must be read from the allocator's own records.

    python tutorial_loop.py --model gpt2-medium --batch_size 4 --max_len 512 --steps 20

Options that only stage a scenario say "scenario:" in their help.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

logger = logging.getLogger("finetune")


def main() -> int:
    p = argparse.ArgumentParser(description="causal-LM fine-tune, tutorial-style memory recording")
    p.add_argument("--model", default="gpt2-medium")
    p.add_argument("--model_dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--max_len", type=int, default=512, help="longest sample (tokens)")
    p.add_argument("--min_len", type=int, default=None, help="shortest sample (default: max_len, no padding)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--running_loss", default="item", choices=["item", "tensor"],
                   help="item: total_loss += loss.item(); tensor: total_loss += loss (keeps every step's graph)")
    p.add_argument("--retain_graph", action="store_true",
                   help="scenario: loss.backward(retain_graph=True), as added to silence 'backward through the graph "
                        "a second time'; with --running_loss tensor every step's saved activations stay alive")
    p.add_argument("--eval_every", type=int, default=0, help="a held-out batch's loss every N steps (0: none)")
    p.add_argument("--eval_loss", default="item", choices=["item", "tensor"],
                   help="item: under torch.no_grad(), summed as loss.item(); tensor: autograd on and summed as a "
                        "tensor (each evaluation's graph and saved activations stay alive)")
    p.add_argument("--log_memory", type=int, default=0, metavar="N",
                   help="log torch.cuda.memory_allocated() and max_memory_allocated() every N steps (0: never)")
    p.add_argument("--long_doc_step", type=int, default=None, help="scenario: this step's batch holds one long sample")
    p.add_argument("--long_doc_len", type=int, default=4096, help="scenario: its length")
    p.add_argument("--truncate", type=int, default=None, help="scenario: cut every sample to this many tokens")
    p.add_argument("--emulate_card", default=None, help="scenario: cap memory like this card (cards.py)")
    p.add_argument("--memory_limit_gib", type=float, default=None, help="scenario: cap memory at this many GiB")
    p.add_argument("--oompost_capture", default=None,
                   help="scenario: directory for torch.cuda.memory._dump_snapshot at the OOM (plain torch, "
                        "not oompost.record)")
    p.add_argument("--max_entries", type=int, default=100000)
    p.add_argument("--summary_on_oom", action="store_true",
                   help="scenario: print torch.cuda.memory_summary() when the OOM is caught, as users do")
    p.add_argument("--dump_after", action="store_true",
                   help="scenario: print the OOM's traceback and dump the snapshot after the handler has let the "
                        "failing step's tensors go (default: dump inside the handler)")
    p.add_argument("--report", default=None, help="scenario: write measured peaks to this JSON file")
    args = p.parse_args()

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
                        datefmt="%m/%d/%Y %H:%M:%S", level=logging.INFO)
    import torch
    from torch.utils.data import DataLoader, Dataset
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM

    from cards import apply_limit
    from models import hf_config

    if args.oompost_capture:
        torch.cuda.memory._record_memory_history(max_entries=args.max_entries)
    allowed = apply_limit(args.emulate_card, args.memory_limit_gib, logger.debug)
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    cfg = hf_config(args.model)
    lo = args.min_len or args.max_len

    class RandomText(Dataset):
        def __init__(self, n: int):
            self.lens = [random.randint(lo, args.max_len) for _ in range(n)]
            if args.long_doc_step:
                self.lens[(args.long_doc_step - 1) * args.batch_size] = args.long_doc_len
            if args.truncate:
                self.lens = [min(n, args.truncate) for n in self.lens]

        def __len__(self) -> int:
            return len(self.lens)

        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(args.seed * 100003 + i)
            return torch.randint(5, cfg.vocab_size, (self.lens[i],), generator=g)

    def collate(samples):
        n = max(len(s) for s in samples)
        ids = torch.zeros(len(samples), n, dtype=torch.long)
        mask = torch.zeros(len(samples), n, dtype=torch.long)
        for i, s in enumerate(samples):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    data = RandomText(args.steps * args.batch_size)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=False, collate_fn=collate)
    logger.info(f"Loading model {args.model} ({args.model_dtype})")
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=getattr(torch, args.model_dtype))
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    logger.info("***** Running training *****")
    logger.info(f"  Num examples = {len(data)}")
    logger.info(f"  Batch size = {args.batch_size}")
    logger.info(f"  Total optimization steps = {len(loader)}")

    val = collate([torch.randint(5, cfg.vocab_size, (args.max_len,), generator=torch.Generator().manual_seed(7))
                   for _ in range(args.batch_size)])
    state = {"step": 0, "total_loss": 0.0, "eval_total": 0.0}
    t0 = time.time()

    def train() -> None:
        for step, batch in enumerate(tqdm(loader, desc="Training", mininterval=0), start=1):
            state["step"] = step
            batch = {k: v.cuda() for k, v in batch.items()}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**batch).loss
            loss.backward(retain_graph=args.retain_graph)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state["total_loss"] += loss if args.running_loss == "tensor" else loss.item()
            if args.eval_every and step % args.eval_every == 0:
                vb = {k: v.cuda() for k, v in val.items()}
                if args.eval_loss == "tensor":
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        state["eval_total"] += model(**vb).loss
                else:
                    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                        state["eval_total"] += model(**vb).loss.item()
            if args.log_memory and step % args.log_memory == 0:
                logger.info(f"step {step}: memory allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB, "
                            f"max {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")

    def dump() -> None:
        path = os.path.join(args.oompost_capture, "memory_snapshot.pickle")
        torch.cuda.memory._dump_snapshot(path)
        logger.info(f"Saved memory snapshot to {path}")

    failed = False
    try:
        train()
    except torch.cuda.OutOfMemoryError:
        if args.summary_on_oom:
            print(torch.cuda.memory_summary(), flush=True)
        if not args.dump_after:
            if args.oompost_capture:
                dump()                    # in the handler: the failing step's tensors are still alive
            raise
        traceback.print_exc()
        failed = True
    if failed:
        # after the handler: the traceback and the failing step's activations are gone, as in a script that
        # saves its snapshot in a finally block or at exit
        if args.oompost_capture:
            dump()
        logger.error("Training failed: CUDA out of memory")
        return 1
    step, total_loss = state["step"], state["total_loss"]
    logger.info(f"Training finished: average loss {float(total_loss) / max(step, 1):.4f}")
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, step, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
