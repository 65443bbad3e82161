"""The CI fuzz run: every parser target, fixed seeds, about 60 seconds in all.

Each target gets an equal share of the budget in seeded hypothesis rounds
(tests/fuzz/targets.py); any exception other than oompost's InputError fails
the test with the input that caused it.  The long per-parser runs are in
docs/fuzzing.md (python -m tests.fuzz.run TARGET --seconds 600)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("hypothesis")

from fuzz.run import hypothesis_rounds  # noqa: E402
from fuzz.targets import TARGETS  # noqa: E402

TOTAL_SECONDS = float(os.environ.get("OOMPOST_FUZZ_SECONDS", "60"))


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_fixed_seed(target: str) -> None:
    stats = hypothesis_rounds(target, TOTAL_SECONDS / len(TARGETS), base_seed=20261203, examples_per_round=50)
    assert stats["examples"] >= 50                     # it ran at least one full round
