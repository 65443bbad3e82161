"""The captures oompost.record made on the GPU machine (tests/data/record/README.md):
analyze of each capture directory alone gives the cause the run was built to produce."""

from __future__ import annotations

from pathlib import Path

import pytest

import oompost

DATA = Path(__file__).parent / "data" / "record"


@pytest.mark.parametrize("capture, cause", [("plain_leak", "leak"), ("hf_spike", "activation_spike"),
                                            ("ds_buckets", "comm_buffer")])
def test_capture_alone_gives_the_cause(capture: str, cause: str) -> None:
    report = oompost.analyze([str(DATA / capture)])
    assert report.cause == cause
    # hf_spike's OOM also has fragmentation's numbers (reserved-but-unallocated 326 MiB > the 56 MiB
    # request, largest hole 54 MiB): both rules hold at 0.65 and the calibrated verdict is a near tie
    # between the two (0.38 against 0.37 with the weights of 2026-12-04): right, and not overstated
    assert report.confidence >= (0.34 if capture == "hf_spike" else 0.5)


def test_leak_is_read_from_the_step_series_not_the_snapshot() -> None:
    """The per-step file is what proves a leak: with steps_rank0.jsonl the verdict is leak and
    more confident than from the snapshot alone, which can at best suspect it."""
    snap = DATA / "plain_leak" / "snapshot_rank0_oom.pickle.gz"
    alone = oompost.analyze([str(snap)])
    both = oompost.analyze([str(snap), str(DATA / "plain_leak" / "steps_rank0.jsonl")])
    assert both.cause == "leak"
    assert alone.cause != "leak" or alone.confidence < both.confidence


def test_deepspeed_capture_carries_the_engine_config() -> None:
    report = oompost.analyze([str(DATA / "ds_buckets")])
    assert report.rerun is not None and report.rerun.ds_config_diff
