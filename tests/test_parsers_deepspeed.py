"""DeepSpeed stdout across versions (excerpts verbatim from
shared/reference/deepspeed.md and from our 0.19.8 captures in sample_logs/)."""

from __future__ import annotations

from pathlib import Path

from oompost.model import ConfigIssue, FailureKind
from oompost.parsers import parse_paths, parse_text
from oompost.units import GiB

SAMPLES = Path(__file__).parent.parent / "sample_logs"

# issue #3160 (v0.8.2): see_memory_usage through logger.info, then the host line
SEE_MEMORY_OLD = """\
[2023-04-07 13:08:55,468] [INFO] [utils.py:829:see_memory_usage] Before initializing optimizer states
[2023-04-07 13:08:55,469] [INFO] [utils.py:830:see_memory_usage] MA 11.76 GB         Max_MA 11.76 GB         CA 11.77 GB         Max_CA 12 GB 
[2023-04-07 13:08:55,469] [INFO] [utils.py:838:see_memory_usage] CPU Virtual Memory:  used = 28.43 GB, percent = 22.6%
"""
# ≥ 0.18.3: bare prints
SEE_MEMORY_NEW = """\
Before initializing optimizer states
MA 11.76 GB         Max_MA 11.76 GB         CA 11.77 GB         Max_CA 12 GB 
CPU Virtual Memory:  used = 28.43 GB, percent = 22.6%
"""
# DeepSpeedExamples #186 (v0.6.5)
FLUSH = ("[2022-07-13 21:09:13,651] [WARNING] [stage3.py:2391:step] 2 pytorch allocator cache flushes since last step. "
         "this happens when there is high memory pressure and is detrimental to performance.")
THROUGHPUT = "[Rank 0] epoch=0/micro_step=50/global_step=50, RunningAvgSamplesPerSec=8.1, CurrSamplesPerSec=8.58, " \
             "MemAllocated=0.93GB, MaxMemAllocated=12.76GB"
CREATING = "[2023-04-07 13:08:40,000] [INFO] [logging.py:96:log_dist] [Rank 0] Creating torch.bfloat16 ZeRO stage 2 optimizer"
VERSION = "[2023-04-07 13:08:30,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.8.2+db15ef57, " \
          "git-hash=db15ef57, git-branch=HEAD"


def test_see_memory_usage_old_and_new_dialects_agree():
    for text in (SEE_MEMORY_OLD, SEE_MEMORY_NEW):
        ev = parse_text(text)
        (r,) = ev.memory
        assert r.label == "Before initializing optimizer states"
        assert r.allocated == int(11.76 * GiB)
        assert r.max_reserved == 12 * GiB          # Max_CA is printed as an integer
        assert abs(ev.fact_value("host.total_bytes") - 28.43 * GiB * 100 / 22.6) < GiB


def test_cache_flushes_version_and_stage():
    ev = parse_text("\n".join([FLUSH, CREATING, VERSION]))
    assert ev.fact_value("deepspeed.cache_flushes") == 2
    assert ev.fact_value("deepspeed.zero_stage") == 2
    assert ev.fact_value("deepspeed.dtype") == "bfloat16"
    assert ev.fact_value("deepspeed.version") == "0.8.2+db15ef57"


def test_throughput_line_is_a_step_reading():
    (r,) = parse_text(THROUGHPUT).memory
    assert r.step == 50 and r.max_allocated == int(12.76 * GiB)


def test_engine_config_dump_and_json_block_from_a_real_0_19_8_log():
    ev = parse_paths([str(SAMPLES / "zero3_offload_activations_a100_40g/run.log")])
    logged = [c for c in ev.ds_configs if c.origin == "log"]
    # the engine's multi-line `json = {...}` dump parsed as JSON
    assert any(c.config.get("zero_optimization", {}).get("stage") == 3 for c in logged)
    assert ev.fact_value("deepspeed.zero_stage") == 3
    assert ev.fact_value("deepspeed.reduce_bucket_size") == 500_000_000
    zc = ev.fact("deepspeed.effective.zero_config")
    assert zc is not None and "offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu'" in zc.value


def test_modern_warning_level_log_still_yields_the_launcher_facts():
    ev = parse_paths([str(SAMPLES / "capacity_zero2_offload_7b_3090/run.log")])
    assert ev.fact_value("world_size") == 1
    assert [e.exitcode for e in ev.exits] == [1]


def test_truncated_json_dump_is_a_warning_not_a_crash():
    ev = parse_text("[2026-12-02 15:05:05,673] [INFO] [config.py:664:print_user_config]   json = {\n"
                    '    "train_micro_batch_size_per_gpu": 2,\n')
    assert not ev.ds_configs
    assert any("closing brace" in w.message for w in ev.warnings)


# deepspeed.md §config traps, verified on 0.19.8: a typo inside zero_optimization
EXTRA_FORBIDDEN = """\
Traceback (most recent call last):
  File "train.py", line 12, in <module>
    engine, *_ = deepspeed.initialize(model=model, config=cfg)
pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig
stage3_prefetch_bucket
  Extra inputs are not permitted [type=extra_forbidden, input_value=1000, input_type=int]
"""


def _config_failure(ev):
    (f,) = [f for f in ev.failures if f.kind is FailureKind.CONFIG_VALIDATION]
    return f


def test_config_errors_name_key_and_values_in_real_0_19_8_logs():
    f = _config_failure(parse_paths([str(SAMPLES / "config_error_prefetch_float/run.log")]))
    assert f.config == ConfigIssue(key="zero_optimization.stage3_prefetch_bucket_size",
                                   error_type="int_from_float", input_value="15099494.4")
    f = _config_failure(parse_paths([str(SAMPLES / "config_error_batch_mismatch/run.log")]))
    assert f.config == ConfigIssue(key="train_batch_size", batch=(32, 4, 4, 1.0))
    f = _config_failure(parse_text(EXTRA_FORBIDDEN))
    assert f.config == ConfigIssue(key="zero_optimization.stage3_prefetch_bucket", error_type="extra_forbidden",
                                   input_value="1000")


def test_engine_zero_config_repr_yields_offload_devices():
    ev = parse_paths([str(SAMPLES / "zero3_offload_activations_a100_40g/run.log")])
    assert ev.fact_value("deepspeed.offload_param") == "cpu"
    assert ev.fact_value("deepspeed.offload_optimizer") == "cpu"
