"""Run the rules, then weigh everything they and the inputs show into one verdict.

The rules (one per file under ``rules/``) gather evidence and argue for their
cause with named signals.  The verdict (``verdict.decide``) weighs those
findings together with the failure's own features (its numbers, its phase,
the failure lines, cues of where the run was) in a model fitted on real
crashes, under hard physical constraints; the best-supported cause is the
primary finding, with its probability as the confidence.  ``unknown`` is
only for inputs without a failure.  The other findings are secondary.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..analysis.context import Context
from .base import Cause, Finding, Severity
from .constraints import confidence_ceiling, impossible_causes
from .rules._common import HOLD

if TYPE_CHECKING:
    from .verdict import Verdict


def _run(rule, ctx: Context, advice: list[Finding]) -> list[Finding]:  # type: ignore[no-untyped-def]
    """A rule that fails is reported (as an advisory finding naming it), never swallowed, and never
    stops the other rules."""
    try:
        return list(rule.evaluate(ctx))
    except Exception as e:  # noqa: BLE001 - reported in the report itself
        advice.append(Finding("RULEERR", Cause.UNKNOWN, f"Rule {rule.code} failed on these inputs", 0.0,
                              detail=f"{type(e).__name__}: {e}. Its cause was not weighed; please report it "
                                     "with the inputs.", severity=Severity.ADVICE))
        return []


RUNNER_UP = 0.10     # a cause the verdict model gives at least this probability is named beside the verdict
RUNNERS_UP = 2


def runners_up(v: "Verdict") -> tuple[tuple[Cause, float], ...]:
    """The causes after the verdict's own that the model still gives ``RUNNER_UP`` or more, likeliest first (at most
    ``RUNNERS_UP``): what a reader should rule out next, with the odds the fitted model puts on it."""
    rest = sorted(((c, p) for c, p in v.probabilities if c is not v.cause and p >= RUNNER_UP), key=lambda x: -x[1])
    return tuple((c, round(p, 3)) for c, p in rest[:RUNNERS_UP])


def classify(ctx: Context) -> tuple[Finding, ...]:
    from .explain import finding_for
    from .features import extract, missing_evidence
    from .registry import ADVICE_RULES, CAUSE_RULES, FALLBACK
    from .verdict import decide

    causes: list[Finding] = []
    advice: list[Finding] = []
    for rule in CAUSE_RULES:
        causes.extend(_run(rule, ctx, advice))
    for rule in ADVICE_RULES:
        advice.extend(_run(rule, ctx, advice))
    feats = extract(ctx, causes)
    v = decide(feats, impossible_causes(ctx))
    ceiling = confidence_ceiling(ctx, v.cause)
    if ceiling is not None and v.probability > ceiling:
        v = dataclasses.replace(v, probability=ceiling)
    settle = tuple(missing_evidence(ctx, v.cause))
    if v.cause is Cause.UNKNOWN:
        primary = FALLBACK.evaluate(ctx)[0]
        causes.append(primary)
    else:
        mine = [f for f in causes if f.cause is v.cause]
        primary = max(mine, key=lambda f: f.confidence) if mine else finding_for(ctx, v, settle)
        if not mine:
            causes.append(primary)
    primary = dataclasses.replace(primary, primary=True, confidence=round(v.probability, 3),
                                  weighed=v.contributions, settle=settle, runners_up=runners_up(v))
    rest = [f for f in causes if f.code != primary.code]
    rest.sort(key=lambda f: (-f.confidence, f.cause.order))
    return (primary, *rest, *advice)


__all__ = ["classify", "impossible_causes", "Cause", "Finding", "Severity", "HOLD"]
