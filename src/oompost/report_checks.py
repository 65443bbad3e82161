"""Consistency checks over a ``report.json``: the story must hold together.

``problems(data)`` returns what contradicts itself (empty when nothing does):
a fix that is also "not worth trying", a fix from a finding that did not
hold, a fix predicted not to fit ranked above one that fits, the top fix
neither fitting nor labelled, two predictions for the rerun configuration,
an estimate whose parts do not add up to its peak (1 %), a change of the
global batch the summary does not state, repeated advice.  The tests run it
over every sample and corpus case; anyone can run it over their own reports.
"""

from __future__ import annotations

import re
from typing import Any

_GOOD = {"fits", "replays"}
_BAD = {"too_large", "replay_fails"}
_PEAK = re.compile(r"predicted peak ([\d.,]+ [KMGT]?i?B)")


def _phrases(fix: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for k in str(fix.get("key", "")).lower().split(" + "):
        out.add(k.strip().split(".")[-1])
    v = fix.get("value")
    if fix.get("kind") == "env" and isinstance(v, str):
        out.update(p.split(":")[0].lower() for p in v.split(",") if p)
    return {p for p in out if len(p) > 3 and p not in ("stage", "rerun plan", "plan")}


def problems(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    fixes = data.get("fixes") or []
    nots = data.get("not_worth_trying") or []
    findings = {f["code"]: f for f in data.get("findings") or []}
    primary = next((f for f in data.get("findings") or [] if f.get("primary")), None)

    # nothing in both lists; no repeats
    for x in fixes:
        if x.get("plan"):
            continue
        for n in nots:
            hit = [p for p in _phrases(x) if p in str(n.get("what", "")).lower()]
            if hit:
                out.append(f"fix #{x['rank']} {x['key']} is also under 'not worth trying' ({n['what']!r})")
    whats = [" ".join(str(n.get("what", "")).lower().split()) for n in nots]
    if len(set(whats)) != len(whats):
        out.append("'not worth trying' repeats an item")
    keys = [(x.get("kind"), x.get("key"), repr(x.get("value"))) for x in fixes if not x.get("plan")]
    if len(set(keys)) != len(keys):
        out.append("a fix is listed twice")

    # only findings that hold (and the verdict itself) contribute
    for x in fixes:
        src = x.get("from")
        if src == "rerun" or src is None:
            continue
        f = findings.get(src)
        if f is None:
            out.append(f"fix #{x['rank']} comes from an unknown finding {src}")
        elif not f.get("primary") and f.get("confidence", 0) < 0.5:
            out.append(f"fix #{x['rank']} comes from {src}, which did not hold ({f.get('confidence')})")

    # fixes that do not fit never rank above fixes that do; the top fix fits or says it does not
    seen_bad = None
    for x in fixes:
        v = x.get("verdict", "")
        if v in _BAD and seen_bad is None:
            seen_bad = x
        if v in _GOOD and seen_bad is not None:
            out.append(f"fix #{seen_bad['rank']} ({seen_bad['key']}) is predicted not to fit but ranks above "
                       f"#{x['rank']} ({x['key']}), which fits")
    if fixes:
        top = fixes[0]
        if top.get("verdict") in _BAD and "still" not in str(top.get("note", "")):
            out.append("the top fix does not fit and does not say so")
        if data.get("rerun") and (data["rerun"].get("changes") or data["rerun"].get("env")) and not top.get("plan"):
            if any(x.get("verdict") in _GOOD for x in fixes if not x.get("plan")) or \
                    (data["rerun"].get("fits") is not False):
                out.append("the rerun plan is not the top fix")

    # one prediction per configuration
    rr = data.get("rerun") or {}
    plan = next((x for x in fixes if x.get("plan")), None)
    if plan is not None and plan.get("predicted_peak_bytes") != rr.get("predicted_peak_bytes"):
        out.append(f"the plan's fix says {plan.get('predicted_peak_bytes')}, the rerun section "
                   f"{rr.get('predicted_peak_bytes')}")
    if rr.get("predicted_peak_bytes"):
        from .units import fmt_bytes

        said = set(_PEAK.findall(data.get("summary", "")))
        if said and said != {fmt_bytes(rr["predicted_peak_bytes"])}:
            out.append(f"the summary predicts {sorted(said)}, the rerun plan {fmt_bytes(rr['predicted_peak_bytes'])}")
    # the global batch: a plan that changes it says so in the summary
    gb = rr.get("global_batch") or {}
    if gb.get("before") and gb.get("after") and gb["before"] != gb["after"]:
        if f"{gb['before']} → {gb['after']}" not in data.get("summary", ""):
            out.append(f"the plan changes the global batch {gb['before']} → {gb['after']} but the summary does not say so")

    # the estimate's parts add up to its peak
    est = data.get("estimate") or {}
    parts = est.get("parts")
    if parts and est.get("predicted_peak_bytes"):
        total = sum(v for _, v in parts)
        peak = est["predicted_peak_bytes"]
        if abs(total - peak) > 0.01 * peak:
            out.append(f"the estimate's parts add up to {total:,} bytes, its peak is {peak:,}")

    # claims no stronger than a replay allows
    for c in data.get("counterfactuals") or []:
        if not c.get("oom") and re.search(r"\bfits\b", str(c.get("note", ""))):
            out.append(f"the replay of {c.get('setting')} is called 'fits'")
    if primary is not None and primary.get("confidence") is not None and isinstance(data.get("confidence"), float):
        if len(repr(data["confidence"])) > 6:
            out.append(f"confidence printed as {data['confidence']!r}")
    return out
