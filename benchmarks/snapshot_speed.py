#!/usr/bin/env python
"""Big snapshots: ``oompost analyze`` against a bare restricted ``pickle.load``
of the same file, measured in the same run.

    python benchmarks/snapshot_speed.py [--mb 500 1024] [--source sample_logs/X/snapshot_rank0_oom.pickle.gz]
                                        [--memory-viz] [--keep DIR]

For each size, a snapshot is built from a real capture by
``make_big_snapshot.py`` (its longest closed loop repeated; written to a
temporary directory and deleted afterwards), then each row runs in a fresh
process and is timed from outside, with its peak RSS from ``wait4`` (this
script stays small, so the peak a child inherits at fork is negligible; the
peak of forked replay processes counts, as the largest of the tree):

* reference: ``RestrictedUnpickler(f).load()`` — what loading the file costs
  before any analysis, with Python's default garbage collector;
* ``load_snapshot``: oompost's decoder alone (columns, nothing per entry);
* ``oompost analyze``: the whole CLI run, JSON report; its verdict is checked
  against the verdict on the original snapshot;
* with ``--memory-viz``: ``python -m torch.cuda._memory_viz stats`` (torch's
  own tool; it uses plain ``pickle.load``, fine on a file we just made), and
  ``trace_plot`` (the HTML timeline people open instead) for snapshots up to
  ``--trace-plot-max-mb`` (it needs ~15× the file in memory).

Ratios are against the reference of the same size in the same run; CPU
seconds (user + system of the process tree, from ``wait4``) are printed too,
because wall time on a shared 2-core machine moves with everyone else's load.
Targets (issue 8): analyze ≤ 1.0× the reference in time and ≤ 1.1× in peak RSS;
from 1 GB on, under half the time and a quarter of the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_SOURCE = ROOT / "sample_logs" / "hf_trainer_zero3_offload_a100_40g" / "snapshot_rank0_oom.pickle.gz"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}

BARE = ("import sys\nfrom oompost.parsers.snapshot import RestrictedUnpickler\n"
        "with open(sys.argv[1], 'rb') as f:\n    RestrictedUnpickler(f).load()\n")
DECODE = ("import sys\nfrom oompost.parsers.snapshot import load_snapshot\n"
          "s = load_snapshot(sys.argv[1])\nprint(sum(len(t) for t in s.traces))\n")


CPU: dict[float, float] = {}       # wall → CPU seconds of the same run (user + system, the process tree)


def measure_rss(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of ``cmd``; reaps the child itself so
    that wait4 reports its peak RSS and CPU time (kept in ``CPU``)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read() if p.stdout else b""
    err = p.stderr.read() if p.stderr else b""
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd[:4]))}… failed ({p.returncode}): {err.decode()[-500:]}")
    CPU[wall] = ru.ru_utime + ru.ru_stime
    return wall, ru.ru_maxrss / 1024, out.decode()


def verdict(out_dir: str) -> tuple[str, float]:
    data = json.loads((Path(out_dir) / "report.json").read_text())
    return data["cause"], data["confidence"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, nargs="+", default=[500, 1024])
    ap.add_argument("--source", default=str(DEFAULT_SOURCE))
    ap.add_argument("--memory-viz", action="store_true")
    ap.add_argument("--keep", default=None, help="directory to keep the generated snapshots in")
    ap.add_argument("--trace-plot-max-mb", type=float, default=600,
                    help="with --memory-viz, also time trace_plot on snapshots up to this size")
    a = ap.parse_args()
    py = sys.executable
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="oompost-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    out = work / "report"
    measure_rss([py, "-m", "oompost", "analyze", a.source, "-o", str(out), "--format", "json", "-q"])
    v0 = verdict(str(out))
    print(f"source: {a.source}: verdict {v0[0]} ({v0[1]:.2f})")
    ok = same_all = True
    gigabyte: set[str] = set()              # the rows of a --mb ≥ 1000 request (the file may come out smaller)
    rows: list[tuple[str, str, float, float, float, float]] = []
    try:
        for mb in a.mb:
            path = work / f"big_{int(mb)}MB.pickle"
            if not path.exists():
                subprocess.run([py, str(HERE / "make_big_snapshot.py"), a.source, str(path), "--mb", str(mb)],
                               check=True, env=ENV)
            size = path.stat().st_size / 2**20
            ref_t, ref_m, _ = measure_rss([py, "-c", BARE, str(path)])
            dec_t, dec_m, n = measure_rss([py, "-c", DECODE, str(path)])
            an_t, an_m, _ = measure_rss([py, "-m", "oompost", "analyze", str(path), "-o", str(out), "--format",
                                         "json", "-q"])
            v = verdict(str(out))
            label = f"{size:.0f} MiB, {int(n):,} entries"
            if mb >= 1000:
                gigabyte.add(label)
            rows.append((label, "bare restricted pickle.load (reference)", ref_t, ref_m, 1.0, 1.0))
            rows.append((label, "oompost load_snapshot (columns)", dec_t, dec_m, dec_t / ref_t, dec_m / ref_m))
            rows.append((label, f"oompost analyze (verdict {v[0]})", an_t, an_m, an_t / ref_t, an_m / ref_m))
            if a.memory_viz:
                mv_t, mv_m, _ = measure_rss([py, "-m", "torch.cuda._memory_viz", "stats", str(path)])
                rows.append((label, "torch.cuda._memory_viz stats", mv_t, mv_m, mv_t / ref_t, mv_m / ref_m))
                if size <= a.trace_plot_max_mb:
                    html = work / "trace_plot.html"
                    tp_t, tp_m, _ = measure_rss([py, "-m", "torch.cuda._memory_viz", "trace_plot", str(path),
                                                 "-o", str(html)])
                    mb_html = html.stat().st_size / 2**20
                    html.unlink()
                    rows.append((label, f"torch.cuda._memory_viz trace_plot ({mb_html:.0f} MiB HTML)", tp_t, tp_m,
                                 tp_t / ref_t, tp_m / ref_m))
            same = v[0] == v0[0]
            same_all &= same
            print(f"{label}: verdict {v[0]} ({v[1]:.2f}) — {'same as' if same else 'DIFFERS FROM'} the original's")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'snapshot':28s} {'run':58s} {'wall s':>8s} {'CPU s':>7s} {'peak MiB':>9s} {'× time':>7s} {'× CPU':>6s} "
          f"{'× RSS':>6s}")
    ref_cpu = 1.0
    for label, name, t, m, rt, rm in rows:
        if "reference" in name:
            ref_cpu = CPU[t]
        print(f"{label:28s} {name:58s} {t:8.1f} {CPU[t]:7.1f} {m:9.0f} {rt:7.2f} {CPU[t] / ref_cpu:6.2f} {rm:6.2f}")
    print()
    for label, name, t, m, rt, rm in rows:
        if name.startswith("oompost analyze"):
            print(f"target {label}: analyze ≤ 1.0× time: {'met' if rt <= 1.0 else 'MISSED'} ({rt:.2f}×); "
                  f"≤ 1.1× peak RSS: {'met' if rm <= 1.1 else 'MISSED'} ({rm:.2f}×)")
            ok &= rt <= 1.0 and rm <= 1.1
            if label in gigabyte:
                print(f"target {label}: analyze < 0.5× time: {'met' if rt < 0.5 else 'MISSED'}; "
                      f"< 0.25× peak RSS: {'met' if rm < 0.25 else 'MISSED'}")
                ok &= rt < 0.5 and rm < 0.25
        if name.startswith("oompost load_snapshot"):
            print(f"decoder {label}: {rt:.2f}× time, {rm:.2f}× peak RSS of the bare load")
    print(f"verdicts match the original snapshot's: {'yes' if same_all else 'NO'}")
    return 0 if ok and same_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
