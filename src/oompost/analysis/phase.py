"""Where in the training program a failing allocation sits.

The stack of the OOM (a Python traceback, outermost first, or a snapshot's
``oom`` trace entry, innermost first) is scanned from the innermost frame
outwards; the first frame that a marker recognises decides the phase.  The
phase is what lets the rules tell model states (built once, at start-up or at
the first step) from activations (every forward/backward) from communication
buffers (DeepSpeed buckets, ZeRO-3 gathers, NCCL).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import Enum

from ..model import LOST_FRAME, XLA_PROGRAM, Frame


class Phase(str, Enum):
    MODEL_INIT = "model_init"                 # building the model (from_pretrained, __init__, weight init)
    MODEL_TO_DEVICE = "model_to_device"       # .to("cuda") / .cuda() of the whole module (incl. DeepSpeed's)
    ZERO_INIT = "zero_init"                   # DeepSpeed engine / ZeRO optimizer construction: flat buffers, partitions
    OPTIMIZER_INIT = "optimizer_init"         # optimizer state creation (Adam moments, fp32 master copies)
    GRAD_PARTITION = "grad_partition"         # ZeRO gradient partition buffers (a model state, built at the first backward)
    OPTIMIZER_STEP = "optimizer_step"
    DS_BUCKET = "ds_bucket"                   # DeepSpeed reduce/allgather/IPG buckets
    ZERO3_GATHER = "zero3_gather"             # ZeRO-3 parameter all-gather / prefetch working set
    COLLECTIVE = "collective"                 # torch.distributed collectives / NCCL communicator creation
    FORWARD = "forward"
    LOGITS = "logits"                         # lm_head output
    LOSS = "loss"                             # cross-entropy and its fp32 temporaries
    BACKWARD = "backward"
    GENERATION = "generation"                 # generate() / KV cache
    CHECKPOINT_LOAD = "checkpoint_load"
    PIN_MEMORY = "pin_memory"                 # host pinned buffers (offload, DataLoader pin_memory)
    RETAINED = "retained_outputs"             # every batch's outputs concatenated / gathered on the GPU (metrics)
    UNKNOWN = "unknown"

    @property
    def is_model_state(self) -> bool:
        return self in _MODEL_STATE

    @property
    def is_activation(self) -> bool:
        return self in _ACTIVATION

    @property
    def is_comm(self) -> bool:
        return self in (Phase.DS_BUCKET, Phase.ZERO3_GATHER, Phase.COLLECTIVE)


_MODEL_STATE = {Phase.MODEL_INIT, Phase.MODEL_TO_DEVICE, Phase.ZERO_INIT, Phase.OPTIMIZER_INIT,
                Phase.GRAD_PARTITION, Phase.OPTIMIZER_STEP, Phase.CHECKPOINT_LOAD}
_ACTIVATION = {Phase.FORWARD, Phase.LOGITS, Phase.LOSS, Phase.BACKWARD, Phase.GENERATION}


@dataclass(frozen=True, slots=True)
class PhaseMatch:
    phase: Phase
    frame: Frame | None = None
    why: str = ""


# (phase, filename substring or None, function-name regex or None, code regex or None, why)
_MARKERS: tuple[tuple[Phase, str | None, str | None, str | None, str], ...] = (
    # DeepSpeed communication buffers
    (Phase.DS_BUCKET, "deepspeed/", r"setup_buckets|ipg|allocate_ipg|__add_grad_to_ipg_bucket|all_gather_dp_groups",
     None, "DeepSpeed reduce/allgather bucket"),
    (Phase.DS_BUCKET, "deepspeed/", None, r"reduce_bucket_size|allgather_bucket_size|ipg_buffer|bucket\.buffer",
     "DeepSpeed bucket allocation"),
    # ZeRO-1/2's own backward() allocates the contiguous IPG reduce buckets before it calls autograd: when it is
    # the innermost frame, the failing allocation is a bucket (deeper frames would be autograd's)
    (Phase.DS_BUCKET, "deepspeed/runtime/zero/stage_1_and_2", r"^backward$", None,
     "ZeRO-1/2 backward() allocating its IPG reduce buckets"),
    (Phase.ZERO3_GATHER, "deepspeed/runtime/zero/partition", r"all_gather|allgather|_all_gather", None,
     "ZeRO-3 parameter all-gather"),
    (Phase.ZERO3_GATHER, "deepspeed/runtime/zero/partitioned_param_coordinator", r"fetch_sub_module|all_gather",
     None, "ZeRO-3 prefetch / fetch"),
    # DeepSpeed model states
    (Phase.GRAD_PARTITION, "deepspeed/", r"copy_grads_in_partition|partition_grads|_create_grad_partition|"
     r"initialize_gradient_partition", None, "ZeRO gradient partition"),
    (Phase.OPTIMIZER_INIT, "deepspeed/", r"initialize_optimizer_states|_setup_for_real_optimizer|"
     r"_create_fp32_partitions|_create_fp16_partitions", None, "ZeRO optimizer-state initialisation"),
    (Phase.MODEL_TO_DEVICE, "deepspeed/", r"_configure_distributed_model", None,
     "DeepSpeed moves the whole module to the GPU"),
    (Phase.ZERO_INIT, "deepspeed/", r"flatten_dense_tensors_aligned|_flatten|__init__|_configure_zero_optimizer|"
     r"_configure_optimizer|initialize|partition|_convert_to_deepspeed_param|_post_init_method", None,
     "DeepSpeed engine / ZeRO initialisation"),
    (Phase.OPTIMIZER_STEP, "deepspeed/", r"^step$|_optimizer_step|unscale_and_clip|_update_model", None,
     "DeepSpeed optimizer step"),
    # torch.distributed
    (Phase.COLLECTIVE, "torch/distributed/distributed_c10d", None, None, "torch.distributed collective"),
    # DDP's constructor builds its gradient buckets (a second copy of every gradient) through dist.Reducer
    (Phase.GRAD_PARTITION, "torch/nn/parallel/distributed", r"_ddp_init_helper|^__init__$", r"Reducer\(|^\s*self\._ddp_init_helper",
     "DDP's gradient buckets, built when the model is wrapped (a copy of every gradient)"),
    # checkpoints, host memory
    (Phase.CHECKPOINT_LOAD, None, r"load_checkpoint|_load_zero_checkpoint|load_state_dict|_load_from_state_dict", None,
     "checkpoint load"),
    # torch.load's side of torch/serialization.py only: torch.save (_save, save) writes a checkpoint, it loads nothing
    (Phase.CHECKPOINT_LOAD, "torch/serialization", r"^(?!_?save$|_open_zipfile_writer|__exit__$)", None, "torch.load"),
    (Phase.PIN_MEMORY, None, r"pin_memory|_pin_memory_loop", None, "pinned host memory"),
    # generation
    (Phase.GENERATION, "transformers/generation", None, None, "generate()"),
    (Phase.GENERATION, "cache_utils", None, None, "KV cache"),
    # a serving engine preallocating its KV-cache pool (LightLLM's "self.value_buffer = [torch.empty((size,
    # head_num, head_dim), ...)", vLLM's _allocate_kv_cache): the cache sized for the requests it will serve
    (Phase.GENERATION, None, None, r"\b(?:key|value|kv|k|v)_(?:buffer|cache)s?\s*=.*torch\.(?:empty|zeros)\(",
     "the KV-cache pool being allocated"),
    (Phase.GENERATION, None, r"^_?(?:allocate|init|initialize)_kv_cache|^_allocate_kv_cache_tensors$", None,
     "the KV-cache pool being allocated"),
    # gpt-fast-style static caches (fish-speech, many TTS/LLM ports): ``model.setup_caches(max_batch_size,
    # max_seq_len)`` builds a KVCache module per layer whose k_cache/v_cache buffers are sized for the longest
    # sequence (ComfyUI-FishAudioS2#5, dev)
    (Phase.GENERATION, None, None, r"register_buffer\(\s*[\"'](?:key|value|kv|k|v)_cache[\"']",
     "a static KV cache's buffers being allocated"),
    (Phase.GENERATION, None, r"^setup_caches?$", None, "a static KV cache being set up (setup_caches)"),
    (Phase.GENERATION, None, r"^generate$|_sample$|beam_search|greedy_search", None, "generation"),
    # TensorFlow: the op kernel or graph node that failed (parsers/runtime_ooms.py makes them the frames, the node
    # innermost); gradient ops are backward, optimizer ops the step, any other op is the model's forward
    (Phase.BACKWARD, "tensorflow", r"(?i)gradients?/|_grad\b|grad_|Grad|backprop", None, "a TensorFlow gradient op"),
    # training_ops.cc holds the optimizers' apply kernels (ApplyAdam, ResourceApplyMomentum...: Chinese-XLNet#38, dev)
    (Phase.OPTIMIZER_STEP, "tensorflow", r"(?i)adam|training/|training_ops|optimizer|apply_\w+", None,
     "a TensorFlow optimizer op"),
    (Phase.FORWARD, "tensorflow", r"\w", None, "a TensorFlow op of the model"),
    # the compiled JAX/XLA program an OOM names ([executable_name='jit_train_step']): one program holds a whole
    # step, so its temporaries are the step's activations and gradients; an init program builds the parameters
    (Phase.MODEL_INIT, XLA_PROGRAM, r"(?i)init|create_train_state|load", None,
     "XLA's compiled program creating the parameters"),
    # outside a jitted init, each array JAX creates is its own small program named after the op
    # (jax.random.normal -> 'jit__normal', jnp.zeros_like -> 'jit_zeros_like'): parameters and optimizer state
    (Phase.MODEL_INIT, XLA_PROGRAM, r"(?i)^(?:jit|pmap)_+(?:normal|uniform|truncated_normal|"
     r"(?:random_)?(?:bits|split|fold_in)|zeros(?:_like)?|ones(?:_like)?|full(?:_like)?|empty|iota|"
     r"orthogonal|glorot\w*|lecun\w*|he_\w*|xavier\w*|variance_scaling\w*)$", None,
     "XLA creating an array (parameter or optimizer-state initialisation)"),
    (Phase.GENERATION, XLA_PROGRAM, r"(?i)generat|sampl|decode", None, "XLA's compiled generation program"),
    (Phase.FORWARD, XLA_PROGRAM, r"\w", None,
     "XLA's compiled program of the step (forward, backward and update in one program)"),
    # ONNX Runtime: the graph node whose kernel failed (an inference graph: its ops are the forward)
    (Phase.FORWARD, "onnxruntime", r"\w", None, "an ONNX Runtime graph node"),
    # TensorRT's builder holds the weights and sizes tactic workspaces on the GPU (virtualMemoryBuffer,
    # TensorRT 7's rtSafe runtime allocate): failing there is building the engine, before any inference
    (Phase.MODEL_INIT, "tensorrt", r"resizePhysical|virtualMemoryBuffer|Runtime::allocate", None,
     "TensorRT building the engine (weights and tactic workspace)"),
    # LMDeploy's TurboMind: the source file of the failed cudaMalloc (parsers/runtime_ooms.py makes it the frame);
    # utils/memory_utils.cu's deviceMalloc is where the engine allocates the model's weights (lmdeploy#1593 and
    # #2381, dev: both failed creating the weights); its allocator.h (runtime buffers) is left to the other signs
    (Phase.MODEL_INIT, "turbomind/utils/memory_utils", None, None, "TurboMind allocating the weights (deviceMalloc)"),
    # llama.cpp / ggml: the C function that failed to allocate (parsers/runtime_ooms.py makes it the one frame)
    (Phase.GENERATION, "ggml", r"kv_cache|kv_self", r"kv cache", "llama.cpp's KV cache"),
    (Phase.FORWARD, "ggml", r"gallocr|graph|sched|compute|pool_malloc", None,
     "llama.cpp's compute buffer (the graph's activations)"),
    (Phase.MODEL_INIT, "ggml", r"model_load|load_tensors|load_all_data|llama_model", None,
     "llama.cpp loading the weights"),
    # every batch's outputs kept on the GPU for metrics: the HF Trainer's evaluation/prediction loop
    # concatenates logits batch after batch (nested_concat) unless eval_accumulation_steps moves them off;
    # hand-written loops do the same with torch.cat over a list of outputs
    (Phase.RETAINED, None, r"nested_concat|_nested_gather|nested_numpify|torch_pad_and_concatenate", None,
     "per-batch outputs concatenated on the GPU"),
    (Phase.RETAINED, None, None, r"nested_concat\(|torch\.(?:cat|stack|concat)\(\s*\(?\[?\s*(?:self\.)?(?:all_|total_)?"
     r"(?:preds|predictions|logits|outputs|embeddings|features|probs|scores)\b", "per-batch outputs concatenated on the GPU"),
    # optimizer (torch)
    (Phase.OPTIMIZER_STEP, "torch/optim", None, None, "torch optimizer step (first step creates its states)"),
    # loss and logits
    (Phase.LOSS, "transformers/loss", None, None, "loss (HF ForCausalLMLoss upcasts logits to fp32)"),
    (Phase.LOSS, None, r"cross_entropy|nll_loss|log_softmax|loss_function|compute_loss$", None, "loss"),
    (Phase.LOGITS, None, None, r"lm_head|logits\s*=", "lm_head / logits"),
    # backward
    (Phase.BACKWARD, "torch/autograd", None, None, "backward"),
    (Phase.BACKWARD, "torch/_tensor.py", r"^backward$", None, "backward"),
    (Phase.BACKWARD, None, r"^backward$", r"\.backward\(", "backward"),
    # whole-module moves and model construction
    # bitsandbytes quantizes a 4-/8-bit layer's weights as they move to the GPU (Params4bit._quantize from
    # .cuda()/.to(), Int8Params.cuda): loading a quantized model, before any batch (unsloth#2504, dev)
    (Phase.MODEL_TO_DEVICE, "bitsandbytes/nn/modules", r"(?:^|\.)(?:_quantize|cuda|to)$", None,
     "bitsandbytes quantizing the weights as they move to the GPU"),
    (Phase.MODEL_TO_DEVICE, "torch/nn/modules/module.py", r"^(?:to|cuda|_apply)$", None, "module.to / .cuda()"),
    (Phase.MODEL_INIT, "torch/nn/modules/", r"^(?:__init__|reset_parameters)$", None,
     "a module's parameters created (nn.Module __init__)"),
    (Phase.MODEL_INIT, "transformers/modeling_utils", r"from_pretrained|_load_pretrained_model|from_config|"
     r"_from_config|post_init|_init_weights|init_weights", None, "model construction"),
    # the user's own code lines, as tracebacks quote them
    (Phase.GENERATION, None, None, r"\.generate\(", "generate() call"),
    (Phase.BACKWARD, None, None, r"\.backward\(|backward\(loss|accelerator\.backward|manual_backward",
     "backward call"),
    (Phase.OPTIMIZER_STEP, None, None, r"optim\w*\.step\(|scaler\.step\(", "optimizer.step() call"),
    # the Adam/AdamW update itself, as torch.optim and DeepSpeed's Adam quote it (`exp_avg_sq.sqrt()`,
    # `exp_avg.mul_(beta1)`, `bias_correction2`): the first step creates the two moments
    (Phase.OPTIMIZER_STEP, None, None, r"\bexp_avg(?:_sq)?\b|\bbias_correction[12]", "Adam's update (its moments)"),
    (Phase.MODEL_TO_DEVICE, None, None, r"\.to\((?:self\.)?(?:device|'cuda|\"cuda|torch\.device|.*cuda)|\.cuda\(\)",
     "moving to the GPU"),
    (Phase.MODEL_INIT, None, None, r"from_pretrained\(|load_model|build_model|create_model|get_model|"
     r"init_model|load_checkpoint|Model\(", "building / loading the model"),
    (Phase.MODEL_INIT, None, r"load_model|build_model|create_model|from_pretrained|load_checkpoint|"
     r"_load_pretrained_model|load_state_dict|model_init", None, "building / loading the model"),
    # JAX/Flax's idiom for materialising the parameters and the optimizer state before the first step
    # (``create_train_state``, openpi's ``init_train_state``: openpi#577, dev)
    (Phase.MODEL_INIT, None, r"^_?(?:init|create|make)_train_state$", None,
     "the parameters and optimizer state being created (train state)"),
    (Phase.MODEL_INIT, None, None, r"\b_?(?:init|create|make)_train_state\(",
     "the parameters and optimizer state being created (train state)"),
    (Phase.FORWARD, None, None, r"=\s*(?:self\.)?_?\w*(?:model|net|module|generator|unet|encoder|decoder|vae|transformer|backbone)\w*\(",
     "model call"),
    # the ops whose outputs are activations, as user and library frames name or quote them
    (Phase.FORWARD, None, None, r"scaled_dot_product_attention\(|flash_attn\w*\(|\bsoftmax\(|\.matmul\(|\bbmm\(|"
     r"\beinsum\(|\binterpolate\(|\bconv[123]d\(|\bF\.conv|\bbaddbmm\(|\bupsample\w*\(", "an activation op"),
    (Phase.FORWARD, None, r"^(?:_?attention|_?attn|self_attn|\w+_attention|\w*_attn|attention_forward|"
     r"\w*attn_forward|mlp|_?conv_forward|upsample\w*|interpolate)$", None, "an attention / MLP / conv layer"),
    (Phase.COLLECTIVE, None, r"allreduce|all_reduce|reduce_scatter|all_gather|allgather|broadcast_params|"
     r"_all_to_all", None, "a collective's buffer"),
    # forward (module calls)
    (Phase.FORWARD, "torch/nn/modules/module.py", r"_call_impl|_wrapped_call_impl|inner", None, "forward"),
    (Phase.FORWARD, None, r"^forward$", None, "forward"),
    (Phase.FORWARD, "torch/nn/functional", None, None, "forward"),
    (Phase.FORWARD, "torch/utils/checkpoint", None, None, "forward (recomputed under checkpointing)"),
)

_COMPILED = tuple((ph, fn, re.compile(name) if name else None, re.compile(code) if code else None, why)
                  for ph, fn, name, code, why in _MARKERS)

# frames that say nothing about the phase (allocator/unwinder/C++ plumbing)
_IGNORE_NAMES = ("unwind", "CapturedTraceback", "gather_with_cpp", "c10::", "at::", "torch::", "_start",
                 "__libc", "PyEval_", "PyObject_", "PyFunction_")


def _match(fr: Frame) -> tuple[Phase, str] | None:
    filename = fr.filename.replace("\\", "/")
    for ph, fn, name, code, why in _COMPILED:
        if fn is not None and fn not in filename:
            continue
        if name is not None and not name.search(fr.name):
            continue
        if code is not None and not code.search(fr.code or ""):
            continue
        if fn is None and name is None and code is None:
            continue
        return ph, why
    return None


def is_torch_internal(fr: Frame) -> bool:
    """A frame of torch itself: under an installed package, the package's own path decides (a virtualenv in
    /opt/torch/.venv makes every installed library's path hold "/torch/"); elsewhere, a torch source tree."""
    f = fr.filename.replace("\\", "/")
    for root in ("site-packages/", "dist-packages/"):
        if root in f:
            return f.rsplit(root, 1)[1].startswith("torch/")
    return "/torch/" in f or f.startswith("torch/")


# a traceback whose innermost readable frame is a constructor (``__init__``; a forum's Markdown turns it into a
# bold "init") failed while an object was being built: at start-up, a model or a pipeline taking its weights
# (faster-whisper's ``WhisperModel.__init__``), unless a frame further out is a forward/backward/generation
_CONSTRUCTOR = re.compile(r"^(?:__init__|init)$")
_CONSTRUCTOR_WHY = "a constructor allocating on the GPU (a model or pipeline being built)"
# serving engines whose constructors also run the model (vLLM's profile run and CUDA-graph capture, sglang's and
# TensorRT-LLM's warm-up): construction there is weights, activations and the KV cache, so it says nothing
_ENGINES_THAT_RUN_IN_INIT = ("vllm/", "sglang/", "text_generation_server/", "tensorrt_llm/", "lmdeploy/")
# a constructor in a dataset module builds data, not a model (ogb's NodePropPredDataset.__init__ preprocessing)
# (the module's own name or its package's, not any directory: "/data/" is a common mount point)
_DATA_MODULE = re.compile(r"(?:^|[/\\])(?:\w*dataset\w*|\w*dataloader\w*)\.py$|(?:^|[/\\])datasets?[/\\][^/\\]+\.py$",
                          re.IGNORECASE)


def classify_frames(frames: tuple[Frame, ...], innermost_first: bool, constructors: bool = False) -> PhaseMatch:
    """The phase of an allocation whose stack is ``frames``.

    A generic "forward" inside torch itself (``nn.Linear.forward``,
    ``F.silu``, ``Module._call_impl``) is weak: the scan goes on outwards to
    the first frame outside torch, which may say more (``lm_head``, the
    loss, ``generate``).  With ``constructors`` (a traceback's frames, which
    show only the calls that led to the failure), a constructor no marker
    knows is a weak sign of model construction, overruled by any phase a frame
    further out names."""
    ordered = frames if innermost_first else tuple(reversed(frames))
    weak: PhaseMatch | None = None
    for fr in ordered:
        if (fr.line <= 0 and fr.name != LOST_FRAME) or any(s in fr.name for s in _IGNORE_NAMES):
            continue
        m = _match(fr)
        internal = is_torch_internal(fr)
        if m is None and constructors and weak is None and not internal and _CONSTRUCTOR.match(fr.name):
            if any(e in fr.filename.replace("\\", "/") for e in _ENGINES_THAT_RUN_IN_INIT):
                return PhaseMatch(Phase.UNKNOWN)
            if _DATA_MODULE.search(fr.filename):
                continue
            weak = PhaseMatch(Phase.MODEL_INIT, fr, _CONSTRUCTOR_WHY)
            continue
        if m is None:
            if weak is not None and not internal and weak.why != _CONSTRUCTOR_WHY:
                return weak
            continue
        ph, why = m
        if ph is Phase.FORWARD and internal:
            weak = PhaseMatch(ph, fr, why) if weak is None or weak.why == _CONSTRUCTOR_WHY else weak
            continue
        return PhaseMatch(ph, fr, why)
    return weak or PhaseMatch(Phase.UNKNOWN)


def user_location(frames: tuple[Frame, ...], innermost_first: bool) -> Frame | None:
    """The innermost frame in the user's own code (not torch/transformers/deepspeed/site-packages)."""
    ordered = frames if innermost_first else tuple(reversed(frames))
    for fr in ordered:
        f = fr.filename.replace("\\", "/")
        if fr.line <= 0 or "site-packages" in f or "dist-packages" in f or f.startswith("<"):
            continue
        if any(p in f for p in ("/torch/", "/transformers/", "/deepspeed/", "/accelerate/", "/peft/", "/trl/")):
            continue
        return fr
    return None


@functools.lru_cache(maxsize=65536)
def block_phase(frames: tuple[Frame, ...]) -> Phase:
    """The phase of a snapshot block allocated at ``frames`` (innermost first); a snapshot repeats a few
    thousand stacks over its blocks, so each is classified once."""
    return classify_frames(frames, innermost_first=True).phase
