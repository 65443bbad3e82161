"""Held-out captures (tests/heldout_captures/): real GPU runs that oompost was
never tuned on.  They differ from every sample in sample_logs/ in model
(BERT-large MLM, Phi-3-mini, OPT-1.3B, a diffusion-style conv UNet), in memory
cap (12, 20, 24 and 48 GiB cards) and in the loop that drives them.

    python tools/capture/run.py --heldout --scenarios --out $OUT     # on the GPU machine

Every scenario carries the counterfactual run(s) that prove its label: the
same command with one setting changed, run under the same cap.  These
captures exist to *measure* oompost (benchmarks/accuracy.py, "held-out"
section); they are not in sample_logs/ and the verdict fitting never reads
them.
"""

from __future__ import annotations

from scenarios import Run, Scenario

_HF = ["--bf16", "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
       "--dataloader_num_workers", "0"]


def heldout_scenarios() -> list[Scenario]:
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, 48 GiB, HF Trainer, Phi-3-mini
    phi = ["--model", "phi3-mini", "--model_dtype", "float32", "--init_device", "cuda", "--emulate_card", "a6000",
           "--output_dir", "{job}/hf_out", "--gradient_checkpointing", "--optim", "adamw_torch", "--max_steps", "5",
           "--log_level", "info"] + _HF
    s.append(Scenario(
        "capacity_phi3_mini_fp32_hf_trainer_a6000_48g",
        "HF Trainer full fine-tune of a Phi-3-mini-shaped model (3.8B, fused qkv/gate-up projections) built in "
        "fp32 with --bf16 autocast, adamw_torch and gradient checkpointing at 4 x 1024 tokens on a 48 GB RTX "
        "A6000: fp32 weights and gradients (2 x 14.2 GiB) leave no room for the two fp32 Adam moments at the "
        "first optimizer step. The same run at micro-batch 1 x 128 tokens fails the same way.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.82B parameters x 16 bytes (fp32 weights, gradients, exp_avg, exp_avg_sq) = 57 GiB > 47.04 GiB "
                "allowed, whatever the batch"},
        Run("python", "hf_trainer.py", phi + ["--max_seq_length", "1024", "--per_device_train_batch_size", "4",
                                              "--gradient_accumulation_steps", "2"],
            gpu_gib=47.6, host_gib=10, timeout=300, max_entries=8000),
        counterfactuals=[("micro-batch 1 x 128 tokens, gradient accumulation 1 (same cap)",
                          Run("python", "hf_trainer.py",
                              phi + ["--max_seq_length", "128", "--per_device_train_batch_size", "1",
                                     "--gradient_accumulation_steps", "1"],
                              gpu_gib=47.6, host_gib=10, timeout=300, capture=False))],
        priority=1))

    # ---------------------------------------------------------------- activation_spike, 12 GiB, BERT-large MLM
    bert = ["--model", "bert-large", "--batch_size", "24", "--seq_len", "128", "--min_seq_len", "64",
            "--long_doc_step", "8", "--long_doc_len", "512", "--steps", "20", "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "activation_spike_bert_large_long_doc_3060_12g",
        "Plain PyTorch MLM fine-tune of a BERT-large-shaped encoder (fp32 weights, bf16 autocast, AdamW) on a "
        "12 GB RTX 3060 with dynamic padding: ordinary batches are 24 x 64-128 tokens; at step 8 one 512-token "
        "document pads the whole batch to 24 x 512 and the forward/backward no longer fits. The loop prints "
        "torch.cuda.memory_allocated() every step. The same run with documents truncated to 128 tokens "
        "completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (335M x 16 bytes = 5.0 GiB) fit and seven steps ran; the one 24 x 512 batch's "
                "activations and MLM logits do not; truncating to 128 tokens completes the same run"},
        Run("python", "heldout_loop.py", bert, gpu_gib=12.2, host_gib=8, max_entries=10000),
        counterfactuals=[("documents truncated to 128 tokens (same cap)",
                          Run("python", "heldout_loop.py", bert + ["--truncate", "128"], gpu_gib=12.2, host_gib=8,
                              capture=False)),
                         ("gradient checkpointing (same cap)",
                          Run("python", "heldout_loop.py", bert + ["--gradient_checkpointing"], gpu_gib=12.2,
                              host_gib=8, capture=False))],
        priority=2))

    # ---------------------------------------------------------------- leak, 12 GiB, UNet denoiser, forward hook
    unet = ["--model", "unet", "--batch_size", "4", "--image_size", "256", "--steps", "400",
            "--emulate_card", "rtx4070"]
    s.append(Scenario(
        "leak_unet_feature_hook_4070_12g",
        "Plain PyTorch loop training a diffusion-style denoising UNet (conv + GroupNorm + SiLU, 43M parameters, "
        "bf16 autocast) at 4 x 256 x 256 on a 12 GB RTX 4070; a forward hook keeps the decoder's last feature "
        "map for a sample grid in a list, on the GPU and attached to the graph, so every step leaves 32 MiB "
        "behind. The loop prints torch.cuda.memory_allocated() each step. The same run keeping "
        ".detach().cpu() copies completes 400 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "memory_allocated at the end of each step rises by the same 32 MiB every step until the OOM; "
                "keeping the feature maps on the host completes the same run"},
        Run("python", "heldout_loop.py", unet + ["--keep_features", "gpu"], gpu_gib=12.2, host_gib=6,
            max_entries=8000),
        counterfactuals=[("hook keeps .detach().cpu() copies (same cap)",
                          Run("python", "heldout_loop.py", unet + ["--keep_features", "cpu"], gpu_gib=12.2,
                              host_gib=16, capture=False))],
        priority=3))

    # ---------------------------------------------------------------- fragmentation, BERT-large dynamic padding
    bdyn = ["--model", "bert-large", "--batch_size", "16", "--seq_len", "512", "--min_seq_len", "32",
            "--steps", "30"]
    s.append(Scenario(
        "fragmentation_bert_large_dynamic_padding",
        "Plain PyTorch MLM fine-tune of a BERT-large-shaped encoder with dynamic padding (16 documents of "
        "32-512 tokens, each batch padded to its longest), so every step's activations have new sizes. The "
        "memory cap is set just above what the same run needs with expandable_segments:True, which completes "
        "under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "heldout_loop.py", bdyn, gpu_gib=30, host_gib=8, max_entries=12000, timeout=200),
        priority=4, fragmentation_search=True,
        search_variants=[bdyn, bdyn + ["--seed", "7"]]))

    # ---------------------------------------------------------------- fragmentation, UNet multi-resolution
    umr = ["--model", "unet", "--batch_size", "8", "--image_sizes", "128,192,256,320,384", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_unet_multires",
        "Plain PyTorch loop training a diffusion-style denoising UNet with multi-resolution batches (8 images "
        "of 128-384 px, one size drawn per step), so the conv activations change size every step. The memory "
        "cap is set just above what the same run needs with expandable_segments:True, which completes under "
        "it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "heldout_loop.py", umr, gpu_gib=30, host_gib=8, max_entries=12000, timeout=200),
        priority=5, fragmentation_search=True,
        search_variants=[umr, umr + ["--seed", "7"]]))

    # ---------------------------------------------------------------- config_error, allocator setting
    cfg = ["--model", "bert-large", "--batch_size", "16", "--seq_len", "128", "--min_seq_len", "64",
           "--steps", "10", "--emulate_card", "rtx4000ada"]
    s.append(Scenario(
        "config_error_max_split_size_mb_too_small_20g",
        "A plain BERT-large MLM loop on a 20 GB RTX 4000 Ada started with PYTORCH_CUDA_ALLOC_CONF="
        "max_split_size_mb:16 (copied from a forum answer about fragmentation): the caching allocator rejects "
        "the value (it must exceed 20 MB) at its first use and the run stops before training. The same run with "
        "max_split_size_mb:128 completes.",
        {"cause": "config_error", "sub_cause": None,
         "why": "RuntimeError from the allocator's config parser: max_split_size_mb too small; "
                "max_split_size_mb:128 completes the same run"},
        # capture=False: with oompost.record enabled the process died of SIGSEGV after the recorder's warning
        # (first attempt, exit -11, no traceback); a config error leaves no snapshot to take anyway
        Run("python", "heldout_loop.py", cfg, env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:16"},
            gpu_gib=20.2, host_gib=8, capture=False, timeout=150),
        counterfactuals=[("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 (same cap)",
                          Run("python", "heldout_loop.py", cfg,
                              env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}, gpu_gib=20.2, host_gib=8, capture=False, timeout=150))],
        priority=6))

    # ---------------------------------------------------------------- activation_spike/kv_cache, 24 GiB, accelerate
    gen = ["--model", "qwen2.5-0.5b", "--train_batch_size", "4", "--seq_len", "512", "--max_steps", "10",
           "--sample_every", "5", "--prompt_len", "64", "--max_new_tokens", "1536", "--emulate_card", "l4"]
    s.append(Scenario(
        "activation_spike_qwen2_generate_accelerate_l4_24g",
        "accelerate launch (bf16 mixed precision) fine-tune of a Qwen2.5-0.5B-shaped model (GQA, 2 KV heads) on "
        "a 24 GB L4 that samples generations every 5 steps for all 1024 validation prompts at once (64-token "
        "prompts, max_new_tokens=1536): training steps fit, the KV cache of the first generate() call grows past "
        "the card while decoding. The same run with 32 prompts per call completes.",
        {"cause": "activation_spike", "sub_cause": "kv_cache",
         "why": "1024 sequences x 1600 tokens x 12 KiB of KV cache per token = 18.75 GiB next to 6.77 GiB of model "
                "states cannot fit in 21.53 GiB: the cache grows while decoding until the top-p sampling temporaries "
                "(1.74 GiB for 1024 x 151936 logits) no longer fit; expandable_segments:True fails the same way "
                "(further into decoding), eval_batch_size=32 completes the same run"},
        Run("accelerate", "gen_eval_accelerate.py", gen + ["--eval_batch_size", "1024"], gpu_gib=22.1, host_gib=6,
            max_entries=8000, timeout=240),
        counterfactuals=[("eval_batch_size=32 (same cap)",
                          Run("accelerate", "gen_eval_accelerate.py", gen + ["--eval_batch_size", "32"],
                              gpu_gib=22.1, host_gib=6, capture=False, timeout=300)),
                         # added after the first capture (its OOM showed 4.41 GiB reserved-but-unallocated): the
                         # recorded result came from run.py --reruns with this setting
                         ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (same cap)",
                          Run("accelerate", "gen_eval_accelerate.py", gen + ["--eval_batch_size", "1024"],
                              env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                              gpu_gib=22.1, host_gib=6, capture=False, timeout=240))],
        priority=8))

    # ---------------------------------------------------------------- host_oom, OPT-1.3B built on the host, cgroup
    opt = ["4G", "python3", "{here}/heldout_loop.py", "--model", "opt-1.3b", "--batch_size", "8", "--seq_len", "256",
           "--steps", "10", "--emulate_card", "rtx4090"]
    s.append(Scenario(
        "host_oom_opt1.3b_host_init_cgroup_4g",
        "A plain loop fine-tuning an OPT-1.3B-shaped model in a container limited to 4 GiB of host RAM: the model "
        "is built with from_config on the CPU in fp32 (5.3 GB of host memory) before .to('cuda', bfloat16), and "
        "the kernel's OOM killer kills the process while the weights are initialised. The same run building the "
        "model directly on the GPU (with torch.device('cuda')) completes.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the process is killed by signal 9 (cgroup OOM killer) with no CUDA error while building the "
                "model on the host; building it on the GPU completes under the same 4 GiB limit"},
        Run("bash", "cgroup_run.sh", opt + ["--init_device", "cpu"], gpu_gib=24, host_gib=6, capture=False,
            timeout=200),
        counterfactuals=[("model built on the GPU, torch.device('cuda') (same 4 GiB limit)",
                          Run("bash", "cgroup_run.sh", opt + ["--init_device", "cuda"], gpu_gib=24, host_gib=6,
                              capture=False, timeout=200))],
        priority=7))
    return s
