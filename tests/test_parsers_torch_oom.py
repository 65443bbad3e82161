"""Torch OOM messages of every generation, from real logs.

Sources: the measured torch 2.11 runs quoted in shared/reference/pytorch.md
§3 (observed), the public issues it cites, and our own captures in
sample_logs/.  Each excerpt is verbatim.
"""

from __future__ import annotations

import pytest

from oompost.model import OomKind
from oompost.parsers import parse_text
from oompost.units import GiB, MiB, parse_size

# pytorch.md §3.1, observed 2.11 (capacity OOM)
NEW_2_11 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of "
            "139.80 GiB of which 138.71 GiB is free. Including non-PyTorch memory, this process has 1.08 GiB memory in "
            "use. Of the allocated memory 337.06 MiB is allocated by PyTorch, and 24.94 MiB is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_"
            "segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/"
            "docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")
# pytorch.md §3.1, observed 2.11 under set_per_process_memory_fraction (the "allowed;" clause)
ALLOWED = ("CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 137.49 "
           "GiB is free. Including non-PyTorch memory, this process has 2.31 GiB memory in use. 2.00 GiB allowed; Of the "
           "allocated memory 900.00 MiB is allocated by PyTorch, and 944.00 MiB is reserved by PyTorch but unallocated. "
           "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
           "avoid fragmentation.")
# github.com/Tianhao-Qi/Mask2DiT/issues/4 (another process listed, no "this process")
OTHER_PROC = ("CUDA out of memory. Tried to allocate 35.60 GiB. GPU 0 has a total capacity of 79.33 GiB of which 26.16 "
              "GiB is free. Process 76883 has 53.16 GiB memory in use. Of the allocated memory 11.97 GiB is allocated by "
              "PyTorch, and 40.69 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
              "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
              "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
# 2.1 (PR #99699): "capacty" typo and the max_split_size_mb advice
V2_1 = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 102.00 MiB. GPU 0 has a total capacty of "
        "39.38 GiB of which 29.81 MiB is free. Including non-PyTorch memory, this process has 39.32 GiB memory in use. Of "
        "the allocated memory 37.54 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See "
        "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
# ≤2.0, github.com/CompVis/taming-transformers/issues/194
OLD = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.39 GiB (GPU 0; 6.00 GiB total capacity; "
       "4.04 GiB already allocated; 478.00 MiB free; 4.15 GiB reserved in total by PyTorch) If reserved memory is >> "
       "allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
       "and PYTORCH_CUDA_ALLOC_CONF")
# 2020, github.com/pytorch/pytorch/issues/35901 (RuntimeError, no advice sentence)
OLDEST = ("RuntimeError: CUDA out of memory. Tried to allocate 10.84 GiB (GPU 0; 23.65 GiB total capacity; 1.06 GiB "
          "already allocated; 10.26 GiB free; 12.53 GiB reserved in total by PyTorch)")
# github.com/pytorch/pytorch/issues/126766 (truncated message, torch 2.3.0)
TRUNCATED = "OutOfMemoryError: CUDA out of memory. Tried to allocate 3725.29 GiB. GPU"
# pytorch.md §3.5, observed 2.11, backend:cudaMallocAsync
ASYNC = """torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)
Currently allocated     : 337.06 MiB
Requested               : 200.00 GiB
Device limit            : 139.80 GiB
Free (according to CUDA): 31.12 MiB
PyTorch limit (set by user-supplied memory fraction)
                        : 17179869184.00 GiB
"""
# pytorch.md §3.6, observed 2.11
CUBLAS = "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
CPU = ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
       "tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)")
CUDA_ERR = "RuntimeError: CUDA error: out of memory"
GARBAGE_NVML = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
                "of 23.65 GiB of which 3.06 MiB is free. Including non-PyTorch memory, this process has 17179869184.00 "
                "GiB memory in use. Of the allocated memory 22.80 GiB is allocated by PyTorch, and 183.21 MiB is "
                "reserved by PyTorch but unallocated.")


def one(text: str):
    ev = parse_text(text)
    assert len(ev.ooms) == 1, ev.ooms
    return ev.ooms[0]


def test_new_format_2_11():
    o = one(NEW_2_11)
    assert o.kind is OomKind.CACHING_ALLOCATOR
    assert o.message_format == ">=2.2"
    assert o.exception == "torch.OutOfMemoryError"
    assert o.requested_bytes == 200 * GiB
    assert o.capacity_bytes == parse_size("139.80 GiB")
    assert o.free_bytes == parse_size("138.71 GiB")
    assert o.process_in_use_bytes == parse_size("1.08 GiB")
    assert o.allocated_bytes == parse_size("337.06 MiB")
    assert o.reserved_unallocated_bytes == parse_size("24.94 MiB")
    assert o.allowed_bytes is None and o.limit_bytes == o.capacity_bytes


def test_allowed_clause_sets_the_limit():
    o = one(ALLOWED)
    assert o.allowed_bytes == 2 * GiB
    assert o.limit_bytes == 2 * GiB          # not the 139.80 GiB card
    assert o.free_bytes == parse_size("137.49 GiB")
    assert o.reserved_unallocated_bytes == 944 * MiB
    assert o.reserved_bytes == 900 * MiB + 944 * MiB


def test_other_process_clause():
    o = one(OTHER_PROC)
    assert o.other_processes == ((76883, parse_size("53.16 GiB")),)
    assert o.process_in_use_bytes is None
    assert o.reserved_unallocated_bytes == parse_size("40.69 GiB")


def test_2_1_typo_format():
    o = one(V2_1)
    assert o.message_format == "2.1"
    assert o.capacity_bytes == parse_size("39.38 GiB")
    assert o.exception == "torch.cuda.OutOfMemoryError"


@pytest.mark.parametrize("text,alloc,reserved", [(OLD, "4.04 GiB", "4.15 GiB"), (OLDEST, "1.06 GiB", "12.53 GiB")])
def test_old_format(text, alloc, reserved):
    o = one(text)
    assert o.message_format == "<=2.0"
    assert o.allocated_bytes == parse_size(alloc)
    assert o.reserved_bytes == parse_size(reserved)
    assert o.reserved_unallocated_bytes == parse_size(reserved) - parse_size(alloc)


def test_truncated_message_is_kept_and_flagged():
    o = one(TRUNCATED)
    assert o.truncated
    assert o.requested_bytes == parse_size("3725.29 GiB")
    assert o.capacity_bytes is None


def test_malloc_async_block():
    o = one(ASYNC)
    assert o.kind is OomKind.MALLOC_ASYNC
    assert o.requested_bytes == 200 * GiB
    assert o.allocated_bytes == parse_size("337.06 MiB")
    assert o.capacity_bytes == parse_size("139.80 GiB")
    assert o.allowed_bytes is None          # 2**64 bytes means "no fraction"


@pytest.mark.parametrize("text,kind", [(CUBLAS, OomKind.CUBLAS), (CPU, OomKind.HOST), (CUDA_ERR, OomKind.CUDA_ERROR)])
def test_non_allocator_failures(text, kind):
    assert one(text).kind is kind


def test_host_allocator_request():
    assert one(CPU).requested_bytes == 1125899906842624


def test_garbage_nvml_value_is_unknown():
    o = one(GARBAGE_NVML)
    assert o.process_in_use_bytes is None
    assert o.allocated_bytes == parse_size("22.80 GiB")


def test_traceback_is_attached_and_rank_prefix_stripped():
    text = "\n".join([
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/work/train.py", line 184, in main',
        "[rank3]:     engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)",
        '[rank3]:   File "/site/deepspeed/runtime/zero/stage_1_and_2.py", line 505, in __init__',
        "[rank3]:     flattened_buffer = self.flatten_dense_tensors_aligned(",
        "[rank3]: " + NEW_2_11,
    ])
    o = one(text)
    assert o.rank == 3
    assert [f.name for f in o.stack.frames] == ["main", "__init__"]
    assert o.stack.frames[-1].code.startswith("flattened_buffer")


def test_duplicate_message_in_child_failed_block_is_one_event():
    assert len(parse_text(NEW_2_11 + "\n" + NEW_2_11 + "\n").ooms) == 1


def test_real_capture_activation_spike():
    """sample_logs/activation_spike_long_batch: plain PyTorch, 24 GiB emulated card."""
    from pathlib import Path

    from oompost.parsers import parse_paths

    ev = parse_paths([str(Path(__file__).parent.parent / "sample_logs/activation_spike_long_batch/run.log")])
    (o,) = ev.ooms
    assert o.allowed_bytes == parse_size("23.19 GiB")
    assert o.requested_bytes == 304 * MiB
    assert o.stack.frames[-1].filename.endswith("modeling_qwen2.py")


# https://github.com/huggingface/text-generation-inference/issues/563 (tests/corpus/huggingface__text-
# generation-inference__563): the router's Rust panic quotes the shard's multi-line OOM with "\n" escapes
TGI_PANIC = ("thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would exceed "
             "allowed memory. (out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested               : "
             "4.83 GiB\\nDevice limit            : 22.20 GiB\\nFree (according to CUDA): 11.12 MiB\\nPyTorch limit "
             "(set by user-supplied memory fraction)\\n                        : 22.20 GiB\")', "
             "router/src/main.rs:216:18\n")


def test_an_escaped_multi_line_message_is_read_as_its_lines():
    (o,) = parse_text(TGI_PANIC).ooms
    assert o.requested_bytes == parse_size("4.83 GiB")
    assert o.allocated_bytes == parse_size("16.08 GiB")
    assert o.capacity_bytes == parse_size("22.20 GiB")          # "Device limit"
    assert o.ref.line == 1


def test_escapes_elsewhere_stay_one_line():
    ev = parse_text('{"msg": "epoch 1 done\\nloss 0.3"}\n')
    assert not ev.ooms


def test_a_message_hard_wrapped_mid_word_under_a_rank_prefix_is_read_whole():
    # axolotl#1813 (corpus): the terminal cut the message at a fixed width, inside words ("has a to" /
    # "tal capacity"), and only the first piece carries "[rank1]:"
    from pathlib import Path

    from oompost.parsers import parse_paths

    log = Path(__file__).parent / "corpus" / "axolotl-ai-cloud__axolotl__1813" / "log.txt"
    (o,) = parse_paths([str(log)]).ooms
    assert o.rank == 1 and o.requested_bytes == 2 * GiB
    assert o.capacity_bytes == parse_size("23.67 GiB") and o.free_bytes == parse_size("1.59 GiB")
    assert o.allocated_bytes == parse_size("19.75 GiB")
    assert o.reserved_unallocated_bytes == parse_size("1.78 GiB")
    assert "has a total capacity of 23.67 GiB" in o.ref.text


# ---------------------------------------------------------------- TensorFlow, from corpus threads

def _corpus_ooms(case: str):
    from pathlib import Path

    from oompost.parsers import parse_paths

    return parse_paths([str(Path(__file__).parent / "corpus" / case / "log.txt")]).ooms


def test_tensorflow_oom_gives_the_request_from_shape_and_type_and_the_node_as_frame():
    # https://github.com/Azure/MachineLearningNotebooks/issues/880: "OOM when allocating tensor with
    # shape[16,112,112,147] and type float on .../device:GPU:0 by allocator GPU_0_bfc", the node on the next line
    tf = [o for o in _corpus_ooms("Azure__MachineLearningNotebooks__880") if o.message_format == "tensorflow"]
    assert tf and tf[0].kind is OomKind.OTHER
    assert tf[0].requested_bytes == 16 * 112 * 112 * 147 * 4
    assert tf[0].stack.frames[-1].name == "resnet_v1_50/conv1/ExtractImagePatches"
    from oompost.analysis.phase import classify_frames

    assert classify_frames(tf[0].stack.frames, innermost_first=False).phase.value == "forward"


def test_tensorflow_oom_on_the_cpu_allocator_is_host_memory():
    # https://github.com/tensorflow/tensorflow/issues/29983: "... on /job:localhost/replica:0/task:0/device:CPU:0
    # by allocator cpu", the op kernel named by "OP_REQUIRES failed at batch_matmul_op_impl.h"
    tf = [o for o in _corpus_ooms("tensorflow__tensorflow__29983") if o.message_format == "tensorflow"]
    assert tf[0].kind is OomKind.HOST and tf[0].requested_bytes == 128 * 8070 * 8070 * 4
    assert tf[0].stack.frames[0].name == "batch_matmul_op_impl"


def test_a_tensorflow_gradient_node_is_backward():
    from oompost.analysis.phase import classify_frames
    from oompost.model import Frame

    frames = (Frame("tensorflow", 3, "training/Adam/gradients/conv2d_3/Conv2D_grad/Conv2DBackpropInput"),)
    assert classify_frames(frames, innermost_first=False).phase.value == "backward"


# ---------------------------------------------------------------- PaddlePaddle and ONNX Runtime, from corpus threads

def test_paddle_messages_without_the_allocated_clause_and_paddle_1x_enforce():
    # https://github.com/PaddlePaddle/PaddleOCR/issues/1505: "Cannot allocate 25.002197MB memory on GPU 0, available
    # memory is only 15.187500MB."; https://github.com/PaddlePaddle/models/issues/1078: "enforce allocating <=
    # available failed, 7433255387 > 366608128"
    ocr = [o for o in _corpus_ooms("PaddlePaddle__PaddleOCR__1505") if o.message_format == "paddle"]
    assert ocr and ocr[0].requested_bytes == parse_size("25.002197MB") and ocr[0].allocated_bytes is None
    old = [o for o in _corpus_ooms("PaddlePaddle__models__1078") if o.message_format == "paddle"]
    assert old and (old[0].requested_bytes, old[0].free_bytes) == (7433255387, 366608128)


def test_onnxruntime_arena_failure_names_its_node():
    # https://github.com/microsoft/onnxruntime/issues/9939: the arena's request inside the node's status message
    ort = [o for o in _corpus_ooms("microsoft__onnxruntime__9939") if o.message_format == "onnxruntime"]
    assert ort and ort[0].requested_bytes == 8388608000
    assert ort[0].stack.frames[0].name == "MatMul_92_FusedMatMulAndScale"


def test_a_cuda_extensions_bad_alloc_is_the_gpus_not_the_hosts():
    # https://github.com/graphdeco-inria/gaussian-splatting/issues/740: the simple-knn extension's thrust allocation
    # surfaces as "MemoryError: std::bad_alloc: cudaErrorMemoryAllocation: out of memory"
    ooms = _corpus_ooms("graphdeco-inria__gaussian-splatting__740")
    assert ooms and all(o.kind is not OomKind.HOST for o in ooms)
    from oompost.parsers import parse_text

    assert parse_text("MemoryError\n").ooms[0].kind is OomKind.HOST          # a bare MemoryError stays the host's


def test_tensorrt_builder_oom_is_one_event_with_the_warnings_size():
    # https://github.com/NVIDIA/TensorRT-LLM/issues/772: two "Error Code 2: OutOfMemory" lines, then "Requested
    # amount of GPU memory (20572012544 bytes) could not be allocated": one failure, of that size, in the builder
    trt = [o for o in _corpus_ooms("NVIDIA__TensorRT-LLM__772") if o.message_format == "tensorrt"]
    assert len(trt) == 1 and trt[0].requested_bytes == 20572012544
    assert trt[0].stack.frames[0].name == "virtualMemoryBuffer.cpp::resizePhysical"
    from oompost.analysis.phase import classify_frames

    assert classify_frames(trt[0].stack.frames, innermost_first=False).phase.value == "model_init"
    # TensorRT 7's wording (https://github.com/linghu8812/tensorrt_inference/issues/155), printed twice
    old = [o for o in _corpus_ooms("linghu8812__tensorrt_inference__155") if o.message_format == "tensorrt"]
    assert len(old) == 1 and old[0].stack.frames[0].name == "safeRuntime::allocate"


def test_a_tensorrt_oom_gets_the_runtimes_knobs_not_a_trainers():
    from pathlib import Path

    import oompost

    r = oompost.analyze([str(Path(__file__).parent / "corpus" / "NVIDIA__TensorRT-LLM__1609" / "log.txt")])
    assert r.cause != "unknown"
    keys = " ".join(f"{f.fix.key} {f.fix.value}" for f in r.fixes)
    assert "gradient_checkpointing" not in keys and "per_device_train_batch_size" not in keys
    assert "profiles" in keys                               # TensorRT's own: the engine's max shapes


def test_opencvs_allocator_failure_is_host_memory():
    # https://github.com/ultralytics/yolov5/issues/10276: caching images in RAM, OpenCV cannot allocate 4.5 MiB
    ooms = _corpus_ooms("ultralytics__yolov5__10276")
    assert ooms and ooms[0].kind is OomKind.HOST and ooms[0].requested_bytes == 4672512


def test_xla_resource_exhausted_gives_the_request_and_the_tpu_runtimes_free_figure():
    # https://github.com/sokrypton/ColabFold/issues/186 ("Out of memory while trying to allocate 7866899248 bytes")
    # and https://github.com/google/trax/issues/431 (the TPU runtime's "Attempting to allocate 31.06M. That was not
    # possible. There are 58.64M free.")
    cf = _corpus_ooms("sokrypton__ColabFold__186")
    assert cf and cf[0].message_format == "xla" and cf[0].requested_bytes == 7866899248
    tpu = _corpus_ooms("google__trax__431")
    assert tpu[0].requested_bytes == parse_size("31.06MiB") and tpu[0].free_bytes == parse_size("58.64MiB")


def test_jaxs_current_message_gives_the_sized_request_and_the_compiled_program():
    # sample_logs/activation_spike_jax_resmlp_batch65536_2080ti_11g (a real JAX 0.11.2 run): "JaxRuntimeError:
    # RESOURCE_EXHAUSTED: Out of memory while trying to allocate 38.06GiB with allocator GPU_0_bfc on device 0.
    # [executable_name='jit_train_step']": the size carries a unit, and the program is the innermost frame
    from pathlib import Path

    from oompost.analysis.context import build_context
    from oompost.analysis.phase import Phase
    from oompost.parsers import parse_paths

    log = Path(__file__).parent.parent / "sample_logs" / "activation_spike_jax_resmlp_batch65536_2080ti_11g" / "run.log"
    ev = parse_paths([str(log)])
    xla = [o for o in ev.ooms if o.message_format == "xla"]
    assert xla and xla[0].requested_bytes == parse_size("38.06GiB")
    assert xla[0].stack.frames[-1].name == "jit_train_step"
    assert build_context(ev).phase.phase is Phase.FORWARD
    # an init program names the parameters being built (a line of the same shape, typed here)
    init = parse_text("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                      "1.50GiB with allocator GPU_0_bfc on device 0. [executable_name='jit_init']", "x.log")
    assert init.ooms[0].requested_bytes == parse_size("1.50GiB")
    assert build_context(init).phase.phase is Phase.MODEL_INIT
    # outside a jitted init each initialiser is its own program, named after the op (typed here)
    for exe, phase in (("jit__normal", Phase.MODEL_INIT), ("jit_zeros_like", Phase.MODEL_INIT),
                       ("jit_update", Phase.FORWARD)):
        one = parse_text("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                         f"1.00GiB with allocator GPU_0_bfc on device 0. [executable_name='{exe}']", "x.log")
        assert build_context(one).phase.phase is phase, exe


def test_an_older_rmm_cuda_resources_allocation_failure_is_rmms():
    # NVIDIA/cudf#6126 (dev): "MemoryError: std::bad_alloc: CUDA error at: ../include/rmm/mr/device/
    # cuda_memory_resource.hpp:68: cudaErrorMemoryAllocation out of memory" is RAPIDS' memory manager running out
    # (a dataframe too large for the card), not a network's activations
    ooms = _corpus_ooms("NVIDIA__cudf__6126")
    assert ooms and ooms[0].message_format == "rmm"
    import oompost
    from pathlib import Path

    r = oompost.analyze([str(Path(__file__).parent / "corpus" / "NVIDIA__cudf__6126" / "log.txt")])
    assert r.cause == "capacity"
