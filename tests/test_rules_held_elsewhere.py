"""CFG003 on real OOM messages: a card full of memory this process's PyTorch never allocated is a set-up
mistake; an ordinary full card, or one under a memory fraction, is not."""

from __future__ import annotations

from pathlib import Path

from oompost.analysis.context import build_context
from oompost.classify.rules.held_elsewhere import HeldElsewhere
from oompost.parsers import parse_paths, parse_text
from oompost.pipeline import report_from_evidence

CORPUS = Path(__file__).parent / "corpus"

# https://github.com/fudan-zvg/Semantic-Segment-Anything/issues/43: 47.54 GiB A6000, PyTorch holds 580 MiB
SHARED_A6000 = CORPUS / "fudan-zvg__Semantic-Segment-Anything__43" / "log.txt"
# https://github.com/eriklindernoren/PyTorch-YOLOv3/issues/427: a TensorFlow logger in the same process
TF_LOGGER = CORPUS / "eriklindernoren__PyTorch-YOLOv3__427" / "log.txt"
# https://github.com/NVIDIA/tacotron2/issues/450: the card is full of this run's own tensors
OWN_TENSORS = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 11.93 GiB total capacity; "
               "11.07 GiB already allocated; 19.75 MiB free; 11.36 GiB reserved in total by PyTorch)\n")


def test_a_card_held_by_someone_else_is_a_config_error_with_the_numbers():
    for path, share in ((SHARED_A6000, "99%"), (TF_LOGGER, "78%")):
        (f,) = HeldElsewhere().evaluate(build_context(parse_paths([str(path)])))
        assert f.cause.value == "config_error" and f.confidence >= 0.45
        assert share in f.signals[0][0]
        assert dict(f.numbers)["held by this process"] in f.detail
        assert "nvidia-smi" in f.fixes[0].key


def test_the_verdict_follows_on_the_shared_card():
    r = report_from_evidence(parse_paths([str(SHARED_A6000)]))
    assert r.cause == "config_error" and r.primary.code == "CFG003"


def test_a_card_full_of_the_runs_own_tensors_is_not_held_elsewhere():
    assert HeldElsewhere().evaluate(build_context(parse_text(OWN_TENSORS))) == []


def test_under_a_memory_fraction_free_is_the_whole_cards_and_proves_nothing():
    # the capture of sample_logs/capacity_llama3.2_1b_plain_loop_2080ti: H200 capped to a 2080 Ti's 11 GiB
    log = Path(__file__).parent.parent / "sample_logs" / "capacity_llama3.2_1b_plain_loop_2080ti" / "run.log"
    ctx = build_context(parse_paths([str(log)]))
    assert ctx.oom is not None and ctx.oom.allowed_bytes is not None
    assert HeldElsewhere().evaluate(ctx) == []
