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
    return s + second_set() + third_set() + fourth_set() + fifth_set() + sixth_set() + seventh_set() + eighth_set() + ninth_set() + tenth_set() + eleventh_set() + twelfth_set() + thirteenth_set() + fourteenth_set() + fifteenth_set() + sixteenth_set() + seventeenth_set() + eighteenth_set() + nineteenth_set() + twentieth_set() + twenty_first_set() + twenty_second_set() + twenty_third_set() + twenty_fourth_set() + twenty_fifth_set() + twenty_sixth_set() + twenty_seventh_set() + twenty_eighth_set() + twenty_ninth_set() + thirtieth_set() + thirty_first_set() + thirty_second_set() + thirty_third_set() + thirty_fourth_set() + thirty_fifth_set() + thirty_sixth_set() + thirty_seventh_set()


def second_set() -> list[Scenario]:
    """The second set (2026-12-04): other model families, drivers and cards (11, 16, 40 and 80 GiB)."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, 16 GiB V100, Pythia-1.4B fp32 AdamW
    py = ["--model", "pythia-1.4b", "--init_device", "cuda", "--emulate_card", "v100-16g"]
    s.append(Scenario(
        "capacity_pythia1.4b_fp32_adamw_v100_16g",
        "Plain PyTorch loop fully fine-tuning a Pythia-1.4B-shaped GPT-NeoX model (fp32 weights, bf16 autocast, "
        "torch.optim.AdamW) on a 16 GB V100 at 4 x 256-512 tokens: fp32 weights and gradients (2 x 5.3 GiB) "
        "already take most of the card and the two fp32 AdamW moments (another 10.5 GiB) can never fit. The "
        "same run at batch 1 x 64 tokens fails too; under a 40 GiB cap it completes and its peak shows the need.",
        {"cause": "capacity", "sub_cause": None,
         "why": "1.41B parameters x 16 bytes (fp32 weights, gradients, exp_avg, exp_avg_sq) = 21 GiB > 15.27 GiB "
                "allowed, whatever the batch: batch 1 x 64 tokens fails too"},
        Run("python", "heldout_loop.py", py + ["--batch_size", "4", "--seq_len", "512", "--min_seq_len", "256",
                                               "--steps", "20"],
            gpu_gib=16.3, host_gib=6, timeout=240, max_entries=8000),
        counterfactuals=[("batch 1 x 64 tokens (same cap)",
                          Run("python", "heldout_loop.py", py + ["--batch_size", "1", "--seq_len", "64",
                                                                 "--steps", "3"],
                              gpu_gib=16.3, host_gib=6, capture=False, timeout=240)),
                         ("for reference: batch 1 x 64 tokens under a 40 GiB cap (its peak is the need)",
                          Run("python", "heldout_loop.py", ["--model", "pythia-1.4b", "--init_device", "cuda",
                                                            "--memory_limit_gib", "40", "--batch_size", "1",
                                                            "--seq_len", "64", "--steps", "3"],
                              gpu_gib=40.5, host_gib=6, capture=False, timeout=240))],
        priority=21))

    # ---------------------------------------------------------------- activation_spike, 11 GiB 2080 Ti, T5-large
    t5 = ["--model", "t5-large", "--batch_size", "4", "--min_source_len", "64", "--max_source_len", "256",
          "--min_target_len", "32", "--max_target_len", "96", "--long_source_step", "6", "--long_source_len",
          "1536", "--max_steps", "12", "--emulate_card", "rtx2080ti"]
    s.append(Scenario(
        "activation_spike_t5_large_long_source_2080ti_11g",
        "Plain PyTorch seq2seq fine-tune of a T5-large-shaped model (738M, bf16 weights, AdamW) on an 11 GB "
        "RTX 2080 Ti with dynamic padding: ordinary batches are 4 sources of 64-256 tokens; at step 6 one "
        "1536-token source document (no max_length truncation) pads the batch, and T5's eager attention "
        "(4 x 16 heads x 1536^2 scores per layer, kept for backward) no longer fits. The same run truncating "
        "sources to 256 tokens completes; so does the untruncated run with gradient checkpointing.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (738M x 8 bytes = 5.5 GiB in bf16) fit and five steps ran; the one 4 x 1536 batch's "
                "attention scores do not; truncation to 256 tokens completes the same run"},
        Run("python", "seq2seq.py", t5, gpu_gib=11, host_gib=6, timeout=240, max_entries=10000),
        counterfactuals=[("sources truncated to 256 tokens (same cap)",
                          Run("python", "seq2seq.py", t5 + ["--max_source_length", "256"], gpu_gib=11,
                              host_gib=6, capture=False, timeout=240)),
                         ("gradient checkpointing, no truncation (same cap)",
                          Run("python", "seq2seq.py", t5 + ["--gradient_checkpointing"], gpu_gib=11, host_gib=6,
                              capture=False, timeout=240))],
        priority=22))

    # ---------------------------------------------------------------- activation_spike, 40 GiB A100, ViT-H, Trainer
    vit = ["--task", "image-classification", "--model", "vit-huge", "--image_size", "336", "--model_dtype",
           "float32", "--init_device", "cuda", "--emulate_card", "a100-40g", "--num_samples", "2048",
           "--output_dir", "{job}/hf_out", "--optim", "adamw_torch", "--max_steps", "5", "--log_level", "info"] + _HF
    s.append(Scenario(
        "activation_spike_vit_huge_336_hf_trainer_a100_40g",
        "HF Trainer full fine-tune of a ViT-Huge/14-shaped image classifier (632M, fp32 weights, --bf16 "
        "autocast, adamw_torch) at 336 px (577 tokens per image) with per_device_train_batch_size=64 on a 40 GB "
        "A100: model states (9.4 GiB) fit, the activations of 64 x 577 tokens through 32 layers do not, at the "
        "first step. The same run at 16 images x 4 accumulation steps completes, and so does batch 64 with "
        "gradient checkpointing.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "632M x 16 bytes = 9.4 GiB of model states fit in 38.89 GiB; the forward/backward at the configured "
                "micro-batch (64 x 577 tokens) does not: micro-batch 16 with accumulation 4, or gradient "
                "checkpointing, completes the same run"},
        Run("python", "hf_trainer.py", vit + ["--per_device_train_batch_size", "64"], gpu_gib=40, host_gib=8,
            timeout=300, max_entries=8000),
        counterfactuals=[("per_device_train_batch_size=16, gradient_accumulation_steps=4 (same cap)",
                          Run("python", "hf_trainer.py", vit + ["--per_device_train_batch_size", "16",
                                                                "--gradient_accumulation_steps", "4"],
                              gpu_gib=40, host_gib=8, capture=False, timeout=300)),
                         ("gradient checkpointing at batch 64 (same cap)",
                          Run("python", "hf_trainer.py", vit + ["--per_device_train_batch_size", "64",
                                                                "--gradient_checkpointing"],
                              gpu_gib=40, host_gib=8, capture=False, timeout=300))],
        priority=23))

    # ---------------------------------------------------------------- leak, 80 GiB A100, Llama-3.2-1B, logits list
    ll = ["--model", "llama3.2-1b", "--batch_size", "4", "--seq_len", "1024", "--num_samples", "480",
          "--emulate_card", "a100-80g"]
    s.append(Scenario(
        "leak_llama3.2_1b_epoch_logits_a100_80g",
        "Notebook-style fine-tune of a Llama-3.2-1B-shaped model (fp32 weights, bf16 autocast, AdamW) on an "
        "80 GB A100 that keeps every step's outputs.logits (4 x 1024 x 128256, 1 GB in bf16) and labels in a "
        "list on the GPU to compute the epoch's token accuracy at the end of the epoch; it prints "
        "torch.cuda.memory_allocated() every iteration, which rises by ~1 GB per iteration until the OOM. The "
        "same run keeping outputs.logits.argmax(-1).detach().cpu() completes the epoch (120 iterations).",
        {"cause": "leak", "sub_cause": None,
         "why": "memory_allocated after each iteration rises by the same ~1.05 GB (one step's logits) every "
                "iteration until the OOM; keeping the argmax on the host completes the same run"},
        Run("python", "epoch_metrics_loop.py", ll + ["--keep", "gpu"], gpu_gib=79.2, host_gib=6, timeout=240,
            max_entries=10000),
        counterfactuals=[("keep outputs.logits.argmax(-1).detach().cpu() (same cap)",
                          Run("python", "epoch_metrics_loop.py", ll + ["--keep", "argmax_cpu"], gpu_gib=79.2,
                              host_gib=6, capture=False, timeout=240))],
        priority=20))

    # ---------------------------------------------------------------- capacity at load, 11 GiB, Mistral-7B bf16
    mis = ["--model", "mistral-7b", "--model_dtype", "bfloat16", "--init_device", "cpu", "--batch_size", "1",
           "--seq_len", "512"]
    s.append(Scenario(
        "capacity_mistral7b_bf16_load_2080ti_11g",
        "A plain loop that builds a Mistral-7B-shaped model (7.24B, GQA) in bf16 on the host and calls "
        ".to('cuda') on an 11 GB RTX 2080 Ti: the weights alone (13.5 GiB) exceed the card, and the copy fails "
        "part-way through the layers, before any batch. The same load under a 20 GiB cap completes and reports "
        "13.5 GiB allocated.",
        {"cause": "capacity", "sub_cause": None,
         "why": "7.24B parameters x 2 bytes = 13.49 GiB of bf16 weights > 10.25 GiB allowed: the OOM is in "
                "model.to('cuda'), before any batch; the same load under a 20 GiB cap holds 13.49 GiB"},
        Run("python", "heldout_loop.py", mis + ["--steps", "10", "--emulate_card", "rtx2080ti"],
            env={"OMP_NUM_THREADS": "8"}, gpu_gib=11, host_gib=18, timeout=420, max_entries=8000),
        # the first counterfactual (the same host build, then .to('cuda') under 20 GiB) timed out building the
        # model on the busy host (the capture's own build took 306 s); the recorded proof builds the same model
        # directly on the GPU (run.py --reruns, second call)
        counterfactuals=[("for reference: the same model in bf16 built on the GPU under a 20 GiB cap, no training "
                          "step",
                          Run("python", "heldout_loop.py", ["--model", "mistral-7b", "--model_dtype", "bfloat16",
                                                            "--init_device", "cuda", "--batch_size", "1",
                                                            "--seq_len", "512", "--steps", "0",
                                                            "--memory_limit_gib", "20"],
                              gpu_gib=20.5, host_gib=6, capture=False, timeout=240))],
        priority=19))

    # ---------------------------------------------------------------- fragmentation, GPT-2-large dynamic padding
    # (a first search at batch 8 under a 40 GiB bound ran out of memory uncapped in every variant)
    g2 = ["--model", "gpt2-large", "--init_device", "cuda", "--batch_size", "4", "--seq_len", "1024",
          "--min_seq_len", "32", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_gpt2_large_dynamic_padding",
        "Plain PyTorch causal-LM fine-tune of a GPT-2-large-shaped model (774M, fp32 weights, bf16 autocast, "
        "AdamW) with dynamic padding (4 documents of 32-1024 tokens, each batch padded to its longest), so every "
        "step's activations and logits have new sizes. The memory cap is set just above what the same run needs "
        "with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "heldout_loop.py", g2, gpu_gib=58, host_gib=8, max_entries=12000, timeout=200),
        priority=18, fragmentation_search=True,
        search_variants=[g2, g2 + ["--seed", "7"], g2 + ["--seed", "99"]]))

    # ---------------------------------------------------------------- leak, 16 GiB T4, HF Trainer eval logits
    # (first attempt without compute_metrics completed: the Trainer then keeps no logits)
    ev = ["--model", "pythia-410m", "--model_dtype", "float32", "--init_device", "cuda", "--emulate_card", "t4",
          "--output_dir", "{job}/hf_out", "--optim", "adamw_torch", "--max_steps", "5",
          "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--max_seq_length", "1024",
          "--num_eval_samples", "96", "--eval_strategy", "steps", "--eval_steps", "5",
          "--per_device_eval_batch_size", "4", "--compute_metrics", "accuracy", "--log_level", "info"] + _HF
    s.append(Scenario(
        "leak_pythia410m_trainer_eval_logits_t4_16g",
        "HF Trainer fine-tune of a Pythia-410M-shaped model (fp32 weights, --bf16) on a 16 GB T4 with an "
        "eval_dataset of 96 x 1024 tokens and a compute_metrics (next-token accuracy): training steps fit, but "
        "the evaluation at step 5 gathers every eval batch's logits (4 x 1024 x 50304) on the GPU "
        "(eval_accumulation_steps unset), so memory grows with each eval batch until the OOM. The same run with "
        "preprocess_logits_for_metrics keeping logits.argmax(-1) completes; so does eval_accumulation_steps=2 "
        "(logits moved to the host).",
        {"cause": "leak", "sub_cause": None,
         "why": "allocated memory grows by one batch of logits at every eval step, retained by the Trainer's "
                "eval loop until the limit; keeping only the argmax, or moving the logits to the host "
                "(eval_accumulation_steps), completes the same run"},
        Run("python", "hf_trainer.py", ev, gpu_gib=15.3, host_gib=8, timeout=300, max_entries=10000),
        counterfactuals=[("preprocess_logits_for_metrics keeps logits.argmax(-1) (same cap)",
                          Run("python", "hf_trainer.py", ev + ["--preprocess_logits_argmax"], gpu_gib=15.3,
                              host_gib=8, capture=False, timeout=300)),
                         ("eval_accumulation_steps=2 (same cap)",
                          Run("python", "hf_trainer.py", ev + ["--eval_accumulation_steps", "2"], gpu_gib=15.3,
                              host_gib=45, capture=False, timeout=300))],
        priority=24))
    return s


def third_set() -> list[Scenario]:
    """The third set (2026-12-04): DeepSpeed causes the held-out set lacked (comm_buffer, config_error), a
    ZeRO-2 start-up capacity failure and a second host OOM, on model families not in sample_logs/'s
    DeepSpeed captures (OPT, Phi-3, GPT-2-medium/large).  Needs the DeepSpeed wheels
    (../shared/tools/device-wheels.sh) on the GPU machine."""
    from scenarios import ds_zero2

    s: list[Scenario] = []

    # ---------------------------------------------------------------- comm_buffer, 12 GiB, OPT-350M, ZeRO-2 buckets
    opt = ["--model", "opt-350m", "--emulate_card", "rtx3060-12g", "--per_device_train_batch_size", "2",
           "--gradient_accumulation_steps", "4", "--max_seq_length", "512", "--max_steps", "10"]
    s.append(Scenario(
        "comm_buffer_zero2_opt350m_reduce_bucket_3060_12g",
        "DeepSpeed ZeRO-2 (no offload, overlap_comm, contiguous_gradients) fine-tune of an OPT-350M-shaped model "
        "on a 12 GB RTX 3060 with reduce_bucket_size and allgather_bucket_size 2.5e9, copied from a config made "
        "for a large multi-node job: with overlap_comm the engine allocates two bf16 gradient-reduction buffers "
        "of 2.5e9 elements (2 x 4.66 GiB) at the first backward, next to 1.85 GiB of weights and master "
        "weights, and they do not fit. The same run with the default 5e8 buckets completes.",
        {"cause": "comm_buffer", "sub_cause": None,
         "why": "the failing allocation is DeepSpeed ZeRO-2's IPG reduce bucket (2.5e9 bf16 elements, doubled "
                "by overlap_comm) at the first backward; reduce/allgather buckets of 5e8 complete the same run "
                "under the same cap"},
        Run("deepspeed", "train.py", opt,
            ds_config=ds_zero2(reduce_bucket=2.5e9, allgather_bucket=2.5e9, micro=2, gas=4, log_info=True),
            gpu_gib=12.2, host_gib=8, timeout=240, max_entries=8000),
        counterfactuals=[("default buckets: reduce_bucket_size=5e8, allgather_bucket_size=5e8 (same cap)",
                          Run("deepspeed", "train.py", opt,
                              ds_config=ds_zero2(micro=2, gas=4, log_info=True),
                              gpu_gib=12.2, host_gib=8, timeout=240, capture=False))],
        priority=31))

    # ---------------------------------------------------------------- config_error, ZeRO-Offload + torch AdamW
    g2 = ["--model", "gpt2-medium", "--emulate_card", "t4", "--per_device_train_batch_size", "4",
          "--gradient_accumulation_steps", "2", "--max_seq_length", "512", "--max_steps", "5"]
    off = ds_zero2(micro=4, gas=2, offload_optimizer=True)
    off.pop("zero_force_ds_cpu_optimizer")          # what users write: the offload block alone
    s.append(Scenario(
        "config_error_zero_offload_client_optimizer_gpt2_medium_t4",
        "DeepSpeed ZeRO-2 with offload_optimizer (device cpu, pinned) for a GPT-2-medium-shaped model on a 16 GB "
        "T4, the script passing its own torch.optim.AdamW to deepspeed.initialize (DeepSpeedCPUAdam is not "
        "built): DeepSpeed refuses a client optimizer with ZeRO-Offload unless zero_force_ds_cpu_optimizer is "
        "false, and deepspeed.initialize raises before any memory is used. The same config with "
        "\"zero_force_ds_cpu_optimizer\": false completes.",
        {"cause": "config_error", "sub_cause": None,
         "why": "ZeRORuntimeException in deepspeed.initialize: ZeRO-Offload with a client provided optimizer "
                "(torch AdamW) needs zero_force_ds_cpu_optimizer=false; setting it completes the same run"},
        Run("deepspeed", "train.py", g2, ds_config=off, gpu_gib=15, host_gib=8, timeout=200, capture=False),
        counterfactuals=[("\"zero_force_ds_cpu_optimizer\": false (same cap)",
                          Run("deepspeed", "train.py", g2, ds_config=ds_zero2(micro=4, gas=2, offload_optimizer=True),
                              gpu_gib=15, host_gib=12, timeout=240, capture=False))],
        priority=32))

    # ---------------------------------------------------------------- config_error, HF Trainer, misspelt ZeRO key
    typo = {"bf16": {"enabled": "auto"},
            "zero_optimization": {"stage": 2, "allgather_partitions": True, "allgather_bucket_size": 2e8,
                                  "overlap_comm": True, "reduce_scatter": True, "reduce_bucket_size": "auto",
                                  "contigious_gradients": True},
            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 10,
            "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False}
    fixed = {**typo, "zero_optimization": {**{k: v for k, v in typo["zero_optimization"].items()
                                              if k != "contigious_gradients"}, "contiguous_gradients": True}}
    gl = ["--model", "gpt2-large", "--emulate_card", "rtx4090", "--max_seq_length", "512", "--num_samples", "64",
          "--output_dir", "{job}/hf_out", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
          "2", "--max_steps", "5", "--bf16", "--logging_steps", "1", "--save_strategy", "no", "--report_to",
          "none", "--log_level", "info", "--dataloader_num_workers", "0"]
    s.append(Scenario(
        "config_error_hf_trainer_ds_misspelt_key_gpt2_large_4090",
        "HF Trainer with a hand-written ZeRO-2 ds_config (\"auto\" batch keys) for a GPT-2-large-shaped model "
        "on a 24 GB RTX 4090, where zero_optimization carries the misspelt key \"contigious_gradients\": "
        "DeepSpeed's pydantic config model forbids unknown keys and deepspeed.initialize stops with a "
        "ValidationError before training. The same config with the key spelt contiguous_gradients completes.",
        {"cause": "config_error", "sub_cause": None,
         "why": "pydantic ValidationError from DeepSpeedZeroConfig: extra input 'contigious_gradients' is not "
                "permitted; the correctly spelt key completes the same run"},
        Run("deepspeed", "hf_trainer.py", gl, ds_config=typo, gpu_gib=23.7, host_gib=8, timeout=200,
            capture=False),
        counterfactuals=[("zero_optimization.contiguous_gradients spelt correctly (same cap)",
                          Run("deepspeed", "hf_trainer.py", gl, ds_config=fixed, gpu_gib=23.7, host_gib=8,
                              timeout=240, capture=False))],
        priority=33))

    # ---------------------------------------------------------------- capacity, 16 GiB, Phi-3-mini, ZeRO-2 start-up
    phi = ["--model", "phi3-mini", "--init_device", "cuda", "--emulate_card", "a4000", "--max_steps", "5"]
    s.append(Scenario(
        "capacity_zero2_phi3_mini_initialize_a4000_16g",
        "DeepSpeed ZeRO-2 (no offload) full fine-tune of a Phi-3-mini-shaped model (3.8B, bf16 weights built on "
        "the GPU) on a 16 GB RTX A4000 at micro-batch 4 x 1024: deepspeed.initialize flattens the bf16 weights "
        "(7.1 GiB) and then allocates the fp32 master copy (14.2 GiB) at world size 1, which cannot fit before "
        "any batch. The same run at micro-batch 1 x 64 tokens fails the same way in deepspeed.initialize.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.82B parameters: bf16 weights (7.1 GiB) plus ZeRO-2's fp32 master partition (14.2 GiB) at "
                "world size 1 exceed the 15.22 GiB allowed during deepspeed.initialize, whatever the batch: "
                "micro-batch 1 x 64 fails too"},
        Run("deepspeed", "train.py", phi + ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps",
                                            "4", "--max_seq_length", "1024"],
            ds_config=ds_zero2(micro=4, gas=4), gpu_gib=16.3, host_gib=8, timeout=240, max_entries=8000),
        counterfactuals=[("micro-batch 1 x 64 tokens, gradient accumulation 1 (same cap)",
                          Run("deepspeed", "train.py", phi + ["--per_device_train_batch_size", "1",
                                                              "--gradient_accumulation_steps", "1",
                                                              "--max_seq_length", "64"],
                              ds_config=ds_zero2(micro=1, gas=1), gpu_gib=16.3, host_gib=8, timeout=240,
                              capture=False))],
        priority=34))

    # ---------------------------------------------------------------- host_oom, OPT-1.3B ZeRO-2 offload, cgroup
    o13 = ["--model", "opt-1.3b", "--init_device", "cuda", "--emulate_card", "l4", "--per_device_train_batch_size",
           "2", "--gradient_accumulation_steps", "2", "--max_seq_length", "512", "--max_steps", "3"]
    s.append(Scenario(
        "host_oom_zero2_offload_opt1.3b_cgroup_12g",
        "DeepSpeed ZeRO-2 with offload_optimizer (cpu, pin_memory) and torch AdamW for an OPT-1.3B-shaped model "
        "(built in bf16 on a 24 GB L4) in a container limited to 12 GiB of host RAM: the pinned fp32 master "
        "weights and gradient partition and the CPU AdamW moments (~16 bytes/param, 21 GB) do not fit in the "
        "container and the kernel's OOM killer kills the rank. The same run with a 64 GiB limit completes (host peak 44.5 GiB; "
        "a 40 GiB limit was killed too, at the first optimizer step).",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the rank is killed by signal 9 (cgroup OOM killer) with no CUDA error while the offloaded "
                "optimizer state is built on the host; the same run in a 64 GiB container completes (host peak "
                "44.5 GiB; 40 GiB was killed too)"},
        Run("bash", "ds_cgroup_run.sh", ["12G"] + o13, ds_config=ds_zero2(micro=2, gas=2, offload_optimizer=True),
            gpu_gib=16, host_gib=13, timeout=240, capture=False),
        # the capture's call ran 40G (killed too, at the first optimizer step); 64G and 100G completed in a second
        # call (run.py --reruns tools/capture/reruns_heldout3.json), merged into capture.json
        counterfactuals=[("container limit 64G instead of 12G (same card)",
                          Run("bash", "ds_cgroup_run.sh", ["64G"] + o13,
                              ds_config=ds_zero2(micro=2, gas=2, offload_optimizer=True),
                              gpu_gib=16, host_gib=48, timeout=300, capture=False))],
        priority=35))
    return s


def fourth_set() -> list[Scenario]:
    """The fourth set (2026-12-04, afternoon): Qwen2.5 shapes (151k vocabulary) in the plain loops, on 16 and
    24 GiB cards, defined after that session's refit and never scored before it was frozen."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- leak, 24 GiB, Qwen2.5-0.5B, logits list
    q = ["--model", "qwen2.5-0.5b", "--batch_size", "2", "--seq_len", "512", "--num_samples", "160",
         "--emulate_card", "rtx3090"]
    s.append(Scenario(
        "leak_qwen2.5_0.5b_epoch_logits_3090_24g",
        "Notebook-style fine-tune of a Qwen2.5-0.5B-shaped model on a 24 GB RTX 3090 that keeps every step's "
        "outputs.logits (2 x 512 x 151936 in bf16, 0.29 GiB) on the GPU for the epoch's accuracy; memory "
        "rises by one step's logits per iteration. The same run keeping the argmax on the host completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "allocated memory after each iteration rises by one step's logits until the OOM; keeping "
                "outputs.logits.argmax(-1).detach().cpu() completes the same run under the same cap"},
        Run("python", "epoch_metrics_loop.py", q + ["--keep", "gpu"], gpu_gib=23.7, host_gib=6, timeout=240,
            max_entries=10000),
        counterfactuals=[("keep outputs.logits.argmax(-1).detach().cpu() (same cap)",
                          Run("python", "epoch_metrics_loop.py", q + ["--keep", "argmax_cpu"], gpu_gib=23.7,
                              host_gib=6, capture=False, timeout=240))],
        priority=40))

    # ---------------------------------------------------------------- activation_spike, 24 GiB 4090, Qwen2.5-0.5B
    # (plain_loop keeps its held-out loss's graph unless --val_loss_no_grad: that is sample_logs' leak)
    a = ["--model", "qwen2.5-0.5b", "--seq_len", "1024", "--steps", "8", "--emulate_card", "rtx4090",
         "--val_loss_no_grad"]
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_plain_loop_4090_24g",
        "A plain loop (fp32 weights, fp16 autocast, AdamW) fine-tuning a Qwen2.5-0.5B-shaped model on a 24 GB "
        "RTX 4090 at 8 x 1024 tokens: model states take ~8 GiB, and the activations with the 151936-wide logits "
        "and their fp32 upcast for the loss do not fit beside them. The same run at batch 1 completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit (batch 1 completes under the same cap); the configured micro-batch's "
                "activations and logits do not"},
        Run("python", "plain_loop.py", a + ["--batch_size", "8"], gpu_gib=23.7, host_gib=6, timeout=240,
            max_entries=10000),
        counterfactuals=[("--batch_size 1 (same cap)",
                          Run("python", "plain_loop.py", a + ["--batch_size", "1"], gpu_gib=23.7, host_gib=6,
                              capture=False, timeout=240))],
        priority=41))

    # ---------------------------------------------------------------- capacity, 16 GiB V100, Qwen2.5-1.5B fp32
    c = ["--model", "qwen2.5-1.5b", "--steps", "5", "--emulate_card", "v100-16g", "--val_loss_no_grad"]
    s.append(Scenario(
        "capacity_qwen2.5_1.5b_plain_loop_v100_16g",
        "A plain loop (fp32 weights, fp16 autocast, AdamW) fully fine-tuning a Qwen2.5-1.5B-shaped model on a "
        "16 GB V100 at batch 2 x 512 tokens: 1.54B parameters x 16 bytes of weights, gradients and Adam moments "
        "(~23 GiB) exceed the card whatever the batch. The same run at batch 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "full fine-tuning's model states exceed the 15.27 GiB allowed; batch 1 x 32 tokens runs out of "
                "memory too"},
        Run("python", "plain_loop.py", c + ["--batch_size", "2", "--seq_len", "512"], gpu_gib=15.8, host_gib=8,
            timeout=240, max_entries=8000),
        counterfactuals=[("--batch_size 1 --seq_len 32 (same cap): oom too",
                          Run("python", "plain_loop.py", c + ["--batch_size", "1", "--seq_len", "32"], gpu_gib=15.8,
                              host_gib=8, capture=False, timeout=240))],
        priority=42))
    return s


def fifth_set() -> list[Scenario]:
    """The fifth set (2026-12-04, second session): a 7B full fine-tune on an 80 GiB card, a GPT-2-medium batch
    too large for an 11 GiB card, and an epoch-metrics leak in a GPT-NeoX shape on a 12 GiB card; defined
    after that session's parser changes and refit, and scored as they came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, 80 GiB A100, Llama-2-7B fp32
    c = ["--model", "llama2-7b", "--steps", "3", "--emulate_card", "a100-80g", "--val_loss_no_grad"]
    s.append(Scenario(
        "capacity_llama2_7b_plain_loop_a100_80g",
        "A plain loop (fp32 weights, fp16 autocast, AdamW) fully fine-tuning a Llama-2-7B-shaped model on an 80 GB "
        "A100 at 1 x 256 tokens: 6.7B parameters x 16 bytes of weights, gradients and Adam moments (~100 GiB) "
        "cannot fit in 78.6 GiB whatever the batch. The same run at 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "full fine-tuning's model states exceed the allowed 78.65 GiB; 1 x 32 tokens runs out of memory too"},
        Run("python", "plain_loop.py", c + ["--batch_size", "1", "--seq_len", "256"], gpu_gib=80, host_gib=40,
            timeout=420, max_entries=6000),
        counterfactuals=[("--batch_size 1 --seq_len 32 (same cap): oom too",
                          Run("python", "plain_loop.py", c + ["--batch_size", "1", "--seq_len", "32"], gpu_gib=80,
                              host_gib=40, capture=False, timeout=420))],
        priority=50))

    # ---------------------------------------------------------------- activation_spike, 11 GiB 2080 Ti, GPT-2-medium
    a = ["--model", "gpt2-medium", "--seq_len", "1024", "--steps", "8", "--emulate_card", "rtx2080ti",
         "--val_loss_no_grad"]
    s.append(Scenario(
        "activation_spike_gpt2_medium_plain_loop_2080ti_11g",
        "A plain loop (fp32 weights, fp16 autocast, AdamW) fine-tuning a GPT-2-medium-shaped model on an 11 GB "
        "RTX 2080 Ti at 12 x 1024 tokens: model states take ~5.7 GiB, and the batch's activations with the "
        "50257-wide logits and their fp32 upcast for the loss do not fit beside them. The same run at batch 1 "
        "completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit (batch 1 completes under the same cap); the configured micro-batch's "
                "activations and logits do not"},
        Run("python", "plain_loop.py", a + ["--batch_size", "12"], gpu_gib=11, host_gib=6, timeout=240,
            max_entries=10000),
        counterfactuals=[("--batch_size 1 (same cap)",
                          Run("python", "plain_loop.py", a + ["--batch_size", "1"], gpu_gib=11, host_gib=6,
                              capture=False, timeout=240))],
        priority=51))

    # ---------------------------------------------------------------- leak, 12 GiB 3060, Pythia-410M, logits list
    q = ["--model", "pythia-410m", "--batch_size", "2", "--seq_len", "512", "--num_samples", "400",
         "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "leak_pythia410m_epoch_logits_3060_12g",
        "Notebook-style fine-tune of a Pythia-410M-shaped model (GPT-NeoX) on a 12 GB RTX 3060 that keeps every "
        "step's outputs.logits (2 x 512 x 50304 in bf16) on the GPU for the epoch's accuracy; memory rises by one "
        "step's logits per iteration. The same run keeping the argmax on the host completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "allocated memory after each iteration rises by one step's logits until the OOM; keeping "
                "outputs.logits.argmax(-1).detach().cpu() completes the same run under the same cap"},
        Run("python", "epoch_metrics_loop.py", q + ["--keep", "gpu"], gpu_gib=12, host_gib=6, timeout=300,
            max_entries=10000),
        counterfactuals=[("keep outputs.logits.argmax(-1).detach().cpu() (same cap)",
                          Run("python", "epoch_metrics_loop.py", q + ["--keep", "argmax_cpu"], gpu_gib=12,
                              host_gib=6, capture=False, timeout=300))],
        priority=52))
    return s


def sixth_set() -> list[Scenario]:
    """The sixth set (2026-12-04, second session, after the refit on 738 corpus cases): the HF Trainer with
    its usual console output on Qwen2.5 shapes — an evaluation that keeps every batch's logits, a long-context
    batch, and a 3B full fine-tune — on 22-24 GiB cards; defined before it ran and scored as it came."""
    s: list[Scenario] = []
    q = ["--model", "qwen2.5-0.5b", "--output_dir", "{job}/hf_out", "--optim", "adamw_torch", "--log_level",
         "info"] + _HF

    # ---------------------------------------------------------------- leak, 24 GiB L4, HF Trainer eval logits
    ev = q + ["--model_dtype", "float32", "--init_device", "cuda", "--emulate_card", "l4", "--max_steps", "4",
              "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--max_seq_length", "512",
              "--num_eval_samples", "160", "--eval_strategy", "steps", "--eval_steps", "4",
              "--per_device_eval_batch_size", "4", "--compute_metrics", "accuracy"]
    s.append(Scenario(
        "leak_qwen2.5_0.5b_trainer_eval_logits_l4_24g",
        "HF Trainer fine-tune of a Qwen2.5-0.5B-shaped model (fp32 weights, --bf16) on a 24 GB L4 with an "
        "eval_dataset of 160 x 512 tokens and a compute_metrics: the evaluation at step 4 gathers every eval "
        "batch's 4 x 512 x 151936 logits on the GPU (eval_accumulation_steps unset) until the OOM. The same run "
        "with preprocess_logits_for_metrics keeping logits.argmax(-1) completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "the Trainer's eval loop keeps one batch of logits more at every eval step until the limit; "
                "keeping only the argmax completes the same run"},
        Run("python", "hf_trainer.py", ev, gpu_gib=22, host_gib=8, timeout=300, max_entries=10000),
        counterfactuals=[("preprocess_logits_for_metrics keeps logits.argmax(-1) (same cap)",
                          Run("python", "hf_trainer.py", ev + ["--preprocess_logits_argmax"], gpu_gib=22,
                              host_gib=8, capture=False, timeout=300))],
        priority=60))

    # ---------------------------------------------------------------- activation_spike, 24 GiB 4090, long batch
    sp = q + ["--emulate_card", "rtx4090", "--max_steps", "3", "--max_seq_length", "2048",
              "--gradient_accumulation_steps", "1"]
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_trainer_2k_batch8_4090_24g",
        "HF Trainer fine-tune of a Qwen2.5-0.5B-shaped model in bf16 (adamw_torch) on a 24 GB RTX 4090 at "
        "8 x 2048 tokens: the model states take ~2 GiB, but the batch's activations and the 151936-wide logits "
        "upcast to fp32 for the loss do not fit. The same run at 1 x 2048 completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit (batch 1 completes under the same cap); the configured micro-batch's "
                "activations and logits do not"},
        Run("python", "hf_trainer.py", sp + ["--per_device_train_batch_size", "8"], gpu_gib=23.2, host_gib=8,
            timeout=300, max_entries=10000),
        counterfactuals=[("per_device_train_batch_size=1 (same cap)",
                          Run("python", "hf_trainer.py", sp + ["--per_device_train_batch_size", "1"], gpu_gib=23.2,
                              host_gib=8, capture=False, timeout=300))],
        priority=61))

    # ---------------------------------------------------------------- capacity, 24 GiB 3090, Qwen2.5-3B fp32
    c3 = ["--model", "qwen2.5-3b", "--output_dir", "{job}/hf_out", "--optim", "adamw_torch", "--log_level",
          "info"] + _HF + ["--model_dtype", "float32", "--init_device", "cuda", "--emulate_card", "rtx3090",
                           "--max_steps", "3", "--gradient_accumulation_steps", "1", "--gradient_checkpointing"]
    s.append(Scenario(
        "capacity_qwen2.5_3b_fp32_trainer_3090_24g",
        "HF Trainer full fine-tune of a Qwen2.5-3B-shaped model built in fp32 (--bf16 autocast, adamw_torch, "
        "gradient checkpointing) on a 24 GB RTX 3090 at 2 x 1024 tokens: fp32 weights and gradients (2 x 11.5 "
        "GiB) already fill the card before Adam's two fp32 moments. The same run at 1 x 128 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.09B parameters x 16 bytes of weights, gradients and Adam moments exceed the allowed 23.19 GiB "
                "whatever the batch; 1 x 128 tokens runs out of memory too"},
        Run("python", "hf_trainer.py", c3 + ["--per_device_train_batch_size", "2", "--max_seq_length", "1024"],
            gpu_gib=23.7, host_gib=8, timeout=300, max_entries=8000),
        counterfactuals=[("1 x 128 tokens (same cap): oom too",
                          Run("python", "hf_trainer.py", c3 + ["--per_device_train_batch_size", "1",
                                                                "--max_seq_length", "128"], gpu_gib=23.7,
                              host_gib=8, capture=False, timeout=300))],
        priority=62))
    return s


def seventh_set() -> list[Scenario]:
    """The seventh set (2026-12-04, second session, after the constraints and the last refit): the HF Trainer
    on shapes and cards not used before — a Llama-3.2-1B fp32 full fine-tune on a 12 GiB card, a ViT-Base at
    448 px with a large batch on a 16 GiB card, an OPT-350M evaluation that keeps every batch's logits on a
    12 GiB card; defined before it ran and scored as it came."""
    s: list[Scenario] = []
    hf = ["--optim", "adamw_torch", "--log_level", "info", "--output_dir", "{job}/hf_out"] + _HF

    # ---------------------------------------------------------------- capacity, 12 GiB 4070, Llama-3.2-1B fp32
    c = hf + ["--model", "llama3.2-1b", "--model_dtype", "float32", "--init_device", "cuda", "--emulate_card",
              "rtx4070", "--max_steps", "3", "--gradient_accumulation_steps", "1", "--gradient_checkpointing"]
    s.append(Scenario(
        "capacity_llama3.2_1b_fp32_trainer_4070_12g",
        "HF Trainer full fine-tune of a Llama-3.2-1B-shaped model (GQA) built in fp32 (--bf16 autocast, "
        "adamw_torch, gradient checkpointing) on a 12 GB RTX 4070 at 2 x 512 tokens: 1.24B parameters x 16 bytes "
        "of weights, gradients and Adam moments cannot fit in 11.22 GiB. The same run at 1 x 64 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "full fine-tuning's model states exceed the allowed cap whatever the batch; 1 x 64 tokens runs "
                "out of memory too"},
        Run("python", "hf_trainer.py", c + ["--per_device_train_batch_size", "2", "--max_seq_length", "512"],
            gpu_gib=12, host_gib=8, timeout=300, max_entries=8000),
        counterfactuals=[("1 x 64 tokens (same cap): oom too",
                          Run("python", "hf_trainer.py", c + ["--per_device_train_batch_size", "1",
                                                               "--max_seq_length", "64"], gpu_gib=12, host_gib=8,
                              capture=False, timeout=300))],
        priority=70))

    # ---------------------------------------------------------------- activation_spike, 16 GiB 4080, ViT-B 448 px
    v = hf + ["--task", "image-classification", "--model", "vit-base", "--image_size", "448", "--model_dtype",
              "float32", "--init_device", "cuda", "--emulate_card", "rtx4080", "--num_samples", "2048",
              "--max_steps", "4"]
    s.append(Scenario(
        "activation_spike_vit_base_448_trainer_4080_16g",
        "HF Trainer fine-tune of a ViT-Base/16-shaped image classifier (86M, fp32 weights, --bf16 autocast) at "
        "448 px (785 tokens per image) with per_device_train_batch_size=256 on a 16 GB RTX 4080: the model states "
        "take ~1.4 GiB, the batch's activations do not fit. The same run at batch 16 completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit (batch 16 completes under the same cap); batch 256's activations do not"},
        Run("python", "hf_trainer.py", v + ["--per_device_train_batch_size", "256"], gpu_gib=16.2, host_gib=8,
            timeout=300, max_entries=10000),
        counterfactuals=[("per_device_train_batch_size=16 (same cap)",
                          Run("python", "hf_trainer.py", v + ["--per_device_train_batch_size", "16"], gpu_gib=16.2,
                              host_gib=8, capture=False, timeout=300))],
        priority=71))

    # ---------------------------------------------------------------- leak, 12 GiB 3060, OPT-350M eval logits
    ev = hf + ["--model", "opt-350m", "--model_dtype", "float32", "--init_device", "cuda", "--emulate_card",
               "rtx3060-12g", "--max_steps", "4", "--per_device_train_batch_size", "2",
               "--gradient_accumulation_steps", "2", "--max_seq_length", "1024", "--num_eval_samples", "256",
               "--eval_strategy", "steps", "--eval_steps", "4", "--per_device_eval_batch_size", "8",
               "--compute_metrics", "accuracy"]
    s.append(Scenario(
        "leak_opt350m_trainer_eval_logits_3060_12g",
        "HF Trainer fine-tune of an OPT-350M-shaped model (fp32 weights, --bf16) on a 12 GB RTX 3060 with an "
        "eval set of 256 x 1024 tokens and a compute_metrics: the evaluation at step 4 gathers every eval batch's "
        "8 x 1024 x 50272 logits on the GPU (eval_accumulation_steps unset) until the OOM. The same run with "
        "preprocess_logits_for_metrics keeping logits.argmax(-1) completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "the Trainer's eval loop keeps one batch of logits more at every eval step until the limit; "
                "keeping only the argmax completes the same run"},
        Run("python", "hf_trainer.py", ev, gpu_gib=12, host_gib=8, timeout=300, max_entries=10000),
        counterfactuals=[("preprocess_logits_for_metrics keeps logits.argmax(-1) (same cap)",
                          Run("python", "hf_trainer.py", ev + ["--preprocess_logits_argmax"], gpu_gib=12,
                              host_gib=8, capture=False, timeout=300))],
        priority=72))
    return s


def eighth_set() -> list[Scenario]:
    """The eighth set (2026-12-04, third session): made to measure LEAK003 (a snapshot's live blocks kept from
    earlier steps) on arrival, with a spike and a capacity run it must not fire on — a forward hook keeping a
    middle layer's hidden states of GPT-2 on a 12 GiB card, every step's logits kept on an 8 GiB card,
    T5-base with one long source on the same 8 GiB card, Phi-3-mini in bf16 with AdamW on a 24 GiB card;
    defined before it ran and scored as it came.  A first call (115 s) ran both leaks on GPT-2-medium: neither
    fitted one step under its cap (the counterfactuals ran out of memory too), so their labels were unproven;
    they were discarded and made again on GPT-2-small."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- leak, 12 GiB 3060, GPT-2 hidden hook
    h = ["--model", "gpt2", "--batch_size", "6", "--seq_len", "1024", "--steps", "400",
         "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "leak_gpt2_hidden_hook_3060_12g",
        "Plain PyTorch loop (bf16 autocast, AdamW) training a GPT-2-shaped model (124M, fp32 weights) at "
        "6 x 1024 tokens on a 12 GB RTX 3060; a forward hook on the middle transformer block appends its output "
        "hidden states, on the GPU, to a list every step (the probing / feature-extraction pattern), so each step "
        "leaves 6 x 1024 x 768 activations behind. The same loop keeping .detach().cpu() copies completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "allocated memory rises by one hidden-state tensor per step until the limit; keeping host copies "
                "completes the same 400 steps under the same cap"},
        Run("python", "heldout_loop.py", h + ["--keep_hidden", "gpu"], gpu_gib=11.8, host_gib=8, timeout=300,
            max_entries=10000),
        counterfactuals=[("the hook keeps .detach().cpu() (same cap)",
                          Run("python", "heldout_loop.py", h + ["--keep_hidden", "cpu"], gpu_gib=11.8, host_gib=12,
                              capture=False, timeout=300))],
        priority=80))

    # ---------------------------------------------------------------- leak, 8 GiB 3070, GPT-2 epoch logits
    e = ["--model", "gpt2", "--batch_size", "2", "--seq_len", "512", "--num_samples", "480",
         "--emulate_card", "rtx3070"]
    s.append(Scenario(
        "leak_gpt2_epoch_logits_3070_8g",
        "epoch_metrics_loop.py on a GPT-2 shape (124M, fp32 weights, bf16 autocast, AdamW) at 2 x 512 tokens on an "
        "8 GB RTX 3070, keeping every step's outputs.logits on the GPU for the epoch's token accuracy. The same "
        "loop keeping logits.argmax(-1).cpu() completes the epoch.",
        {"cause": "leak", "sub_cause": None,
         "why": "each step keeps its 2 x 512 x 50257 logits until the limit; keeping the argmax on the host "
                "completes the epoch under the same cap"},
        Run("python", "epoch_metrics_loop.py", e + ["--keep", "gpu"], gpu_gib=8, host_gib=6, timeout=240,
            max_entries=10000),
        counterfactuals=[("keep logits.argmax(-1).cpu() (same cap)",
                          Run("python", "epoch_metrics_loop.py", e + ["--keep", "argmax_cpu"], gpu_gib=8,
                              host_gib=6, capture=False, timeout=240))],
        priority=81))

    # ---------------------------------------------------------------- activation_spike, 8 GiB 3070, T5-base
    t5 = ["--model", "t5-base", "--batch_size", "4", "--min_source_len", "64", "--max_source_len", "256",
          "--min_target_len", "32", "--max_target_len", "96", "--long_source_step", "6", "--long_source_len",
          "2048", "--max_steps", "12", "--emulate_card", "rtx3070"]
    s.append(Scenario(
        "activation_spike_t5_base_long_source_3070_8g",
        "Plain PyTorch seq2seq fine-tune of a T5-base-shaped model (223M) on an 8 GB RTX 3070 with dynamic "
        "padding: ordinary batches are 4 sources of 64-256 tokens; at step 6 one 2048-token source (no "
        "truncation) pads the batch and the encoder's attention scores for 4 x 12 heads x 2048^2, kept for "
        "backward in every layer, no longer fit. The same run truncating sources to 256 tokens completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit and five steps ran; the one 4 x 2048 batch's activations do not; truncation to "
                "256 tokens completes the same run"},
        Run("python", "seq2seq.py", t5, gpu_gib=8, host_gib=6, timeout=240, max_entries=10000),
        counterfactuals=[("sources truncated to 256 tokens (same cap)",
                          Run("python", "seq2seq.py", t5 + ["--max_source_length", "256"], gpu_gib=8, host_gib=6,
                              capture=False, timeout=240))],
        priority=82))

    # ---------------------------------------------------------------- capacity, 24 GiB 4090, Phi-3-mini bf16 AdamW
    c = ["--model", "phi3-mini", "--model_dtype", "bfloat16", "--init_device", "cuda", "--steps", "5",
         "--emulate_card", "rtx4090"]
    s.append(Scenario(
        "capacity_phi3_mini_bf16_adamw_4090_24g",
        "Plain PyTorch loop fully fine-tuning a Phi-3-mini-shaped model (3.8B) built in bf16 on a 24 GB RTX 4090 "
        "with torch.optim.AdamW at 2 x 256 tokens: bf16 weights and gradients (2 x 7.1 GiB) fit, the two AdamW "
        "moments (another 14.2 GiB) created at the first optimizer step cannot. The same run at 1 x 32 tokens "
        "fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.8B parameters x 8 bytes (bf16 weights, gradients and two moments) = 28 GiB > 23.15 GiB allowed, "
                "whatever the batch: 1 x 32 tokens fails too"},
        Run("python", "heldout_loop.py", c + ["--batch_size", "2", "--seq_len", "256"], gpu_gib=24, host_gib=8,
            timeout=300, max_entries=8000),
        counterfactuals=[("1 x 32 tokens (same cap): oom too",
                          Run("python", "heldout_loop.py", c + ["--batch_size", "1", "--seq_len", "32"],
                              gpu_gib=24, host_gib=8, capture=False, timeout=300))],
        priority=83))
    return s


def ninth_set() -> list[Scenario]:
    """The ninth set (2026-12-04, third session, last): defined after that session's changes (LEAK003 and its
    order constraint, the last refit), to score them on arrival — a held-out loss that keeps its graph on a
    Qwen2.5-0.5B shape at 16 GiB, every step's logits kept on an OPT-350M shape at 16 GiB, one 8192-token
    document in a Qwen2.5-0.5B batch at 24 GiB, a Mistral-7B shape in bf16 whose gradients do not fit at
    24 GiB."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- leak, 16 GiB T4, Qwen2.5-0.5B val-loss graph
    v = ["--model", "qwen2.5-0.5b", "--batch_size", "2", "--seq_len", "512", "--val_batch_size", "1",
         "--val_seq_len", "256", "--steps", "200", "--emulate_card", "t4"]
    s.append(Scenario(
        "leak_qwen2.5_0.5b_val_loss_graph_t4_16g",
        "Plain PyTorch loop (fp16 autocast + GradScaler) training a Qwen2.5-0.5B shape at 2 x 512 tokens on a "
        "16 GB T4; each step it also computes a held-out loss without torch.no_grad() and adds the tensor to a "
        "running sum, so every step's evaluation graph stays alive. The same loop with no_grad() and .item() "
        "completes 200 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "every step keeps one evaluation graph until the limit; the no_grad()/.item() loop completes 200 "
                "steps under the same cap"},
        Run("python", "plain_loop.py", v, gpu_gib=15, host_gib=6, timeout=300, max_entries=10000),
        counterfactuals=[("held-out loss under torch.no_grad() summed with .item() (same cap)",
                          Run("python", "plain_loop.py", v + ["--val_loss_no_grad"], gpu_gib=15, host_gib=6,
                              capture=False, timeout=300))],
        priority=90))

    # ---------------------------------------------------------------- leak, 16 GiB A4000, OPT-350M epoch logits
    e = ["--model", "opt-350m", "--batch_size", "4", "--seq_len", "512", "--num_samples", "480",
         "--emulate_card", "a4000"]
    s.append(Scenario(
        "leak_opt350m_epoch_logits_a4000_16g",
        "epoch_metrics_loop.py on an OPT-350M shape (fp32 weights, bf16 autocast, AdamW) at 4 x 512 tokens on a "
        "16 GB RTX A4000, keeping every step's outputs.logits on the GPU for the epoch's token accuracy. The same "
        "loop keeping logits.argmax(-1).cpu() completes the epoch.",
        {"cause": "leak", "sub_cause": None,
         "why": "each step keeps its 4 x 512 x 50272 logits until the limit; keeping the argmax on the host "
                "completes the epoch under the same cap"},
        Run("python", "epoch_metrics_loop.py", e + ["--keep", "gpu"], gpu_gib=16, host_gib=6, timeout=300,
            max_entries=10000),
        counterfactuals=[("keep logits.argmax(-1).cpu() (same cap)",
                          Run("python", "epoch_metrics_loop.py", e + ["--keep", "argmax_cpu"], gpu_gib=16,
                              host_gib=6, capture=False, timeout=300))],
        priority=91))

    # ---------------------------------------------------------------- activation_spike, 24 GiB L4, Qwen2.5-0.5B
    q = ["--model", "qwen2.5-0.5b", "--batch_size", "4", "--seq_len", "512", "--min_seq_len", "256",
         "--long_doc_step", "6", "--long_doc_len", "8192", "--steps", "12", "--emulate_card", "l4"]
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_long_doc_l4_24g",
        "Plain PyTorch loop (bf16 autocast, AdamW) training a Qwen2.5-0.5B shape on a 24 GB L4 with dynamic "
        "padding: ordinary batches are 4 documents of 256-512 tokens; at step 6 one 8192-token document pads the "
        "batch to 4 x 8192 and its logits over the 151936-token vocabulary no longer fit. The same run truncating "
        "documents to 512 tokens completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit and five steps ran; the one 4 x 8192 batch's logits and activations do not; "
                "truncation to 512 tokens completes the same run"},
        Run("python", "heldout_loop.py", q, gpu_gib=22, host_gib=6, timeout=300, max_entries=10000),
        counterfactuals=[("documents truncated to 512 tokens (same cap)",
                          Run("python", "heldout_loop.py", q + ["--truncate", "512"], gpu_gib=22, host_gib=6,
                              capture=False, timeout=300))],
        priority=92))

    # ---------------------------------------------------------------- capacity, 24 GiB 4090, Mistral-7B bf16
    c = ["--model", "mistral-7b", "--model_dtype", "bfloat16", "--init_device", "cuda", "--steps", "3",
         "--emulate_card", "rtx4090"]
    s.append(Scenario(
        "capacity_mistral7b_bf16_backward_4090_24g",
        "Plain PyTorch loop fully fine-tuning a Mistral-7B shape (7.24B, GQA) built in bf16 on a 24 GB RTX 4090: "
        "the bf16 weights (13.5 GiB) fit, their gradients do not — the first backward runs out of memory. The "
        "same run at 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "7.24B parameters x 4 bytes (bf16 weights and gradients) = 27 GiB > 23.15 GiB allowed before any "
                "optimizer state, whatever the batch: 1 x 32 tokens fails too"},
        Run("python", "heldout_loop.py", c + ["--batch_size", "2", "--seq_len", "256"], gpu_gib=24, host_gib=8,
            timeout=300, max_entries=8000),
        counterfactuals=[("1 x 32 tokens (same cap): oom too",
                          Run("python", "heldout_loop.py", c + ["--batch_size", "1", "--seq_len", "32"],
                              gpu_gib=24, host_gib=8, capture=False, timeout=300))],
        priority=93))
    return s


def tenth_set() -> list[Scenario]:
    """The tenth set (2026-12-04, third session): defined after LEAK002 learned to read the concatenation
    buffer from a snapshot, to score that reading on arrival — an HF Trainer evaluation keeping GPT-2-medium's
    logits on a 16 GiB card, and an HF Trainer training step too large for the same card (nothing kept)."""
    s: list[Scenario] = []
    hf = ["--optim", "adamw_torch", "--log_level", "info", "--output_dir", "{job}/hf_out"] + _HF

    # ---------------------------------------------------------------- leak, 16 GiB 4080, GPT-2-medium eval logits
    ev = hf + ["--model", "gpt2-medium", "--model_dtype", "float32", "--init_device", "cuda", "--emulate_card",
               "rtx4080", "--max_steps", "4", "--per_device_train_batch_size", "2",
               "--gradient_accumulation_steps", "2", "--max_seq_length", "1024", "--num_eval_samples", "256",
               "--eval_strategy", "steps", "--eval_steps", "4", "--per_device_eval_batch_size", "8",
               "--compute_metrics", "accuracy"]
    s.append(Scenario(
        "leak_gpt2_medium_trainer_eval_logits_4080_16g",
        "HF Trainer fine-tune of a GPT-2-medium shape (355M, fp32 weights, --bf16) on a 16 GB RTX 4080 with an "
        "eval set of 256 x 1024 tokens and a compute_metrics: the evaluation at step 4 gathers every eval "
        "batch's 8 x 1024 x 50257 logits on the GPU (eval_accumulation_steps unset) until the OOM. The same run "
        "with preprocess_logits_for_metrics keeping logits.argmax(-1) completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "the Trainer's eval loop keeps one batch of logits more at every eval step until the limit; "
                "keeping only the argmax completes the same run"},
        Run("python", "hf_trainer.py", ev, gpu_gib=16, host_gib=8, timeout=300, max_entries=10000),
        counterfactuals=[("preprocess_logits_for_metrics keeps logits.argmax(-1) (same cap)",
                          Run("python", "hf_trainer.py", ev + ["--preprocess_logits_argmax"], gpu_gib=16,
                              host_gib=8, capture=False, timeout=300))],
        priority=100))

    # ---------------------------------------------------------------- activation_spike, 16 GiB 4080, GPT-2-medium
    sp = hf + ["--model", "gpt2-medium", "--model_dtype", "float32", "--init_device", "cuda", "--emulate_card",
               "rtx4080", "--max_steps", "3", "--gradient_accumulation_steps", "1", "--max_seq_length", "1024"]
    s.append(Scenario(
        "activation_spike_gpt2_medium_trainer_batch32_4080_16g",
        "HF Trainer fine-tune of a GPT-2-medium shape (355M, fp32 weights, --bf16, adamw_torch) on a 16 GB RTX "
        "4080 at per_device_train_batch_size=32 x 1024 tokens: the model states (5.3 GiB) fit, the batch's "
        "activations and logits do not. The same run at batch 2 completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit (batch 2 completes under the same cap); batch 32 x 1024's activations do not"},
        Run("python", "hf_trainer.py", sp + ["--per_device_train_batch_size", "32"], gpu_gib=16, host_gib=8,
            timeout=300, max_entries=10000),
        counterfactuals=[("per_device_train_batch_size=2 (same cap)",
                          Run("python", "hf_trainer.py", sp + ["--per_device_train_batch_size", "2"], gpu_gib=16,
                              host_gib=8, capture=False, timeout=300))],
        priority=101))
    return s


def eleventh_set() -> list[Scenario]:
    """The eleventh set (2026-12-04, third session, last): causes this session's sets had not made — a host OOM
    kill while a Qwen2.5-1.5B shape is built on the CPU in a 5 GiB container, and a diffusion-style UNet whose
    forward hook keeps feature maps at 384 px on a 16 GiB card; defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- host_oom, Qwen2.5-1.5B built on the host
    q = ["5G", "python3", "{here}/heldout_loop.py", "--model", "qwen2.5-1.5b", "--batch_size", "2", "--seq_len",
         "256", "--steps", "5", "--emulate_card", "a100-40g"]
    s.append(Scenario(
        "host_oom_qwen2.5_1.5b_host_init_cgroup_5g",
        "A plain loop fine-tuning a Qwen2.5-1.5B shape in a container limited to 5 GiB of host RAM: the model is "
        "built with from_config on the CPU in fp32 (6.2 GB of host memory) before .to('cuda'), and the kernel's "
        "OOM killer kills the process while the weights are initialised. The same run building the model "
        "directly on the GPU completes.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the process is killed by signal 9 (cgroup OOM killer) with no CUDA error while building the "
                "model on the host; building it on the GPU completes under the same 5 GiB limit"},
        Run("bash", "cgroup_run.sh", q + ["--init_device", "cpu"], gpu_gib=40, host_gib=7, capture=False,
            timeout=240),
        counterfactuals=[("model built on the GPU, torch.device('cuda') (same 5 GiB limit)",
                          Run("bash", "cgroup_run.sh", q + ["--init_device", "cuda"], gpu_gib=40, host_gib=7,
                              capture=False, timeout=240))],
        priority=110))

    # ---------------------------------------------------------------- leak, 16 GiB A4000, UNet hook at 384 px
    u = ["--model", "unet", "--batch_size", "4", "--image_size", "384", "--steps", "300", "--emulate_card", "a4000"]
    s.append(Scenario(
        "leak_unet_feature_hook_384px_a4000_16g",
        "Plain PyTorch loop training a diffusion-style UNet (43M) at 4 x 384 x 384 on a 16 GB RTX A4000; a forward "
        "hook appends each step's output feature maps, on the GPU, to a list. The same loop keeping "
        ".detach().cpu() copies completes 300 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "each step keeps one feature map until the limit; keeping host copies completes the same run"},
        Run("python", "heldout_loop.py", u + ["--keep_features", "gpu"], gpu_gib=16, host_gib=8, timeout=300,
            max_entries=8000),
        counterfactuals=[("the hook keeps .detach().cpu() (same cap)",
                          Run("python", "heldout_loop.py", u + ["--keep_features", "cpu"], gpu_gib=16, host_gib=24,
                              capture=False, timeout=300))],
        priority=111))
    return s


def twelfth_set() -> list[Scenario]:
    """The twelfth set (2026-12-04, fourth session): what the held-out captures had least of — a fragmentation
    run on a GQA model (Qwen2.5-0.5B, 152k vocabulary) with dynamic padding, a capacity run at a 40 GiB cap
    (Qwen2.5-3B in fp32 with AdamW) and a vision spike (a UNet at 1024 px on a 16 GiB card); defined before it
    ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- fragmentation, Qwen2.5-0.5B dynamic padding
    q = ["--model", "qwen2.5-0.5b", "--init_device", "cuda", "--batch_size", "4", "--seq_len", "1024",
         "--min_seq_len", "32", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_qwen2.5_0.5b_dynamic_padding",
        "Plain PyTorch causal-LM fine-tune of a Qwen2.5-0.5B-shaped model (494M, GQA, 151,936-token vocabulary, "
        "fp32 weights, bf16 autocast, AdamW) with dynamic padding (4 documents of 32-1024 tokens, each batch "
        "padded to its longest), so every step's activations and logits have new sizes. The memory cap is set "
        "just above what the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "heldout_loop.py", q, gpu_gib=40, host_gib=8, max_entries=12000, timeout=200),
        priority=120, fragmentation_search=True,
        search_variants=[q, q + ["--seed", "7"], q + ["--seed", "99"]]))

    # ---------------------------------------------------------------- capacity, 40 GiB A100, Qwen2.5-3B fp32 AdamW
    c = ["--model", "qwen2.5-3b", "--model_dtype", "float32", "--init_device", "cuda", "--steps", "4",
         "--emulate_card", "a100-40g"]
    s.append(Scenario(
        "capacity_qwen2.5_3b_fp32_adamw_a100_40g",
        "Plain PyTorch loop fully fine-tuning a Qwen2.5-3B-shaped model (3.1B) in fp32 with bf16 autocast and "
        "torch.optim.AdamW on a 40 GB A100 at 2 x 512 tokens: fp32 weights and gradients (2 x 11.5 GiB) fit, the "
        "two AdamW moments created at the first optimizer step (another 23 GiB) cannot. The same run at "
        "1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.1B parameters x 16 bytes (fp32 weights, gradients and two moments) = 46 GiB > 39.4 GiB allowed, "
                "whatever the batch: 1 x 32 tokens fails too"},
        Run("python", "heldout_loop.py", c + ["--batch_size", "2", "--seq_len", "512"], gpu_gib=40, host_gib=10,
            timeout=300, max_entries=8000),
        counterfactuals=[("1 x 32 tokens (same cap): oom too",
                          Run("python", "heldout_loop.py", c + ["--batch_size", "1", "--seq_len", "32"],
                              gpu_gib=40, host_gib=10, capture=False, timeout=300))],
        priority=121))

    # ---------------------------------------------------------------- activation_spike, 16 GiB A4000, UNet 1024 px
    u = ["--model", "unet", "--batch_size", "8", "--steps", "20", "--emulate_card", "a4000"]
    s.append(Scenario(
        "activation_spike_unet_1024px_a4000_16g",
        "Plain PyTorch loop training a diffusion-style UNet (43M) on a 16 GB RTX A4000 at 8 x 1024 x 1024 images: "
        "the model states (under 1 GiB) fit, the full-resolution feature maps kept for backward do not. The same "
        "loop at 8 x 256 x 256 completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit (the 256 px run completes under the same cap); the 1024 px batch's activations "
                "do not"},
        Run("python", "heldout_loop.py", u + ["--image_size", "1024"], gpu_gib=16, host_gib=8, timeout=240,
            max_entries=8000),
        counterfactuals=[("8 x 256 x 256 images (same cap)",
                          Run("python", "heldout_loop.py", u + ["--image_size", "256"], gpu_gib=16, host_gib=8,
                              capture=False, timeout=240))],
        priority=122))
    return s


def thirteenth_set() -> list[Scenario]:
    """The thirteenth set (2026-12-04, fifth session): torch.compile, which no capture used before — the
    failing allocation sits in an inductor-generated ``call`` function (``buf3 = empty_strided_cuda(...)``)
    instead of a module's forward, and the backward runs as AOTAutograd's compiled function.  A spike in a
    compiled forward (one long document) and a capacity run whose OOM comes in the compiled backward; defined
    before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- activation_spike, compiled Qwen2.5-0.5B
    # first attempt (dynamic padding, 8 x 128-256 tokens) hung in step 6 until the 420 s timeout, with no OOM:
    # the batches now have one length, so the compiled graph is static and the long document recompiles once
    q = ["--model", "qwen2.5-0.5b", "--init_device", "cuda", "--compile", "--batch_size", "8", "--seq_len", "256",
         "--min_seq_len", "256", "--long_doc_step", "4", "--long_doc_len", "4096", "--steps", "8",
         "--emulate_card", "rtx4080"]
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_compiled_long_doc_4080_16g",
        "Plain PyTorch causal-LM fine-tune of a Qwen2.5-0.5B-shaped model (494M, fp32 weights, bf16 autocast, "
        "AdamW) wrapped in torch.compile, on a 16 GB RTX 4080: ordinary batches are 8 x "
        "256 tokens; at step 4 one 4,096-token document pads the batch to 8 x 4096 and the 151,936-token "
        "logits no longer fit. The same compiled run with documents truncated to 256 tokens completes; with "
        "expandable_segments:True it fails the same way.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (494M x 16 bytes = 7.4 GiB) fit and three steps ran; the 8 x 4096 batch's "
                "activations and logits do not (truncating to 256 tokens completes under the same cap, and "
                "expandable_segments:True does not: not fragmentation)"},
        Run("python", "heldout_loop.py", q, gpu_gib=16, host_gib=10, timeout=420, max_entries=12000),
        counterfactuals=[("documents truncated to 256 tokens (same cap, compiled)",
                          Run("python", "heldout_loop.py", q + ["--truncate", "256"], gpu_gib=16, host_gib=10,
                              capture=False, timeout=420)),
                         # added after the second run, whose replay served the failing request with expandable
                         # segments: only a whole run under them tells a spike from fragmentation
                         ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (same cap, compiled)",
                          Run("python", "heldout_loop.py", q, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                              gpu_gib=16, host_gib=10, capture=False, timeout=420))],
        priority=130))

    # ---------------------------------------------------------------- capacity, compiled Qwen2.5-3B fp32, 24 GiB
    c = ["--model", "qwen2.5-3b", "--model_dtype", "float32", "--init_device", "cuda", "--compile", "--steps", "4",
         "--emulate_card", "rtx4090"]
    s.append(Scenario(
        "capacity_qwen2.5_3b_compiled_fp32_backward_4090_24g",
        "Plain PyTorch loop fully fine-tuning a Qwen2.5-3B-shaped model (3.1B) built in fp32, wrapped in "
        "torch.compile, with bf16 autocast and AdamW on a 24 GB RTX 4090 at 2 x 512 tokens: the fp32 weights "
        "(11.5 GiB) fit, the fp32 gradients the compiled backward creates (another 11.5 GiB) do not, before the "
        "optimizer ever adds its moments. The same run at 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.1B parameters x 16 bytes (fp32 weights, gradients and two AdamW moments) = 46 GiB > 23.65 GiB "
                "allowed, whatever the batch: 1 x 32 tokens fails too"},
        Run("python", "heldout_loop.py", c + ["--batch_size", "2", "--seq_len", "512"], gpu_gib=24, host_gib=12,
            timeout=420, max_entries=8000),
        counterfactuals=[("1 x 32 tokens (same cap, compiled): oom too",
                          Run("python", "heldout_loop.py", c + ["--batch_size", "1", "--seq_len", "32"],
                              gpu_gib=24, host_gib=12, capture=False, timeout=420))],
        priority=131))
    return s


def fourteenth_set() -> list[Scenario]:
    """The fourteenth set (2026-12-04, sixth session): fragmentation, the cause the held-out captures had least
    of (two of 36), on architectures no fragmentation capture used — a GPT-NeoX shape (Pythia-410M: parallel
    attention, 50k vocabulary, fp32 weights) and a Llama-3.2-1B shape in pure bf16 (128k vocabulary, tied
    embeddings), both with dynamic padding; defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- fragmentation, Pythia-410M dynamic padding
    p = ["--model", "pythia-410m", "--init_device", "cuda", "--batch_size", "4", "--seq_len", "1024",
         "--min_seq_len", "32", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_pythia410m_dynamic_padding",
        "Plain PyTorch causal-LM fine-tune of a Pythia-410M-shaped model (GPT-NeoX, 405M, fp32 weights, bf16 "
        "autocast, AdamW) with dynamic padding (4 documents of 32-1024 tokens, each batch padded to its longest), "
        "so every step's activations and logits have new sizes. The memory cap is set just above what the same "
        "run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "heldout_loop.py", p, gpu_gib=40, host_gib=8, max_entries=12000, timeout=200),
        priority=140, fragmentation_search=True,
        search_variants=[p, p + ["--seed", "7"], p + ["--seed", "99"]]))

    # ---------------------------------------------------------------- fragmentation, Llama-3.2-1B bf16 padding
    q = ["--model", "llama3.2-1b", "--model_dtype", "bfloat16", "--init_device", "cuda", "--batch_size", "4",
         "--seq_len", "1024", "--min_seq_len", "32", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_llama3.2_1b_bf16_dynamic_padding",
        "Plain PyTorch causal-LM fine-tune of a Llama-3.2-1B-shaped model (1.2B, GQA, 128,256-token vocabulary) "
        "built in bf16 (as from_pretrained(torch_dtype=torch.bfloat16) gives), AdamW, with dynamic padding (4 "
        "documents of 32-1024 tokens, each batch padded to its longest). The memory cap is set just above what "
        "the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "heldout_loop.py", q, gpu_gib=40, host_gib=10, max_entries=12000, timeout=200),
        priority=141, fragmentation_search=True,
        search_variants=[q, q + ["--seed", "7"], q + ["--seed", "99"]]))
    return s


def fifteenth_set() -> list[Scenario]:
    """The fifteenth set (2026-12-04, sixth session): DeepSpeed, the runs oompost is first built for, on shapes
    its DeepSpeed captures never used — a ZeRO-2 activation spike (a Qwen2.5-0.5B shape whose 151,936-token
    logits meet one long document) and a ZeRO-2 + optimizer-offload capacity run (a Qwen2.5-3B shape whose bf16
    weights and gradients alone exceed a 12 GB card).  Needs the DeepSpeed wheels
    (../shared/tools/device-wheels.sh); defined before it ran and scored as it came."""
    from scenarios import ds_zero2

    s: list[Scenario] = []

    # ---------------------------------------------------------------- activation_spike, ZeRO-2, long document
    q = ["--model", "qwen2.5-0.5b", "--init_device", "cuda", "--emulate_card", "rtx4090",
         "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--max_seq_length", "512",
         "--max_steps", "6"]
    s.append(Scenario(
        "activation_spike_zero2_qwen2.5_0.5b_long_doc_4090_24g",
        "DeepSpeed ZeRO-2 (bf16, no offload) fine-tune of a Qwen2.5-0.5B-shaped model (494M) on a 24 GB RTX 4090 "
        "at micro-batch 4 x 512 tokens; at step 3 one 8,192-token document pads its micro-batch to 4 x 8192 and "
        "the 151,936-token logits (and their fp32 loss) no longer fit. The same run without the long document "
        "completes; with expandable_segments:True the long batch fails the same way.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (494M under ZeRO-2 at world size 1, about 8 GiB) fit and the ordinary steps ran; "
                "the 4 x 8192 micro-batch's logits do not (without it the run completes under the same cap, and "
                "expandable_segments:True does not help: not fragmentation)"},
        Run("deepspeed", "train.py", q + ["--long_batch_at_step", "3", "--long_batch_length", "8192"],
            ds_config=ds_zero2(micro=4, gas=2), gpu_gib=24.2, host_gib=10, timeout=300, max_entries=10000),
        counterfactuals=[("no long document: every micro-batch 4 x 512 (same cap)",
                          Run("deepspeed", "train.py", q, ds_config=ds_zero2(micro=4, gas=2), gpu_gib=24.2,
                              host_gib=10, timeout=300, capture=False)),
                         ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (same cap, long document)",
                          Run("deepspeed", "train.py", q + ["--long_batch_at_step", "3", "--long_batch_length",
                                                            "8192"],
                              env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                              ds_config=ds_zero2(micro=4, gas=2), gpu_gib=24.2, host_gib=10, timeout=300,
                              capture=False))],
        priority=150))

    # ---------------------------------------------------------------- capacity, ZeRO-2 + offload, Qwen2.5-3B, 12 GB
    c = ["--model", "qwen2.5-3b", "--init_device", "cuda", "--skip_weight_init", "--emulate_card", "rtx3060-12g",
         "--max_steps", "3"]
    s.append(Scenario(
        "capacity_zero2_offload_qwen2.5_3b_3060_12g",
        "DeepSpeed ZeRO-2 with offload_optimizer to the CPU, full fine-tune of a Qwen2.5-3B-shaped model (3.1B, "
        "bf16) on a 12 GB RTX 3060 at micro-batch 2 x 512: the optimizer state lives on the host, but the bf16 "
        "weights (5.8 GiB) and ZeRO-2's bf16 gradient partition (5.8 GiB at world size 1) stay on the GPU and "
        "exceed the card. The same run at micro-batch 1 x 64 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.1B parameters x (2 bytes of bf16 weights + 2 bytes of bf16 gradients) = 11.5 GiB on the GPU "
                "with the optimizer offloaded, more than the 11.76 GiB allowed leaves once anything else is "
                "allocated, whatever the batch: micro-batch 1 x 64 fails too"},
        Run("deepspeed", "train.py", c + ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
                                          "2", "--max_seq_length", "512"],
            ds_config=ds_zero2(micro=2, gas=2, offload_optimizer=True), gpu_gib=12.3, host_gib=48, timeout=420,
            max_entries=8000),
        counterfactuals=[("micro-batch 1 x 64 tokens, gradient accumulation 1 (same cap)",
                          Run("deepspeed", "train.py", c + ["--per_device_train_batch_size", "1",
                                                            "--gradient_accumulation_steps", "1",
                                                            "--max_seq_length", "64"],
                              ds_config=ds_zero2(micro=1, gas=1, offload_optimizer=True), gpu_gib=12.3,
                              host_gib=48, timeout=420, capture=False))],
        priority=151))
    return s


def sixteenth_set() -> list[Scenario]:
    """The sixteenth set (2026-12-04, sixth session): PyTorch FSDP2 (``fully_shard`` per decoder layer, bf16
    compute, fp32 reduction), a driver no capture had used, launched with torchrun (world size 1: nothing is
    sharded, as on N GPUs for a model N times larger) — a capacity run (a Qwen2.5-3B shape whose fp32 weights,
    gradients and AdamW moments exceed a 40 GB A100) and a spike (a Llama-3.2-1B shape meeting one long document
    on the same card); defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, FSDP2, Qwen2.5-3B, 40 GB
    c = ["--model", "qwen2.5-3b", "--emulate_card", "a100-40g", "--steps", "3"]
    s.append(Scenario(
        "capacity_fsdp2_qwen2.5_3b_a100_40g",
        "FSDP2 (fully_shard, bf16 compute, fp32 reduction) full fine-tune of a Qwen2.5-3B-shaped model (3.1B, "
        "fp32 parameters) with AdamW on a 40 GB A100 at 2 x 512 tokens, launched with torchrun at world size 1: "
        "fp32 weights and gradients (2 x 11.5 GiB) and AdamW's two moments (another 23 GiB) exceed the card. The "
        "same run at 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.1B parameters x 16 bytes (fp32 weights, gradients and two AdamW moments) = 46 GiB > the 40 GB "
                "card, whatever the batch: 1 x 32 tokens fails too"},
        Run("torchrun", "fsdp_loop.py", c + ["--batch_size", "2", "--seq_len", "512"], gpu_gib=40.5, host_gib=10,
            timeout=300, max_entries=8000),
        counterfactuals=[("1 x 32 tokens (same cap): oom too",
                          Run("torchrun", "fsdp_loop.py", c + ["--batch_size", "1", "--seq_len", "32"],
                              gpu_gib=40.5, host_gib=10, capture=False, timeout=300))],
        priority=160))

    # ---------------------------------------------------------------- activation_spike, FSDP2, Llama-3.2-1B
    q = ["--model", "llama3.2-1b", "--emulate_card", "a100-40g", "--batch_size", "4", "--seq_len", "512",
         "--steps", "5"]
    s.append(Scenario(
        "activation_spike_fsdp2_llama3.2_1b_long_doc_a100_40g",
        "FSDP2 (fully_shard, bf16 compute, fp32 reduction) fine-tune of a Llama-3.2-1B-shaped model (1.2B, fp32 "
        "parameters, 128,256-token vocabulary) with AdamW on a 40 GB A100, launched with torchrun: ordinary "
        "batches are 4 x 512 tokens; at step 3 one 8,192-token document pads the batch to 4 x 8192 and its "
        "logits no longer fit. The same run without the long document completes; with expandable_segments:True "
        "the long batch fails the same way.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (1.24B x 16 bytes = 18.5 GiB) fit and two steps ran; the 4 x 8192 batch's logits "
                "do not (without it the run completes under the same cap; expandable_segments:True does not "
                "help: not fragmentation)"},
        Run("torchrun", "fsdp_loop.py", q + ["--long_doc_step", "3", "--long_doc_len", "8192"], gpu_gib=40.5,
            host_gib=10, timeout=300, max_entries=10000),
        counterfactuals=[("no long document: every batch 4 x 512 (same cap)",
                          Run("torchrun", "fsdp_loop.py", q, gpu_gib=40.5, host_gib=10, capture=False,
                              timeout=300)),
                         ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (same cap, long document)",
                          Run("torchrun", "fsdp_loop.py", q + ["--long_doc_step", "3", "--long_doc_len", "8192"],
                              env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, gpu_gib=40.5,
                              host_gib=10, capture=False, timeout=300))],
        priority=161))
    return s


def seventeenth_set() -> list[Scenario]:
    """The seventeenth set (2026-12-04, seventh session): a loop written as users write one
    (``tutorial_loop.py``: ``logging`` in the HF example scripts' format, a ``tqdm`` bar, a padding
    ``DataLoader``) that records memory the way PyTorch's tutorial says, ``_record_memory_history`` and
    ``_dump_snapshot`` in its OOM handler, so the snapshots carry no ``oompost_meta`` and the console no
    oompost-shaped line.  Defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, GPT-2-large fp32, 11 GB
    c = ["--model", "gpt2-large", "--emulate_card", "rtx2080ti", "--steps", "5"]
    s.append(Scenario(
        "capacity_gpt2_large_fp32_adamw_tutorial_2080ti_11g",
        "Full fine-tune of a GPT-2-large-shaped model (774M, fp32 weights, bf16 autocast, torch AdamW) on an 11 GB "
        "RTX 2080 Ti at 4 x 512 tokens: fp32 weights and gradients (2 x 2.9 GiB) and AdamW's two moments "
        "(5.8 GiB) are 11.5 GiB, more than the card, so the first optimizer step cannot create its state. The "
        "same run at 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "774M parameters x 16 bytes (fp32 weights, gradients, exp_avg, exp_avg_sq) = 11.5 GiB > 10.75 GiB "
                "allowed, whatever the batch: 1 x 32 tokens fails too"},
        Run("python", "tutorial_loop.py", c + ["--batch_size", "4", "--max_len", "512"], gpu_gib=11.3, host_gib=6,
            timeout=240, max_entries=100000),
        counterfactuals=[("1 x 32 tokens (same cap): oom too",
                          Run("python", "tutorial_loop.py", c + ["--batch_size", "1", "--max_len", "32"],
                              gpu_gib=11.3, host_gib=6, capture=False, timeout=240))],
        priority=170))

    # ---------------------------------------------------------------- activation_spike, Llama-3.2-1B, 40 GB
    q = ["--model", "llama3.2-1b", "--emulate_card", "a100-40g", "--batch_size", "8", "--min_len", "64",
         "--max_len", "256", "--steps", "8"]
    s.append(Scenario(
        "activation_spike_llama3.2_1b_long_doc_tutorial_a100_40g",
        "Fine-tune of a Llama-3.2-1B-shaped model (1.24B, fp32 weights, bf16 autocast, AdamW, 128,256-token "
        "vocabulary) on a 40 GB A100 with a padding DataLoader: batches are 8 samples of 64-256 tokens; the "
        "fourth batch holds one 4,096-token sample, is padded to 8 x 4096, and its logits and activations no "
        "longer fit. The same run with samples truncated to 256 tokens completes; with "
        "expandable_segments:True the long batch fails the same way.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (1.24B x 16 bytes = 18.4 GiB) fit and three steps ran; the 8 x 4096 batch does not "
                "(truncated to 256 tokens the run completes under the same cap; expandable_segments:True does not "
                "help: not fragmentation)"},
        Run("python", "tutorial_loop.py", q + ["--long_doc_step", "4", "--long_doc_len", "4096"], gpu_gib=40,
            host_gib=8, timeout=240, max_entries=100000),
        counterfactuals=[("samples truncated to 256 tokens (same cap)",
                          Run("python", "tutorial_loop.py",
                              q + ["--long_doc_step", "4", "--long_doc_len", "4096", "--truncate", "256"],
                              gpu_gib=40, host_gib=8, capture=False, timeout=240)),
                         ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (same cap, long sample)",
                          Run("python", "tutorial_loop.py", q + ["--long_doc_step", "4", "--long_doc_len", "4096"],
                              env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, gpu_gib=40,
                              host_gib=8, capture=False, timeout=240))],
        priority=171))

    # ---------------------------------------------------------------- leak, GPT-2-medium, eval loss kept with its graph
    # (first defined as "total_loss += loss" after backward: it completed 20 steps under the cap — backward had
    # already freed the saved activations, so it was no leak; kept out of the captures, redefined as below)
    k = ["--model", "gpt2-medium", "--emulate_card", "t4", "--batch_size", "2", "--max_len", "256", "--steps", "40",
         "--eval_every", "1", "--log_memory", "2"]
    s.append(Scenario(
        "leak_gpt2_medium_eval_loss_graph_tutorial_t4_16g",
        "Fine-tune of a GPT-2-medium-shaped model (355M, fp32 weights, bf16 autocast, AdamW) on a 16 GB T4 at "
        "2 x 256 tokens that scores a held-out batch after every step with autograd on and sums its loss as a "
        "tensor (eval_total += model(**batch).loss): every evaluation's graph and saved activations stay alive "
        "until the card is full. It logs memory_allocated every 2 steps. The same run evaluating under "
        "torch.no_grad() with loss.item() completes 40 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "each evaluation keeps its graph through eval_total, so allocated memory grows step after step "
                "until the OOM; under torch.no_grad() with .item() all 40 steps complete under the same cap"},
        Run("python", "tutorial_loop.py", k + ["--eval_loss", "tensor"], gpu_gib=15.2, host_gib=6, timeout=240,
            max_entries=100000),
        counterfactuals=[("evaluation under torch.no_grad(), eval_total += loss.item() (same cap)",
                          Run("python", "tutorial_loop.py", k + ["--eval_loss", "item"], gpu_gib=15.2,
                              host_gib=6, capture=False, timeout=240))],
        priority=172))

    # ---------------------------------------------------------------- capacity, Mistral-7B fp32, 80 GB
    m = ["--model", "mistral-7b", "--emulate_card", "a100-80g", "--steps", "3"]
    s.append(Scenario(
        "capacity_mistral7b_fp32_adamw_tutorial_a100_80g",
        "Full fine-tune of a Mistral-7B-shaped model (7.24B, fp32 weights, bf16 autocast, torch AdamW) on an "
        "80 GB A100 at 2 x 512 tokens: fp32 weights and gradients (2 x 27 GiB) fit, AdamW's two moments "
        "(another 54 GiB) do not, so the first optimizer step fails. The same run at 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "7.24B parameters x 16 bytes (fp32 weights, gradients, exp_avg, exp_avg_sq) = 108 GiB > 79 GiB "
                "allowed, whatever the batch: 1 x 32 tokens fails too"},
        Run("python", "tutorial_loop.py", m + ["--batch_size", "2", "--max_len", "512"], gpu_gib=80, host_gib=8,
            timeout=300, max_entries=100000),
        counterfactuals=[("1 x 32 tokens (same cap): oom too",
                          Run("python", "tutorial_loop.py", m + ["--batch_size", "1", "--max_len", "32"],
                              gpu_gib=80, host_gib=8, capture=False, timeout=300))],
        priority=174))

    # ---------------------------------------------------------------- fragmentation, OPT-350m dynamic padding
    f = ["--model", "opt-350m", "--batch_size", "8", "--min_len", "32", "--max_len", "1024", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_opt350m_dynamic_padding_tutorial",
        "Fine-tune of an OPT-350m-shaped model (fp32 weights, bf16 autocast, AdamW) with a padding DataLoader "
        "(8 samples of 32-1024 tokens, each batch padded to its longest), so every step's activations have new "
        "sizes. The memory cap is set just above what the same run needs with expandable_segments:True, which "
        "completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "tutorial_loop.py", f, gpu_gib=30, host_gib=8, max_entries=100000, timeout=200),
        priority=173, fragmentation_search=True,
        search_variants=[f, f + ["--seed", "7"]]))
    return s


def eighteenth_set() -> list[Scenario]:
    """The eighteenth set (2026-12-04, seventh session): the tutorial loop under allocator settings users turn
    on themselves — cudaMallocAsync (its own OOM message, no snapshot), expandable segments already on — and a
    snapshot dumped after the OOM handler has let the failing step's tensors go; a second fragmentation
    capture of that loop.  Defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, cudaMallocAsync, GPT-2-large
    c = ["--model", "gpt2-large", "--emulate_card", "rtx3060-12g", "--steps", "5"]
    asyn = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    s.append(Scenario(
        "capacity_gpt2_large_fp32_cudamallocasync_tutorial_3060_12g",
        "Full fine-tune of a GPT-2-large-shaped model (774M, fp32 weights, bf16 autocast, torch AdamW) at 4 x 512 "
        "tokens on a 12 GB RTX 3060 with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (CUDA's own pool "
        "allocator: its OOM message, no allocator history, so no snapshot): fp32 weights, gradients and AdamW's "
        "moments need 11.5 GiB before any activation. The same run at 1 x 32 tokens fails too.",
        {"cause": "capacity", "sub_cause": None,
         "why": "774M parameters x 16 bytes = 11.5 GiB of model states against 11.26 GiB allowed, whatever the "
                "batch: 1 x 32 tokens fails too"},
        Run("python", "tutorial_loop.py", c + ["--batch_size", "4", "--max_len", "512"], env=asyn, gpu_gib=12.3,
            host_gib=6, timeout=240, capture=False),
        counterfactuals=[("1 x 32 tokens (same cap, same allocator): oom too",
                          Run("python", "tutorial_loop.py", c + ["--batch_size", "1", "--max_len", "32"], env=asyn,
                              gpu_gib=12.3, host_gib=6, capture=False, timeout=240))],
        priority=180))

    # ---------------------------------------------------------------- activation_spike, expandable segments on
    q = ["--model", "qwen2.5-1.5b", "--emulate_card", "a100-40g", "--batch_size", "8", "--min_len", "64",
         "--max_len", "256", "--steps", "8", "--long_doc_step", "5", "--long_doc_len", "4096"]
    exp = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    s.append(Scenario(
        "activation_spike_qwen2.5_1.5b_long_doc_expandable_tutorial_a100_40g",
        "Fine-tune of a Qwen2.5-1.5B-shaped model (1.54B, fp32 weights, bf16 autocast, AdamW, 151,936-token "
        "vocabulary) on a 40 GB A100 with expandable_segments:True already set, batches of 8 samples of 64-256 "
        "tokens; the fifth batch holds one 4,096-token sample and its logits and activations no longer fit. "
        "Truncated to 256 tokens the same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (1.54B x 16 bytes = 23 GiB) fit and four steps ran; the 8 x 4096 batch does not, "
                "with expandable segments already on; truncated to 256 tokens the run completes under the same cap"},
        Run("python", "tutorial_loop.py", q, env=exp, gpu_gib=40, host_gib=8, timeout=240, max_entries=100000),
        counterfactuals=[("samples truncated to 256 tokens (same cap, expandable segments)",
                          Run("python", "tutorial_loop.py", q + ["--truncate", "256"], env=exp, gpu_gib=40,
                              host_gib=8, capture=False, timeout=240))],
        priority=181))

    # ---------------------------------------------------------------- leak, snapshot dumped after the handler
    k = ["--model", "qwen2.5-0.5b", "--emulate_card", "t4", "--batch_size", "2", "--max_len", "256", "--steps", "40",
         "--eval_every", "1", "--log_memory", "1", "--dump_after"]
    s.append(Scenario(
        "leak_qwen2.5_0.5b_eval_loss_graph_dump_after_tutorial_t4_16g",
        "Fine-tune of a Qwen2.5-0.5B-shaped model (fp32 weights, bf16 autocast, AdamW) on a 16 GB T4 at 2 x 256 "
        "tokens that scores a held-out batch after every step with autograd on and sums its loss as a tensor: "
        "every evaluation's graph stays alive until the card is full. It logs memory_allocated every step; its "
        "snapshot is dumped after the OOM handler (the traceback printed, the failing step's tensors released). "
        "Evaluating under torch.no_grad() with loss.item(), the run completes 40 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "each evaluation keeps its graph through eval_total, so allocated memory grows step after step "
                "until the OOM; under torch.no_grad() with .item() all 40 steps complete under the same cap"},
        Run("python", "tutorial_loop.py", k + ["--eval_loss", "tensor"], gpu_gib=15.2, host_gib=6, timeout=240,
            max_entries=100000),
        counterfactuals=[("evaluation under torch.no_grad(), eval_total += loss.item() (same cap)",
                          Run("python", "tutorial_loop.py", k + ["--eval_loss", "item"], gpu_gib=15.2, host_gib=6,
                              capture=False, timeout=240))],
        priority=182))

    # ---------------------------------------------------------------- fragmentation, GPT-2-medium dynamic padding
    f = ["--model", "gpt2-medium", "--batch_size", "8", "--min_len", "32", "--max_len", "1024", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_gpt2_medium_dynamic_padding_tutorial",
        "Fine-tune of a GPT-2-medium-shaped model (fp32 weights, bf16 autocast, AdamW) with a padding DataLoader "
        "(8 samples of 32-1024 tokens, each batch padded to its longest). The memory cap is set just above what "
        "the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "tutorial_loop.py", f, gpu_gib=30, host_gib=8, max_entries=100000, timeout=200),
        priority=183, fragmentation_search=True,
        search_variants=[f, f + ["--seed", "7"]]))
    return s


def nineteenth_set() -> list[Scenario]:
    """The nineteenth set (2026-12-05, ninth session): two more fragmentation searches on the tutorial loop, after
    the eighteenth set's GPT-2-medium search did not reproduce (its native allocator completed under caps 0.5% and
    2% above the expandable peak).  Longer padded batches and other shapes, three variants each.  Defined before
    it ran and scored as it came."""
    s: list[Scenario] = []
    why = ("the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block is large "
           "enough; expandable_segments:True completes the same run under the same cap")

    # ---------------------------------------------------------------- fragmentation, Pythia-410m dynamic padding
    f = ["--model", "pythia-410m", "--batch_size", "8", "--min_len", "16", "--max_len", "2048", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_pythia410m_long_padding_tutorial",
        "Fine-tune of a Pythia-410m-shaped GPT-NeoX model (fp32 weights, bf16 autocast, AdamW) with a padding "
        "DataLoader (8 samples of 16-2048 tokens, each batch padded to its longest). The memory cap is set just above "
        "what the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None, "why": why},
        Run("python", "tutorial_loop.py", f, gpu_gib=40, host_gib=8, max_entries=100000, timeout=200),
        priority=190, fragmentation_search=True,
        search_variants=[f, f + ["--seed", "7"], f[:3] + ["12"] + f[4:]]))

    # ---------------------------------------------------------------- fragmentation, Qwen2.5-0.5B dynamic padding
    q = ["--model", "qwen2.5-0.5b", "--batch_size", "4", "--min_len", "32", "--max_len", "2048", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_qwen2.5_0.5b_long_padding_tutorial",
        "Fine-tune of a Qwen2.5-0.5B-shaped model (fp32 weights, bf16 autocast, AdamW, 151,936-token vocabulary) with "
        "a padding DataLoader (4 samples of 32-2048 tokens, padded per batch). The memory cap is set just above what "
        "the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None, "why": why},
        Run("python", "tutorial_loop.py", q, gpu_gib=40, host_gib=8, max_entries=100000, timeout=200),
        priority=191, fragmentation_search=True,
        search_variants=[q, q + ["--seed", "7"], q[:3] + ["6"] + q[4:]]))
    return s


def twentieth_set() -> list[Scenario]:
    """The twentieth set (2026-12-05, tenth session): the tutorial loop with gradient checkpointing already on and
    one very long document; a running loss summed as a tensor (the classic leak) in a bf16 model; a third
    long-padding fragmentation search on another shape.  Defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- activation_spike, checkpointing already on
    q = ["--model", "qwen2.5-1.5b", "--model_dtype", "bfloat16", "--gradient_checkpointing", "--emulate_card",
         "rtx4090", "--batch_size", "4", "--min_len", "128", "--max_len", "512", "--steps", "8",
         "--long_doc_step", "5", "--long_doc_len", "16384"]
    s.append(Scenario(
        "activation_spike_qwen2.5_1.5b_bf16_ckpt_long_doc_tutorial_4090_24g",
        "Fine-tune of a Qwen2.5-1.5B-shaped model (bf16 weights and AdamW moments, gradient checkpointing on) on a "
        "24 GB RTX 4090 at 4 samples of 128-512 tokens; the fifth batch holds one 16,384-token sample, so the padded "
        "batch's logits (4 x 16,384 x 151,936) no longer fit although checkpointing is already on. Truncated to "
        "512 tokens the same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (1.54B x 8 bytes = 11.5 GiB) fit and four steps ran; the long batch's logits and "
                "loss do not, with checkpointing already on; truncated to 512 tokens the run completes under the "
                "same cap"},
        Run("python", "tutorial_loop.py", q, gpu_gib=24.5, host_gib=8, timeout=240, max_entries=100000),
        counterfactuals=[("samples truncated to 512 tokens (same cap)",
                          Run("python", "tutorial_loop.py", q + ["--truncate", "512"], gpu_gib=24.5, host_gib=8,
                              capture=False, timeout=240))],
        priority=200))

    # ---------------------------------------------------------------- leak, running loss kept as a tensor
    k = ["--model", "llama3.2-1b", "--model_dtype", "bfloat16", "--emulate_card", "rtx4090", "--batch_size", "4",
         "--max_len", "512", "--steps", "40", "--log_memory", "1"]
    s.append(Scenario(
        "leak_llama3.2_1b_bf16_running_loss_tensor_tutorial_4090_24g",
        "Fine-tune of a Llama-3.2-1B-shaped model (bf16 weights and AdamW moments) on a 24 GB RTX 4090 at 4 x 512 "
        "tokens whose loop sums its running loss as a tensor (total_loss += loss): every step's autograd graph "
        "stays alive until the card is full. It logs memory_allocated every step. With loss.item() the run "
        "completes 40 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "each step's graph is kept through total_loss, so allocated memory grows step after step until "
                "the OOM; with .item() all 40 steps complete under the same cap"},
        Run("python", "tutorial_loop.py", k + ["--running_loss", "tensor"], gpu_gib=24.5, host_gib=8, timeout=240,
            max_entries=100000),
        counterfactuals=[("total_loss += loss.item() (same cap)",
                          Run("python", "tutorial_loop.py", k + ["--running_loss", "item"], gpu_gib=24.5,
                              host_gib=8, capture=False, timeout=240))],
        priority=201))

    # ---------------------------------------------------------------- fragmentation, OPT-350m long padding
    f = ["--model", "opt-350m", "--batch_size", "8", "--min_len", "16", "--max_len", "2048", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_opt350m_long_padding_tutorial",
        "Fine-tune of an OPT-350m-shaped model (fp32 weights, bf16 autocast, AdamW) with a padding DataLoader "
        "(8 samples of 16-2048 tokens, each batch padded to its longest). The memory cap is set just above what the "
        "same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "tutorial_loop.py", f, gpu_gib=40, host_gib=8, max_entries=100000, timeout=200),
        priority=202, fragmentation_search=True,
        search_variants=[f, f + ["--seed", "7"], f[:3] + ["12"] + f[4:]]))
    return s


def twenty_first_set() -> list[Scenario]:
    """The twenty-first set (2026-12-05, thirteenth session): a LoRA fine-tune of a 7B model in bf16 on a 16 GB
    card through the HF Trainer, without gradient checkpointing (the weights take 86% of the card); a real leak
    from retain_graph=True with a running loss kept as a tensor (the twentieth set's running loss alone freed its
    saved tensors); a fragmentation search on a bf16 GQA model with checkpointing on.  Defined before it ran and
    scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- activation_spike, LoRA 7B, 16 GB
    m = ["--model", "mistral-7b", "--model_dtype", "bfloat16", "--init_device", "cuda", "--lora_r", "16",
         "--emulate_card", "a4000", "--max_seq_length", "1024", "--per_device_train_batch_size", "1",
         "--output_dir", "{job}/hf_out", "--max_steps", "6", "--optim", "adamw_torch", "--log_level", "info"] + _HF
    s.append(Scenario(
        "activation_spike_mistral7b_lora_bf16_hf_trainer_a4000_16g",
        "HF Trainer LoRA fine-tune (r=16 on q/k/v/o) of a Mistral-7B-shaped model (GQA, bf16 weights) on a 16 GB "
        "RTX A4000 at 1 x 1,024 tokens without gradient checkpointing: the frozen bf16 weights (13.5 GiB) fit, "
        "the first step's forward activations do not. With --gradient_checkpointing the same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states (7.2B x 2 bytes of frozen weights + LoRA adapters) fit under 15.72 GiB; the "
                "activations of 32 layers at 1,024 tokens do not; gradient checkpointing completes the run under "
                "the same cap"},
        Run("python", "hf_trainer.py", m, gpu_gib=16.5, host_gib=12, timeout=300, max_entries=30000),
        counterfactuals=[("--gradient_checkpointing (same cap)",
                          Run("python", "hf_trainer.py", m + ["--gradient_checkpointing"], gpu_gib=16.5,
                              host_gib=12, capture=False, timeout=300))],
        priority=210))

    # ---------------------------------------------------------------- leak, retain_graph=True + running loss
    k = ["--model", "pythia-410m", "--emulate_card", "t4", "--batch_size", "2", "--max_len", "256",
         "--steps", "40", "--log_memory", "1", "--retain_graph"]
    s.append(Scenario(
        "leak_pythia410m_retain_graph_running_loss_tutorial_t4_16g",
        "Fine-tune of a Pythia-410m-shaped GPT-NeoX model (fp32 weights, bf16 autocast, AdamW) on a 16 GB T4 at "
        "2 x 256 tokens whose loop calls loss.backward(retain_graph=True) and sums its running loss as a tensor "
        "(total_loss += loss): every step's graph and saved activations stay alive until the card is full. It "
        "logs memory_allocated every step. With total_loss += loss.item() the run completes 40 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "each step's retained graph is kept through total_loss, so allocated memory grows step after step "
                "until the OOM; with .item() all 40 steps complete under the same cap"},
        Run("python", "tutorial_loop.py", k + ["--running_loss", "tensor"], gpu_gib=15.5, host_gib=8, timeout=240,
            max_entries=100000),
        counterfactuals=[("total_loss += loss.item() (same cap, retain_graph still on)",
                          Run("python", "tutorial_loop.py", k + ["--running_loss", "item"], gpu_gib=15.5,
                              host_gib=8, capture=False, timeout=240))],
        priority=211))

    # ---------------------------------------------------------------- fragmentation, Llama-3.2-1B bf16 + ckpt
    f = ["--model", "llama3.2-1b", "--model_dtype", "bfloat16", "--gradient_checkpointing", "--batch_size", "8",
         "--min_len", "16", "--max_len", "2048", "--steps", "30"]
    s.append(Scenario(
        "fragmentation_llama3.2_1b_bf16_ckpt_long_padding_tutorial",
        "Fine-tune of a Llama-3.2-1B-shaped model (bf16 weights and AdamW moments, gradient checkpointing on) "
        "with a padding DataLoader (8 samples of 16-2048 tokens, each batch padded to its longest). The memory "
        "cap is set just above what the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "tutorial_loop.py", f, gpu_gib=40, host_gib=8, max_entries=100000, timeout=200),
        priority=212, fragmentation_search=True,
        search_variants=[f, f + ["--seed", "7"], f[:6] + ["6"] + f[7:]]))
    return s


def _torchrun_tee(port: int, script: str, args: list[str]) -> list[str]:
    """A one-process torchrun with --tee 3: every line of the rank's stdout/stderr comes back prefixed
    "[default0]:", as multi-rank logs posted from torchrun jobs show them."""
    return ["python3", "-m", "torch.distributed.run", "--nproc_per_node", "1", "--tee", "3", "--master_port",
            str(port), "{here}/" + script] + args


def twenty_second_set() -> list[Scenario]:
    """The twenty-second set (2026-12-05, thirteenth session): the same loops launched through torchrun with
    --tee 3, so every line the rank prints carries torchrun's "[default0]:" prefix and the launcher adds its own
    failure report: a DDP full fine-tune that cannot fit a 40 GB card, a DDP loop whose configured batch's
    activations do not fit a 16 GB card, and a host-RAM kill (cgroup) of a model built on the host.  Defined
    before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- capacity, DDP through torchrun, 40 GB
    c = ["--ddp", "--model", "qwen2.5-3b", "--val_loss_no_grad", "--steps", "5", "--emulate_card", "a100-40g",
         "--oompost_capture", "{job}", "--max_entries", "15000"]
    s.append(Scenario(
        "capacity_qwen2.5_3b_ddp_torchrun_tee_a100_40g",
        "A plain PyTorch loop (fp32 weights, fp16 autocast with a GradScaler, AdamW) wrapped in "
        "DistributedDataParallel and launched with torchrun --tee 3, fully fine-tuning a Qwen2.5-3B-shaped model "
        "on a 40 GB A100 at 2 x 512 tokens: fp32 weights, gradients and two Adam moments (3.09B x 16 bytes = "
        "46 GiB) cannot fit. The same run at 1 x 32 tokens fails the same way.",
        {"cause": "capacity", "sub_cause": None,
         "why": "3.09B parameters x 16 bytes (fp32 weights, gradients, exp_avg, exp_avg_sq) = 46 GiB > 39.39 GiB, "
                "whatever the batch"},
        Run("bash", "command.sh", _torchrun_tee(29811, "plain_loop.py", c + ["--batch_size", "2", "--seq_len", "512"]),
            gpu_gib=40, host_gib=16, timeout=300),
        counterfactuals=[("micro-batch 1 x 32 tokens (same cap)",
                          Run("bash", "command.sh", _torchrun_tee(29812, "plain_loop.py",
                                                           c[:-4] + ["--batch_size", "1", "--seq_len", "32"]),
                              gpu_gib=40, host_gib=16, capture=False, timeout=300))],
        priority=220))

    # ---------------------------------------------------------------- activation_spike, DDP through torchrun, 16 GB
    a = ["--ddp", "--model", "gpt2-medium", "--val_loss_no_grad", "--steps", "6", "--seq_len", "1024",
         "--emulate_card", "t4"]
    s.append(Scenario(
        "activation_spike_gpt2_medium_ddp_torchrun_tee_t4_16g",
        "A plain PyTorch loop (fp32 weights, fp16 autocast with a GradScaler, AdamW) wrapped in "
        "DistributedDataParallel and launched with torchrun --tee 3, fine-tuning a GPT-2-medium-shaped model on a "
        "16 GB T4 at 16 x 1,024 tokens: the model states (355M x 16 bytes, 5.3 GiB) fit, the first step's "
        "activations and logits do not. At micro-batch 2 the same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit; the configured micro-batch x sequence length's activations and fp32 logits do "
                "not; micro-batch 2 completes under the same cap"},
        Run("bash", "command.sh", _torchrun_tee(29813, "plain_loop.py", a + ["--batch_size", "16", "--oompost_capture",
                                                                      "{job}", "--max_entries", "15000"]),
            gpu_gib=15.5, host_gib=8, timeout=240),
        counterfactuals=[("micro-batch 2 (same cap)",
                          Run("bash", "command.sh", _torchrun_tee(29814, "plain_loop.py", a + ["--batch_size", "2"]),
                              gpu_gib=15.5, host_gib=8, capture=False, timeout=240))],
        priority=221))

    # ---------------------------------------------------------------- host_oom, torchrun in a 4 GiB cgroup
    h = ["--model", "opt-1.3b", "--batch_size", "8", "--seq_len", "256", "--steps", "10", "--emulate_card",
         "rtx4090"]
    s.append(Scenario(
        "host_oom_opt1.3b_torchrun_tee_cgroup_4g",
        "A plain loop launched with torchrun --tee 3 in a container limited to 4 GiB of host RAM, fine-tuning an "
        "OPT-1.3B-shaped model built with from_config on the CPU in fp32 (5.3 GB of host memory) before it moves "
        "to the GPU: the kernel's OOM killer kills the rank while the weights are initialised, and torchrun "
        "reports the child's exit. Built directly on the GPU, the same run completes under the same limit.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the rank is killed by signal 9 (cgroup OOM killer) with no CUDA error while the model is built on "
                "the host; building it on the GPU completes under the same 4 GiB limit"},
        Run("bash", "cgroup_run.sh", ["4G"] + _torchrun_tee(29815, "heldout_loop.py", h + ["--init_device", "cpu"]),
            gpu_gib=24, host_gib=6, capture=False, timeout=240),
        counterfactuals=[("model built on the GPU (same 4 GiB limit)",
                          Run("bash", "cgroup_run.sh",
                              ["4G"] + _torchrun_tee(29816, "heldout_loop.py", h + ["--init_device", "cuda"]),
                              gpu_gib=24, host_gib=6, capture=False, timeout=240))],
        priority=222))
    return s


def twenty_third_set() -> list[Scenario]:
    """The twenty-third set (2026-12-05, thirteenth session): a causal-LM loop driven by HF Accelerate the way
    run_clm_no_trainer.py copies are (tools/capture/accelerate_loop.py, `accelerate launch`): its evaluation
    keeping every batch's gathered logits on the GPU, and a per-device batch whose activations do not fit with
    gradient accumulation available.  Defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- leak, evaluation logits kept (Accelerate)
    k = ["--model", "qwen2.5-0.5b", "--per_device_train_batch_size", "4", "--block_size", "512",
         "--max_train_steps", "8", "--num_eval_samples", "160", "--per_device_eval_batch_size", "8",
         "--eval_every", "4", "--emulate_card", "l4"]
    s.append(Scenario(
        "leak_qwen2.5_0.5b_accelerate_eval_logits_l4_24g",
        "HF Accelerate fine-tune of a Qwen2.5-0.5B-shaped model (fp32 weights, bf16 mixed precision, AdamW) on a "
        "24 GB L4 whose evaluation (160 held-out sequences of 512 tokens, 8 a batch, every 4 steps) keeps each "
        "batch's gathered logits (8 x 512 x 151,936) in a list on the GPU for a token accuracy: the list grows "
        "batch after batch until the card is full. Keeping logits.argmax(-1).cpu() instead, the run completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "every evaluation batch's logits stay alive on the GPU, so live memory grows batch after batch "
                "until the OOM; keeping argmax(-1).cpu() completes under the same cap"},
        Run("accelerate", "accelerate_loop.py", k + ["--keep_eval_logits", "gpu"], gpu_gib=22.5, host_gib=10,
            timeout=300, max_entries=30000),
        counterfactuals=[("the evaluation keeps logits.argmax(-1).cpu() (same cap)",
                          Run("accelerate", "accelerate_loop.py", k + ["--keep_eval_logits", "argmax_cpu"],
                              gpu_gib=22.5, host_gib=10, capture=False, timeout=300))],
        priority=230))

    # ---------------------------------------------------------------- activation_spike, per-device batch (Accelerate)
    a = ["--model", "opt-350m", "--block_size", "1024", "--max_train_steps", "6", "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "activation_spike_opt350m_accelerate_batch16_3060_12g",
        "HF Accelerate fine-tune of an OPT-350m-shaped model (fp32 weights, bf16 mixed precision, AdamW) on a "
        "12 GB RTX 3060 at a per-device batch of 16 x 1,024 tokens: the model states (331M x 16 bytes, 4.9 GiB) "
        "fit, the first step's activations and logits do not. At 2 x 1,024 with 8 accumulation steps (the same "
        "total batch) the run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit; the configured per-device batch's activations and logits do not; a per-device "
                "batch of 2 with 8 accumulation steps completes under the same cap"},
        Run("accelerate", "accelerate_loop.py", a + ["--per_device_train_batch_size", "16"], gpu_gib=12.5,
            host_gib=8, timeout=240, max_entries=30000),
        counterfactuals=[("per-device batch 2, gradient_accumulation_steps 8 (same cap)",
                          Run("accelerate", "accelerate_loop.py",
                              a + ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "8"],
                              gpu_gib=12.5, host_gib=8, capture=False, timeout=240))],
        priority=231))
    return s


def twenty_fourth_set() -> list[Scenario]:
    """The twenty-fourth set (2026-12-05, thirteenth session): the plain loop's held-out loss summed as a tensor
    without torch.no_grad() (every step's evaluation graph kept), in DDP under torchrun --tee 3, so the per-step
    memory prints arrive prefixed "[default0]:".  Defined before it ran and scored as it came."""
    # (first defined at 4 x 1,024 tokens: its first run failed at step 2 with the no_grad proof failing too -- the
    # training step alone did not fit the 8 GB cap, nothing to capture; redefined at 2 x 512 before running again)
    k = ["--ddp", "--model", "gpt2", "--batch_size", "2", "--seq_len", "512", "--steps", "60", "--emulate_card",
         "rtx3070"]
    return [Scenario(
        "leak_gpt2_ddp_torchrun_tee_val_loss_graph_3070_8g",
        "A plain PyTorch loop (fp32 weights, fp16 autocast with a GradScaler, AdamW) wrapped in "
        "DistributedDataParallel and launched with torchrun --tee 3, training a GPT-2-small shape on an 8 GB RTX "
        "3070 at 2 x 512 tokens; each step's held-out loss (1 x 256 tokens) is computed without torch.no_grad() "
        "and summed as a tensor, so every step's evaluation graph stays alive. It prints memory_allocated every "
        "step. With the held-out loss under torch.no_grad() and .item() the run completes 60 steps.",
        {"cause": "leak", "sub_cause": None,
         "why": "each step's evaluation graph is kept through the running sum, so allocated memory rises step "
                "after step until the OOM; under torch.no_grad() with .item() all 60 steps complete"},
        Run("bash", "command.sh", _torchrun_tee(29831, "plain_loop.py", k + ["--oompost_capture", "{job}",
                                                                            "--max_entries", "30000"]),
            gpu_gib=8.5, host_gib=8, timeout=240),
        counterfactuals=[("held-out loss under torch.no_grad() with .item() (same cap)",
                          Run("bash", "command.sh", _torchrun_tee(29832, "plain_loop.py",
                                                                  k + ["--val_loss_no_grad"]),
                              gpu_gib=8.5, host_gib=8, capture=False, timeout=240))],
        priority=240)]


def twenty_fifth_set() -> list[Scenario]:
    """The twenty-fifth set (2026-12-05, thirteenth session): host RAM filled by a DataLoader tuned for speed
    (8 workers, prefetch_factor 8, pin_memory=True, 200 MiB batches) inside a 6 GiB container.  Defined before
    it ran and scored as it came."""
    base = ["6G", "python3", "{here}/pinned_loader.py", "--batch_size", "64", "--image_size", "512",
            "--max_steps", "40", "--emulate_card", "rtx4090"]
    return [Scenario(
        "host_oom_pinned_prefetch_loader_cgroup_6g",
        "An image-classification loop (a small CNN on random 512 x 512 images) whose DataLoader runs 8 workers "
        "with prefetch_factor 8 and pin_memory=True in a container limited to 6 GiB of host RAM: 64 batches of "
        "200 MiB in flight, plus their page-locked copies, exceed the limit. With 2 workers, prefetch_factor 2 "
        "and pin_memory=False the same run completes under the same limit.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the DataLoader's in-flight batches and pinned copies exceed the container's 6 GiB of host RAM; "
                "with 2 workers, prefetch 2 and no pinning the run completes under the same limit"},
        Run("bash", "cgroup_run.sh", base + ["--num_workers", "8", "--prefetch_factor", "8", "--pin_memory", "true"],
            gpu_gib=4, host_gib=8, capture=False, timeout=240),
        counterfactuals=[("2 workers, prefetch_factor 2, pin_memory=False (same 6 GiB limit)",
                          Run("bash", "cgroup_run.sh",
                              base + ["--num_workers", "2", "--prefetch_factor", "2", "--pin_memory", "false"],
                              gpu_gib=4, host_gib=8, capture=False, timeout=240))],
        priority=250)]


def twenty_sixth_set() -> list[Scenario]:
    """The twenty-sixth set (2026-12-05, fourteenth session): what forum threads ask about and no capture did —
    feature extraction that grows one tensor with torch.cat on the GPU, an HF Trainer whose evaluation batch is
    16 times its training batch, and a full fine-tune whose script prints torch.cuda.memory_summary() when it
    catches the OOM.  Defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- leak, torch.cat feature bank, 12 GB
    e = ["--model", "bert-large", "--batch_size", "64", "--seq_len", "512", "--num_samples", "6400",
         "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "leak_bert_large_embedding_cat_extract_3060_12g",
        "Feature extraction with a BERT-large-shaped encoder (fp32, torch.no_grad) over 100 batches of 64 x 512 "
        "tokens on a 12 GB RTX 3060, each batch's last_hidden_state (128 MiB) concatenated onto one tensor with "
        "torch.cat on the GPU: the tensor grows every batch until the card is full. Moving each batch to the "
        "host and concatenating once at the end, the same run completes under the same cap.",
        {"cause": "leak", "sub_cause": None,
         "why": "memory kept across iterations grows by one batch's features (128 MiB) every batch until the OOM; "
                "with the features moved to the host the run completes under the same cap"},
        Run("python", "embed_extract.py", e + ["--keep", "gpu"], gpu_gib=12.5, host_gib=8, timeout=240),
        counterfactuals=[("features moved to the host, one torch.cat at the end (same cap)",
                          Run("python", "embed_extract.py", e + ["--keep", "cpu"], gpu_gib=12.5, host_gib=30,
                              capture=False, timeout=300))],
        priority=260))

    # ---------------------------------------------------------------- activation_spike, Trainer eval batch, 24 GB
    t = ["--model", "qwen2.5-0.5b", "--max_seq_length", "1024", "--per_device_train_batch_size", "4",
         "--num_eval_samples", "128", "--eval_strategy", "steps", "--eval_steps", "4", "--max_steps", "8",
         "--prediction_loss_only", "--emulate_card", "rtx3090", "--output_dir", "{job}/hf_out",
         "--optim", "adamw_torch", "--log_level", "info"] + _HF
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_trainer_eval_batch64_3090_24g",
        "HF Trainer fine-tune of a Qwen2.5-0.5B-shaped model (bf16, 151,936-token vocabulary) on a 24 GB RTX "
        "3090 at 4 x 1,024 tokens, evaluating every 4 steps with per_device_eval_batch_size 64 (loss only): "
        "training fits, the first evaluation batch's logits (64 x 1,024 x 151,936) do not. With "
        "per_device_eval_batch_size 4 the same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states and the training batch fit; one evaluation batch of 64 sequences needs its "
                "logits and their fp32 upcast at once; evaluation batch 4 completes under the same cap"},
        Run("python", "hf_trainer.py", t + ["--per_device_eval_batch_size", "64"], gpu_gib=24.5, host_gib=12,
            timeout=300, max_entries=30000),
        counterfactuals=[("per_device_eval_batch_size 4 (same cap)",
                          Run("python", "hf_trainer.py", t + ["--per_device_eval_batch_size", "4"], gpu_gib=24.5,
                              host_gib=12, capture=False, timeout=300))],
        priority=261))

    # ---------------------------------------------------------------- capacity, memory_summary() printed, 24 GB
    c = ["--model", "pythia-1.4b", "--steps", "10", "--emulate_card", "rtx4090", "--summary_on_oom"]
    s.append(Scenario(
        "capacity_pythia1.4b_fp32_adamw_memory_summary_tutorial_4090_24g",
        "Full fine-tune of a Pythia-1.4B-shaped GPT-NeoX model (fp32 weights, bf16 autocast, AdamW) on a 24 GB "
        "RTX 4090 at 4 x 512 tokens, with a script that prints torch.cuda.memory_summary() when it catches the "
        "OOM: weights, gradients and two Adam moments (1.41B x 16 bytes = 21 GiB) leave no room for the "
        "optimizer step. At 1 x 32 tokens the same run fails the same way.",
        {"cause": "capacity", "sub_cause": None,
         "why": "1.41B parameters x 16 bytes (fp32 weights, gradients, exp_avg, exp_avg_sq) = 21 GiB of 23.65 GiB "
                "before the optimizer's own temporaries, whatever the batch"},
        Run("python", "tutorial_loop.py", c + ["--batch_size", "4", "--max_len", "512"], gpu_gib=24.5, host_gib=8,
            timeout=240, max_entries=100000),
        counterfactuals=[("batch 1 x 32 tokens (same cap)",
                          Run("python", "tutorial_loop.py", c + ["--batch_size", "1", "--max_len", "32"],
                              gpu_gib=24.5, host_gib=8, capture=False, timeout=240))],
        priority=262))
    return s


def twenty_seventh_set() -> list[Scenario]:
    """The twenty-seventh set (2026-12-05, fourteenth session): resuming from a torch.save'd state dict read whole
    into a container's RAM (torch.load(map_location="cpu")), and an HF Trainer run whose twelfth step's batch
    holds one 16,384-token sample among 1,024-token ones.  Defined before it ran and scored as it came."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- host_oom, torch.load into a 6 GiB cgroup
    ck = "/tmp/oompost_ckpt_qwen2.5_1.5b"
    load = ("python3 {here}/ckpt_load.py --prepare " + ck + " --model qwen2.5-1.5b && bash {here}/cgroup_run.sh 6G "
            "python3 {here}/ckpt_load.py --load " + ck + " --model qwen2.5-1.5b --emulate_card a100-40g "
            "--map_location ")
    s.append(Scenario(
        "host_oom_qwen2.5_1.5b_torch_load_cpu_cgroup_6g",
        "Resuming a Qwen2.5-1.5B-shaped model (fp32, built on the GPU) from a torch.save'd state dict (6.2 GB) "
        "with model.load_state_dict(torch.load(path, map_location='cpu')) in a container limited to 6 GiB of host "
        "RAM: the whole checkpoint is read into host memory and the kernel's OOM killer kills the process. With "
        "map_location='cuda' every tensor goes to the GPU as it is read and the same run completes.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the process is killed by the cgroup's OOM killer (no CUDA error) while torch.load reads a 6.2 GB "
                "checkpoint into 6 GiB of host RAM; with map_location='cuda' it completes under the same limit"},
        Run("bash", "command.sh", ["bash", "-c", load + "cpu"], gpu_gib=26, host_gib=8, capture=False,
            timeout=300),
        counterfactuals=[("torch.load(map_location='cuda') (same 6 GiB limit)",
                          Run("bash", "command.sh", ["bash", "-c", load + "cuda"], gpu_gib=26, host_gib=8,
                              capture=False, timeout=300))],
        priority=270))

    # ---------------------------------------------------------------- activation_spike, Trainer, one long sample
    t = ["--model", "qwen2.5-0.5b", "--max_seq_length", "1024", "--per_device_train_batch_size", "4",
         "--max_steps", "20", "--long_sample_step", "12", "--emulate_card", "rtx3090",
         "--output_dir", "{job}/hf_out", "--optim", "adamw_torch", "--log_level", "info"] + _HF
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_trainer_long_sample_step12_3090_24g",
        "HF Trainer fine-tune of a Qwen2.5-0.5B-shaped model (bf16, 151,936-token vocabulary) on a 24 GB RTX 3090 "
        "at 4 x 1,024 tokens with a padding collator: the twelfth step's batch holds one 16,384-token sample, "
        "padding the batch to 4 x 16,384, and its logits do not fit after eleven steps that did. With that sample "
        "cut to 1,024 tokens the same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "eleven steps at 4 x 1,024 fit; the batch padded to 4 x 16,384 needs 16 times the logits; with "
                "the long sample truncated all 20 steps complete under the same cap"},
        Run("python", "hf_trainer.py", t + ["--long_sample_len", "16384"], gpu_gib=24.5, host_gib=12,
            timeout=300, max_entries=30000),
        counterfactuals=[("the long sample cut to 1,024 tokens (same cap)",
                          Run("python", "hf_trainer.py", t + ["--long_sample_len", "1024"], gpu_gib=24.5,
                              host_gib=12, capture=False, timeout=300))],
        priority=271))
    return s


def twenty_eighth_set() -> list[Scenario]:
    """The twenty-eighth set (2026-12-05, fourteenth session): the forum's next step after an evaluation-logits
    leak — eval_accumulation_steps moves every batch's logits to the host, and a 10 GiB container runs out — and
    generation from one 32,768-token prompt with eager attention.  Defined before it ran and scored as it came.
    First run (H100) with evaluation batch 8 and eval_accumulation_steps 2: the GPU ran out first (a 4.64 GiB
    request with two batches' logits still on the card), so no host OOM was staged and nothing was collected;
    redefined at evaluation batch 2, eval_accumulation_steps 1 and committed before the second run."""
    s: list[Scenario] = []

    # ---------------------------------------------------------------- host_oom, eval logits accumulated on the host
    e = ["10G", "python3", "{here}/hf_trainer.py", "--model", "qwen2.5-0.5b", "--max_seq_length", "1024",
         "--per_device_train_batch_size", "4", "--num_eval_samples", "64", "--eval_strategy", "steps",
         "--eval_steps", "4", "--max_steps", "8", "--per_device_eval_batch_size", "2", "--eval_accumulation_steps",
         "1", "--compute_metrics", "accuracy", "--emulate_card", "l4", "--output_dir", "{job}/hf_out",
         "--optim", "adamw_torch", "--log_level", "info"] + _HF
    s.append(Scenario(
        "host_oom_qwen2.5_0.5b_trainer_eval_accumulation_cgroup_10g",
        "HF Trainer fine-tune of a Qwen2.5-0.5B-shaped model (bf16, 151,936-token vocabulary) on a 24 GB L4 cap in "
        "a container limited to 10 GiB of host RAM, evaluating 64 sequences of 1,024 tokens for an accuracy metric "
        "with eval_accumulation_steps 1 (evaluation batch 2): every evaluation batch's logits are moved to the host "
        "and kept there "
        "(64 x 1,024 x 151,936 values) until the OOM killer kills the process. With preprocess_logits_for_metrics "
        "returning the argmax the same run completes under the same limit.",
        {"cause": "host_oom", "sub_cause": None,
         "why": "the process is killed by the cgroup's OOM killer (no CUDA error) while the evaluation's logits pile "
                "up in host RAM; keeping the argmax instead completes under the same 10 GiB"},
        Run("bash", "cgroup_run.sh", e, gpu_gib=22.5, host_gib=14, capture=False, timeout=300),
        counterfactuals=[("preprocess_logits_for_metrics returns logits.argmax(-1) (same 10 GiB limit)",
                          Run("bash", "cgroup_run.sh", e + ["--preprocess_logits_argmax"], gpu_gib=22.5,
                              host_gib=14, capture=False, timeout=300))],
        priority=280))

    # ---------------------------------------------------------------- activation_spike, eager prefill of 32k tokens
    g = ["--model", "qwen2.5-0.5b", "--prompt_tokens", "32768", "--emulate_card", "l4"]
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_generate_32k_eager_l4_24g",
        "Inference script generating from one 32,768-token prompt with a Qwen2.5-0.5B-shaped model (bf16) and "
        "attn_implementation='eager' on a 24 GB L4 cap: the prefill materialises 14 heads x 32,768 x 32,768 "
        "attention scores at once. With attn_implementation='sdpa' the same generation completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "the weights (1 GB) fit; one prefill's eager attention scores (30 GB in bf16) do not; SDPA never "
                "materialises them and completes under the same cap"},
        Run("python", "long_prompt_generate.py", g + ["--attn_implementation", "eager"], gpu_gib=22.5, host_gib=8,
            timeout=240),
        counterfactuals=[("attn_implementation='sdpa' (same cap)",
                          Run("python", "long_prompt_generate.py", g + ["--attn_implementation", "sdpa"],
                              gpu_gib=22.5, host_gib=8, capture=False, timeout=240))],
        priority=281))
    return s


def twenty_ninth_set() -> list[Scenario]:
    """The twenty-ninth set (2026-12-05, fourteenth session): fragmentation under the HF Trainer, which no
    fragmentation capture used: dynamic padding (samples of 16-2,048 tokens, each batch padded to its longest)
    with its usual console output.  Defined before it ran and scored as it came."""
    f = ["--model", "qwen2.5-0.5b", "--max_seq_length", "2048", "--min_seq_length", "16",
         "--per_device_train_batch_size", "6", "--max_steps", "30", "--output_dir", "{job}/hf_out",
         "--optim", "adamw_torch", "--log_level", "info"] + _HF
    return [Scenario(
        "fragmentation_qwen2.5_0.5b_trainer_dynamic_padding",
        "HF Trainer fine-tune of a Qwen2.5-0.5B-shaped model (bf16) with a padding collator over samples of "
        "16-2,048 tokens (6 per batch, each batch padded to its longest). The memory cap is set just above what "
        "the same run needs with expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "hf_trainer.py", f, gpu_gib=34, host_gib=12, max_entries=30000, timeout=240),
        priority=290, fragmentation_search=True,
        search_variants=[f, f + ["--seed", "7"], f[:7] + ["4"] + f[8:]])]


def thirtieth_set() -> list[Scenario]:
    """The thirtieth set (2026-12-05, fourteenth session): a CNN trained from scratch (tools/capture/cnn_loop.py,
    a VGG-style network in fp32 with Adam), which no capture used: its configured batch too large for an 8 GB
    card, and a validation loss summed as a tensor without torch.no_grad() that keeps every validation's graph.
    Defined before it ran and scored as it came."""
    s: list[Scenario] = []
    a = ["--image_size", "224", "--steps", "30", "--emulate_card", "rtx3070"]
    s.append(Scenario(
        "activation_spike_vgg_cnn_batch256_3070_8g",
        "A VGG-style CNN (9.4M parameters, fp32, Adam) trained from scratch on 224 x 224 images at batch 256 on an "
        "8 GB RTX 3070: the weights and Adam states (~150 MB) fit, the first step's saved activations (~100 MB "
        "an image) do not. At batch 32 the same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states are tiny; the configured batch's activations exceed the card; batch 32 completes "
                "under the same cap"},
        Run("python", "cnn_loop.py", a + ["--batch_size", "256"], gpu_gib=8.5, host_gib=8, timeout=240),
        counterfactuals=[("batch 32 (same cap)",
                          Run("python", "cnn_loop.py", a + ["--batch_size", "32"], gpu_gib=8.5, host_gib=8,
                              capture=False, timeout=240))],
        priority=300))
    k = ["--image_size", "224", "--batch_size", "16", "--steps", "60", "--val_every", "5", "--emulate_card",
         "rtx3070"]
    s.append(Scenario(
        "leak_vgg_cnn_val_loss_graph_3070_8g",
        "The same CNN at batch 16 on an 8 GB RTX 3070, validating one batch every 5 steps with val_loss += "
        "criterion(model(x), y) outside torch.no_grad(): every validation's graph and saved activations (~1.6 GB) "
        "stay alive through val_loss until the card is full. Under torch.no_grad() with .item() all 60 steps "
        "complete.",
        {"cause": "leak", "sub_cause": None,
         "why": "each validation's graph is kept through the summed tensor, so memory grows validation after "
                "validation until the OOM; with no_grad and .item() the run completes under the same cap"},
        Run("python", "cnn_loop.py", k + ["--val_loss", "tensor"], gpu_gib=8.5, host_gib=8, timeout=240,
            max_entries=100000),
        counterfactuals=[("validation under torch.no_grad() with .item() (same cap)",
                          Run("python", "cnn_loop.py", k + ["--val_loss", "item"], gpu_gib=8.5, host_gib=8,
                              capture=False, timeout=240))],
        priority=301))
    return s


def thirty_first_set() -> list[Scenario]:
    """The thirty-first set (2026-12-05, fourteenth session): fragmentation from multi-scale training of the same
    VGG-style CNN (each step's images a random multiple of 32 pixels between 128 and 512), a vision source of
    varying shapes no fragmentation capture used.  Defined before it ran and scored as it came."""
    f = ["--batch_size", "32", "--image_size", "512", "--min_image_size", "128", "--steps", "60"]
    return [Scenario(
        "fragmentation_vgg_cnn_multiscale",
        "A VGG-style CNN (fp32, Adam) trained from scratch with multi-scale inputs: each step's 32 images are a "
        "random 128-512 pixels square. The memory cap is set just above what the same run needs with "
        "expandable_segments:True, which completes under it.",
        {"cause": "fragmentation", "sub_cause": None,
         "why": "the request fits in reserved-but-unallocated plus the rest of the allowance, but no free block "
                "is large enough; expandable_segments:True completes the same run under the same cap"},
        Run("python", "cnn_loop.py", f, gpu_gib=30, host_gib=8, max_entries=100000, timeout=200),
        priority=310, fragmentation_search=True,
        search_variants=[f, f + ["--seed", "1"], f[:1] + ["24"] + f[2:]])]


def thirty_second_set() -> list[Scenario]:
    """The thirty-second set (2026-12-05, fifteenth session): two stacks no capture used — batched offline
    generation that keeps every batch's GenerateOutput (its per-step scores stay on the GPU), and contrastive
    image-text pre-training of a CLIP-shaped dual encoder at a large batch.  Defined before it ran and scored as
    it came."""
    s: list[Scenario] = []
    g = ["--model", "qwen2.5-0.5b", "--batch_size", "8", "--prompt_tokens", "256", "--max_new_tokens", "128",
         "--batches", "40", "--emulate_card", "t4"]
    s.append(Scenario(
        "leak_qwen2.5_0.5b_generate_output_scores_kept_t4_16g",
        "Offline batched generation with a Qwen2.5-0.5B-shaped model (bf16) on a 16 GB T4 cap: 40 batches of 8 "
        "prompts, model.generate(..., return_dict_in_generate=True, output_scores=True), each batch's whole "
        "output appended to a list, so every step's scores (8 x 151,936 fp32 values, 128 steps: ~0.6 GB a batch) "
        "stay on the GPU until the card is full. Keeping only out.sequences.cpu() completes all 40 batches.",
        {"cause": "leak", "sub_cause": None,
         "why": "memory grows by the same ~0.6 GB every batch (the kept scores) until the OOM; keeping only the "
                "sequences on the host completes under the same cap"},
        Run("python", "generate_batches.py", g + ["--keep", "outputs"], gpu_gib=15.5, host_gib=8, timeout=300,
            max_entries=60000),
        counterfactuals=[("keep only out.sequences.cpu() (same cap)",
                          Run("python", "generate_batches.py", g + ["--keep", "sequences"], gpu_gib=15.5,
                              host_gib=8, capture=False, timeout=300))],
        priority=320))
    c = ["--image_size", "224", "--steps", "10", "--emulate_card", "rtx3090"]
    s.append(Scenario(
        "activation_spike_clip_vit_b16_batch512_3090_24g",
        "Contrastive image-text pre-training of a CLIP-shaped model (ViT-B/16 vision tower, 12-layer text tower, "
        "150M parameters, fp32 weights, bf16 autocast, AdamW) at batch 512 on a 24 GB RTX 3090: the model states "
        "(~2.4 GB) fit, the first step's saved activations for 512 images and captions do not. At batch 64 the "
        "same run completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states are small; one step's activations at the configured batch exceed the card; batch 64 "
                "completes under the same cap"},
        Run("python", "clip_loop.py", c + ["--batch_size", "512"], gpu_gib=24, host_gib=8, timeout=240),
        counterfactuals=[("batch 64 (same cap)",
                          Run("python", "clip_loop.py", c + ["--batch_size", "64"], gpu_gib=24, host_gib=8,
                              capture=False, timeout=240))],
        priority=321))
    return s


def thirty_third_set() -> list[Scenario]:
    """The thirty-third set (2026-12-06, eighteenth session), defined after LEAK006 (outputs kept across generate()
    calls, dated by the KV cache) was designed on the thirty-second set's leak, to measure it on arrival: the
    same kept-outputs leak on another architecture and card (Llama-3.2-1B, 128k vocabulary, 12 GB), and its
    negative control, one generate() call whose own per-token scores outgrow a 16 GB card with nothing kept
    from an earlier call.  Defined before it ran and scored as it came."""
    s: list[Scenario] = []
    g = ["--model", "llama3.2-1b", "--batch_size", "8", "--prompt_tokens", "128", "--max_new_tokens", "96",
         "--batches", "30", "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "leak_llama3.2_1b_generate_output_scores_kept_3060_12g",
        "Offline batched generation with a Llama-3.2-1B-shaped model (bf16) on a 12 GB RTX 3060 cap: batches of 8 "
        "prompts, model.generate(..., return_dict_in_generate=True, output_scores=True), each batch's whole "
        "output appended to a list, so every token's scores (8 x 128,256 fp32) and each call's KV cache stay on "
        "the GPU (~0.45 GB a batch) until the card is full. Keeping only out.sequences.cpu() completes all 30 "
        "batches.",
        {"cause": "leak", "sub_cause": None,
         "why": "memory grows by the same ~0.45 GB every batch (the kept outputs) until the OOM; keeping only the "
                "sequences on the host completes under the same cap"},
        Run("python", "generate_batches.py", g + ["--keep", "outputs"], gpu_gib=12.5, host_gib=8, timeout=300,
            max_entries=60000),
        counterfactuals=[("keep only out.sequences.cpu() (same cap)",
                          Run("python", "generate_batches.py", g + ["--keep", "sequences"], gpu_gib=12.5,
                              host_gib=8, capture=False, timeout=300))],
        priority=330))
    one = ["--model", "qwen2.5-0.5b", "--prompt_tokens", "256", "--max_new_tokens", "2048", "--batches", "1",
           "--emulate_card", "t4"]
    s.append(Scenario(
        "activation_spike_qwen2.5_0.5b_generate_scores_one_call_t4_16g",
        "One generate() call with a Qwen2.5-0.5B-shaped model (bf16) on a 16 GB T4 cap: 24 prompts of 256 tokens, "
        "2,048 new tokens, return_dict_in_generate=True and output_scores=True, so the call itself holds every "
        "token's scores (24 x 151,936 fp32, ~14.6 MB a token) until the card is full, about 900 tokens in; "
        "nothing is kept from an earlier call (there is none). At 4 prompts the same call completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "a single generate() call's own per-token outputs exceed the card; at a sixth of the batch the "
                "same call completes under the same cap"},
        Run("python", "generate_batches.py", one + ["--batch_size", "24"], gpu_gib=15.5, host_gib=8, timeout=240,
            max_entries=60000),
        counterfactuals=[("4 prompts (same cap)",
                          Run("python", "generate_batches.py", one + ["--batch_size", "4"], gpu_gib=15.5,
                              host_gib=8, capture=False, timeout=240))],
        priority=331))
    return s



def thirty_fourth_set() -> list[Scenario]:
    """The thirty-fourth set (2026-12-06, nineteenth session): drivers no capture used before, whose logs and
    frames look like nothing oompost was built on.  PyTorch Lightning runs forward and backward inside
    ``optimizer.step(closure)`` and prints its own banner, summary table and progress bar; PyTorch Geometric's
    message passing fails in ``propagate``; JAX fails with XLA's RESOURCE_EXHAUSTED and leaves no snapshot.
    Defined before it ran and scored as it came."""
    s: list[Scenario] = []
    lt = ["--model", "gpt2-medium", "--seq_len", "1024", "--steps", "6", "--emulate_card", "rtx4080"]
    s.append(Scenario(
        "activation_spike_gpt2_medium_lightning_batch16_4080_16g",
        "PyTorch Lightning fine-tune of a GPT-2-medium-shaped model (355M, fp32 weights, precision='bf16-mixed', "
        "AdamW, eager attention) at batch 16 x 1024 tokens on a 16 GB RTX 4080: the model states (~5.3 GiB) fit, "
        "one step's activations (24 layers of 16 x 16 heads x 1024^2 attention scores, 16k tokens of fp32 logits) "
        "do not. At batch 1 the same run completes (batch 2, first tried, needs SDPA attention: "
        "reruns_heldout34.json).",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states fit: batch 1 completes under the same cap (so does batch 2 with SDPA attention); "
                "the configured batch 16's activations exceed the card"},
        Run("python", "lightning_loop.py", lt + ["--batch_size", "16"], gpu_gib=16, host_gib=8, timeout=240),
        counterfactuals=[("batch 1 (same cap)",
                          Run("python", "lightning_loop.py", lt + ["--batch_size", "1"], gpu_gib=16, host_gib=8,
                              capture=False, timeout=240))],
        priority=340))
    lc = ["--model", "pythia-1.4b", "--model_dtype", "float32", "--steps", "4", "--emulate_card", "v100-16g"]
    s.append(Scenario(
        "capacity_pythia1.4b_fp32_lightning_v100_16g",
        "PyTorch Lightning full fine-tune of a Pythia-1.4B-shaped model (GPT-NeoX, 1.41B, fp32 weights, "
        "precision='bf16-mixed', AdamW) at batch 4 x 512 tokens on a 16 GB V100: fp32 weights and gradients "
        "(2 x 5.3 GiB) leave no room for AdamW's two fp32 moments at the first optimizer step. At batch 1 x 64 "
        "tokens it fails the same way.",
        {"cause": "capacity", "sub_cause": None,
         "why": "weights + gradients + Adam moments of a 1.4B fp32 model (~21 GiB) exceed the 15.3 GiB card at "
                "any batch; batch 1 x 64 fails too"},
        Run("python", "lightning_loop.py", lc + ["--batch_size", "4", "--seq_len", "512"], gpu_gib=16,
            host_gib=12, timeout=240),
        counterfactuals=[("batch 1 x 64 tokens (same cap)",
                          Run("python", "lightning_loop.py", lc + ["--batch_size", "1", "--seq_len", "64"],
                              gpu_gib=16, host_gib=12, capture=False, timeout=240))],
        priority=341))
    g = ["--nodes", "200000", "--edges", "4000000", "--heads", "8", "--epochs", "4", "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "activation_spike_pyg_gat_full_batch_3060_12g",
        "Full-batch training of a two-layer GAT (PyTorch Geometric GATConv, 8 heads x 64, ~70k parameters) on a "
        "random graph of 200k nodes and 4M edges on a 12 GB RTX 3060: the model is tiny, but the first layer's "
        "per-edge messages (4M edges x 8 heads x 64 fp32, ~8 GB a tensor) exceed the card in forward. Training on "
        "four induced subgraphs of random node halves an epoch (a quarter of the edges each) completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "the model states are kilobytes; the full batch's per-edge messages exceed the card; induced "
                "subgraph mini-batches complete under the same cap"},
        Run("python", "pyg_loop.py", g, gpu_gib=12, host_gib=8, timeout=240),
        counterfactuals=[("4 induced subgraphs an epoch (same cap)",
                          Run("python", "pyg_loop.py", g + ["--parts", "4"], gpu_gib=12, host_gib=8,
                              capture=False, timeout=240))],
        priority=342))
    j = ["--gpu_gib", "10.75", "--width", "4096", "--depth", "24", "--steps", "6"]
    s.append(Scenario(
        "activation_spike_jax_resmlp_batch65536_2080ti_11g",
        "A jitted JAX train step (value_and_grad, SGD with momentum) over a 24-block residual MLP of width 4096 "
        "(~400M parameters, fp32) at batch 65,536 on an 11 GB RTX 2080 Ti (XLA_PYTHON_CLIENT_MEM_FRACTION): "
        "parameters, gradients and momentum (~5 GB) fit, the 48 saved activations of 65,536 x 4096 fp32 (1 GiB "
        "each) do not. At batch 2,048 the same run completes. No snapshot: JAX has no PyTorch allocator.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "model states are half the card; the batch's saved activations exceed it; batch 2,048 completes "
                "under the same fraction"},
        Run("python", "jax_loop.py", j + ["--batch_size", "65536"], gpu_gib=12, host_gib=8, timeout=240,
            capture=False),
        counterfactuals=[("batch 2,048 (same fraction)",
                          Run("python", "jax_loop.py", j + ["--batch_size", "2048"], gpu_gib=12, host_gib=8,
                              capture=False, timeout=240))],
        priority=343))
    return s


def thirty_fifth_set() -> list[Scenario]:
    """The thirty-fifth set (2026-12-06, nineteenth session): two more of what the thirty-fourth set began.  The
    Lightning 2 idiom of keeping every validation batch's outputs for ``on_validation_epoch_end`` (a leak when the
    logits stay on the GPU), and a JAX model whose parameters alone outgrow the card (capacity, failing while they
    are created, outside any jitted step).  Defined before it ran and scored as it came."""
    s: list[Scenario] = []
    lv = ["--model", "gpt2-medium", "--seq_len", "1024", "--batch_size", "2", "--attn_implementation", "sdpa",
          "--steps", "2", "--val_batches", "80", "--emulate_card", "rtx4080"]
    s.append(Scenario(
        "leak_gpt2_medium_lightning_validation_outputs_4080_16g",
        "PyTorch Lightning: two training steps of a GPT-2-medium-shaped model (fp32 weights, bf16-mixed, SDPA, 2 x "
        "1024 tokens) on a 16 GB RTX 4080, then trainer.validate() over 80 batches whose validation_step appends "
        "each batch's logits (2 x 1024 x 50,257 bf16, ~200 MB) to self.validation_step_outputs for "
        "on_validation_epoch_end, as the Lightning 2 docs show; the list grows until the card is full. Keeping "
        "logits.argmax(-1).cpu() instead completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "allocated memory grows by one batch's logits per validation batch until the OOM; keeping only the "
                "argmax on the host completes under the same cap"},
        Run("python", "lightning_loop.py", lv + ["--keep_val", "logits"], gpu_gib=16, host_gib=8, timeout=240,
            max_entries=40000),
        counterfactuals=[("keep logits.argmax(-1).cpu() (same cap)",
                          Run("python", "lightning_loop.py", lv + ["--keep_val", "argmax"], gpu_gib=16, host_gib=8,
                              capture=False, timeout=240))],
        priority=350))
    jc = ["--gpu_gib", "10.75", "--width", "16384", "--depth", "24", "--steps", "2"]
    s.append(Scenario(
        "capacity_jax_resmlp_width16384_2080ti_11g",
        "The JAX residual MLP of jax_loop.py at width 16,384 and 24 blocks (~6.4B parameters, fp32: ~24 GiB of "
        "parameters, plus as much momentum) on an 11 GB RTX 2080 Ti (XLA_PYTHON_CLIENT_MEM_FRACTION): the "
        "parameters alone outgrow the card while jax.random.normal creates them, before any step. At batch 16 it "
        "fails the same way.",
        {"cause": "capacity", "sub_cause": None,
         "why": "the parameters alone (~24 GiB) exceed the 10.75 GiB card at any batch; batch 16 fails the same way"},
        Run("python", "jax_loop.py", jc + ["--batch_size", "4096"], gpu_gib=12, host_gib=8, timeout=240,
            capture=False),
        counterfactuals=[("batch 16 (same fraction)",
                          Run("python", "jax_loop.py", jc + ["--batch_size", "16"], gpu_gib=12, host_gib=8,
                              capture=False, timeout=240))],
        priority=351))
    return s


def thirty_sixth_set() -> list[Scenario]:
    """The thirty-sixth set (2026-12-06, nineteenth session), defined after LEAK004 learned to date kept outputs
    without an optimizer step (``retention._kept_by_forwards``, designed on the thirty-fifth set's Lightning
    validation), to measure it on arrival: a pure inference script on another architecture (a ViT image encoder,
    no training at all) keeping every batch's features on the GPU, and its negative control, one forward whose
    every layer's hidden states are kept (output_hidden_states=True): per-layer blocks of one site, each a layer
    apart with the layer's own memory freed, which the rule must not call kept batches.  Defined before it ran
    and scored as it came."""
    s: list[Scenario] = []
    k = ["--batches", "400", "--batch_size", "64", "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "leak_vit_b16_inference_features_kept_3060_12g",
        "Feature extraction with a ViT-B/16 encoder (86M parameters, fp32, no_grad, no training at all) on a 12 GB "
        "RTX 3060: 400 batches of 64 images, each batch's last_hidden_state (64 x 197 x 768 fp32, ~39 MB) appended "
        "to a list on the GPU, until the card is full (about batch 290). Keeping .cpu() copies completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "memory grows by one batch's features per batch until the OOM; moving each batch's features to the "
                "host completes under the same cap"},
        Run("python", "inference_keep.py", k + ["--keep", "features"], gpu_gib=12, host_gib=20, timeout=240,
            max_entries=60000),
        counterfactuals=[("keep last_hidden_state.cpu() (same cap)",
                          Run("python", "inference_keep.py", k + ["--keep", "cpu"], gpu_gib=12, host_gib=20,
                              capture=False, timeout=240))],
        priority=360))
    h = ["--batches", "1", "--hidden_states", "--emulate_card", "rtx3060-12g"]
    s.append(Scenario(
        "activation_spike_vit_b16_hidden_states_batch2048_3060_12g",
        "One no_grad forward of a ViT-B/16 encoder at batch 2,048 with output_hidden_states=True on a 12 GB RTX "
        "3060: the model returns every layer's hidden state (13 x 2,048 x 197 x 768 fp32, ~1.2 GB each), which "
        "outgrow the card about eight layers in. Nothing is kept from an earlier batch (there is none). At batch 512 "
        "the same call completes.",
        {"cause": "activation_spike", "sub_cause": None,
         "why": "one forward's own per-layer outputs exceed the card; a quarter of the batch completes under the "
                "same cap"},
        Run("python", "inference_keep.py", h + ["--batch_size", "2048"], gpu_gib=12, host_gib=8, timeout=240),
        counterfactuals=[("batch 512 (same cap)",
                          Run("python", "inference_keep.py", h + ["--batch_size", "512"], gpu_gib=12, host_gib=8,
                              capture=False, timeout=240))],
        priority=361))
    return s


def thirty_seventh_set() -> list[Scenario]:
    """The thirty-seventh set (2026-12-06, nineteenth session): LEAK004 without an optimizer step once more on
    arrival, after ``_size_class`` (one tensor size, two block sizes) was written from the thirty-sixth set's ViT:
    a CNN backbone this time, whose per-layer sites differ in size from stage to stage.  Defined before it ran and
    scored as it came."""
    k = ["--arch", "resnet50", "--batches", "600", "--batch_size", "64", "--emulate_card", "rtx4070"]
    return [Scenario(
        "leak_resnet50_inference_feature_maps_kept_4070_12g",
        "Feature extraction with torchvision's ResNet-50 cut before its pooling (23.5M parameters, fp32, no_grad, "
        "no training) on a 12 GB RTX 4070: 600 batches of 64 images, each batch's 2048 x 7 x 7 feature maps "
        "(~25.7 MB) appended to a list on the GPU until the card is full (about batch 420). Keeping .cpu() copies "
        "completes.",
        {"cause": "leak", "sub_cause": None,
         "why": "memory grows by one batch's feature maps per batch until the OOM; moving each batch's features to "
                "the host completes under the same cap"},
        Run("python", "inference_keep.py", k + ["--keep", "features"], gpu_gib=12, host_gib=24, timeout=240,
            max_entries=60000),
        counterfactuals=[("keep feature maps .cpu() (same cap)",
                          Run("python", "inference_keep.py", k + ["--keep", "cpu"], gpu_gib=12, host_gib=24,
                              capture=False, timeout=240))],
        priority=370)]
