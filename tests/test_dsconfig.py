"""oompost.dsconfig and `oompost check`: DeepSpeed's own verdict plus lint.

The configs are real ones: the HF docs' ZeRO-3 template with "auto" values,
the DeepSpeed #6525 float prefetch size, and the usual ZeRO-2 mistakes.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oompost.commands.check import check, render_text
from oompost.dsconfig import (
    LintMessage,
    ValidationOutcome,
    check_config,
    lint,
    static_tables,
    validate_with_deepspeed,
)
from oompost.dsconfig import keys as K
from oompost.dsconfig import validate as validate_mod
from oompost.dsconfig.lint import CheckResult, _reconcile

needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed not installed")

BATCH_TEXT = ("Check batch related parameters. train_batch_size is not equal to "
              "micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 4 * 2")

# The ZeRO-3 template from the HF Trainer DeepSpeed docs.
HF_ZERO3 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                               "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True},
        "overlap_comm": True,
        "contiguous_gradients": True,
        "sub_group_size": 1e9,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
}

# What transformers < 4.45 produced from that template for a hidden_size-4096 model (DeepSpeed #6525).
ISSUE_6525 = {
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": 1,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 16777216,
                          "stage3_prefetch_bucket_size": 15099494.4,
                          "stage3_param_persistence_threshold": 40960},
}

ZERO2_OFFLOAD_PARAM = {
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                          "offload_param": {"device": "cpu", "pin_memory": True}},
}

BATCH_MISMATCH = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}

TYPO = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket": 50000000}}

DEPRECATED = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "cpu_offload": True}}

HUGE_BUCKET = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
               "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 2e9}}


def _codes(messages: tuple[LintMessage, ...] | list[LintMessage]) -> list[str]:
    return [m.code for m in messages]


def _only(messages: tuple[LintMessage, ...], code: str, key: str | None = None) -> LintMessage:
    hits = [m for m in messages if m.code == code and (key is None or m.key == key)]
    assert len(hits) == 1, f"expected one {code} {key or ''}, got {_codes(messages)}"
    return hits[0]


def _message_column(table: str) -> str:
    """The text of the table's MESSAGE column, unwrapped."""
    lines = table.splitlines()
    header = next(line for line in lines if line.startswith("SEVERITY"))
    start = header.index("MESSAGE")
    return " ".join(line[start:].strip() for line in lines[lines.index(header) + 2:] if len(line) > start)


def _write(tmp_path: Path, cfg: dict, name: str = "ds_config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


# ------------------------------------------------------------ packaging / tables


def test_importing_dsconfig_does_not_import_deepspeed() -> None:
    code = ("import sys, oompost.dsconfig, oompost.commands.check; "
            "print('deepspeed' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@needs_deepspeed
def test_deepspeed_loads_quietly_and_leaves_no_env_behind() -> None:
    code = ("import os, oompost.dsconfig.validate as v; ds = v.load_deepspeed(); "
            "print(ds is not None, 'DS_ACCELERATOR' in os.environ)")
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert run.stdout.split() == ["True", "False"]
    assert "WARNING" not in run.stdout + run.stderr


@needs_deepspeed
def test_static_zero_table_matches_installed_deepspeed() -> None:
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    static = static_tables()
    fields = DeepSpeedZeroConfig.model_fields
    assert set(static.zero) == set(fields)
    assert dict(static.zero_aliases) == {f.alias: n for n, f in fields.items() if f.alias}
    installed = K.fields_from_model(DeepSpeedZeroConfig, static.zero)
    for name, spec in static.zero.items():
        assert spec.default == installed[name].default, name
        assert spec.kind == installed[name].kind, name
    deprecated = {n for n, f in fields.items()
                  if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("deprecated")}
    assert {n for n, s in static.zero.items() if s.deprecated} == deprecated


@needs_deepspeed
def test_static_section_tables_match_installed_deepspeed() -> None:
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime import precision_config
    from deepspeed.runtime.zero import offload_config

    static = static_tables()
    pairs = [(static.offload_param, offload_config.DeepSpeedZeroOffloadParamConfig),
             (static.offload_optimizer, offload_config.DeepSpeedZeroOffloadOptimizerConfig),
             (static.fp16, precision_config.DeepSpeedFP16Config),
             (static.bf16, precision_config.DeepSpeedBF16Config)]
    for table, model in pairs:
        installed = K.fields_from_model(model, table)
        assert set(table) == set(installed), model.__name__
        assert {n: s.default for n, s in table.items()} == {n: s.default for n, s in installed.items()}
    assert set(static.removed_top_level) == set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS)
    assert set(static.removed_zero) == set(ds_config._REMOVED_ZERO_CONFIG_KEYS)
    tables = validate_mod.installed_key_tables()
    assert tables is not None and tables.source == "installed"
    assert tables.top_level <= static.top_level, tables.top_level - static.top_level


def test_docs_defaults_that_differ_from_code_are_recorded() -> None:
    zero = static_tables().zero
    assert (zero["prefetch_bucket_size"].default, zero["prefetch_bucket_size"].docs_default) == (50_000_000,
                                                                                                 500_000_000)
    assert (zero["sub_group_size"].default, zero["sub_group_size"].docs_default) == (10**9, 10**12)
    assert zero["overlap_comm"].default is None and zero["overlap_comm"].docs_default is False


# ------------------------------------------------------------ the issue's configs


@needs_deepspeed
def test_hf_auto_config_as_is_is_rejected_and_each_auto_named() -> None:
    result = check_config(copy.deepcopy(HF_ZERO3))
    assert not result.validation.ok
    assert result.validation.errors[0].startswith("train_batch_size: 'auto' is not a number (TypeError")
    assert not result.ok
    autos = {m.key: m for m in result.messages if m.code == "DSC030"}
    assert {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
            "gradient_clipping", "optimizer.params.lr", "zero_optimization.stage3_prefetch_bucket_size"} <= set(autos)
    assert autos["train_micro_batch_size_per_gpu"].severity == "error"
    assert "per_device_train_batch_size" in autos["train_micro_batch_size_per_gpu"].message
    assert "fp32" in autos["bf16.enabled"].effect                 # "auto" dropped = fp32 training
    assert "50,000,000" in autos["zero_optimization.stage3_prefetch_bucket_size"].effect


@needs_deepspeed
def test_hf_auto_config_under_hf_passes_and_only_unfilled_autos_remain() -> None:
    cfg = copy.deepcopy(HF_ZERO3)
    cfg["zero_optimization"]["offload_param"]["device"] = "auto"     # only Accelerate fills this one
    result = check_config(cfg, world_size=8, hf_auto=True)
    assert result.validation.ok, result.validation.errors
    assert result.ok
    autos = [m for m in result.messages if m.code == "DSC030"]
    assert [m.key for m in autos] == ["zero_optimization.offload_param.device"]
    assert autos[0].severity == "info" and "offload_param_device" in autos[0].message


@needs_deepspeed
def test_issue_6525_fractional_prefetch_size_rejected_by_deepspeed_with_key() -> None:
    outcome = validate_with_deepspeed(ISSUE_6525, world_size=1)
    assert outcome.available and not outcome.ok
    assert outcome.error_keys == ("zero_optimization.stage3_prefetch_bucket_size",)
    assert outcome.errors[0].startswith("zero_optimization.stage3_prefetch_bucket_size: Input should be a valid "
                                        "integer, got a number with a fractional part")
    assert "15099494.4" in outcome.errors[0] and "int_from_float" in outcome.errors[0]
    message = _only(lint(ISSUE_6525), "DSC031")
    assert message.severity == "error"
    assert "0.9 × 4096²" in message.message
    assert message.fix == "write an integer: 15099494"


@needs_deepspeed
def test_offload_param_at_zero2_is_accepted_by_deepspeed_but_flagged() -> None:
    assert validate_with_deepspeed(ZERO2_OFFLOAD_PARAM, 8).ok        # DeepSpeed says nothing
    result = check_config(ZERO2_OFFLOAD_PARAM, world_size=8)
    message = _only(result.messages, "DSC020")
    assert (message.severity, message.key) == ("warning", "zero_optimization.offload_param")
    assert "stay on the GPU" in message.effect and "stage to 3" in message.fix
    assert result.ok                                                  # a warning, not an error


@needs_deepspeed
def test_batch_mismatch_for_world_size_2_surfaces_deepspeeds_assertion() -> None:
    outcome = validate_with_deepspeed(BATCH_MISMATCH, world_size=2)
    assert outcome.errors == (f"train_batch_size: {BATCH_TEXT}",)
    assert validate_with_deepspeed(BATCH_MISMATCH, world_size=1).ok  # 8 = 2 * 4 * 1
    result = check_config(BATCH_MISMATCH, world_size=2)
    message = _only(result.messages, "DSC040")
    assert message.message.startswith(BATCH_TEXT) and "agrees" in message.message
    assert "train_batch_size = 16" in message.fix and "gradient_accumulation_steps = 2" in message.fix
    assert not result.ok


def test_batch_without_world_size_says_which_world_size_it_implies() -> None:
    message = _only(lint(BATCH_MISMATCH), "DSC042")
    assert "only valid on 1 GPU" in message.message
    bad = {**BATCH_MISMATCH, "train_batch_size": 7}
    assert _only(lint(bad), "DSC040").severity == "error"         # 7 is no multiple of 2 × 4


@needs_deepspeed
def test_typo_gets_did_you_mean_and_deepspeeds_rejection() -> None:
    result = check_config(TYPO, world_size=1)
    message = _only(result.messages, "DSC002")
    assert message.key == "zero_optimization.stage3_prefetch_bucket"
    assert "did you mean stage3_prefetch_bucket_size?" in message.message
    assert "Extra inputs are not permitted" in message.message      # DeepSpeed's words merged in
    assert message.fix == "rename it to stage3_prefetch_bucket_size"
    assert not result.ok and "DSC090" not in _codes(result.messages)  # reported once, on the key


@needs_deepspeed
def test_typo_with_auto_value_vanishes_silently() -> None:
    cfg = {**TYPO, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket": "auto"}}
    assert validate_with_deepspeed(cfg).ok                          # DeepSpeed drops "auto" keys first
    assert _only(lint(cfg), "DSC002").severity == "warning"


@needs_deepspeed
def test_deprecated_cpu_offload(capfd: pytest.CaptureFixture[str]) -> None:
    result = check_config(DEPRECATED)
    message = _only(result.messages, "DSC010")
    assert message.key == "zero_optimization.cpu_offload" and "offload_optimizer" in message.fix
    assert result.validation.ok and result.ok
    out, err = capfd.readouterr()
    assert "deprecated" not in out + err                            # DeepSpeed's WARNING line was muted
    both = {"train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": 2, "cpu_offload": True, "offload_optimizer": {"device": "cpu"}}}
    result = check_config(both)
    message = _only(result.messages, "DSC011")
    assert "Cannot provide deprecated parameter 'cpu_offload'" in message.message
    assert not result.ok


def test_huge_reduce_bucket_bf16_overlap_costs_8_gb() -> None:
    message = _only(lint(HUGE_BUCKET), "DSC050")
    assert message.key == "zero_optimization.reduce_bucket_size"
    assert message.bytes == 8_000_000_000
    assert "8.0 GB (7.45 GiB)" in message.message and "overlap_comm" in message.message
    # DeepSpeed's default, the size `oompost analyze`'s rerun plan uses too
    assert message.severity == "warning" and "500,000,000" in message.fix
    single = copy.deepcopy(HUGE_BUCKET)
    single["zero_optimization"]["overlap_comm"] = False
    assert _only(lint(single), "DSC050").bytes == 4_000_000_000
    stage3 = copy.deepcopy(HUGE_BUCKET)
    stage3["zero_optimization"] = {"stage": 3, "reduce_bucket_size": 2e9}   # overlap on, one IPG buffer
    assert _only(lint(stage3), "DSC050", "zero_optimization.reduce_bucket_size").bytes == 4_000_000_000
    assert _only(lint(HUGE_BUCKET, dtype_bytes=4), "DSC050").bytes == 16_000_000_000


def test_default_buckets_below_threshold_say_nothing() -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    assert "DSC050" not in _codes(lint(cfg))                        # 5e8 × 2 B = 0.93 GiB, one buffer
    fp32 = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    message = _only(lint(fp32), "DSC050")                           # fp32: 2.0 GB, DeepSpeed's default
    assert message.severity == "info" and message.bytes == 2_000_000_000


def test_allgather_bucket_size_is_inert_but_must_be_even() -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "allgather_bucket_size": 5e8}}
    assert _only(lint(cfg), "DSC051").severity == "info"
    odd = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1, "allgather_bucket_size": 500000001}}
    assert _only(lint(odd), "DSC052").severity == "error"


# ------------------------------------------------------------ more lint


def test_unknown_top_level_key_and_not_deepspeed_key() -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "steps_per_prnt": 10, "gradient_checkpointing": True,
           "stage3_max_live_parameters": 1000, "_comment": "ignored"}
    messages = lint(cfg)
    assert "did you mean steps_per_print?" in _only(messages, "DSC001", "steps_per_prnt").message
    assert "gradient_checkpointing_enable" in _only(messages, "DSC001", "gradient_checkpointing").fix
    assert "zero_optimization" in _only(messages, "DSC001", "stage3_max_live_parameters").fix
    assert all(m.key != "_comment" for m in messages)


def test_stage_only_keys_and_partial_offload() -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1,
           "zero_optimization": {"stage": 1, "stage3_max_live_parameters": 1000,
                                 "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}
    messages = lint(cfg)
    assert _only(messages, "DSC021").key == "zero_optimization.stage3_max_live_parameters"
    assert _only(messages, "DSC024").severity == "error"
    s3 = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "round_robin_gradients": True}}
    assert _only(lint(s3), "DSC022").key == "zero_optimization.round_robin_gradients"


@needs_deepspeed
def test_removed_feature_key_rejected_by_deepspeed() -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "amp": {"enabled": True}}
    result = check_config(cfg)
    message = _only(result.messages, "DSC005")
    assert message.key == "amp" and "Apex" in message.message and "DeepSpeedConfigError" in message.effect
    assert "DeepSpeed 0.19.8: DeepSpeedConfigError: NVIDIA Apex AMP integration has been removed" in message.message
    assert result.validation.error_keys == ("amp",)
    assert not result.ok


@needs_deepspeed
def test_validation_reports_more_than_the_first_error() -> None:
    cfg = {**BATCH_MISMATCH, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}
    outcome = validate_with_deepspeed(cfg, world_size=2)
    assert outcome.error_keys == ("zero_optimization.reduce_bucket_sise", "train_batch_size")
    assert cfg["zero_optimization"] == {"stage": 2, "reduce_bucket_sise": 5}   # caller's dict untouched


def test_reconcile_follows_deepspeeds_verdict() -> None:
    predicted = LintMessage("DSC002", "error", "zero_optimization.foo", "unknown zero_optimization key foo",
                            "rejected", "remove it")
    accepted = ValidationOutcome(available=True, version="9.9.9", ok=True)
    (m,) = _reconcile([predicted], accepted)
    assert m.severity == "warning" and "DeepSpeed 9.9.9 accepts it" in m.effect
    rejected = ValidationOutcome(available=True, version="9.9.9", ok=False,
                                 errors=("train_batch_size: boom",), error_keys=("train_batch_size",))
    messages = _reconcile([predicted], rejected)
    assert [(x.code, x.severity) for x in messages] == [("DSC002", "error"), ("DSC090", "error")]


def test_check_works_without_deepspeed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_mod, "load_deepspeed", lambda: None)
    result = check_config(TYPO)
    assert not result.validation.available and result.tables == "static"
    assert _only(result.messages, "DSC002").severity == "error"     # the static prediction stands
    assert "DSC091" in _codes(result.messages) and not result.ok


@needs_deepspeed
def test_run_version_differs() -> None:
    result = check_config(DEPRECATED, run_version="0.8.2+db15ef57")
    message = _only(result.messages, "DSC070")
    assert "the run used 0.8.2+db15ef57" in message.message and "deepspeed==0.8.2" in message.fix
    assert "DSC070" not in _codes(check_config(DEPRECATED, run_version="0.19.8").messages)


def test_duplicate_keys_in_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_mod, "load_deepspeed", lambda: None)
    path = tmp_path / "dup.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "stage": 3}}')
    message = _only(check_config(path).messages, "DSC007")
    assert message.key == "stage" and "Duplicate keys" in message.effect


# ------------------------------------------------------------ the command


@needs_deepspeed
def test_cli_batch_mismatch_exit_1_and_text(tmp_path: Path) -> None:
    path = _write(tmp_path, BATCH_MISMATCH)
    result = CliRunner().invoke(check, [str(path), "--world-size", "2"])
    assert result.exit_code == 5, result.output
    assert "DeepSpeed 0.19.8 rejects it on 2 GPUs" in result.output and "FAIL" in result.output
    assert BATCH_TEXT in _message_column(result.output)
    ok = CliRunner().invoke(check, [str(path), "--world-size", "1"])
    assert ok.exit_code == 0, ok.output


@needs_deepspeed
def test_cli_json_format(tmp_path: Path) -> None:
    path = _write(tmp_path, HUGE_BUCKET)
    result = CliRunner().invoke(check, [str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "oompost.check/1" and doc["ok"] is True and doc["deepspeed"]["ok"] is True
    (bucket,) = [m for m in doc["messages"] if m["code"] == "DSC050"]
    assert bucket["bytes"] == 8_000_000_000 and bucket["key"] == "zero_optimization.reduce_bucket_size"


@needs_deepspeed
def test_cli_hf_flag(tmp_path: Path) -> None:
    path = _write(tmp_path, HF_ZERO3)
    assert CliRunner().invoke(check, [str(path)]).exit_code == 5
    assert CliRunner().invoke(check, [str(path), "--hf", "-n", "4"]).exit_code == 0


@pytest.mark.parametrize("content, reason", [
    (None, "no such file"),
    (b'{"train_batch_size": ', "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b"\xff\xfe\x00", "not a text file"),
])
def test_cli_unreadable_input_exit_3(tmp_path: Path, content: bytes | None, reason: str) -> None:
    path = tmp_path / "ds_config.json"
    if content is not None:
        path.write_bytes(content)
    result = CliRunner().invoke(check, [str(path)])
    assert result.exit_code == 3
    assert reason in result.stderr and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)


def test_render_text_has_one_row_per_message() -> None:
    messages = lint(HUGE_BUCKET) + lint(ZERO2_OFFLOAD_PARAM)
    outcome = ValidationOutcome(available=True, version="0.19.8", ok=True, world_size=1)
    result = CheckResult(path="x.json", validation=outcome, messages=messages, ok=True)
    text = render_text(result, width=100)
    rows = [line for line in text.splitlines() if line.startswith(("ERROR", "WARN", "info"))]
    assert len(rows) == len(messages)
    assert "zero_optimization.reduce_bucket_size" in text and "effect:" in text and "fix:" in text
