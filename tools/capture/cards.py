"""Emulating the cards users have on one H200.

``torch.cuda.set_per_process_memory_fraction`` caps only PyTorch's caching
allocator.  A real card's "total capacity" also has to hold the CUDA context
(~0.5 GiB on these GPUs), so the cap is the card's reported total minus that.
The OOM message then reports the H200's capacity plus an "X allowed;" figure.
"""

from __future__ import annotations

GiB = 1024**3
CONTEXT_BYTES = int(0.5 * GiB)

# what torch reports as total_memory on each card (GiB)
CARDS = {
    "rtx2080ti": 10.75,
    "rtx4080": 15.70,
    "rtx3090": 23.69,
    "rtx4090": 23.65,
    "a100-40g": 39.39,
    "a100-80g": 79.15,
    "h100-80g": 79.10,
    # held-out captures (tests/heldout_captures)
    "rtx3060-12g": 11.76,
    "rtx4070": 11.72,
    "rtx4000ada": 19.67,
    "l4": 22.03,
    "a6000": 47.54,
    # held-out captures, second set
    "v100-16g": 15.77,
    "t4": 14.75,
    # held-out captures, third set
    "a4000": 15.72,
    # held-out captures, eighth set
    "rtx3070": 7.79,
}


def allowed_bytes(card: str | None = None, limit_gib: float | None = None) -> int | None:
    if limit_gib is not None:
        return int(limit_gib * GiB)
    if card is None:
        return None
    return int(CARDS[card] * GiB) - CONTEXT_BYTES


def apply_limit(card: str | None = None, limit_gib: float | None = None, log=print) -> int | None:
    """Cap this process's allocator; returns the allowed bytes (None: no cap)."""
    import torch

    allowed = allowed_bytes(card, limit_gib)
    if allowed is None:
        return None
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = allowed / total
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    what = f"a {CARDS[card]:.2f} GiB card ({card})" if card else f"{allowed / GiB:.2f} GiB"
    log(f"[capture] emulating {what}: torch.cuda.set_per_process_memory_fraction({fraction:.4f}) "
        f"-> {allowed / GiB:.2f} GiB allowed")
    return allowed
