"""Analyse one job and write its reports (runs in a worker process, local or
on a Dask worker): returns the job's row for the index and the history."""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

from ..errors import InputError
from .outputs import inside, write_atomic

CACHE_DIR = ".cache"            # under the output directory; no job's report directory starts with a dot


def framework_of(facts: dict[str, Any]) -> str:
    if str(facts.get("DeepSpeed", "")).lower() == "yes":
        stage = facts.get("ZeRO stage")
        return f"DeepSpeed ZeRO-{stage}" if stage not in (None, "") else "DeepSpeed"
    return "PyTorch"


def analyze_job(job: str, root: str, files: tuple[str, ...], output: str, out_name: str,
                formats: tuple[str, ...], redact: bool) -> dict[str, Any]:
    """Never raises: a failure is a row with ``ok: False`` and its error."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"job": job, "path": root, "ok": False, "cause": None, "sub_cause": None,
                           "confidence": None, "gpu": None, "framework": None, "summary": "", "error": "",
                           "report": None, "reused": False}
    try:
        from ..estimate import sim_cache
        from ..pipeline import analyze
        from ..render import render

        if not files:
            raise InputError(f"{root}: no input files")
        # the memory model's replays of a set-up, shared by this scan's workers and later nights
        with sim_cache.using(os.path.join(output, CACHE_DIR, "estimator")):
            report = analyze(list(files))
        if redact:
            from ..redact import redact_report

            report = redact_report(report)
        out_dir = inside(output, out_name)
        os.makedirs(out_dir, exist_ok=True)
        for fmt in formats:
            write_atomic(os.path.join(out_dir, f"report.{fmt}"), render(report, fmt))
        facts = dict(report.facts)
        row.update(ok=True, cause=report.cause, sub_cause=report.sub_cause, confidence=report.confidence,
                   summary=report.summary, gpu=facts.get("GPU"), framework=framework_of(facts),
                   report=f"{out_name}/report.html" if "html" in formats else
                   f"{out_name}/report.{formats[0]}")
    except InputError as e:
        row["error"] = str(e)
    except RecursionError as e:
        row["error"] = f"internal error: RecursionError: {e}"
    except Exception as e:  # one bad job never stops the scan
        row["error"] = f"internal error: {type(e).__name__}: {e}"
        try:
            tb = traceback.format_exc()
            if redact:
                from ..redact import redact_job_text

                tb = redact_job_text(tb, files)
            write_atomic(inside(output, f"{out_name}.error.txt"), tb)
        except Exception:
            pass
    except MemoryError:
        row["error"] = "internal error: out of host memory while analysing this job"
    if redact and row["error"]:
        from ..redact import redact_job_text

        row["error"] = redact_job_text(row["error"], files)
    row["seconds"] = round(time.perf_counter() - t0, 4)
    return row


def analyze_chunk(tasks: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Several jobs per task: fewer round trips to the worker processes."""
    return [analyze_job(*t) for t in tasks]
