"""Renderers (HTML, Markdown, JSON, terminal) and --redact, on Reports built by hand.

Four shapes: a fragmentation report with a snapshot timeline, segments and
stacks; a capacity report with a rerun plan under a memory-fraction cap; an
nccl_error report with several ranks; an empty/unknown one.  The log lines
quoted are in the real formats (reference/torch_oom.md, nccl.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from html.parser import HTMLParser

import orjson
import pytest

from oompost.classify.base import Cause, Finding, Fix, NotAFix, Severity
from oompost.model import InputInfo, InputKind, SourceRef
from oompost.redact import redact_report, redact_text
from oompost.render import RENDERERS, render
from oompost.render.html import oom_bar, render_html
from oompost.render.markdown import MARKER, render_markdown
from oompost.render.terminal import short_verdict
from oompost.report import (SCHEMA, CounterfactualView, OomSummary, RankView, Report, RerunView, SegmentBlockView,
                            SegmentView, SeriesPoint, StackView)

GiB = 1024**3
MiB = 1024**2

OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.68 GiB memory in "
            "use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 6.20 GiB is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


# ------------------------------------------------------------------ builders


def fragmentation_report(**over) -> Report:
    ref = SourceRef("run.log", 812, OOM_LINE)
    primary = Finding(
        code="FRAG001", cause=Cause.FRAGMENTATION, title="The request fits in free memory but no block is large enough",
        confidence=0.92, primary=True,
        evidence=(ref, SourceRef("run.log", 790, "[2025-01-01 10:00:00] 3 pytorch allocator cache flushes since last "
                                 "step. this happens when there is high memory pressure"),
                  SourceRef("snapshot.pickle", None, "oom: 2.00 GiB request, largest free block 1.12 GiB")),
        fixes=(Fix("env", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                   "segments grow in place, so the free memory becomes usable"),
               Fix("env", "PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512", "large blocks are not split")),
        not_fixes=(NotAFix("torch.cuda.empty_cache()", "returns cached segments, but the holes are inside live ones"),),
        signals=(("request fits in free + unallocated", 0.5), ("no free block fits", 0.2), ("replay fits", 0.22)),
        numbers=(("tried to allocate", "2.00 GiB"), ("reserved but unallocated", "6.20 GiB"),
                 ("largest free block", "1.12 GiB")),
        detail="The request (2.00 GiB) is smaller than the 6.20 GiB reserved but unallocated plus 1.50 GiB free, "
               "but the largest free block is 1.12 GiB; the replay with expandable_segments:True fits.")
    advice = Finding(code="SET002", cause=Cause.CONFIG_ERROR, title="offload_param does nothing below ZeRO-3",
                     confidence=0.6, severity=Severity.ADVICE,
                     evidence=(SourceRef("ds_config.json", 14, '"offload_param": {"device": "cpu"}'),),
                     fixes=(Fix("ds_config", "zero_optimization.offload_param", None, "it has no effect at stage 2"),))
    n = 300
    timeline = tuple(SeriesPoint(i, int((40 + 30 * (i % 60) / 60 + i / 30) * GiB), int((55 + i / 12) * GiB))
                     for i in range(n)) + (SeriesPoint(n, 70 * GiB, int(76.2 * GiB), "oom"),)
    segments = (
        SegmentView(0x7F0000000000, 20 * GiB, "large", 0,
                    (SegmentBlockView(0, 8 * GiB, "active_allocated"), SegmentBlockView(8 * GiB, GiB, "inactive"),
                     SegmentBlockView(9 * GiB, 11 * GiB, "active_allocated"))),
        SegmentView(0x7F1000000000, 10 * GiB, "large", 0,
                    tuple(SegmentBlockView(k * GiB, GiB, "inactive" if k % 3 == 1 else "active_allocated")
                          for k in range(10))),
        SegmentView(0x7F2000000000, 2 * MiB, "small", 0,
                    (SegmentBlockView(0, MiB, "active_pending_free"), SegmentBlockView(MiB, MiB, "inactive"))),
        SegmentView(0x7F3000000000, 4 * GiB, "large", 0, ()),
    )
    r = Report(
        cause="fragmentation", sub_cause=None, confidence=0.92,
        summary="The 2.00 GiB request fails next to 6.20 GiB reserved but unallocated — fragmentation. "
                "Rerun with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        findings=(primary, advice),
        oom=OomSummary(rank=0, device=0, requested_bytes=2 * GiB, requested_tensor_bytes=2 * GiB - 4096,
                       capacity_bytes=int(79.19 * GiB), limit_bytes=int(79.19 * GiB), free_bytes=int(1.5 * GiB),
                       allocated_bytes=70 * GiB, reserved_unallocated_bytes=int(6.2 * GiB),
                       process_in_use_bytes=int(77.68 * GiB), kind="caching_allocator", limit_source="capacity",
                       message_format=">=2.2", exception="torch.OutOfMemoryError", ref=ref, phase="backward",
                       location="train.py:88 in training_step"),
        ranks=(RankView(0, True, True, int(77.6 * GiB)),),
        rerun=None,
        counterfactuals=(CounterfactualView("(recorded settings)", True, int(76.2 * GiB), "reproduces the OOM"),
                         CounterfactualView("expandable_segments:True", False, int(72.1 * GiB), "fits")),
        inputs=(InputInfo("run.log", InputKind.TORCH_LOG), InputInfo("snapshot.pickle", InputKind.SNAPSHOT)),
        timeline=timeline, timeline_source="snapshot", timeline_unit="trace event",
        top_stacks=(StackView("train.py:88 in training_step", 30 * GiB, 120,
                              ("torch/nn/modules/linear.py:125 in forward", "model.py:40 in mlp",
                               "train.py:88 in training_step")),
                    StackView("model.py:61 in attention", 12 * GiB, 48, ()),),
        segments=segments,
        facts=(("torch", "2.11.0"), ("GPU", "NVIDIA H200"), ("memory limit", "79.19 GiB (capacity)")),
        version="0.1.0")
    return replace(r, **over)


DS_CONFIG = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
             "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                   "reduce_bucket_size": 500000000, "overlap_comm": True}}


def capacity_report(**over) -> Report:
    ref = SourceRef("rank0.log", 2210, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. "
                    "GPU 0 has a total capacity of 139.80 GiB of which 60.20 GiB is free. 40.00 GiB allowed; "
                    "38.10 GiB allocated by PyTorch, and 0.40 GiB is reserved by PyTorch but unallocated.")
    primary = Finding(code="CAP001", cause=Cause.CAPACITY, title="Model states at ZeRO-2 exceed the 40 GiB cap",
                      confidence=0.88, primary=True, evidence=(ref,),
                      fixes=(Fix("ds_config", "zero_optimization.stage", 3, "partitions the parameters too"),
                             Fix("trainer_arg", "gradient_checkpointing", True, "keeps only layer inputs")),
                      numbers=(("model states (ZeRO-2)", "36.2 GiB"), ("cap", "40.00 GiB")),
                      detail="7B parameters at ZeRO-2 with 4 GPUs need 36.2 GiB of states before activations.")
    r = Report(
        cause="capacity", sub_cause=None, confidence=0.88,
        summary="Model states alone need 36.2 GiB of the 40.00 GiB cap — capacity. Rerun with ZeRO-3.",
        findings=(primary,),
        oom=OomSummary(rank=0, device=0, requested_bytes=int(1.95 * GiB), requested_tensor_bytes=None,
                       capacity_bytes=int(139.8 * GiB), limit_bytes=40 * GiB, free_bytes=int(60.2 * GiB),
                       allocated_bytes=int(38.1 * GiB), reserved_unallocated_bytes=int(0.4 * GiB),
                       process_in_use_bytes=None, kind="caching_allocator", limit_source="allowed", ref=ref),
        ranks=(RankView(0, True, True),),
        rerun=RerunView(ds_config=DS_CONFIG, ds_config_diff={"zero_optimization": {"stage": 3}},
                        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                        trainer_args={"gradient_checkpointing": True, "per_device_train_batch_size": 4},
                        predicted_peak_bytes=int(31.5 * GiB), device_bytes=40 * GiB,
                        changes=("zero_optimization.stage: 2 → 3 (parameters partitioned)",),
                        fits=True, host_bytes=120 * GiB, validated_by_deepspeed=True,
                        notes=("global batch kept at 32",), alternatives=("LoRA r=16 on the same GPUs",)),
        counterfactuals=(),
        inputs=(InputInfo("rank0.log", InputKind.DEEPSPEED_LOG), InputInfo("ds_config.json", InputKind.DS_CONFIG)),
        timeline=tuple(SeriesPoint(s, None if s == 3 else (30 + s) * GiB, None if s == 5 else (32 + s) * GiB)
                       for s in range(1, 8)),
        timeline_source="steps", timeline_unit="step",
        estimate={"fits": False, "predicted_peak_bytes": 44 * GiB, "startup_peak_bytes": 30 * GiB,
                  "device_bytes": 40 * GiB, "host_bytes": 64 * GiB,
                  "breakdown": {"weights": 14 * GiB, "gradients": 14 * GiB, "optimizer": 8 * GiB,
                                "activations": 6 * GiB, "context": GiB // 2},
                  "assumptions": ["mixed-precision Adam", "no recompute"]},
        version="0.1.0")
    return replace(r, **over)


NCCL_LINES = [
    "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
    "ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
    "ng30904:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
    "ng30903-ib<53214>",
    "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1213, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600009 milliseconds",
]


def nccl_report(**over) -> Report:
    refs = tuple(SourceRef("job.out", i + 40, t) for i, t in enumerate(NCCL_LINES))
    f = Finding(code="NCCL001", cause=Cause.NCCL_ERROR, title="Rank 3 failed first; the others timed out",
                confidence=0.8, primary=True, evidence=refs,
                fixes=(Fix("env", "NCCL_DEBUG", "INFO", "shows which peer and which transport"),),
                not_fixes=(NotAFix("a longer NCCL timeout", "rank 3 is gone; waiting longer changes nothing"),))
    r = Report(
        cause="nccl_error", sub_cause=None, confidence=0.8,
        summary="Rank 3 failed first on ng30903; ranks 0–2 are victims.", findings=(f,), oom=None,
        ranks=(RankView(0, True, False, None, -15, "SIGTERM from the launcher", refs[2]),
               RankView(1, True, False, None, 1, "watchdog timeout (ALLREDUCE)", refs[3]),
               RankView(2, False, False), RankView(3, True, True, None, 1, "NCCL: Failed to CUDA calloc", refs[0])),
        rerun=None, counterfactuals=(),
        inputs=(InputInfo("/home/alice/jobs/1234/job.out", InputKind.NCCL_LOG,
                          ("line 9: undecodable bytes replaced",)),),
        facts=(("NCCL", "2.21.5"), ("world size", "4")), version="0.1.0")
    return replace(r, **over)


def unknown_report() -> Report:
    return Report(cause="unknown", sub_cause=None, confidence=0.0, summary="", findings=(), oom=None, ranks=(),
                  rerun=None, counterfactuals=(), inputs=())


ALL = {"fragmentation": fragmentation_report, "capacity": capacity_report, "nccl": nccl_report,
       "unknown": unknown_report}

HOSTILE = "</script><script>alert(1)</script> <img src=x onerror=alert(1)> {{7*7}} & https://evil.example/x.png"


def hostile_report() -> Report:
    """Every text field a log can reach, carrying markup and a template expression."""
    base = capacity_report()
    f = base.findings[0]
    h = HOSTILE
    f = replace(f, title=h, detail=h, evidence=(SourceRef(h, 7, h),), numbers=((h, h),), signals=((h, 0.5),),
                fixes=(Fix(h, h, h, h),), not_fixes=(NotAFix(h, h),), sub_cause=h, code=h)
    sec = replace(f, primary=False, severity=Severity.ADVICE)
    oom = replace(base.oom, exception=h, location=h, phase=h, message_format=h, ref=SourceRef(h, 1, h))
    rr = replace(base.rerun, ds_config={h: h, "nested": {"k": h}}, ds_config_diff={h: h}, env={"X": h},
                 trainer_args={h: h}, changes=(h,), notes=(h,), alternatives=(h,), validation_errors=(h,))
    return replace(base, summary=h, sub_cause=h, findings=(f, sec), oom=oom, rerun=rr,
                   ranks=(RankView(0, True, True, None, 1, h, SourceRef(h, 2, h)), RankView(1, True, False, None, 1, h)),
                   counterfactuals=(CounterfactualView(h, True, GiB, h, h),),
                   inputs=(InputInfo(h, InputKind.TORCH_LOG, (h,)),), timeline_unit=h, timeline_source=h,
                   top_stacks=(StackView(h, GiB, 1, (h, h)),), facts=((h, h),), warnings=(h,),
                   segments=fragmentation_report().segments, estimate={**base.estimate, "assumptions": [h]},
                   version=h)


# ------------------------------------------------------------------ helpers


class TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def parse(html: str) -> TagCollector:
    p = TagCollector()
    p.feed(html)
    p.close()
    return p


ALLOWED_TAGS = {
    "html", "head", "wbr", "meta", "title", "style", "body", "header", "nav", "a", "main", "section", "div", "p", "h1", "h2",
    "h3", "span", "small", "code", "b", "table", "caption", "thead", "tbody", "tr", "th", "td", "figure",
    "figcaption", "pre", "details", "summary", "ul", "ol", "li", "svg", "defs", "pattern", "rect", "line", "title",
    "path", "circle", "text", "g", "footer", "script", "button",
}


# ------------------------------------------------------------------ JSON


@pytest.mark.parametrize("name", list(ALL))
def test_json_round_trip_keeps_the_contract(name):
    report = ALL[name]()
    data = orjson.loads(render(report, "json"))
    assert data == orjson.loads(orjson.dumps(report.to_json()))
    assert data["schema"] == SCHEMA
    for key in ("cause", "sub_cause", "confidence", "summary", "findings", "oom", "ranks", "rerun",
                "counterfactuals", "inputs"):
        assert key in data, key
    assert data["cause"] == report.cause
    for f in data["findings"]:
        assert {"code", "cause", "title", "confidence", "primary", "evidence", "fixes"} <= set(f)
        for e in f["evidence"]:
            assert set(e) >= {"source", "line", "text"}
        for x in f["fixes"]:
            assert set(x) == {"kind", "key", "value", "why"}
    if report.oom is None:
        assert data["oom"] is None
    else:
        assert {"rank", "device", "requested_bytes", "requested_tensor_bytes", "capacity_bytes", "limit_bytes",
                "free_bytes", "allocated_bytes", "reserved_unallocated_bytes", "process_in_use_bytes"} <= set(data["oom"])
    for r in data["ranks"]:
        assert {"rank", "failed", "first", "peak_bytes"} <= set(r)
    if report.rerun is None:
        assert data["rerun"] is None
    else:
        assert {"ds_config", "ds_config_diff", "env", "trainer_args", "predicted_peak_bytes",
                "device_bytes"} <= set(data["rerun"])
    if not report.counterfactuals:
        assert data["counterfactuals"] is None
    else:
        assert all({"setting", "oom", "peak_reserved_bytes"} <= set(c) for c in data["counterfactuals"])
    kinds = {"torch_log", "deepspeed_log", "nccl_log", "snapshot", "ds_config", "capture_meta", "unknown"}
    assert all(i["kind"] in kinds and isinstance(i["warnings"], list) for i in data["inputs"])


def test_json_is_indented_and_keeps_non_string_keys():
    text = render(capacity_report(estimate={"breakdown": {1: 2}}), "json")
    assert text.startswith('{\n  "schema": "oompost.report/1"')
    assert orjson.loads(text)["estimate"]["breakdown"] == {"1": 2}


def test_registry_and_unknown_format():
    assert set(RENDERERS) == {"html", "md", "json"}
    with pytest.raises(ValueError, match="unknown report format"):
        render(unknown_report(), "pdf")


# ------------------------------------------------------------------ Markdown


def test_markdown_has_marker_verdict_proof_fixes():
    md = render(fragmentation_report(), "md")
    assert md.splitlines()[0] == MARKER
    assert "Allocator fragmentation" in md and "`fragmentation`" in md and "Confidence 0.92" in md
    assert "The request (2.00 GiB) is smaller" in md          # the primary finding's detail
    assert "| largest free block | 1.12 GiB |" in md           # its numbers
    assert "`run.log:812`" in md and "`snapshot.pickle`" in md  # evidence as file:line
    assert "| 1 | env | `PYTORCH_CUDA_ALLOC_CONF` | `expandable_segments:True` |" in md
    assert "### Not worth trying" in md and "torch.cuda.empty_cache()" in md
    assert "`SET002`" in md                                     # secondary finding, one line
    assert "## Ranks" not in md                                 # one rank: no table


def test_markdown_rerun_diff_env_args_and_ranks():
    md = render(capacity_report(), "md")
    assert '"stage": 3' in md and "```json" in md
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in md
    assert "--gradient_checkpointing true --per_device_train_batch_size 4" in md
    assert "Predicted peak **31.50 GiB** per GPU of **40.00 GiB** (fits)" in md
    md = render(nccl_report(), "md")
    assert "## Ranks" in md and "| 3 **first** | failed |" in md


def _huge_report() -> Report:
    long = "x" * 5000
    refs = tuple(SourceRef("huge.log", i, f"line {i} " + long) for i in range(100_000))
    base = fragmentation_report()
    f = replace(base.findings[0], evidence=refs, detail=long * 4,
                fixes=tuple(Fix("env", f"K{i}", long, long) for i in range(2000)),
                not_fixes=tuple(NotAFix(f"n{i} " + long, long) for i in range(2000)),
                numbers=tuple((f"n{i}", long) for i in range(2000)))
    sec = tuple(replace(base.findings[1], title=f"t{i} " + long) for i in range(2000))
    rr = replace(capacity_report().rerun, ds_config_diff={f"k{i}": long for i in range(500)},
                 env={f"E{i}": long for i in range(500)}, trainer_args={f"a{i}": long for i in range(500)},
                 changes=tuple(long for _ in range(500)), notes=tuple(long for _ in range(500)))
    return replace(base, summary=long, findings=(f,) + sec, rerun=rr,
                   ranks=tuple(RankView(i, True, i == 7, None, 1, long) for i in range(4096)),
                   inputs=tuple(InputInfo(f"in{i}.log " + long, InputKind.TORCH_LOG, (long,) * 50)
                                for i in range(5000)),
                   warnings=tuple(long for _ in range(100_000)), facts=tuple((long, long) for _ in range(1000)),
                   counterfactuals=tuple(CounterfactualView(long, True, GiB, long) for _ in range(1000)))


def test_markdown_stays_well_under_65000_chars_for_huge_inputs():
    md = render_markdown(_huge_report())
    assert len(md) < 60_000
    assert md.splitlines()[0] == MARKER
    assert "more evidence line(s)" in md                           # lists say what they left out
    shown = re.findall(r"^\| (\d+)(?: \*\*first\*\*)? \| failed \|", md, re.M)
    assert f"| … {4096 - len(shown)} more |" in md
    assert "| 7 **first** | failed |" in md                        # the first failing rank is never cut
    assert "line 0 xxx" in md                                      # the first quotes are there
    assert '"k0": "xxx' in md                                      # and the diff, its long lines clipped


def test_markdown_fence_outruns_backticks_inside():
    text = "a ``` b ```````` c ` d"
    f = replace(fragmentation_report().findings[0], evidence=(SourceRef("x.log", 3, text),))
    md = render_markdown(replace(fragmentation_report(), findings=(f,)))
    lines = md.splitlines()
    i = lines.index(text)
    opening, closing = lines[i - 1], lines[i + 1]
    fence = re.match(r"^`+", opening).group()
    assert len(fence) > 8 and closing == fence
    assert opening == fence + "text"


def test_markdown_cells_escape_pipes_backticks_and_html():
    f = replace(fragmentation_report().findings[0],
                fixes=(Fix("env", "K|`x`", "v|1", "a | b `c` <img src=x onerror=alert(1)>"),))
    md = render_markdown(replace(fragmentation_report(), findings=(f,), summary="<script>alert(1)</script>"))
    row = next(ln for ln in md.splitlines() if ln.startswith("| 1 | env |"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 7                # 6 columns, no stray separators
    assert "a \\| b \\`c\\` &lt;img src=x onerror=alert(1)&gt;" in row
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md


def test_markdown_empty_report():
    md = render_markdown(unknown_report())
    assert md.startswith(MARKER + "\n") and "Cause not established" in md and "None proposed." in md


# ------------------------------------------------------------------ HTML


def test_html_escapes_log_text_everywhere():
    html = render_html(hostile_report())
    doc = parse(html)
    names = {t for t, _ in doc.tags}
    assert names <= ALLOWED_TAGS, names - ALLOWED_TAGS
    assert "img" not in names
    for tag, attrs in doc.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        assert "src" not in attrs
        if tag == "a":
            assert attrs["href"].startswith("#")
    # exactly our two scripts: the JSON island and the inline JS
    script_tags = [a for t, a in doc.tags if t == "script"]
    assert len(script_tags) == 2 and script_tags[0] == {"type": "application/json", "id": "oompost-data"}
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "{{7*7}}" in html and "49" not in "".join(doc.text)
    assert "&amp; https://evil.example/x.png" in html
    # the data island is the JSON report, with no raw "<" that could close the tag
    island = doc.scripts[0]
    assert "<" not in island and orjson.loads(island) == orjson.loads(render(hostile_report(), "json"))


def test_html_is_self_contained():
    html = render_html(hostile_report())
    doc = parse(html)
    for tag, attrs in doc.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed", "base")
        for k in ("src", "href", "action", "srcset", "poster", "data"):
            v = attrs.get(k)
            assert v is None or v.startswith("#"), (tag, k, v)
        for v in attrs.values():
            assert not re.search(r"url\(\s*['\"]?(?!#)", v or ""), (tag, attrs)
    style = html[html.index("<style>"):html.index("</style>")]
    assert "url(" not in style and "@import" not in style and "http" not in style
    # the only URLs in the page: the SVG namespace and escaped log text
    for m in re.finditer(r"https?://[\w./-]+", html):
        assert m.group() in ("http://www.w3.org/2000/svg", "https://evil.example/x.png"), m.group()
        if m.group().startswith("https://evil"):
            before = html[max(0, m.start() - 120):m.start()]
            assert "&amp;" in before or "\\u0026" in before


def test_html_has_generator_meta_and_sections():
    html = render_html(fragmentation_report())
    doc = parse(html)
    meta = [a for t, a in doc.tags if t == "meta" and a.get("name") == "generator"]
    assert meta and meta[0]["content"] == "oompost 0.1.0"
    ids = [a.get("id") for _, a in doc.tags if a.get("id")]
    for sid in ("verdict", "oom", "timeline", "stacks", "segments", "whatif", "fixes", "inputs"):
        assert sid in ids, sid
    assert "ranks" not in ids and "rerun" not in ids and "estimate" not in ids
    order = [ids.index(s) for s in ("verdict", "oom", "timeline", "stacks", "segments", "whatif", "fixes", "inputs")]
    assert order == sorted(order)
    assert 'data-cause="fragmentation"' in html
    assert "train.py:88 in training_step" in html and "torch/nn/modules/linear.py:125 in forward" in html
    assert html.count('class="blk free"') >= 4                 # the holes are drawn
    assert "capacity ▾" in html and "allowed cap" not in html


def test_html_capacity_rerun_and_allowed_cap():
    html = render_html(capacity_report())
    assert "allowed cap ▾" in html
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in html
    assert "--gradient_checkpointing true" in html and "--per_device_train_batch_size 4" in html
    assert "&#34;reduce_bucket_size&#34;: 500000000" in html    # the complete ds_config, ready to copy
    assert 'id="estimate"' in html and "optimizer" in html
    assert 'id="segments"' not in html
    assert "validated by DeepSpeed" in html and "LoRA r=16" in html


def test_html_rank_table_marks_first_failing_rank():
    doc = parse(render_html(nccl_report()))
    rows = [a for t, a in doc.tags if t == "tr" and a.get("class") == "first"]
    assert len(rows) == 1
    html = render_html(nccl_report())
    tbody = html[html.index('id="ranks"'):html.index("</table>", html.index('id="ranks"'))]
    first_row = tbody[tbody.index('<tr class="first">'):]
    assert '<td class="num">3</td>' in first_row[:120] and "first failure" in first_row[:400]


def test_html_empty_report_renders():
    html = render_html(unknown_report())
    assert "Cause not established" in html and "No finding was produced." in html
    assert 'id="oom"' not in html and "<svg" not in html


NUM_ATTR = re.compile(r'\s(?:x|y|x1|x2|y1|y2|cx|cy|width|height|r)="([^"]*)"')


def _coords_finite(html: str) -> None:
    vals = NUM_ATTR.findall(html)
    assert vals
    for v in vals:
        x = float(v)
        assert math.isfinite(x) and abs(x) < 1e6, v


@pytest.mark.parametrize("points,limit", [
    ((SeriesPoint(5, 3 * GiB, 4 * GiB),), 10 * GiB),                                        # one point
    ((SeriesPoint(0, None, None), SeriesPoint(1, None, 2 * GiB), SeriesPoint(2, GiB, None)), 0),  # Nones, zero limit
    (tuple(SeriesPoint(i, i * 10**17, i * 2 * 10**17) for i in range(50)), 2**62),            # huge numbers
    (tuple(SeriesPoint(i, 0, 0) for i in range(3)), None),                                    # flat zero
    (tuple(SeriesPoint(i, i * MiB, 2 * i * MiB) for i in range(20_000)), 80 * GiB),          # many points, limit far above
])
def test_timeline_svg_handles_degenerate_series(points, limit):
    oom = replace(fragmentation_report().oom, limit_bytes=limit)
    html = render_html(fragmentation_report(timeline=points, oom=oom))
    assert "timeline-svg" in html
    assert 'class="oom-lab' in html
    svg = html[html.index('<svg class="timeline-svg"'):]
    svg = svg[:svg.index("</svg>")]
    _coords_finite(svg)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    assert svg.count("<path") >= 1


@pytest.mark.parametrize("over", [
    dict(limit_bytes=0, capacity_bytes=0, free_bytes=0, allocated_bytes=0, reserved_unallocated_bytes=0,
         requested_bytes=0, process_in_use_bytes=0),
    dict(limit_bytes=None, capacity_bytes=None, free_bytes=None, allocated_bytes=None,
         reserved_unallocated_bytes=None, requested_bytes=None, process_in_use_bytes=None),
])
def test_oom_bar_without_numbers_is_omitted(over):
    oom = replace(fragmentation_report().oom, **over)
    assert oom_bar(oom) is None
    html = render_html(fragmentation_report(oom=oom))
    assert "<svg class=\"oombar-svg\"" not in html and "carries no sizes" in html


def test_oom_bar_geometry():
    bar = oom_bar(fragmentation_report().oom)
    assert bar is not None and bar.limit_pct is not None and bar.request_end_pct is not None
    # 70 + 6.2 + other(1.49) + 2 GiB = 79.7 GiB: past the 79.19 GiB capacity
    assert bar.request_end_pct > bar.limit_pct
    assert "past the capacity" in bar.note
    labels = [label for _, label, _ in bar.legend]
    assert labels[:2] == ["allocated by PyTorch", "reserved but unallocated"] and "capacity" in labels
    huge = oom_bar(replace(fragmentation_report().oom, limit_bytes=2**62, capacity_bytes=2**62, free_bytes=2**61))
    assert huge is not None
    _coords_finite(str(huge.svg))


@pytest.mark.parametrize("request_gib, note", [(215, "alone is"), (2, "does not say how much")])
def test_oom_bar_never_draws_an_unstated_card_as_free(request_gib, note):
    """A message with only a request and a capacity (XLA, a bare cudaMalloc line) says nothing of what was in use:
    the bar must not show the whole card as free."""
    oom = replace(fragmentation_report().oom, allocated_bytes=None, reserved_unallocated_bytes=None, free_bytes=None,
                  process_in_use_bytes=None, other_processes_bytes=None, limit_source="capacity",
                  capacity_bytes=32 * 2**30, limit_bytes=32 * 2**30, requested_bytes=request_gib * 2**30)
    bar = oom_bar(oom)
    assert bar is not None
    labels = [label for _, label, _ in bar.legend]
    assert "free on the card" not in labels and "in use or free: the message does not say" in labels
    assert note in bar.note and "past the" not in bar.note and "below the" not in bar.note
    assert "ends at" not in bar.request_end_text
    _coords_finite(str(bar.svg))


def test_segment_map_omitted_without_segments_and_huge_segments_ok():
    assert 'id="segments"' not in render_html(fragmentation_report(segments=()))
    seg = SegmentView(0, 2**60, "large", 0, (SegmentBlockView(0, 2**59, "inactive"),
                                             SegmentBlockView(2**59, 2**59, "active_allocated")))
    html = render_html(fragmentation_report(segments=(seg, SegmentView(1, 1, "small", 0, ()))))
    section = html[html.index('id="segments"'):]
    _coords_finite(section[:section.index("</section>")])


# ------------------------------------------------------------------ terminal


@pytest.mark.parametrize("name", list(ALL))
def test_short_verdict_is_3_to_8_lines(name):
    report = ALL[name]()
    text = short_verdict(report)
    lines = text.splitlines()
    assert 3 <= len(lines) <= 8
    assert report.cause in lines[0]
    assert f"{report.confidence:.2f}" in lines[0]


def test_short_verdict_names_the_top_fix():
    text = short_verdict(fragmentation_report())
    assert "Top fix: [env] PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert "Rerun: zero_optimization.stage" in short_verdict(capacity_report())


# ------------------------------------------------------------------ redaction


def test_redact_nccl_hosts_are_stable_placeholders():
    r = redact_report(nccl_report())
    texts = [e.text for e in r.findings[0].evidence]
    assert texts[0].startswith("<host-1>:3063028:3066152 [3] include/alloc.h:178")
    assert texts[1].startswith("<host-1>:")                  # same host, same placeholder
    assert texts[2].startswith("<host-2>:3063025:3066048 [0]")
    assert "ng3090" not in orjson.dumps(r.to_json()).decode()
    assert "Rank 3 failed first on <host-1>" in r.summary     # learnt from the prefix, replaced everywhere
    assert r.redacted is True and nccl_report().redacted is False
    assert r.inputs[0].path == "/home/<user>/jobs/1234/job.out"
    assert r.findings[0].cause is Cause.NCCL_ERROR and r.inputs[0].kind is InputKind.NCCL_LOG
    assert r.ranks[3].line.text == texts[0]                  # SourceRefs inside views too


@pytest.mark.parametrize("text,expected", [
    ("  host      : node-17.cluster.local\n  rank      : 3", "  host      : <host-1>\n  rank      : 3"),
    ("MASTER_ADDR=10.1.2.3 MASTER_PORT=29500 connect 10.1.2.3:29500 and 10.1.2.4",
     "MASTER_ADDR=<ip-1> MASTER_PORT=29500 connect <ip-1>:29500 and <ip-2>"),
    ("Bootstrap : Using ib0:fe80::1ff:fe23:4567:890a%ib0<0> and 2001:db8:0:0:1:0:0:1",
     "Bootstrap : Using ib0:<ip-1><0> and <ip-2>"),
    ("File \"/home/alice/proj/train.py\", line 3; /Users/bob/x.py; C:\\Users\\carol\\run.log",
     "File \"/home/<user>/proj/train.py\", line 3; /Users/<user>/x.py; C:\\Users\\<user>\\run.log"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345 gh ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
     "HF_TOKEN=<token> gh <token>"),
    ("aws AKIAIOSFODNN7EXAMPLE api_key=sk9f8g7h6j5k4 --wandb 0123456789abcdef0123456789abcdef01234567",
     "aws <token> api_key=<token> --wandb <token>"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "Authorization: Bearer <token>"),
    ("secret blob aGVsbG8gd29ybGQgdGhpcyBpcyBhIHNlY3JldCBrZXk9PQ1X2Y3Z4", "secret blob <token>"),
])
def test_redact_text_cases(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("text", [
    "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)",
    "[2025-01-01 12:34:56,789] [INFO] [launch.py:347:main] Process 4242 exits successfully.",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:128",
    "torch 2.11.0+cu128, deepspeed 0.19.8, NCCL version 2.21.5+cuda12.4",
    "_ZN3c104cuda29CUDACachingAllocatorAllocateEmPvSt8functionIFvvEE at 0x7f3a2c001000",
    "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free.",
    "pad_token: <|endoftext|>, max_new_tokens=2048, use_auth_token=True",
    "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py:1773 in _call_impl",
])
def test_redact_leaves_ordinary_log_text_alone(text):
    assert redact_text(text) == text


def test_redact_report_covers_every_string_and_is_idempotent():
    base = capacity_report()
    rr = replace(base.rerun, env={"WANDB_API_KEY": "api_key=0123456789abcdef0123456789abcdef"},
                 ds_config={**DS_CONFIG, "comment": "/home/dave/ds.json"})
    r = redact_report(replace(base, rerun=rr, warnings=("rank0.log:3 from 192.168.0.7",)))
    assert r.rerun.env["WANDB_API_KEY"] == "api_key=<token>"
    assert r.rerun.ds_config["comment"] == "/home/<user>/ds.json"
    assert r.rerun.ds_config["zero_optimization"] == DS_CONFIG["zero_optimization"]   # numbers untouched
    assert r.warnings == ("rank0.log:3 from <ip-1>",)
    assert redact_report(r) == r
    html = render_html(r)
    assert "192.168.0.7" not in html and "redacted" in html


def test_timeline_without_oom_marks_the_end_and_draws_no_limit():
    plain = tuple(replace(p, label="") for p in fragmentation_report().timeline)
    html = render_html(fragmentation_report(oom=None, timeline=plain))
    section = html[html.index('id="timeline"'):]
    section = section[:section.index("</section>")]
    assert 'class="oom-lab' in section and ">end</span>" in section and "end of the series" in section
    assert 'class="limit"' not in section and 'class="sw limit"' not in section
    with_oom = render_html(fragmentation_report())
    section = with_oom[with_oom.index('id="timeline"'):]
    assert ">OOM</span>" in section[:section.index("</section>")] and 'class="sw limit"' in section


def _prose(md: str) -> str:
    """The Markdown with fenced blocks and inline code removed (those render literally)."""
    out, fence = [], None
    for ln in md.splitlines():
        if fence:
            fence = None if ln == fence else fence
            continue
        m = re.match(r"^(`{3,})", ln)
        if m:
            fence = m.group(1)
            continue
        out.append(ln)
    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", "\n".join(out))


def test_markdown_hostile_text_is_inert():
    md = render_markdown(hostile_report())
    prose = _prose(md)
    assert [ln for ln in prose.splitlines() if "<" in ln] == [MARKER]
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in prose and "{{7*7}}" in md
    assert "```text\n</script><script>alert(1)</script>" in md      # quoted verbatim inside a fence


def test_segment_map_draws_identical_segments_once_with_their_count():
    from oompost.render.html import segment_map

    same = tuple(SegmentView(0x7F0000000000 + i * 2**26, 64 * MiB, "large", 0,
                             (SegmentBlockView(0, 52 * MiB, "active_allocated"),
                              SegmentBlockView(52 * MiB, 12 * MiB, "inactive"))) for i in range(25))
    other = SegmentView(0x7F9000000000, 2 * GiB, "large", 0, (SegmentBlockView(0, 2 * GiB, "active_allocated"),))
    chart = segment_map(fragmentation_report(segments=(other,) + same))
    html = str(chart.html)
    assert "25 × 64.00 MiB large segments, each with the same layout" in html
    assert html.count('class="segrow"') == 2          # one row for the 2 GiB segment, one for the 25
    assert chart.notes == ()


def test_the_jinja_environment_is_built_once():
    """Templates compile once per process: a scan renders thousands of reports, and compiling
    the HTML template per report cost about a quarter of a scan's CPU."""
    from oompost.render import environment

    env = environment()
    assert environment() is env
    assert env.get_template("report.html.j2") is env.get_template("report.html.j2")


def test_an_xla_compile_time_oom_names_its_figure_for_what_it_is():
    # EnzymeAD/Enzyme-JAX#2422 (dev): "Used 215.17G of 31.25G hbm" is every buffer of the program, not one request
    from pathlib import Path

    import oompost
    from oompost.render import oom_numbers

    r = oompost.analyze([Path(__file__).parent / "corpus" / "EnzymeAD__Enzyme-JAX__2422" / "log.txt"])
    labels = [k for k, _ in oom_numbers(r.oom)]
    assert "the compiled program needs (all its buffers)" in labels and "tried to allocate" not in labels
    assert "tried to allocate" in [k for k, _ in oom_numbers(fragmentation_report().oom)]


def test_an_estimate_against_the_memory_models_default_device_does_not_say_it_fits():
    # sample_logs/activation_spike_jax_resmlp_batch65536_2080ti_11g: XLA's message gives no card, cap or capacity,
    # so the memory model compared against its default 80 GiB; "fits" would be a default printed as a fact
    from pathlib import Path

    import oompost

    root = Path(__file__).parent.parent / "sample_logs"
    est = oompost.analyze([str(root / "activation_spike_jax_resmlp_batch65536_2080ti_11g")]).to_json()["estimate"]
    assert est["fits"] is None and est["device_assumed"] is True
    assert any("no device size given" in a for a in est["assumptions"])
    # with the card known the verdict on fitting stands
    known = oompost.analyze([str(root / "capacity_zero2_offload_7b_3090")]).to_json()["estimate"]
    assert known["fits"] is False and "device_assumed" not in known
