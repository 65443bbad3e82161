"""Renderers: one ``Report`` in, one document (str) out.

``render(report, "html" | "md" | "json")`` is the only entry point the CLI
needs.  The helpers below are the presentation decisions every format shares
(cause words, how fixes are ranked, what the limit is called) so the HTML and
Markdown reports never disagree.  Jinja is imported lazily (DESIGN.md).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..units import GiB, fmt_bytes

if TYPE_CHECKING:  # pragma: no cover
    import jinja2

    from ..classify.base import Finding, Fix, NotAFix
    from ..remedies.ranking import RankedFix
    from ..report import OomSummary, Report, RerunView

# Words shown next to the code.  The code stays the machine-readable name.
CAUSE_TITLES: dict[str, str] = {
    "config_error": "Configuration error",
    "host_oom": "Host (CPU) memory ran out",
    "nccl_error": "Distributed / NCCL failure",
    "capacity": "The run does not fit (capacity)",
    "leak": "Memory leak: kept tensors grow until the limit",
    "comm_buffer": "Communication buffer does not fit",
    "fragmentation": "Allocator fragmentation",
    "activation_spike": "Activation memory spike",
    "unknown": "Cause not established",
}

# Default output file names, per format, for the CLI.
FILENAMES: dict[str, str] = {"html": "report.html", "md": "report.md", "json": "report.json"}


def cause_title(cause: str) -> str:
    return CAUSE_TITLES.get(cause, cause.replace("_", " ").capitalize())


def limit_label(oom: "OomSummary | None") -> str:
    """What the OOM limit is: the memory-fraction cap or the card."""
    if oom is not None and oom.limit_source == "capacity_shared":
        return "capacity less other processes"
    if oom is not None and oom.limit_source == "allowed_inferred":
        return "allowed cap (inferred)"
    return "allowed cap" if oom is not None and oom.limit_source == "allowed" else "capacity"


def gib(n: int | float | None) -> str:
    """'12.34 GiB'; below 1 GiB the exact size follows: '0.02 GiB (20.00 MiB)'."""
    if n is None:
        return "n/a"
    s = f"{n / GiB:,.2f} GiB"
    if abs(n) < GiB:
        s += f" ({fmt_bytes(n)})"
    return s


def clip(text: Any, limit: int) -> str:
    """One line, at most ``limit`` characters, with an ellipsis saying so; cut
    at a word boundary when one is near."""
    s = str(text)
    if "\n" in s or "\r" in s:
        s = " ".join(s.split())
    if len(s) <= limit:
        return s
    cut = s[: max(0, limit - 1)]
    space = cut.rfind(" ")
    if space >= limit * 0.6:
        cut = cut[:space].rstrip(" ,;:—-")
    return cut + "…"


def fix_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list, tuple)):
        import orjson

        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    return str(value)


def env_lines(rerun: "RerunView") -> list[str]:
    """The rerun's environment as shell lines: ``export K=V`` (values quoted when needed)."""
    return [f"export {k}={shlex.quote(fix_value(v))}" for k, v in sorted(rerun.env.items())]


def trainer_arg_words(rerun: "RerunView") -> list[str]:
    """The rerun's trainer arguments as ``--key value`` words."""
    return [f"--{k} {shlex.quote(fix_value(v))}" for k, v in rerun.trainer_args.items()]


def ranked_fixes(report: "Report") -> list["RankedFix"]:
    """The report's one fix list (``remedies.ranking``: the rerun plan first,
    priced, nothing that is also "not worth trying").  A hand-built Report
    without that list gets the primary finding's fixes, unpriced."""
    from ..remedies.ranking import RankedFix

    if report.fixes:
        return list(report.fixes)
    primary = report.primary
    return [RankedFix(i + 1, x, primary, x.why) for i, x in enumerate(primary.fixes if primary else ())]


def not_fixes(report: "Report") -> list["NotAFix"]:
    """Advice that does not address this cause (never also a fix)."""
    if report.fixes or report.not_worth:
        return list(report.not_worth)
    primary = report.primary
    return list(primary.not_fixes) if primary else []


def whatif_caveat(report: "Report") -> str:
    """When a replay gets past the OOM but the verdict is that the run cannot fit,
    say why the two do not contradict each other."""
    if report.cause not in ("capacity", "leak") or not any(not c.oom for c in report.counterfactuals):
        return ""
    est = report.estimate or {}
    peak = est.get("predicted_peak_bytes")
    limit = report.oom.limit_bytes if report.oom else None
    tail = (f" (the memory model puts the configured run at {gib(peak)} against {gib(limit)})"
            if isinstance(peak, int) and limit else "")
    what = "the run needs more memory than the limit" if report.cause == "capacity" else \
        "memory keeps growing every step"
    return (f"The verdict does not rest on these replays: {what}{tail}. A setting that gets the recorded trace past "
            "the failing allocation only moves the OOM to a later one, so none of them is proposed as a fix.")


def secondary_findings(report: "Report") -> list["Finding"]:
    return [f for f in report.findings if not f.primary]


def request_label(oom: "OomSummary") -> str:
    """What the message's request figure is: the failing allocation, (XLA's compile-time OOM, "Used 215.17G
    of 31.25G hbm") every buffer of the compiled program together, or (TensorFlow's "failed to allocate 2.96G
    (3173555200 bytes) from device") the allocator's reservation of its pool."""
    if oom.request_scope == "program":
        return "the compiled program needs (all its buffers)"
    if oom.request_scope == "pool":
        return "the allocator's pool reservation refused"
    return "tried to allocate"


def oom_numbers(oom: "OomSummary | None") -> list[tuple[str, str]]:
    """The OOM message's figures as (label, value) rows, known ones only."""
    if oom is None:
        return []
    rows: list[tuple[str, str]] = []

    def add(label: str, v: int | None) -> None:
        if v is not None:
            rows.append((label, fmt_bytes(v)))

    add(request_label(oom), oom.requested_bytes)
    add("tensor requested (snapshot)", oom.requested_tensor_bytes)
    add("allocated by PyTorch", oom.allocated_bytes)
    add("reserved but unallocated", oom.reserved_unallocated_bytes)
    add("free (as the message says)", oom.free_bytes)
    add("in use by this process", oom.process_in_use_bytes)
    add("other processes", oom.other_processes_bytes)
    add("total capacity", oom.capacity_bytes)
    if oom.limit_bytes is not None:
        rows.append((f"limit ({limit_label(oom)})", fmt_bytes(oom.limit_bytes)))
    return rows


def ref_label(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line is not None else source


# ------------------------------------------------------------ Jinja (one env)


def breakable(text: object) -> "Markup":
    """Escaped text with a line-break opportunity (<wbr>) after each "/", "_" and ".": a long path
    in a table cell wraps at its separators instead of widening the table past the screen."""
    import re

    from markupsafe import Markup, escape

    parts = re.split(r"(?<=[/_.])", str(text))
    return Markup("<wbr>").join(escape(p) for p in parts)


@functools.cache
def environment() -> "jinja2.Environment":
    """The one Jinja environment: templates ship in ``oompost/templates``;
    HTML templates autoescape, Markdown ones are plain text (their own filters
    make log text safe to paste); an undefined name is an error."""
    import jinja2

    loader = jinja2.PackageLoader("oompost", "templates")
    env = jinja2.Environment(
        loader=loader,
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "html.j2", "svg"),
                                            disabled_extensions=("md", "md.j2", "txt"),
                                            default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    from .markdown import md_cell, md_code, md_fence, md_text

    env.filters.update(bytes=fmt_bytes, gib=gib, clip=clip, fixvalue=fix_value, breakable=breakable,
                       md_text=md_text, md_cell=md_cell, md_code=md_code, md_fence=md_fence)
    env.globals.update(cause_title=cause_title, ref_label=ref_label, fmt_bytes=fmt_bytes)
    return env


@functools.cache
def asset_source(name: str) -> str:
    """A file of ``oompost/templates`` read verbatim (our CSS/JS, never log text)."""
    env = environment()
    assert env.loader is not None
    return env.loader.get_source(env, name)[0]


# ------------------------------------------------------------------ registry


def _html(report: "Report") -> str:
    from .html import render_html

    return render_html(report)


def _md(report: "Report") -> str:
    from .markdown import render_markdown

    return render_markdown(report)


def _json(report: "Report") -> str:
    from .json_out import render_json

    return render_json(report)


RENDERERS: dict[str, Callable[["Report"], str]] = {"html": _html, "md": _md, "json": _json}


def render(report: "Report", fmt: str) -> str:
    """Render ``report`` as ``fmt`` ("html", "md" or "json")."""
    try:
        fn = RENDERERS[fmt]
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r} (choose from {', '.join(RENDERERS)})") from None
    return fn(report)
