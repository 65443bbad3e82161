"""The phase of a failing allocation from the frames other people's tracebacks quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from oompost.analysis.context import build_context
from oompost.analysis.phase import Phase, classify_frames
from oompost.model import Frame
from oompost.parsers import parse_paths

CORPUS = Path(__file__).parent / "corpus"


def test_adams_update_line_is_the_optimizer_step():
    # apex's FusedAdam creating its first moment inside DeepSpeed's initialize_optimizer_states
    # (tests/corpus/deepspeedai__DeepSpeed__237, https://github.com/deepspeedai/DeepSpeed/issues/237)
    fused = Frame("/opt/conda/envs/python3.6/lib/python3.6/site-packages/apex/optimizers/fused_adam.py", 129, "step",
                  "state['exp_avg'] = torch.zeros_like(p.data)")
    assert classify_frames((fused,), innermost_first=True).phase is Phase.OPTIMIZER_STEP
    ctx = build_context(parse_paths([str(CORPUS / "deepspeedai__DeepSpeed__237" / "log.txt")]))
    assert ctx.phase.phase is Phase.OPTIMIZER_STEP
    # an attention layer that merely names an average is not Adam
    avg = Frame("model.py", 10, "forward", "exp_avgpool = self.pool(x)")
    assert classify_frames((avg,), innermost_first=True).phase is not Phase.OPTIMIZER_STEP


@pytest.mark.parametrize("case, phase", [
    # https://github.com/facebookresearch/fairseq/issues/1936: "denom = exp_avg_sq.sqrt().add_(group['eps'])" above
    # the message, nothing else
    ("facebookresearch__fairseq__1936", Phase.OPTIMIZER_STEP),
    # https://github.com/hiyouga/LlamaFactory/issues/1221: the same Adam line in backticks
    ("hiyouga__LlamaFactory__1221", Phase.OPTIMIZER_STEP),
    # https://github.com/Gaoyiminggithub/Graphonomy/issues/34: "new_node1 = torch.matmul(...)" above the message
    ("Gaoyiminggithub__Graphonomy__34", Phase.FORWARD),
])
def test_the_source_line_kept_above_a_message_gives_the_phase(case, phase):
    ev = parse_paths([str(CORPUS / case / "log.txt")])
    (oom,) = ev.ooms
    assert oom.stack.statement_only and len(oom.stack.frames) == 1
    assert build_context(ev).phase.phase is phase


def test_a_traceback_pasted_apart_beats_the_line_above_the_message():
    # https://github.com/lqtrung1998/mwp_ReFT/issues/12: the line above the message is the tail of a wrapped
    # statement; the traceback above it names DeepSpeed's ZeRO step, and that is what gives the phase
    ev = parse_paths([str(CORPUS / "lqtrung1998__mwp_ReFT__12" / "log.txt")])
    ctx = build_context(ev)
    assert ctx.phase.phase is not Phase.UNKNOWN
    assert any("pasted apart" in n for n in ctx.notes)


@pytest.mark.parametrize("line", ["Epoch 3: loss=2.1", "INFO: step 5 done", "[rank0]: 12 steps", "",
                                  "loss: 3.2, lr: 1e-4", 'File "x.py", line 3, in f'])
def test_log_lines_above_a_message_are_not_statements(line):
    from oompost.parsers.torch_oom import statement_before
    from oompost.sources import LogLine

    ln = LogLine(2, "RuntimeError: CUDA out of memory.", "RuntimeError: CUDA out of memory.",
                 prev_raw=line.encode())
    assert not statement_before(ln).frames


def test_ddp_building_its_gradient_buckets_is_a_model_state():
    # https://github.com/deepspeedai/DeepSpeed/issues/4715: accelerate's prepare_model wraps the model in DDP,
    # whose dist.Reducer allocates a 25.10 GiB bucket set (every gradient) next to 25.23 GiB of weights
    ctx = build_context(parse_paths([str(CORPUS / "deepspeedai__DeepSpeed__4715" / "log.txt")]))
    assert ctx.phase.phase is Phase.GRAD_PARTITION and ctx.phase.phase.is_model_state
    assert "DDP" in ctx.phase.why


@pytest.mark.parametrize("case", [
    # https://github.com/chidiwilliams/buzz/issues/439: faster_whisper's WhisperModel "__init__" innermost
    "chidiwilliams__buzz__439",
    # https://github.com/Purfview/whisper-standalone-win/issues/50: the same, Markdown made it a bare "init"
    "Purfview__whisper-standalone-win__50",
])
def test_a_traceback_ending_in_a_constructor_is_model_construction(case):
    ctx = build_context(parse_paths([str(CORPUS / case / "log.txt")]))
    assert ctx.phase.phase is Phase.MODEL_INIT


def test_a_constructor_called_from_a_forward_is_the_forward():
    frames = (Frame("train.py", 40, "<module>", "loss = model(batch)"),
              Frame("/site-packages/torch/nn/modules/module.py", 1501, "_call_impl", "return forward_call(*a)"),
              Frame("mymodel.py", 12, "forward", "h = Block(x)"),
              Frame("mymodel.py", 5, "__init__", "self.buf = torch.zeros(n, device='cuda')"))
    assert classify_frames(frames, innermost_first=False, constructors=True).phase is Phase.FORWARD
    # snapshot frames (every block's allocation site) leave constructors alone
    assert classify_frames(frames[-1:], innermost_first=False).phase is Phase.UNKNOWN


def test_a_serving_engines_constructor_says_nothing():
    # https://github.com/vllm-project/vllm/issues/22173: the traceback ends in LLM.__init__, which runs the
    # profile forward and allocates the KV cache: construction there is not only weights
    ctx = build_context(parse_paths([str(CORPUS / "vllm-project__vllm__22173" / "log.txt")]))
    assert ctx.phase.phase is Phase.UNKNOWN


def test_a_datasets_constructor_and_torch_save_are_not_model_loading():
    # https://github.com/snap-stanford/ogb/issues/404: NodePropPredDataset.__init__ -> pre_process -> torch.save ->
    # "MemoryError -- std::bad_alloc": preprocessing data and writing it, neither building nor loading a model
    frames = (Frame("node_prop_pred_data.py", 24, "<module>", "dataset = NodePropPredDataset(name=dataset_name)"),
              Frame("/venv/site-packages/ogb/nodeproppred/dataset.py", 63, "__init__", "self.pre_process()"),
              Frame("/venv/site-packages/ogb/nodeproppred/dataset.py", 139, "pre_process", "torch.save(obj, path)"),
              Frame("/venv/site-packages/torch/serialization.py", 372, "save", "_save(obj, opened_zipfile)"))
    assert classify_frames(frames, innermost_first=False, constructors=True).phase is Phase.UNKNOWN
    # torch.load's own frames still are a checkpoint load; a model's constructor still is construction
    load = frames[:1] + (Frame("/venv/site-packages/torch/serialization.py", 592, "load", "return _load(f)"),)
    assert classify_frames(load, innermost_first=False, constructors=True).phase is Phase.CHECKPOINT_LOAD
    model = frames[:1] + (Frame("/data/models/net.py", 10, "__init__", "self.w = torch.zeros(n)"),)
    assert classify_frames(model, innermost_first=False, constructors=True).phase is Phase.MODEL_INIT


def test_a_host_memory_error_in_preprocessing_is_host_oom_without_deepspeed_advice():
    ctx_paths = [str(CORPUS / "snap-stanford__ogb__404" / "log.txt")]
    import oompost

    r = oompost.analyze(ctx_paths)
    assert r.cause == "host_oom"
    keys = " ".join(f"{f.fix.key} {f.fix.value}" for f in r.fixes)
    assert "zero.Init" not in keys and "low_cpu_mem_usage" not in keys
    assert "MemoryError" in r.findings[0].detail


def test_a_kv_cache_pool_allocation_is_generation():
    # ModelTC/LightLLM#13's failing statement, inside a serving engine's constructor
    frames = (Frame("/srv/lightllm/server/router/model_infer/model_rpc.py", 80, "exposed_init_model", "self.model = M()"),
              Frame("/srv/lightllm/common/mem_manager.py", 20, "__init__", "self._init_buffers(size)"),
              Frame("/srv/lightllm/common/mem_manager.py", 31, "_init_buffers",
                    'self.value_buffer = [torch.empty((size, head_num, head_dim), dtype=dtype, device="cuda") '
                    'for _ in range(layer_num)]'))
    m = classify_frames(frames, innermost_first=False, constructors=True)
    assert m.phase is Phase.GENERATION and "KV-cache" in m.why
    # a buffer that is not a cache stays what it was
    plain = frames[:2] + (Frame("/srv/model.py", 31, "_init_buffers", "self.buf = torch.empty(n, device='cuda')"),)
    assert classify_frames(plain, innermost_first=False, constructors=True).phase is not Phase.GENERATION


def test_a_virtualenv_under_a_torch_directory_does_not_make_every_frame_torch_s():
    # sample_logs/activation_spike_mistral7b_lora_bf16_hf_trainer_a4000_16g: the GPU machine's Python lives in
    # /opt/torch/.venv, so every installed library's path holds "/torch/".  The innermost readable frame is PEFT's
    # LoRA forward, inside the model call of a custom compute_loss: the phase is the forward, not the loss.
    venv = "/opt/torch/.venv/lib/python3.12/site-packages/"
    frames = (Frame("/work/train.py", 93, "compute_loss", 'out = model(input_ids=inputs["input_ids"])'),
              Frame(venv + "torch/nn/modules/module.py", 1790, "_call_impl", "return forward_call(*args, **kwargs)"),
              Frame(venv + "peft/tuners/lora/layer.py", 1100, "forward",
                    "x = self._cast_input_dtype(x, lora_A.weight.dtype)"),
              Frame(venv + "peft/tuners/tuners_utils.py", 2235, "_cast_input_dtype", "return x.to(dtype=dtype)"))
    m = classify_frames(frames, innermost_first=False, constructors=True)
    assert m.phase is Phase.FORWARD and "peft/tuners/lora" in m.frame.filename
    # torch's own frames under that virtualenv are still torch's (a weak forward: the scan goes on outwards)
    only_torch = frames[:2]
    assert classify_frames(only_torch, innermost_first=False).phase is Phase.LOSS
    sample = Path(__file__).parent.parent / "sample_logs" / "activation_spike_mistral7b_lora_bf16_hf_trainer_a4000_16g"
    assert build_context(parse_paths([str(sample / "run.log")])).phase.phase is Phase.FORWARD


def test_bitsandbytes_quantizing_weights_on_their_way_to_the_gpu_is_loading():
    # unslothai/unsloth#2504 (dev, https://github.com/unslothai/unsloth/issues/2504): an IPython traceback of a
    # 4-bit load, innermost in bitsandbytes' quantize_4bit under Params4bit._quantize, before any batch
    case = CORPUS / "unslothai__unsloth__2504" / "log.txt"
    ctx = build_context(parse_paths([str(case)]))
    assert ctx.phase.phase is Phase.MODEL_TO_DEVICE and "bitsandbytes" in ctx.phase.why
    # a 4-bit layer's forward (dequantizing its weight) is still the forward
    fwd = (Frame("/x/site-packages/bitsandbytes/nn/modules.py", 468, "Linear4bit.forward",
                 "out = bnb.matmul_4bit(x, self.weight.t(), bias=bias, quant_state=self.weight.quant_state)"),)
    assert classify_frames(fwd, innermost_first=False).phase is not Phase.MODEL_TO_DEVICE


def test_a_static_kv_cache_set_up_before_generation_is_generation():
    # Saganaki22/ComfyUI-FishAudioS2#5 (dev, https://github.com/Saganaki22/ComfyUI-FishAudioS2/issues/5): a
    # gpt-fast-style ``setup_caches`` builds each layer's KVCache, whose constructor registers the k_cache buffer:
    # a constructor, but of the cache sized for the longest sequence, not of the model
    case = CORPUS / "Saganaki22__ComfyUI-FishAudioS2__5" / "log.txt"
    ctx = build_context(parse_paths([str(case)]))
    assert ctx.phase.phase is Phase.GENERATION and "KV cache" in ctx.phase.why
    # an ordinary buffer registered in a constructor stays model construction
    plain = (Frame("/srv/model.py", 40, "__init__", 'self.register_buffer("inv_freq", torch.zeros(n))'),)
    assert classify_frames(plain, innermost_first=False, constructors=True).phase is Phase.MODEL_INIT


def test_tensorflows_training_ops_kernel_is_the_optimizer_step():
    # ymcui/Chinese-XLNet#38 (dev, https://github.com/ymcui/Chinese-XLNet/issues/38): "OP_REQUIRES failed at
    # training_ops.cc:2816 : Resource exhausted: OOM when allocating tensor with shape[3072,768]" is an optimizer's
    # apply kernel (ApplyAdam), not an op of the model
    case = CORPUS / "ymcui__Chinese-XLNet__38" / "log.txt"
    ctx = build_context(parse_paths([str(case)]))
    assert ctx.phase.phase is Phase.OPTIMIZER_STEP
    conv = (Frame("tensorflow", 1, "conv_ops", "OP_REQUIRES failed at conv_ops.cc:746"),)
    assert classify_frames(conv, innermost_first=True).phase is Phase.FORWARD


def test_jaxs_train_state_creation_is_model_construction():
    # Physical-Intelligence/openpi#577 (dev, https://github.com/Physical-Intelligence/openpi/issues/577): XLA's BFC
    # allocator fails inside ``init_train_state`` (the parameters and optimizer state, before the first step)
    case = CORPUS / "Physical-Intelligence__openpi__577" / "log.txt"
    ctx = build_context(parse_paths([str(case)]))
    assert ctx.phase.phase is Phase.MODEL_INIT and "train state" in ctx.phase.why
    step = (Frame("/x/train.py", 80, "main", "state, loss = train_step(state, batch)"),)
    assert classify_frames(step, innermost_first=False).phase is not Phase.MODEL_INIT
