"""The scan index: one row per job (cause, confidence, summary, link)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("oompost", "templates"),
                              autoescape=jinja2.select_autoescape(["html", "j2"]),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render_index_html(data: dict[str, Any]) -> str:
    return _env().get_template("index.html.j2").render(data=data)


def render_index_md(data: dict[str, Any]) -> str:
    lines = ["<!-- oompost report index -->", "# oompost scan", "",
             f"{len(data['jobs'])} job(s), {data['failed']} failed to analyse.", "",
             "| job | cause | confidence | summary |", "|---|---|---|---|"]
    for j in data["jobs"]:
        cell = (j["summary"] if j["ok"] else "FAILED: " + j["error"]).replace("|", "\\|").replace("\n", " ")[:300]
        conf = f"{j['confidence']:.2f}" if j["confidence"] is not None else ""
        lines.append(f"| {j['job'].replace('|', '')} | {j['cause'] or '—'} | {conf} | {cell} |")
    return "\n".join(lines) + "\n"
