"""The cue parser decides which cues hold once per line shape (digits turned into 0): that is
exact only while no sentinel or pattern of CUES can tell one digit from another."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oompost.parsers import parse_text
from oompost.parsers.cues import CUES, _ZERO_DIGITS, _cues_on


@pytest.mark.parametrize("name", sorted(CUES))
def test_cue_sentinels_and_patterns_cannot_tell_digits_apart(name: str) -> None:
    sentinels, pattern = CUES[name]
    assert not any(c.isdigit() for s in sentinels for c in s)
    # no literal digit (outside a {m,n} count) and no back-reference
    body = re.sub(r"\{\d+(?:,\d*)?\}", "", pattern.pattern)
    assert not re.search(r"(?<!\\)[0-9]", body), pattern.pattern
    assert not re.search(r"\\[1-9]|\(\?P=", pattern.pattern), pattern.pattern


ROOT = Path(__file__).resolve().parent.parent


def _real_lines() -> list[str]:
    """Every line of every captured log and corpus case (all real output)."""
    out: list[str] = []
    for p in sorted(ROOT.glob("sample_logs/*/*.log")) + sorted(ROOT.glob("tests/corpus/*/log.txt")):
        out += [ln for ln in p.read_text(errors="replace").splitlines() if len(ln) <= 4096]
    return out


def test_a_line_and_its_shape_hold_the_same_cues_on_every_real_line() -> None:
    lines = _real_lines()
    assert len(lines) > 3_000
    held = 0
    for line in lines:
        cues = _cues_on(line)
        held += bool(cues)
        assert cues == _cues_on(line.encode().translate(_ZERO_DIGITS).decode()), line
    assert held > 150                      # the check covered lines that do hold cues (194 today)


def test_cues_found_on_repeated_shapes_are_found_once_with_their_first_line() -> None:
    text = "\n".join(["step 1: loss 3.0", "Epoch 1: 10/10 [00:01<00:00]", "Epoch 2: 10/10 [00:01<00:00]",
                      "trainable params: 8 || all params: 80"]) + "\n"
    ev = parse_text(text)
    facts = {f.name: f for f in ev.facts if f.name.startswith("cue.")}
    assert facts["cue.training_progress"].ref.line == 2
    assert facts["cue.peft"].ref.line == 4
    assert "cue.serving" not in facts


# https://github.com/pytorch/pytorch/issues/104095 (tests/corpus/pytorch__pytorch__104095): figures labelled
# "alloc:" / "reserved:" without a unit, printed before and after each compile-run-delete round
COMPILE_ROUNDS = """\
test 0
[before compile ] alloc: 0.00244140625, reserved: 2.0, max reserved: 2.0
[after compile ] alloc: 57.00341796875, reserved: 92.0, max reserved: 92.0
[after delete] alloc: 57.00341796875, reserved: 92.0, max reserved: 92.0
test 1
[before compile ] alloc: 57.005859375, reserved: 92.0, max reserved: 92.0
[after compile ] alloc: 114.0068359375, reserved: 182.0, max reserved: 182.0
[after delete] alloc: 114.0068359375, reserved: 182.0, max reserved: 182.0
test 2
[before compile ] alloc: 114.00927734375, reserved: 182.0, max reserved: 182.0
[after compile ] alloc: 171.0107421875, reserved: 272.0, max reserved: 272.0
[after delete] alloc: 171.0107421875, reserved: 272.0, max reserved: 272.0
"""


def test_unitless_alloc_figures_show_the_growth() -> None:
    ev = parse_text(COMPILE_ROUNDS)
    f = ev.fact("cue.memory_growing")
    assert f is not None and f.ref.line == 2          # "[before compile ]": 0.002 -> 57 -> 114 MiB
    assert not any(w.startswith("no OOM") for i in ev.inputs for w in i.warnings)


def test_a_flat_alloc_series_is_not_growth() -> None:
    # written here (the negative of the series above): the same figures every round
    flat = "".join(f"[after step] alloc: 57.0, reserved: 92.0\n" for _ in range(6))
    assert parse_text(flat).fact("cue.memory_growing") is None


def test_a_memory_line_keyed_current_is_a_reading():
    # https://github.com/tensorflow/tensorflow/issues/73457: tf.config.experimental.get_memory_info() printed per
    # iteration, "current" rising 0.18 -> 0.35 while "peak" rises too: the current reading is the series
    from pathlib import Path

    from oompost.parsers import parse_paths

    ev = parse_paths([str(Path(__file__).parent / "corpus" / "tensorflow__tensorflow__73457" / "log.txt")])
    grew = [f for f in ev.facts if f.name == "cue.memory_growing_range"]
    assert grew and grew[0].value == (0.18, 0.35)


# A finished training iteration: a tqdm bar of the training loop past 0, or a logged training loss; never a
# shard-loading, dataset-map, download or evaluation bar (their counts say nothing about a training step).
@pytest.mark.parametrize("line,done", [
    ("Training:   0%|          | 0/8 [00:00<?, ?it/s]Training:  12%|█▎        | 1/8 [00:04<00:28,  4.06s/it]", 1),
    (" 45%|████▌     | 450/1000 [10:00<12:00,  1.31s/it]", 450),
    ("{'loss': 2.3104, 'learning_rate': 1e-05, 'epoch': 0.1}", 1),
    ("Training:   0%|          | 0/8 [00:00<?, ?it/s]", 0),
    ("Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.50s/it]", 0),
    ("Map: 100%|██████████| 1000/1000 [00:00<00:00, 5000.00 examples/s]", 0),
    ("Evaluating:  30%|███       | 3/10 [00:01<00:02,  3.10it/s]", 0),
    ("{'eval_loss': 2.31, 'eval_runtime': 10.2}", 0),
])
def test_iterations_done_counts_only_training_iterations(line: str, done: int) -> None:
    from oompost.parsers.cues import iterations_done

    assert iterations_done(line) == done


# sample_logs/activation_spike_qwen2.5_1.5b_bf16_ckpt_long_doc_tutorial_4090_24g (a held-out capture that drove
# this): the memory model priced bf16 weights with AdamW at 16 bytes a parameter, above the cap, although the
# bar shows four finished iterations; CAP001 must not say "cannot fit at any batch size" from that estimate
def test_a_states_estimate_contradicted_by_finished_iterations_is_not_used() -> None:
    import oompost

    log = ROOT / "sample_logs" / "activation_spike_qwen2.5_1.5b_bf16_ckpt_long_doc_tutorial_4090_24g" / "run.log"
    ev = parse_text(log.read_text())
    f = ev.fact("cue.iterations_done")
    assert f is not None and f.value >= 1 and f.ref.line < ev.ooms[0].ref.line
    r = oompost.analyze([str(log)])
    assert r.cause == "activation_spike"
    assert not any(x.code == "CAP001" and "any batch size" in x.title for x in r.findings)


# through the parser, not just the helper: a fast loop's bar says "it/s]" (no "it]"), and an HF Trainer log dict
def test_the_cue_parser_records_finished_iterations_from_fast_bars_and_logged_losses() -> None:
    fast = ("Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.50s/it]\n"
            "Training:   3%|▎         | 3/100 [00:01<00:30,  3.20it/s]\n")
    f = parse_text(fast).fact("cue.iterations_done")
    assert f is not None and f.value == 3 and f.ref.line == 2
    logged = "{'loss': 2.3104, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
    assert parse_text(logged).fact("cue.iterations_done") is not None
    assert parse_text("Loading checkpoint shards: 100%|██| 2/2 [00:03<00:00,  1.50s/it]\n").fact(
        "cue.iterations_done") is None


# a memory model pricing the configured step above the limit is contradicted once that step ran: ACT001 does not
# count the price as evidence then (an Accelerate evaluation that kept its logits priced its training step at
# 23.29 GiB of 21.53 after four training steps had run under that cap)
def test_a_step_price_contradicted_by_finished_iterations_is_no_evidence() -> None:
    from oompost.analysis.context import build_context
    from oompost.classify.rules.activation import _configured_step_ran

    ran = ROOT / "sample_logs" / "activation_spike_qwen2.5_1.5b_bf16_ckpt_long_doc_tutorial_4090_24g" / "run.log"
    assert _configured_step_ran(build_context(parse_text(ran.read_text())))
    first = ROOT / "sample_logs" / "capacity_qwen2.5_3b_fp32_trainer_3090_24g" / "run.log"
    assert not _configured_step_ran(build_context(parse_text(first.read_text())))


def test_vllms_own_environment_variable_in_its_hint_names_the_serving_engine() -> None:
    # vllm-project/vllm#57595 (dev): the only lines posted are the OOM message with vLLM's own hint; the word
    # "vllm" appears nowhere else, so the engine is known only from its variable's name
    text = ("    which 120.88 MiB is free. ... If this problem persists, try setting\n"
            "    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0\n")
    facts = {f.name: f for f in parse_text(text).facts}
    assert facts["cue.serving"].ref.line == 2
    # a variable that merely ends in the letters is not vLLM's
    assert "cue.serving" not in {f.name for f in parse_text("export MY_VLLM_X=1\n").facts}


def test_a_plain_loops_own_batch_counter_is_progress():
    # sample_logs/leak_vit_b16_inference_features_kept_3060_12g prints "batch 280/400 (16.7s)"; plain scripts
    # also write "Batch [12/313]" and "batch 5 of 40" (the last two typed here)
    from oompost.parsers.cues import progress_of

    assert progress_of("batch 280/400 (16.7s)") == (280, 0)
    assert progress_of("Batch [12/313] loss 0.41") == (12, 0)
    assert progress_of("batch 5 of 40") == (5, 0)
    assert progress_of("batch_size 64") == (0, 0) and progress_of("batch 64") == (0, 0)
