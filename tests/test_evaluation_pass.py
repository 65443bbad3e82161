"""An OOM in an evaluation pass whose batch is far larger than the training batch (a real HF Trainer capture:
training at 4 x 1,024 tokens fits, the first evaluation batch of 64 does not), and a buffer concatenated onto
itself batch after batch read from a snapshot's trace alone (a real feature-extraction capture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oompost.analysis.context import build_context
from oompost.analysis.evaluation import evaluation_pass, scaled_peak, smaller_eval_batch
from oompost.analysis.retention import retention
from oompost.analysis.site_history import site_history
from oompost.classify.base import Cause
from oompost.classify.constraints import impossible_causes
from oompost.parsers import parse_paths
from oompost.parsers.snapshot import load_snapshot
from sample_cache import analyzed

SAMPLES = Path(__file__).parent.parent / "sample_logs"
EVAL = SAMPLES / "activation_spike_qwen2.5_0.5b_trainer_eval_batch64_3090_24g"
CAT = SAMPLES / "leak_bert_large_embedding_cat_extract_3060_12g"
SNAP = "snapshot_rank0_oom.pickle.gz"
GiB = 2**30


def _ctx(*paths: Path):  # type: ignore[no-untyped-def]
    return build_context(parse_paths([str(p) for p in paths]))


def _log_without(tmp_path: Path, drop: str) -> Path:
    out = tmp_path / "run.log"
    out.write_text("".join(ln for ln in (EVAL / "run.log").read_text().splitlines(True) if drop not in ln))
    return out


def test_the_evaluation_banner_s_batch_is_read_and_the_training_banner_s_is_not():
    ev = parse_paths([str(EVAL / "run.log")])
    assert ev.fact("train.per_device_eval_batch_size").value == 64
    assert ev.fact("train.per_device_train_batch_size").value == 4
    # the tutorial loop prints "  Batch size = 8" under "***** Running training *****": not an evaluation batch
    tut = parse_paths([str(SAMPLES / "leak_pythia410m_retain_graph_running_loss_tutorial_t4_16g" / "run.log")])
    assert "Batch size = " in (SAMPLES / "leak_pythia410m_retain_graph_running_loss_tutorial_t4_16g" /
                               "run.log").read_text()
    assert tut.fact("train.per_device_eval_batch_size") is None


def test_an_evaluation_loop_holding_less_than_the_request_keeps_no_batch():
    ctx = _ctx(EVAL / "run.log")
    # the OOM is inside the HF Trainer's evaluation_loop, but 2.95 GiB allocated < the 18.55 GiB request
    assert ctx.oom.allocated_bytes < ctx.oom.requested_bytes
    assert ctx.keeping_loop is None and not ctx.growth_shown
    assert Cause.LEAK in impossible_causes(ctx)
    # the captures that do keep every batch's logits still count as keeping (allocated far above the request)
    keeping = _ctx(SAMPLES / "leak_opt350m_trainer_eval_logits_3060_12g" / "run.log")
    assert keeping.keeping_loop is not None


def test_the_failing_request_is_exactly_one_evaluation_batch_s_logits():
    ctx = _ctx(EVAL / "run.log")
    ev = evaluation_pass(ctx)
    assert ev is not None and ev.hf and ev.batch == 64 and ev.frame.name == "prediction_step"
    assert ev.logits_bytes_per_value == 2            # 64 x 1,024 x 151,936 x 2 bytes
    # with the loss's fp32 temporaries still to come, no layout of the free memory holds the phase
    assert Cause.FRAGMENTATION in impossible_causes(ctx)


def test_no_evaluation_pass_in_a_training_step():
    for case in ("activation_spike_long_batch", "capacity_qwen2.5_3b_fp32_trainer_3090_24g"):
        assert evaluation_pass(_ctx(SAMPLES / case / "run.log")) is None, case


def test_a_smaller_evaluation_batch_is_priced_by_scaling_the_failing_allocation():
    ctx = _ctx(EVAL / "run.log")
    ev = evaluation_pass(ctx)
    # held 2.95 GiB live + 3.42 GiB cached, + 18.55 GiB x 5 (logits, fp32 copy, log-softmax) x new / 64
    held = ctx.oom.allocated_bytes + ctx.oom.reserved_unallocated_bytes
    assert scaled_peak(ctx, ev, 8) == pytest.approx(held + ctx.oom.requested_bytes * 5 / 8)
    new, peak = smaller_eval_batch(ctx, ev)
    assert new == 8 and peak <= 0.9 * ctx.limit_bytes < scaled_peak(ctx, ev, 16)


def test_the_verdict_names_the_evaluation_batch_and_not_the_training_knobs():
    r = analyzed(str(EVAL / "run.log"))
    assert r.cause == "activation_spike" and r.confidence >= 0.8
    top = r.findings[0]
    assert top.code == "ACT001" and "evaluation batch" in top.title
    assert r.rerun is not None and r.rerun.trainer_args == {"per_device_eval_batch_size": 8}
    assert r.rerun.predicted_peak_bytes < r.rerun.device_bytes
    nots = {n.what for n in r.not_worth}
    assert {"gradient checkpointing", "eval_accumulation_steps"} <= nots
    assert not any(f.fix.key in ("gradient_checkpointing", "per_device_train_batch_size") for f in r.fixes)


def test_the_snapshot_alone_reads_a_batch_sixteen_times_the_training_one():
    snap = load_snapshot(str(EVAL / SNAP))
    ctx = _ctx(EVAL / SNAP)
    hist = site_history(snap, ctx.oom.requested_bytes)
    # the lm_head line allocated 1.16 GiB in each training step the trace holds; the evaluation asks 18.55 GiB
    assert hist.site.startswith("modeling_qwen2.py:") and hist.ratio == pytest.approx(16.0)
    slack = ctx.oom.reserved_unallocated_bytes + (ctx.limit_bytes - ctx.oom.reserved_bytes)
    assert hist.scaled_demand > slack
    assert Cause.FRAGMENTATION in impossible_causes(ctx)
    r = analyzed(str(EVAL / SNAP))
    assert r.cause == "activation_spike"
    assert any(f.fix.key == "per_device_eval_batch_size" and "16" in str(f.fix.value) for f in r.fixes)


@pytest.mark.parametrize("case", ["fragmentation_t5_dynamic_padding", "leak_pythia410m_epoch_logits_3060_12g",
                                  "activation_spike_eager_attention_hf_trainer_a100_40g",
                                  "capacity_mistral7b_fp32_hf_trainer_a100_80g"])
def test_a_line_allocating_as_before_gives_no_larger_batch(case):
    snap = load_snapshot(str(SAMPLES / case / SNAP))
    ctx = _ctx(SAMPLES / case / SNAP)
    hist = site_history(snap, ctx.oom.requested_bytes)
    assert hist is None or hist.ratio < 4


def test_a_larger_batch_whose_remaining_demand_fits_the_slack_can_still_be_fragmentation():
    # the multi-resolution UNet: the failing line asks 9x what it did at the smaller resolutions, but what the
    # same forward needed after it, scaled 9x, still fits reserved-but-unallocated plus the headroom: the layout
    # decides (expandable_segments completed this run under the same cap)
    case = SAMPLES / "fragmentation_unet_multires"
    ctx = _ctx(case / SNAP)
    hist = site_history(load_snapshot(str(case / SNAP)), ctx.oom.requested_bytes)
    assert hist.ratio > 4
    slack = ctx.oom.reserved_unallocated_bytes + (ctx.limit_bytes - ctx.oom.reserved_bytes)
    assert hist.scaled_demand < slack
    assert Cause.FRAGMENTATION not in impossible_causes(ctx)
    assert analyzed(str(case)).cause == "fragmentation"


def test_the_snapshot_of_a_long_batch_after_short_ones_shows_the_ratio():
    snap = load_snapshot(str(SAMPLES / "activation_spike_long_batch" / SNAP))
    ctx = _ctx(SAMPLES / "activation_spike_long_batch" / SNAP)
    assert site_history(snap, ctx.oom.requested_bytes).ratio == pytest.approx(16.0)     # 8,192 vs 512 tokens


def test_a_tensor_concatenated_onto_itself_is_read_from_the_trace():
    r = retention(load_snapshot(str(CAT / SNAP)))
    assert r is not None and r.material and r.concatenated is not None
    assert r.concatenated.step == 64 * 512 * 1024 * 4          # one batch's last_hidden_state, fp32
    assert r.concatenated.bytes == 4 * GiB and r.concatenated.label.endswith("embed_extract.py:62 in main")
    rep = analyzed(str(CAT / SNAP))
    assert rep.cause == "leak"
    assert any(n == ("grows per batch (trace)", "128.00 MiB") for n in rep.findings[0].numbers)


def test_the_extraction_log_alone_is_a_leak_from_its_concatenation_line():
    assert analyzed(str(CAT / "run.log")).cause == "leak"


def test_without_the_banner_the_evaluation_batch_is_read_off_the_request(tmp_path):
    # the evaluation banner gone (a pasted excerpt): 18.55 GiB at the logits is 64 sequences of 1,024 x 151,936
    # bf16 values, so the batch is inferred — and said to be
    log = _log_without(tmp_path, "Batch size = 64")
    ctx = _ctx(log)
    assert ctx.setup.eval_batch is None and ctx.keeping_loop is None
    ev = evaluation_pass(ctx)
    assert ev.batch == 64 and ev.batch_inferred and ev.logits_bytes_per_value == 2
    r = analyzed(str(log))
    assert r.cause == "activation_spike"
    assert r.rerun.trainer_args == {"per_device_eval_batch_size": 8}
    assert any("inferred" in a for a in r.rerun.assumed)


LONG = SAMPLES / "activation_spike_qwen2.5_0.5b_trainer_long_sample_step12_3090_24g"


def test_the_failing_line_is_compared_with_the_steps_that_ran_not_with_its_own_forward():
    # the twelfth step's 16,384-token forward had already made 20 allocations at the failing MLP line (608 MiB
    # each) before one failed: only the eleven steps before the last optimizer step count (38 MiB there)
    snap = load_snapshot(str(LONG / SNAP))
    ctx = _ctx(LONG / SNAP)
    hist = site_history(snap, ctx.oom.requested_bytes)
    assert hist.earlier_max == 4 * 1024 * 4864 * 2 and hist.ratio == pytest.approx(16.0)


def test_one_long_sample_is_capped_first_and_the_logged_shape_is_not_priced():
    r = analyzed(str(LONG))
    assert r.cause == "activation_spike" and "one larger batch" in r.findings[0].title
    assert r.rerun is None                       # the failing batch's shape is not in the inputs
    assert r.fixes[0].fix.key == "max_seq_length"
    ckpt = next(f for f in r.fixes if f.fix.key == "gradient_checkpointing")
    assert ckpt.predicted_peak_bytes is None and "16x" in ckpt.note


def test_a_resume_killed_for_host_ram_is_told_to_load_the_state_dict_without_a_host_copy():
    case = SAMPLES / "host_oom_qwen2.5_1.5b_torch_load_cpu_cgroup_6g"
    ev = parse_paths([str(case / "run.log")])
    assert "Resuming from checkpoint" in ev.fact("cue.model_loading").ref.text
    r = analyzed(str(case))
    assert r.cause == "host_oom"
    top = r.fixes[0].fix
    assert top.key == "load without a full host copy" and "map_location='cuda'" in top.value
    assert not any("more host RAM" in f.fix.key for f in r.fixes)


def test_a_prefill_s_eager_attention_gets_the_attention_kernel_not_a_training_plan():
    r = analyzed(str(SAMPLES / "activation_spike_qwen2.5_0.5b_generate_32k_eager_l4_24g"))
    assert r.cause == "activation_spike" and r.sub_cause == "attention"
    assert r.rerun is None
    assert (r.fixes[0].fix.key, r.fixes[0].fix.value) == ("attn_implementation", "sdpa")
    assert not any(f.fix.key in ("gradient_checkpointing", "per_device_train_batch_size") for f in r.fixes)
    assert "gradient checkpointing" in {n.what for n in r.not_worth}


def test_a_host_kill_inside_an_evaluation_leads_with_what_the_evaluation_keeps():
    case = SAMPLES / "host_oom_qwen2.5_0.5b_trainer_eval_accumulation_cgroup_10g"
    ev = parse_paths([str(case / "run.log")])
    assert ev.fact("train.evaluating_at_end").ref.text.strip() == "***** Running Evaluation *****"
    r = analyzed(str(case))
    assert r.cause == "host_oom"
    assert [f.fix.key for f in r.fixes[:2]] == ["preprocess_logits_for_metrics", "prediction_loss_only"]
    assert not any("DataLoader" in f.fix.key for f in r.fixes)



def test_a_log_whose_training_went_on_after_an_evaluation_does_not_end_inside_one(tmp_path):
    # the real evaluation capture's log with one of its own training log lines repeated after the banner (as the
    # Trainer prints when it resumes training): the log no longer ends inside the evaluation
    lines = (EVAL / "run.log").read_text().splitlines(True)
    train = next(ln for ln in lines if "{'loss':" in ln)
    banner = next(i for i, ln in enumerate(lines) if "Running Evaluation" in ln)
    (tmp_path / "run.log").write_text("".join(lines[:banner + 3] + [train]))
    assert parse_paths([str(EVAL / "run.log")]).fact("train.evaluating_at_end") is not None
    assert parse_paths([str(tmp_path / "run.log")]).fact("train.evaluating_at_end") is None


def test_an_evaluation_holding_more_than_its_request_is_no_confident_spike_from_its_log():
    # the Accelerate evaluation that kept every batch's logits in a list: from its log alone (no snapshot, no
    # memory prints) a kept list and a batch too large read the same, so a spike verdict stays below 0.8
    case = SAMPLES / "leak_qwen2.5_0.5b_accelerate_eval_logits_l4_24g"
    ctx = _ctx(case / "run.log")
    assert ctx.oom.allocated_bytes >= ctx.oom.requested_bytes and evaluation_pass(ctx) is not None
    r = analyzed(str(case / "run.log"))
    assert r.cause == "leak" or r.confidence < 0.8
    # the evaluation batch far larger than the training one, with less live than its request, is not held back
    assert analyzed(str(EVAL / "run.log")).confidence >= 0.9


VAL_GRAPH = SAMPLES / "leak_vgg_cnn_val_loss_graph_3070_8g"


def test_pytorch_s_warning_naming_a_summed_loss_is_read_as_a_kept_graph():
    for case, name in ((VAL_GRAPH, "val_loss"), (SAMPLES / "leak_gpt2_val_loss_graph_2080ti", "val_total")):
        f = parse_paths([str(case / "run.log")]).fact("cue.graph_kept")
        assert f is not None and f.value == name, case
    r = analyzed(str(VAL_GRAPH / "run.log"))           # the log alone: no memory prints at all
    assert r.cause == "leak" and r.findings[0].code == "LEAK005"
    assert r.fixes[0].fix.key == "val_loss += loss.item()"


def test_a_training_loss_printed_after_its_backward_is_not_a_kept_graph(tmp_path):
    # the same warning quoting a plain training loss (float(loss) after backward holds nothing): not recorded
    text = (VAL_GRAPH / "run.log").read_text().replace("float(val_loss) / (it // args.val_every)", "float(loss)")
    (tmp_path / "run.log").write_text(text)
    assert parse_paths([str(tmp_path / "run.log")]).fact("cue.graph_kept") is None
    # and a warning whose quoted line is missing (a pasted excerpt) says nothing either
    lines = [ln for ln in (VAL_GRAPH / "run.log").read_text().splitlines(True) if "float(val_loss)" not in ln]
    (tmp_path / "cut.log").write_text("".join(lines))
    assert parse_paths([str(tmp_path / "cut.log")]).fact("cue.graph_kept") is None
