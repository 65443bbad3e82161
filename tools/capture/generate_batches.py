#!/usr/bin/env python
"""Batched offline generation over a list of prompts, the way a quick
evaluation or data-synthesis script does it: ``model.generate`` batch after
batch with ``return_dict_in_generate=True, output_scores=True`` (to compute
sequence log-probabilities later), every batch's output appended to a list.

    python generate_batches.py --keep outputs   # the whole GenerateOutput kept: every step's scores
                                                 # (batch x vocabulary, fp32) stay on the GPU
    python generate_batches.py --keep sequences # only out.sequences.cpu() kept (the fix)

Prompts are random token ids; the model is built from its config.  Options
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

from loop_setup import add_scenario_args, start_scenario  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--prompt_tokens", type=int, default=256)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--keep", default="outputs", choices=["outputs", "sequences"],
                   help="scenario: keep each batch's whole GenerateOutput (scores on the GPU) or only "
                        "out.sequences.cpu()")
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from models import from_config, hf_config

    start_scenario(args)
    cfg = hf_config(args.model)
    cfg.use_cache = True
    with torch.device("cuda"):
        model = from_config(AutoModelForCausalLM, cfg, torch.bfloat16)
    model.eval()
    print(f"Loaded {args.model}; {args.batches} batches of {args.batch_size} prompts x {args.prompt_tokens} "
          f"tokens, max_new_tokens={args.max_new_tokens}", flush=True)
    g = torch.Generator().manual_seed(0)
    results = []
    t0 = time.time()
    for i in range(1, args.batches + 1):
        ids = torch.randint(5, cfg.vocab_size, (args.batch_size, args.prompt_tokens), generator=g).cuda()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                 min_new_tokens=args.max_new_tokens, do_sample=True, top_p=0.9,
                                 return_dict_in_generate=True, output_scores=True)
        results.append(out if args.keep == "outputs" else out.sequences.cpu())
        print(f"batch {i}/{args.batches} done ({time.time() - t0:.1f}s), "
              f"memory_allocated={torch.cuda.memory_allocated() / 2**30:.2f}GiB", flush=True)
    print(f"Generated {len(results) * args.batch_size} samples", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, None, args.batches, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
