"""report.md: a ticket-sized summary of the Report (verdict, proof, fixes, rerun diff).

Markdown is pasted into trackers that render inline HTML, so every piece of
log-derived text goes through one of the filters below: ``md_text`` for prose,
``md_cell`` for table cells, ``md_code`` for inline code and ``md_fence`` for
blocks (a fence longer than any backtick run inside).  Lists are cut to a
budget so the document stays far below the 65,000-character limit trackers
impose, whatever the input size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from . import (cause_title, clip, env_lines, environment, limit_label, not_fixes, oom_numbers, ranked_fixes,
               secondary_findings, trainer_arg_words, whatif_caveat)

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report

MAX_CHARS = 60_000          # hard ceiling for the rendered document (trackers cut at 65,536)
MARKER = "<!-- oompost report -->"

_BACKTICKS = re.compile(r"`+")


def _longest_backtick_run(text: str) -> int:
    return max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)


def md_text(text: Any, limit: int = 2000) -> str:
    """Prose: one paragraph, HTML neutralised (trackers render inline tags)."""
    s = clip(text, limit)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_cell(text: Any, limit: int = 300) -> str:
    """A table cell: one line, no live pipes, backticks or tags."""
    s = md_text(text, limit)
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`") or " "


def md_code(text: Any, limit: int = 200, cell: bool = False) -> str:
    """Inline code whose delimiter is longer than any backtick run inside."""
    s = clip(text, limit)
    if not s:
        return ""
    n = _longest_backtick_run(s) + 1
    pad = " " if s.startswith("`") or s.endswith("`") or n > 1 else ""
    out = "`" * n + pad + s + pad + "`" * n
    # GFM splits table rows on "|" even inside code spans; "\|" is the escape it honours there.
    return out.replace("|", "\\|") if cell else out


def md_fence(text: str, lang: str = "", line_limit: int = 400, max_lines: int = 60, max_chars: int = 8000) -> str:
    """A fenced block; long lines and long blocks are cut and say so."""
    lines = str(text).splitlines() or [""]
    more = len(lines) - max_lines
    lines = [clip(ln, line_limit) for ln in lines[:max_lines]]
    body, used = [], 0
    for i, ln in enumerate(lines):
        if used + len(ln) > max_chars:
            more += len(lines) - i
            break
        body.append(ln)
        used += len(ln) + 1
    if more > 0:
        body.append(f"… {more} more line(s)")
    joined = "\n".join(body)
    fence = "`" * max(3, _longest_backtick_run(joined) + 1)
    return f"{fence}{lang}\n{joined}\n{fence}"


@dataclass(frozen=True, slots=True)
class Budget:
    """How much of each list the document shows; ``tight()`` when the first try is too long."""

    evidence: int = 6
    numbers: int = 20
    secondary: int = 15
    fixes: int = 15
    not_fixes: int = 10
    ranks: int = 32
    inputs: int = 20
    warnings: int = 30
    facts: int = 25
    changes: int = 15
    kv: int = 25
    notes: int = 10
    counterfactuals: int = 12
    json_chars: int = 6000
    line: int = 400
    detail: int = 3000
    evidence_line: int = 1200     # an OOM message is ~600 characters and is the proof: keep it whole

    def tight(self) -> "Budget":
        return Budget(3, 10, 6, 8, 5, 12, 8, 8, 10, 8, 12, 5, 6, 2500, 200, 1200, 400)


def _shown(items: Any, n: int) -> tuple[list[Any], int]:
    items = list(items)
    return items[:n], max(0, len(items) - n)


def _json_block(value: Any, limit: int, line_limit: int = 300) -> str:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS,
                        default=str).decode()
    lines = [clip(ln, line_limit) for ln in text.splitlines()]
    kept, used = [], 0
    for ln in lines:
        if used + len(ln) > limit:
            break
        kept.append(ln)
        used += len(ln) + 1
    if len(kept) < len(lines):
        kept.append(f"… {len(lines) - len(kept)} more line(s) (see report.json)")
    return md_fence("\n".join(kept), "json", line_limit=line_limit + 60, max_lines=len(kept), max_chars=limit + 400)


def _context(report: "Report", b: Budget) -> dict[str, Any]:
    primary = report.primary
    evidence, evidence_more = _shown(primary.evidence if primary else (), b.evidence)
    numbers, numbers_more = _shown(primary.numbers if primary else (), b.numbers)
    secondary, secondary_more = _shown(secondary_findings(report), b.secondary)
    fixes, fixes_more = _shown(ranked_fixes(report), b.fixes)
    nots, nots_more = _shown(not_fixes(report), b.not_fixes)
    ranks, ranks_more = _shown(report.ranks, b.ranks)
    first = next((k for k in report.ranks if k.first), None)
    if first is not None and first not in ranks:      # the first failing rank is always in the table
        ranks.append(first)
        ranks_more -= 1
    inputs, inputs_more = _shown(report.inputs, b.inputs)
    warnings, warnings_more = _shown(list(report.warnings), b.warnings)
    facts, facts_more = _shown(report.facts, b.facts)
    cfs, cfs_more = _shown(report.counterfactuals, b.counterfactuals)
    rr = report.rerun
    rerun: dict[str, Any] | None = None
    if rr is not None:
        shell, env_more = _shown(env_lines(rr), b.kv)
        args, args_more = _shown(trainer_arg_words(rr), b.kv)
        changes, changes_more = _shown(rr.changes, b.changes)
        notes, notes_more = _shown(list(rr.notes) + list(rr.validation_errors), b.notes)
        shell += [f"# … {env_more} more"] if env_more else []
        arg_line = " ".join(args)
        rerun = {
            "view": rr, "diff": _json_block(rr.ds_config_diff, b.json_chars) if rr.ds_config_diff else "",
            "shell": md_fence("\n".join(shell), "sh", b.line) if shell else "",
            "args": md_fence(arg_line + (f"  # … {args_more} more" if args_more else ""), "sh", 2000)
            if args else "",
            "changes": changes, "changes_more": changes_more, "notes": notes, "notes_more": notes_more,
        }
    from .. import __version__

    return {
        "r": report, "primary": primary, "title": cause_title(report.cause), "b": b,
        "version": report.version or __version__,
        "evidence": evidence, "evidence_more": evidence_more, "numbers": numbers, "numbers_more": numbers_more,
        "secondary": secondary, "secondary_more": secondary_more, "fixes": fixes, "fixes_more": fixes_more,
        "nots": nots, "nots_more": nots_more, "ranks": ranks if len(report.ranks) > 1 else [],
        "ranks_more": ranks_more, "inputs": inputs, "inputs_more": inputs_more, "warnings": warnings,
        "warnings_more": warnings_more, "facts": facts, "facts_more": facts_more, "cfs": cfs, "cfs_more": cfs_more,
        "whatif_caveat": whatif_caveat(report),
        "rerun": rerun, "oom_rows": oom_numbers(report.oom), "limit_label": limit_label(report.oom),
    }


def render_markdown(report: "Report") -> str:
    """The report as Markdown, first line ``<!-- oompost report -->``, under ``MAX_CHARS``."""
    template = environment().get_template("report.md.j2")
    budget = Budget()
    out = template.render(**_context(report, budget))
    if len(out) > MAX_CHARS:
        out = template.render(**_context(report, budget.tight()))
    if len(out) > MAX_CHARS:  # cannot happen with the tight budget; never hand a tracker more than it takes
        cut = out[: MAX_CHARS - 200].rsplit("\n", 1)[0]
        if cut.count("\n```") % 2:
            cut += "\n```"
        out = cut + "\n\n… report truncated (see report.json)\n"
    return out
