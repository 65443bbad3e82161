"""``oompost scan``: one report per failed job directory, plus an index.

A job is each directory directly under a root (or the root itself when it
holds files and no subdirectories).  Every job is analysed on its own: one
unreadable job becomes a failed row in the index and never stops the others.
"""

from __future__ import annotations

import os
import re
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from .errors import InputError

_WINDOW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_window(text: str) -> float:
    m = _WINDOW.match(text)
    if not m:
        raise ValueError(f"expected a duration like 24h, 7d or 90m, not {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


@dataclass
class JobResult:
    name: str
    path: str
    ok: bool
    cause: str | None = None
    confidence: float | None = None
    summary: str = ""
    error: str = ""
    report_dir: str = ""


@dataclass
class ScanResult:
    jobs: list[JobResult] = field(default_factory=list)
    skipped_old: int = 0
    index_paths: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[JobResult]:
        return [j for j in self.jobs if not j.ok]

    def summary_lines(self) -> list[str]:
        counts = Counter(j.cause for j in self.jobs if j.ok)
        lines = [f"{len(self.jobs)} job(s) analysed, {len(self.failed)} failed"
                 + (f", {self.skipped_old} older than --since skipped" if self.skipped_old else "")]
        lines += [f"  {cause}: {n}" for cause, n in counts.most_common()]
        lines += [f"  FAILED {j.name}: {j.error}" for j in self.failed]
        lines += self.index_paths
        return lines


def find_jobs(roots: list[str]) -> list[tuple[str, str]]:
    """(name, path) of each job directory."""
    jobs: list[tuple[str, str]] = []
    for root in roots:
        entries = sorted(os.listdir(root))
        subdirs = [e for e in entries if not e.startswith(".") and os.path.isdir(os.path.join(root, e))]
        files = [e for e in entries if not e.startswith(".") and os.path.isfile(os.path.join(root, e))]
        if subdirs:
            for d in subdirs:
                jobs.append((d if len(roots) == 1 else f"{os.path.basename(os.path.normpath(root))}/{d}",
                             os.path.join(root, d)))
        elif files:
            jobs.append((os.path.basename(os.path.normpath(root)), root))
    return jobs


def _newest_mtime(path: str) -> float:
    newest = 0.0
    for dirpath, _, names in os.walk(path):
        for n in names:
            try:
                newest = max(newest, os.path.getmtime(os.path.join(dirpath, n)))
            except OSError:
                pass
    return newest


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "job"


def run_scan(roots: list[str], output: str, *, formats: tuple[str, ...], since_seconds: float | None,
             redact: bool, write: Callable[..., list[str]]) -> ScanResult:
    from .pipeline import analyze

    result = ScanResult()
    now = time.time()
    os.makedirs(output, exist_ok=True)
    for name, path in find_jobs(roots):
        if since_seconds is not None and now - _newest_mtime(path) > since_seconds:
            result.skipped_old += 1
            continue
        out_dir = os.path.join(output, _safe_name(name))
        job = JobResult(name, path, ok=False, report_dir=out_dir)
        try:
            report = analyze([path])
            write(report, out_dir, formats, redact)
            job.ok, job.cause, job.confidence, job.summary = True, report.cause, report.confidence, report.summary
        except InputError as e:
            job.error = str(e)
        except Exception as e:  # one bad job never stops the scan
            job.error = f"internal error: {type(e).__name__}: {e}"
            with open(os.path.join(output, f"{_safe_name(name)}.error.txt"), "w") as f:
                f.write(traceback.format_exc())
        result.jobs.append(job)
    result.index_paths = _write_index(result, output, redact)
    return result


def _write_index(result: ScanResult, output: str, redact: bool) -> list[str]:
    from .render.index import render_index_html, render_index_md

    rows: list[dict[str, Any]] = [
        {"job": j.name, "ok": j.ok, "cause": j.cause, "confidence": j.confidence, "summary": j.summary,
         "error": j.error, "report": os.path.relpath(os.path.join(j.report_dir, "report.html"), output)
         if j.ok else None} for j in result.jobs]
    if redact:
        from .redact import redact_text

        for r in rows:
            r["summary"], r["error"], r["job"] = redact_text(r["summary"]), redact_text(r["error"]), redact_text(r["job"])
    data = {"schema": "oompost.index/1", "jobs": rows, "skipped_older_than_window": result.skipped_old,
            "counts": dict(Counter(j.cause for j in result.jobs if j.ok)), "failed": len(result.failed)}
    paths = []
    for fname, content in (("index.json", orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()),
                           ("index.html", render_index_html(data)), ("index.md", render_index_md(data))):
        p = os.path.join(output, fname)
        with open(p, "w", encoding="utf-8") as f:
            f.write(content)
        paths.append(p)
    return paths
