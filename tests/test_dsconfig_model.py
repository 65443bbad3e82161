"""The ds_config read once into one typed model (issue 6 §4) and `oompost check`'s
behaviour around it (issue 7): hjson accepted like DeepSpeed, stated vs defaulted
values, no guessed world size, the same bucket size as `analyze`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oompost.cli import cli
from oompost.dsconfig.lint import lint
from oompost.dsconfig.model import load_ds_config, parse_ds_config, recommended_bucket
from oompost.errors import InputError

SAMPLES = Path(__file__).parent.parent / "sample_logs"

HJSON = """{
  // written for 8 GPUs, with comments and trailing commas as DeepSpeed allows
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true},
  "zero_optimization": {
    "stage": 2,   # hash comments too
    "reduce_bucket_size": 5e8,
  },
}
"""


def test_hjson_is_read_like_deepspeed_reads_it(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text(HJSON)
    model, dups = load_ds_config(p)
    assert dups == ()
    assert model.zero_stage.value == 2 and model.zero_stage.stated
    assert model.reduce_bucket_size.value == 500_000_000 and model.reduce_bucket_size.stated
    assert model.precision.value == "bf16" and model.precision.stated


def test_duplicates_and_garbage_are_named(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text('{"zero_optimization": {"stage": 2}, "zero_optimization": {"stage": 3}}')
    _, dups = load_ds_config(p)
    assert dups == ("zero_optimization",)
    p.write_text("[1, 2]")
    with pytest.raises(InputError, match="must be a JSON object"):
        load_ds_config(p)
    with pytest.raises(InputError, match="no such file"):
        load_ds_config(tmp_path / "missing.json")


def test_stated_and_defaulted_values_are_kept_apart():
    m = parse_ds_config({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}})
    assert m.precision.value == "fp32" and not m.precision.stated          # DeepSpeed's default, not a fact
    assert m.precision.describe() == "fp32 (DeepSpeed default)"
    assert m.overlap_comm.value is True and not m.overlap_comm.stated       # on by default at stage 3
    assert m.micro_batch.describe() == "2"
    auto = parse_ds_config({"bf16": {"enabled": "auto"}})
    assert auto.precision.auto and auto.precision.value == "bf16" and "assumed" in auto.precision.describe()


def test_the_readers_agree_when_no_precision_section_is_present(tmp_path):
    """Setup, lint and the estimate command read the same model: fp32 when the file has no bf16/fp16."""
    from oompost.analysis.setup import build_setup
    from oompost.model import DsConfigSeen, Evidence, SourceRef

    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    ev = Evidence(ds_configs=(DsConfigSeen(cfg, SourceRef("ds.json", None, ""), "file"),))
    assert build_setup(ev).dtype == "fp32"
    assert "fp32" in [m for m in lint(cfg) if m.code == "DSC050"][0].message
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(cfg))
    r = CliRunner().invoke(cli, ["estimate", "--model", "7b", "--ds-config", str(p), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["setup"]["dtype"] == "fp32"


def test_check_does_not_guess_the_world_size(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text(HJSON)
    r = CliRunner().invoke(cli, ["check", str(p)])
    head = r.output.splitlines()[0]
    assert "if run on 8 GPUs" in head and "--world-size" in head
    r = CliRunner().invoke(cli, ["check", str(p), "--world-size", "4"])
    assert r.exit_code == 5 and "rejects it on 4 GPUs" in r.output.splitlines()[0]
    r = CliRunner().invoke(cli, ["check", str(p), "--world-size", "8", "--format", "json"])
    data = json.loads(r.output)
    assert r.exit_code == 0 and data["world_size"] == 8 and data["allowed_world_sizes"] == [8]


def test_allowed_world_sizes_without_accumulation():
    m = parse_ds_config({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})
    assert m.allowed_world_sizes(64) == (1, 2, 4, 8, 16)
    assert parse_ds_config({"train_micro_batch_size_per_gpu": 4}).allowed_world_sizes() is None


def test_check_and_analyze_suggest_the_same_bucket_size():
    import oompost

    cfg_path = SAMPLES / "comm_buffer_zero2_buckets" / "ds_config.json"
    cfg = json.loads(cfg_path.read_text())
    (msg,) = [m for m in lint(cfg) if m.code == "DSC050" and m.key.endswith("reduce_bucket_size")]
    report = oompost.analyze(SAMPLES / "comm_buffer_zero2_buckets")
    planned = report.rerun.ds_config["zero_optimization"]["reduce_bucket_size"]
    assert f"{planned:,}" in msg.fix
    assert planned == recommended_bucket(int(cfg["zero_optimization"]["reduce_bucket_size"]), 4)
