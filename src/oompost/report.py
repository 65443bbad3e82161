"""The Report: the one object every renderer reads, and its JSON contract.

Everything a renderer shows is here, already computed and in plain values
(bytes as ints, texts as str); renderers only format.  ``to_json()`` gives
DESIGN.md's ``oompost.report/1`` contract plus additive fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .classify.base import Finding, NotAFix
from .model import InputInfo, SourceRef
from .remedies.ranking import RankedFix
from .remedies.rerun import RerunPlan

SCHEMA = "oompost.report/1"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of report.json, shipped in the package (``oompost/data/report.schema.json``)."""
    import json
    from importlib.resources import files

    return json.loads(files("oompost").joinpath("data/report.schema.json").read_text(encoding="utf-8"))


@dataclass(frozen=True, slots=True)
class OomSummary:
    """The first failing rank's OOM, as DESIGN.md's ``oom`` object."""

    rank: int | None
    device: int | None
    requested_bytes: int | None
    requested_tensor_bytes: int | None
    capacity_bytes: int | None
    limit_bytes: int | None
    free_bytes: int | None
    allocated_bytes: int | None
    reserved_unallocated_bytes: int | None
    process_in_use_bytes: int | None
    kind: str = ""
    limit_source: str = ""                # "allowed" (memory fraction) | "allowed_inferred" (a cap bounded from a
                                          # plain snapshot's segments and request) | "capacity" | "capacity_shared"
                                          # (less what other processes named in the message hold) | "snapshot" | ...
    message_format: str = ""
    exception: str = ""
    ref: SourceRef | None = None
    phase: str = ""                       # where the failing allocation sits
    location: str = ""                    # innermost user frame, "file.py:123 in fn"
    other_processes_bytes: int | None = None
    request_scope: str = ""               # "program": requested_bytes is a compiled program's total (XLA); "pool":
    #                                       an allocator's reservation of its pool (TensorFlow's BFC)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "device": self.device, "requested_bytes": self.requested_bytes,
            "requested_tensor_bytes": self.requested_tensor_bytes, "capacity_bytes": self.capacity_bytes,
            "limit_bytes": self.limit_bytes, "free_bytes": self.free_bytes, "allocated_bytes": self.allocated_bytes,
            "reserved_unallocated_bytes": self.reserved_unallocated_bytes,
            "process_in_use_bytes": self.process_in_use_bytes,
            "kind": self.kind, "limit_source": self.limit_source, "message_format": self.message_format,
            "exception": self.exception, "phase": self.phase, "location": self.location,
            "other_processes_bytes": self.other_processes_bytes, "request_scope": self.request_scope,
            "source": self.ref.to_json() if self.ref else None,
        }


@dataclass(frozen=True, slots=True)
class RankView:
    rank: int
    failed: bool
    first: bool
    peak_bytes: int | None = None
    exitcode: int | None = None
    cause_hint: str = ""
    line: SourceRef | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "failed": self.failed, "first": self.first, "peak_bytes": self.peak_bytes,
                "exitcode": self.exitcode, "cause_hint": self.cause_hint,
                "source": self.line.to_json() if self.line else None}


# The rerun plan is the remedies' own record (one definition, read as-is by renderers).
RerunView = RerunPlan


@dataclass(frozen=True, slots=True)
class CounterfactualView:
    setting: str
    oom: bool
    peak_reserved_bytes: int | None
    note: str = ""
    source: str = "replay"                # "replay" (allocator simulation) | "estimate"
    tight: bool = False                   # replays without failing, but under 2 % below the limit

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "oom": self.oom, "peak_reserved_bytes": self.peak_reserved_bytes,
                "note": self.note, "source": self.source, "tight": self.tight,
                "result": "oom" if self.oom else ("replays_tight" if self.tight else "replays")}


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One point of a memory timeline (snapshot trace index or training step)."""

    x: float
    allocated: int | None
    reserved: int | None
    label: str = ""


@dataclass(frozen=True, slots=True)
class StackView:
    label: str                            # innermost user frame
    bytes: int
    count: int
    frames: tuple[str, ...] = ()          # "file:line in fn", innermost first


@dataclass(frozen=True, slots=True)
class SegmentBlockView:
    offset: int
    size: int
    state: str


@dataclass(frozen=True, slots=True)
class SegmentView:
    address: int
    total_size: int
    segment_type: str
    stream: int
    blocks: tuple[SegmentBlockView, ...]


@dataclass(frozen=True, slots=True)
class Report:
    cause: str
    sub_cause: str | None
    confidence: float
    summary: str
    findings: tuple[Finding, ...]
    oom: OomSummary | None
    ranks: tuple[RankView, ...]
    rerun: RerunView | None
    counterfactuals: tuple[CounterfactualView, ...]
    inputs: tuple[InputInfo, ...]
    timeline: tuple[SeriesPoint, ...] = ()
    timeline_source: str = ""             # "snapshot" | "steps" | ""
    timeline_unit: str = ""               # "trace event" | "step"
    top_stacks: tuple[StackView, ...] = ()
    segments: tuple[SegmentView, ...] = ()
    estimate: dict[str, Any] | None = None
    facts: tuple[tuple[str, str], ...] = ()       # (name, value) for the "run" table
    warnings: tuple[str, ...] = ()
    version: str = ""
    redacted: bool = False
    fixes: tuple[RankedFix, ...] = ()              # the one ranking (remedies.ranking), the plan first
    not_worth: tuple[NotAFix, ...] = ()            # advice that does not address this cause; never also a fix
    estimate_parts: tuple[tuple[str, int], ...] = ()   # the configured run's peak, in parts that add up to it
    estimate_peak_phase: str = ""

    @property
    def primary(self) -> Finding | None:
        return next((f for f in self.findings if f.primary), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "cause": self.cause,
            "sub_cause": self.sub_cause,
            "confidence": round(self.confidence, 3),
            "summary": self.summary,
            "findings": [f.to_json() for f in self.findings],
            "oom": self.oom.to_json() if self.oom else None,
            "ranks": [r.to_json() for r in self.ranks],
            "rerun": self.rerun.to_json() if self.rerun else None,
            "counterfactuals": [c.to_json() for c in self.counterfactuals] or None,
            "inputs": [{"path": i.path, "kind": i.kind.value, "warnings": list(i.warnings)} for i in self.inputs],
            "timeline": {"source": self.timeline_source, "unit": self.timeline_unit,
                         "points": [[p.x, p.allocated, p.reserved] for p in self.timeline]} if self.timeline else None,
            "top_stacks": [{"label": s.label, "bytes": s.bytes, "count": s.count, "frames": list(s.frames)}
                           for s in self.top_stacks],
            "estimate": {**self.estimate, "parts": [[k, v] for k, v in self.estimate_parts],
                         "peak_phase": self.estimate_peak_phase} if self.estimate else None,
            "fixes": [x.to_json() for x in self.fixes],
            "not_worth_trying": [n.to_json() for n in self.not_worth],
            "facts": {k: v for k, v in self.facts},
            "warnings": list(self.warnings),
            "oompost_version": self.version,
            "redacted": self.redacted,
        }
