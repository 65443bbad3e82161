"""Inference servers (vLLM, TGI, sglang) get a server's remedies, never a training rerun plan."""

from __future__ import annotations

from pathlib import Path

import oompost

CORPUS = Path(__file__).parent / "corpus"


def _report(case: str):
    return oompost.analyze([str(CORPUS / case / "log.txt")])


def test_tgi_warmup_oom_gets_server_flags_not_trainer_arguments():
    # https://github.com/huggingface/text-generation-inference/issues/563: the warm-up's multi-line OOM,
    # quoted with \n escapes in the router's panic
    r = _report("huggingface__text-generation-inference__563")
    assert r.oom is not None and r.oom.requested_bytes > 5e9
    assert r.rerun is None
    keys = " ".join(f.key for f in r.primary.fixes)
    assert "max-batch-prefill-tokens" in keys
    assert "per_device_train_batch_size" not in keys and "gradient_checkpointing" not in keys


def test_a_training_log_keeps_its_rerun_plan():
    # the bundled activation-spike capture: a training loop, so trainer arguments are its knobs
    r = oompost.analyze([str(Path(__file__).parent.parent / "sample_logs" / "activation_spike_long_batch")])
    assert r.rerun is not None and r.rerun.trainer_args


# https://github.com/huggingface/text-generation-inference/issues/1525: TGI's warm-up refuses its prefill
TGI_WARMUP = ("ERROR warmup{max_input_length=512 max_prefill_tokens=512 max_total_tokens=2048}:warmup: "
              "text_generation_client: router/client/src/lib.rs:33: Server error: Not enough memory to handle 512 "
              "prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n")


def test_tgi_not_enough_memory_is_a_gpu_oom_of_a_server():
    from oompost.parsers import parse_text
    from oompost.pipeline import report_from_evidence

    r = report_from_evidence(parse_text(TGI_WARMUP))
    assert r.cause != "unknown" and r.rerun is None
    assert any("max-batch-prefill-tokens" in f.key for f in r.primary.fixes)


def test_a_server_is_not_asked_for_training_evidence_or_told_about_offload():
    r = _report("huggingface__text-generation-inference__563")
    assert not any("per-step" in s for s in r.primary.settle)
    assert not any("offload" in n.what for n in r.primary.not_fixes)


# vLLM's start-up checks (dev cases): the card taken before the engine starts, a KV cache smaller than one sequence
# https://github.com/vllm-project/vllm-omni/issues/276
VLLM_OCCUPIED = ("ValueError: Free memory on device (0.49/79.32 GiB) on startup is less than desired GPU memory "
                 "utilization (0.6, 47.59 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
                 "processes.\n")
# https://github.com/xusenlinzy/api-for-open-llm/issues/225
VLLM_KV = ("The model's max seq len (8192) is larger than the maximum number of tokens that can be stored in KV cache "
           "(4512). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")


def test_vllm_start_up_checks_are_config_errors_naming_their_setting():
    from oompost.parsers import parse_text
    from oompost.pipeline import report_from_evidence

    occ = report_from_evidence(parse_text(VLLM_OCCUPIED))
    assert occ.cause == "config_error" and occ.primary.sub_cause == "card_occupied"
    assert "0.49/79.32 GiB" in occ.primary.fixes[0].why
    kv = report_from_evidence(parse_text(VLLM_KV))
    assert kv.cause == "config_error" and kv.primary.sub_cause == "kv_cache_too_small"
    assert kv.primary.fixes[0].key == "max_model_len" and "8192" in kv.primary.fixes[0].why


# ------------------------------------------------------------------ llama.cpp / ggml

def test_a_ggml_compute_buffer_failure_is_an_oom_in_the_graphs_activations():
    # https://github.com/ggml-org/llama.cpp/issues/9352: no "out of memory" text at all, only
    # "ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 18035509504"
    r = _report("ggml-org__llama.cpp__9352")
    assert r.cause == "activation_spike"
    assert r.oom is not None and r.oom.requested_bytes == 18035509504
    assert r.rerun is None
    keys = " ".join(f.key for f in r.primary.fixes)
    assert "--ctx-size" in keys and "gradient_checkpointing" not in keys


def test_the_cudamalloc_line_and_the_buffer_line_are_one_failure():
    # https://github.com/ggml-org/llama.cpp/issues/13414: "allocating 4514.05 MiB on device 0: cudaMalloc failed:
    # out of memory" then "failed to allocate CUDA0 buffer of size 4733328896": one OOM, named by the second line
    from oompost.parsers import parse_paths

    ev = parse_paths([str(CORPUS / "ggml-org__llama.cpp__13414" / "log.txt")])
    ggml = [o for o in ev.ooms if o.message_format == "ggml"]
    assert len(ggml) == 1 and ggml[0].stack.frames[0].name == "ggml_gallocr_reserve_n"
    assert abs(ggml[0].requested_bytes - 4733328896) < 2**20


def test_a_ggml_cpu_buffer_is_host_memory(tmp_path):
    # arranged from llama.cpp's own message shape (no corpus thread shows a CPU buffer failing alone)
    p = tmp_path / "run.log"
    p.write_text("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 40000000000\n"
                 "llama_model_load: error loading model: unable to allocate CPU buffer\n")
    from oompost.model import OomKind
    from oompost.parsers import parse_paths

    ooms = parse_paths([str(p)]).ooms
    assert [o.kind for o in ooms] == [OomKind.HOST, OomKind.HOST]
    assert ooms[0].requested_bytes == 40000000000


def test_a_ggml_report_names_the_runtime_and_asks_for_its_own_evidence():
    # what a user reads: the C function and the log line, not a "ggml:1" file position, and no request for a
    # PyTorch snapshot or torch.cuda step lines that llama.cpp cannot give
    r = _report("ggml-org__llama.cpp__9352")
    assert "ggml_gallocr_reserve_n (llama.cpp, log line 1)" in r.primary.detail
    assert r.primary.settle and all("oompost.record" not in s and "torch.cuda" not in s for s in r.primary.settle)
