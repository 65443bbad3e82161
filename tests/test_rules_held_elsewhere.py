"""CFG003 on real OOM messages: a card full of memory this process's PyTorch never allocated is a set-up
mistake; an ordinary full card, or one under a memory fraction, is not."""

from __future__ import annotations

from pathlib import Path

from oompost.analysis.context import build_context
from oompost.classify.rules.held_elsewhere import HeldElsewhere
from oompost.parsers import parse_paths, parse_text
from oompost.pipeline import report_from_evidence

CORPUS = Path(__file__).parent / "corpus"
SAMPLES = Path(__file__).parent.parent / "sample_logs"

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


def test_one_named_process_holding_over_a_third_of_the_card_is_held_elsewhere_below_a_third_it_is_not():
    # Lightning-AI/litgpt#159 (dev, config_error): "Process 147633 has 32.01 GiB memory in use. Including
    # non-PyTorch memory, this process has 46.70 GiB" on a 79.15 GiB card -- 40% held by another job
    r = report_from_evidence(parse_paths([str(CORPUS / "Lightning-AI__litgpt__159" / "log.txt")]))
    assert r.cause == "config_error" and r.primary.code == "CFG003"
    assert r.primary.title == "Another process held a large part of the GPU"
    assert any("147633 holds 32.01 GiB" in s for s, _ in r.primary.signals)
    # the same message with the other process at a fifth of the card: no shared-card finding
    text = (CORPUS / "Lightning-AI__litgpt__159" / "log.txt").read_text().replace(
        "Process 147633 has 32.01 GiB", "Process 147633 has 16.01 GiB").replace("452.44 MiB is free",
                                                                            "16.45 GiB is free")
    assert HeldElsewhere().evaluate(build_context(parse_text(text))) == []


def test_the_verdict_follows_on_the_shared_card():
    r = report_from_evidence(parse_paths([str(SHARED_A6000)]))
    assert r.cause == "config_error" and r.primary.code == "CFG003"


def test_a_card_full_of_the_runs_own_tensors_is_not_held_elsewhere():
    assert HeldElsewhere().evaluate(build_context(parse_text(OWN_TENSORS))) == []


def test_of_the_real_captures_only_the_shared_card_is_held_elsewhere():
    # every sample_logs capture: under a memory fraction "free" is the whole H200's (other captures ran beside
    # them, up to 29% of the card), and no threshold may turn that into a shared card; the one capture made
    # with a second process on the card (no fraction) is
    samples = Path(__file__).parent.parent / "sample_logs"
    fired = []
    for d in sorted(p for p in samples.iterdir() if (p / "run.log").exists()):
        ctx = build_context(parse_paths([str(d / "run.log")]))
        if HeldElsewhere().evaluate(ctx):
            fired.append(d.name)
    assert fired == ["config_error_gpu_held_by_another_process"]


def test_a_named_other_process_is_a_signal_and_lowers_the_limit():
    log = Path(__file__).parent.parent / "sample_logs" / "config_error_gpu_held_by_another_process" / "run.log"
    ctx = build_context(parse_paths([str(log)]))
    (f,) = HeldElsewhere().evaluate(ctx)
    assert any("503 holds 120.60 GiB" in s for s, _ in f.signals)
    assert ctx.limit_source == "capacity_shared"
    assert round((ctx.oom.capacity_bytes - ctx.limit_bytes) / 2**30, 2) == 120.60


def test_what_would_settle_it_asks_for_step_lines_only_for_a_memory_cause():
    shared = report_from_evidence(parse_paths([str(SHARED_A6000)]))
    assert shared.cause == "config_error"
    assert not any("per-step" in s for s in shared.primary.settle)
    own = report_from_evidence(parse_text(OWN_TENSORS))
    assert own.cause not in ("config_error", "host_oom", "nccl_error")
    assert any("per-step" in s for s in own.primary.settle)



# two ranks printing their OOMs at once glue them onto one line; this input is arranged here from two real messages:
# the shared-card capture's, then one quoted in https://github.com/ollama/ollama/issues/10089 (a vLLM run)
_CAPTURED = next(line for line in (SAMPLES / "config_error_gpu_held_by_another_process" / "run.log").read_text()
                 .splitlines() if "Process 503 has" in line)
_VLLM_10089 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity of "
               "15.60 GiB of which 700.88 MiB is free. Process 2514 has 14.91 GiB memory in use. Of the allocated memory "
               "14.62 GiB is allocated by PyTorch, and 87.96 MiB is reserved by PyTorch but unallocated. If reserved but "
               "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
               "fragmentation.  See documentation for Memory Management  "
               "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def test_glued_messages_are_read_apart_each_with_its_own_processes():
    ev = parse_text(_CAPTURED + _VLLM_10089 + "\n")
    assert [o.requested_bytes for o in ev.ooms] == [80 * 2**20, int(1.25 * 2**30)]
    assert [[(pid, round(b / 2**30, 2)) for pid, b in o.other_processes] for o in ev.ooms] == [[(503, 120.60)],
                                                                                            [(2514, 14.91)]]
