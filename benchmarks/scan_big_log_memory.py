#!/usr/bin/env python
"""``oompost analyze`` of a 5 GB log in bounded memory (issue 9), measured.

Builds a training-shaped log from real captured lines (benchmarks/make_big_log.py:
the real DeepSpeed start-up of a capture, 8 ranks of per-step memory lines,
NCCL INFO lines, progress bars, ending in a real OOM traceback) at several
sizes — by default 0.5, 1.5 and 5 GiB — and runs ``oompost analyze`` on each
in a subprocess, sampling the resident memory of the whole process tree (the
analyser and the DeepSpeed validation helper it starts) every 50 ms from /proc.  Bounded means
the peak does not grow with the file.  ``wc -l`` of the same file is timed in
the same run as the floor.

    python benchmarks/scan_big_log_memory.py [--sizes 0.5,1.5,5] [--dir /tmp/oompost-biglog] [--out r.json] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from make_big_log import build_training  # noqa: E402

GiB = 1 << 30


def build(path: Path, size: int, unit: Path) -> None:
    """``size`` bytes: the unit log's start-up and steps repeated, then its crash tail."""
    text = unit.read_bytes()
    tb = text.rfind(b"Traceback (most recent call last)")
    cut = text.rfind(b"\n", 0, tb) + 1
    body, tail = text[:cut], text[cut:]
    with open(path, "wb") as f:
        written = 0
        while written + len(body) < size:
            f.write(body)
            written += len(body)
        f.write(body[: max(0, size - written - len(tail))].rsplit(b"\n", 1)[0] + b"\n")
        f.write(tail)


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            pass
    return total


def analyze(path: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "oompost", "analyze", str(path), "-o", str(out), "--format", "json"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while p.poll() is None:
        peak = max(peak, _tree_rss(p.pid))
        time.sleep(0.05)
    dt = time.perf_counter() - t
    stdout, stderr = p.communicate()
    verdict = stdout.splitlines()[0] if stdout else stderr.strip().splitlines()[-1:]
    return {"seconds": dt, "peak_rss_bytes": peak, "rc": p.returncode, "verdict": verdict}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.5,1.5,5", help="GiB, comma-separated")
    ap.add_argument("--dir", default="/tmp/oompost-biglog")
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    unit = d / "unit.log"
    if not unit.exists():
        build_training(str(unit), 64 << 20)
    results = []
    for gib in (float(x) for x in a.sizes.split(",")):
        path = d / f"train_{gib:g}GiB.log"
        if not path.exists() or path.stat().st_size < gib * GiB * 0.99:
            build(path, int(gib * GiB), unit)
        size = path.stat().st_size
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL)          # warm what the cache can hold
        t = time.perf_counter()
        subprocess.run(["wc", "-l", str(path)], stdout=subprocess.DEVNULL)
        wc = time.perf_counter() - t
        r = analyze(path, d / f"report_{gib:g}")
        r.update(gib=gib, bytes=size, wc_seconds=wc, mb_per_s=size / 1e6 / r["seconds"])
        results.append(r)
        print(f"{size / GiB:5.2f} GiB: analyze {r['seconds']:6.1f} s ({r['mb_per_s']:.0f} MB/s, "
              f"{r['seconds'] / wc:.0f}x wc -l), peak RSS of the process tree {r['peak_rss_bytes'] / 2**20:.0f} MiB, "
              f"rc {r['rc']}: {r['verdict']}", flush=True)
        if not a.keep:
            path.unlink()
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
