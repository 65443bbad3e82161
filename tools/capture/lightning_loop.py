#!/usr/bin/env python
"""Causal-LM fine-tuning the way PyTorch Lightning users write it: a
``LightningModule`` around a Hugging Face model, ``configure_optimizers``
returning AdamW, and ``pl.Trainer(precision="bf16-mixed")`` with its own
console output (the device banner, the model summary table, the tqdm bar).
Lightning runs forward and backward inside ``optimizer.step(closure)``, so an
OOM's frames pass through the optimizer even when the activations are what
ran out.

    python lightning_loop.py --model gpt2-medium --batch_size 16 --seq_len 1024 --steps 8
    python lightning_loop.py --steps 2 --val_batches 40 --keep_val logits     # then trainer.validate()

With ``--val_batches N`` a validation run follows ``fit`` (``trainer.validate``) whose ``validation_step``
keeps each batch's outputs for ``on_validation_epoch_end`` the way the Lightning 2 docs show
(``self.validation_step_outputs.append(...)``): ``--keep_val logits`` keeps the logits on the GPU, ``argmax``
keeps ``logits.argmax(-1).cpu()``.

Tokens are random; the model is built from its published config (models.py).
Options that only stage a scenario say "scenario:" in their help.
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
    p.add_argument("--model", default="gpt2-medium")
    p.add_argument("--model_dtype", default="float32")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--seq_len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--attn_implementation", default="eager")
    p.add_argument("--val_batches", type=int, default=0, help="validation batches after fit (0: none)")
    p.add_argument("--keep_val", choices=("logits", "argmax"), default="argmax")
    add_scenario_args(p)
    args = p.parse_args()

    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, Dataset
    from transformers import AutoModelForCausalLM

    from models import from_config, hf_config

    allowed = start_scenario(args)
    torch.manual_seed(0)
    cfg = hf_config(args.model, attn_implementation=args.attn_implementation)
    vocab = cfg.vocab_size

    class RandomTokens(Dataset):
        def __init__(self, n: int) -> None:
            self.n = n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int) -> torch.Tensor:
            g = torch.Generator().manual_seed(i)
            return torch.randint(0, vocab, (args.seq_len,), generator=g)

    class LitLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = from_config(AutoModelForCausalLM, cfg, getattr(torch, args.model_dtype))
            self.validation_step_outputs: list = []

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = self.model(input_ids=batch, labels=batch).loss
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
            out = self.model(input_ids=batch, labels=batch)
            logits = out.logits if args.keep_val == "logits" else out.logits.argmax(-1).cpu()
            self.validation_step_outputs.append((logits, batch))
            self.log("val_loss", out.loss, prog_bar=True)

        def on_validation_epoch_end(self) -> None:
            right = sum(int((p.to(b.device)[:, :-1] == b[:, 1:]).sum()) for p, b in self.validation_step_outputs)
            total = sum(b[:, 1:].numel() for _, b in self.validation_step_outputs)
            self.log("val_token_accuracy", right / max(total, 1))
            self.validation_step_outputs.clear()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=2e-5, weight_decay=0.01)

    lit = LitLM()
    n = sum(q.numel() for q in lit.parameters())
    print(f"{args.model}: {n / 1e6:.1f}M parameters ({args.model_dtype}); batch size {args.batch_size} x "
          f"{args.seq_len} tokens", flush=True)
    loader = DataLoader(RandomTokens(args.batch_size * args.steps), batch_size=args.batch_size, num_workers=0)
    trainer = pl.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=args.steps,
                         logger=False, enable_checkpointing=False, log_every_n_steps=1, num_sanity_val_steps=0)
    t0 = time.time()
    trainer.fit(lit, loader)
    print(f"fit finished: {trainer.global_step} steps ({time.time() - t0:.1f}s)", flush=True)
    if args.val_batches:
        val = DataLoader(RandomTokens(args.batch_size * args.val_batches), batch_size=args.batch_size,
                         num_workers=0)
        print(trainer.validate(lit, val), flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, trainer.global_step, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
