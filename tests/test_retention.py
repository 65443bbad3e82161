"""LEAK003 on real snapshots: live blocks a forward allocated before the last optimizer step, more at one site
than a step allocates there, are a leak; one step's output held by a variable, activations, model and optimizer
state are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oompost
from oompost.analysis.retention import retention
from oompost.parsers.snapshot import load_snapshot

SAMPLES = Path(__file__).parent.parent / "sample_logs"
SNAP = "snapshot_rank0_oom.pickle.gz"

# training loops that keep a tensor from every step (all captured on the GPU machine, tools/capture)
KEEPING = ("leak_gpt2_val_loss_graph_2080ti",            # a held-out loss summed as a tensor keeps its graph
           "leak_logits_kept_for_metrics",               # logits appended for metrics
           "leak_pythia410m_bare_memory_prints_t4",      # the same graph-keeping loss on GPT-NeoX
           "leak_llama3.2_1b_epoch_logits_a100_80g",     # every step's logits kept for the epoch's accuracy
           "leak_pythia410m_epoch_logits_3060_12g",
           "leak_qwen2.5_0.5b_epoch_logits_3090_24g",
           "leak_unet_feature_hook_4070_12g",            # a forward hook storing feature maps
           "leak_gpt2_hidden_hook_3060_12g")             # a hook storing a middle layer's hidden states
# runs that keep nothing across steps: a spike whose loop variable still holds the previous step's logits,
# dynamic-padding fragmentation over three steps, capacity at the optimizer step
NOT_KEEPING = ("activation_spike_long_batch", "fragmentation_dynamic_padding", "fragmentation_t5_dynamic_padding",
               "fragmentation_unet_multires", "fragmentation_bert_large_dynamic_padding",
               "capacity_mistral7b_fp32_hf_trainer_a100_80g")


@pytest.mark.parametrize("case", KEEPING)
def test_a_tensor_kept_from_every_step_is_found_in_the_snapshot(case):
    r = retention(load_snapshot(str(SAMPLES / case / SNAP)))
    assert r is not None
    top = r.sites[0]
    assert top.kept >= 3 and top.kept > top.per_step
    assert r.material          # at least 5 % of the live memory at the OOM


@pytest.mark.parametrize("case", KEEPING)
def test_the_snapshot_alone_gives_a_leak(case):
    r = oompost.analyze([str(SAMPLES / case / SNAP)])
    assert r.cause == "leak", (r.cause, r.confidence)
    assert any(f.code == "LEAK003" for f in r.findings)


@pytest.mark.parametrize("case", NOT_KEEPING)
def test_nothing_is_kept_where_every_step_frees_its_forward(case):
    snap = load_snapshot(str(SAMPLES / case / SNAP))
    assert retention(snap) is None


def test_the_previous_steps_output_held_by_a_variable_is_one_steps_worth():
    # activation_spike_long_batch's loop keeps `outputs` until the next forward reassigns it: one 594 MiB logits
    # block allocated before the last optimizer step is alive at the OOM, and that must not read as a leak
    from oompost.analysis import retention as mod

    snap = load_snapshot(str(SAMPLES / "activation_spike_long_batch" / SNAP))
    assert mod.retention(snap) is None
    assert mod.MIN_KEPT == 3


# HF Trainer evaluations that keep every batch's logits (eval_accumulation_steps unset): no optimizer step in
# the trace to date blocks by, but the buffer nested_concat builds is live at the OOM
EVAL_KEEPING = ("leak_pythia410m_trainer_eval_logits_t4_16g", "leak_qwen2.5_0.5b_trainer_eval_logits_l4_24g",
                "leak_opt350m_trainer_eval_logits_3060_12g")


@pytest.mark.parametrize("case", EVAL_KEEPING)
def test_the_buffer_every_batchs_outputs_are_concatenated_into_is_found(case):
    r = retention(load_snapshot(str(SAMPLES / case / SNAP)))
    assert r is not None and not r.sites and r.boundaries <= 1
    assert r.concatenated is not None and r.concatenated.label.endswith("torch_pad_and_concatenate")
    assert r.concatenated.bytes >= 0.25 * r.live_bytes and r.material


def test_an_evaluation_that_runs_out_in_the_next_batchs_loss_is_still_the_kept_logits():
    # leak_opt350m_trainer_eval_logits_3060_12g (held-out seventh set, moved here after it drove this): the
    # failing allocation is the next eval batch's loss (ForCausalLMLoss upcasting its logits), not nested_concat;
    # 3.07 GiB of the 9.76 GiB live is the concatenated logits of the earlier batches
    case = "leak_opt350m_trainer_eval_logits_3060_12g"
    for files in ([SAMPLES / case / SNAP], [SAMPLES / case / "run.log", SAMPLES / case / SNAP]):
        r = oompost.analyze([str(f) for f in files])
        assert r.cause == "leak" and r.primary.code == "LEAK002", (files, r.cause)
    # from the log alone only the loop is known: the traceback runs through the Trainer's evaluation_loop, which
    # keeps every batch's outputs on the GPU unless eval_accumulation_steps is set (every corpus case whose OOM
    # strikes inside it is a leak: MAGICS-LAB/DNABERT_2#134, NVIDIA-Merlin/Transformers4Rec#693,
    # huggingface/transformers#17089)
    from oompost.analysis.context import build_context
    from oompost.parsers import parse_paths

    ctx = build_context(parse_paths([str(SAMPLES / case / "run.log")]))
    assert ctx.in_keeping_loop and ctx.growth_shown
    r = oompost.analyze([str(SAMPLES / case / "run.log")])
    assert r.cause == "leak" and r.primary.code == "LEAK002"
    assert any(n[0] == "failing inside" and n[1].startswith("evaluation_loop") for n in r.primary.numbers)


def test_a_material_kept_set_is_a_leak_before_fragmentation():
    # leak_gpt2_hidden_hook_3060_12g (held-out eighth set, moved here after it drove this): the next step's
    # 1.15 GiB logits fail while 1.27 GiB sits reserved-but-unallocated in 74 holes — fragmentation's test holds
    # too — and 47 hidden-state blocks (846 MiB, 9 % of live memory) were kept from earlier steps; DESIGN.md's
    # order puts the leak first
    from oompost.analysis.context import build_context
    from oompost.classify.constraints import impossible_causes
    from oompost.classify.base import Cause
    from oompost.parsers import parse_paths

    ctx = build_context(parse_paths([str(SAMPLES / "leak_gpt2_hidden_hook_3060_12g" / SNAP)]))
    assert ctx.retention is not None and ctx.retention.material
    assert ctx.retention.sites[0].kept == 47
    assert {Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE} <= impossible_causes(ctx)
    assert Cause.LEAK not in impossible_causes(ctx)


HELDOUT = Path(__file__).parent / "heldout_captures"
EVERY_SNAPSHOT = sorted(p.parent for root in (SAMPLES, HELDOUT) for p in root.glob(f"*/{SNAP}"))


@pytest.mark.parametrize("job", EVERY_SNAPSHOT, ids=lambda p: p.name)
def test_kept_memory_is_found_exactly_in_the_captures_proven_to_leak(job):
    # every real snapshot in the repository (each label proven by a counterfactual run): kept memory is found in
    # the leaks and in nothing else — a spike, fragmentation, capacity, comm buffer or config error keeps
    # nothing from one step (or batch) to the next
    expected = json.loads((job / "expected.json").read_text())["cause"]
    r = retention(load_snapshot(str(job / SNAP)))
    assert (r is not None and r.material) == (expected == "leak"), (expected, r)


@pytest.mark.parametrize("case, finished", [
    # five logged steps, then the sixth step's optimizer update fails: five finished, the failing one not counted
    ("leak_pythia410m_retain_graph_running_loss_tutorial_t4_16g", 5),
    # capacity at the first optimizer step (Adam's moments): nothing finished
    ("capacity_mistral7b_fp32_hf_trainer_a100_80g", 0),
])
def test_steps_finished_counts_the_optimizer_steps_a_trace_shows(case, finished):
    from oompost.analysis.retention import steps_finished

    d = SAMPLES / case
    snap = next(p for p in sorted(d.iterdir()) if ".pickle" in p.name)
    assert steps_finished(load_snapshot(str(snap))) == finished


def test_a_snapshot_alone_with_finished_steps_is_not_capacity():
    # the same leak from its snapshot alone: CAP001 once read an OOM in the optimizer step as "before any step
    # completed" and called it capacity (0.49); the trace shows five finished optimizer steps
    r = oompost.analyze(str(SAMPLES / "leak_pythia410m_retain_graph_running_loss_tutorial_t4_16g"
                            / "memory_snapshot.pickle.gz"))
    assert r.to_json()["cause"] == "leak"
    cap = next((f for f in r.findings if f.code == "CAP001"), None)
    assert cap is None or any("optimizer step(s) in the snapshot's trace finished" in s for s, _ in cap.signals)


def test_an_evaluation_keeping_every_batch_s_logits_is_found_batch_by_batch():
    # sample_logs/leak_qwen2.5_0.5b_accelerate_eval_logits_l4_24g: after four training steps, the evaluation appends
    # each batch's gathered fp32 logits (2.32 GiB) to a list on the GPU; no optimizer step separates them, so the
    # step-dated analysis saw nothing (the snapshot alone once read as fragmentation, 0.78)
    d = SAMPLES / "leak_qwen2.5_0.5b_accelerate_eval_logits_l4_24g"
    r = retention(load_snapshot(str(d / SNAP)))
    assert r is not None and r.batch_sites and not r.sites
    top = r.batch_sites[0]
    assert top.kept >= 3 and top.block_bytes == 8 * 512 * 151936 * 4 and "convert_to_fp32" in top.label
    rep = oompost.analyze([str(d / SNAP)])
    assert rep.to_json()["cause"] == "leak" and rep.findings[0].code == "LEAK004"


@pytest.mark.parametrize("case", NOT_KEEPING + ("activation_spike_qwen2.5_1.5b_bf16_ckpt_long_doc_tutorial_4090_24g",
                                                "activation_spike_qwen2.5_0.5b_compiled_long_doc_4080_16g",
                                                "activation_spike_mistral7b_lora_bf16_hf_trainer_a4000_16g"))
def test_one_forward_s_per_layer_blocks_are_not_kept_batches(case):
    # a forward allocates one block per layer at one line, all the same size: a layer apart in the trace, never a
    # batch apart (spikes whose OOM struck mid-forward after finished steps, and runs that keep nothing)
    d = SAMPLES / case
    snap = next(p for p in sorted(d.iterdir()) if ".pickle" in p.name)
    r = retention(load_snapshot(str(snap)))
    assert r is None or not r.batch_sites


def test_outputs_kept_across_generate_calls_are_dated_by_the_kv_cache():
    # leak_qwen2.5_0.5b_generate_output_scores_kept_t4_16g (held-out thirty-second set; from its snapshot alone
    # it was fragmentation 0.41 on arrival, it drove this and moved to sample_logs/): every batch's GenerateOutput
    # is appended to a list, so 2,376 score blocks (8 x 151,936 fp32) are alive while the sequence being generated
    # has at most 328 positions; its ring buffer holds only the last 60,000 events, so no call boundary is in it
    job = SAMPLES / "leak_qwen2.5_0.5b_generate_output_scores_kept_t4_16g"
    r = retention(load_snapshot(str(job / SNAP)))
    assert r is not None and r.material and not r.sites and not r.batch_sites
    (top,) = r.generated
    assert (top.kept, top.block_bytes, top.per_step) == (2376, 8 * 151936 * 4, 328)
    report = oompost.analyze([str(job / SNAP)])
    assert report.cause == "leak" and report.primary.code == "LEAK006"
    assert any("out.sequences.cpu()" in f.value for f in report.primary.fixes)
    # with the log, LEAK001 proves the growth from its memory prints and is the verdict; the snapshot's reading of
    # what is kept still puts its fix in the ranked list (a rule proving the same cause adds its fixes)
    both = oompost.analyze([str(job / "run.log"), str(job / SNAP)])
    assert both.primary.code == "LEAK001"
    assert any(x.finding.code == "LEAK006" and "out.sequences.cpu()" in str(x.fix.value) for x in both.fixes)
    # generations that keep nothing across calls: their per-token outputs never outnumber the cache's positions
    for name in ("activation_spike_qwen2_generate_accelerate_l4_24g", "activation_spike_kv_cache_generate_accelerate_16g"):
        job = next(d for d in (SAMPLES / name, HELDOUT / name) if d.exists())
        kept = retention(load_snapshot(str(job / SNAP)))
        assert kept is None or not kept.generated, name


def test_a_generation_whose_growth_outruns_free_memory_is_not_fragmentation():
    # activation_spike_qwen2.5_0.5b_generate_scores_one_call_t4_16g (held-out thirty-third set, LEAK006's negative
    # control; fragmentation from every view on arrival, it drove this and moved to sample_logs/): one generate()
    # call keeps its own per-token scores, so live memory grows ~21.6 MB a position over 1,140 positions, and the
    # 818 MiB still free (796 MiB in 326 holes, the largest 42 MiB, against a 44 MiB request) would last ~38 more
    from oompost.analysis.context import build_context
    from oompost.analysis.generation import generation_growth
    from oompost.analysis.snapshot_metrics import oom_device
    from oompost.classify.base import Cause
    from oompost.classify.constraints import impossible_causes
    from oompost.parsers import parse_paths

    job = SAMPLES / "activation_spike_qwen2.5_0.5b_generate_scores_one_call_t4_16g"
    snap = load_snapshot(str(job / SNAP))
    g = generation_growth(snap, oom_device(snap))
    assert g is not None and g.positions == 1140 and 20 << 20 < g.bytes_per_position < 23 << 20
    ctx = build_context(parse_paths([str(job / SNAP)]))
    assert Cause.FRAGMENTATION in impossible_causes(ctx)
    assert oompost.analyze([str(job / "run.log"), str(job / SNAP)]).cause == "activation_spike"
    # the kept-outputs leak of the same driver: its free memory lasts most of a call's positions, and the kept
    # set, not this constraint, rules fragmentation out there
    leak = SAMPLES / "leak_qwen2.5_0.5b_generate_output_scores_kept_t4_16g"
    ctx = build_context(parse_paths([str(leak / SNAP)]))
    g = ctx.generation
    assert g is not None and 1.81 * 2**30 > 0.1 * g.positions * g.bytes_per_position


def test_outputs_kept_in_an_evaluation_whose_trace_holds_no_optimizer_step_are_dated_by_whole_forwards():
    # sample_logs/leak_gpt2_medium_lightning_validation_outputs_4080_16g: trainer.validate() after fit, its
    # validation_step appending each batch's logits (196 MiB) for on_validation_epoch_end.  The trace's ring buffer
    # reaches back only into the validation, so no optimizer step scales the gaps; each gap between two kept
    # logits blocks is a whole forward (GPT-2's per-layer sites run 24 times) whose own memory is gone.  On
    # arrival it was called a logits spike in every view.
    d = SAMPLES / "leak_gpt2_medium_lightning_validation_outputs_4080_16g"
    r = retention(load_snapshot(str(d / SNAP)))
    assert r is not None and r.boundaries == 0 and not r.sites and r.batch_sites
    top = r.batch_sites[0]
    assert top.block_bytes == 2 * 1024 * 50257 * 2 and top.kept >= 40 and "modeling_gpt2.py" in top.label
    for view in ([str(d)], [str(d / SNAP)]):
        rep = oompost.analyze(view)
        assert rep.to_json()["cause"] == "leak" and rep.findings[0].code == "LEAK004"
        assert "a whole forward pass apart" in rep.findings[0].detail
    # one generate() call's per-token scores are a whole decode step apart too, but they are the call's own
    # (its negative control, LEAK006's business): not kept batches
    one = SAMPLES / "activation_spike_qwen2.5_0.5b_generate_scores_one_call_t4_16g"
    r1 = retention(load_snapshot(str(one / SNAP)))
    assert r1 is None or not r1.batch_sites


def test_the_hf_trainers_knob_is_offered_only_where_the_hf_trainer_ran():
    # LEAK004 on a Lightning validation and on an accelerate loop: eval_accumulation_steps is the HF Trainer's
    # argument and would do nothing there; under the HF Trainer's own evaluation loop it stays
    for case in ("leak_gpt2_medium_lightning_validation_outputs_4080_16g", "leak_qwen2.5_0.5b_accelerate_eval_logits_l4_24g"):
        rep = oompost.analyze([str(SAMPLES / case)])
        keys = [f.fix.key for f in rep.fixes]
        assert rep.findings[0].code == "LEAK004" and "keep reduced host copies" in keys, case
        assert "eval_accumulation_steps" not in keys, case
    hf = oompost.analyze([str(SAMPLES / "leak_qwen2.5_0.5b_trainer_eval_logits_l4_24g")])
    assert "eval_accumulation_steps" in [f.fix.key for f in hf.fixes]


def test_kept_outputs_of_one_tensor_size_in_two_block_sizes_are_one_kept_site():
    # sample_logs/leak_vit_b16_inference_features_kept_3060_12g: an inference script (no training at all) keeps
    # every batch's ViT features (64 x 197 x 768 fp32) on the GPU; the allocator shows them as blocks of 38,731,776
    # and 38,993,920 bytes (an unsplit 256 KiB remainder), interleaved, so neither size alone had freed gaps
    d = SAMPLES / "leak_vit_b16_inference_features_kept_3060_12g"
    r = retention(load_snapshot(str(d / SNAP)))
    assert r is not None and r.boundaries == 0 and r.batch_sites
    top = r.batch_sites[0]
    assert top.block_bytes == 64 * 197 * 768 * 4 and top.kept > 250 and "modeling_vit.py" in top.label
    assert oompost.analyze([str(d)]).to_json()["cause"] == "leak"
    # its negative control: one forward keeping all 13 layers' hidden states, a layer apart and each layer's
    # own memory freed, is not a batch kept after batch
    neg = Path(__file__).parent / "heldout_captures" / "activation_spike_vit_b16_hidden_states_batch2048_3060_12g"
    rn = retention(load_snapshot(str(neg / SNAP)))
    assert rn is None or not rn.batch_sites
