"""Other runtimes' out-of-memory messages, each read into an ``OomEvent``.

TensorFlow, llama.cpp / ggml, TensorRT, ONNX Runtime, PaddlePaddle, XLA
(JAX, TF/XLA, the TPU runtime), vLLM's cumem allocator and OpenCV print their
own messages; parsers/torch_oom.py hands every line it is triggered on to
these readers after PyTorch's own formats.  Where a runtime names the C
function, op or graph node that failed, it becomes the event's one frame
(``Frame("<runtime>", line, name, text)``), which analysis/phase.py reads for
the phase.  Each reader is a pure function of one line; completing an event
from the lines after it (TensorFlow's graph node, ggml's buffer line,
TensorRT's size warning) is the parser's, which keeps the events.
"""

from __future__ import annotations

import re

from ..model import XLA_PROGRAM, Frame, OomEvent, OomKind, SourceRef, Stack
from ..units import parse_size_or_none

_SZ = r"\d+(?:\.\d+)?\s?(?:bytes|[KMGTP]iB|[KMGTP]B|B)"

# the literal words one of these messages always holds (the parser's line trigger)
TRIGGERS = ("failed to allocate", "unable to allocate", "OOM when allocating", "{{node ", "[[node ",
            "allocating <= available", "requested buffer of size", "Cannot allocate", "could not be allocated",
            "Insufficient memory", "RESOURCE_EXHAUSTED", "while trying to allocate", "memory has been allocated",
            "OutOfMemory", "out of memory", "[malloc", "::malloc]", "Resource exhausted", "Failed to allocate resource[",
            "WinError 1455", "out_of_memory", "Maximum pool size exceeded", "Ran out of memory in memory space",
            "memory mapping failed with OOM", "ailed to cudaMalloc", "That was not possible", "StackDeviceMemory",
            "TOutOfMemoryError", "Memory allocation error on worker", "rror 2", "rror = 2",
            "smaller than requested bytes", "NvMapMem")

# PaddlePaddle: "Out of memory error on GPU 0. Cannot allocate 256.000244MB memory on GPU 0, 15.719055GB memory has
# been allocated and available memory is only 3.625000MB."
PADDLE = re.compile(rf"Cannot allocate (?P<req>{_SZ}) memory on GPU (?P<dev>\d+), (?:(?P<alloc>{_SZ}) memory has been "
                    rf"allocated and )?available memory is only (?P<free>{_SZ})")
# PaddlePaddle 1.x: "paddle.fluid.core.EnforceNotMet: enforce allocating <= available failed, 7433255387 > 366608128"
PADDLE_ENFORCE = re.compile(r"enforce allocating <= available failed, (?P<req>\d+) > (?P<free>\d+)")
# ONNX Runtime's arena: "BFCArena::AllocateRawInternal(size_t, bool) Failed to allocate memory for requested buffer of
# size 8388608000" inside "Non-zero status code returned while running FusedMatMul node. Name:'MatMul_92_...'";
# and the arena at its configured limit (``gpu_mem_limit``, unlimited by default): "BFCArena::
# AllocateRawInternal(...) Available memory of 0 is smaller than requested bytes of 5505024"
ORT_ARENA = re.compile(r"Failed to allocate memory for requested buffer of size (?P<req>\d+)|"
                       r"Available memory of (?P<avail>\d+) is smaller than requested bytes of (?P<req2>\d+)")
ORT_NODE = re.compile(r"while running (?P<op>\w+) node\. Name:\s*'(?P<name>[^']+)'")
# OpenCV's allocator: "cv2.error: OpenCV(4.6.0) /io/opencv/modules/core/src/alloc.cpp:73: error: (-4:Insufficient
# memory) Failed to allocate 4672512 bytes in function 'OutOfMemoryError'" (host memory, unless a cv::cuda path)
OPENCV_ALLOC = re.compile(r"\(-4:Insufficient memory\) Failed to allocate (?P<n>\d+) bytes")
# Apple MLX's Metal allocator (unified memory: the GPU's share of the Mac's RAM): "[malloc_or_wait] Unable to
# allocate 12 bytes." (the size is the request that found the pool exhausted, not the demand)
MLX_ALLOC = re.compile(r"\[malloc(?:_or_wait)?\] Unable to allocate (?P<n>\d+) bytes")
# MLX asking Metal for one buffer larger than the device allows: "[metal::malloc] Attempting to allocate
# 48736917632 bytes which is greater than the maximum allowed buffer size of 30150672384 bytes."
MLX_BUFFER = re.compile(r"\[metal::malloc\] Attempting to allocate (?P<n>\d+) bytes which is greater than the maximum "
                        r"allowed buffer size of (?P<max>\d+) bytes")
# Ascend's CANN runtime (torch_npu, vllm-ascend): "EL0004: ... Failed to allocate memory. ... Failed to allocate
# resource[DeviceMemory] with info [size:2147483648]. Reason: Memory resources are exhausted."
ASCEND_DEVICE_MEMORY = re.compile(r"Failed to allocate resource\[DeviceMemory\] with info \[size:(?P<n>\d+)\]")
# RAPIDS' RMM (cuDF, cuML, XGBoost's GPU paths, Dask-CUDA): "Memory allocation error on worker 0: std::bad_alloc:
# out_of_memory: CUDA error at: /opt/conda/include/rmm/mr/device/cuda_memory_resource.hpp", and its pool's
# "RMM failure at: ... pool_memory_resource.hpp:193: Maximum pool size exceeded" (device memory)
# (older RMM: "MemoryError: std::bad_alloc: CUDA error at: ../include/rmm/mr/device/cuda_memory_resource.hpp:68:
# cudaErrorMemoryAllocation out of memory", cudf#6126)
RMM_OOM = re.compile(r"std::bad_alloc: out_of_memory|rmm::out_of_memory|RMM failure at:.*Maximum pool size exceeded|"
                     r"rmm/mr/device/\w+\.hpp:\d+: cudaErrorMemoryAllocation")
# Windows' commit limit reached (RAM plus the paging file), often while torch loads its CUDA DLLs in every
# DataLoader worker: "OSError: [WinError 1455] The paging file is too small for this operation to complete."
# (localised text after the code): host memory
WIN_PAGEFILE = re.compile(r"\[WinError 1455\]")
# TensorRT's builder / runtime: "[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2:
# OutOfMemory (no further information)", TensorRT 7's "../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2
# (out of memory)", and the warning with the size: "Requested amount of GPU memory (20572012544 bytes) could not be
# allocated. There may not be enough free memory for allocation to succeed."
TRT_OOM = re.compile(r"\[(?P<where>[\w.]+::\w+)(?:::\d+)?\] Error Code 2: OutOfMemory|"
                     r"(?P<where7>\w+)\.cpp \(\d+\) - Cuda Error in allocate: 2 \(out of memory\)|"
                     r"Requested amount of GPU memory \((?P<req>\d+) bytes\) could not be allocated")
# a device allocator's own figures (XLA / vLLM's cumem allocator): "... while trying to allocate 671088640 bytes
# (free: 513736704, total: 85095874560)"
BYTES_FREE_TOTAL = re.compile(r"while trying to allocate (?P<req>\d+) bytes \(free: (?P<free>\d+), "
                              r"total: (?P<total>\d+)\)")
# XLA (JAX, TensorFlow/XLA) without those figures: "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying
# to allocate 15724724752 bytes." / "... Out of memory allocating 124867611608 bytes.", and the TPU runtime's
# "RESOURCE_EXHAUSTED: Attempting to allocate 31.06M. That was not possible. There are 58.64M free.", and PjRt's
# stream executor client: "Execution of replica 0 failed: Resource exhausted: Failed to allocate request for
# 128.00MiB (134217728B) on device ordinal 0"
# JAX 0.4.3x onwards prints the size with a unit and names the compiled program: "JaxRuntimeError:
# RESOURCE_EXHAUSTED: Out of memory while trying to allocate 38.06GiB with allocator GPU_0_bfc on device 0.
# [executable_name='jit_train_step']" (XLA_EXECUTABLE; the program becomes the event's one frame, for the phase)
XLA_OOM = re.compile(r"(?:RESOURCE_EXHAUSTED|Resource exhausted): (?:Out of memory (?:while trying to allocate|allocating) "
                     r"(?:(?P<req>\d+) bytes|(?P<req4>\d+(?:\.\d+)?[KMGT]i?B)\b)|"
                     r"Attempting to allocate (?P<req2>\d+(?:\.\d+)?[KMGT]?)\. That was not possible\. "
                     r"There are (?P<free>\d+(?:\.\d+)?[KMGT]?) free|"
                     r"Failed to allocate request for [^(]*\((?P<req3>\d+)B\) on device ordinal (?P<dev>\d+))")
XLA_EXECUTABLE = re.compile(r"\[executable_name='(?P<exe>[\w.$<>-]+)'\]")
# XLA's compiler finding the whole program's buffers larger than the device (TPU, also GPU): "RESOURCE_EXHAUSTED:
# XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 21.90G of 7.48G hbm. Exceeded hbm
# capacity by 14.42G."  The request is the program's total, the capacity the memory space's size.
XLA_COMPILE_OOM = re.compile(r"Ran out of memory in memory space (?P<space>\w+)\. Used (?P<used>\d+(?:\.\d+)?[KMGT]?) "
                             r"of (?P<cap>\d+(?:\.\d+)?[KMGT]?) (?P=space)")

# PyTorch's caching allocator under expandable_segments warns when mapping more physical memory into a segment
# fails, before (or, inside AOTInductor-compiled code, instead of) its usual message: "[W831 10:32:25.25 ...]
# CUDACachingAllocator.cpp:508] expandable_segments: memory mapping failed with OOM on device 0 while trying to map
# 20971520 bytes (free: 15663104, total: 33671348224)."
EXPANDABLE_MAP = re.compile(r"expandable_segments: memory mapping failed with OOM on device (?P<dev>\d+) while trying "
                            r"to map (?P<req>\d+) bytes \(free: (?P<free>\d+), total: (?P<total>\d+)\)")
# Faiss's GPU indexes: "Faiss assertion 'cudaMalloc(p, size) == cudaSuccess' failed in ... allocMemorySpace ...;
# details: Failed to cudaMalloc 16000000000 bytes" (newer: "Error in void faiss::gpu::allocMemorySpaceV(...) ...
# failed to cudaMalloc 47064032 bytes (error 2 out of memory)"), and its temporary-memory stack failing a CUDA call
# ("Faiss assertion 'err == cudaSuccess' failed in faiss::gpu::StackDeviceMemory::Stack::Stack(int, size_t)")
FAISS_MALLOC = re.compile(r"[Ff]ailed to cudaMalloc (?P<req>\d+) bytes")
FAISS_STACK = re.compile(r"Faiss assertion '?err == cudaSuccess'? failed in [^;]{0,80}?StackDeviceMemory")
# CatBoost's GPU memory pool: "(NCudaLib::TOutOfMemoryError) catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h
# :303: Error: Out of memory. Requested 5546.536621 MB; Free 2131.370214 MB" (the figures may be cut off)
CATBOOST_OOM = re.compile(r"TOutOfMemoryError\).*?Out of memory(?:\. Requested (?P<req>\d+(?:\.\d+)?) MB; Free "
                          r"(?P<free>\d+(?:\.\d+)?) MB)?")
# XGBoost's device allocator (gpu_hist): "Exception in gpu_hist: ... device_helpers.cuh:431: Memory allocation error
# on worker 0: std::bad_alloc: cudaErrorMemoryAllocation: out of memory" (its "- Free memory: N" and "- Requested
# memory: N" follow on their own lines); through RMM it is RAPIDS' own message (RMM_OOM)
XGBOOST_OOM = re.compile(r"Memory allocation error on worker \d+: std::bad_alloc")
# Jetson's NvMap (memory the CPU and the integrated GPU share) refusing an allocation with ENOMEM:
# "NvMapMemAllocInternalTagged: 1075072515 error 12" (the number is NvMap's allocation tag, not a size), older
# "NvMapMemHandleAlloc: error 12"
NVMAP_ENOMEM = re.compile(r"NvMapMem\w*:(?: \d+)? error 12\b")
# the TPU runtime reserving a compiled program's memory (torch_xla, older TF/JAX on TPU): "Resource exhausted: From
# /job:tpu_worker/...:" then "Attempting to reserve 3.95G at the bottom of memory. That was not possible. There are
# 1.92G free, 0B reserved, and 1.92G reservable."
TPU_RESERVE = re.compile(r"Attempting to (?:reserve|allocate) (?P<req>\d+(?:\.\d+)?[KMGT]?) at the (?:bottom|top) of "
                         r"memory\. That was not possible\. There are (?P<free>\d+(?:\.\d+)?[KMGT]?) free")

# a CUDA extension's own error macro printing only the runtime's code: "RuntimeError: mmdet3d/ops/spconv/src/
# indice_cuda.cu 124" then "cuda execution failed with error 2", "CUDA error 2 at /.../ggml-cuda.cu:6301", "CUDA
# error = 2 at ...unified_vector_impl.h:209".  Code 2 is cudaErrorMemoryAllocation in the runtime API and
# CUDA_ERROR_OUT_OF_MEMORY in the driver API: an allocation failed, whichever the extension called.  (NCCL's
# "NCCL error 2" is ncclSystemError, and a connection's "error code 2" is not CUDA's: the word CUDA must lead.)
CUDA_CODE_2 = re.compile(r"\b(?:CUDA|[Cc]uda)\b[\w ]{0,30}?\b(?:error|Error|ERROR)(?: code)?\s*(?:=\s*)?2\b(?![\d.])")

# LMDeploy's TurboMind engine (FasterTransformer's lineage): "RuntimeError: [TM][ERROR] CUDA runtime error: out of
# memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32".  The source file that failed is the event's one frame:
# memory_utils.cu's deviceMalloc allocates the weights, allocator.h the runtime buffers (analysis/phase.py)
TURBOMIND = re.compile(r"\[TM\]\[ERROR\]\s*CUDA runtime error: out of memory\s+(?P<path>\S+?\.(?:cu|cuh|h|cc|cpp)):"
                       r"(?P<line>\d+)")

# llama.cpp / ggml (llama-cpp-python, ollama): "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size
# 4733328896", "llama_model_load: error loading model: unable to allocate ROCm0 buffer", "ggml_backend_cuda_buffer_
# type_alloc_buffer: allocating 4514.05 MiB on device 0: cudaMalloc failed: out of memory".  The C function that
# failed says what the buffer was for (the graph's compute buffer, the KV cache, the weights): it becomes the
# event's one frame, for the phase.  A CPU buffer is host memory.
GGML_BUFFER = re.compile(r"(?:^|\s)(?P<func>\w+): (?:.*?: )?(?:failed to allocate|unable to allocate) (?:(?P<dev>(?:CUDA|ROCm|"
                         r"Vulkan|Metal|SYCL|CANN|MUSA|CPU)\d*) )?buffer(?: of size (?P<req>\d+)| for (?:the )?kv cache)?")
GGML_MALLOC = re.compile(r"(?P<func>\w+): allocating (?P<mib>\d+(?:\.\d+)?) MiB on device (?P<dev>\d+): \w+ failed: "
                         r"out of memory")

# TensorFlow: "Resource exhausted: OOM when allocating tensor with shape[16,112,112,147] and type float on
# /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc", the op that failed as "OP_REQUIRES failed at
# fused_batch_norm_op.cc:573" before it, the graph node on the next line ("[[{{node resnet_v1_50/conv1/
# ExtractImagePatches}}]]").  The request is the shape's size times the type's; the op or node is the event's one
# frame, for the phase (a gradient op is backward, an optimizer op the step, any other op the forward).
TF_OOM = re.compile(r"OOM when allocating tensor (?:of shape \[?|with shape\s*\[?)(?P<shape>[\d,\s]*)\]?(?: and type "
                    r"(?P<dtype>\w+))?(?: on (?P<where>\S+))?(?: by allocator (?P<alloc>\w+))?")
# TensorFlow's stream executor (CUDA or ROCm) refusing a raw device allocation for its BFC pool
TF_DEVICE_ALLOC = re.compile(r"failed to allocate [\d.]+[KMGT]?i?B? \((?P<req>\d+) bytes\) from device: "
                             r"(?P<err>CUDA_ERROR_OUT_OF_MEMORY|hipError_t\(\d+\)|hipError\w+)")
TF_OP = re.compile(r"OP_REQUIRES failed at (?P<op>[\w.]+?)(?:\.cc|\.h)?:\d+")
TF_NODE = re.compile(r"\[\[(?:\{\{)?node (?P<node>[\w/.:-]+)")
TF_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
                  "int32": 4, "int64": 8, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8}


def _frame(runtime: str, at: SourceRef, name: str, text: str) -> Stack:
    return Stack((Frame(runtime, at.line or 0, name, text.strip()[:200]),))


def ggml_event(text: str, at: SourceRef, rank: int | None, exc: str) -> OomEvent | None:
    """A llama.cpp / ggml allocation failure, its C function as the frame; None when the line is not one."""
    if "buffer" in text and (m := GGML_BUFFER.search(text)) is not None:
        dev = m.group("dev") or ""
        req = int(m.group("req")) if m.group("req") else None
        kind = OomKind.HOST if dev.startswith("CPU") or "_cpu_" in m.group("func") else OomKind.OTHER
    elif "MiB on device" in text and (m := GGML_MALLOC.search(text)) is not None:
        req, kind = int(float(m.group("mib")) * 2**20), OomKind.OTHER
    else:
        return None
    return OomEvent(kind, at, rank, requested_bytes=req, exception=exc, message_format="ggml",
                    stack=_frame("ggml", at, m.group("func"), text), truncated=True)


def tensorrt_event(text: str, at: SourceRef, rank: int | None, exc: str) -> OomEvent | None:
    """A TensorRT allocation failure (the builder's function as the frame, the size when the line holds it);
    None when the line is not one."""
    if not ("OutOfMemory" in text or "Cuda Error in allocate" in text or "could not be allocated" in text):
        return None
    m = TRT_OOM.search(text)
    if m is None:
        return None
    where = m.group("where") or (f"{m.group('where7')}::allocate" if m.group("where7") else "")
    return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("req")) if m.group("req") else None,
                    exception=exc, message_format="tensorrt",
                    stack=_frame("tensorrt", at, where, text) if where else Stack(), truncated=True)


def tensorflow_event(text: str, at: SourceRef, rank: int | None, exc: str) -> OomEvent | None:
    """TensorFlow's ``OOM when allocating tensor``: the request from shape × dtype, the op as the frame, the CPU
    allocator as host memory; None when the line is not one."""
    if "OOM when allocating" not in text or (m := TF_OOM.search(text)) is None:
        return None
    dims = [int(d) for d in re.findall(r"\d+", m.group("shape") or "")]
    req = None
    if dims and m.group("dtype") in TF_DTYPE_BYTES:
        req = TF_DTYPE_BYTES[m.group("dtype")]
        for d in dims:
            req *= d
    where = (m.group("where") or "") + " " + (m.group("alloc") or "")
    host = "device:CPU" in where or " cpu" in where.lower()
    op = TF_OP.search(text)
    return OomEvent(OomKind.HOST if host else OomKind.OTHER, at, rank, requested_bytes=req,
                    exception=exc or "ResourceExhaustedError", message_format="tensorflow",
                    stack=_frame("tensorflow", at, op.group("op"), text) if op else Stack(), truncated=True)


def tf_device_alloc_event(text: str, at: SourceRef, rank: int | None, exc: str) -> OomEvent | None:
    """TensorFlow's stream executor refusing a raw device allocation ("failed to allocate 2.96G (3173555200
    bytes) from device: CUDA_ERROR_OUT_OF_MEMORY", ROCm's "...: hipError_t(1002)"): the BFC allocator reserving
    its pool (at start-up unless memory growth is on), retried 10 % smaller each time; None when not one."""
    if "from device" not in text or (m := TF_DEVICE_ALLOC.search(text)) is None:
        return None
    return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("req")),
                    exception=exc or m.group("err").rstrip(":"), message_format="tensorflow", request_scope="pool",
                    truncated=True)


def tf_node_frame(text: str, lineno: int) -> Frame | None:
    """The graph node a TensorFlow OOM names on the line after it, as a frame (None: not such a line)."""
    m = TF_NODE.search(text)
    return Frame("tensorflow", lineno, m.group("node"), text.strip()[:200]) if m else None


def _xla_size(s: str | None) -> int | None:
    return None if s is None else parse_size_or_none(s + "iB" if s[-1] in "KMGT" else s + " B")


def other_runtime_event(text: str, at: SourceRef, rank: int | None, exc: str, stack: Stack) -> OomEvent | None:
    """PaddlePaddle, ONNX Runtime, a device allocator's free/total figures (XLA, vLLM's cumem), OpenCV, Apple
    MLX (an exhausted pool, a buffer over Metal's maximum), Ascend's CANN, RAPIDS' RMM, CatBoost's and XGBoost's GPU
    allocators, PyTorch's expandable-segment mapping warning, Faiss, the TPU runtime's reservation, Jetson's NvMap,
    Windows' paging file, XLA's compile-time overflow, TurboMind's runtime error, a CUDA extension's bare error code
    2 and XLA's RESOURCE_EXHAUSTED, tried in that order; None when the line is none of them."""
    if m := PADDLE_ENFORCE.search(text):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("req")), free_bytes=int(m.group("free")),
                        exception=exc, message_format="paddle", stack=stack, truncated=True)
    if m := ORT_ARENA.search(text):
        node = ORT_NODE.search(text)
        if node is not None:
            stack = Stack((Frame("onnxruntime", at.line or 0, node.group("name"), node.group("op")),))
        avail = m.group("avail")
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("req") or m.group("req2")),
                        free_bytes=int(avail) if avail is not None else None, exception=exc,
                        message_format="onnxruntime", stack=stack, truncated=True)
    if m := PADDLE.search(text):
        return OomEvent(OomKind.OTHER, at, rank, int(m.group("dev")), requested_bytes=parse_size_or_none(m.group("req")),
                        allocated_bytes=parse_size_or_none(m.group("alloc")),
                        free_bytes=parse_size_or_none(m.group("free")), exception=exc, message_format="paddle",
                        stack=stack, truncated=True)
    if m := BYTES_FREE_TOTAL.search(text):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("req")),
                        capacity_bytes=int(m.group("total")), free_bytes=int(m.group("free")), exception=exc,
                        message_format="bytes (free, total)", stack=stack, truncated=True)
    if m := OPENCV_ALLOC.search(text):
        gpu = "/cuda" in text or "gpu_mat" in text or "cudev" in text
        return OomEvent(OomKind.OTHER if gpu else OomKind.HOST, at, rank, None, requested_bytes=int(m.group("n")),
                        exception=exc or "cv2.error", message_format="opencv", stack=stack, truncated=True)
    if m := MLX_ALLOC.search(text):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("n")), exception=exc or "std::runtime_error",
                        message_format="mlx", stack=stack, truncated=True)
    if m := MLX_BUFFER.search(text):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("n")), allowed_bytes=int(m.group("max")),
                        exception=exc or "RuntimeError", message_format="mlx", stack=stack, truncated=True)
    if m := ASCEND_DEVICE_MEMORY.search(text):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("n")), exception=exc,
                        message_format="ascend", stack=stack, truncated=True)
    if RMM_OOM.search(text):
        return OomEvent(OomKind.OTHER, at, rank, exception=exc or "MemoryError", message_format="rmm", stack=stack,
                        truncated=True)
    if "TOutOfMemoryError" in text and (m := CATBOOST_OOM.search(text)):
        mib = (lambda g: int(float(g) * 2**20) if g else None)
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=mib(m.group("req")), free_bytes=mib(m.group("free")),
                        exception=exc or "TOutOfMemoryError", message_format="catboost", stack=stack, truncated=True)
    if XGBOOST_OOM.search(text):
        return OomEvent(OomKind.OTHER, at, rank, exception=exc or "XGBoostError", message_format="xgboost", stack=stack,
                        truncated=True)
    if "memory mapping failed" in text and (m := EXPANDABLE_MAP.search(text)):
        # a warning: the exception that follows (when printed) is the complete message and wins over it
        return OomEvent(OomKind.CACHING_ALLOCATOR, at, rank, int(m.group("dev")), requested_bytes=int(m.group("req")),
                        capacity_bytes=int(m.group("total")), free_bytes=int(m.group("free")), exception=exc,
                        message_format="expandable_segments map", stack=stack, truncated=True)
    if m := FAISS_MALLOC.search(text):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=int(m.group("req")), exception=exc,
                        message_format="faiss" if "Faiss" in text or "faiss" in text else "cudaMalloc", stack=stack,
                        truncated=True)
    if FAISS_STACK.search(text):
        return OomEvent(OomKind.OTHER, at, rank, exception=exc, message_format="faiss", stack=stack, truncated=True)
    if "That was not possible" in text and (m := TPU_RESERVE.search(text)):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=_xla_size(m.group("req")),
                        free_bytes=_xla_size(m.group("free")), exception=exc or "RuntimeError", message_format="xla",
                        stack=stack, truncated=True)
    if "NvMapMem" in text and NVMAP_ENOMEM.search(text):
        return OomEvent(OomKind.OTHER, at, rank, exception=exc, message_format="nvmap", stack=stack, truncated=True)
    if WIN_PAGEFILE.search(text):
        return OomEvent(OomKind.HOST, at, rank, exception=exc or "OSError", message_format="windows_pagefile",
                        stack=stack, truncated=True)
    if "Ran out of memory in memory space" in text and (m := XLA_COMPILE_OOM.search(text)):
        return OomEvent(OomKind.OTHER, at, rank, requested_bytes=_xla_size(m.group("used")),
                        capacity_bytes=_xla_size(m.group("cap")), exception=exc or "XlaRuntimeError",
                        message_format="xla", request_scope="program", stack=stack, truncated=True)
    if "[TM]" in text and (m := TURBOMIND.search(text)):
        path = m.group("path")
        frame = Frame(path, int(m.group("line")), path.rsplit("/", 1)[-1].split(".", 1)[0], text.strip()[:200])
        return OomEvent(OomKind.OTHER, at, rank, exception=exc, message_format="turbomind", stack=Stack((frame,)),
                        truncated=True)
    if "rror" in text and CUDA_CODE_2.search(text) and "NCCL" not in text:
        return OomEvent(OomKind.CUDA_ERROR, at, rank, exception=exc, message_format="CUDA error 2", stack=stack,
                        truncated=True)
    if ("RESOURCE_EXHAUSTED" in text or "Resource exhausted" in text) and (m := XLA_OOM.search(text)):
        req = (int(m.group("req") or m.group("req3") or 0) or _xla_size(m.group("req2"))
               or parse_size_or_none(m.group("req4")))
        dev = int(m.group("dev")) if m.group("dev") else None
        if (x := XLA_EXECUTABLE.search(text)) is not None:
            # the program ran inside whatever Python frame waited on it: it is the innermost frame
            stack = Stack((*stack.frames, *_frame(XLA_PROGRAM, at, x.group("exe"), text).frames))
        return OomEvent(OomKind.OTHER, at, rank, dev, requested_bytes=req, free_bytes=_xla_size(m.group("free")),
                        exception=exc or "XlaRuntimeError", message_format="xla", stack=stack, truncated=True)
    return None
