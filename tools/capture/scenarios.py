"""The scenarios in sample_logs/: what each run is, how it is launched, the
memory cap it runs under, and the verdict it is built to produce (which
becomes expected.json).  run.py executes them on the GPU machine.

A scenario is a real run of tools/capture/*.py under a real launcher
(plain python, torchrun or the DeepSpeed launcher).  Counterfactual runs (the
same workload with one setting changed) prove the cause; they are recorded in
the scenario's capture.json, not kept as separate samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GiB = 1024**3


@dataclass
class Run:
    """One process tree to start."""

    launcher: str                     # "python" | "torchrun" | "deepspeed" | "bash"
    script: str                       # file in tools/capture (or a bash command for launcher="bash")
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ds_config: dict[str, Any] | None = None   # written to the job dir as ds_config.json and passed as --deepspeed
    gpu_gib: float = 24.0             # scheduling budget (the cap, or the expected peak when uncapped)
    host_gib: float = 8.0
    timeout: int = 240
    capture: bool = True              # pass --oompost_capture (snapshot at the OOM)
    max_entries: int = 15000
    exclusive: bool = False           # fills the whole card: run alone
    nproc: int = 1                    # processes per node (torchrun / accelerate launchers)


@dataclass
class Scenario:
    name: str
    description: str
    expected: dict[str, Any]          # {"cause":..., "sub_cause":..., "why": ...}
    run: Run
    counterfactuals: list[tuple[str, Run]] = field(default_factory=list)
    priority: int = 50
    fragmentation_search: bool = False
    search_variants: list[list[str]] | None = None   # argument lists the fragmentation search tries (None: run.py's)


# --------------------------------------------------------------- ds configs

def ds_zero2_offload_7b() -> dict:
    # The seed thread's setting: ZeRO-2 + offload_optimizer, and offload_param added on the forum's advice.
    return {
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": True,
            "reduce_scatter": True, "reduce_bucket_size": 2e8, "contiguous_gradients": True},
        "zero_force_ds_cpu_optimizer": False, "gradient_clipping": 1.0, "steps_per_print": 1,
        "wall_clock_breakdown": False}


def ds_zero2(reduce_bucket: float = 5e8, allgather_bucket: float = 5e8, micro: int = 2, gas: int = 4,
             log_info: bool = False, offload_optimizer: bool = False) -> dict:
    cfg: dict = {
        "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": gas,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_scatter": True, "reduce_bucket_size": reduce_bucket,
                              "allgather_bucket_size": allgather_bucket},
        "gradient_clipping": 1.0, "steps_per_print": 10}
    if offload_optimizer:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        cfg["zero_force_ds_cpu_optimizer"] = False
    if log_info:
        cfg["log_level"] = "info"
    return cfg


def ds_zero3_offload(micro: int = 16, gas: int = 1, with_ckpt_section: bool = True, log_info: bool = True) -> dict:
    cfg: dict = {
        "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": gas,
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "overlap_comm": True, "contiguous_gradients": True, "sub_group_size": 1e9,
            "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e7,
            "stage3_param_persistence_threshold": 1e5, "stage3_max_live_parameters": 1e9,
            "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
        "zero_force_ds_cpu_optimizer": False, "gradient_clipping": 1.0, "steps_per_print": 1}
    if with_ckpt_section:
        # Copied from a tutorial: this section only configures deepspeed.checkpointing; it turns nothing on.
        cfg["activation_checkpointing"] = {"partition_activations": True, "contiguous_memory_optimization": True,
                                           "cpu_checkpointing": False}
    if log_info:
        cfg["log_level"] = "info"
    return cfg


def ds_hf_auto_zero3() -> dict:
    # The HF docs' ZeRO-3 template: "auto" everywhere, filled in by the Trainer.
    return {
        "bf16": {"enabled": "auto"},
        "zero_optimization": {
            "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "overlap_comm": True, "contiguous_gradients": True, "sub_group_size": 1e9,
            "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
            "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 1,
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        "zero_force_ds_cpu_optimizer": False, "wall_clock_breakdown": False}


# --------------------------------------------------------------- scenarios

_TRAIN_COMMON = ["--max_steps", "20"]


def scenarios() -> list[Scenario]:
    s: list[Scenario] = []

    s.append(Scenario(
        "capacity_zero2_offload_7b_3090",
        "The seed thread: Llama-2-7B full fine-tune, ZeRO-2 + offload_optimizer (+ offload_param, which ZeRO-2 "
        "ignores), micro-batch 1, on a 24 GiB card. deepspeed.initialize holds the module plus its flattened "
        "16-bit copy (~4 bytes/param) and cannot fit.",
        {"cause": "capacity", "sub_cause": None,
         "why": "7B bf16 weights (12.6 GiB) plus ZeRO-2's flat 16-bit copy at start-up exceed the 23.2 GiB allowed"},
        Run("deepspeed", "train.py", ["--model", "llama2-7b", "--init_device", "cuda", "--emulate_card", "rtx3090",
                                      "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "8",
                                      "--max_seq_length", "1024"] + _TRAIN_COMMON,
            ds_config=ds_zero2_offload_7b(), gpu_gib=23.5, host_gib=16, timeout=300),
        priority=10))

    s.append(Scenario(
        "capacity_zero2_1.5b_3090",
        "Qwen2.5-1.5B full fine-tune with ZeRO-2 and no offload on one 24 GiB card: fp32 master weights, Adam "
        "moments and fp32 gradients (~16 bytes/param) do not fit next to the bf16 weights.",
        {"cause": "capacity", "sub_cause": None,
         "why": "model states at world size 1 (~18 bytes/param = 26 GiB) exceed 23.2 GiB before any activation"},
        Run("deepspeed", "train.py", ["--model", "qwen2.5-1.5b", "--emulate_card", "rtx3090",
                                      "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4",
                                      "--max_seq_length", "1024"] + _TRAIN_COMMON,
            ds_config=ds_zero2(), gpu_gib=23.5, host_gib=12),
        priority=11))

    s.append(Scenario(
        "activation_spike_long_batch",
        "Plain PyTorch fine-tune of Qwen2.5-0.5B at micro-batch 4 x 512 tokens on a 24 GiB card; at step 6 one "
        "8192-token document pads the batch to 8192 tokens and the fp32 logits / loss no longer fit.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "five steps ran at ~6 GiB; the 4x8192 batch needs ~4x8192x151936 fp32 logits (19 GiB) in the loss"},
        Run("python", "train.py", ["--model", "qwen2.5-0.5b", "--emulate_card", "rtx3090",
                                   "--per_device_train_batch_size", "4", "--max_seq_length", "512",
                                   "--long_batch_at_step", "6", "--long_batch_length", "8192"] + _TRAIN_COMMON,
            gpu_gib=23.5, host_gib=6),
        priority=12))

    s.append(Scenario(
        "zero3_offload_activations_a100_40g",
        "The other seed thread: ZeRO-3 with optimizer and parameter offload, micro-batch 16 x 2048 tokens, "
        "no gradient checkpointing, on a 40 GiB A100; the config carries an activation_checkpointing section "
        "that turns nothing on. Offload works; activations do not fit.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "parameters and optimizer are on the CPU; the forward of 16x2048 tokens overflows 38.9 GiB"},
        Run("deepspeed", "train.py", ["--model", "qwen2.5-0.5b", "--zero_init", "--emulate_card", "a100-40g",
                                      "--per_device_train_batch_size", "16", "--max_seq_length", "2048"]
            + _TRAIN_COMMON, ds_config=ds_zero3_offload(), gpu_gib=39.5, host_gib=16, timeout=300),
        priority=13))

    s.append(Scenario(
        "hf_trainer_zero3_offload_a100_40g",
        "The same workload through the HuggingFace Trainer (custom compute_loss, ds_config with \"auto\" values, "
        "ZeRO-3 + both offloads, per_device_train_batch_size 16, 2048 tokens) on a 40 GiB A100.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states are offloaded; the 16x2048 forward/loss overflows the card"},
        Run("deepspeed", "hf_trainer.py", ["--model", "qwen2.5-0.5b", "--emulate_card", "a100-40g",
                                           "--max_seq_length", "2048", "--output_dir", "{job}/hf_out",
                                           "--per_device_train_batch_size", "16", "--max_steps", "20",
                                           "--bf16", "--logging_steps", "1", "--save_strategy", "no",
                                           "--report_to", "none", "--log_level", "info",
                                           "--dataloader_num_workers", "0"],
            ds_config=ds_hf_auto_zero3(), gpu_gib=39.5, host_gib=16, timeout=300),
        priority=14))

    s.append(Scenario(
        "comm_buffer_zero2_buckets",
        "ZeRO-2 fine-tune of Qwen2.5-0.5B on a 24 GiB card with reduce/allgather buckets of 4e9 elements "
        "copied from a large-model config; with overlap_comm the two bf16 reduce buffers (2 x 7.45 GiB) are "
        "allocated at the first backward and do not fit. The same run with the default 5e8 buckets completes.",
        # (a first capture at micro-batch 4 x 1024 tokens was discarded: it did not fit with default buckets either)
        {"cause": "comm_buffer", "sub_cause": None,
         "why": "the failing allocation is DeepSpeed's IPG reduce bucket (4e9 bf16 elements, x2 with overlap_comm)"},
        Run("deepspeed", "train.py", ["--model", "qwen2.5-0.5b", "--emulate_card", "rtx3090",
                                      "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2",
                                      "--max_seq_length", "512"] + _TRAIN_COMMON,
            ds_config=ds_zero2(reduce_bucket=4e9, allgather_bucket=4e9, micro=2, gas=2, log_info=True),
            gpu_gib=23.5, host_gib=8),
        counterfactuals=[("default buckets (reduce_bucket_size=5e8, allgather_bucket_size=5e8)",
                          Run("deepspeed", "train.py", ["--model", "qwen2.5-0.5b", "--emulate_card", "rtx3090",
                                                        "--per_device_train_batch_size", "2",
                                                        "--gradient_accumulation_steps", "2",
                                                        "--max_seq_length", "512"] + _TRAIN_COMMON,
                              ds_config=ds_zero2(micro=2, gas=2, log_info=True), gpu_gib=23.5, host_gib=8,
                              capture=False))],
        priority=15))

    s.append(Scenario(
        "leak_logits_kept_for_metrics",
        "Plain PyTorch loop that appends every step's logits (detached, still on the GPU) to a list for an "
        "end-of-epoch accuracy; allocated memory grows ~0.58 GiB per step until the 24 GiB card is full.",
        {"cause": "leak", "sub_cause": None,
         "why": "allocated memory at the end of each step rises monotonically from step 2 until the OOM"},
        Run("python", "train.py", ["--model", "qwen2.5-0.5b", "--emulate_card", "rtx3090",
                                   "--per_device_train_batch_size", "4", "--max_seq_length", "512",
                                   "--keep_logits_for_metrics", "--max_steps", "200"],
            gpu_gib=23.5, host_gib=6),
        priority=16))

    s.append(Scenario(
        "fragmentation_dynamic_padding",
        "Plain PyTorch fine-tune of Qwen2.5-0.5B with dynamic padding (batch lengths vary 128-2048 tokens); the "
        "AdamW state allocated after step 1 lands between activation blocks. The memory cap is set just above "
        "what the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "train.py", ["--model", "qwen2.5-0.5b", "--per_device_train_batch_size", "4",
                                   "--dynamic_padding", "--min_seq_length", "128", "--max_seq_length", "2048",
                                   "--max_steps", "30"], gpu_gib=45, host_gib=6, max_entries=30000),
        priority=5, fragmentation_search=True))

    s.append(Scenario(
        "nccl_comm_oom_full_gpu",
        "An RL rollout worker pre-allocates a KV-cache pool of mem_fraction_static=0.999 of the card, then the "
        "lazily created NCCL communicator cannot allocate its buffers at the first weight broadcast.",
        {"cause": "comm_buffer", "sub_cause": None,
         "why": "NCCL 'Cuda failure out of memory' at communicator creation; PyTorch holds nearly the whole card"},
        # (0.995 left 715 MiB free: enough for NCCL's one-rank communicator, so that first capture completed)
        Run("torchrun", "rollout_worker.py", ["--mem_fraction_static", "0.999"], gpu_gib=139, host_gib=6,
            capture=False, exclusive=True, timeout=180),
        counterfactuals=[
            ("mem_fraction_static=0.90", Run("torchrun", "rollout_worker.py", ["--mem_fraction_static", "0.90"],
                                             gpu_gib=139, capture=False, exclusive=True, timeout=180)),
],
        priority=90))

    s.append(Scenario(
        "nccl_watchdog_timeout",
        "Data-parallel loop where the rank stalls inside a GPU operation before the gradient all-reduce; the "
        "NCCL watchdog times out after 15 s and tears the process down (SIGABRT). No memory failure.",
        {"cause": "nccl_error", "sub_cause": None,
         "why": "a collective timeout (WorkNCCL ALLREDUCE) with no OOM on any rank"},
        Run("torchrun", "straggler.py", ["--timeout_s", "15", "--stall_at_step", "3"],
            env={"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"},
            gpu_gib=2, host_gib=4, capture=False, timeout=200),
        priority=20))

    s.append(Scenario(
        "config_error_prefetch_float",
        "ZeRO-3 config copied from an old HF example with stage3_prefetch_bucket_size = 0.9*4096*4096 = "
        "15099494.4; DeepSpeed >= 0.15 (pydantic v2) rejects the non-integral value at zero.Init.",
        {"cause": "config_error", "sub_cause": None,
         "why": "pydantic ValidationError: stage3_prefetch_bucket_size must be an integer"},
        Run("deepspeed", "train.py", ["--model", "qwen2.5-0.5b", "--zero_init", "--emulate_card", "a100-40g",
                                      "--per_device_train_batch_size", "4", "--max_seq_length", "1024"]
            + _TRAIN_COMMON,
            ds_config={**ds_zero3_offload(micro=4, with_ckpt_section=False, log_info=False),
                       "zero_optimization": {**ds_zero3_offload()["zero_optimization"],
                                             "stage3_prefetch_bucket_size": 15099494.4}},
            gpu_gib=4, host_gib=6),
        priority=21))

    s.append(Scenario(
        "config_error_batch_mismatch",
        "ZeRO-2 config with train_batch_size 32 while micro-batch 4 x accumulation 4 x 1 GPU = 16: DeepSpeed's "
        "batch assertion stops deepspeed.initialize.",
        {"cause": "config_error", "sub_cause": None,
         "why": "train_batch_size != micro x GAS x world size (32 != 4 x 4 x 1)"},
        Run("deepspeed", "train.py", ["--model", "qwen2.5-0.5b", "--emulate_card", "rtx3090",
                                      "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "4",
                                      "--max_seq_length", "512"] + _TRAIN_COMMON,
            ds_config={**ds_zero2(micro=4, gas=4), "train_batch_size": 32}, gpu_gib=4, host_gib=6),
        priority=22))

    s.append(Scenario(
        "zero3_without_zero_init_13b",
        "Llama-2-13B built on the CPU without deepspeed.zero.Init, then deepspeed.initialize with ZeRO-3 and "
        "offload on a 24 GiB card: the engine moves the whole unpartitioned module to the GPU first.",
        {"cause": "config_error", "sub_cause": None,
         "why": "ZeRO-3 without zero.Init: OOM in _configure_distributed_model's module.to(device); building "
                "the model under zero.Init (or from_pretrained with the HF DeepSpeed config) removes it"},
        Run("deepspeed", "train.py", ["--model", "llama2-13b", "--emulate_card", "rtx3090", "--skip_weight_init",
                                      "--per_device_train_batch_size", "1", "--max_seq_length", "1024"]
            + _TRAIN_COMMON,
            ds_config=ds_zero3_offload(micro=1, with_ckpt_section=False, log_info=False),
            gpu_gib=23.5, host_gib=36, timeout=420, env={"OMP_NUM_THREADS": "8"}),
        priority=60))

    s.append(Scenario(
        "host_oom_offload_cgroup",
        "ZeRO-2 with offload_optimizer for Qwen2.5-1.5B in a container limited to 10 GiB of host RAM: the "
        "pinned fp32 optimizer state (~16 bytes/param on the host) gets the rank killed by the OOM killer.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the rank exits with -9 (SIGKILL) and no CUDA traceback while offloaded optimizer state is built"},
        Run("bash", "cgroup_limit.sh", ["10G"], gpu_gib=12, host_gib=12, capture=False, timeout=240,
            ds_config=ds_zero2(micro=2, gas=4, offload_optimizer=True)),
        priority=70))

    # ---------------------------------------------------------------- config_error: another job holds the card
    g2l = ["python3", "{here}/plain_loop.py", "--model", "gpt2-large", "--batch_size", "8", "--seq_len", "1024",
           "--steps", "10"]
    s.append(Scenario(
        "config_error_gpu_held_by_another_process",
        "A plain loop fine-tuning a GPT-2-large-shaped model (fp32 weights, fp16 autocast, AdamW, 8 x 1024 "
        "tokens) started on a GPU where another process (gpu_hog.py, standing in for a forgotten notebook "
        "kernel or a second job) already holds 120 GiB of the 139.8 GiB card. No memory fraction: the card "
        "really is full. The same run on the card without the other process completes.",
        {"cause": "config_error", "sub_cause": None,
         "why": "the OOM message shows the card nearly full while this process holds a small part of it; "
                "the same command completes when the other process is not on the GPU"},
        Run("bash", "gpu_hog_run.sh", ["120"] + g2l + ["--oompost_capture", "{job}", "--max_entries", "15000"],
            gpu_gib=139, host_gib=8, capture=False, exclusive=True, timeout=200),
        counterfactuals=[("the same command on the card without the other process",
                          Run("python", "plain_loop.py", g2l[2:], gpu_gib=139, host_gib=8, capture=False,
                              exclusive=True, timeout=200))],
        priority=91))

    from scenarios_world import world_scenarios  # issue 6 §6: other architectures, drivers and caps

    s.extend(world_scenarios())
    return s


# --------------------------------------------------------------- estimator matrix

MATRIX_MODELS = ("qwen2.5-0.5b", "llama3.2-1b")


def matrix() -> list[tuple[str, Run]]:
    """Configurations whose measured peak is compared with `oompost estimate` (docs/estimator_accuracy.md)."""
    rows = [
        # (zero stage, offload, grad ckpt, micro, seq)
        (2, "none", False, 4, 512),
        (2, "none", True, 8, 1024),
        (2, "none", False, 1, 2048),
        (2, "optimizer", False, 2, 1024),
        (3, "none", False, 4, 512),
        (3, "none", True, 8, 1024),
        (3, "both", True, 4, 2048),
        (3, "optimizer", False, 2, 1024),
    ]
    out = []
    for model in MATRIX_MODELS:
        for stage, offload, ckpt, micro, seq in rows:
            zero: dict = {"stage": stage, "overlap_comm": stage == 3, "contiguous_gradients": True}
            if offload in ("optimizer", "both"):
                zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
            if offload == "both":
                zero["offload_param"] = {"device": "cpu", "pin_memory": True}
            cfg = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
                   "bf16": {"enabled": True}, "zero_optimization": zero, "gradient_clipping": 1.0,
                   "steps_per_print": 100, "zero_force_ds_cpu_optimizer": False}
            args = ["--model", model, "--per_device_train_batch_size", str(micro), "--max_seq_length", str(seq),
                    "--max_steps", "3", "--report", "{job}/measured.json", "--memory_limit_gib", "44"]
            if stage == 3:
                args.append("--zero_init")
            if ckpt:
                args.append("--gradient_checkpointing")
            name = f"m_{model}_z{stage}_{offload}_{'ckpt' if ckpt else 'nockpt'}_b{micro}_s{seq}"
            host = 24 if offload != "none" else 8
            budget = _matrix_budget_gib(model, cfg, micro, seq, ckpt, stage == 3)
            args[args.index("--memory_limit_gib") + 1] = f"{budget:.1f}"
            out.append((name, Run("deepspeed", "train.py", args, ds_config=cfg, gpu_gib=budget, host_gib=host,
                                  capture=False, timeout=300)))
    return out


def _matrix_budget_gib(model: str, cfg: dict, micro: int, seq: int, ckpt: bool, zero_init: bool) -> float:
    """A per-run memory cap for scheduling parallel runs: 1.3x oompost's own
    prediction + 2 GiB (the cap never binds unless the prediction is >30% low;
    a run that hits it shows up as an OOM in the results, not as a number)."""
    try:
        import os
        import sys

        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
        from oompost.estimate.memory import TrainSetup, estimate
        from oompost.estimate.models import load_model_spec

        setup = TrainSetup.from_ds_config(cfg, world_size=1, micro_batch=micro, seq_len=seq, grad_ckpt=ckpt,
                                          attn="sdpa", zero_init=zero_init)
        pred = estimate(load_model_spec(model), setup).predicted_peak_bytes / GiB
        return min(70.0, 1.3 * pred + 2)
    except Exception:
        return 44.0
