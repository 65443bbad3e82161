"""oompost scan: discovery of real layouts, incremental and resumable scans,
history, summary tables, index, exit status, executors."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from oompost.cli import cli
from oompost.scan import find_jobs, run_scan
from oompost.scan.outputs import inside, safe_name

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
SPIKE = SAMPLES / "activation_spike_long_batch"
LEAK = SAMPLES / "leak_logits_kept_for_metrics"
TIMEOUT = SAMPLES / "nccl_watchdog_timeout"


def _log(src: Path) -> bytes:
    return (src / "run.log").read_bytes()


def test_discovery_matches_real_layouts(tmp_path: Path) -> None:
    root = tmp_path / "failed"
    # a job directory with rank logs and a capture subdirectory from oompost.record
    (root / "llm-7b" / "crash").mkdir(parents=True)
    (root / "llm-7b" / "rank0.log").write_bytes(_log(SPIKE))
    (root / "llm-7b" / "rank1.log").write_bytes(b"step 1 loss 2.0\n")
    (root / "llm-7b" / "crash" / "meta_rank0.json").write_text("{}")
    # a torchrun --log-dir tree: <run>/attempt_k/<rank>/stdout.log
    for k in (0, 1):
        d = root / "torchrun" / "run_abc" / f"attempt_{k}" / "0"
        d.mkdir(parents=True)
        (d / "stdout.log").write_bytes(_log(TIMEOUT))
    # an sbatch working directory: several slurm-%j.out files
    (root / "slurm").mkdir()
    (root / "slurm" / "slurm-1001.out").write_bytes(_log(LEAK))
    (root / "slurm" / "slurm-1001.err").write_bytes(b"")
    (root / "slurm" / "slurm-1002_3.out").write_bytes(_log(SPIKE))
    (root / "README.md").write_text("loose notes at the root are not a job")
    jobs = {j.name: j for j in find_jobs([str(root)])}
    assert sorted(jobs) == ["llm-7b", "slurm/slurm-1001", "slurm/slurm-1002", "torchrun/run_abc"]
    assert {os.path.basename(f) for f in jobs["llm-7b"].files} == {"rank0.log", "rank1.log", "meta_rank0.json"}
    assert len(jobs["torchrun/run_abc"].files) == 2           # both attempts
    assert {os.path.basename(f) for f in jobs["slurm/slurm-1001"].files} == {"slurm-1001.out", "slurm-1001.err"}


def test_a_root_with_only_files_is_one_job(tmp_path: Path) -> None:
    shutil.copytree(SPIKE, tmp_path / "job")
    assert [j.name for j in find_jobs([str(tmp_path / "job")])] == ["job"]


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    for name, src in (("a_spike", SPIKE), ("b_leak", LEAK), ("c_timeout", TIMEOUT)):
        (root / name).mkdir(parents=True)
        (root / name / "run.log").write_bytes(_log(src))
    return root


def test_second_scan_reuses_unchanged_jobs_and_reanalyses_changed_ones(tmp_path: Path) -> None:
    root, out = _tree(tmp_path), tmp_path / "out"
    first = run_scan([str(root)], str(out), jobs=1)
    assert (first.analysed, first.reused) == (3, 0)
    causes = {r["job"]: r["cause"] for r in first.rows}
    assert causes == {"a_spike": "activation_spike", "b_leak": "leak", "c_timeout": "nccl_error"}
    # touched but unchanged bytes: still reused (content fingerprint, not mtime)
    os.utime(root / "a_spike" / "run.log", (1e9, 1e9))
    # changed bytes: analysed again
    (root / "b_leak" / "run.log").write_bytes(_log(TIMEOUT))
    second = run_scan([str(root)], str(out), jobs=1)
    assert (second.analysed, second.reused) == (1, 2)
    assert {r["job"]: r["cause"] for r in second.rows}["b_leak"] == "nccl_error"
    db = sqlite3.connect(out / "history.sqlite")
    assert db.execute("SELECT count(*) FROM results").fetchone()[0] == 6     # one row per job and scan
    assert db.execute("SELECT count(*) FROM scans WHERE status = 'done'").fetchone()[0] == 2
    trend = db.execute("SELECT cause, count(*) FROM results WHERE scan_id = 2 GROUP BY cause").fetchall()
    assert dict(trend) == {"activation_spike": 1, "nccl_error": 2}


def test_an_interrupted_scan_resumes(tmp_path: Path) -> None:
    root, out = _tree(tmp_path), tmp_path / "out"
    calls = []

    def stop_after_first(done: int, total: int) -> None:
        calls.append(done)
        if done >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scan([str(root)], str(out), jobs=1, progress=stop_after_first)
    assert not (out / "index.json").exists()
    resumed = run_scan([str(root)], str(out), jobs=1)
    assert resumed.resumed_from_interrupted
    assert resumed.reused >= 1 and resumed.analysed <= 2 and len(resumed.rows) == 3
    db = sqlite3.connect(out / "history.sqlite")
    assert [s for (s,) in db.execute("SELECT status FROM scans ORDER BY scan_id")] == ["interrupted", "done"]


def test_outputs_are_complete_atomic_and_tabular(tmp_path: Path) -> None:
    root, out = _tree(tmp_path), tmp_path / "out"
    run_scan([str(root)], str(out), jobs=2)
    leftovers = [p for p in out.rglob(".tmp-*")]
    assert leftovers == []
    csv = pd.read_csv(out / "summary.csv")
    pq = pd.read_parquet(out / "summary.parquet")
    assert list(csv["job"]) == list(pq["job"]) == ["a_spike", "b_leak", "c_timeout"]
    assert list(pq["cause"]) == ["activation_spike", "leak", "nccl_error"]
    index = json.loads((out / "index.json").read_text())
    assert index["trend"] and {t["cause"] for t in index["trend"]} == {"activation_spike", "leak", "nccl_error"}
    html = (out / "index.html").read_text()
    assert 'href="a_spike/report.html"' in html and "<svg" in html
    for r in index["jobs"]:
        assert (out / r["report"]).exists()


def test_cli_exit_status_and_quiet(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    out = tmp_path / "o"
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(out), "--quiet", "-j", "1"])
    assert r.exit_code == 0 and r.output == ""
    (root / "d_junk").mkdir()
    (root / "d_junk" / "core").write_bytes(os.urandom(4096))
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(out), "-j", "1"])
    assert r.exit_code == 4
    assert "FAILED d_junk" in r.output and "1 analysed, 3 unchanged" in r.output
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(out), "--pattern", "a_*", "-j", "1"])
    assert r.exit_code == 0 and r.output.startswith("1 job(s)")
    r = CliRunner().invoke(cli, ["scan", str(tmp_path / "missing"), "-o", str(out)])
    assert r.exit_code == 3


def test_local_processes_and_dask_give_identical_output(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    root = _tree(tmp_path)
    a = run_scan([str(root)], str(tmp_path / "local"), jobs=2)
    b = run_scan([str(root)], str(tmp_path / "dask"), jobs=2, executor="dask")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(a.rows) == strip(b.rows)
    for job in ("a_spike", "b_leak", "c_timeout"):
        ja = json.loads((tmp_path / "local" / job / "report.json").read_text())
        jb = json.loads((tmp_path / "dask" / job / "report.json").read_text())
        ja.pop("inputs"), jb.pop("inputs")
        assert ja == jb


@pytest.mark.parametrize("name", ["../../etc/passwd", "..", ".", "", "/abs/path", "a/../../b", "job\nname",
                                  "<script>alert(1)</script>", "x" * 500, "ünïcode job", "con", ".hidden"])
def test_output_names_cannot_escape(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    n = safe_name(name)
    assert "/" not in n and "\\" not in n and n not in (".", "..") and not n.startswith(".") and len(n) <= 100
    assert os.path.dirname(inside(str(out), n)) == os.path.realpath(out)


def test_inside_refuses_escapes(tmp_path: Path) -> None:
    for bad in ("../x", "a/b", "/etc/passwd", ".."):
        with pytest.raises(ValueError):
            inside(str(tmp_path), bad)


def test_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    import pty
    import subprocess
    import sys

    root = _tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    cmd = [sys.executable, "-m", "oompost", "scan", str(root), "-o", str(tmp_path / "o"), "-j", "1"]
    piped = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert piped.returncode == 0 and "job/s" not in piped.stderr and "|" not in piped.stderr   # cron: no bar
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))   # a real terminal has a width
    p = subprocess.Popen(cmd + ["-o", str(tmp_path / "o2")], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    assert p.wait(timeout=300) == 0
    os.close(master)
    assert b"oompost scan" in out and b"3/3" in out                  # tqdm's bar on the terminal


def test_redact_hides_job_and_file_names_in_the_index_history_and_paths(tmp_path: Path) -> None:
    root = tmp_path / "failed"
    (root / "alice-secretproj").mkdir(parents=True)
    (root / "alice-secretproj" / "alice_run_0412.log").write_bytes(_log(LEAK))
    (root / "bob-llama-private").mkdir()
    (root / "bob-llama-private" / "bob_train.log.gz").write_bytes(b"\x1f\x8b\x08\x00trunc")   # a bad job
    out = tmp_path / "nightly"
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(out), "--redact", "--quiet"])
    assert r.exit_code == 4, r.output                      # the truncated .gz job failed, said so
    names = {p.name for p in out.rglob("*")}
    for secret in ("alice", "secretproj", "bob", "private"):
        assert not any(secret in n for n in names), (secret, names)
        for f in out.rglob("*"):
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), (secret, f)
    rows = json.loads((out / "index.json").read_text())["jobs"]
    assert len(rows) == 2 and all(row["job"].startswith("job-") for row in rows)
    failed = [row for row in rows if not row["ok"]]
    assert len(failed) == 1 and failed[0]["error"]          # the error is kept, the names in it are not
    again = CliRunner().invoke(cli, ["scan", str(root), "-o", str(out), "--redact", "--quiet"])
    assert again.exit_code == 4
    assert sum(row.get("reused", False) for row in json.loads((out / "index.json").read_text())["jobs"]) >= 1


def test_chunks_put_the_heaviest_jobs_first_and_lose_none() -> None:
    """Longest processing time first: the 10 MB log starts first, not last, and
    a heavy job does not share its chunk with a queue of others."""
    from oompost.scan import CHUNK_SECONDS_TARGET, _chunks

    tasks = [(f"job{i}",) for i in range(200)]
    weights = [50_000] * 200
    weights[150] = 10_000_000                                # one big log, late in discovery order
    weights[7] = 5_000_000
    chunks = _chunks(tasks, 2, weights)
    flat = [t for c in chunks for t in c]
    assert sorted(flat) == sorted(tasks)                     # every job exactly once
    assert chunks[0] == [("job150",)] and chunks[1] == [("job7",)]
    assert all(len(c) <= CHUNK_SECONDS_TARGET for c in chunks)
    assert _chunks([], 2, []) == []
