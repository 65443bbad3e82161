#!/usr/bin/env python
"""Speed and memory of ``oompost analyze`` on big logs, against references
measured in the same run on the same file.

    python benchmarks/analyze_speed.py [--mb 100 1000] [--kind training|replay|both]
                                       [--dir DIR] [--json out.json]

References: ``wc -l`` (the floor for reading the file) and a plain Python
line loop with one substring test (the floor for any Python log parser).
The machine is shared, so wall times move; the ratios to the references
measured in the same run are what to compare between runs.

Targets (issue 8): a 100 MB log in under 5 s and 1 GB in under 50 s (5 s
per 100 MB), with the analyser's peak RSS under 300 MB whatever the size.
The analyser's own peak is read from its /proc/self/status (VmHWM) as it
exits; the process tree (the analyser plus the DeepSpeed validation helper
it starts when the log dumps a DeepSpeed config) is sampled from /proc every
50 ms.  CPU is the analyser's and its children's user + system time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from make_big_log import build_replay, build_training  # noqa: E402
from scan_big_log_memory import _tree_rss  # noqa: E402

S_PER_100MB = 5.0
RSS_LIMIT_MB = 300

# Runs the CLI and writes the process's own peak RSS (VmHWM) to argv[1] when it exits.
_WRAPPER = ("import atexit, sys\n"
            "def _hwm(path=sys.argv[1]):\n"
            "    with open('/proc/self/status') as f:\n"
            "        kb = next(int(ln.split()[1]) for ln in f if ln.startswith('VmHWM:'))\n"
            "    with open(path, 'w') as f:\n"
            "        f.write(str(kb * 1024))\n"
            "atexit.register(_hwm)\n"
            "sys.argv = ['oompost'] + sys.argv[2:]\n"
            "from oompost.cli import main\n"
            "main()\n")


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


def run_analyze(log: str, out: str, hwm_file: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", _WRAPPER, hwm_file, "analyze", log, "-o", out, "-q"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]

    def sample() -> None:
        while p.poll() is None:
            peak[0] = max(peak[0], _tree_rss(p.pid))
            time.sleep(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    th.join()
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        raise SystemExit(f"analyze failed (rc {p.returncode}): {err[-2000:]}")
    own = int(Path(hwm_file).read_text()) if os.path.exists(hwm_file) else None
    verdict = ""
    try:
        verdict = json.loads(Path(out, "report.json").read_text())["cause"]
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return {"wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3), "rc": p.returncode,
            "analyser_peak_rss_mib": round(own / 2**20, 1) if own else None,
            "largest_process_peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
            "tree_peak_rss_mib_sampled": round(peak[0] / 2**20, 1), "verdict": verdict}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, nargs="+", default=[100])
    ap.add_argument("--kind", choices=["training", "replay", "both"], default="training")
    ap.add_argument("--dir", default=None, help="keep (and reuse) the generated logs here")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args()
    kinds = ["training", "replay"] if a.kind == "both" else [a.kind]
    ok = True
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        d = a.dir or tmp
        os.makedirs(d, exist_ok=True)
        for mb in a.mb:
            for kind in kinds:
                log = os.path.join(d, f"{kind}_{mb:g}MB.log")
                if not os.path.exists(log):
                    (build_training if kind == "training" else build_replay)(log, int(mb * 2**20))
                size = os.path.getsize(log)
                subprocess.run(["cat", log], stdout=subprocess.DEVNULL)      # the page cache, as for wc -l
                wc = timed(["wc", "-l", log])
                loop = python_loop(log)
                r = run_analyze(log, os.path.join(tmp, f"report_{kind}_{mb:g}"), os.path.join(tmp, "hwm"))
                target = S_PER_100MB * mb / 100
                passed = r["wall_s"] < target and (r["analyser_peak_rss_mib"] or 0) < RSS_LIMIT_MB
                if kind == "training":
                    ok &= passed
                r.update(kind=kind, mb=mb, bytes=size, wc_l_s=round(wc, 3), python_loop_s=round(loop, 3),
                         x_wc=round(r["wall_s"] / wc, 1), x_python_loop=round(r["wall_s"] / loop, 2),
                         target_s=target, target_met=passed)
                results.append(r)
                print(f"{kind:9s} {size / 2**20:7.1f} MiB  analyze {r['wall_s']:6.2f} s (CPU {r['cpu_s']:6.2f} s)  "
                      f"| wc -l {wc:5.2f} s (x{r['x_wc']:.0f})  python line loop {loop:5.2f} s "
                      f"(x{r['x_python_loop']:.1f})  | peak RSS analyser {r['analyser_peak_rss_mib']} MiB, "
                      f"largest process {r['largest_process_peak_rss_mib']} MiB, tree {r['tree_peak_rss_mib_sampled']} MiB"
                      f"  | {r['verdict']}  | target < {target:.0f} s, < {RSS_LIMIT_MB} MB: "
                      f"{'PASS' if passed else 'FAIL'}", flush=True)
    print("training = a long 8-rank DeepSpeed run (start-up with its config dump, per-step memory lines of every "
          "rank, tqdm, NCCL INFO; one rank's OOM, the others' watchdog timeouts); replay = every captured log "
          "re-emitted (mostly start-up boilerplate and tracebacks: the worst case)")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "benchmark": "benchmarks/analyze_speed.py", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "targets": {"s_per_100mb": S_PER_100MB, "analyser_peak_rss_mb": RSS_LIMIT_MB},
            "results": results}, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
