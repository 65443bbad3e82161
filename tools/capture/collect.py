#!/usr/bin/env python
"""Copy what run.py brought back into the repository.

    python tools/capture/collect.py EXTRACTED_DIR [--only a,b] [--matrix docs/estimator/measurements.json]
    python tools/capture/collect.py EXTRACTED_DIR --dest tests/heldout_captures     (the held-out captures)

For each job directory: run.log (and kernel.log), ds_config.json, capture.json
and expected.json are copied as they are; snapshot pickles are gzipped.
Nothing in a log is edited.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEEP = ("run.log", "kernel.log", "ds_config.json", "capture.json", "expected.json")


def collect_jobs(src: str, only: set[str] | None, dest: str = "sample_logs") -> list[str]:
    jobs = os.path.join(src, "jobs")
    done = []
    for name in sorted(os.listdir(jobs)):
        if only and name not in only:
            continue
        s = os.path.join(jobs, name)
        if not os.path.exists(os.path.join(s, "expected.json")):
            continue
        d = os.path.join(REPO, dest, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f in sorted(os.listdir(s)):
            p = os.path.join(s, f)
            if f in KEEP:
                shutil.copy(p, os.path.join(d, f))
            elif f.endswith(".pickle"):
                with open(p, "rb") as a, gzip.open(os.path.join(d, f + ".gz"), "wb", compresslevel=9) as b:
                    shutil.copyfileobj(a, b)
        done.append(name)
    return done


def collect_matrix(src: str, dest: str) -> None:
    r = json.load(open(os.path.join(src, "matrix", "results.json")))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w") as f:
        json.dump(r, f, indent=1, sort_keys=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--only", default="")
    ap.add_argument("--matrix", default=None)
    ap.add_argument("--dest", default="sample_logs", help="folder (relative to the repository) to copy jobs into")
    a = ap.parse_args()
    only = {x for x in a.only.split(",") if x} or None
    print("collected:", ", ".join(collect_jobs(a.src, only, a.dest)))
    if a.matrix:
        collect_matrix(a.src, os.path.join(REPO, a.matrix))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
