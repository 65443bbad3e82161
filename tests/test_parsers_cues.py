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
