#!/usr/bin/env python
"""Step-time overhead of oompost.record on a GPU (issue 9: under 3 %).

A >= 1B-parameter causal LM (Llama-3.2-1B shape, random weights, bf16,
AdamW, micro-batch 4 x 1024 tokens, SDPA) trains in one process; after
warm-up, blocks of steps alternate between recording off and on (allocator
history with Python stacks, max_entries 100,000, the per-step JSONL hook),
so both arms see the same model, the same GPU clocks and the same
fragmentation.  Each step is timed with a CUDA synchronize at its end.
Reports the median and mean step time of each arm, the overhead ratio, and
the size and time of one snapshot dump at the end (the bounded-disk figure).

    python benchmarks/record_overhead.py [--blocks 6] [--block-steps 20] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "capture"))
sys.path.insert(0, os.path.join(HERE, "..", "src"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3.2-1b")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=6, help="blocks per arm (off/on alternate)")
    ap.add_argument("--block-steps", type=int, default=20)
    ap.add_argument("--max-entries", type=int, default=100_000)
    ap.add_argument("--context", default="all", choices=["alloc", "all"],
                    help="torch's history context: stacks at allocations and frees (oompost's default) or at allocations only")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    import oompost
    from models import from_config, hf_config

    cfg = hf_config(a.model)
    with torch.device("cuda"):
        model = from_config(AutoModelForCausalLM, cfg, torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    g = torch.Generator(device="cuda").manual_seed(0)

    def step() -> float:
        ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda", generator=g)
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    for _ in range(a.warmup):
        step()
    cap = tempfile.mkdtemp(prefix="oompost-overhead-")
    times: dict[str, list[float]] = {"off": [], "on": []}
    rec = None
    for b in range(2 * a.blocks):
        arm = "off" if b % 2 == 0 else "on"
        if arm == "on":
            rec = oompost.record(dir=cap, max_entries=a.max_entries, stacks="python", context=a.context)
            assert rec.enabled and rec.history, "recording did not start"
        for _ in range(a.block_steps):
            times[arm].append(step())
        if arm == "on":
            if b == 2 * a.blocks - 1:
                t = time.perf_counter()
                path = rec.dump(reason="bench")
                dump_s = time.perf_counter() - t
                dump_bytes = os.path.getsize(path)
            rec.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    steps_path = os.path.join(cap, f"steps_rank{rec.rank}.jsonl")
    steps_lines = sum(1 for _ in open(steps_path)) if os.path.exists(steps_path) else 0
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "model": a.model, "params": n_params,
           "batch": a.batch, "seq": a.seq, "steps_per_arm": len(times["on"]), "warmup": a.warmup,
           "max_entries": a.max_entries, "stacks": "python", "context": a.context,
           "median_s": med, "mean_s": mean,
           "overhead_median": med["on"] / med["off"] - 1, "overhead_mean": mean["on"] / mean["off"] - 1,
           "dump_seconds": dump_s, "dump_bytes": dump_bytes, "steps_jsonl_lines": steps_lines,
           "times": times}
    print(json.dumps({k: v for k, v in res.items() if k != "times"}, indent=1))
    print(f"overhead: median {res['overhead_median'] * 100:+.2f} %, mean {res['overhead_mean'] * 100:+.2f} % "
          f"({len(times['on'])} recorded steps vs {len(times['off'])}, {n_params / 1e9:.2f}B params)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
