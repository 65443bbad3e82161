"""What a rule is and what it returns.

A rule reads the analysis context (evidence plus derived numbers) and returns
zero or more ``Finding``s.  Each finding names its cause, carries the evidence
lines that prove it, a confidence built from named signals (so the report can
say "0.86 = request fits in free (0.5) + no block fits (0.2) + replay (0.16)"),
the numbers it reasoned with, and structured fixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from ..model import SourceRef

if TYPE_CHECKING:  # pragma: no cover
    from ..analysis.context import Context


class Cause(str, Enum):
    """DESIGN.md's taxonomy, in decision order."""

    CONFIG_ERROR = "config_error"
    HOST_OOM = "host_oom"
    NCCL_ERROR = "nccl_error"
    CAPACITY = "capacity"
    LEAK = "leak"
    COMM_BUFFER = "comm_buffer"
    FRAGMENTATION = "fragmentation"
    ACTIVATION_SPIKE = "activation_spike"
    UNKNOWN = "unknown"

    @property
    def order(self) -> int:
        return list(Cause).index(self)


class Severity(str, Enum):
    CAUSE = "cause"          # a candidate root cause
    ADVICE = "advice"        # a secondary finding: a setting that does nothing, rank skew...


@dataclass(frozen=True, slots=True)
class Fix:
    """One concrete change: ``kind`` ∈ env | ds_config | trainer_arg | code."""

    kind: str
    key: str
    value: Any
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "value": self.value, "why": self.why}


@dataclass(frozen=True, slots=True)
class NotAFix:
    """Advice people give that does not address this cause (and why)."""

    what: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "why": self.why}


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    cause: Cause
    title: str
    confidence: float
    evidence: tuple[SourceRef, ...] = ()
    fixes: tuple[Fix, ...] = ()
    not_fixes: tuple[NotAFix, ...] = ()
    signals: tuple[tuple[str, float], ...] = ()          # named parts of the confidence
    numbers: tuple[tuple[str, str], ...] = ()            # (label, formatted value) it reasoned with
    detail: str = ""                                      # one paragraph: the argument
    sub_cause: str | None = None
    severity: Severity = Severity.CAUSE
    primary: bool = False
    weighed: tuple[tuple[str, float], ...] = ()           # the verdict model's largest contributions
    settle: tuple[str, ...] = ()                          # what would settle the verdict
    runners_up: tuple[tuple[Cause, float], ...] = ()      # the verdict model's next causes (p >= 0.10), likeliest first

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code, "cause": self.cause.value, "sub_cause": self.sub_cause, "title": self.title,
            "confidence": round(self.confidence, 3), "primary": self.primary, "severity": self.severity.value,
            "detail": self.detail,
            "evidence": [e.to_json() for e in self.evidence],
            "fixes": [f.to_json() for f in self.fixes],
            "not_fixes": [n.to_json() for n in self.not_fixes],
            "signals": [{"name": n, "weight": round(w, 3)} for n, w in self.signals],
            "numbers": [{"label": k, "value": v} for k, v in self.numbers],
            "weighed": [{"name": n, "weight": round(w, 3)} for n, w in self.weighed],
            "settle": list(self.settle),
            "runners_up": [{"cause": c.value, "probability": round(p, 3)} for c, p in self.runners_up],
        }


def confidence(signals: list[tuple[str, float]], cap: float = 0.99) -> float:
    """Sum of named signal weights, clipped to [0, cap]."""
    return max(0.0, min(cap, sum(w for _, w in signals)))


class Rule(Protocol):
    """One rule per module under classify/rules/; its docstring explains the
    cause and the fix and is shown in the report."""

    code: str
    cause: Cause

    def evaluate(self, ctx: "Context") -> list[Finding]: ...
