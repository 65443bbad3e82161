"""The report's tables as DataFrames agree with the report they come from."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from oompost import analyze
from oompost.render.frames import ranks_frame, stacks_frame, timeline_frame

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"


def test_the_leak_step_series_is_a_frame_that_grows():
    report = analyze(str(SAMPLES / "leak_logits_kept_for_metrics" / "run.log"))
    df = timeline_frame(report)
    assert report.cause == "leak" and report.timeline_source == "steps"
    assert len(df) == len(report.timeline) >= 5
    assert df.attrs["unit"] == "step"
    assert [None if v is pd.NA else int(v) for v in df["allocated"]] == [p.allocated for p in report.timeline]
    alloc = df["allocated"].dropna()
    assert alloc.iloc[-1] > 2 * alloc.iloc[0]                               # the growth that proves the leak
    assert alloc.is_monotonic_increasing


def test_ranks_and_stacks_frames_match_the_report():
    report = analyze(str(SAMPLES / "nccl_watchdog_timeout"))
    df = ranks_frame(report)
    assert list(df.index) == [r.rank for r in report.ranks] and len(df) >= 1
    assert int(df["failed"].sum()) == sum(r.failed for r in report.ranks)
    snap = analyze(str(SAMPLES / "fragmentation_dynamic_padding"))
    st = stacks_frame(snap)
    assert len(st) == len(snap.top_stacks) > 0
    assert list(st["bytes"]) == [s.bytes for s in snap.top_stacks]
