#!/usr/bin/env python
"""Every row of issue 8's table in one run: start-up, big logs, big snapshots.

    python benchmarks/performance.py [--log-mb 100 1000] [--snapshot-mb 500 1200] [--quick]

Runs, one after another on the same machine, each with its own reference
measured in the same run:

* ``startup_speed.py``  — ``oompost --help`` and ``analyze`` with/without a
  ds_config against ``python -c pass``; no helper process left after exit;
* ``analyze_speed.py``  — the realistic 8-rank DeepSpeed log at each size
  against a Python line loop and ``grep -c``; peak RSS of the analyser;
* ``snapshot_speed.py --memory-viz`` — snapshots built from a real trace at
  each size against a bare restricted ``pickle.load`` (and torch's own
  ``_memory_viz stats`` / ``trace_plot``); the verdict must match the
  original snapshot's.  ``--snapshot-mb 1200`` gives a file of about 1 GiB
  (the generator lands at ~0.87 of the request).

Each part prints its table and its ``target …: met / MISSED`` lines; this
script ends with one line per part and exits non-zero if any missed.
``--quick`` (CI-sized: 20 MB log, 100 MB snapshot) checks that the whole
chain runs, not the targets.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def part(title: str, cmd: list[str]) -> tuple[str, int, float]:
    print(f"\n=== {title}: {' '.join(cmd[1:])}", flush=True)
    t = time.perf_counter()
    rc = subprocess.call(cmd)
    return title, rc, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-mb", type=float, nargs="+", default=[100, 1000])
    ap.add_argument("--snapshot-mb", type=float, nargs="+", default=[500, 1200])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    py = sys.executable
    log_mb = ["20"] if a.quick else [str(x) for x in a.log_mb]
    snap_mb = ["100"] if a.quick else [str(x) for x in a.snapshot_mb]
    results = [
        part("start-up", [py, str(HERE / "startup_speed.py"), "--runs", "5" if a.quick else "15"]),
        part("logs", [py, str(HERE / "analyze_speed.py"), "--mb", *log_mb]),
        part("snapshots", [py, str(HERE / "snapshot_speed.py"), "--mb", *snap_mb, "--memory-viz"]),
    ]
    print("\n=== summary")
    for title, rc, wall in results:
        print(f"{title:10s} {'targets met' if rc == 0 else 'TARGET MISSED (see above)'}   ({wall:.0f} s)")
    return 0 if a.quick or all(rc == 0 for _, rc, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
