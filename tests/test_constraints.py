"""The hard constraints (classify/constraints.py): causes no weight may bring back.  Real captures and
corpus cases only."""

from __future__ import annotations

from pathlib import Path

from oompost import analyze
from oompost.analysis.context import build_context
from oompost.parsers import parse_paths

ROOT = Path(__file__).resolve().parents[1]
BARE = ROOT / "sample_logs" / "leak_pythia410m_bare_memory_prints_t4" / "run.log"
CORPUS = ROOT / "tests" / "corpus"


def test_a_flat_step_series_up_to_the_oom_rules_out_a_leak(tmp_path):
    import shutil

    from oompost.classify import impossible_causes
    from oompost.classify.base import Cause

    record = ROOT / "tests" / "data" / "record"
    flat = build_context(parse_paths([str(record / "hf_spike")]))      # 42 steps at 2.86 GiB, then the OOM
    assert len(flat.steps) >= 5 and Cause.LEAK in impossible_causes(flat)
    # the recorder's step file is known by its lines, not its name
    for f in ("snapshot_rank0_oom.pickle.gz", "steps_rank0.jsonl"):
        shutil.copy(record / "hf_spike" / f, tmp_path / ("a.pickle.gz" if f.endswith(".gz") else "b.jsonl"))
    assert Cause.LEAK in impossible_causes(build_context(parse_paths([str(tmp_path)])))
    growing = build_context(parse_paths([str(record / "plain_leak")]))
    assert Cause.LEAK not in impossible_causes(growing)
    prints = build_context(parse_paths([str(BARE)]))
    assert Cause.LEAK not in impossible_causes(prints)

def test_a_leak_needs_some_input_that_shows_growth():
    # DESIGN.md's leak is memory rising step after step: a bare message cannot be one (StableAvatar#83), a
    # loop's rising memory prints can
    from oompost.classify import impossible_causes
    from oompost.classify.base import Cause

    bare = build_context(parse_paths([str(CORPUS / "Francis-Rings__StableAvatar__83" / "log.txt")]))
    assert not bare.growth_shown and Cause.LEAK in impossible_causes(bare)
    prints = build_context(parse_paths([str(BARE)]))
    assert prints.growth_shown and Cause.LEAK not in impossible_causes(prints)

def test_model_states_that_alone_exceed_the_limit_rule_out_the_causes_of_a_step():
    # a 3.09B fp32 full fine-tune (HF Trainer, gradient checkpointing) on a 23.19 GiB cap, OOM in backward's
    # recomputation: the activation rule had counted the configured step's 60 GiB, model states included
    from oompost.classify import impossible_causes
    from oompost.classify.base import Cause

    cap = ROOT / "sample_logs" / "capacity_qwen2.5_3b_fp32_trainer_3090_24g"
    ctx = build_context(parse_paths([str(cap)]))
    assert {Cause.ACTIVATION_SPIKE, Cause.FRAGMENTATION} <= impossible_causes(ctx)
    assert analyze(str(cap)).cause == "capacity"
    fits = ROOT / "sample_logs" / "activation_spike_eager_attention_hf_trainer_a100_40g"
    assert Cause.ACTIVATION_SPIKE not in impossible_causes(build_context(parse_paths([str(fits)])))


def test_outputs_kept_from_every_batch_are_a_leak_before_fragmentation():
    # HF Trainer evaluation without eval_accumulation_steps: the OOM is in nested_concat, whose numbers also
    # fit fragmentation (two held-out captures were called fragmentation before this constraint)
    from oompost.classify import impossible_causes
    from oompost.classify.base import Cause

    for name in ("leak_pythia410m_trainer_eval_logits_t4_16g", "leak_qwen2.5_0.5b_trainer_eval_logits_l4_24g"):
        ctx = build_context(parse_paths([str(ROOT / "sample_logs" / name)]))
        assert ctx.phase.phase.value == "retained_outputs"
        assert {Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE} <= impossible_causes(ctx)
        assert analyze(str(ROOT / "sample_logs" / name)).cause == "leak"
    frag = build_context(parse_paths([str(ROOT / "sample_logs" / "fragmentation_dynamic_padding")]))
    assert Cause.FRAGMENTATION not in impossible_causes(frag)
