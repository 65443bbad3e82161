"""The verdict on partial inputs: every failure gets a cause, physics overrides weights,
and taking evidence away weakens a verdict but never flips it to another cause at high confidence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import oompost
from oompost.classify.base import Cause
from oompost.classify.features import FEATURES
from oompost.classify.verdict import decide, load_weights
from oompost.parsers import parse_text
from oompost.pipeline import report_from_evidence

SAMPLES = Path(__file__).parent.parent / "sample_logs"

# Real lines from public threads (tests/corpus/, URL in each case.json).
BARE_OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
            "capacity; 77.13 GiB already allocated; 307.31 MiB free; 78.21 GiB reserved in total by PyTorch) If "
            "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
            "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n")
BATCH_ASSERT = ("[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
                "micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1 \n")
KILLED = ("Loading checkpoint shards:   0%|                                      | 0/2 [00:00<?, ?it/s]Killed\n")


def verdict(text: str):
    return report_from_evidence(parse_text(text))


def test_a_bare_oom_message_gets_a_memory_cause_and_says_what_would_settle_it():
    r = verdict(BARE_OOM)
    assert r.cause in ("capacity", "activation_spike", "fragmentation", "leak", "comm_buffer")
    assert 0.0 < r.confidence < 1.0
    assert r.primary.settle and any("snapshot" in s for s in r.primary.settle)


def test_a_quoted_excerpt_reads_like_the_original():
    quoted = "".join("> " + line + "\n" for line in BARE_OOM.splitlines())
    assert verdict(quoted).cause == verdict(BARE_OOM).cause


@pytest.mark.parametrize("text,cause", [(BATCH_ASSERT, "config_error"), (KILLED, "host_oom")])
def test_one_line_failures_are_not_unknown(text, cause):
    assert verdict(text).cause == cause


def test_no_failure_is_unknown():
    r = verdict("epoch 1 step 10 loss 2.31\nepoch 1 step 20 loss 2.11\n")
    assert r.cause == "unknown"


def test_physics_overrides_the_weights():
    f = dict.fromkeys(FEATURES, 0.0)
    f.update({"oom.gpu": 1.0, "oom.numbers": 1.0, "oom.reserved_unallocated_covers_request": 1.0,
              "rule.fragmentation": 0.9})
    assert decide(f).cause is Cause.FRAGMENTATION
    assert decide(f, frozenset({Cause.FRAGMENTATION})).cause is not Cause.FRAGMENTATION
    assert decide(f).cause is not Cause.UNKNOWN            # a GPU OOM always has a memory cause


def test_the_shipped_weights_cover_every_feature():
    w = load_weights()
    assert w is not None and w.features == FEATURES and len(w.W) == len(w.classes) == len(Cause)


def _ablations(src: Path):
    """The sample's directory with one kind of evidence removed at a time."""
    files = [p for p in src.iterdir() if p.is_file() and p.name not in ("expected.json", "capture.json")]
    for drop in ("snapshot", "ds_config"):
        kept = [p for p in files if drop not in p.name]
        if len(kept) < len(files) and kept:
            yield drop, kept


ABLATED = [(d.name, drop, kept) for d in sorted(SAMPLES.iterdir()) if (d / "expected.json").exists()
           for drop, kept in _ablations(d)]


@pytest.mark.parametrize("name,drop,kept", ABLATED, ids=[f"{n}-without-{d}" for n, d, _ in ABLATED])
def test_less_evidence_never_flips_the_verdict_with_confidence(name, drop, kept, tmp_path):
    expected = json.loads((SAMPLES / name / "expected.json").read_text())["cause"]
    for p in kept:
        shutil.copy(p, tmp_path / p.name)
    r = oompost.analyze([str(tmp_path)])
    assert r.cause == expected or r.confidence < 0.8, (r.cause, r.confidence)
