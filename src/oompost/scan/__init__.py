"""``oompost scan``: analyse every failed job under some roots, in parallel,
incrementally, and keep the history.

Data flow: ``discover`` finds jobs → ``fingerprint`` decides which changed →
``executors`` run ``worker.analyze_job`` on the rest (processes here, or a
Dask cluster) → each finished job is committed to ``history`` (SQLite) →
``summary.csv`` / ``summary.parquet`` (pandas) and ``index.{html,md,json}``
(``render.index``).  One bad job is a failed row, never a stopped scan.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from .discover import Job, find_jobs, newest_mtime
from .executors import default_jobs, run_dask, run_local
from .fingerprint import job_fingerprint, stat_key
from .history import History
from ..redact import job_alias
from .outputs import inside, safe_name, write_atomic

_WINDOW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
CHUNK_SECONDS_TARGET = 8      # jobs per task: enough to amortise the round trip, few enough to balance


def parse_window(text: str) -> float:
    m = _WINDOW.match(text)
    if not m:
        raise ValueError(f"expected a duration like 24h, 7d or 90m, not {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


@dataclass
class ScanResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped_old: int = 0
    skipped_pattern: int = 0
    analysed: int = 0
    reused: int = 0
    resumed_from_interrupted: bool = False
    seconds: float = 0.0
    index_paths: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["ok"]]

    def summary_lines(self) -> list[str]:
        counts = Counter(r["cause"] for r in self.rows if r["ok"])
        head = (f"{len(self.rows)} job(s): {self.analysed} analysed, {self.reused} unchanged since the last scan, "
                f"{len(self.failed)} failed")
        if self.skipped_old:
            head += f", {self.skipped_old} older than --since skipped"
        lines = [head]
        if self.resumed_from_interrupted:
            lines.append("  (an earlier scan was interrupted: its finished jobs were kept)")
        lines += [f"  {cause}: {n}" for cause, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines += [f"  FAILED {r['job']}: {r['error']}" for r in self.failed]
        lines += self.index_paths
        return lines


def _input_bytes(files: tuple[str, ...]) -> int:
    """A job's weight for scheduling: the size of its inputs (unreadable ones weigh nothing)."""
    return sum(k[0] for k in map(stat_key, files) if k is not None)


def _chunks(tasks: list[tuple[Any, ...]], jobs: int,
            weights: list[int] | None = None) -> list[list[tuple[Any, ...]]]:
    """Tasks grouped into chunks for the workers, the heaviest first (longest
    processing time first: a 10 MB log started last would leave the other
    workers idle while it runs).  A chunk holds at most ``CHUNK_SECONDS_TARGET``
    jobs and, once it has one, no more than its share of the input bytes."""
    if not tasks:
        return []
    size = max(1, min(CHUNK_SECONDS_TARGET, len(tasks) // (4 * max(1, jobs)) or 1))
    if weights is None:
        return [tasks[i:i + size] for i in range(0, len(tasks), size)]
    order = sorted(range(len(tasks)), key=lambda i: -weights[i])
    budget = max(1, sum(weights) // (8 * max(1, jobs)))
    chunks: list[list[tuple[Any, ...]]] = []
    cur: list[tuple[Any, ...]] = []
    cur_bytes = 0
    for i in order:
        if cur and (len(cur) >= size or cur_bytes + weights[i] > budget):
            chunks.append(cur)
            cur, cur_bytes = [], 0
        cur.append(tasks[i])
        cur_bytes += weights[i]
    if cur:
        chunks.append(cur)
    return chunks


def run_scan(roots: list[str], output: str, *, formats: tuple[str, ...] = ("html", "md", "json"),
             since_seconds: float | None = None, pattern: str | None = None, redact: bool = False,
             jobs: int | None = None, executor: str = "local", scheduler: str | None = None,
             progress: Callable[[int, int], None] | None = None, write: Any = None) -> ScanResult:
    """Scan ``roots`` into ``output`` (see the module docstring).  ``progress(done,
    total)`` is called as jobs finish.  ``write`` is accepted for callers of the
    earlier API and ignored (reports are written by the workers)."""
    t0 = time.perf_counter()
    jobs = jobs or default_jobs()
    os.makedirs(output, exist_ok=True)
    result = ScanResult()
    hist = History(output)
    try:
        result.resumed_from_interrupted = hist.interrupted() > 0
        # under --redact the history keeps no path: roots and the digest cache are keyed by aliases
        hidden: Callable[[str], str] = job_alias if redact else (lambda p: p)
        scan_id = hist.begin([hidden(os.path.abspath(r)) for r in roots])
        now = time.time()
        found: list[Job] = []
        for job in find_jobs(roots, exclude=(output,)):
            if pattern and not fnmatch.fnmatch(job.name, pattern):
                result.skipped_pattern += 1
            elif since_seconds is not None and now - newest_mtime(job) > since_seconds:
                result.skipped_old += 1
            else:
                found.append(job)
        options = f"{','.join(formats)};redact={redact}"
        previous = hist.previous()
        tasks: list[tuple[Any, ...]] = []
        weights: list[int] = []
        fingerprints: dict[str, str] = {}
        taken: set[str] = set()
        for job in found:
            name = job_alias(job.name) if redact else job.name    # what the index, history and paths show
            out_name = safe_name(name)
            while out_name in taken:                       # (a collision after sanitising)
                out_name += "_"
            taken.add(out_name)
            fp = job_fingerprint(job.root, job.files, options,
                                 lambda p, k: hist.cached_digest(hidden(p), k),
                                 lambda p, k, d: hist.remember_digest(hidden(p), k, d))
            fingerprints[name] = fp
            old = previous.get(name)
            if old is not None and old[0] == fp and _reports_exist(output, old[1]):
                row = {**old[1], "reused": True}
                result.rows.append(row)
                hist.record(scan_id, fp, row, commit=False)
                result.reused += 1
            else:
                tasks.append((name, name if redact else job.root, job.files, output, out_name, formats, redact))
                weights.append(_input_bytes(job.files))
        hist.flush_files()
        hist.commit()
        total = len(found)
        done = result.reused
        if progress:
            progress(done, total)
        chunks = _chunks(tasks, jobs, weights)
        stream = run_dask(chunks, scheduler, jobs) if executor == "dask" else run_local(chunks, jobs)
        for rows in stream:
            for row in rows:
                hist.record(scan_id, fingerprints.get(row["job"]), row, commit=False)
                result.rows.append(row)
                result.analysed += 1
            hist.commit()                                   # each finished chunk survives an interruption
            done += len(rows)
            if progress:
                progress(done, total)
        result.rows.sort(key=lambda r: r["job"])
        hist.finish(scan_id, len(result.rows), result.analysed, result.reused, len(result.failed))
        result.seconds = time.perf_counter() - t0
        result.index_paths = write_outputs(result, output, hist, redact)
    finally:
        hist.close()
    return result


def _reports_exist(output: str, row: dict[str, Any]) -> bool:
    rep = row.get("report")
    if not row.get("ok"):
        return True                                         # a failed row has no report to check
    return bool(rep) and os.path.exists(os.path.join(output, rep))


def summary_frame(rows: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    """The night's table as a pandas DataFrame (summary.csv / summary.parquet)."""
    import pandas as pd

    cols = ["job", "ok", "cause", "sub_cause", "confidence", "gpu", "framework", "summary", "error", "report",
            "reused", "seconds", "path"]
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)
    df["ok"] = df["ok"].astype(bool)
    df["reused"] = df["reused"].astype(bool)
    df["confidence"] = pd.to_numeric(df["confidence"], errors="coerce")
    df["seconds"] = pd.to_numeric(df["seconds"], errors="coerce")
    return df


def write_outputs(result: ScanResult, output: str, hist: History, redact: bool) -> list[str]:
    from ..render.index import render_index_html, render_index_md

    rows = [dict(r) for r in result.rows]
    if redact:
        from ..redact import redact_text

        for r in rows:
            for k in ("summary", "error", "job", "path"):
                if r.get(k):
                    r[k] = redact_text(str(r[k]))
    data = {"schema": "oompost.index/1", "generated": time.time(), "jobs": rows,
            "skipped_older_than_window": result.skipped_old, "analysed": result.analysed,
            "reused": result.reused, "counts": dict(Counter(r["cause"] for r in rows if r["ok"])),
            "failed": len(result.failed), "trend": hist.cause_trend()}
    paths = []
    df = summary_frame(rows)
    csv_path = inside(output, "summary.csv")
    write_atomic(csv_path, df.to_csv(index=False))
    paths.append(csv_path)
    try:
        import io

        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        pq = inside(output, "summary.parquet")
        write_atomic(pq, buf.getvalue())
        paths.append(pq)
    except ImportError:  # pyarrow absent: the CSV has the same table
        pass
    for fname, content in (("index.json", orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()),
                           ("index.html", render_index_html(data)), ("index.md", render_index_md(data))):
        p = inside(output, fname)
        write_atomic(p, content)
        paths.append(p)
    return paths


__all__ = ["run_scan", "parse_window", "ScanResult", "find_jobs", "summary_frame"]
