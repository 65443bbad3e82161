"""Big logs are streamed: the analyser's peak memory does not grow with the log.

A training-shaped log (benchmarks/make_big_log.py: real DeepSpeed start-up
with its config dump, 8 ranks of step lines, NCCL INFO, progress bars, one
rank's OOM and the others' watchdog timeouts) is analysed at ~6 MB and at
~64 MB, each in a fresh subprocess that reports its own peak resident memory
(VmHWM from /proc/self/status: a process's own high-water mark, unlike
ru_maxrss, which a child inherits from a large pytest parent).  No timing
here: speed is measured in benchmarks/analyze_speed.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from make_big_log import build_training  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")

_RUN = """
import json, sys
import oompost
from oompost.render.json_out import report_data
r = report_data(oompost.analyze([sys.argv[1]]))
with open('/proc/self/status') as f:
    hwm = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith('VmHWM:'))
print(json.dumps({"hwm": hwm, "report": r}))
"""


def _grow(unit: Path, path: Path, size: int) -> None:
    """``size`` bytes: the unit's start-up and steps repeated, then its crash tail (fast to write)."""
    text = unit.read_bytes()
    tb = text.rfind(b"Traceback (most recent call last)")
    cut = text.rfind(b"\n", 0, tb) + 1
    body, tail = text[:cut], text[cut:]
    start = body.find(b"[rank0]: step ")
    steps = body[start:]
    with open(path, "wb") as f:
        f.write(body)
        written = len(body)
        while written + len(steps) < size:
            f.write(steps)
            written += len(steps)
        f.write(tail)


def _analyze(path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", _RUN, str(path)], env=env, check=True, capture_output=True,
                         text=True, timeout=600)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("biglog")
    unit = d / "unit.log"
    build_training(str(unit), 6 * 2**20)
    big = d / "big.log"
    _grow(unit, big, 64 * 2**20)
    return {"small": (unit, _analyze(unit)), "big": (big, _analyze(big))}


def test_peak_memory_does_not_grow_with_the_log(runs):
    small, big = runs["small"][1]["hwm"], runs["big"][1]["hwm"]
    assert big < 300 * 2**20, f"analyser peak {big / 2**20:.0f} MiB on a 64 MB log"
    # ten times the log, the same bounded state (step series thinned, blocks streamed)
    assert big - small < 48 * 2**20, f"peak {small / 2**20:.0f} MiB at 6 MB, {big / 2**20:.0f} MiB at 64 MB"


def test_big_log_keeps_exact_line_numbers_and_its_verdict(runs):
    path, r = runs["big"]
    # the OOM's line, counted through the stretches the scanner skips, is the file's own
    with open(path, "rb") as f:
        want = next(i for i, ln in enumerate(f, 1) if b"torch.OutOfMemoryError: CUDA out of memory" in ln)
    assert r["report"]["oom"]["source"]["line"] == want
    assert r["report"]["cause"] == runs["small"][1]["report"]["cause"] == "activation_spike"
    # the step series reaches the report thinned, not one point per logged step
    assert 0 < len(r["report"]["timeline"]["points"]) <= len(runs["small"][1]["report"]["timeline"]["points"]) + 64
