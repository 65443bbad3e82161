"""The few lines ``oompost analyze`` prints: cause, confidence, summary, the top fix.

Plain text, no colour (the CLI decides about that); where the report files
went is the CLI's to print.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import cause_title, clip, fix_value, gib, limit_label, ranked_fixes, request_label

if TYPE_CHECKING:  # pragma: no cover
    from ..remedies.ranking import RankedFix
    from ..report import Report, RerunView

WIDTH = 160


def short_verdict(report: "Report") -> str:
    """3 to 8 lines: verdict, summary, the OOM in one line, the top fix, the rerun prediction."""
    sub = f"/{report.sub_cause}" if report.sub_cause else ""
    code = f", {report.primary.code}" if report.primary else ""
    lines = [f"oompost: {report.cause}{sub} — {cause_title(report.cause)} "
             f"(confidence {report.confidence:.2f}{code})",
             "  " + clip(report.summary or "(no summary)", WIDTH * 2)]
    o = report.oom
    if o is not None:
        parts = []
        if o.rank is not None:
            parts.append(f"rank {o.rank}")
        if o.requested_bytes is not None:
            parts.append(f"{request_label(o)} {gib(o.requested_bytes)}")
        if o.reserved_unallocated_bytes:
            parts.append(f"{gib(o.reserved_unallocated_bytes)} reserved but unallocated")
        if o.limit_bytes:
            parts.append(f"{limit_label(o)} {gib(o.limit_bytes)}")
        if parts:
            lines.append("  OOM: " + clip(", ".join(parts), WIDTH))
    fixes = ranked_fixes(report)
    rr = report.rerun
    if fixes:
        top = fixes[0]
        if top.plan and rr is not None:
            lines.append("  Top fix: the rerun plan — " + clip("; ".join(rr.changes) or "see the report", WIDTH))
            lines.append("  Rerun: " + clip(_plan_outcome(top, rr), WIDTH))
        else:
            x = top.fix
            value = fix_value(x.value)
            setting = f"{x.key}={value}" if value and value != "null" and x.kind in ("env", "ds_config",
                                                                                      "trainer_arg") else x.key
            tail = f" ({top.note})" if top.note else ""
            lines.append("  Top fix: " + clip(f"[{x.kind}] {setting} — {top.why}{tail}", WIDTH))
    else:
        lines.append("  Top fix: none proposed")
    if rr is not None and (rr.predicted_peak_bytes or rr.changes) and not (fixes and fixes[0].plan):
        change = rr.changes[0] if rr.changes else ""
        peak = (f"predicted peak {gib(rr.predicted_peak_bytes)} of {gib(rr.device_bytes)}"
                if rr.predicted_peak_bytes else "")
        lines.append("  Rerun: " + clip("; ".join(p for p in (change, peak) if p), WIDTH))
    if report.redacted:
        lines.append("  (redacted: hosts, addresses, user names and tokens replaced)")
    return "\n".join(lines[:8])


def _plan_outcome(top: "RankedFix", rr: "RerunView") -> str:
    if top.basis == "replay":
        return top.note
    if rr.predicted_peak_bytes and rr.device_bytes:
        words = {"fits": "fits", "tight": "within 10 % of the limit", "too_large": "still too large"}.get(
            top.verdict, "unverified")
        s = f"predicted peak {gib(rr.predicted_peak_bytes)} of {gib(rr.device_bytes)} ({words})"
    else:
        s = top.note or "not priced"
    if rr.changes_global_batch:
        s += f"; global batch {rr.global_batch[0]} → {rr.global_batch[1]}"
    return s
