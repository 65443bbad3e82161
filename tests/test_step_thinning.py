"""Step lines kept in bulk (the line scanner hands them over a block at a time)
are kept exactly as one at a time would be: the same tail, the same strided
history, the same stride, for any split of the lines into lists."""

from __future__ import annotations

import random

import pytest

from oompost.parsers.base import EvidenceBuilder
from oompost.parsers.steps import StepParser


def _parser() -> StepParser:
    p = StepParser("x.log", EvidenceBuilder(), rank_hint=5)
    p.KEEP, p.HISTORY = 8, 6          # small bounds: thinning and stride doubling happen often
    return p


@pytest.mark.parametrize("seed", range(12))
def test_bulk_keeping_equals_one_at_a_time(seed):
    rng = random.Random(seed)
    items = []
    for n in range(1, rng.randint(1, 400)):
        r = rng.choice([None, 0, 1, 5, 12])           # None: no prefix (the file's rank hint, 5)
        raw = f"[rank{r}]: step {n} mem allocated=1.0GiB".encode() if r is not None else f"step {n} alloc=1GB".encode()
        items.append((n, raw, b"", raw.find(b"]:") if r is not None else 0))
    one, bulk = _parser(), _parser()
    for it in items:
        one._keep_item(int(it[1][5:it[3]]) if it[3] else 5, it)
    i = 0
    while i < len(items):
        k = rng.choice([1, 2, 3, 7, 8, 9, 30, 200])
        bulk.take_raw(items[i:i + k])
        i += k
    assert list(one._tails) == list(bulk._tails)
    for rank in one._tails:
        assert list(one._tails[rank]) == list(bulk._tails[rank])
        assert one._history[rank] == bulk._history[rank]
        assert one._seen_steps[rank] == bulk._seen_steps[rank]
        assert one._stride.get(rank, 1) == bulk._stride.get(rank, 1)
