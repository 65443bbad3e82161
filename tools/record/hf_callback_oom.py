#!/usr/bin/env python
"""HF Trainer run with oompost's callback that hits an activation spike.

Qwen2.5-0.5B (random weights), micro-batch 4 x 512 tokens on an emulated
24 GiB card; samples whose index is a multiple of 97 are 8192 tokens long, so
the first batch that holds one (at a random step) pads to 8192 tokens and the
fp32 logits no longer fit.  The callback is the only capture: no log is kept
in the capture directory.

    python hf_callback_oom.py --capture DIR
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "capture"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--capture", required=True)
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--emulate_card", default="rtx3090")
    p.add_argument("--max_steps", type=int, default=300)
    a = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from cards import apply_limit
    from collate import pad_to_longest
    from models import from_config, hf_config
    from oompost.integrations.hf import OompostCallback

    apply_limit(a.emulate_card, None, print)
    cfg = hf_config(a.model)

    class Docs(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4096

        def __getitem__(self, i: int) -> dict:
            n = 8192 if i % 97 == 0 else 512
            ids = torch.randint(0, cfg.vocab_size, (n,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids}

    model = from_config(AutoModelForCausalLM, cfg, torch.bfloat16)
    args = TrainingArguments(output_dir="/tmp/hf_callback_oom", per_device_train_batch_size=4, max_steps=a.max_steps,
                             bf16=True, logging_steps=1, save_strategy="no", report_to="none", seed=3,
                             dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Docs(), data_collator=pad_to_longest,
                      callbacks=[OompostCallback(dir=a.capture)])
    trainer.train()
    print("finished without an OOM")
    return 0


if __name__ == "__main__":
    sys.exit(main())
