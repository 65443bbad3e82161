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
