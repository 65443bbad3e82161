"""The cue parser decides which cues hold once per line shape (digits turned into 0): that is
exact only while no sentinel or pattern of CUES can tell one digit from another."""

from __future__ import annotations

import re

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


LINES = [
    " 12%|█▏        | 123/1000 [01:02<07:41,  1.90it/s]",
    "{'loss': 1.2345, 'learning_rate': 2e-05, 'epoch': 0.37}",
    "Epoch 3: 100%|██████████| 50/50 [00:10<00:00]",
    "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.62s/it]",
    "Process 38211 has 10.00 GiB memory in use. Process 9 has 2.50 GiB memory in use.",
    "step 120: loss 2.1, mem: 20.4GiB",
    "***** Running Evaluation *****",
    "INFO 05-31 vllm.engine: # GPU blocks: 1200, # CPU blocks: 512 gpu_memory_utilization=0.9",
    "trainable params: 4,194,304 || all params: 6,742,609,920",
]


@pytest.mark.parametrize("line", LINES)
def test_a_line_and_its_shape_hold_the_same_cues(line: str) -> None:
    shape = line.encode().translate(_ZERO_DIGITS).decode()
    assert _cues_on(line) == _cues_on(shape)
    assert _cues_on(line), "each sample line holds some cue"


def test_cues_found_on_repeated_shapes_are_found_once_with_their_first_line() -> None:
    text = "\n".join(["step 1: loss 3.0", "Epoch 1: 10/10 [00:01<00:00]", "Epoch 2: 10/10 [00:01<00:00]",
                      "trainable params: 8 || all params: 80"]) + "\n"
    ev = parse_text(text)
    facts = {f.name: f for f in ev.facts if f.name.startswith("cue.")}
    assert facts["cue.training_progress"].ref.line == 2
    assert facts["cue.peft"].ref.line == 4
    assert "cue.serving" not in facts
