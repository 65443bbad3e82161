"""One report, one story: the fix list, the plan and the pictures agree with the verdict.

``oompost.report_checks.problems`` is run over the JSON of every bundled
capture (and every case of a corpus directory, when one is present): no fix
in both lists, the top fix fits or is labelled, one prediction per
configuration, the estimate's parts add up to its peak (1 %), a change of the
global batch is stated in the summary.  The ranking rules are also tested on
hand-made findings, and the checks themselves on reports made inconsistent on
purpose (so they can fail).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import oompost
from oompost.classify.base import Cause, Finding, Fix, NotAFix, Severity
from oompost.render import render
from oompost.report_checks import problems

ROOT = Path(__file__).parent.parent
SAMPLES = ROOT / "sample_logs"
CASES: dict[str, list[str]] = {p.name: [str(p.resolve())] for p in sorted(SAMPLES.iterdir()) if p.is_dir()}
try:                                    # the real-world corpus (tests/corpus/, its case.json lists the files)
    from corpus_cases import load_cases
except ImportError:                     # pragma: no cover - a checkout without the corpus
    load_cases = None
if load_cases is not None:
    CASES.update({f"corpus/{c.name}": c.files for c in load_cases()})


@pytest.fixture(scope="module")
def reports() -> dict:
    from sample_cache import analyzed

    return {name: (analyzed(files[0]) if len(files) == 1 and Path(files[0]).is_dir() else oompost.analyze(files))
            for name, files in CASES.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_report_tells_one_story(case, reports):
    data = reports[case].to_json()
    assert problems(data) == []


@pytest.mark.parametrize("case", list(CASES))
def test_rerun_plan_is_the_top_fix_and_carries_the_plans_prediction(case, reports):
    r = reports[case]
    if r.rerun is None or not (r.rerun.changes or r.rerun.env or r.rerun.trainer_args):
        assert not any(x.plan for x in r.fixes)
        return
    plan = [x for x in r.fixes if x.plan]
    assert len(plan) == 1
    assert plan[0].predicted_peak_bytes == r.rerun.predicted_peak_bytes
    assert plan[0].changes == r.rerun.changes
    if plan[0].verdict in ("fits", "replays", ""):
        assert r.fixes[0].plan


def test_seed_case_has_one_prediction_for_its_plan(reports):
    """The seed (7B, ZeRO-2 + offload, 24 GB): the plan is ZeRO-3, where the offload_param already in the
    config takes effect; the rule's 'stage 3 + offload' fix is that same configuration, so it is folded into
    the plan instead of being listed with a second number."""
    r = reports["capacity_zero2_offload_7b_3090"]
    top = r.fixes[0]
    assert top.plan and top.verdict == "fits"
    assert any("zero_optimization.stage" in f for f in top.folded)
    assert not any(x.fix.key.startswith("zero_optimization.stage") for x in r.fixes[1:])
    from oompost.units import fmt_bytes

    assert fmt_bytes(r.rerun.predicted_peak_bytes) in r.summary


def test_replays_are_not_called_fits(reports):
    for r in reports.values():
        for c in r.to_json()["counterfactuals"] or []:
            if not c["oom"]:
                assert c["result"] in ("replays", "replays_tight")
                assert "fits" not in c["note"]
        for x in r.fixes:
            if x.basis == "replay":
                assert x.verdict in ("replays", "replays_tight", "replay_fails")
                assert "replays without failing" in x.note or "still fails" in x.note


def test_the_batch_mismatch_plan_keeps_the_global_batch(reports):
    r = reports["config_error_batch_mismatch"]
    assert r.rerun.global_batch[0] == r.rerun.global_batch[1] == 32
    assert r.rerun.ds_config["gradient_accumulation_steps"] * r.rerun.ds_config[
        "train_micro_batch_size_per_gpu"] == 32
    alt = [x for x in r.fixes if x.fix.key == "train_batch_size"]
    assert alt and "changes the global batch 32 → 16" in alt[0].why


def test_leak_timeline_is_the_per_step_series(reports):
    r = reports["leak_logits_kept_for_metrics"]
    assert r.timeline_source == "steps"
    alloc = [p.allocated for p in r.timeline if p.allocated is not None]
    assert len(alloc) >= 10 and alloc[-1] > 3 * alloc[0]
    assert r.timeline[-1].label == "oom"


# ------------------------------------------------------------------ the ranking on hand-made findings


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    from oompost.analysis.context import build_context
    from oompost.parsers import parse_paths

    log = tmp_path_factory.mktemp("run") / "run.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                   "capacity of 79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has "
                   "77.68 GiB memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 6.20 GiB "
                   "is reserved by PyTorch but unallocated.\n")
    return build_context(parse_paths([str(log)]))


def _f(code, cause, conf, fixes=(), nots=(), primary=False, severity=Severity.CAUSE):
    return Finding(code, cause, code, conf, fixes=tuple(fixes), not_fixes=tuple(nots), primary=primary,
                   severity=severity)


def test_a_finding_that_did_not_hold_contributes_nothing(ctx):
    from oompost.remedies.ranking import rank

    primary = _f("A", Cause.ACTIVATION_SPIKE, 0.8, [Fix("code", "chunked loss", None, "x")], primary=True)
    weak = _f("B", Cause.CAPACITY, 0.2, [Fix("ds_config", "zero_optimization.stage", 3, "y")],
              [NotAFix("something", "z")])
    fixes, nots = rank(ctx, (primary, weak), None)
    assert [x.finding.code for x in fixes] == ["A"]
    assert nots == ()


def test_nothing_is_both_a_fix_and_not_worth_trying(ctx):
    from oompost.remedies.ranking import rank

    primary = _f("A", Cause.LEAK, 0.9, [Fix("code", "log scalars", None, "x")],
                 [NotAFix("expandable_segments", "the memory is really used"),
                  NotAFix("torch.cuda.empty_cache()", "nothing cached")], primary=True)
    advice = _f("ADV", Cause.UNKNOWN, 0.9, [Fix("env", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "y"),
                                             Fix("code", "record history", None, "w")],
                [NotAFix("torch.cuda.empty_cache()", "nothing cached")], severity=Severity.ADVICE)
    fixes, nots = rank(ctx, (primary, advice), None)
    keys = [x.fix.key for x in fixes]
    assert "PYTORCH_CUDA_ALLOC_CONF" not in keys and "record history" in keys      # the verdict's 'not' wins
    assert [n.what for n in nots] == ["expandable_segments", "torch.cuda.empty_cache()"]   # once each


def test_fixes_that_do_not_fit_rank_below_those_that_fit():
    from oompost.remedies.ranking import _GROUP

    assert _GROUP["fits"] < _GROUP[""] == _GROUP["tight"] < _GROUP["too_large"]
    assert _GROUP["replays"] < _GROUP["replays_tight"] < _GROUP["replay_fails"]


# ------------------------------------------------------------------ the checks can fail


def test_checks_catch_contradictions(reports):
    good = reports["capacity_zero2_offload_7b_3090"].to_json()
    assert problems(good) == []

    both = copy.deepcopy(good)
    both["not_worth_trying"].append({"what": "lora_r = 16", "why": "…"})
    assert any("also under 'not worth trying'" in p for p in problems(both))

    weak = copy.deepcopy(good)
    weak["findings"].append({"code": "W1", "confidence": 0.2, "primary": False})
    weak["fixes"].append({**weak["fixes"][-1], "rank": 9, "from": "W1", "key": "x.y"})
    assert any("did not hold" in p for p in problems(weak))

    order = copy.deepcopy(good)
    order["fixes"][0]["verdict"] = "too_large"
    assert any("ranks above" in p for p in problems(order))

    two = copy.deepcopy(good)
    two["fixes"][0]["predicted_peak_bytes"] += 5 * 2**30
    assert any("the plan's fix says" in p for p in problems(two))

    parts = copy.deepcopy(good)
    parts["estimate"]["parts"].append(["counted twice", parts["estimate"]["parts"][0][1]])
    assert any("add up" in p for p in problems(parts))

    batch = copy.deepcopy(good)
    batch["rerun"]["global_batch"] = {"before": 32, "after": 16}
    assert any("global batch" in p for p in problems(batch))

    replay = copy.deepcopy(reports["fragmentation_dynamic_padding"].to_json())
    replay["counterfactuals"][1]["note"] = "fits: peak reserved 29.02 GiB"
    assert any("called 'fits'" in p for p in problems(replay))


# ------------------------------------------------------------------ the shipped JSON Schema


def test_every_report_json_validates_against_the_shipped_schema(reports):
    jsonschema = pytest.importorskip("jsonschema")
    from oompost.report import json_schema

    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    for name, r in reports.items():
        errors = sorted(v.iter_errors(json.loads(render(r, "json"))), key=str)
        assert not errors, (name, [f"{list(e.path)}: {e.message}" for e in errors[:5]])
    bad = json.loads(render(reports["leak_logits_kept_for_metrics"], "json"))
    bad["cause"] = "gremlins"
    assert list(v.iter_errors(bad))


# ------------------------------------------------------------------ the rerun plan from the log (issue 6 §5)


def test_seed_case_gets_its_plan_from_the_log_and_the_config_alone(tmp_path):
    """No snapshot: the 7B ZeRO-2 + offload run's log and its ds_config give a complete plan,
    the model size inferred from the log, accepted by DeepSpeed's own validation."""
    seed = SAMPLES / "capacity_zero2_offload_7b_3090"
    r = oompost.analyze([seed / "run.log"], ds_config=seed / "ds_config.json")
    assert r.cause == "capacity" and r.rerun is not None
    assert r.rerun.ds_config is not None and r.rerun.ds_config["zero_optimization"]["stage"] == 3
    assert r.rerun.predicted_peak_bytes and r.rerun.fits
    assert r.rerun.validated_by_deepspeed in (True, None)        # None only where DeepSpeed is not installed
    assert problems(r.to_json()) == []


def test_without_the_config_the_plan_is_the_minimal_diff_and_says_what_it_assumed(tmp_path):
    seed = SAMPLES / "capacity_zero2_offload_7b_3090"
    log = tmp_path / "run.log"
    log.write_text("".join(ln for ln in (seed / "run.log").read_text().splitlines(keepends=True)
                           if not ln.startswith("DeepSpeed config:")))
    r = oompost.analyze(log)
    assert r.rerun is not None and r.rerun.ds_config is None
    assert r.rerun.ds_config_diff.get("zero_optimization", {}).get("stage") == 3
    assert r.rerun.predicted_peak_bytes and r.rerun.assumed
    assert any("not in the inputs" in n for n in r.rerun.notes)
    assert not any("did not use DeepSpeed" in n for n in r.rerun.notes)
    assert problems(r.to_json()) == []


def test_predictions_outside_the_measured_range_say_so(tmp_path):
    seed = SAMPLES / "capacity_zero2_offload_7b_3090"
    job = tmp_path / "job"
    job.mkdir()
    (job / "run.log").write_text((seed / "run.log").read_text().replace("torch 2.11.0+cu130", "torch 2.4.1+cu121"))
    (job / "ds_config.json").write_text((seed / "ds_config.json").read_text())
    r = oompost.analyze(job)
    assert "±5%, outside the measured range" in r.summary
    priced = [x for x in r.fixes if x.basis == "model"]
    assert priced and all("torch 2.4.1 (measured: 2.11)" in x.note for x in priced)
    inside = oompost.analyze([seed / "run.log", seed / "ds_config.json"])
    assert "measured range" not in inside.summary


def test_a_batch_larger_than_every_logged_step_is_not_priced_at_the_logged_shape():
    """sample_logs/activation_spike_fsdp2_llama3.2_1b_long_doc_a100_40g: one 8,192-token document after 4 x 512
    steps.  Gradient checkpointing, priced at the logged shape as fitting, failed on the GPU (its capture.json's
    rerun_validation); the report prices nothing it cannot see and puts the cap on the longest sample first."""
    name = "activation_spike_fsdp2_llama3.2_1b_long_doc_a100_40g"
    report = oompost.analyze([str(SAMPLES / name)])
    assert json.loads((SAMPLES / name / "capture.json").read_text())["rerun_validation"]["outcome"] == "oom"
    assert report.rerun is None
    j = report.to_json()
    fixes = j["fixes"]
    assert fixes[0]["key"] == "max_seq_length"
    assert not any(f["basis"] == "model" for f in fixes)
    assert any("not priced: the batch that failed" in f["note"] for f in fixes)
