"""LEAK002 on real tracebacks: per-batch outputs concatenated on the GPU are a leak, other frames are not."""

from __future__ import annotations

from pathlib import Path

from oompost.analysis.context import build_context
from oompost.analysis.phase import Phase, classify_frames
from oompost.classify.rules.retained_outputs import RetainedOutputs
from oompost.model import Frame
from oompost.parsers import parse_paths, parse_text
from oompost.pipeline import report_from_evidence

CORPUS = Path(__file__).parent / "corpus"

# https://github.com/MAGICS-LAB/DNABERT_2/issues/134: trainer.predict() in Colab, IPython-style traceback
DNABERT = CORPUS / "MAGICS-LAB__DNABERT_2__134" / "log.txt"


def test_hf_prediction_loop_concatenating_logits_is_retained_outputs():
    ctx = build_context(parse_paths([str(DNABERT)]))
    assert ctx.phase.phase is Phase.RETAINED and ctx.phase.frame.name == "evaluation_loop"
    (f,) = RetainedOutputs().evaluate(ctx)
    assert f.cause.value == "leak" and f.confidence >= 0.6
    assert [x.key for x in f.fixes][:2] == ["eval_accumulation_steps", "preprocess_logits_for_metrics"]


def test_the_report_names_the_leak_and_its_trainer_fix():
    r = report_from_evidence(parse_paths([str(DNABERT)]))
    assert r.cause == "leak"
    assert r.primary.code == "LEAK002"


def test_a_concatenation_of_model_inputs_is_not_retained_outputs():
    # the flatten of DeepSpeed/apex (test_verdict.TAIL, a real thread): torch.cat of parameters is a model state
    cat_params = Frame("/opt/conda/lib/python3.6/site-packages/torch/_utils.py", 229, "_flatten_dense_tensors",
                       "flat = torch.cat([t.contiguous().view(-1) for t in tensors], dim=0)")
    assert classify_frames((cat_params,), innermost_first=True).phase is not Phase.RETAINED
    # a hand-written evaluation loop concatenating what it kept for metrics (this frame is written here: no
    # corpus case or capture quotes such a line)
    cat_logits = Frame("eval.py", 88, "evaluate", "all_logits = torch.cat(all_logits)")
    assert classify_frames((cat_logits,), innermost_first=True).phase is Phase.RETAINED


def test_no_finding_without_an_oom_or_in_another_phase():
    assert RetainedOutputs().evaluate(build_context(parse_text("Epoch 1: loss 0.3\n"))) == []
    bare = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
            "capacity; 77.13 GiB already allocated; 307.31 MiB free; 78.21 GiB reserved in total by PyTorch)\n")
    assert RetainedOutputs().evaluate(build_context(parse_text(bare))) == []

