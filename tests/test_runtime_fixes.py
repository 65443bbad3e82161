"""Remedies fit the run they are for: another framework's OOM (JAX/XLA, TensorFlow, PaddlePaddle) gets that
framework's remedies, never PyTorch's allocator settings, the HF Trainer's arguments or a PyTorch snapshot request;
a network trained from scratch is not told to train adapters."""

from __future__ import annotations

from pathlib import Path

import oompost
from oompost.classify.base import Cause
from oompost.classify.rules._runtimes import runtime_fixes

CORPUS = Path(__file__).parent / "corpus"
TORCH_WORDS = ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments", "gradient_checkpointing", "per_device_train_batch",
               "attn_implementation", "ds_config")


def _report(case: str):
    return oompost.analyze([str(CORPUS / case / "log.txt")])


def _said(r) -> str:
    f = r.primary
    return " ".join([*(x.key + " " + str(x.value) for x in f.fixes), *f.settle])


def test_a_jax_oom_gets_jax_remedies_and_asks_for_xla_evidence():
    # https://github.com/bold-lab-ai/JaxMARL/issues/45: "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while
    # trying to allocate 12267176800 bytes." with XLA's buffer assignment
    r = _report("bold-lab-ai__JaxMARL__45")
    assert r.oom is not None and r.oom.message_format == "xla"
    said = _said(r)
    assert "jax.checkpoint" in said or "XLA_PYTHON_CLIENT" in said
    assert not any(w in said for w in TORCH_WORDS), said
    assert r.rerun is None                                  # no trainer arguments or ds_config to rewrite
    assert all("oompost.record" not in s and "torch.cuda" not in s for s in r.primary.settle)
    assert any("XLA" in s for s in r.primary.settle)
    # what a PyTorch user would try is named as not worth trying
    assert any("PYTORCH_CUDA_ALLOC_CONF" in n.what for n in r.primary.not_fixes)
    # and the not-worth-trying list speaks of this runtime: no DeepSpeed offload, no DataLoader workers
    assert r.cause == "activation_spike"
    assert not any("offload_param" in n.what or "DataLoader" in n.what for n in r.primary.not_fixes)


def test_a_tensorflow_oom_gets_tensorflow_remedies():
    # https://github.com/keras-team/keras/issues/9643: TensorFlow's "OOM when allocating tensor with shape"
    r = _report("keras-team__keras__9643")
    assert r.oom is not None and r.oom.message_format == "tensorflow"
    said = _said(r)
    assert "tf." in said and not any(w in said for w in TORCH_WORDS), said


def test_a_paddle_oom_gets_paddle_remedies():
    # https://github.com/PaddlePaddle/PaddleSeg/issues/1723: "Out of memory error on GPU 0. Cannot allocate ..."
    r = _report("PaddlePaddle__PaddleSeg__1723")
    assert r.oom is not None and r.oom.message_format == "paddle"
    said = _said(r)
    assert "paddle" in said and not any(w in said for w in TORCH_WORDS), said


def test_each_training_framework_has_its_own_allocator_setting_for_fragmentation():
    keys = {rt: " ".join(f.key for f in runtime_fixes(rt, Cause.FRAGMENTATION)) for rt in ("xla", "tensorflow",
                                                                                           "paddle")}
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in keys["xla"]
    assert "TF_GPU_ALLOCATOR" in keys["tensorflow"]
    assert "FLAGS_allocator_strategy" in keys["paddle"]
    assert runtime_fixes("pytorch", Cause.FRAGMENTATION) == ()


def test_a_pytorch_oom_still_gets_pytorch_remedies():
    # the bundled fragmentation capture (sample_logs/, a real run on the GPU machine)
    r = oompost.analyze([str(Path(__file__).parent.parent / "sample_logs" / "fragmentation_dynamic_padding")])
    assert r.cause == "fragmentation"
    assert any("expandable_segments" in str(f.value) for f in r.primary.fixes)


def test_a_network_trained_from_scratch_is_not_told_to_train_adapters():
    # https://github.com/open-mmlab/mmdetection/issues/188: the failing stack runs through mmdet and convolution
    # layers, nothing of a language or diffusion model: capacity fixes are the network's size, precision, optimizer
    from oompost.analysis.context import build_context
    from oompost.classify.rules.capacity import Capacity
    from oompost.parsers import parse_paths

    ctx = build_context(parse_paths([str(CORPUS / "open-mmlab__mmdetection__188" / "log.txt")]))
    assert not ctx.adapters_apply
    keys = " ".join(f.key for f in Capacity()._fixes(ctx))
    assert "smaller network" in keys and "lora" not in keys.lower()
    # a bare OOM message says nothing of the network: most posted crashes are fine-tuning runs, so LoRA stays
    bare = build_context(parse_paths([str(CORPUS / "lm-sys__FastChat__1781" / "log.txt")]))
    assert bare.adapters_apply
    assert any("lora" in f.key.lower() for f in Capacity()._fixes(bare))


def test_a_network_trained_from_scratch_whose_step_does_not_fit_gets_its_own_knobs_not_trainer_arguments():
    # facebookresearch/detectron2#1902 (dev, activation_spike): the failing stack runs through detectron2 and
    # convolutions; gradient_checkpointing / per_device_train_batch_size / max_seq_length are HF Trainer arguments
    # such a run does not have, and no rerun plan is invented without its batch size
    r = oompost.analyze([str(CORPUS / "facebookresearch__detectron2__1902" / "log.txt")])
    assert r.cause == "activation_spike"
    keys = [f.key for f in r.primary.fixes]
    assert keys[:4] == ["batch size", "input size", "mixed precision", "activation checkpointing"]
    assert not any(f.kind == "trainer_arg" for f in r.primary.fixes)
    assert r.rerun is None or "gradient_checkpointing" not in (r.rerun.trainer_args or {})


def test_every_runtime_context_names_has_its_own_fixes():
    # Context.own_runtime reads oompost.model.OWN_RUNTIMES; a runtime added there without a table would get no fixes
    from oompost.model import OWN_RUNTIMES

    for rt in OWN_RUNTIMES:
        assert runtime_fixes(rt, Cause.ACTIVATION_SPIKE) or runtime_fixes(rt, Cause.CAPACITY), rt


def test_a_data_library_oom_is_the_data_not_fitting_with_that_librarys_knobs():
    # https://github.com/facebookresearch/faiss/issues/648 (Faiss), https://github.com/dmlc/xgboost/issues/8484
    # (XGBoost's gpu_hist), https://github.com/catboost/catboost/issues/1746 (CatBoost's pool), all dev: a vector
    # index or a boosting matrix has no activations, so the verdict is never a step's
    for case, fmt, knob in (("facebookresearch__faiss__648", "faiss", "shard the index over GPUs"),
                            ("dmlc__xgboost__8484", "xgboost", "QuantileDMatrix"),
                            ("catboost__catboost__1746", "catboost", "gpu_ram_part")):
        r = _report(case)
        assert r.oom is not None and r.oom.message_format == fmt, case
        assert r.cause == "capacity" and r.primary.title == "The data does not fit on this GPU", case
        said = _said(r)
        assert knob in said and not any(w in said for w in TORCH_WORDS), (case, said)
        assert any("PYTORCH_CUDA_ALLOC_CONF" in n.what for n in r.primary.not_fixes), case
        assert r.primary.settle and all("oompost.record" not in s and "torch.cuda" not in s for s in r.primary.settle)


def test_a_data_library_rules_out_an_activation_spike_only():
    from oompost.analysis.context import build_context
    from oompost.classify.constraints import impossible_causes
    from oompost.parsers import parse_text

    line = ("(NCudaLib::TOutOfMemoryError) catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:303: Error: "
            "Out of memory. Requested 5546.536621 MB; Free 2131.370214 MB\n")
    ctx = build_context(parse_text(line))
    assert ctx.oom.requested_bytes == int(5546.536621 * 2**20) and ctx.own_runtime == "catboost"
    out = impossible_causes(ctx)
    assert Cause.ACTIVATION_SPIKE in out and Cause.CAPACITY not in out
    torch_line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.42 GiB.\n"
    assert Cause.ACTIVATION_SPIKE not in impossible_causes(build_context(parse_text(torch_line)))


def test_an_inference_runtimes_oom_gets_no_training_memory_estimate():
    # ggml-org/llama.cpp#9352 (dev): llama.cpp's compute buffer; the log names a model size, which the training
    # memory model used to price as a PyTorch fine-tune (weights, AdamW, activations) — nothing llama.cpp holds
    r = _report("ggml-org__llama.cpp__9352")
    assert r.oom is not None and r.oom.message_format == "ggml"
    assert r.to_json()["estimate"] is None
    assert any("memory model skipped" in w for w in r.to_json()["warnings"])
    # a JAX/XLA training run keeps it: its model states are priced like PyTorch's (erfanzar/EasyDeL#78, dev, a
    # 1.1B model whose states overflow a TPU core: capacity, which the estimate helps prove)
    jax = _report("erfanzar__EasyDeL__78")
    assert jax.cause == "capacity"
