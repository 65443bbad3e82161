"""The CLI as a well-made tool (issue 7): output paths checked before any work,
``-o -``, damaged inputs named, ``--gpu-mem 80``, path-like API arguments,
progress only on a terminal.  All through click's runner."""

from __future__ import annotations

import gzip
import io
import json
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

import oompost
from oompost.cli import cli

SAMPLES = Path(__file__).parent.parent / "sample_logs"
LEAK = SAMPLES / "leak_logits_kept_for_metrics"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _one_line_error(r, code: int) -> str:
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    err = r.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("oompost:"), err
    assert r.stdout == ""
    return err


def test_output_that_is_an_existing_file_is_refused_before_any_work(tmp_path):
    f = tmp_path / "report"
    f.write_text("keep me")
    err = _one_line_error(run("analyze", str(tmp_path / "does-not-exist.log"), "-o", str(f)), 2)
    assert "not a directory" in err
    assert f.read_text() == "keep me"


def test_output_with_a_missing_parent_is_refused(tmp_path):
    err = _one_line_error(run("analyze", str(LEAK), "-o", str(tmp_path / "no" / "such" / "dir")), 2)
    assert "parent directory" in err
    assert not (tmp_path / "no").exists()


def test_output_that_cannot_be_written_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    target = ro / "out"
    try:
        import os

        if os.geteuid() == 0:               # root writes anywhere: use a directory no one can create files in
            target = Path("/proc/1/oompost-out")
        err = _one_line_error(run("analyze", str(LEAK), "-o", str(target)), 2)
        assert "cannot write" in err
    finally:
        ro.chmod(0o700)


def test_dash_writes_the_json_to_stdout(tmp_path):
    r = run("analyze", str(LEAK), "-o", "-")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema"] == "oompost.report/1" and data["cause"] == "leak"
    assert "leak" in r.stderr                               # the verdict lines go to stderr
    assert not list(tmp_path.iterdir())


def test_a_pickled_list_is_not_a_snapshot(tmp_path):
    p = tmp_path / "snapshot.pickle"
    p.write_bytes(pickle.dumps([1, 2, 3]))
    err = _one_line_error(run("analyze", str(p), "-o", str(tmp_path / "o")), 3)
    assert "not a snapshot" in err
    assert not (tmp_path / "o").exists()                     # nothing left behind


def test_a_directory_with_nothing_readable_exits_3(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    (d / "empty.log").write_bytes(b"")
    (d / "blob.bin").write_bytes(b"\x00\x01\x02" * 1000)
    (d / "core.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 20)          # a gzip header and nothing after it
    err = _one_line_error(run("analyze", str(d), "-o", str(tmp_path / "o")), 3)
    assert "nothing usable" in err


def test_damaged_inputs_are_named_on_stderr_and_in_the_report(tmp_path):
    raw = gzip.compress((LEAK / "run.log").read_bytes() * 20)
    cut = tmp_path / "run.log.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    snap = tmp_path / "snapshot.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "device_traces": []})[:-5])     # truncated
    r = run("analyze", str(cut), str(snap), "-o", str(tmp_path / "o"), "--format", "json")
    assert r.exit_code == 0, r.output
    assert f"oompost: warning: {cut}: file ends early" in r.stderr
    assert f"oompost: warning: {snap}:" in r.stderr and "truncated" in r.stderr
    data = json.loads((tmp_path / "o" / "report.json").read_text())
    warned = {i["path"] for i in data["inputs"] if i["warnings"]}
    assert {str(cut), str(snap)} <= warned


def test_gpu_mem_without_a_unit_is_gib_and_an_absurd_one_is_refused():
    r = run("estimate", "--model", "7b", "--gpu-mem", "80", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["device_bytes"] == 80 * 2**30
    r = run("estimate", "--model", "7b", "--gpu-mem", str(80 * 2**30))
    assert r.exit_code == 2 and "give a unit" in r.output


def test_analyze_takes_path_like_arguments():
    a = oompost.analyze(LEAK)
    b = oompost.analyze([LEAK / "run.log"], ds_config=None)
    assert a.cause == b.cause == "leak"


def test_progress_is_silent_when_not_a_terminal_and_shown_on_one():
    import time

    from oompost.progress import Progress, stage

    quiet = io.StringIO()
    with Progress("analysing", stream=quiet, delay=0, interval=0.01):
        time.sleep(0.05)
    assert quiet.getvalue() == ""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    with Progress("analysing", stream=tty, delay=0, interval=0.01):
        stage("parsing run.log")
        time.sleep(0.1)
    out = tty.getvalue()
    assert "oompost: analysing — parsing run.log…" in out
    assert out.endswith("\r\x1b[2K")                         # the line is erased at the end


def test_no_progress_escape_codes_through_the_runner(tmp_path):
    r = run("analyze", str(LEAK), "-o", str(tmp_path / "o"), "--format", "json")
    assert r.exit_code == 0 and "\x1b" not in r.output


def test_redact_covers_file_and_directory_names(tmp_path):
    job = tmp_path / "alice-llama-secretproj"
    job.mkdir()
    (job / "alice_train_0412.log").write_text((LEAK / "run.log").read_text())
    (job / "run.log").write_text((LEAK / "run.log").read_text())
    out = tmp_path / "o"
    r = run("analyze", str(job), "-o", str(out), "--redact", "-q")
    assert r.exit_code == 0, r.output
    for name in ("report.md", "report.json", "report.html"):
        text = (out / name).read_text()
        assert "alice" not in text and "secretproj" not in text, name
    data = json.loads((out / "report.json").read_text())
    paths = sorted(i["path"] for i in data["inputs"])
    assert paths == ["<dir-1>/<file-1>.log", "<dir-1>/run.log"]         # generic names kept, so it still reads


def test_terminal_lines_are_cut_between_words():
    from oompost.render import clip

    text = "the offload_param already in the config takes effect (it was ignored at stage 2)"
    out = clip(text, 40)
    assert len(out) <= 40 and out.endswith("…")
    assert text.startswith(out[:-1]) and text[len(out) - 1] == " "        # the cut falls on a space
    assert clip("x" * 100, 10) == "x" * 9 + "…"                           # one long token: cut, said so


# https://github.com/speechbrain/speechbrain/issues/1506 (tests/corpus/speechbrain__speechbrain__1506): the
# posted log opens with a printed dict (a census of live tensors), which is not JSON
CENSUS_HEAD = ('{\n    "<class \'torch.Tensor\'> torch.Size([128, 128, 3, 3])": 2,\n'
               '    "<class \'torch.Tensor\'> torch.Size([128])": 4,\n')
OOM_LINE = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
            "capacity; 77.13 GiB already allocated; 307.31 MiB free; 78.21 GiB reserved in total by PyTorch)\n")


def test_a_log_that_opens_like_json_is_read_as_text(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(CENSUS_HEAD + OOM_LINE)
    r = oompost.analyze([str(log)])
    assert r.oom is not None and r.oom.requested_bytes == 2 * 2**30
    assert r.cause != "unknown"


def test_broken_json_is_read_as_text_and_says_why(tmp_path):
    # a truncated ds_config.json: nothing is lost, and the warning names the JSON error
    bad = tmp_path / "ds_config.json"
    bad.write_text('{"train_batch_size": ')
    res = CliRunner().invoke(cli, ["analyze", str(bad), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0
    assert "not valid JSON" in res.output and "read as text" in res.output
