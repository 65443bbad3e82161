"""tests/heldout_captures/: the held-out GPU captures are well-formed.

Only the files' schema is checked here (what each capture holds and that its
JSON parses).  Their verdicts are *measured* by benchmarks/accuracy.py and are
never asserted: the captures exist to measure oompost, not to tune it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parent / "heldout_captures"
CAUSES = {"capacity", "fragmentation", "activation_spike", "comm_buffer", "leak", "host_oom", "config_error",
          "nccl_error", "unknown"}
CAPTURES = sorted(p for p in ROOT.iterdir() if p.is_dir()) if ROOT.is_dir() else []


def test_there_are_held_out_captures():
    assert len(CAPTURES) >= 5
    assert (ROOT / "README.md").is_file()


@pytest.mark.parametrize("d", CAPTURES, ids=[p.name for p in CAPTURES])
def test_capture_files(d: Path):
    names = {p.name for p in d.iterdir()}
    assert {"run.log", "capture.json", "expected.json"} <= names
    exp = json.loads((d / "expected.json").read_text())
    assert exp["schema"] == "oompost.expected/1"
    assert exp["cause"] in CAUSES and exp.get("why")
    cap = json.loads((d / "capture.json").read_text())
    assert cap["schema"] == "oompost.capture/1" and cap["scenario"] == d.name
    assert cap["environment"]["gpu"] and cap["command"] and cap["outcome"] in {"oom", "failed", "timeout"}
    if cap["outcome"] == "timeout":
        # a run that hung in its allocator's retries until the harness killed it (JAX's BFC allocator): the log
        # must show it running out, or it proves nothing
        assert "ran out of memory" in (d / "run.log").read_text(errors="replace")
    assert cap["counterfactuals"], "every held-out capture carries the run(s) that prove its label"
    for cf in cap["counterfactuals"]:
        assert cf["setting"] and cf["outcome"] in {"completed", "oom", "failed", "timeout"}
    for p in d.glob("*.pickle*"):
        assert p.name.endswith(".pickle.gz")
        with gzip.open(p, "rb") as f:
            assert f.read(1) == b"\x80"     # a gzipped pickle (protocol 2+)
    assert (d / "run.log").stat().st_size > 0


def test_held_out_captures_stay_out_of_the_fitting():
    repo = Path(__file__).parent.parent
    fit = (repo / "benchmarks" / "fit_verdict.py").read_text()
    assert "heldout" not in fit
    assert not set(p.name for p in CAPTURES) & {p.name for p in (repo / "sample_logs").iterdir()}
