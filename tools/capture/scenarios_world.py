"""More of the world (issue 6 §6): captures that differ from the first
fourteen in architecture (GPT-2, GPT-NeoX/Pythia, Mistral-style GQA, Llama-3
GQA, T5, ViT), in driver (the HF Trainer with its own console output,
``accelerate launch``, plain loops that print ``torch.cuda.memory_allocated()``,
torchrun with two ranks) and in memory cap (11, 16, 40 and 80 GiB cards).

Every scenario carries the counterfactual run(s) that prove its label: the
same command with one setting changed, run under the same cap.
"""

from __future__ import annotations

from scenarios import Run, Scenario

_HF = ["--bf16", "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
       "--dataloader_num_workers", "0"]


def _ds_zero3_gpu(reduce_bucket: float) -> dict:
    """ZeRO-3 without offload (world size 1): the IPG reduce bucket is allocated in deepspeed.initialize."""
    return {
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_bucket_size": reduce_bucket, "stage3_prefetch_bucket_size": 5e7,
                              "stage3_param_persistence_threshold": 1e5},
        "gradient_clipping": 1.0, "steps_per_print": 5}


def _ds_hf_zero2(explicit: bool) -> dict:
    """A ZeRO-2 config for the HF Trainer: with the batch keys copied from another run (explicit) or "auto"."""
    cfg: dict = {
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 2, "overlap_comm": False, "contiguous_gradients": True,
                              "reduce_bucket_size": "auto", "allgather_bucket_size": 5e8},
        "gradient_clipping": "auto", "steps_per_print": 10, "wall_clock_breakdown": False}
    if explicit:
        cfg.update(train_micro_batch_size_per_gpu=8, gradient_accumulation_steps=1, train_batch_size=8)
    else:
        cfg.update(train_micro_batch_size_per_gpu="auto", gradient_accumulation_steps="auto",
                   train_batch_size="auto")
    return cfg


def world_scenarios() -> list[Scenario]:
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, 80 GiB, HF Trainer, Mistral GQA
    mistral = ["--model", "mistral-7b", "--model_dtype", "float32", "--init_device", "cuda",
               "--emulate_card", "a100-80g", "--output_dir", "{job}/hf_out", "--gradient_checkpointing",
               "--optim", "adamw_torch", "--max_steps", "10", "--log_level", "info"] + _HF
    s.append(Scenario(
        "capacity_mistral7b_fp32_hf_trainer_a100_80g",
        "HF Trainer full fine-tune of a Mistral-7B-shaped model (GQA, 8 KV heads) loaded in fp32 (no torch_dtype) "
        "with --bf16 autocast, adamw_torch, gradient checkpointing, micro-batch 2 x 1024 tokens on an 80 GiB A100: "
        "fp32 weights + fp32 gradients (2 x 27 GiB) leave no room for the two fp32 Adam moments at the first "
        "optimizer step. The same run at micro-batch 1 x 128 tokens fails the same way.",
        {"cause": "capacity", "sub_cause": None,
         "why": "7.24B parameters x 16 bytes (fp32 weights, gradients, exp_avg, exp_avg_sq) = 108 GiB > 78.65 GiB "
                "allowed, whatever the batch"},
        Run("python", "hf_trainer.py", mistral + ["--max_seq_length", "1024", "--per_device_train_batch_size", "2",
                                                  "--gradient_accumulation_steps", "4"],
            gpu_gib=79.2, host_gib=10, timeout=300),
        counterfactuals=[("micro-batch 1 x 128 tokens, gradient accumulation 1 (same cap)",
                          Run("python", "hf_trainer.py",
                              mistral + ["--max_seq_length", "128", "--per_device_train_batch_size", "1",
                                         "--gradient_accumulation_steps", "1"],
                              gpu_gib=79.2, host_gib=10, timeout=300, capture=False))],
        priority=1))

    # ---------------------------------------------------------------- fragmentation, T5, plain loop + tqdm
    t5 = ["--model", "t5-base", "--batch_size", "8", "--min_source_len", "64", "--max_source_len", "1024",
          "--min_target_len", "16", "--max_target_len", "256", "--max_steps", "30"]
    s.append(Scenario(
        "fragmentation_t5_dynamic_padding",
        "Plain PyTorch loop (tqdm bar) fine-tuning a T5-base-shaped encoder-decoder with dynamic padding: sources "
        "64-1024 and targets 16-256 tokens, so every step's attention blocks have new sizes. The memory cap is set "
        "just above what the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "seq2seq.py", t5, gpu_gib=26, host_gib=6, max_entries=30000, timeout=240),
        priority=2, fragmentation_search=True, search_variants=[t5, t5 + ["--seed", "7"]]))

    # ---------------------------------------------------------------- activation_spike, 40 GiB, HF Trainer, eager
    qeager = ["--model", "qwen2.5-0.5b", "--emulate_card", "a100-40g", "--max_seq_length", "3072",
              "--output_dir", "{job}/hf_out", "--per_device_train_batch_size", "2", "--max_steps", "10"] + _HF
    s.append(Scenario(
        "activation_spike_eager_attention_hf_trainer_a100_40g",
        "HF Trainer fine-tune of Qwen2.5-0.5B (GQA) at 2 x 3072 tokens with attn_implementation=\"eager\" on a "
        "40 GiB A100: every layer keeps its 2 x 14 x 3072 x 3072 attention probabilities (fp32 softmax output and "
        "bf16 copy) for backward and the forward runs out. The same run with sdpa completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states are ~4 GiB; the eager attention matrices (~1.5 GiB per layer) fill the card in the "
                "first forward; attn_implementation=sdpa completes the same run under the same cap"},
        Run("python", "hf_trainer.py", qeager + ["--attn_implementation", "eager"], gpu_gib=39.5, host_gib=8),
        counterfactuals=[("attn_implementation=sdpa (same cap)",
                          Run("python", "hf_trainer.py", qeager + ["--attn_implementation", "sdpa"],
                              gpu_gib=39.5, host_gib=8, capture=False))],
        priority=3))

    # ---------------------------------------------------------------- activation_spike/kv_cache, 16 GiB, accelerate
    gen = ["--model", "pythia-410m", "--train_batch_size", "8", "--seq_len", "512", "--max_steps", "10",
           "--sample_every", "5", "--prompt_len", "64", "--max_new_tokens", "1024", "--emulate_card", "rtx4080"]
    s.append(Scenario(
        "activation_spike_kv_cache_generate_accelerate_16g",
        "accelerate launch (bf16 mixed precision) fine-tune of a Pythia-410M-shaped GPT-NeoX model on a 16 GB card "
        "that samples generations every 5 steps with the eval batch size (256 prompts x 64 tokens, "
        "max_new_tokens=1024): training steps fit, the KV cache of the first generate() call grows past the card "
        "while decoding. The same run with 8 prompts per call completes.",
        {"cause": "activation_spike", "sub_cause": "kv_cache",
         "why": "the failing allocation is the KV cache's torch.cat in generate(): 256 sequences x 1088 tokens x "
                "96 KiB per token = 25.5 GiB of cache cannot fit in 15.20 GiB under any allocator setting (the "
                "reserved-but-unallocated blocks at the OOM are holes left by the cache's growth); "
                "eval_batch_size=8 completes the same run"},
        Run("accelerate", "gen_eval_accelerate.py", gen + ["--eval_batch_size", "256"], gpu_gib=16.2, host_gib=6),
        # (a first proof run with eval_batch_size=32 ran out of memory too, in the second sampling round)
        counterfactuals=[("eval_batch_size=8 (same cap)",
                          Run("accelerate", "gen_eval_accelerate.py", gen + ["--eval_batch_size", "8"],
                              gpu_gib=16.2, host_gib=6, capture=False))],
        priority=20))

    # ---------------------------------------------------------------- leak, 11 GiB, plain loop printing memory
    leak = ["--model", "gpt2", "--batch_size", "4", "--seq_len", "1024", "--val_batch_size", "1",
            "--val_seq_len", "256", "--steps", "200", "--emulate_card", "rtx2080ti"]
    s.append(Scenario(
        "leak_gpt2_val_loss_graph_2080ti",
        "Plain PyTorch loop (fp16 autocast + GradScaler) training a GPT-2-small-shaped model on an 11 GB RTX 2080 "
        "Ti; each step it also computes a held-out loss without torch.no_grad() and adds the tensor to a running "
        "sum, so every step's evaluation graph (activations and fp16 weight copies) stays alive. The loop prints "
        "torch.cuda.memory_allocated() each step. The same loop with no_grad() and .item() completes 200 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "memory_allocated at the end of each step rises by the same amount every step until the OOM"},
        Run("python", "plain_loop.py", leak, gpu_gib=11, host_gib=6),
        counterfactuals=[("held-out loss under torch.no_grad() summed with .item() (same cap)",
                          Run("python", "plain_loop.py", leak + ["--val_loss_no_grad"], gpu_gib=11, host_gib=6,
                              capture=False))],
        priority=21))

    # ---------------------------------------------------------------- leak, T4, memory prints without step numbers
    bare = ["--model", "pythia-410m", "--batch_size", "4", "--seq_len", "512", "--val_batch_size", "1",
            "--val_seq_len", "256", "--steps", "200", "--print_style", "bare", "--emulate_card", "t4"]
    s.append(Scenario(
        "leak_pythia410m_bare_memory_prints_t4",
        "Plain PyTorch loop (fp16 autocast + GradScaler) training a Pythia-410M-shaped model (GPT-NeoX) on a 16 GB "
        "T4; each step's held-out loss is computed without torch.no_grad() and added to a running sum as a tensor, "
        "so every step's evaluation graph stays alive. The loop prints only 'allocated: … MB, reserved: … MB' "
        "each iteration, with no step number, as notebook loops do. The same loop with no_grad() and .item() "
        "completes 200 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "the allocated memory the loop prints rises by the same amount every iteration until the OOM"},
        Run("python", "plain_loop.py", bare, gpu_gib=15, host_gib=6),
        counterfactuals=[("held-out loss under torch.no_grad() summed with .item() (same cap)",
                          Run("python", "plain_loop.py", bare + ["--val_loss_no_grad"], gpu_gib=15, host_gib=6,
                              capture=False))],
        priority=21))

    # ---------------------------------------------------------------- capacity, 11 GiB, plain loop, Llama-3 GQA
    llama = ["--model", "llama3.2-1b", "--val_loss_no_grad", "--steps", "20", "--emulate_card", "rtx2080ti"]
    s.append(Scenario(
        "capacity_llama3.2_1b_plain_loop_2080ti",
        "Plain PyTorch loop (fp32 weights, fp16 autocast, AdamW) full fine-tune of a Llama-3.2-1B-shaped model "
        "(GQA) on an 11 GB RTX 2080 Ti at 4 x 1024 tokens: fp32 weights, gradients and Adam moments (~16 "
        "bytes/param = 18.4 GiB) cannot fit in 10.25 GiB. The same loop at 1 x 128 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "1.24B parameters x 16 bytes = 18.4 GiB of model states > 10.25 GiB allowed, at any batch size"},
        Run("python", "plain_loop.py", llama + ["--batch_size", "4", "--seq_len", "1024"], gpu_gib=11, host_gib=8),
        counterfactuals=[("micro-batch 1 x 128 tokens (same cap)",
                          Run("python", "plain_loop.py", llama + ["--batch_size", "1", "--seq_len", "128"],
                              gpu_gib=11, host_gib=8, capture=False))],
        priority=22))

    # ---------------------------------------------------------------- comm_buffer, 16 GiB, DeepSpeed ZeRO-3
    z3 = ["--model", "pythia-410m", "--zero_init", "--emulate_card", "rtx4080", "--per_device_train_batch_size",
          "2", "--max_seq_length", "512", "--max_steps", "10"]
    s.append(Scenario(
        "comm_buffer_zero3_reduce_bucket_16g",
        "ZeRO-3 (no offload) fine-tune of a Pythia-410M-shaped GPT-NeoX model on a 16 GB card with "
        "reduce_bucket_size 8e9 (16x the default 5e8): with contiguous_gradients, deepspeed.initialize allocates "
        "the 8e9-element bf16 IPG reduce bucket (14.9 GiB) next to the bf16 and fp32 weights, and it does not fit. "
        "The same run with 5e8 completes.",
        {"cause": "comm_buffer", "sub_cause": None,
         "why": "the failing allocation is DeepSpeed ZeRO-3's IPG reduce bucket (reduce_bucket_size=8e9 bf16 "
                "elements) in deepspeed.initialize; reduce_bucket_size=5e8 completes the same run"},
        Run("deepspeed", "train.py", z3, ds_config=_ds_zero3_gpu(8e9), gpu_gib=16.2, host_gib=8, timeout=300),
        counterfactuals=[("reduce_bucket_size=5e8 (same cap)",
                          Run("deepspeed", "train.py", z3, ds_config=_ds_zero3_gpu(5e8), gpu_gib=16.2, host_gib=8,
                              timeout=300, capture=False))],
        priority=23))

    # ---------------------------------------------------------------- config_error, HF Trainer + DeepSpeed
    hfds = ["--model", "pythia-410m", "--emulate_card", "rtx4080", "--max_seq_length", "512",
            "--output_dir", "{job}/hf_out", "--per_device_train_batch_size", "4",
            "--gradient_accumulation_steps", "2", "--max_steps", "10"] + _HF
    s.append(Scenario(
        "config_error_hf_trainer_ds_batch_mismatch",
        "HF Trainer with a ZeRO-2 ds_config whose batch keys were copied from another run "
        "(train_micro_batch_size_per_gpu 8, gradient_accumulation_steps 1, train_batch_size 8) while the Trainer "
        "is given per_device_train_batch_size 4 and gradient_accumulation_steps 2: the HF DeepSpeed integration "
        "refuses the mismatch before training. The same run with \"auto\" batch keys completes.",
        {"cause": "config_error", "sub_cause": None,
         "why": "ValueError: DeepSpeed config values mismatch TrainingArguments values "
                "(train_micro_batch_size_per_gpu 8 vs per_device_train_batch_size 4, ...)"},
        Run("deepspeed", "hf_trainer.py", hfds, ds_config=_ds_hf_zero2(explicit=True), gpu_gib=16.2, host_gib=8),
        counterfactuals=[("batch keys set to \"auto\" (same cap)",
                          Run("deepspeed", "hf_trainer.py", hfds, ds_config=_ds_hf_zero2(explicit=False),
                              gpu_gib=16.2, host_gib=8, capture=False))],
        priority=24))

    # ---------------------------------------------------------------- config_error, torchrun 2 ranks on 1 GPU
    ddp = ["--model", "gpt2", "--batch_size", "4", "--seq_len", "512", "--steps", "20", "--ddp",
           "--val_loss_no_grad", "--emulate_card", "rtx2080ti"]
    s.append(Scenario(
        "config_error_ddp_two_ranks_one_gpu",
        "torchrun --nproc_per_node 2 on a machine with one GPU; the loop never calls torch.cuda.set_device("
        "LOCAL_RANK), so both ranks sit on cuda:0 and NCCL refuses to build the communicator when "
        "DistributedDataParallel is constructed. The same loop with --nproc_per_node 1 completes.",
        {"cause": "config_error", "sub_cause": None,
         "why": "two ranks on one GPU: NCCL 'Duplicate GPU detected' (invalid usage) at DDP construction"},
        Run("torchrun", "plain_loop.py", ddp, gpu_gib=21, host_gib=8, capture=False, timeout=150, nproc=2),
        counterfactuals=[("--nproc_per_node 1",
                          Run("torchrun", "plain_loop.py", ddp, gpu_gib=11, host_gib=6, capture=False,
                              timeout=150, nproc=1))],
        priority=25))

    # ---------------------------------------------------------------- host_oom, ViT, DataLoader workers in a cgroup
    vit = ["6G", "python3", "{here}/vit_cached_loader.py", "--model", "vit-base", "--batch_size", "32",
           "--num_workers", "4", "--max_steps", "60", "--emulate_card", "rtx4080"]
    s.append(Scenario(
        "host_oom_vit_dataloader_cache",
        "ViT-Base image classification in a container limited to 6 GiB of host RAM; the Dataset caches every "
        "decoded 768x768 fp32 frame in a dict inside each of the 4 DataLoader workers, which grow until the "
        "kernel's OOM killer kills one. The same run without the cache completes 60 steps.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "a DataLoader worker is killed by signal 9 (cgroup OOM killer) with no CUDA error; GPU memory "
                "is far below the card"},
        Run("bash", "cgroup_run.sh", vit, gpu_gib=16.2, host_gib=8, capture=False, timeout=240),
        counterfactuals=[("Dataset without the decoded-frame cache (same 6 GiB limit)",
                          Run("bash", "cgroup_run.sh", vit + ["--no_cache"], gpu_gib=16.2, host_gib=8,
                              capture=False, timeout=240))],
        priority=26))
    return s
