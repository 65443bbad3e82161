#!/usr/bin/env python
"""Start-up cost of oompost, against ``python -c pass`` measured in the same run.

    python benchmarks/startup_speed.py [--runs 15]

Rows: ``oompost --help`` (target < 0.15 s wall), ``oompost analyze`` of the
smallest sample without a config (no DeepSpeed/torch process may be
started) and of a sample with one (the helper must be gone after exit).
Each time is the median of ``--runs`` runs; CPU time of children is counted
from ``os.wait4``, so a helper importing DeepSpeed shows up in the CPU column.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
HELP_TARGET_S = 0.15


def _env(token: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OOMPOST_TEST_TOKEN": token}


def _left(token: str) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if f"OOMPOST_TEST_TOKEN={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    n += 1
            except OSError:
                pass
    return n


def run(cmd: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the whole process tree that was reaped, processes left."""
    token = uuid.uuid4().hex
    before = os.times()
    t = time.perf_counter()
    subprocess.run(cmd, env=_env(token), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    time.sleep(0.05)
    return wall, cpu, _left(token)


def median_row(cmd: list[str], runs: int) -> tuple[float, float, int]:
    rows = [run(cmd) for _ in range(runs)]
    return (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows), max(r[2] for r in rows))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    py = sys.executable
    script = shutil.which("oompost", path=str(Path(py).parent))
    oompost = [script] if script else [py, "-m", "oompost"]
    out = tempfile.mkdtemp()
    base = median_row([py, "-c", "pass"], a.runs)
    rows = [
        ("oompost --help", median_row([*oompost, "--help"], a.runs)),
        ("analyze, no config (nccl_watchdog_timeout)",
         median_row([*oompost, "analyze", str(SAMPLES / "nccl_watchdog_timeout"), "-o", out, "-q"], max(3, a.runs // 5))),
        ("analyze, with ds_config (config_error_batch_mismatch)",
         median_row([*oompost, "analyze", str(SAMPLES / "config_error_batch_mismatch"), "-o", out, "-q"], 3)),
    ]
    print(f"{'':52s} {'wall s':>8s} {'CPU s':>8s} {'× pass':>8s} {'left':>5s}")
    print(f"{'python -c pass (reference)':52s} {base[0]:8.3f} {base[1]:8.3f} {1.0:8.1f} {base[2]:5d}")
    ok = True
    for name, (wall, cpu, left) in rows:
        print(f"{name:52s} {wall:8.3f} {cpu:8.3f} {wall / base[0]:8.1f} {left:5d}")
        ok &= left == 0
    help_wall = rows[0][1][0]
    no_cfg_cpu = rows[1][1][1]
    print(f"target: --help < {HELP_TARGET_S} s: {'met' if help_wall < HELP_TARGET_S else 'MISSED'} ({help_wall:.3f} s); "
          f"no process left after exit: {'met' if ok else 'MISSED'}; analyze without a config used "
          f"{no_cfg_cpu:.2f} s CPU in all (a DeepSpeed import alone is ~2.3 s)")
    shutil.rmtree(out, ignore_errors=True)
    return 0 if ok and help_wall < HELP_TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
