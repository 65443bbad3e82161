"""Memory prints without a step number are a series (parsers/steps.py); where an allocation sits when
the frames are partial (analysis/phase.py, the traceback tracker).  Real lines only: a GPU capture made
for this (sample_logs/leak_pythia410m_bare_memory_prints_t4) and corpus cases."""

from __future__ import annotations

from pathlib import Path

from oompost import analyze
from oompost.analysis.context import build_context
from oompost.analysis.steps import leak_trend
from oompost.parsers import parse_paths
from oompost.units import MiB

ROOT = Path(__file__).resolve().parents[1]
BARE = ROOT / "sample_logs" / "leak_pythia410m_bare_memory_prints_t4" / "run.log"
CORPUS = ROOT / "tests" / "corpus"


def test_bare_prints_are_a_numbered_series_of_the_allocators_figures():
    ev = parse_paths([str(BARE)])
    prints = [m for m in ev.memory if m.label == "print"]
    assert [m.step for m in prints] == list(range(1, 8))
    assert prints[0].allocated == int(5668.35 * MiB) and prints[0].reserved == int(8022.00 * MiB)
    assert all(b.allocated > a.allocated for a, b in zip(prints, prints[1:]))


def test_the_leak_is_proven_from_the_prints_with_their_numbers():
    report = analyze(str(BARE))
    assert report.cause == "leak" and report.confidence >= 0.8
    leak = next(f for f in report.findings if f.code == "LEAK001")
    assert any("consecutive prints" in s for s, _ in leak.signals)
    assert report.timeline_unit == "print"


def test_prints_that_do_not_rise_are_no_leak():
    # torchtitan#979: two ranks' "allocated: … MB, reserved: … MB" prints interleaved in one excerpt
    ev = parse_paths([str(CORPUS / "pytorch__torchtitan__979" / "log.txt")])
    prints = [m for m in ev.memory if m.label == "print"]
    assert len(prints) == 6 and prints[0].allocated == int(31894.55 * MiB)
    assert leak_trend(build_context(ev).steps) is None


def test_numbered_step_lines_win_over_prints():
    # detectron2#214: "iter: 659 ... max_mem: 2996M" lines carry a step number; "max_mem" is a peak
    ev = parse_paths([str(CORPUS / "facebookresearch__detectron2__214" / "log.txt")])
    assert ev.memory and all(m.label == "step" for m in ev.memory)
    assert all(m.max_allocated == 2996 * MiB and m.allocated is None for m in ev.memory)


def test_an_attention_ops_frame_is_forward():
    # StableAvatar#83: a two-frame tail ending in F.scaled_dot_product_attention
    ctx = build_context(parse_paths([str(CORPUS / "Francis-Rings__StableAvatar__83" / "log.txt")]))
    assert ctx.phase.phase.value == "forward"
    assert "activation op" in ctx.phase.why


def test_a_code_line_whose_frame_header_was_cut_still_places_the_allocation(tmp_path):
    # VisCPM#23 (corpus) with one line removed (arranged: the frame header of ZeRO's bucket allocation, as
    # an excerpt that skips a line would have it); the statement stays, and it is no exception line
    lines = (CORPUS / "OpenBMB__VisCPM__23" / "log.txt").read_text().splitlines(keepends=True)
    header = next(i for i, ln in enumerate(lines) if "stage_1_and_2.py" in ln)
    cut = tmp_path / "log.txt"
    cut.write_text("".join(lines[:header] + lines[header + 1:]))
    ctx = build_context(parse_paths([str(cut)]))
    assert ctx.phase.phase.value == "ds_bucket"
    assert ctx.oom is not None and ctx.oom.stack.frames[-1].name == "(frame header not in the input)"
    assert "reduce_bucket_size" in ctx.oom.stack.frames[-1].code
    whole = build_context(parse_paths([str(CORPUS / "OpenBMB__VisCPM__23" / "log.txt")]))
    assert whole.phase.phase.value == "ds_bucket"


# --------------------------------------------------------- bare numbers, no memory word

def test_a_column_of_bare_numbers_that_rises_is_a_leak_with_its_numbers():
    # torchdynamo#1778: print(torch.cuda.memory_allocated()) after each batch, between "batch size = N" lines
    log = CORPUS / "pytorch__torchdynamo__1778" / "log.txt"
    ev = parse_paths([str(log)])
    grew = ev.fact("cue.memory_growing")
    assert grew is not None and grew.value == 7 and grew.ref.line == 2
    assert ev.fact("cue.memory_growing_range").value == (239657472.0, 1604861440.0)
    report = analyze(str(log))
    assert report.cause == "leak"
    top = report.findings[0]
    assert "rises from 239,657,472 to 1,604,861,440" in top.detail
    assert [r.line for r in top.evidence[:2]] == [2, 14]


def test_two_bare_columns_are_read_by_their_first():
    # memcnn#37: "allocated-after-forward allocated-after-step" in MiB, one pair a line, no word at all
    ev = parse_paths([str(CORPUS / "silvandeleemput__memcnn__37" / "log.txt")])
    assert ev.fact("cue.memory_growing_range").value[0] == 450.22900390625


def test_notebook_line_numbers_are_not_a_memory_series():
    # DNABERT_2#134: IPython's source listing prints bare line numbers ("   3006 ") inside the traceback;
    # small whole numbers are line numbers, counters or ids, never memory figures
    ev = parse_paths([str(CORPUS / "MAGICS-LAB__DNABERT_2__134" / "log.txt")])
    assert ev.fact("cue.memory_growing") is None


def test_bare_numbers_that_do_not_clearly_rise_are_no_series(tmp_path):
    # arranged (no public log shows these shapes): a flat column of byte counts, and a 3-reading rise
    flat = tmp_path / "flat.log"
    flat.write_text("".join(f"{v}\n" for v in (239657472, 239660000, 239650000, 239661000, 239659000)))
    short = tmp_path / "short.log"
    short.write_text("239657472\n467977216\n694494720\n")
    for p in (flat, short):
        assert parse_paths([str(p)]).fact("cue.memory_growing") is None


def test_nccl_channel_lines_are_not_offered_to_the_step_parser_but_upper_case_memory_words_are():
    # a long multi-rank log prints "via P2P/CUMEM/read" on every NCCL channel line: offered to the step parser they
    # cost a regex each and broke its bulk path (a 100 MB benchmark log took twice as long)
    from oompost.parsers.steps import StepParser

    trigger = StepParser.TRIGGER
    assert trigger.search("node01:4007:4133 [7] NCCL INFO Channel 06/0 : 4[5] -> 1[3] via P2P/CUMEM/read") is None
    for line in ("GPU MEM: 12.3G", "step 3 | GPU_MEM=11.2G", "MEM: 10.5 GiB", "epoch 1 gpu_mem 8.21G"):
        assert trigger.search(line) is not None, line
    # an NCCL debug line that another sentinel still brings ("via direct shared memory", horovod/horovod#893,
    # dev) is dropped at once: no line shape is registered as a possible memory print for it
    from oompost.parsers.base import EvidenceBuilder
    from oompost.sources import decode_line

    parser = StepParser("log.txt", EvidenceBuilder())
    raw = b"heinzel135:151779:151929 [1] NCCL INFO Ring 00 : 1[1] -> 2[2] via direct shared memory"
    for ln in decode_line(1, raw):
        parser.feed(ln)
    assert parser._prints == {}
