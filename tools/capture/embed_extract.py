#!/usr/bin/env python
"""Feature extraction the way many scripts do it: an encoder run under
``torch.no_grad()`` over a dataset, each batch's token features appended to
one tensor with ``torch.cat`` on the GPU, so the tensor grows batch after
batch until the card is full.

    python embed_extract.py --model bert-large --batch_size 64 --seq_len 512 --keep gpu

``--keep cpu`` moves each batch's features to the host and concatenates
them once at the end (the forum's fix).
Inputs are random token ids; the model is built from its config.  Options
that only stage a scenario say "scenario:" in their help.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from loop_setup import add_scenario_args, start_scenario  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="bert-large")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--seq_len", type=int, default=512)
    p.add_argument("--num_samples", type=int, default=12800)
    p.add_argument("--keep", default="gpu", choices=["gpu", "cpu"],
                   help="scenario: where each batch's last_hidden_state is concatenated")
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModel

    from models import from_config, hf_config

    start_scenario(args)
    cfg = hf_config(args.model)
    with torch.device("cuda"):
        model = from_config(AutoModel, cfg)
    model.eval()
    print(f"Loaded {args.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", flush=True)

    g = torch.Generator().manual_seed(0)
    n_batches = args.num_samples // args.batch_size
    embeddings, kept = None, []
    with torch.no_grad():
        for _ in tqdm(range(n_batches), desc="Extracting features", mininterval=0):
            ids = torch.randint(5, cfg.vocab_size, (args.batch_size, args.seq_len), generator=g).cuda()
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            if args.keep == "cpu":
                kept.append(out.cpu())
            else:
                embeddings = out if embeddings is None else torch.cat((embeddings, out), dim=0)
    if kept:
        embeddings = torch.cat(kept, dim=0)
    print(f"Extracted features: {tuple(embeddings.shape)}, "
          f"max_reserved={torch.cuda.max_memory_reserved() / 2**30:.2f}GiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
