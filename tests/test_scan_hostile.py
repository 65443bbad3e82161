"""Survive anything: one bad job is a row with its error, never a stopped
scan, and nothing in an input runs (issue 9's list of hostile inputs)."""

from __future__ import annotations

import gzip
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

from oompost.scan import run_scan

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
SPIKE_LOG = (SAMPLES / "activation_spike_long_batch" / "run.log").read_bytes()


class _RunsCode:
    """A pickle that calls os.system on load (what a hostile snapshot does)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def _job(root: Path, name: str, files: dict[str, bytes]) -> None:
    d = root / name
    d.mkdir(parents=True)
    for fname, data in files.items():
        (d / fname).write_bytes(data)


def test_hostile_and_corrupt_inputs_never_stop_the_scan(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    marker = tmp_path / "PWNED"
    hostile = pickle.dumps({"segments": [], "device_traces": [], "x": _RunsCode(marker)}, protocol=4)
    real_snapshot = gzip.decompress((SAMPLES / "activation_spike_long_batch" / "snapshot_rank0_oom.pickle.gz")
                                    .read_bytes())
    _job(root, "good", {"run.log": SPIKE_LOG})
    _job(root, "hostile_pickle", {"snapshot_rank0_oom.pickle": hostile})
    _job(root, "hostile_pickle_gz", {"snapshot.pickle.gz": gzip.compress(hostile), "run.log": SPIKE_LOG})
    _job(root, "corrupt_pickle", {"snapshot.pickle": real_snapshot[: len(real_snapshot) // 3]})
    _job(root, "binary_junk", {"core": os.urandom(1 << 16)})
    # junk that opens like JSON or HTML by chance (one random file in ~200 opens with "{") is still junk
    _job(root, "junk_brace", {"core": b" {" + os.urandom(1 << 12)})
    _job(root, "junk_html", {"core": b"<html>" + os.urandom(1 << 12)})
    _job(root, "empty_gz", {"run.log.gz": b""})
    _job(root, "truncated_gz", {"run.log.gz": gzip.compress(SPIKE_LOG * 20)[:3000]})
    _job(root, "nul_bytes", {"run.log": SPIKE_LOG.replace(b"\n", b"\x00\n", 50)})      # reads as binary
    _job(root, "nul_tail", {"run.log": SPIKE_LOG + b"\x00" * 65536})        # a crashed node's NUL-filled tail
    _job(root, "ansi", {"run.log": b"\x1b[31m" + SPIKE_LOG.replace(b"torch.", b"\x1b[1mtorch.") + b"\x1b[0m"})
    _job(root, "invalid_utf8", {"run.log": SPIKE_LOG.replace(b"GiB", b"G\xff\xfeB", 3) + b"\xc3\x28\xa0\xa1\n"})
    _job(root, "single_50mb_line", {"run.log": b"x" * (50 << 20) + b"\n" + SPIKE_LOG})
    _job(root, "empty_file", {"run.log": b""})
    (root / "symlink_loop").mkdir()
    os.symlink("loop_b", root / "symlink_loop" / "loop_a")
    os.symlink("loop_a", root / "symlink_loop" / "loop_b")
    (root / "symlink_loop" / "run.log").write_bytes(SPIKE_LOG)
    (root / "dir_loop" / "sub").mkdir(parents=True)
    os.symlink("..", root / "dir_loop" / "sub" / "up")            # a directory cycle: not followed
    (root / "dir_loop" / "sub" / "run.log").write_bytes(SPIKE_LOG)
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "pipe")                               # opening it would block forever
    (root / "fifo" / "run.log").write_bytes(SPIKE_LOG)
    _job(root, "unreadable", {"run.log": SPIKE_LOG})
    os.chmod(root / "unreadable" / "run.log", 0)

    t0 = time.monotonic()
    result = run_scan([str(root)], str(tmp_path / "out"), jobs=2)
    assert time.monotonic() - t0 < 300
    assert not marker.exists(), "a pickle ran code"
    rows = {r["job"]: r for r in result.rows}
    expected_jobs = {"good", "hostile_pickle", "hostile_pickle_gz", "corrupt_pickle", "binary_junk", "junk_brace",
                     "junk_html", "empty_gz", "truncated_gz", "nul_bytes", "ansi", "invalid_utf8", "single_50mb_line", "empty_file",
                     "symlink_loop", "dir_loop/sub", "fifo", "unreadable", "nul_tail"}
    assert set(rows) == expected_jobs
    internal = {j: r["error"] for j, r in rows.items() if r["error"].startswith("internal error")}
    assert internal == {}, internal                                  # clear input errors only
    for job in ("good", "nul_tail", "ansi", "invalid_utf8", "single_50mb_line", "symlink_loop", "dir_loop/sub",
                "fifo", "truncated_gz", "hostile_pickle_gz"):
        assert rows[job]["ok"] and rows[job]["cause"] == "activation_spike", (job, rows[job])
    if os.geteuid() != 0:                                            # root reads a mode-000 file anyway
        assert not rows["unreadable"]["ok"] or rows["unreadable"]["cause"] == "activation_spike"
    for job in ("binary_junk", "empty_gz", "empty_file", "hostile_pickle", "nul_bytes"):
        r = rows[job]
        assert (not r["ok"] and r["error"]) or r["cause"] == "unknown", (job, r)
    for job in ("junk_brace", "junk_html"):
        assert not rows[job]["ok"] and "binary data" in rows[job]["error"], rows[job]
    assert result.failed                                           # some jobs are failed rows, the scan finished


def test_a_file_that_grows_while_read(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    _job(root, "growing", {"run.log": SPIKE_LOG})
    stop = threading.Event()

    def grow() -> None:
        with open(root / "growing" / "run.log", "ab") as f:
            while not stop.is_set():
                f.write(b"step 99 | loss 1.0 | mem allocated=3.00GiB reserved=4.00GiB\n" * 200)
                f.flush()
                time.sleep(0.001)

    t = threading.Thread(target=grow)
    t.start()
    try:
        result = run_scan([str(root)], str(tmp_path / "out"), jobs=1)
    finally:
        stop.set()
        t.join()
    (row,) = result.rows
    assert row["ok"] or not row["error"].startswith("internal error"), row


def test_hostile_pickle_alone_runs_nothing_through_analyze(tmp_path: Path) -> None:
    import oompost
    from oompost.errors import InputError

    marker = tmp_path / "PWNED2"
    p = tmp_path / "snapshot_rank0_oom.pickle"
    p.write_bytes(pickle.dumps(_RunsCode(marker), protocol=2))
    try:
        oompost.analyze([str(p)])
    except InputError:
        pass
    assert not marker.exists()


def test_a_memo_bomb_pickle_is_refused_without_taking_the_memory(tmp_path: Path) -> None:
    """A 14-byte pickle whose LONG_BINPUT names memo slot 1,260,480,601: CPython's unpickler
    would grow its memo to that size (the sniff fuzzer's 100 KB snapshot reached 19 GB).
    The load is refused with a clear error, and the process stays small."""
    import resource
    import subprocess
    import sys

    bomb = tmp_path / "snapshot.pickle"
    bomb.write_bytes(b"\x80\x02N" + b"r" + (1_260_480_601).to_bytes(4, "little") + b".")
    code = ("import resource, sys\n"
            "from oompost.parsers.snapshot import load_snapshot\n"
            "from oompost.errors import SnapshotError\n"
            "try:\n"
            f"    load_snapshot({str(bomb)!r})\n"
            "except SnapshotError as e:\n"
            "    print('refused:', e)\n"
            "print('limit_restored', resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY)\n"
            # VmHWM, not ru_maxrss: ru_maxrss survives exec, so a child of a large pytest
            # process would report its parent's peak (CI saw 1,036 MB from a 14-byte input)
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
            "print('maxrss_kb', int(hwm.split()[1]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "more memory than a snapshot of its size can need" in r.stdout
    maxrss_mb = int(r.stdout.split("maxrss_kb")[1]) / 1024
    assert maxrss_mb < 500, maxrss_mb
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:          # (as on CI)
        assert "limit_restored True" in r.stdout                  # the ceiling is lifted after the load
