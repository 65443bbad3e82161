"""Run the rules and choose the primary cause (DESIGN.md's taxonomy order).

The primary cause is the first cause, in taxonomy order, with a finding that
holds (confidence ≥ 0.5); the other findings are reported as secondary.
When nothing holds, the ``unknown`` finding says why.
"""

from __future__ import annotations

import dataclasses

from ..analysis.context import Context
from .base import Cause, Finding, Severity
from .rules._common import HOLD


def classify(ctx: Context) -> tuple[Finding, ...]:
    from .registry import ADVICE_RULES, CAUSE_RULES, FALLBACK

    causes: list[Finding] = []
    for rule in CAUSE_RULES:
        causes.extend(rule.evaluate(ctx))
    advice: list[Finding] = []
    for rule in ADVICE_RULES:
        advice.extend(rule.evaluate(ctx))
    holding = [f for f in causes if f.confidence >= HOLD]
    if holding:
        primary = min(holding, key=lambda f: (f.cause.order, -f.confidence))
    else:
        primary = FALLBACK.evaluate(ctx)[0]
        causes.append(primary)
    primary = dataclasses.replace(primary, primary=True)
    rest = [f for f in causes if f is not primary and f.code != primary.code]
    rest.sort(key=lambda f: (-f.confidence, f.cause.order))
    return (primary, *rest, *advice)


__all__ = ["classify", "Cause", "Finding", "Severity"]
