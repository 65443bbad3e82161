#!/usr/bin/env python
"""A causal-LM fine-tuning script of the kind users write: plain PyTorch or
the DeepSpeed engine, HF model classes, HF-style argument names.

It is what produced the logs in sample_logs/: every line in them was printed
by a real run of this script (or by torch / DeepSpeed / NCCL inside it) on the
GPU machine.  Options that exist only to stage a scenario are marked
"scenario:" in their help and print what they do, so nothing is hidden.

    python train.py --model qwen2.5-0.5b --per_device_train_batch_size 4 --max_seq_length 512
    deepspeed train.py --deepspeed ds_config.json ...        (or python -m deepspeed.launcher.runner)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

GiB = 1024**3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-0.5b", help="preset name (tools/capture/models.py)")
    p.add_argument("--deepspeed", default=None, help="path to a DeepSpeed config; enables the DeepSpeed engine")
    p.add_argument("--per_device_train_batch_size", type=int, default=4)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--max_seq_length", type=int, default=512)
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--attn_implementation", default="sdpa", choices=["eager", "sdpa"])
    p.add_argument("--lora_r", type=int, default=None, help="train LoRA adapters of this rank (PEFT)")
    p.add_argument("--max_steps", type=int, default=20, help="optimizer steps")
    p.add_argument("--learning_rate", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--dynamic_padding", action="store_true",
                   help="pad each batch to its longest sample (lengths vary per batch)")
    p.add_argument("--min_seq_length", type=int, default=64)
    p.add_argument("--init_device", default="cpu", choices=["cpu", "cuda"],
                   help="where the model is built before deepspeed.initialize / .cuda()")
    p.add_argument("--zero_init", action="store_true", help="build the model under deepspeed.zero.Init (ZeRO-3)")
    p.add_argument("--skip_weight_init", action="store_true",
                   help="allocate the weights on --init_device without initialising them (memory does not "
                        "depend on their values; a 13B random init on the CPU takes minutes)")
    p.add_argument("--local_rank", type=int, default=-1)
    # scenario staging (each prints what it does)
    p.add_argument("--long_batch_at_step", type=int, default=None,
                   help="scenario: at this step the batch holds one very long document (padded batch)")
    p.add_argument("--long_batch_length", type=int, default=8192)
    p.add_argument("--keep_logits_for_metrics", action="store_true",
                   help="scenario: collect each step's logits on the GPU for an end-of-epoch metric")
    p.add_argument("--emulate_card", default=None, help="scenario: cap memory like this card (cards.py)")
    p.add_argument("--memory_limit_gib", type=float, default=None, help="scenario: cap memory at this many GiB")
    p.add_argument("--oompost_capture", default=None, help="dir: dump a memory snapshot at the OOM (oompost.record)")
    p.add_argument("--max_entries", type=int, default=30000, help="allocator history ring buffer size")
    p.add_argument("--report", default=None, help="write measured peaks to this JSON file")
    return p.parse_args(argv)


def log(msg: str) -> None:
    print(msg, flush=True)


def nvml_process_bytes() -> int | None:
    """GPU memory this process holds according to NVML (context, NCCL, cuBLAS and PyTorch)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
    except Exception:
        return None
    return None


def make_batch(args, step: int, vocab: int, rng: random.Random, device):
    import torch

    b = args.per_device_train_batch_size
    if args.long_batch_at_step is not None and step == args.long_batch_at_step:
        s = args.long_batch_length
        log(f"[data] step {step}: batch contains a {s}-token document; batch padded to {s} tokens")
    elif args.dynamic_padding:
        s = max(rng.randint(args.min_seq_length, args.max_seq_length) for _ in range(b))
    else:
        s = args.max_seq_length
    g = torch.Generator().manual_seed(args.seed * 1000 + step)
    ids = torch.randint(0, vocab, (b, s), generator=g).to(device)
    return ids, s


def build_model(args, ds_config):
    import torch
    from transformers import AutoModelForCausalLM

    from models import from_config, hf_config

    cfg = hf_config(args.model, args.attn_implementation)
    dtype = torch.bfloat16

    def construct():
        return from_config(AutoModelForCausalLM, cfg, dtype)

    if args.zero_init:
        import deepspeed

        with deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = construct()
    elif args.skip_weight_init:
        with torch.device("meta"):
            model = construct()
        model = model.to_empty(device=args.init_device)
    elif args.init_device == "cuda":
        with torch.device("cuda"):
            model = construct()
    else:
        model = construct()
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.lora_r:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                                 task_type="CAUSAL_LM"))
    n_params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    n_train = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if p.requires_grad)
    log(f"model: {type(model).__name__} ({args.model}), {n_params:,} parameters, {n_train:,} trainable, "
        f"dtype {dtype}, attn_implementation={args.attn_implementation}, "
        f"gradient_checkpointing={args.gradient_checkpointing}")
    return model, cfg


def mem_line() -> str:
    import torch

    return (f"mem allocated={torch.cuda.memory_allocated() / GiB:.2f}GiB "
            f"reserved={torch.cuda.memory_reserved() / GiB:.2f}GiB "
            f"max_allocated={torch.cuda.max_memory_allocated() / GiB:.2f}GiB "
            f"max_reserved={torch.cuda.max_memory_reserved() / GiB:.2f}GiB")


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.oompost_capture:
        import oompost.record

        oompost.record.enable(args.oompost_capture, max_entries=args.max_entries)
    from cards import apply_limit

    allowed = apply_limit(args.emulate_card, args.memory_limit_gib, log)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    ds_config = None
    if args.deepspeed:
        with open(args.deepspeed) as f:
            ds_config = json.load(f)
        log(f"DeepSpeed config: {json.dumps(ds_config)}")
        import deepspeed

        deepspeed.init_distributed()
    log(f"torch {torch.__version__}, cuda {torch.version.cuda}, device {torch.cuda.get_device_name(0)}")
    log(f"training: per_device_train_batch_size={args.per_device_train_batch_size} "
        f"gradient_accumulation_steps={args.gradient_accumulation_steps} max_seq_length={args.max_seq_length} "
        f"max_steps={args.max_steps} dynamic_padding={args.dynamic_padding}")
    report: dict = {"args": vars(args), "allowed_bytes": allowed}
    t0 = time.time()
    model, cfg = build_model(args, ds_config)
    vocab = cfg.vocab_size
    if args.deepspeed:
        import deepspeed

        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=args.learning_rate)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
        log(f"deepspeed.initialize done in {time.time() - t0:.1f}s | {mem_line()}")
        device = engine.device
    else:
        model.cuda()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate)
        engine = None
        device = torch.device("cuda")
        log(f"model on cuda in {time.time() - t0:.1f}s | {mem_line()}")
    report["startup_max_reserved"] = torch.cuda.max_memory_reserved()
    report["startup_max_allocated"] = torch.cuda.max_memory_allocated()
    model.train()
    kept: list = []
    for step in range(1, args.max_steps + 1):
        ts = time.time()
        total = 0.0
        seq = 0
        for _micro in range(args.gradient_accumulation_steps):
            ids, seq = make_batch(args, step, vocab, rng, device)
            if engine is not None:
                out = engine(input_ids=ids, labels=ids)
                engine.backward(out.loss)
                engine.step()
            else:
                out = model(input_ids=ids, labels=ids)
                (out.loss / args.gradient_accumulation_steps).backward()
            if args.keep_logits_for_metrics:
                kept.append(out.logits.detach())
            total += out.loss.item()
        if engine is None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        loss = total / args.gradient_accumulation_steps
        log(f"step {step}/{args.max_steps} | loss {loss:.4f} | seq {seq} | {mem_line()} | {time.time() - ts:.2f}s")
    report.update(max_reserved=torch.cuda.max_memory_reserved(), max_allocated=torch.cuda.max_memory_allocated(),
                  reserved_end=torch.cuda.memory_reserved(), nvml_process_end=nvml_process_bytes(),
                  steps_completed=args.max_steps, seconds=time.time() - t0)
    log(f"training finished: {args.max_steps} steps in {time.time() - t0:.1f}s | {mem_line()}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
