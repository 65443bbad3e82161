"""A report's tables as pandas DataFrames, for notebooks and fleet analyses
(``pandas`` is imported here only, never on the analysis path).

    import oompost
    from oompost.render.frames import timeline_frame, ranks_frame, stacks_frame
    report = oompost.analyze("job/")
    timeline_frame(report)     # the step series (or the snapshot's timeline): x, allocated, reserved
    ranks_frame(report)        # one row per rank: failed, first, peak, exit code, hint, source line

The scan's night table is ``oompost.scan.summary_frame`` (summary.csv / .parquet)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from ..report import Report


def timeline_frame(report: "Report") -> "pd.DataFrame":
    """The memory series: one row per point, ``x`` in ``report.timeline_unit``
    ("step" for a step series, "trace event" for a snapshot's trace), bytes as nullable ints."""
    import pandas as pd

    df = pd.DataFrame([(p.x, p.allocated, p.reserved, p.label) for p in report.timeline],
                      columns=["x", "allocated", "reserved", "label"])
    for col in ("allocated", "reserved"):
        df[col] = df[col].astype("Int64")
    df.attrs.update(unit=report.timeline_unit, source=report.timeline_source)
    return df


def ranks_frame(report: "Report") -> "pd.DataFrame":
    """The per-rank table, indexed by rank."""
    import pandas as pd

    rows: list[dict[str, Any]] = [
        {"rank": r.rank, "failed": r.failed, "first": r.first, "peak_bytes": r.peak_bytes,
         "exitcode": r.exitcode, "cause_hint": r.cause_hint,
         "source": f"{r.line.source}:{r.line.line}" if r.line else None}
        for r in report.ranks]
    df = pd.DataFrame(rows, columns=["rank", "failed", "first", "peak_bytes", "exitcode", "cause_hint", "source"])
    for col in ("peak_bytes", "exitcode"):
        df[col] = df[col].astype("Int64")
    return df.set_index("rank")


def stacks_frame(report: "Report") -> "pd.DataFrame":
    """The largest live allocations at the OOM, grouped by stack (from a snapshot)."""
    import pandas as pd

    return pd.DataFrame([(s.label, s.bytes, s.count, " <- ".join(s.frames)) for s in report.top_stacks],
                        columns=["label", "bytes", "count", "frames"])
