"""The command line: exit codes, files written, bad input, scans (DESIGN.md)."""

from __future__ import annotations

import gzip
import json
import re
import os
import pickle
import shutil
import time
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from oompost.cli import cli

SAMPLES = Path(__file__).parent.parent / "sample_logs"
SPIKE = SAMPLES / "activation_spike_long_batch"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_analyze_writes_the_three_reports(tmp_path):
    out = tmp_path / "rep"
    r = run("analyze", str(SPIKE), "-o", str(out))
    assert r.exit_code == 0, r.output
    assert {p.name for p in out.iterdir()} == {"report.html", "report.md", "report.json"}
    data = json.loads((out / "report.json").read_text())
    assert data["cause"] == "activation_spike"
    assert "activation" in r.output.lower()
    assert (out / "report.md").read_text().startswith("<!-- oompost report")


def test_format_selection_and_gzip_input(tmp_path):
    gz = tmp_path / "run.log.gz"
    with open(SPIKE / "run.log", "rb") as a, gzip.open(gz, "wb") as b:
        shutil.copyfileobj(a, b)
    out = tmp_path / "rep"
    r = run("analyze", str(gz), "-o", str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    assert [p.name for p in out.iterdir()] == ["report.json"]
    assert json.loads((out / "report.json").read_text())["oom"]["requested_bytes"] == 304 * 2**20


def test_format_names_people_type(tmp_path):
    out = tmp_path / "rep"
    r = run("analyze", str(SPIKE), "-o", str(out), "--format", "Markdown,md,json")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]


def test_usage_errors_exit_2(tmp_path):
    assert run("analyze").exit_code == 2
    assert run("analyze", str(SPIKE), "--format", "pdf").exit_code == 2
    assert run("scan", str(tmp_path), "-o", str(tmp_path / "o"), "--since", "soon").exit_code == 2


@pytest.mark.parametrize("content", [None, b"\x00\x01\x02" * 5000, b"\x80\x04\x95garbage-not-a-pickle"])
def test_unusable_input_exits_3_with_one_line(tmp_path, content):
    path = tmp_path / "input.bin"
    if content is not None:
        path.write_bytes(content)
    r = CliRunner().invoke(cli, ["analyze", str(path), "-o", str(tmp_path / "o")])
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    assert r.output.strip().count("\n") == 0


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_hostile_pickle_is_refused_and_the_log_still_analysed(tmp_path):
    sentinel = tmp_path / "PWNED"
    evil = tmp_path / "snapshot.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "x": _Evil(str(sentinel))}))
    r = run("analyze", str(evil), str(SPIKE / "run.log"), "-o", str(tmp_path / "o"), "--format", "json")
    assert r.exit_code == 0, r.output
    assert not sentinel.exists()
    data = json.loads((tmp_path / "o" / "report.json").read_text())
    snap = next(i for i in data["inputs"] if i["kind"] == "snapshot")
    assert any("refusing to load" in w for w in snap["warnings"])
    assert data["cause"] == "activation_spike"


def test_truncated_gzip_keeps_what_was_there(tmp_path):
    raw = gzip.compress((SPIKE / "run.log").read_bytes())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(raw[: len(raw) * 3 // 4])
    r = run("analyze", str(cut), "-o", str(tmp_path / "o"), "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "o" / "report.json").read_text())
    (warning,) = [w for i in data["inputs"] for w in i["warnings"]]
    kept = int(re.search(r"ends early after line (\d+)", warning).group(1))
    # Every line zlib can recover before the damage was parsed, none dropped with the broken block.
    recoverable = zlib.decompressobj(31).decompress(raw[: len(raw) * 3 // 4])
    assert kept == len(recoverable.splitlines()) > 0


def test_truncated_gzip_ds_config_is_a_clear_error(tmp_path):
    cfg = tmp_path / "ds_config.json.gz"
    cfg.write_bytes(gzip.compress(b'{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}')[:30])
    r = CliRunner().invoke(cli, ["analyze", str(SPIKE / "run.log"), "--ds-config", str(cfg),
                                 "-o", str(tmp_path / "o")])
    assert r.exit_code == 3 and "unreadable compressed file" in r.output, r.output


def test_redact_removes_hosts_and_paths(tmp_path):
    log = tmp_path / "run.log"
    log.write_text((SPIKE / "run.log").read_text().replace("/work/main/", "/home/alice/proj/")
                   + "\ngpu-node17.cluster.example.com:2985003:2985024 [0] NCCL INFO NCCL version 2.20.5+cuda12.4\n"
                     "token hf_abcdefghijklmnopqrstuvwxyzABCD used\n")
    out = tmp_path / "o"
    assert run("analyze", str(log), "-o", str(out), "--redact").exit_code == 0
    for name in ("report.md", "report.json", "report.html"):
        text = (out / name).read_text()
        assert "alice" not in text and "gpu-node17" not in text and "hf_abcdefghij" not in text, name


def test_scan_isolates_bad_jobs_and_writes_an_index(tmp_path):
    root = tmp_path / "failed_jobs"
    shutil.copytree(SPIKE, root / "job_spike")
    shutil.copytree(SAMPLES / "nccl_watchdog_timeout", root / "job_timeout")
    (root / "job_junk").mkdir()
    (root / "job_junk" / "core.bin").write_bytes(b"\x00" * 4096)
    out = tmp_path / "nightly"
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(out)])
    assert r.exit_code == 4, r.output
    index = json.loads((out / "index.json").read_text())
    by_job = {j["job"]: j for j in index["jobs"]}
    assert by_job["job_spike"]["cause"] == "activation_spike"
    assert by_job["job_timeout"]["cause"] == "nccl_error"
    assert by_job["job_junk"]["ok"] is False and by_job["job_junk"]["error"]
    assert (out / "job_spike" / "report.html").exists()
    assert "job_junk" in (out / "index.html").read_text()


def test_scan_since_skips_old_jobs(tmp_path):
    root = tmp_path / "jobs"
    shutil.copytree(SPIKE, root / "old")
    shutil.copytree(SPIKE, root / "new")
    old = time.time() - 3 * 86400
    for p in (root / "old").iterdir():
        os.utime(p, (old, old))
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(tmp_path / "o"), "--since", "24h"])
    assert r.exit_code == 0, r.output
    jobs = json.loads((tmp_path / "o" / "index.json").read_text())["jobs"]
    assert [j["job"] for j in jobs] == ["new"]


def test_estimate_and_check_are_wired_in(tmp_path):
    r = run("estimate", "--model", "qwen2.5-0.5b", "--gpu-mem", "24GiB", "--format", "json")
    assert r.exit_code == 0
    assert json.loads(r.output)["predicted_peak_bytes"] > 0
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                               "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}))
    r = CliRunner().invoke(cli, ["check", str(cfg), "--world-size", "1"])
    assert r.exit_code == 5 and "train_batch_size" in r.output


def test_report_is_the_same_under_any_hash_seed(tmp_path):
    """A nightly scan diffs reports: set iteration order (PYTHONHASHSEED) must not reorder them."""
    import subprocess
    import sys

    sample = SAMPLES / "comm_buffer_zero2_buckets"
    outs = []
    for seed in ("1", "2", "3"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "oompost", "analyze", str(sample), "-o", str(out), "--format", "json"],
                       check=True, env=env, capture_output=True)
        outs.append((out / "report.json").read_text())
    assert json.loads(outs[0])["rerun"]["ds_config_diff"]
    assert outs[0] == outs[1] == outs[2]
