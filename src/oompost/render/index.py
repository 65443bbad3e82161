"""The scan index: one row per job (cause, confidence, GPU, framework,
summary, link to its report) and the causes over the last nights as a chart
(inline SVG, computed here; the template only places it).  Autoescaped."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2

# one colour per cause (colour-blind-safe order), the rest grey
CAUSE_COLORS = {"config_error": "#4477aa", "host_oom": "#ee6677", "nccl_error": "#228833", "capacity": "#ccbb44",
                "leak": "#66ccee", "comm_buffer": "#aa3377", "fragmentation": "#e08a2c",
                "activation_spike": "#332288", "unknown": "#bbbbbb"}


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("oompost", "templates"),
                              autoescape=jinja2.select_autoescape(["html", "j2"]),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def trend_chart(trend: list[dict[str, Any]], height: int = 160, bar: int = 34, gap: int = 18) -> dict[str, Any]:
    """Stacked bars, one per night: geometry for the template."""
    nights = sorted({t["night"] for t in trend})
    causes = [c for c in CAUSE_COLORS if any(t["cause"] == c for t in trend)]
    causes += sorted({str(t["cause"]) for t in trend} - set(causes))
    per = {(t["night"], t["cause"]): int(t["jobs"]) for t in trend}
    top = max([sum(per.get((n, c), 0) for c in causes) for n in nights] or [1]) or 1
    bars, labels = [], []
    for i, night in enumerate(nights):
        x = 10 + i * (bar + gap)
        y = float(height)
        for c in causes:
            n = per.get((night, c), 0)
            if not n:
                continue
            h = n / top * (height - 20)
            y -= h
            bars.append({"x": x, "y": round(y, 1), "w": bar, "h": round(h, 1), "night": night, "cause": c, "n": n,
                         "color": CAUSE_COLORS.get(str(c), "#999999")})
        labels.append({"x": x + bar / 2, "night": night[5:], "total": sum(per.get((night, c), 0) for c in causes),
                       "top": round(y, 1)})
    return {"nights": nights, "bars": bars, "labels": labels, "height": height,
            "width": max(200, 20 + len(nights) * (bar + gap)),
            "causes": [{"cause": c, "color": CAUSE_COLORS.get(str(c), "#999999")} for c in causes]}


def render_index_html(data: dict[str, Any]) -> str:
    data = {"analysed": len(data["jobs"]), "reused": 0, **data}
    return _env().get_template("index.html.j2").render(data=data, chart=trend_chart(data.get("trend", [])))


def render_index_md(data: dict[str, Any]) -> str:
    lines = ["<!-- oompost report index -->", "# oompost scan", "",
             f"{len(data['jobs'])} job(s), {data['failed']} failed to analyse.", "",
             "| job | cause | confidence | GPU | summary |", "|---|---|---|---|---|"]
    for j in data["jobs"]:
        cell = (j["summary"] if j["ok"] else "FAILED: " + j["error"]).replace("|", "\\|").replace("\n", " ")[:300]
        conf = f"{j['confidence']:.2f}" if j["confidence"] is not None else ""
        name = str(j["job"]).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {name} | {j['cause'] or '—'} | {conf} | {j.get('gpu') or ''} | {cell} |")
    if data.get("trend"):
        lines += ["", "## Causes per night", "", "| night | cause | jobs |", "|---|---|---|"]
        lines += [f"| {t['night']} | {t['cause']} | {t['jobs']} |" for t in data["trend"]]
    return "\n".join(lines) + "\n"
