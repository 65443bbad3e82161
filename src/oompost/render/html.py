"""report.html: one self-contained page (inline CSS, JS and SVG; no network).

The template autoescapes everything.  The only ``Markup`` built here is SVG
assembled with ``Markup.format``, which escapes every argument, from numbers
and our own labels; log-derived text is never marked safe.  The report's JSON
rides along as a ``<script type="application/json">`` island (``tojson``
escapes ``<``, ``>``, ``&`` and ``'``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from markupsafe import Markup

from . import (asset_source, cause_title, env_lines, environment, gib, limit_label, not_fixes, oom_numbers,
               ranked_fixes, request_label, secondary_findings, trainer_arg_words, whatif_caveat)
from .json_out import report_data
from ..units import GiB, fmt_bytes

if TYPE_CHECKING:  # pragma: no cover
    from ..report import OomSummary, Report, SegmentView, SeriesPoint

MAX_EVIDENCE = 12           # quotes shown under the verdict; the rest are in the data island
MAX_SEGMENTS = 32
MAX_POINTS = 1200           # timeline points drawn (peaks kept when thinning)


def _n(x: float) -> str:
    """A coordinate: finite, one decimal, no exponent."""
    if not math.isfinite(x):
        x = 0.0
    return f"{x:.1f}".rstrip("0").rstrip(".") or "0"


def _pct(x: float) -> str:
    return _n(max(0.0, min(100.0, x)))


def _tag(fmt: str, *args: Any) -> Markup:
    # Markup.format escapes every argument that is not itself Markup.
    return Markup(fmt).format(*args)


# ------------------------------------------------------------------ OOM bar


@dataclass(frozen=True, slots=True)
class BarPart:
    key: str            # css class
    label: str
    bytes: int


@dataclass(frozen=True, slots=True)
class OomBar:
    svg: Markup
    legend: tuple[tuple[str, str, str], ...]       # (css class, label, "12.34 GiB")
    limit_label: str
    limit_pct: float | None
    request_end_pct: float | None
    request_end_text: str
    note: str


def oom_bar(oom: "OomSummary | None") -> OomBar | None:
    """allocated | reserved-but-unallocated | other use | free, the request
    placed where new memory would start, against the limit."""
    if oom is None:
        return None
    alloc = max(0, oom.allocated_bytes or 0)
    unalloc = max(0, oom.reserved_unallocated_bytes or 0)
    limit = oom.limit_bytes if oom.limit_bytes and oom.limit_bytes > 0 else None
    label = limit_label(oom)
    if oom.limit_source == "capacity_shared" and oom.capacity_bytes:
        limit = oom.capacity_bytes          # the bar shows the whole card, the other processes' part in it
        label = "capacity"
    request = max(0, oom.requested_bytes or 0)
    allowed = oom.limit_source in ("allowed", "allowed_inferred")
    other = 0
    if not allowed:
        if oom.capacity_bytes and oom.free_bytes is not None:
            other = max(0, oom.capacity_bytes - oom.free_bytes - alloc - unalloc)
        elif oom.process_in_use_bytes is not None:
            other = max(0, oom.process_in_use_bytes - alloc - unalloc)
    used = alloc + unalloc + other
    stated = any(v is not None for v in (oom.allocated_bytes, oom.reserved_unallocated_bytes, oom.free_bytes,
                                         oom.process_in_use_bytes))
    if not stated and limit is not None:
        free = 0              # the message gives no use: the card is drawn as unstated, not as free
    elif allowed and limit is not None:
        free = max(0, limit - alloc - unalloc)
    elif oom.free_bytes is not None:
        free = max(0, oom.free_bytes)
    elif limit is not None:
        free = max(0, limit - used)
    else:
        free = 0
    parts = [BarPart("alloc", "allocated by PyTorch", alloc),
             BarPart("unalloc", "reserved but unallocated", unalloc),
             BarPart("other", "other memory in use (non-PyTorch, other processes)", other),
             BarPart("free", f"free (within the {label})" if allowed else "free on the card", free)]
    if not stated and limit is not None:
        parts.append(BarPart("unstated", "in use or free: the message does not say", limit))
    parts = [p for p in parts if p.bytes > 0]
    span = max(float(limit or 0), float(used + free), float(used + request))
    if span <= 0:
        return None
    span *= 1.02
    W, H = 1000.0, 40.0
    out: list[Markup] = [_tag('<svg class="oombar-svg" viewBox="0 0 1000 40" preserveAspectRatio="none" '
                              'role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">',
                              f"OOM bar: {gib(alloc)} allocated, {gib(unalloc)} reserved but unallocated, "
                              f"{gib(free)} free, request {gib(request)}, limit {gib(limit)}"),
                         Markup('<defs><pattern id="hatch" width="8" height="8" patternUnits="userSpaceOnUse" '
                                'patternTransform="rotate(45)"><rect width="8" height="8" class="req-bg"/>'
                                '<line x1="0" y1="0" x2="0" y2="8" class="req-line"/></pattern></defs>'),
                         _tag('<rect class="track" x="0" y="6" width="{}" height="28"/>', _n(W))]
    x = 0.0
    for p in parts:
        if p.key == "unstated":     # drawn under the request, from 0 to the limit
            out.append(_tag('<rect class="seg unstated" x="0" y="6" width="{}" height="28"><title>{}: {}</title>'
                            '</rect>', _n(p.bytes / span * W), p.label, gib(p.bytes)))
            continue
        w = p.bytes / span * W
        out.append(_tag('<rect class="seg {}" x="{}" y="6" width="{}" height="28"><title>{}: {}</title></rect>',
                        p.key, _n(x), _n(max(w, 0.8)), p.label, gib(p.bytes)))
        x += w
    req_end_pct = None
    if request > 0:
        rx = used / span * W
        rw = request / span * W
        out.append(_tag('<rect class="seg req" x="{}" y="2" width="{}" height="36" fill="url(#hatch)">'
                        '<title>the request: {}</title></rect>', _n(rx), _n(max(rw, 1.5)), gib(request)))
        end = rx + rw
        out.append(_tag('<line class="req-end" x1="{}" x2="{}" y1="0" y2="40" vector-effect="non-scaling-stroke"/>',
                        _n(end), _n(end)))
        req_end_pct = end / W * 100
    limit_pct = None
    if limit is not None:
        lx = limit / span * W
        out.append(_tag('<line class="limit" x1="{}" x2="{}" y1="0" y2="40" vector-effect="non-scaling-stroke"/>',
                        _n(lx), _n(lx)))
        limit_pct = lx / W * 100
    out.append(Markup("</svg>"))
    legend = [(p.key, p.label, gib(p.bytes)) for p in parts]
    if request:
        legend.append(("req", f"the request ({request_label(oom)})", gib(request)))
    if limit is not None:
        legend.append(("limit", label, gib(limit)))
    note = ""
    if request and limit is not None and not stated:
        note = (f"The request alone is {gib(request - limit)} larger than the {label}." if request > limit else
                f"The message does not say how much of the {label} was in use; the request is "
                f"{100 * request / limit:.0f}% of it.")
    elif request and limit is not None:
        over = used + request - limit
        if over > 0:
            note = f"New memory for the request would end {gib(over)} past the {label}."
        elif unalloc >= request:
            note = ("The request is smaller than the reserved-but-unallocated memory: it would fit "
                    "if that memory were one contiguous block.")
        else:
            note = f"The request would end {gib(-over)} below the {label}."
    elif limit is None:
        note = "The OOM message gave no capacity or cap; the bar spans what it did give."
    return OomBar(Markup("").join(out), tuple(legend), label, limit_pct, req_end_pct,
                  f"request ends at {gib(used + request)}" if stated else f"the request: {gib(request)}", note)


# ------------------------------------------------------------------ timeline


def _nice_step(span: float, ticks: int = 5) -> float:
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _thin(points: Sequence["SeriesPoint"], keep: int | None, limit: int) -> list["SeriesPoint"]:
    """At most ~``limit`` points: per bucket, the peaks of each series."""
    from ..report import SeriesPoint

    if len(points) <= limit:
        return list(points)
    size = math.ceil(len(points) / (limit // 2))
    out: list[SeriesPoint] = []
    for start in range(0, len(points), size):
        bucket = points[start:start + size]
        a = [p.allocated for p in bucket if p.allocated is not None]
        r = [p.reserved for p in bucket if p.reserved is not None]
        out.append(SeriesPoint(bucket[0].x, max(a) if a else None, max(r) if r else None))
        if keep is not None and start <= keep < start + size:
            out.append(points[keep])
        elif len(bucket) > 1:
            out.append(SeriesPoint(bucket[-1].x, bucket[-1].allocated, bucket[-1].reserved))
    return out


@dataclass(frozen=True, slots=True)
class Chart:
    html: Markup
    notes: tuple[str, ...]
    has_limit: bool = False
    marker: str = ""                 # "OOM" | "end": what the timeline's marker is


def _oom_index(points: Sequence["SeriesPoint"]) -> int | None:
    for i, p in enumerate(points):
        if "oom" in p.label.lower():
            return i
    return None


def _edge(pct: float) -> str:
    """Keep a label at the plot's edge inside it."""
    return " at-start" if pct < 4 else (" at-end" if pct > 96 else "")


def _dot(cls: str, x: float, y: float) -> Markup:
    # a zero-length path with a round cap: stays a circle however the plot is stretched
    return _tag('<path class="dot {}" d="M{} {} h0.01" vector-effect="non-scaling-stroke"/>', cls, _n(x), _n(y))


def timeline_chart(report: "Report") -> Chart | None:
    """Allocated and reserved against x, the limit as a line, the OOM marked.

    The SVG holds only shapes and stretches to its box (non-scaling strokes);
    the axis labels are HTML placed in percent, so they stay legible on a
    phone and in print."""
    pts = [p for p in report.timeline if p.x is not None and math.isfinite(float(p.x))]
    if not pts:
        return None
    pts.sort(key=lambda p: p.x)
    oom_i = _oom_index(pts)
    marker_is_oom = oom_i is not None or report.oom is not None
    if oom_i is None:
        oom_i = len(pts) - 1
    marker = pts[oom_i]
    pts = _thin(pts, oom_i, MAX_POINTS)
    notes: list[str] = []
    W, H = 1000.0, 1000.0
    xs = [float(p.x) for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    values = [float(v) for p in pts for v in (p.allocated, p.reserved) if v is not None and v >= 0]
    data_max = max(values, default=0.0)
    limit = report.oom.limit_bytes if report.oom and report.oom.limit_bytes and report.oom.limit_bytes > 0 else None
    show_limit = limit is not None and (data_max == 0 or limit <= 4 * data_max)
    if limit is not None and not show_limit:
        notes.append(f"The {limit_label(report.oom)} ({gib(limit)}) is far above the curve and is not drawn.")
    y_max = max(data_max, float(limit) if show_limit and limit else 0.0)
    if y_max <= 0:
        y_max = float(GiB)
    unit, unit_name = (GiB, "GiB") if y_max >= GiB / 2 else (1024**2, "MiB")
    step = _nice_step(y_max / unit) * unit
    y_top = math.ceil(y_max * 1.06 / step) * step

    def X(x: float) -> float:
        return (x - x0) / (x1 - x0) * W

    def Y(v: float) -> float:
        return H - (v / y_top) * H

    svg: list[Markup] = [_tag('<svg class="timeline-svg" viewBox="0 0 {} {}" preserveAspectRatio="none" role="img" '
                              'aria-label="{}" xmlns="http://www.w3.org/2000/svg">', _n(W), _n(H),
                              f"memory timeline over {len(report.timeline)} points")]
    ylabels: list[Markup] = []
    k = 0
    while k * step <= y_top + 1e-9 and k < 50:
        y = Y(k * step)
        svg.append(_tag('<line class="grid" x1="0" x2="{}" y1="{}" y2="{}" vector-effect="non-scaling-stroke"/>',
                        _n(W), _n(y), _n(y)))
        ylabels.append(_tag('<span style="top: {}%">{}</span>', _pct(y / H * 100),
                            f"{k * step / unit:,.4g} {unit_name}"))
        k += 1
    xlabels: list[Markup] = []
    xstep = _nice_step(x1 - x0, 6)
    v = math.ceil(x0 / xstep) * xstep
    n = 0
    while v <= x1 + 1e-9 and n < 20:
        pct = X(v) / W * 100
        xlabels.append(_tag('<span class="{}" style="left: {}%">{}</span>', _edge(pct).strip(), _pct(pct),
                            f"{v:,.6g}"))
        v += xstep
        n += 1

    def runs(attr: str) -> list[list[tuple[float, float]]]:
        res: list[list[tuple[float, float]]] = [[]]
        for p in pts:
            val = getattr(p, attr)
            if val is None:
                if res[-1]:
                    res.append([])
                continue
            res[-1].append((X(float(p.x)), Y(float(val))))
        return [r for r in res if r]

    for attr in ("reserved", "allocated"):
        parts = runs(attr)
        for run in parts:
            if len(run) == 1:
                svg.append(_dot(attr, *run[0]))
                continue
            d = "M" + " L".join(f"{_n(a)} {_n(b)}" for a, b in run)
            if attr == "reserved" and len(parts) == 1:      # a fill only where the series has no gaps
                area = d + f" L{_n(run[-1][0])} {_n(H)} L{_n(run[0][0])} {_n(H)} Z"
                svg.append(_tag('<path class="area reserved" d="{}"/>', area))
            svg.append(_tag('<path class="line {}" d="{}" vector-effect="non-scaling-stroke"/>', attr, d))
    overlays: list[Markup] = []
    if show_limit and limit is not None:
        y = Y(float(limit))
        svg.append(_tag('<line class="limit" x1="0" x2="{}" y1="{}" y2="{}" vector-effect="non-scaling-stroke"/>',
                        _n(W), _n(y), _n(y)))
        overlays.append(_tag('<span class="limit-lab" style="top: {}%">{} {}</span>', _pct(y / H * 100),
                             limit_label(report.oom), gib(limit)))
    mv = marker.allocated if marker.allocated is not None else marker.reserved
    mx = X(float(marker.x))
    label = "OOM" if marker_is_oom else "end"
    svg.append(_tag('<line class="oom-line" x1="{}" x2="{}" y1="0" y2="{}" vector-effect="non-scaling-stroke"/>',
                    _n(mx), _n(mx), _n(H)))
    if mv is not None:
        svg.append(_tag('<path class="oom-dot" d="M{} {} h0.01" vector-effect="non-scaling-stroke"><title>{} at {} {}: '
                        '{} allocated, {} reserved</title></path>', _n(mx), _n(Y(float(mv))), label,
                        report.timeline_unit or "x", f"{marker.x:,.6g}", gib(marker.allocated),
                        gib(marker.reserved)))
    mpct = mx / W * 100
    overlays.append(_tag('<span class="oom-lab{}" style="left: {}%">{}</span>', _edge(mpct * 0.9 if mpct < 50 else
                                                                                      mpct), _pct(mpct), label))
    svg.append(Markup("</svg>"))
    html = _tag('<div class="tl" data-x0="{}" data-x1="{}">'
                '<div class="tl-y" aria-hidden="true">{}</div>'
                '<div class="tl-plot">{}{}<div class="tl-hover" aria-hidden="true"></div></div>'
                '<div class="tl-x" aria-hidden="true">{}</div>'
                '<div class="tl-xtitle">{}</div></div>',
                _n(x0), _n(x1), Markup("").join(ylabels), Markup("").join(svg), Markup("").join(overlays),
                Markup("").join(xlabels), report.timeline_unit or "x")
    if len(report.timeline) > len(pts):
        notes.append(f"{len(report.timeline):,} points thinned to {len(pts):,} (peaks kept).")
    return Chart(html, tuple(notes), bool(show_limit), label)


# ------------------------------------------------------------------ segments


def _coalesce(seg: "SegmentView") -> list[tuple[int, int, str]]:
    out: list[list[Any]] = []
    for b in sorted(seg.blocks, key=lambda b: b.offset):
        state = "free" if b.state == "inactive" else ("pending" if "pending" in b.state else "alloc")
        if out and out[-1][2] == state and out[-1][0] + out[-1][1] == b.offset:
            out[-1][1] += b.size
        else:
            out.append([b.offset, b.size, state])
    return [(int(o), int(s), str(st)) for o, s, st in out]


_BLOCK_WORDS = {"free": "free block", "pending": "pending free", "alloc": "allocated"}


def segment_map(report: "Report") -> Chart | None:
    """One row per segment, widths proportional to size, free blocks (holes)
    outlined so a hole of any size stays visible."""
    segs = [s for s in report.segments if s.total_size > 0]
    if not segs:
        return None
    notes: list[str] = []
    biggest = max(s.total_size for s in segs)
    request = report.oom.requested_bytes if report.oom and report.oom.requested_bytes else None
    rows: list[Markup] = []

    def row(label: str, width_pct: float, inner: Markup, cls: str = "") -> Markup:
        return _tag('<div class="segrow{}"><div class="seglab">{}</div><svg class="segbar" viewBox="0 0 1000 10" '
                    'preserveAspectRatio="none" style="width: {}%" xmlns="http://www.w3.org/2000/svg">{}</svg></div>',
                    cls, label, _pct(max(width_pct, 0.2)), inner)

    if request:
        rows.append(row(f"the request, {fmt_bytes(request)}, at the same scale", request / biggest * 100,
                        _tag('<rect class="seg-req" x="0" y="0" width="1000" height="10" '
                             'vector-effect="non-scaling-stroke"><title>the request: {}</title></rect>', gib(request)),
                        " req"))
    groups: list[tuple["SegmentView", list[tuple[int, int, str]], int]] = []
    for s in segs:                       # identical segments (size, type, layout) are drawn once, counted
        blocks = _coalesce(s)
        if groups and groups[-1][0].total_size == s.total_size and groups[-1][0].segment_type == s.segment_type \
                and groups[-1][1] == blocks:
            groups[-1] = (groups[-1][0], blocks, groups[-1][2] + 1)
        else:
            groups.append((s, blocks, 1))
    shown = groups[:MAX_SEGMENTS]
    left = sum(c for _, _, c in groups[MAX_SEGMENTS:]) + len(report.segments) - len(segs)
    if left:
        notes.append(f"… {left} more segment(s) not drawn.")
    for s, blocks, count in shown:
        free = [sz for _, sz, st in blocks if st == "free"]
        text = (f"{count} × " if count > 1 else "") + f"{fmt_bytes(s.total_size)} {s.segment_type} segment" + \
            ("s, each with the same layout" if count > 1 else "")
        if free:
            text += f" · {len(free)} hole{'s' if len(free) != 1 else ''}, {fmt_bytes(sum(free))} free, " \
                    f"largest {fmt_bytes(max(free))}"
        elif not blocks:
            text += " · no block information"
        rects: list[Markup] = [Markup('<rect class="seg-track" x="0" y="0" width="1000" height="10"/>')]
        for off, sz, st in blocks:
            bw = sz / s.total_size * 1000
            if st != "free" and bw < 0.05:
                continue
            rects.append(_tag('<rect class="blk {}" x="{}" y="0" width="{}" height="10" '
                              'vector-effect="non-scaling-stroke"><title>{}: {} at +{}</title></rect>',
                              st, _n(off / s.total_size * 1000), _n(bw), _BLOCK_WORDS[st], fmt_bytes(sz),
                              fmt_bytes(off)))
        rows.append(row(text, s.total_size / biggest * 100, Markup("").join(rects)))
    return Chart(_tag('<div class="segmap" role="img" aria-label="{}">{}</div>',
                      f"segment map of {len(segs)} segments", Markup("").join(rows)), tuple(notes))


# ------------------------------------------------------------------ page


def _estimate_rows(report: "Report") -> tuple[list[tuple[str, int, float, float]], int, float | None]:
    """(part, bytes, share of the peak, bar width) — parts that add up to the
    predicted peak — plus the total and where the limit falls on the bar (%)."""
    parts = list(report.estimate_parts)
    if not parts:
        return [], 0, None
    total = sum(v for _, v in parts)
    limit = report.oom.limit_bytes if report.oom and report.oom.limit_bytes else (
        report.rerun.device_bytes if report.rerun and report.rerun.device_bytes else None)
    span = max(total, limit or 0, 1)
    rows = [(k.replace("_", " "), v, v / max(total, 1) * 100, v / span * 100) for k, v in parts]
    return rows, total, (limit / span * 100 if limit else None)


def _context(report: "Report") -> dict[str, Any]:
    primary = report.primary
    rr = report.rerun
    env_text = "\n".join(env_lines(rr)) if rr else ""
    args = trainer_arg_words(rr) if rr else []
    est = report.estimate or None
    bar = oom_bar(report.oom)
    timeline = timeline_chart(report)
    segments = segment_map(report)
    sections = [("verdict", "Verdict")]
    if bar or report.oom:
        sections.append(("oom", "OOM"))
    if len(report.ranks) > 1:
        sections.append(("ranks", "Ranks"))
    if timeline:
        sections.append(("timeline", "Timeline"))
    if report.top_stacks:
        sections.append(("stacks", "Stacks"))
    if segments:
        sections.append(("segments", "Segments"))
    if report.counterfactuals:
        sections.append(("whatif", "What-if"))
    sections.append(("fixes", "Fixes"))
    if rr:
        sections.append(("rerun", "Rerun"))
    if est:
        sections.append(("estimate", "Estimate"))
    sections.append(("inputs", "Inputs"))
    est_rows, est_total, est_limit_pct = _estimate_rows(report)
    peak_pct = None
    if rr and rr.predicted_peak_bytes and rr.device_bytes:
        peak_pct = rr.predicted_peak_bytes / rr.device_bytes * 100
    from .. import __version__

    return {
        "r": report, "primary": primary, "title": cause_title(report.cause),
        "version": report.version or __version__,
        "evidence": list(primary.evidence[:MAX_EVIDENCE]) if primary else [],
        "evidence_more": max(0, len(primary.evidence) - MAX_EVIDENCE) if primary else 0,
        "secondary": secondary_findings(report), "fixes": ranked_fixes(report), "nots": not_fixes(report),
        "oom_rows": oom_numbers(report.oom), "limit_label": limit_label(report.oom),
        "bar": bar, "timeline": timeline, "segments": segments, "sections": sections,
        "ds_config_text": _pretty(rr.ds_config) if rr and rr.ds_config is not None else "",
        "ds_diff_text": _pretty(rr.ds_config_diff) if rr and rr.ds_config_diff else "",
        "env_text": env_text, "args_text": " \\\n  ".join(args),
        "peak_pct": peak_pct, "est": est, "est_rows": est_rows, "est_total": est_total,
        "est_limit_pct": est_limit_pct, "est_phase": report.estimate_peak_phase or "step",
        "est_limit": (report.oom.limit_bytes if report.oom and report.oom.limit_bytes else
                      (rr.device_bytes if rr else None)),
        "plan_fix": next((x for x in ranked_fixes(report) if x.plan), None),
        "whatif_caveat": whatif_caveat(report),
        "est_assumptions": [str(a) for a in est.get("assumptions", [])] if est else [],
        "est_headline": [(label, est.get(key)) for label, key in (
            ("predicted peak", "predicted_peak_bytes"), ("start-up peak", "startup_peak_bytes"),
            ("device (assumed: the inputs give no size)" if est and est.get("device_assumed") else "device",
             "device_bytes"),
            ("host RAM", "host_bytes")) if est and isinstance(est.get(key), int)],
        "css": Markup(asset_source("report.css")), "js": Markup(asset_source("report.js")),
        "data": report_data(report),
        "conf_pct": _pct(report.confidence * 100),
    }


def _pretty(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode()


def render_html(report: "Report") -> str:
    """The report as one self-contained HTML page."""
    return environment().get_template("report.html.j2").render(**_context(report))
