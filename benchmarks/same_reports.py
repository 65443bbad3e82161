#!/usr/bin/env python
"""Proof that a change left the reports alone: every input analysed by this
tree and by a base revision, JSON reports compared byte for byte.

    python benchmarks/same_reports.py [--base REV] [--big 20] [--no-corpus]

Inputs: every scenario of sample_logs/, every case of tests/corpus/ and,
with ``--big MB``, the generated training and replay logs of
benchmarks/make_big_log.py at that size (where the streaming and thinning
of big logs could show).  The base revision's ``src/`` is taken with
``git archive`` (by default the merge base with main, so that what
main gained since is not counted as a change); both trees run in their own subprocess, side by side.
Exit 0 when every report is identical, 1 with the names that differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from make_big_log import build_replay, build_training  # noqa: E402

_RUN = """
import json, sys
import oompost
from oompost.errors import InputError
from oompost.render.json_out import render_json
out = {}
for name, path in json.load(open(sys.argv[1])):
    try:
        out[name] = render_json(oompost.analyze([path]))
    except InputError as e:
        out[name] = "InputError: " + str(e)
json.dump(out, open(sys.argv[2], "w"))
"""


def inputs(corpus: bool, big: list[float], tmp: str) -> list[tuple[str, str]]:
    out = [(f"sample_logs/{p.name}", str(p)) for p in sorted((ROOT / "sample_logs").iterdir())
           if (p / "expected.json").exists()]
    if corpus:
        out += [(f"corpus/{p.name}", str(p)) for p in sorted((ROOT / "tests" / "corpus").iterdir())
                if (p / "case.json").exists()]
    for mb in big:
        for kind, build in (("training", build_training), ("replay", build_replay)):
            path = os.path.join(tmp, f"{kind}_{mb:g}MB.log")
            build(path, int(mb * 2**20))
            out.append((f"big/{kind}_{mb:g}MB", path))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default=None, help="the revision to compare with (default: merge base with main)")
    ap.add_argument("--big", type=float, nargs="*", default=[], help="also generated logs of these sizes (MB)")
    ap.add_argument("--no-corpus", action="store_true")
    a = ap.parse_args()
    if a.base is None:
        a.base = subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], check=True,
                                stdout=subprocess.PIPE, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp, "base")
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.base, "src"], check=True,
                                 stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        todo = inputs(not a.no_corpus, a.big, tmp)
        spec = Path(tmp, "inputs.json")
        spec.write_text(json.dumps(todo))
        procs = []
        for label, src in (("base", base / "src"), ("here", ROOT / "src")):
            env = {**os.environ, "PYTHONPATH": str(src)}
            res = Path(tmp, f"{label}.json")
            procs.append((res, subprocess.Popen([sys.executable, "-c", _RUN, str(spec), str(res)], env=env, cwd=tmp)))
        for res, p in procs:
            if p.wait() != 0:
                print(f"a run failed (rc {p.returncode})")
                return 2
        before, after = (json.loads(res.read_text()) for res, _ in procs)
    differ = [name for name, _ in todo if before.get(name) != after.get(name)]
    print(f"{len(todo) - len(differ)} of {len(todo)} reports identical to {a.base}'s")
    for name in differ:
        print(f"  differs: {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
