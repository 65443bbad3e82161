"""The real-world corpus: well-formed, split once, and oompost's accuracy on it held.

tests/corpus/ holds crashes copied verbatim from public issue threads (each
with its URL).  The accuracy floor is the last figure `benchmarks/accuracy.py
--write-doc` recorded minus 2 points: a rule change that breaks other people's
crashes cannot land.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from corpus_cases import CAUSES, FRAMEWORKS, REQUIRED, fold_of, load_cases

ROOT = Path(__file__).resolve().parent.parent
CASES = load_cases()


def test_the_corpus_is_large_and_diverse():
    assert len(CASES) >= 250
    assert len({c.repository for c in CASES}) >= 60
    per = Counter(c.label for c in CASES)
    for cause in CAUSES:
        assert per[cause] >= 20, (cause, per[cause])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_is_well_formed(case):
    m = case.meta
    assert set(REQUIRED) <= set(m), set(REQUIRED) - set(m)
    assert m["label"] in CAUSES
    assert m["status"] in ("confirmed", "inferred")
    assert m["framework"] in FRAMEWORKS
    assert m["url"].startswith("https://github.com/" + m["repository"] + "/")
    num = m["url"].rstrip("/").rsplit("/", 1)[-1]
    assert case.name.startswith(m["repository"].replace("/", "__") + "__" + num)
    assert m["reasoning"].strip()
    for f in m["files"]:
        p = case.path / f
        assert p.is_file() and p.stat().st_size > 0, p


def test_folds_are_fixed_by_the_url():
    folds = Counter(c.fold for c in CASES)
    assert folds["dev"] > folds["test"] > 0.2 * len(CASES)
    # one thread, one fold
    by_url: dict[str, set[str]] = {}
    for c in CASES:
        by_url.setdefault(c.meta["url"], set()).add(fold_of(c.meta["url"]))
    assert all(len(v) == 1 for v in by_url.values())


def test_accuracy_is_held_on_other_peoples_crashes():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from accuracy import FLOOR, metrics, run_cases

    floor = json.loads(FLOOR.read_text())["accuracy"]
    for name, fold in (("corpus dev (tuned on)", "dev"), ("corpus test (held out)", "test")):
        df = run_cases(load_cases(fold))
        acc = metrics(df)["accuracy"]
        assert acc >= floor[name] - 0.02, (name, acc, floor[name])
        assert df["error"].isna().all(), df[df["error"].notna()][["case", "error"]]


def test_the_blind_reading_covers_the_test_fold_with_valid_labels():
    # benchmarks/accuracy.py's "how far the text goes" section reads it: every test case, one known cause each,
    # a probability, and no case of the dev fold (the reading is a measurement of the held-out fold only)
    data = json.loads((Path(__file__).parent / "corpus" / "blind_reading_test.json").read_text(encoding="utf-8"))
    cases = data["cases"]
    test = {c.name for c in load_cases("test")}
    assert set(cases) == test
    for name, r in cases.items():
        assert r["label"] in CAUSES, (name, r["label"])
        assert 0.0 <= r["confidence"] <= 1.0 and isinstance(r["decidable"], bool) and r["why"]
