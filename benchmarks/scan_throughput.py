#!/usr/bin/env python
"""Throughput of ``oompost scan`` on log-only failed jobs of real size (issue 9).

Builds a tree of N job directories, each holding one log made from a real
captured log of ``sample_logs/``: its start-up lines, then its own training
lines repeated until the job's size, then its real crash tail.  Sizes follow
what failed jobs leave: a log-normal with median 50 KB and p95 5 MB, capped
at 10 MB (exact quantiles, shuffled with a fixed seed, so every shard has the
same mix).  The tree is split into 4 shards of N/4 jobs.

Measured in the same run, all with a warm page cache:

- ``cat`` of every file of the tree to /dev/null (the floor: reading the bytes);
- ``oompost scan`` of 1, 2 and 4 shards into fresh output directories
  (linearity: jobs per minute should not fall as jobs grow);
- a second scan of the 4 shards, nothing changed (incremental: ≥ 20× faster).

    python benchmarks/scan_throughput.py [--jobs 1000] [--workers 2] [--dir /tmp/oompost-scan-bench] [--out r.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
MEDIAN, P95, CAP = 50_000, 5_000_000, 10_000_000


def sizes(n: int, seed: int = 0) -> list[int]:
    """Exact quantiles of the capped log-normal (median 50 KB, p95 5 MB)."""
    sigma = math.log(P95 / MEDIAN) / 1.6448536269514722
    nd = statistics.NormalDist()
    out = [min(CAP, int(MEDIAN * math.exp(sigma * nd.inv_cdf((i + 0.5) / n)))) for i in range(n)]
    random.Random(seed).shuffle(out)
    return out


def _parts(text: str) -> tuple[list[str], list[str], list[str]]:
    lines = text.splitlines(keepends=True)
    tb = next((i for i, ln in enumerate(lines) if "Traceback (most recent call last)" in ln), len(lines))
    head_end = max(1, tb // 3)
    body = lines[head_end:tb] or lines[:tb] or lines
    return lines[:head_end], body, lines[tb:]


def build_log(path: Path, src: str, size: int) -> None:
    head, body, tail = _parts(src)
    fixed = sum(len(x) for x in head) + sum(len(x) for x in tail)
    unit = "".join(body)
    reps = max(1, (size - fixed) // max(1, len(unit)))
    with open(path, "w") as f:
        f.writelines(head)
        f.write(unit * reps)
        f.writelines(tail)


def build_tree(base: Path, n: int) -> list[Path]:
    stamp = base / f".built-v2-{n}"
    shards = [base / f"shard{k}" for k in range(4)]
    if stamp.exists():
        return shards
    shutil.rmtree(base, ignore_errors=True)
    logs = [p.read_text(errors="replace") for p in sorted(SAMPLES.glob("*/run.log"))]
    for i, size in enumerate(sizes(n)):
        d = shards[i % 4] / f"job{i:05d}"
        d.mkdir(parents=True)
        build_log(d / "run.log", logs[(i // 4) % len(logs)], size)     # every shard gets every source log
    stamp.write_text("")
    return shards


def files_of(dirs: list[Path]) -> list[str]:
    return sorted(str(p) for d in dirs for p in d.rglob("*.log"))


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def scan(roots: list[Path], out: Path, workers: int) -> tuple[float, int, float]:
    """(wall seconds, jobs, CPU seconds of the whole process tree)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cpu0 = _children_cpu()
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "oompost", "scan", *map(str, roots), "-o", str(out), "-j", str(workers),
                        "--quiet"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if r.returncode not in (0, 4):
        raise SystemExit(f"scan failed ({r.returncode}): {r.stderr[-2000:]}")
    cpu = _children_cpu() - cpu0
    jobs = len(json.loads((out / "index.json").read_text())["jobs"])
    return dt, jobs, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--dir", default="/tmp/oompost-scan-bench")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    base = Path(a.dir)
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} (others may share this machine)")
    t = time.perf_counter()
    shards = build_tree(base, a.jobs)
    all_files = files_of(shards)
    total = sum(os.path.getsize(f) for f in all_files)
    sz = sorted(os.path.getsize(f) for f in all_files)
    print(f"tree: {len(all_files)} jobs, {total / 1e6:.0f} MB, median {sz[len(sz) // 2] / 1e3:.0f} KB, "
          f"p95 {sz[int(len(sz) * 0.95)] / 1e6:.2f} MB (built/checked in {time.perf_counter() - t:.0f} s)", flush=True)
    timed(["cat", *all_files])                                   # warm the page cache
    cat_s = min(timed(["cat", *all_files]) for _ in range(3))
    print(f"cat of every file: {cat_s:.2f} s", flush=True)
    res: dict = {"jobs": len(all_files), "bytes": total, "workers": a.workers, "cat_seconds": cat_s, "runs": []}
    for k in (1, 2, 4):
        out = base / f"out{k}"
        shutil.rmtree(out, ignore_errors=True)
        dt, n, cpu = scan(shards[:k], out, a.workers)
        # The figure is jobs per minute of wall time.  CPU is printed as a diagnostic only: its
        # share of workers x wall says whether the workers were busy (1.0) or waited; a
        # "projection" from CPU time would assume they never wait, which is not measured.
        run = {"shards": k, "jobs": n, "seconds": dt, "cpu_seconds": cpu, "jobs_per_minute": n / dt * 60,
               "cpu_utilisation": cpu / (dt * a.workers), "vs_cat": dt / (cat_s * k / 4),
               "loadavg_after": os.getloadavg()}
        res["runs"].append(run)
        print(f"first scan of {n:5d} jobs: {dt:6.1f} s wall  {run['jobs_per_minute']:6.0f} jobs/min  "
              f"({cpu:.1f} s CPU = {run['cpu_utilisation']:.2f} of {a.workers} workers x wall; "
              f"{run['vs_cat']:.0f}x cat of the same files; load {os.getloadavg()[0]:.1f})", flush=True)
    load = os.getloadavg()
    res["loadavg_before"] = load0
    res["loadavg"] = load
    print(f"load average now: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (others share this machine)")
    dt2, n2, cpu2 = scan(shards, base / "out4", a.workers)
    first = res["runs"][-1]["seconds"]
    res["second_scan"] = {"jobs": n2, "seconds": dt2, "cpu_seconds": cpu2, "speedup": first / dt2,
                          "vs_cat": dt2 / cat_s}
    print(f"second scan of {n2} unchanged jobs: {dt2:.2f} s, {first / dt2:.0f}x faster than the first "
          f"({dt2 / cat_s:.1f}x cat)", flush=True)
    per = [r["seconds"] / r["jobs"] * 1000 for r in res["runs"]]
    print("wall ms per job at 1/2/4 shards: " + ", ".join(f"{p:.1f}" for p in per))
    per_cpu = [r["cpu_seconds"] / r["jobs"] * 1000 for r in res["runs"]]
    print("CPU ms per job at 1/2/4 shards: " + ", ".join(f"{p:.1f}" for p in per_cpu))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
