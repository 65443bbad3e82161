"""The verdict on partial inputs: every failure gets a cause, physics overrides weights,
and taking evidence away weakens a verdict but never flips it to another cause at high confidence."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import oompost
from oompost.classify.base import Cause
from oompost.classify.features import FEATURES
from oompost.classify.verdict import decide, load_weights
from oompost.parsers import parse_text
from oompost.pipeline import report_from_evidence

SAMPLES = Path(__file__).parent.parent / "sample_logs"

# Real lines from public threads (tests/corpus/, URL in each case.json).
BARE_OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
            "capacity; 77.13 GiB already allocated; 307.31 MiB free; 78.21 GiB reserved in total by PyTorch) If "
            "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
            "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n")
BATCH_ASSERT = ("[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
                "micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1 \n")
KILLED = ("Loading checkpoint shards:   0%|                                      | 0/2 [00:00<?, ?it/s]Killed\n")


def verdict(text: str):
    return report_from_evidence(parse_text(text))


def test_a_bare_oom_message_gets_a_memory_cause_and_says_what_would_settle_it():
    r = verdict(BARE_OOM)
    assert r.cause in ("capacity", "activation_spike", "fragmentation", "leak", "comm_buffer")
    assert 0.0 < r.confidence < 1.0
    assert r.primary.settle and any("snapshot" in s for s in r.primary.settle)


def test_a_quoted_excerpt_reads_like_the_original():
    quoted = "".join("> " + line + "\n" for line in BARE_OOM.splitlines())
    assert verdict(quoted).cause == verdict(BARE_OOM).cause


# torch 2.11's allocator refusing PYTORCH_CUDA_ALLOC_CONF at CUDA start-up (sample_logs/config_error_max_split_...)
ALLOC_MINIMUM = "ValueError: CachingAllocator option max_split_size_mb too small, must be >= 20\n"


@pytest.mark.parametrize("text,cause", [(BATCH_ASSERT, "config_error"), (KILLED, "host_oom"),
                                        (ALLOC_MINIMUM, "config_error")])
def test_one_line_failures_are_not_unknown(text, cause):
    assert verdict(text).cause == cause


def test_an_allocator_minimum_gets_a_value_above_it():
    r = verdict(ALLOC_MINIMUM)
    fix = r.primary.fixes[0]
    assert (fix.kind, fix.key, fix.value) == ("env", "PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")


def test_no_failure_is_unknown():
    r = verdict("epoch 1 step 10 loss 2.31\nepoch 1 step 20 loss 2.11\n")
    assert r.cause == "unknown"


def test_physics_overrides_the_weights():
    f = dict.fromkeys(FEATURES, 0.0)
    f.update({"oom.gpu": 1.0, "oom.numbers": 1.0, "oom.reserved_unallocated_covers_request": 1.0,
              "rule.fragmentation": 0.9})
    assert decide(f).cause is Cause.FRAGMENTATION
    assert decide(f, frozenset({Cause.FRAGMENTATION})).cause is not Cause.FRAGMENTATION
    assert decide(f).cause is not Cause.UNKNOWN            # a GPU OOM always has a memory cause


def test_the_shipped_weights_cover_every_feature():
    w = load_weights()
    assert w is not None and w.features == FEATURES and len(w.W) == len(w.classes) == len(Cause)


def _ablations(src: Path):
    """The sample's directory with one kind of evidence removed at a time."""
    files = [p for p in src.iterdir() if p.is_file() and p.name not in ("expected.json", "capture.json")]
    for drop in ("snapshot", "ds_config"):
        kept = [p for p in files if drop not in p.name]
        if len(kept) < len(files) and kept:
            yield drop, kept


ABLATED = [(d.name, drop, kept) for d in sorted(SAMPLES.iterdir()) if (d / "expected.json").exists()
           for drop, kept in _ablations(d)]


@pytest.mark.parametrize("name,drop,kept", ABLATED, ids=[f"{n}-without-{d}" for n, d, _ in ABLATED])
def test_less_evidence_never_flips_the_verdict_with_confidence(name, drop, kept, tmp_path):
    expected = json.loads((SAMPLES / name / "expected.json").read_text())["cause"]
    for p in kept:
        shutil.copy(p, tmp_path / p.name)
    r = oompost.analyze([str(tmp_path)])
    assert r.cause == expected or r.confidence < 0.8, (r.cause, r.confidence)


def test_the_seed_case_gets_its_plan_without_our_capture_scripts_lines(tmp_path):
    """Issue 6 §4/§5: the 7B ZeRO-2 case, with the lines only our capture script prints removed,
    is still capacity and still gets a complete rerun plan (model size inferred from the flatten request)."""
    src = SAMPLES / "capacity_zero2_offload_7b_3090"
    lines = (src / "run.log").read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.startswith(("model: ", "training: "))]
    assert len(kept) < len(lines)
    (tmp_path / "run.log").write_text("".join(kept))
    shutil.copy(src / "ds_config.json", tmp_path)
    r = oompost.analyze([str(tmp_path)])
    assert r.cause == "capacity"
    assert r.rerun is not None and r.rerun.ds_config_diff
    assert r.rerun.predicted_peak_bytes < 23.19 * 2**30
    assert any("model size inferred" in w for w in r.warnings)


@pytest.mark.parametrize("text,params", [
    ("--model_name_or_path meta-llama/Llama-2-7b-hf", 7e9), ("loading Qwen2-72B-Instruct", 72e9),
    ("model=facebook/opt-125m", 125e6), ("Qwen2.5-0.5B", 0.5e9), ("batch 8b tokens", None),
    ("Loading model gpt2-large (float32)", 774e6), ("--model_name_or_path google/flan-t5-xl", 2.85e9),
    ("from_pretrained('bert-base-uncased')", 110e6), ("openai/whisper-large-v3", 1550e6),
    ("models/gpt2/modeling_gpt2.py", None), ("my-bert-large-ish", None)])
def test_model_size_from_its_name(text, params):
    from oompost.parsers.cues import model_params_from_name

    assert model_params_from_name(text) == (int(params) if params else None)


# A message plus a traceback tail, as an excerpt in an issue often is (tests/corpus/, NVIDIA/Megatron-LM#60).
TAIL = '''  File "/opt/conda/lib/python3.6/site-packages/torch/_utils.py", line 229, in _flatten_dense_tensors
    flat = torch.cat([t.contiguous().view(-1) for t in tensors], dim=0)
RuntimeError: CUDA out of memory. Tried to allocate 2.29 GiB (GPU 0; 31.72 GiB total capacity; 19.22 GiB already allocated; 1.88 GiB free; 28.32 GiB reserved in total by PyTorch)
'''


def test_a_message_with_a_traceback_tail_reads_its_frames():
    ev = parse_text(TAIL)
    (oom,) = ev.ooms
    assert oom.stack.frames and oom.stack.frames[-1].name == "_flatten_dense_tensors"
    assert verdict(TAIL).cause != "unknown"


def test_a_config_without_any_failure_is_not_a_verdict(tmp_path):
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}))
    r = oompost.analyze([str(cfg)])
    assert r.cause == "unknown"


def _small_corpus_cases(n: int = 12):
    import random

    from corpus_cases import load_cases

    cases = [c for c in load_cases("dev") if len(c.files) == 1
             and 3 <= len(Path(c.files[0]).read_text(errors="replace").splitlines()) <= 20]
    random.Random(6).shuffle(cases)
    return cases[:n]


@pytest.mark.parametrize("case", _small_corpus_cases(), ids=lambda c: c.name)
def test_dropping_one_context_line_never_flips_a_confident_verdict(case, tmp_path):
    """Issue 6 §4: removing any one line that is not the failure line may weaken the verdict, or
    change it to another cause at a confidence below 0.8, never flip it confidently."""
    full = oompost.analyze(case.files)
    lines = Path(case.files[0]).read_text(errors="replace").splitlines(keepends=True)
    failure = {e.line for f in full.findings[:1] for e in f.evidence if e.line}
    quoted = " ".join(e.text for f in full.findings[:1] for e in f.evidence)
    for i in range(len(lines)):
        if i + 1 in failure or (lines[i].strip() and lines[i].strip() in quoted):
            continue                      # the failure line, or a continuation of its wrapped message
        p = tmp_path / f"drop{i}.log"
        p.write_text("".join(lines[:i] + lines[i + 1:]))
        r = oompost.analyze([str(p)])
        assert r.cause == full.cause or r.confidence < 0.8, (i, lines[i][:100], full.cause, r.cause, r.confidence)


def test_a_failing_rule_is_reported_not_swallowed(monkeypatch):
    from oompost.classify.rules.capacity import Capacity

    def boom(self, ctx):
        raise ValueError("synthetic")

    monkeypatch.setattr(Capacity, "evaluate", boom)
    r = verdict(BARE_OOM)
    err = [f for f in r.findings if f.code == "RULEERR"]
    assert err and "CAP001" in err[0].title and "synthetic" in err[0].detail
    assert r.cause != "unknown"


def test_capacity_from_the_numbers_alone_claims_no_more_than_the_numbers():
    # BARE_OOM: no frames, no model size, no config.  The rule may argue from the request against what is
    # free, but must not call a smaller micro-batch useless or name a phase it never saw.
    from oompost.analysis.context import build_context
    from oompost.classify.rules.capacity import Capacity

    (f,) = Capacity().evaluate(build_context(parse_text(BARE_OOM)))
    assert "fails in unknown" not in f.detail and f.detail.startswith("Where in the run it failed is not")
    assert "The GPU's capacity" in f.detail
    assert not any("micro-batch" in n.what for n in f.not_fixes)


# A bare "out of memory" while the model is built or moved (no figures, so no limit): CAP001 still speaks from
# where the allocation sits.  Comfy-Org/ComfyUI#6176 (dev, capacity: model_to_device) and
# facebookresearch/Detectron#560 (dev, capacity: caffe2's own allocator, model construction).
@pytest.mark.parametrize("case", ["Comfy-Org__ComfyUI__6176", "facebookresearch__Detectron__560"])
def test_a_bare_oom_while_building_the_model_gets_the_capacity_rule(case):
    r = oompost.analyze([str(Path(__file__).parent / "corpus" / case / "log.txt")])
    assert r.oom is not None and r.oom.limit_bytes is None
    cap = next(f for f in r.findings if f.code == "CAP001")
    assert any("model-state phase" in s for s, _ in cap.signals)
    assert not any(n == "smallest run: micro-batch 1, full recompute" for n, _ in cap.numbers)


# The fallback capacity finding speaks to the run in hand: without DeepSpeed in the inputs a ds_config key is a
# change of framework, so adapters and an 8-bit optimizer come first; a DeepSpeed run keeps its ZeRO settings.
@pytest.mark.parametrize("text, first_kind, ds_fix", [
    ("", "code", False),
    # a real DeepSpeed ZeRO-2 run's log (its config printed, the OOM in stage_1_and_2.py)
    ((SAMPLES / "capacity_zero2_1.5b_3090" / "run.log").read_text(), "ds_config", True),
])
def test_the_fallback_capacity_fixes_follow_the_framework(text, first_kind, ds_fix):
    from oompost.analysis.context import build_context
    from oompost.classify.explain import finding_for
    from oompost.classify.verdict import Verdict

    ctx = build_context(parse_text(text or BARE_OOM))
    assert ctx.setup.deepspeed is ds_fix
    f = finding_for(ctx, Verdict(Cause.CAPACITY, 0.6, ((Cause.CAPACITY, 0.6),), ()), ())
    assert f.fixes[0].kind == first_kind
    assert any(x.kind == "ds_config" for x in f.fixes) is ds_fix
    if not ds_fix:
        assert f.fixes[0].key.startswith("LoRA") and any("8-bit" in x.key for x in f.fixes)


# When the verdict leaves the other of capacity / activation_spike close behind, the finding says so and leads with
# the one run that tells them apart, instead of stating "no batch size makes it fit" as fact.
@pytest.mark.parametrize("cause, other_p, hedged", [
    (Cause.CAPACITY, 0.30, True), (Cause.ACTIVATION_SPIKE, 0.25, True), (Cause.CAPACITY, 0.10, False)])
def test_a_close_capacity_spike_call_is_hedged_and_leads_with_the_micro_batch_test(cause, other_p, hedged):
    from oompost.analysis.context import build_context
    from oompost.classify.explain import finding_for
    from oompost.classify.verdict import Verdict

    other = Cause.ACTIVATION_SPIKE if cause is Cause.CAPACITY else Cause.CAPACITY
    ctx = build_context(parse_text(BARE_OOM))
    v = Verdict(cause, 1 - other_p - 0.05, ((cause, 1 - other_p - 0.05), (other, other_p)), ())
    f = finding_for(ctx, v, ())
    assert f.fixes[0].key.startswith("one test step at micro-batch 1") is hedged
    assert (other.value in f.detail) is hedged
    assert ("no batch size makes it fit" in f.detail) is (not hedged and cause is Cause.CAPACITY)
    if hedged:
        assert all("empty_cache" in n.what for n in f.not_fixes)


def test_fragmentation_compares_the_new_segment_not_the_request_with_what_is_free():
    # neurosim/DNN_NeuroSim_V1.3#28 (dev, fragmentation; a blind reader called it decidable): "Tried to allocate
    # 1.12 MiB (...; 3.56 MiB free; 787.74 MiB cached)".  A 1-10 MiB request needs a new 20 MiB segment, which
    # 3.56 MiB free cannot give, while 787.74 MiB sits cached: FRAG001 holds
    r = oompost.analyze([str(Path(__file__).parent / "corpus" / "neurosim__DNN_NeuroSim_V1.3__28" / "log.txt")])
    f = next(f for f in r.findings if f.code == "FRAG001")
    assert any("20.00 MiB" in s or "0.02 GiB" in s for s, _ in f.signals)


# CAP001 on a run without DeepSpeed offers the run's own knobs, not ds_config keys: a real plain-PyTorch capture
# (Llama-3.2-1B fp32 AdamW on an 11 GB 2080 Ti).  Sharding is priced as ZeRO-3 with CPU offload.
def test_cap001_without_deepspeed_offers_no_ds_config_keys():
    r = oompost.analyze([str(SAMPLES / "capacity_llama3.2_1b_plain_loop_2080ti" / "run.log")])
    cap = next(f for f in r.findings if f.code == "CAP001")
    assert not any(x.kind == "ds_config" for x in cap.fixes)
    keys = [x.key for x in cap.fixes]
    assert keys.index("8-bit optimizer") < keys.index("shard the model states")
    shard = next(x for x in cap.fixes if x.key == "shard the model states")
    assert "ZeRO-3 with CPU offload: predicted peak" in shard.why


# An FSDP run holds 1/N of its model states per GPU: the memory model, which prices a full replica (plain PyTorch)
# or DeepSpeed, must not call it capacity from an unsharded estimate.  meta-llama/llama-cookbook#898 (dev,
# activation_spike): torchtune's full_finetune_distributed of an 8B model over `--nproc_per_node 8` 24 GB cards
# was called capacity with "model states take 134.62 GiB".
def test_an_fsdp_run_is_not_priced_as_a_full_replica():
    from oompost.analysis.context import build_context
    from oompost.parsers import parse_paths

    ctx = build_context(parse_paths([str(Path(__file__).parent / "corpus" / "meta-llama__llama-cookbook__898" /
                                         "log.txt")]))
    assert ctx.setup.fsdp and ctx.setup.get("world_size") == 8
    assert ctx.estimate is None and any("FSDP" in n for n in ctx.notes)
    r = oompost.analyze([str(Path(__file__).parent / "corpus" / "meta-llama__llama-cookbook__898" / "log.txt")])
    assert r.cause != "capacity"


# Under backend:cudaMallocAsync PyTorch keeps no allocator history: the snapshot that would settle the verdict must
# be taken with the native allocator.  The real held-out capture of GPT-2-large under cudaMallocAsync.
def test_under_cudamallocasync_the_snapshot_asked_for_needs_the_native_allocator():
    r = oompost.analyze([str(Path(__file__).parent / "heldout_captures" /
                             "capacity_gpt2_large_fp32_cudamallocasync_tutorial_3060_12g" / "run.log")])
    assert r.oom is not None and r.oom.message_format == "malloc_async"
    settle = r.to_json()["findings"][0]["settle"]
    assert any("unset PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync" in s for s in settle)


# deepspeedai/Megatron-DeepSpeed#474 (dev): the pipeline engine's assertion text, posted alone
PIPE_ZERO = "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\n"


def test_zero_with_pipeline_parallelism_is_a_config_error_with_its_fix():
    r = verdict(PIPE_ZERO)
    assert r.cause == "config_error"
    assert any(f.fix.key == "zero_optimization.stage" and f.fix.value == 1 for f in r.fixes)
    # HF's warning of the same words is not a failure
    assert verdict("`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`.\n"
                   ).cause == "unknown"


def test_a_free_figure_equal_to_the_request_as_printed_does_not_cover_it():
    from oompost.analysis.context import build_context
    from oompost.classify.features import extract

    def covers(free: str) -> float:
        text = (f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.91 GiB (GPU 0; 7.93 GiB total "
                f"capacity; 5.33 GiB already allocated; {free} free; 5.36 GiB reserved in total by PyTorch)\n")
        return extract(build_context(parse_text(text)), ())["oom.free_covers_request"]

    assert covers("1.91 GiB") == 0.0 and covers("1.90 GiB") == 0.0 and covers("1.93 GiB") == 1.0


def test_a_cuda_oom_in_a_non_blocking_copy_to_the_cpu_is_pinned_host_memory():
    # tdrussell/diffusion-pipe#306 (dev): block swapping copies weights to the CPU with non_blocking=True; WSL2 caps
    # the page-locked memory that needs, and CUDA reports it as "out of memory"
    tail = ("  File \"/home/train/diffusion-pipe/utils/offloading.py\", line 272, in prepare_block_devices_before_forward\n"
            "    weights_to_device(b, torch.device('cpu'))  # make sure weights are on cpu\n"
            "  File \"/home/train/diffusion-pipe/utils/offloading.py\", line 119, in weights_to_device\n"
            "    module.weight.data = module.weight.data.to(device, non_blocking=True)\n"
            "RuntimeError: CUDA error: out of memory\n")
    r = verdict("Traceback (most recent call last):\n" + tail)
    assert r.cause == "host_oom" and r.findings[0].sub_cause == "pinned"
    assert "non_blocking=False" in r.fixes[0].fix.key
    # the same copy to the GPU is GPU memory
    gpu = tail.replace("torch.device('cpu'))  # make sure weights are on cpu", "torch.device('cuda'))")
    assert verdict("Traceback (most recent call last):\n" + gpu).cause != "host_oom"


def test_runners_up_are_the_models_next_causes_likeliest_first():
    from oompost.classify import runners_up
    from oompost.classify.verdict import Verdict

    v = Verdict(Cause.ACTIVATION_SPIKE, 0.5, ((Cause.ACTIVATION_SPIKE, 0.5), (Cause.CAPACITY, 0.12),
                                              (Cause.CONFIG_ERROR, 0.3), (Cause.LEAK, 0.05),
                                              (Cause.FRAGMENTATION, 0.03)), ())
    assert runners_up(v) == ((Cause.CONFIG_ERROR, 0.3), (Cause.CAPACITY, 0.12))
    sure = Verdict(Cause.HOST_OOM, 0.95, ((Cause.HOST_OOM, 0.95), (Cause.CAPACITY, 0.05)), ())
    assert runners_up(sure) == ()


# https://github.com/huggingface/accelerate/issues/1519 (dev): half the card held by another process beside a
# backward-pass OOM; the verdict names the set-up mistake as its next cause in every output
def test_a_close_runner_up_is_shown_beside_the_verdict():
    case = Path(__file__).parent / "corpus" / "huggingface__accelerate__1519" / "log.txt"
    r = oompost.analyze(case)
    primary = r.findings[0]
    causes = [c for c, _ in primary.runners_up]
    assert Cause.CONFIG_ERROR in causes and r.cause not in {c.value for c in causes}
    assert all(0.10 <= p <= r.confidence for _, p in primary.runners_up)
    from oompost.render import render

    data = json.loads(render(r, "json"))
    assert data["findings"][0]["runners_up"][0]["cause"] in {c.value for c in causes}
    md = render(r, "md")
    assert "Next causes: `config_error`" in md
    # its own paragraph still ends there: the next one is not glued to it
    assert re.search(r"Next causes: [^\n]*\.\n\n", md), md[md.find("Next causes"):][:200]
    assert "next: <code>config_error</code>" in render(r, "html")
