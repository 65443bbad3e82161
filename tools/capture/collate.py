"""The padding collator the capture scripts' HF Trainer runs share: each batch padded to its longest sample,
labels -100 on the padding (as ``DataCollatorForSeq2Seq`` does)."""

from __future__ import annotations


def pad_to_longest(samples: list[dict]) -> dict:
    """``input_ids`` zero-padded to the batch's longest sample; ``labels`` (the ids themselves when a sample has
    none) -100 on the padding."""
    import torch

    n = max(len(x["input_ids"]) for x in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.long)
    labels = torch.full((len(samples), n), -100, dtype=torch.long)
    for k, x in enumerate(samples):
        ids[k, : len(x["input_ids"])] = x["input_ids"]
        lab = x.get("labels", x["input_ids"])
        labels[k, : len(lab)] = lab
    return {"input_ids": ids, "labels": labels}
