#!/usr/bin/env python
"""Plain PyTorch training loops for the held-out captures (tests/heldout_captures):
the kind of loop found in notebooks and small repos, printing
``torch.cuda.memory_allocated()`` every step the way people do.

    python heldout_loop.py --model bert-large --batch_size 24 --seq_len 128 --long_doc_step 8
    python heldout_loop.py --model unet --batch_size 16 --image_size 256 --keep_features gpu
    python heldout_loop.py --model opt-1.3b --init_device cpu --steps 10

Models: ``bert-large`` (BertForMaskedLM, MLM with dynamic padding), ``opt-1.3b``
(OPTForCausalLM), ``unet`` (a small diffusion-style denoising UNet written here,
conv + GroupNorm + SiLU with skip connections).  Options that only stage a
scenario say "scenario:" in their help.
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


def build_unet(base: int = 64, mults=(1, 2, 4, 8)):
    import torch
    from torch import nn

    class ResBlock(nn.Module):
        def __init__(self, cin, cout, temb):
            super().__init__()
            self.n1 = nn.GroupNorm(32, cin)
            self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(temb, cout)
            self.n2 = nn.GroupNorm(32, cout)
            self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.c1(nn.functional.silu(self.n1(x)))
            h = h + self.t(t)[:, :, None, None]
            h = self.c2(nn.functional.silu(self.n2(h)))
            return h + self.skip(x)

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            temb = base * 4
            self.temb = nn.Sequential(nn.Linear(base, temb), nn.SiLU(), nn.Linear(temb, temb))
            self.inp = nn.Conv2d(3, base, 3, padding=1)
            chans = [base * m for m in mults]
            self.down = nn.ModuleList()
            self.pool = nn.ModuleList()
            c = base
            for i, ch in enumerate(chans):
                self.down.append(nn.ModuleList([ResBlock(c, ch, temb), ResBlock(ch, ch, temb)]))
                c = ch
                self.pool.append(nn.Conv2d(ch, ch, 3, stride=2, padding=1) if i < len(chans) - 1 else nn.Identity())
            self.mid = nn.ModuleList([ResBlock(c, c, temb), ResBlock(c, c, temb)])
            self.up = nn.ModuleList()
            self.upconv = nn.ModuleList()
            for i, ch in reversed(list(enumerate(chans))):
                self.up.append(nn.ModuleList([ResBlock(c + ch, ch, temb), ResBlock(ch, ch, temb)]))
                c = ch
                self.upconv.append(nn.Conv2d(ch, ch, 3, padding=1) if i > 0 else nn.Identity())
            self.out = nn.Sequential(nn.GroupNorm(32, base), nn.SiLU(), nn.Conv2d(base, 3, 3, padding=1))

        def forward(self, x, tsteps):
            half = self.temb[0].in_features // 2
            freqs = torch.exp(-torch.arange(half, device=x.device) * (9.21 / half))
            e = tsteps[:, None].float() * freqs[None]
            t = self.temb(torch.cat([e.sin(), e.cos()], 1))
            h = self.inp(x)
            skips = []
            for blocks, pool in zip(self.down, self.pool):
                for b in blocks:
                    h = b(h, t)
                skips.append(h)
                h = pool(h)
            for b in self.mid:
                h = b(h, t)
            for blocks, upc in zip(self.up, self.upconv):
                s = skips.pop()
                if h.shape[-1] != s.shape[-1]:
                    h = nn.functional.interpolate(h, size=s.shape[-2:], mode="nearest")
                h = torch.cat([h, s], 1)
                for b in blocks:
                    h = b(h, t)
                h = upc(h)
            return self.out(h)

    return UNet()


def main() -> int:
    p = argparse.ArgumentParser(description="plain PyTorch loops (BERT MLM, OPT causal LM, UNet denoiser)")
    p.add_argument("--model", default="bert-large")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=1234)
    # text models
    p.add_argument("--seq_len", type=int, default=128, help="longest document in an ordinary batch")
    p.add_argument("--min_seq_len", type=int, default=None,
                   help="dynamic padding: documents are min_seq_len..seq_len tokens, each batch padded to its longest")
    p.add_argument("--long_doc_step", type=int, default=None,
                   help="scenario: at this step one document of --long_doc_len tokens pads the batch")
    p.add_argument("--long_doc_len", type=int, default=512)
    p.add_argument("--truncate", type=int, default=None, help="truncate documents to this many tokens")
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (inductor), as recipes do")
    p.add_argument("--init_device", default="cpu", choices=["cpu", "cuda"],
                   help="where the model is built (cpu: from_config in fp32 on the host, then .to('cuda'))")
    p.add_argument("--model_dtype", default=None, choices=["float32", "bfloat16"],
                   help="dtype the model is built in (default: fp32, bf16 autocast; bfloat16: pure bf16 weights, "
                        "as from_pretrained(torch_dtype=torch.bfloat16) gives)")
    # unet
    p.add_argument("--image_size", type=int, default=256)
    p.add_argument("--image_sizes", default=None,
                   help="multi-resolution training: comma-separated sizes, one drawn per step")
    p.add_argument("--keep_hidden", default="none", choices=["none", "gpu", "cpu"],
                   help="text models: a forward hook on the middle transformer layer keeps its output every step "
                        "(gpu: as it is, the leak; cpu: .detach().cpu())")
    p.add_argument("--keep_features", default="none", choices=["none", "gpu", "cpu"],
                   help="a forward hook keeps the decoder's last feature map for a sample grid: "
                        "gpu (as it is) or cpu (.detach().cpu())")
    # scenario plumbing
    add_scenario_args(p, max_entries=15000)
    p.add_argument("--device", default="cuda", help="cpu: a local smoke test of the code paths (no cap)")
    args = p.parse_args()

    import torch

    device = args.device
    allowed = start_scenario(args, cap=device == "cuda")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    mem = (lambda: torch.cuda.memory_allocated()) if device == "cuda" else (lambda: 0)
    rmem = (lambda: torch.cuda.memory_reserved()) if device == "cuda" else (lambda: 0)

    kind = "unet" if args.model == "unet" else "text"
    vocab = None
    if kind == "unet":
        model = build_unet().to(device)
    else:
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

        from models import from_config, hf_config

        cfg = hf_config(args.model)
        vocab = cfg.vocab_size
        auto = AutoModelForMaskedLM if cfg.model_type == "bert" else AutoModelForCausalLM
        t_build = time.time()
        # (no --model_dtype: the default path, exactly as the first captures ran it)
        dtype = getattr(torch, args.model_dtype) if args.model_dtype else None

        def build():
            return from_config(auto, cfg, dtype)

        if args.init_device == "cuda":
            with torch.device(device):
                model = build()
        else:
            model = build()
        print(f"built {type(model).__name__} on {args.init_device} in {time.time() - t_build:.1f}s", flush=True)
        if args.model_dtype:
            print(f"moving the model to {device} ({args.model_dtype}, "
                  f"{sum(q.numel() * q.element_size() for q in model.parameters()) / GiB:.2f} GiB of weights)",
                  flush=True)
        model = model.to(device, dtype=torch.bfloat16) if cfg.model_type == "opt" else model.to(device)
        if args.model_dtype:
            print(f"model loaded: memory_allocated: {mem() / GiB:.2f} GB | "
                  f"memory_reserved: {rmem() / GiB:.2f} GB", flush=True)
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if args.compile:
        model = torch.compile(model)
        print("model compiled with torch.compile (inductor)", flush=True)
    nparams = sum(q.numel() for q in model.parameters())
    print(f"{args.model}: {nparams / 1e6:.1f}M params, batch_size={args.batch_size}", flush=True)

    kept: list = []
    if args.keep_features != "none":
        def hook(mod, inp, out):
            kept.append(out if args.keep_features == "gpu" else out.detach().cpu())
        model.up[-1][-1].register_forward_hook(hook)
    if args.keep_hidden != "none":
        # the probing / feature-extraction pattern: a hook on a middle layer stores its hidden states
        layers = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) >= 4)
        mid = layers[len(layers) // 2]

        def keep_hidden(mod, inp, out):
            h = out[0] if isinstance(out, tuple) else out
            kept.append(h if args.keep_hidden == "gpu" else h.detach().cpu())
        mid.register_forward_hook(keep_hidden)
        print(f"keeping the output of layer {len(layers) // 2} ({type(mid).__name__}) every step "
              f"({args.keep_hidden})", flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    t0 = time.time()
    step = 0
    for step in range(1, args.steps + 1):
        g = torch.Generator().manual_seed(args.seed * 1000 + step)
        with torch.autocast(device, dtype=torch.bfloat16):
            if kind == "unet":
                size = rng.choice([int(x) for x in args.image_sizes.split(",")]) if args.image_sizes \
                    else args.image_size
                x0 = torch.randn(args.batch_size, 3, size, size, generator=g).to(device)
                noise = torch.randn_like(x0)
                ts = torch.randint(0, 1000, (args.batch_size,), generator=g).to(device)
                a = (1 - ts.float() / 1000)[:, None, None, None]
                pred = model(a.sqrt() * x0 + (1 - a).sqrt() * noise, ts)
                loss = torch.nn.functional.mse_loss(pred.float(), noise)
                shape = f"{size}x{size}"
            else:
                lo = args.min_seq_len or args.seq_len
                lens = [rng.randint(lo, args.seq_len) for _ in range(args.batch_size)]
                if args.long_doc_step and step == args.long_doc_step:
                    lens[0] = args.long_doc_len
                if args.truncate:
                    lens = [min(n, args.truncate) for n in lens]
                s = max(lens)
                ids = torch.randint(5, vocab, (args.batch_size, s), generator=g)
                mask = torch.zeros(args.batch_size, s, dtype=torch.long)
                for i, n in enumerate(lens):
                    mask[i, :n] = 1
                ids, mask = ids.to(device), mask.to(device)
                if cfg.model_type == "bert":
                    labels = ids.clone()
                    pick = torch.rand(ids.shape, generator=g).to(device) < 0.15
                    labels[~pick | (mask == 0)] = -100
                    ids = torch.where(pick, torch.full_like(ids, 103), ids)
                else:
                    labels = ids.masked_fill(mask == 0, -100)
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                shape = f"{args.batch_size}x{s}"
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} | loss {loss.item():.4f} | batch {shape} | "
              f"memory_allocated: {mem() / GiB:.2f} GB | "
              f"memory_reserved: {rmem() / GiB:.2f} GB", flush=True)
    if device != "cuda":
        return 0
    print(f"done: {step} steps in {time.time() - t0:.0f}s, "
          f"max_memory_allocated: {torch.cuda.max_memory_allocated() / GiB:.2f} GB, "
          f"max_memory_reserved: {torch.cuda.max_memory_reserved() / GiB:.2f} GB", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, step, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
