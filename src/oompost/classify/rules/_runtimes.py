"""What to change when another runtime's allocator failed: that runtime's own knobs, not PyTorch's.

A JAX/XLA, TensorFlow, PaddlePaddle or MLX program that runs out of device memory is read with the same causes
as a PyTorch one (the request against what is left, the phase, the steps), but the remedies a PyTorch run gets
do nothing there: ``PYTORCH_CUDA_ALLOC_CONF``, ``torch.cuda.empty_cache()``, the HF Trainer's
``--gradient_checkpointing`` or a ``ds_config`` are not its settings.  The inference runtimes (llama.cpp,
TensorRT, ONNX Runtime, RAPIDS, Jetson's shared NvMap memory) have one list whatever the cause, since their
knobs size everything at once; the training frameworks have one per cause.  Sources: JAX's "GPU memory
allocation" page (preallocation of 75 %, ``XLA_PYTHON_CLIENT_PREALLOCATE``, ``XLA_PYTHON_CLIENT_MEM_FRACTION``),
TensorFlow's GPU guide and its own OOM hint (``TF_GPU_ALLOCATOR=cuda_malloc_async``), PaddlePaddle's memory
flags (``FLAGS_allocator_strategy``).
"""

from __future__ import annotations

from dataclasses import replace

from ...model import DATA_RUNTIMES, TRAINING_RUNTIMES
from ..base import Cause, Fix, NotAFix
from ._common import LARGER_CARD

# llama.cpp / ggml's knobs (llama-server, llama-cpp-python, ollama's num_ctx / num_gpu)
GGML_FIXES = (Fix("code", "--ctx-size (-c) / n_ctx / num_ctx", "lower it (e.g. 8192)",
                  "llama.cpp sizes its KV cache and compute buffer for the whole context"),
              Fix("code", "--ubatch-size (-ub) / --batch-size (-b)", "lower it (e.g. 256)",
                  "the compute buffer grows with the tokens evaluated at once"),
              Fix("code", "--n-gpu-layers (-ngl) / num_gpu", "offload fewer layers",
                  "the layers kept on the host free GPU memory for the buffers"),
              Fix("code", "a smaller quantization", "e.g. Q4_K_M instead of Q8_0",
                  "fewer bytes per weight"))
TENSORRT_FIXES = (Fix("code", "the engine's profiles", "lower trtllm-build --max_batch_size / --max_input_len / "
                      "--max_num_tokens (or the optimization profile's max shapes)",
                      "the builder sizes activation memory and tactic workspaces for the largest profile"),
                  Fix("code", "builder workspace", "config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, ...)",
                      "caps the scratch memory tactics may use while the engine is built"),
                  Fix("code", "quantized weights", "build from an int8 / fp8 / int4 checkpoint",
                      "the builder holds the weights on the GPU while it builds"))
# ONNX Runtime's CUDA execution provider: a BFC arena per session, sized by its provider options
ONNXRUNTIME_FIXES = (Fix("code", "CUDAExecutionProvider gpu_mem_limit", "raise it, or leave it unset (unlimited)",
                         "\"Available memory of N is smaller than requested bytes\" is the arena at this limit, "
                         "not the card"),
                     Fix("code", "CUDAExecutionProvider arena_extend_strategy", "kSameAsRequested",
                         "the default kNextPowerOfTwo grows the arena in doubling chunks that overshoot the card"),
                     Fix("code", "inputs per run", "fewer images / smaller inputs per session.run",
                         "intermediate tensors grow with the batch and the input size"),
                     Fix("code", "sessions per GPU", "one InferenceSession per model and GPU, shared",
                         "every session keeps its own arena"))
# Jetson (NvMap: memory the CPU and the integrated GPU share): what else holds the board's RAM is what matters
NVMAP_FIXES = (Fix("code", "models on the GPU", "keep only the largest model on the GPU; run the small ones on the "
                   "CPU", "every model's weights and workspaces come out of the same shared RAM"),
               Fix("code", "precision", "fp16 / int8 (a TensorRT engine) instead of fp32",
                   "halves or quarters the weights and activations"),
               Fix("env", "the desktop", "sudo systemctl isolate multi-user.target (no GUI) and close other "
                   "programs", "the graphical session holds hundreds of MB of the shared RAM"),
               Fix("code", "batch / input size", "lower it", "intermediate buffers grow with the input"))
# RAPIDS (cuDF, cuML, XGBoost on Dask-CUDA): the data's footprint per GPU, not a model's
RMM_FIXES = (Fix("code", "more GPUs or partitions", "a Dask-CUDA cluster over more GPUs / more npartitions",
                 "each worker holds its share of the data plus the algorithm's working copies"),
             Fix("code", "spill to host", "LocalCUDACluster(device_memory_limit=...) or CUDF_SPILL=on",
                 "device buffers over the limit move to host memory instead of failing"),
             Fix("code", "managed memory", "rmm.reinitialize(managed_memory=True)",
                 "unified memory lets the working set exceed the card, paging to host (slower)"),
             Fix("code", "XGBoost's QuantileDMatrix", "build the training matrix with xgboost.dask.DaskQuantileDMatrix",
                 "keeps the quantised matrix only, not the raw features as well"))

# what every training framework shares
_STABLE_SHAPES = Fix("code", "stable shapes", "pad batches to a few fixed lengths",
                     "varying sizes leave holes the next size cannot reuse")
_ANOTHER_GPU = Fix("env", "CUDA_VISIBLE_DEVICES", "a GPU no other process uses", "another process holds the card")
_NOT_TORCH = (NotAFix("PYTORCH_CUDA_ALLOC_CONF / torch.cuda.empty_cache()", "not this runtime's allocator"),)

# XLA (JAX, torch_xla, TF on TPU): the program is compiled as a whole, its buffers sized for the traced shapes
_UNIFIED = Fix("env", "TF_FORCE_UNIFIED_MEMORY=1 and XLA_PYTHON_CLIENT_MEM_FRACTION", "e.g. 4.0 (JAX on a GPU)",
               "unified memory lets the program spill into host RAM (slower), as AlphaFold's scripts do for long "
               "sequences")
XLA_FIXES = {
    Cause.ACTIVATION_SPIKE: (
        Fix("code", "batch, sequence or input size", "halve it (training: keep the global batch with gradient "
            "accumulation, e.g. optax.MultiSteps)",
            "the compiled program sizes its temporaries for the largest shape it was traced with"),
        Fix("code", "rematerialisation (training)", "jax.checkpoint / flax remat on each layer "
            "(torch_xla: torch.utils.checkpoint)", "residuals are recomputed in the backward pass instead of kept"),
        _UNIFIED),
    Cause.CAPACITY: (
        Fix("code", "shard the parameters (and optimizer state)", "over more devices (a jax.sharding mesh, "
            "FSDP-style)", "each device then holds 1/N of them"),
        Fix("code", "a smaller model or problem size", "", "the compiled program's live buffers exceed the device"),
        Fix("code", "a leaner optimizer state (training)", "optax.adafactor, or bf16 moments "
            "(mu_dtype=jnp.bfloat16)", "Adam keeps two fp32 moments per parameter"),
        _UNIFIED),
    Cause.FRAGMENTATION: (
        Fix("env", "XLA_PYTHON_CLIENT_MEM_FRACTION", ".95 on a GPU nothing else uses",
            "a larger pool leaves room for a block of the failing size"),
        Fix("env", "XLA_PYTHON_CLIENT_PREALLOCATE", "leave it on (the default): do not set it to false",
            "one preallocated pool fragments less than allocating on demand"),
        replace(_STABLE_SHAPES, why="each new shape is a new compiled program with its own buffers")),
    Cause.CONFIG_ERROR: (
        Fix("env", "XLA_PYTHON_CLIENT_MEM_FRACTION", "a share per process (e.g. .45 for two)",
            "every JAX process preallocates 75 % of the card by default"),
        Fix("code", "keep TensorFlow off the GPU", "tf.config.set_visible_devices([], 'GPU') when it only loads data",
            "TensorFlow preallocates the card too")),
}

TENSORFLOW_FIXES = {
    Cause.ACTIVATION_SPIKE: (
        Fix("code", "batch size", "halve it", "activations grow with batch × input size"),
        Fix("code", "tf.recompute_grad", "wrap the large blocks", "their activations are recomputed in backward"),
        Fix("code", "mixed precision", "tf.keras.mixed_precision.set_global_policy('mixed_float16')",
            "activations take half the bytes")),
    Cause.CAPACITY: (
        Fix("code", "a smaller model or input size", "", "the weights and optimizer slots exceed the card"),
        Fix("code", "mixed precision", "tf.keras.mixed_precision.set_global_policy('mixed_float16')",
            "weights in compute and activations take half the bytes"),
        LARGER_CARD),
    Cause.FRAGMENTATION: (
        Fix("env", "TF_GPU_ALLOCATOR", "cuda_malloc_async", "TensorFlow's own hint when its BFC pool fragments"),
        _STABLE_SHAPES),
    Cause.CONFIG_ERROR: (
        Fix("code", "memory growth", "tf.config.experimental.set_memory_growth(gpu, True) "
            "(or TF_FORCE_GPU_ALLOW_GROWTH=true)", "TensorFlow maps almost the whole card at start-up by default"),
        _ANOTHER_GPU),
}

PADDLE_FIXES = {
    Cause.ACTIVATION_SPIKE: (
        Fix("code", "batch size", "halve it (accumulate gradients to keep the global batch)",
            "activations grow with batch × input size"),
        Fix("code", "recompute", "paddle.distributed.fleet.utils.recompute on the large blocks",
            "their activations are recomputed in backward"),
        Fix("code", "AMP", "paddle.amp.auto_cast (O1/O2)", "activations take half the bytes")),
    Cause.CAPACITY: (
        Fix("code", "sharding", "paddle.distributed.sharding.group_sharded_parallel (level 'os_g' or 'p_g_os')",
            "each GPU holds a share of the optimizer state, gradients and weights"),
        Fix("code", "AMP O2", "paddle.amp.decorate(level='O2')", "fp16 weights in compute"),
        LARGER_CARD),
    Cause.FRAGMENTATION: (
        Fix("env", "FLAGS_allocator_strategy", "naive_best_fit",
            "the preallocated best-fit pool fragments less than auto_growth (the pip default)"),
        _STABLE_SHAPES),
    Cause.CONFIG_ERROR: (
        Fix("env", "FLAGS_fraction_of_gpu_memory_to_use", "a share per process",
            "the naive_best_fit pool takes most of the card at start-up"),
        _ANOTHER_GPU),
}

# Apple MLX (unified memory: the GPU's share of the Mac's RAM); mlx_lm's LoRA trainer flags
MLX_FIXES = {
    Cause.ACTIVATION_SPIKE: (
        Fix("code", "mlx_lm.lora --batch-size / --max-seq-length", "lower them",
            "activations grow with batch × sequence"),
        Fix("code", "mlx_lm.lora --grad-checkpoint", "on", "layer activations are recomputed in backward")),
    Cause.CAPACITY: (
        Fix("code", "a quantized model", "mlx_lm.convert -q (4-bit)", "4-bit weights take a quarter of 16-bit ones"),
        Fix("code", "mlx_lm.lora --num-layers", "fewer adapted layers", "fewer gradients and optimizer states")),
}

# Faiss's GPU indexes: the vectors (and the search's temporary memory) live on the card
FAISS_FIXES = (Fix("code", "shard the index over GPUs", "faiss.index_cpu_to_all_gpus(index, co) with co.shard = True",
                   "each GPU holds a share of the vectors instead of a full copy"),
               Fix("code", "a compressed index", "IVF-PQ (or GpuClonerOptions.useFloat16 = True)",
                   "product-quantised or 16-bit vectors take a fraction of flat float32 storage"),
               Fix("code", "temporary memory", "res.setTempMemory(...) smaller, and search / add in smaller batches",
                   "StandardGpuResources reserves scratch memory beside the index; big batches need big temporaries"),
               Fix("code", "a CPU index", "keep the index on the host (faiss.IndexFlat / IVF on CPU)",
                   "host RAM holds what the card cannot"))
# gradient boosting on the GPU: the quantised training matrix and the histograms live on the card
XGBOOST_FIXES = (Fix("code", "QuantileDMatrix", "xgboost.QuantileDMatrix (or DaskQuantileDMatrix) instead of DMatrix",
                     "keeps only the quantised matrix, not the raw features as well"),
                 Fix("code", "more GPUs", "xgboost.dask over more workers, or fewer rows per GPU",
                     "each GPU holds its partition of the rows"),
                 Fix("code", "max_bin / max_depth", "lower them", "histograms grow with bins × nodes × features"),
                 Fix("code", "external memory", "an iterator-backed ExtMemQuantileDMatrix",
                     "batches of the data stream from host memory"))
CATBOOST_FIXES = (Fix("code", "gpu_ram_part", "lower it (default 0.95) if something else uses the card",
                      "CatBoost preallocates that share of the card for its pool"),
                  Fix("code", "border_count / max_ctr_complexity / depth", "lower them",
                      "the pool holds the quantised features, the CTR tables and the tree's histograms"),
                  Fix("code", "task_type", "CPU, or more devices", "host RAM, or several GPUs, hold what one card cannot"))

_TABLES: dict[str, tuple[Fix, ...] | dict[Cause, tuple[Fix, ...]]] = {
    "ggml": GGML_FIXES, "tensorrt": TENSORRT_FIXES, "rmm": RMM_FIXES,
    "xla": XLA_FIXES, "tensorflow": TENSORFLOW_FIXES, "paddle": PADDLE_FIXES, "mlx": MLX_FIXES,
    "faiss": FAISS_FIXES, "xgboost": XGBOOST_FIXES, "catboost": CATBOOST_FIXES, "onnxruntime": ONNXRUNTIME_FIXES,
    "nvmap": NVMAP_FIXES}
# the training frameworks: PyTorch's allocator settings are what their users get told and what does nothing
_TRAINING = TRAINING_RUNTIMES


def runtime_fixes(runtime: str, cause: Cause) -> tuple[Fix, ...]:
    """The runtime's own fixes for ``cause`` (a memory cause, or a set-up mistake behind its OOM); ()
    for a runtime or cause it has none for."""
    t = _TABLES.get(runtime)
    if t is None:
        return ()
    if isinstance(t, tuple):
        return t
    return t.get(cause, ())


def runtime_not_fixes(runtime: str) -> tuple[NotAFix, ...]:
    """What a PyTorch user would try that does nothing in this runtime."""
    return _NOT_TORCH if runtime in _TRAINING + DATA_RUNTIMES else ()
