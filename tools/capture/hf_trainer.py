#!/usr/bin/env python
"""Fine-tuning with the HuggingFace Trainer and a DeepSpeed config (the
setting of the seed threads: a custom Trainer subclass, ZeRO-3 with offload).

    deepspeed hf_trainer.py --deepspeed ds_zero3_offload.json --per_device_train_batch_size 16 ...

Unknown arguments go to ``TrainingArguments`` (HF names), so a rerun plan's
``trainer_args`` can be passed as they are.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--max_seq_length", type=int, default=2048)
    p.add_argument("--num_samples", type=int, default=4096)
    p.add_argument("--attn_implementation", default="sdpa")
    p.add_argument("--emulate_card", default=None)
    p.add_argument("--oompost_capture", default=None)
    p.add_argument("--max_entries", type=int, default=30000)
    p.add_argument("--local_rank", type=int, default=-1)
    p.add_argument("--model_dtype", default="bfloat16", choices=["bfloat16", "float32"],
                   help="dtype the model is created in (float32: what from_pretrained gives without torch_dtype)")
    p.add_argument("--init_device", default="cpu", choices=["cpu", "cuda"],
                   help="where the model is built (cuda: random init on the GPU, fast for large configs)")
    p.add_argument("--lora_r", type=int, default=None, help="train LoRA adapters of this rank (PEFT)")
    p.add_argument("--task", default="causal-lm", choices=["causal-lm", "image-classification"],
                   help="image-classification: AutoModelForImageClassification on random images (ViT presets)")
    p.add_argument("--image_size", type=int, default=None, help="image-classification: input resolution")
    p.add_argument("--num_eval_samples", type=int, default=0,
                   help="causal-lm: an eval_dataset of this many sequences (use with --eval_strategy)")
    p.add_argument("--compute_metrics", default=None, choices=["accuracy"],
                   help="causal-lm: compute_metrics=next-token accuracy from the gathered eval logits")
    p.add_argument("--preprocess_logits_argmax", action="store_true",
                   help="causal-lm: preprocess_logits_for_metrics keeps logits.argmax(-1) instead of the logits")
    p.add_argument("--long_sample_step", type=int, default=None,
                   help="scenario: the batch of this training step (sequential order) holds one long sample")
    p.add_argument("--long_sample_len", type=int, default=16384, help="scenario: its length in tokens")
    p.add_argument("--min_seq_length", type=int, default=None,
                   help="scenario: samples of random length in [min, max_seq_length], each batch padded to its "
                        "longest (dynamic padding)")
    p.add_argument("--memory_limit_gib", type=float, default=None, help="scenario: cap memory at this many GiB")
    p.add_argument("--report", default=None, help="scenario: write measured peaks to this JSON file")
    args, rest = p.parse_known_args()

    import torch

    if args.oompost_capture:
        import oompost.record

        oompost.record.enable(args.oompost_capture, max_entries=args.max_entries)
    from cards import apply_limit

    allowed = apply_limit(args.emulate_card, args.memory_limit_gib, print)

    from transformers import (AutoModelForCausalLM, AutoModelForImageClassification, HfArgumentParser, Trainer,
                              TrainingArguments)

    from collate import pad_to_longest
    from models import from_config, hf_config

    (targs,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(args=rest)
    cfg = hf_config(args.model, args.attn_implementation)
    if args.image_size:
        cfg.image_size = args.image_size

    class RandomTokens(torch.utils.data.Dataset):
        def __init__(self, n=None, offset=0):
            self.n, self.offset = (args.num_samples if n is None else n), offset

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(self.offset + i)
            n = args.max_seq_length
            if args.min_seq_length and self.offset == 0:
                n = int(torch.randint(args.min_seq_length, args.max_seq_length + 1, (1,), generator=g))
            if (args.long_sample_step and self.offset == 0
                    and i == (args.long_sample_step - 1) * targs.per_device_train_batch_size):
                n = args.long_sample_len
            ids = torch.randint(0, cfg.vocab_size, (n,), generator=g)
            return {"input_ids": ids, "labels": ids.clone()}


    class RandomImages(torch.utils.data.Dataset):
        def __len__(self):
            return args.num_samples

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"pixel_values": torch.randn(3, cfg.image_size, cfg.image_size, generator=g),
                    "labels": int(torch.randint(0, cfg.num_labels, (1,), generator=g))}

    class CausalLMTrainer(Trainer):
        """The users' "custom trainer": same loss as HF's, computed explicitly."""

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
            out = model(input_ids=inputs["input_ids"], labels=inputs["labels"])
            return (out.loss, out) if return_outputs else out.loss

        def _get_train_sampler(self, *a, **k):
            if args.long_sample_step:          # the long sample's step is the one the scenario names
                return torch.utils.data.SequentialSampler(self.train_dataset)
            return super()._get_train_sampler(*a, **k)

    import contextlib

    dtype = getattr(torch, args.model_dtype)
    auto = AutoModelForImageClassification if args.task == "image-classification" else AutoModelForCausalLM
    # the default (cpu) path is left exactly as the existing captures ran it
    with torch.device(args.init_device) if args.init_device != "cpu" else contextlib.nullcontext():
        model = from_config(auto, cfg, dtype)
    if args.lora_r:
        from peft import LoraConfig, get_peft_model

        model.enable_input_require_grads()     # gradient checkpointing with frozen embeddings
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                                 task_type="CAUSAL_LM"))
        model.print_trainable_parameters()
    n = sum(getattr(q, "ds_numel", q.numel()) for q in model.parameters())
    what = (f"image_size={cfg.image_size}" if args.task == "image-classification"
            else f"max_seq_length={args.max_seq_length}")
    print(f"model: {type(model).__name__} ({args.model}), {n:,} parameters, {what}"
          + ("" if args.model_dtype == "bfloat16" and args.init_device == "cpu"
             else f", dtype={args.model_dtype}, built on {args.init_device}")
          + ("" if args.attn_implementation == "sdpa"
             else f", attn_implementation={model.config._attn_implementation}"), flush=True)
    def first(x):
        return x[0] if isinstance(x, tuple) else x

    def accuracy(eval_pred):
        preds, labels = first(eval_pred.predictions), first(eval_pred.label_ids)
        if preds.ndim == 3:
            preds = preds.argmax(-1)
        return {"accuracy": float((preds[:, :-1] == labels[:, 1:]).mean())}

    def argmax_logits(logits, labels):
        return first(logits).argmax(-1)

    if args.task == "image-classification":
        trainer = Trainer(model=model, args=targs, train_dataset=RandomImages())
    else:
        trainer = CausalLMTrainer(model=model, args=targs, train_dataset=RandomTokens(),
                                  data_collator=pad_to_longest if args.long_sample_step or args.min_seq_length
                                  else None,
                                  eval_dataset=RandomTokens(args.num_eval_samples, 10**6)
                                  if args.num_eval_samples else None,
                                  compute_metrics=accuracy if args.compute_metrics else None,
                                  preprocess_logits_for_metrics=argmax_logits if args.preprocess_logits_argmax
                                  else None)
    import time

    t0 = time.time()
    trainer.train()
    print(f"training finished: max_reserved={torch.cuda.max_memory_reserved() / 2**30:.2f}GiB", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, trainer.state.global_step, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
