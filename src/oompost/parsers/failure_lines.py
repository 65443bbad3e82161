"""Failure lines in the many shapes other people's logs carry them.

The dedicated parsers (NCCL, launcher, exceptions) read complete, well-formed
output.  Logs pasted into issues are excerpts: a ``Killed`` glued to a
progress bar, an NCCL ``WARN`` behind a container timestamp, the C++ frames of
a watchdog timeout without the Python line, pydantic v1's split
``ValidationError``, a kernel OOM-killer line, a DataLoader bus error.  This
parser recognises each by a tolerant pattern and records a ``Failure`` for
every such line that no other parser already turned into evidence, so that
every failure in the input reaches some cause's score.
"""

from __future__ import annotations

import re

from ..model import ConfigIssue, Failure, FailureKind
from ..sources import LogLine
from .base import SentinelParser, memo_by_text, line_rank, ref
from .nccl import KIND_BY_RESULT, result_from_desc

# Google Colab's notice when it restarts a runtime whose RAM ran out
_NOTEBOOK_RESTART = re.compile(r"session crashed after using all available RAM")

# Ray's memory monitor kills a worker when the node's RAM passes its threshold, before the kernel would
_RAY_MONITOR = re.compile(r"killed due to the node running low on memory|killed due to memory pressure \(OOM\)|"
                          r"RayOutOfMemoryError: More than \d+% of the memory|"
                          # the kill report's pointer to Ray's OOM-prevention page (printed with every kill)
                          r"docs\.ray\.io/\S*ray-oom-prevention|"
                          # a worker that vanished under Kubernetes (no exit code): Ray names the pod's memory limit
                          r"worker may have exceeded K8s pod memory limits|"
                          # the kill report itself: "Memory on the node (...) was 12.49GB / 13.15GB (0.95), which
                          # exceeds the memory usage threshold of 0.95. Ray killed this worker ..."
                          r"exceeds the memory usage threshold of [\d.]+\. Ray killed this worker")

# vLLM's start-up checks, with the setting each one names
_VLLM_CHECKS = ((re.compile(r"Free memory on device \((?P<v>[\d.]+/[\d.]+ GiB)\) on startup is less than desired "
                            r"GPU memory utilization"), "gpu_memory_utilization", "vllm_card_occupied"),
                (re.compile(r"max seq len \((?P<v>\d+)\) is larger than the maximum number of tokens that can be "
                            r"stored in KV cache"), "max_model_len", "vllm_kv_cache_too_small"))


def _vllm_check(text: str) -> ConfigIssue | None:
    for pat, key, what in _VLLM_CHECKS:
        m = pat.search(text)
        if m:
            return ConfigIssue(key=key, error_type=what, input_value=m.group("v"))
    return None


# (kind, sentinels, pattern)
PATTERNS: tuple[tuple[FailureKind, tuple[str, ...], re.Pattern[str]], ...] = (
    # (a trailing markdown backtick or quote is the forum's, not the shell's; a progress line redrawn with "\r"
    # has no newline before the shell's message: Keras' "- loss: 2.1371Killed", tqdm's "12.3%Killed")
    (FailureKind.KILLED, ("Killed",), re.compile(r"(?:^|[\]\s|:`\d%)])Killed[\s`'\"]*$")),
    # the shell's "Killed" in other locales (glibc's strsignal(SIGKILL)), often glued to a progress bar
    (FailureKind.KILLED, ("已杀死", "已殺死", "強制終了", "Getötet", "Убито", "죽었음"),
     re.compile(r"(?:已杀死|已殺死|強制終了|Getötet|Убито|죽었음)[\s`'\"]*$")),
    (FailureKind.SIGKILL, ("-9", "137", "SIGKILL", "signal 9", "Signal 9"),
     re.compile(r"exitcode\s*:\s*-9\b|return code\s*=?\s*-9\b|exit(?:ed with)? (?:code|status):? 137\b|"
                r"Signal 9 \(SIGKILL\)|SIGKILL|killed by signal 9|signal 9\b|exit code: -9\b|exited with code -9|"
                r"exit status:? (?:-9|137)\b")),
    (FailureKind.HOST_OOM_KILL, ("Out of memory", "oom-kill", "oom_kill", "OOM killer", "oom killer",
                                 "OOMKilled", "memory cgroup", "running low on memory", "memory pressure (OOM)",
                                 "RayOutOfMemoryError", "ray-oom-prevention", "K8s pod memory",
                                 "low on resource: memory",
                                 "memory usage threshold", "all available RAM"),
     # (the kubelet evicting a pod: "The node was low on resource: memory."; Google Colab restarting the
     # runtime: "Your session crashed after using all available RAM.")
     re.compile(r"Out of memory: Kill(?:ed)? process|oom-kill|oom_kill|OOM[ -]?[Kk]iller|OOMKilled|"
                r"node was low on resource: memory|" + _NOTEBOOK_RESTART.pattern + "|"
                r"Memory cgroup out of memory|killed as a result of limit|"
                # Ray's memory monitor, which kills a worker before the kernel would
                + _RAY_MONITOR.pattern)),
    (FailureKind.SHM, ("Bus error", "shared memory", "/dev/shm", "shm", "receive FIFO", "exited unexpectedly",
                       "signal: Bus", "out of shared"),
     # (shm_open refused with "Permission denied" is a set-up fault, not a full /dev/shm: pytorch#37004)
     re.compile(r"Bus error|bus error|insufficient shared memory|/dev/shm|shm_open(?!.*Permission denied)|"
                # UCX's shared-memory transport: "mm_iface failed to allocate receive FIFO"
                r"failed to allocate receive FIFO|"
                r"No space left on device.*shm|unable to (?:open|write to) shared memory|"
                # PyTorch's loader message wrapped by the paste ("killed by signal: Bus" / "error. It is possible
                # that dataloader's workers are out of shared" / "memory. Please try to raise your shared memory
                # limit."): any of its pieces
                r"killed by signal: Bus\b|workers are out of shared|raise your shared memory limit|"
                # NCCL's shared-memory transport: "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No
                # space left on device" (its next "Error while creating shared memory segment" follows a refused
                # shm_open too, a set-up fault: not matched)
                r"shm\.h:\d+ NCCL WARN Call to posix_fallocate failed\s*:\s*No space left on device|"
                # a loader worker that died without a Python error: a full /dev/shm or a kill, host memory either
                # way ("RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly")
                r"DataLoader worker \(pids?(?:\(s\))? [\d, ]+\) exited unexpectedly")),
    (FailureKind.PINNED_HOST, ("cudaHostAlloc", "cudaMallocHost", "cuMemHostAlloc", "cuMemAllocHost", "pin_memory",
                               "pinned", "on host", "CachingHostAllocator"),
     # the CUDA runtime / driver calls that allocate pinned host memory (dlib: "Error while calling
     # cudaMallocHost(&data, ...) ... reason: out of memory")
     re.compile(r"(?:cudaHostAlloc|cudaMallocHost|cuMemHostAlloc|cuMemAllocHost)\b.*(?:out of memory|failed|error|"
                r"OUT_OF_MEMORY)|cudaHostAlloc|(?:pin_memory|pinned memory|pinned host memory).*(?:out of memory|failed|error)|"
                # the caching host allocator (THC's, then c10's) is PyTorch's pool of pinned host memory
                r"CachingHostAllocator.*out of memory|"
                r"could not allocate pinned host memory|on host: CUDA_ERROR_OUT_OF_MEMORY")),
    # a communication library that could not allocate device memory: NCCL's "Cuda failure 2 'out of
    # memory'" quoted inside another runtime's message (XLA's "Last NCCL warning(error) log entry"),
    # oneCCL / Level Zero's ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
    (FailureKind.NCCL_CUDA_OOM, ("Cuda failure", "OUT_OF_DEVICE_MEMORY", "NCCL WARN", "cuMemCreate failed",
                                 "Failed to CUDA calloc", "HcclAllocComResource", "byte device buffer",
                                 "cuda malloc failed", "Failed to allocate resource["),
     re.compile(r"Cuda failure \d*\s*'out of memory'|(?:CCL|ccl|ze_call|zeCommand).*OUT_OF_DEVICE_MEMORY|"
                r"NCCL WARN.*(?:cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|[Cc]all to cudaMalloc failed|"
                r"cudaMalloc\w* failed)|"
                # NVSHMEM (DeepEP, symmetric memory) building its heap: "/nvshmem/src/host/mem/mem_heap.cpp:1509:
                # non-zero status: 2 cuMemCreate failed" (2 is CUDA_ERROR_OUT_OF_MEMORY)
                r"nvshmem\S*: non-zero status: 2 cuMemCreate failed|"
                # NCCL's own allocation quoted without its WARN prefix (an exception's "Last error:" text, a
                # pasted excerpt): "Failed to CUDA calloc 536870912 bytes"
                r"Failed to CUDA calloc \d+ bytes|"
                # HCCL (Ascend) failing to allocate its communication resources for an op: "Nnopbase fails to
                # invoke the HcclAllocComResourceByTiling function of the hccl module"
                r"fails to invoke the HcclAllocComResource\w* function|"
                # NCCL 1.x building a communicator: "WARN src/core.cu:225 failed to allocate 2101248 byte device
                # buffer", then "NCCL Init failed (10) 'cuda malloc failed'"
                r"failed to allocate \d+ byte device buffer|NCCL Init failed \(\d+\) 'cuda malloc failed'|"
                # HCCL's transport resources (queue pairs, completion queues, notifies): "EI0007: ... Failed to
                # allocate resource[qp] with info [...]. Reason: Memory resources are exhausted."
                r"Failed to allocate resource\[(?:qp|cq|srq|notify|Notify)\w*\]")),
    # an older NCCL's error return chain: "host:pid:tid [0] NCCL INFO transport/net.cc:515 -> 2", and the same
    # chain at WARN level (NCCL forks such as Alibaba's ACCL: "NCCL WARN init.cc:2103 -> 3")
    (FailureKind.NCCL_SYSTEM, (".cc:", ".h:", ".cu:"),
     # (codes 1, 2, 3, 6 only: an invalid-usage return can be a probe that NCCL handles itself)
     re.compile(r"NCCL (?:INFO|WARN) [\w./-]+\.(?:cc|h|cu|cpp):\d+ -> (?P<code>[1236])\b")),
    # Huawei's HCCL (Ascend NPUs), NCCL's counterpart: a collective that failed ("OPS function error: HcclAllreduce,
    # error code is 6") or its socket timing out ("EI0006: Getting socket times out")
    (FailureKind.NCCL_OTHER, ("Hccl", "HCCL"),
     # (torch_npu's process group raising it: "RuntimeError: [ERROR] HCCL error in:
     # torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64")
     re.compile(r"\bHccl[A-Z]\w*, error code is \d+|HCCL function error|EI0006\b.*socket times out|"
                r"HCCL error in: \S*ProcessGroupHCCL")),
    # JAX / XLA's coordination service (multi-host start-up and its barriers): "DEADLINE_EXCEEDED: Barrier timed
    # out. Barrier_id: PjRT_Client_Connect", "DEADLINE_EXCEEDED: GetKeyValue() timed out with key: ...",
    # "Stopping coordination service as cluster registration failed", RegisterTask's "DEADLINE_EXCEEDED: Deadline
    # Exceeded" on the line before its "RPC: /tensorflow.CoordinationService/RegisterTask"
    (FailureKind.NCCL_TIMEOUT, ("DEADLINE_EXCEEDED", "cluster registration failed"),
     re.compile(r"DEADLINE_EXCEEDED: (?:Barrier timed out|GetKeyValue\(\) timed out|Deadline Exceeded)|"
                r"coordination service as cluster registration failed")),
    (FailureKind.NCCL_TIMEOUT, ("Watchdog", "watchdog", "checkTimeout", "timed out", "Timeout", "timeout"),
     re.compile(r"Watchdog caught collective operation timeout|ncclCommWatchdog|WorkNCCL::checkTimeout|"
                r"watchdogHandler|Some NCCL operations have failed or timed out|collective operation timeout|"
                r"ran for \d+ milliseconds before timing out|NCCL timeout|Socket Timeout|DistStoreError.*[Tt]imeout|"
                r"timed out after \d+|wait timeout|"
                # the same messages wrapped by a terminal or the tracker mid-word ("Watchdog caught colle" / "ctive
                # operation timeout: WorkNCCL(...) ran for 1800006 milliseconds before" / " timing out."), and
                # PyTorch >= 2.2's line after it ("failure detected by watchdog at work sequence id: 5701784")
                r"operation timeout: WorkNCCL\(|ran for \d+ milliseconds before\s*$|"
                r"failure detected by watchdog at work sequence id")),
    # ncclGetErrorString()'s text behind "NCCL error: " without PyTorch's ", NCCL version" tail (the
    # pynccl wrappers of vLLM and sglang): the text names the ncclResult_t
    (FailureKind.NCCL_OTHER, ("NCCL error: ", "failed: "),
     # (Horovod's "ncclCommInitRank failed: unhandled cuda error" names the failing NCCL call instead)
     re.compile(r"(?:NCCL error|nccl[A-Z]\w+ failed): (?P<desc>unhandled cuda error|unhandled system error|internal error|invalid argument|"
                r"invalid usage|remote process exited or there was a network error)")),
    (FailureKind.NCCL_SYSTEM, ("NCCL", "nccl", "Connection reset", "socket has timed out", "TCPStore", "CCL_ERROR",
                               "oneCCL", "Connection refused", "Connection closed",
                               "DistNetworkError", "Rendezvous", "rendezvous", "Broken pipe"),
     re.compile(r"NCCL WARN.*(?:[Cc]onnection|socket|[Ss]ocket|Net/IB|ibv_|NET/|[Tt]imeout|remote|"
                r"system error|failed)|ncclSystemError|ncclInternalError|ncclRemoteError|ncclInvalidUsage|"
                r"unhandled system error|internal error - please report|remote process exited|"
                r"Connection reset by peer|Connection refused|Connection closed by peer|DistNetworkError|"
                r"Rendezvous(?:Connection|Timeout|Closed|State)Error|NCCL communicator was aborted|Broken pipe|"
                r"NCCL error in:|ProcessGroupNCCL.*(?:error|Error)|ncclUnhandledCudaError|socket has timed out|"
                r"TCPStore|c10d.*(?:timed out|failed)|CCL_ERROR|oneCCL")),
    (FailureKind.CONFIG_VALIDATION, ("ValidationError", "validation error", "not permitted", "Extra inputs"),
     re.compile(r"ValidationError|validation errors? for \w+|extra fields not permitted|"
                r"Extra inputs are not permitted")),
    # vLLM's start-up checks: the card is already taken, or the KV cache cannot hold one max-length sequence
    (FailureKind.CONFIG_VALIDATION, ("desired GPU memory utilization", "stored in KV cache"),
     re.compile(r"on startup is less than desired GPU memory utilization|"
                r"is larger than the maximum number of tokens that can be stored in KV cache")),
    # an exception that names a setting to change (DeepSpeed's "You are using an untested ZeRO Optimizer. Please add
    # <"zero_allow_untested_optimizer": true> in the configuration file", "must be one of", "should be set"): the run
    # stops on its configuration; an out-of-memory line is never this (_classify skips it)
    (FailureKind.CONFIG_VALIDATION, ("in the configuration", "config file", "configuration file", "ds_config",
                                     "untested ZeRO", "zero_allow_untested_optimizer", "Please add", "Please set",
                                     "please set", "Please specify", "must be set", "must be specified",
                                     "must be provided", "must be one of", "must be a multiple of", "should be set",
                                     "should be one of", "divisible by"),
     re.compile(r"(?:Assertion|Value|NotImplemented|Type|Key|Runtime)?(?:Error|Exception)\b.*(?:in the configuration|"
                r"config(?:uration)? file|ds_config|untested ZeRO|zero_allow_untested_optimizer|[Pp]lease (?:add|set|"
                r"specify)\b|must be (?:set|specified|provided|one of|a multiple of)\b|should be (?:set|one of)\b|"
                r"(?:is not|must be|should be) divisible by)")),
    # a batch scheduler refusing or failing to launch the job (Slurm's sbatch / srun): the request or the set-up,
    # before any memory was used
    (FailureKind.CONFIG_VALIDATION, ("sbatch: error", "srun: error", "salloc: error"),
     re.compile(r"(?:sbatch|srun|salloc): error: (?:Memory specification can not be satisfied|Batch job submission "
                r"failed|.*Job credential expired|Invalid generic resource \(gres\) specification|"
                r"Task launch for \S+ failed)")),
    # cuDNN / cuBLAS unable to create their handle at start-up (TensorFlow, JAX/XLA, EXLA): the framework's
    # preallocation or another process left no memory for it, or the library does not match the driver -- a
    # set-up to correct either way: "Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR", "failed to create
    # cublas handle: CUBLAS_STATUS_NOT_INITIALIZED"; PyTorch's form: "RuntimeError: CUDA error:
    # CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`" (ALLOC_FAILED there is an OOM of its own)
    (FailureKind.CONFIG_VALIDATION, ("cudnn handle", "cublas handle", "CUBLAS_STATUS_NOT_INITIALIZED"),
     re.compile(r"[Cc]ould not create cudnn handle: CUDNN_STATUS_\w+|failed to create cublas handle: CUBLAS_STATUS_\w+|"
                r"CUBLAS_STATUS_NOT_INITIALIZED when calling `?cublasCreate")),
    # accelerate refusing a k-bit model placed on another device than the rank trains on (a per-rank device_map
    # under torchrun): "ValueError: You can't train a model that has been loaded in 8-bit precision on a different
    # device than the one you're training on."
    (FailureKind.CONFIG_VALIDATION, ("on a different device than the one you're training on",),
     re.compile(r"loaded in \d+-bit precision on a different device than the one you're training on")),
    # TensorFlow's form (Horovod, TensorFlowOnSpark): two processes' GPU:0 on one card, "AlreadyExistsError:
    # TensorFlow device (GPU:0) is being mapped to multiple CUDA devices (0 now, and 1 previously)"
    (FailureKind.DUPLICATE_GPU, ("Duplicate GPU", "same GPU", "invalid device ordinal", "AlreadyExistsError",
                                 "mapped to multiple CUDA devices"),
     re.compile(r"Duplicate GPU detected|on the same GPU|invalid device ordinal|mapped to multiple CUDA devices|"
                r"AlreadyExistsError: TensorFlow device \(GPU:\d+\) is being")),
    (FailureKind.CONFIG_VALIDATION, ("compiled without GPU", "without GPU support", "No CUDA GPUs", "built in",
                                     "no NVIDIA driver", "not compatible with", "is not supported with",
                                     "cannot be used with", "is only supported", "must be divisible",
                                     "should be divisible", "is not divisible", "is not equal to",
                                     "incompatible with"),
     # ("Distributed package doesn't have NCCL built in": the NCCL backend asked of a torch without it, e.g.
     # on Windows)
     re.compile(r"compiled without GPU support|without GPU support|No CUDA GPUs are available|"
                r"Distributed package doesn't have \w+ built in|"
                r"[Ff]ound no NVIDIA driver|is not compatible with|is not supported with|cannot be used with|"
                r"is only supported (?:with|for|on)|must be divisible by|should be divisible by|"
                r"is not divisible by|is not equal to micro_batch|"
                # DeepSpeed's pipeline engine: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
                # (not HF's warning "`use_cache=True` is incompatible with gradient checkpointing. Setting ...")
                r"(?:is|are) incompatible with (?!gradient checkpointing)")),
    (FailureKind.PYTHON_EXCEPTION, ("illegal memory access", "device-side assert", "Segmentation fault",
                                    "CUBLAS_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_EXECUTION_FAILED",
                                    "unspecified launch failure", "core dumped", "SIGSEGV", "illegal instruction",
                                    "misaligned address", "NaN"),
     re.compile(r"illegal memory access|device-side assert|Segmentation fault|CUBLAS_STATUS_EXECUTION_FAILED|"
                r"CUDNN_STATUS_EXECUTION_FAILED|CUBLAS_STATUS_INTERNAL_ERROR|unspecified launch failure|"
                r"core dumped|SIGSEGV|illegal instruction|misaligned address|"
                r"(?:loss|Loss) (?:is|became) (?:NaN|nan)|Detected (?:NaN|nan)")),
)

_EXC_NAME = re.compile(r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exhausted)\b")


def _exception_name(text: str) -> str:
    """The exception class an unread OOM line names ("torch.OutOfMemoryError: ..."), else "" -- never a
    timestamp or a logger's prefix ("[2020-05-05 18:48:50] Error: CUDA error 2 'out of memory'")."""
    m = _EXC_NAME.search(text)
    return m.group(0)[:80] if m else ""


# An OOM-ish message that no OOM parser could read (wrapped, abridged, other runtimes).
_ANY_OOM = re.compile(r"out of memory|OutOfMemoryError|OOM when allocating|RESOURCE_EXHAUSTED|"
                      r"while trying to allocate \d+ bytes|enough GPU RAM|enough GPU memory|"
                      r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|HIP out of memory|"
                      r"cannot allocate memory|Cannot allocate memory|can't allocate memory|"
                      r"No available memory for the cache blocks|not enough memory|"
                      r"insufficient (?:GPU|device|CUDA) memory|"
                      # the driver API's error name (cuMemAlloc failing in KeOps, CuPy, custom kernels)
                      r"CUDA_ERROR_OUT_OF_MEMORY|"
                      # TensorFlow's stream executor refused a device allocation (CUDA or ROCm: "failed to allocate
                      # 7.35G (7889485824 bytes) from device: hipError_t(1002)"), HIP's names for it, and the row of
                      # asterisks its BFC allocator prints only when it ran out ("bfc_allocator.cc:319] *****")
                      r"failed to allocate [\d.]+[KMGT]?i?B? \(\d+ bytes\) from device|hipErrorOutOfMemory|"
                      r"hipErrorMemoryAllocation|hipError_t\(1002\)|bfc_allocator\.cc:\d+\] \*{20,}|"
                      # a cudaMalloc failure whose pasted line is cut inside its last word (tiny-cuda-nn's "Could
                      # not allocate memory: ... cudaMalloc(&rawptr, ...) failed with error out of memor")
                      r"\b(?:cudaMalloc|cuMemAlloc)\w*\(.*\bfailed with error out of mem(?:o|or)?\s*$", re.I)


_OOM_SENTINELS = ("trying to allocate", "enough GPU", "out of memory", "Out of memory", "OutOfMemory", "OOM when", "RESOURCE_EXHAUSTED", "ALLOC_FAILED",
                  "allocate memory", "No available memory", "not enough memory", "Not enough memory",
                  "insufficient GPU", "CUDA_ERROR_OUT_OF_MEMORY", "from device", "hipError", "bfc_allocator",
                  "insufficient device", "insufficient CUDA")
_HOSTISH = re.compile(r"can't allocate memory|[Cc]annot allocate memory|DefaultCPUAllocator|CPU", re.I)


# advice printed before anything failed ("If you are running out of memory, consider decreasing
# `gpu_memory_utilization`", Ray's "how to address the out of memory issue"): not an OOM
_ADVICE = re.compile(r"[Ii]f you (?:are |were |still |keep )?(?:run(?:ning)?|get(?:ting)?|hit(?:ting)?|see(?:ing)?|"
                     r"encounter(?:ing)?|experienc\w*|fac(?:e|ing)) (?:an? |into |the )?(?:CUDA |GPU )?"
                     r"(?:out of memory|OOM)|to (?:avoid|prevent) (?:running |going )?(?:CUDA |GPU )?out of memory|"
                     r"how to address the out of memory issue")
_WARNS_KEPT = 50
_OOM_LIT = re.compile("|".join(re.escape(s) for s in _OOM_SENTINELS))
_COMPILED = tuple((kind, re.compile("|".join(re.escape(s) for s in sents)), pat) for kind, sents, pat in PATTERNS)


# ncclResult_t codes of an error return chain ("-> 2"); 1 (a CUDA error) says nothing of the network
_NCCL_RETURN_CODE = {"1": FailureKind.NCCL_OTHER, "2": FailureKind.NCCL_SYSTEM, "3": FailureKind.NCCL_INTERNAL,
                     "4": FailureKind.NCCL_INVALID_USAGE, "5": FailureKind.NCCL_INVALID_USAGE,
                     "6": FailureKind.NCCL_REMOTE}


@memo_by_text
def _classify(text: str) -> tuple[bool, FailureKind | None, bool]:
    """Whether a line reads as an OOM, the failure kind it shows (the first that matches), and whether
    that is only an NCCL error return chain line.  Once per distinct text: a long log repeats its
    failure-shaped lines."""
    if len(text) > 4000:
        text = text[-4000:]
    is_oom = bool(_OOM_LIT.search(text) and _ANY_OOM.search(text)) and not _ADVICE.search(text)
    for kind, sents, pat in _COMPILED:
        if sents.search(text) and (m := pat.search(text)):
            if kind in (FailureKind.PYTHON_EXCEPTION, FailureKind.CONFIG_VALIDATION) and _ANY_OOM.search(text):
                continue
            if "code" in pat.groupindex and m.group("code"):
                return is_oom, _NCCL_RETURN_CODE.get(m.group("code"), FailureKind.NCCL_OTHER), True
            if "desc" in pat.groupindex:
                return is_oom, KIND_BY_RESULT.get(result_from_desc(m.group("desc")) or "", kind), False
            return is_oom, kind, False
    return is_oom, None, False


def _family(kind: FailureKind) -> str:
    if kind.value.startswith("nccl"):
        return "nccl"
    if kind in (FailureKind.SHM, FailureKind.HOST_OOM_KILL, FailureKind.KILLED, FailureKind.SIGKILL,
                FailureKind.PINNED_HOST):
        return "host"
    if kind in (FailureKind.CONFIG_VALIDATION, FailureKind.DUPLICATE_GPU):
        return "config"
    return kind.value


# "NCCL" is on every NCCL INFO line of a big log; the lines offered are those holding what the
# NCCL-system pattern's branches need (each branch holds one of these or another kind's sentinel),
# so every line that "NCCL" let through and that matches is still offered.  The per-kind test in
# ``feed`` keeps the sentinels above: the same lines match as before.
_NCCL_BRANCHES = ("NCCL WARN", "NCCL error", "NCCL communicator", "ProcessGroupNCCL", "unhandled system error",
                  "internal error - please report", "remote process exited", "c10d")


# Likewise "137": the SIGKILL pattern's branch with it reads "code 137", "code: 137", "status 137" or
# "status: 137" (its other branches hold "-9", "SIGKILL" or "signal 9"); a bare "137" is in step numbers.
_SIGKILL_137 = ("code 137", "code: 137", "status 137", "status: 137")


class FailureLineParser(SentinelParser):
    SENTINELS: tuple[str, ...] = tuple(sorted(({s for _, sents, _ in PATTERNS for s in sents} - {"NCCL", "137"})
                                              | set(_NCCL_BRANCHES) | set(_SIGKILL_137) | set(_OOM_SENTINELS)))

    def setup(self) -> None:
        self._found: list[tuple[FailureKind, LogLine]] = []
        self._oom: LogLine | None = None
        self._chain: list[tuple[FailureKind, LogLine]] = []     # NCCL INFO "file.cc:N -> code" lines
        self._warns: list[LogLine] = []                          # the last NCCL WARN lines (they name the reason)

    def feed(self, ln: LogLine) -> None:
        is_oom, kind, chain = _classify(ln.text)
        if self._oom is None and is_oom:
            self._oom = ln
        if kind is not None:
            (self._chain if chain else self._found).append((kind, ln))
        if "NCCL WARN" in ln.text:
            self._warns = [*self._warns[-(_WARNS_KEPT - 1):], ln]

    def finish(self) -> None:
        self._unread_oom()
        self._rekind_generic_exceptions()
        if self._chain and not self._found and not any(
                x.ref.source == self.path for x in (*self.out.failures, *self.out.ooms)):
            # only an error return chain: the WARN that would name the failure was not printed or pasted
            self._found.append(self._chain[0])
        taken = {(x.ref.source, x.ref.line) for x in (*self.out.failures, *self.out.ooms, *self.out.exits)}
        families_seen = {_family(x.kind) for x in self.out.failures if x.ref.source == self.path}
        per_kind: dict[FailureKind, int] = {}
        for kind, ln in self._found:
            if (self.path, ln.lineno) in taken:
                continue
            if kind is FailureKind.SIGKILL and (any(e.ref.source == self.path for e in self.out.exits)
                                                or "closing signal" in ln.text):
                continue                      # the launcher parser reads exits (and kills survivors itself)
            if _family(kind) in families_seen and kind is not FailureKind.PYTHON_EXCEPTION:
                continue                      # a dedicated parser already read this family of failure here
            if per_kind.get(kind, 0) >= 5:
                continue
            per_kind[kind] = per_kind.get(kind, 0) + 1
            killer = _killer(ln.text) if kind is FailureKind.HOST_OOM_KILL else None
            warn = self._warn_before(ln) if _family(kind) == "nccl" else None
            config = _vllm_check(ln.text) if kind is FailureKind.CONFIG_VALIDATION else None
            self.out.failures.append(Failure(
                kind, ref(self.path, ln), line_rank(ln, self.rank_hint), message=ln.text.strip()[:500],
                killer=killer, last_error=warn.text.split("NCCL WARN", 1)[1].strip()[:500] if warn else None,
                last_error_ref=ref(self.path, warn) if warn else None, config=config))

    def _warn_before(self, ln: LogLine) -> LogLine | None:
        """The last NCCL WARN before an NCCL failure line that does not say why itself (vLLM's "NCCL error:
        invalid usage"), preferring one of the same process id when the lines carry one."""
        before = [w for w in self._warns if w.lineno < ln.lineno]
        if not before or "NCCL WARN" in ln.text:
            return None
        pids = set(re.findall(r"\bpid[= ](\d+)|:(\d+):\d+ \[", ln.raw))
        pid = {p for pair in pids for p in pair if p}
        same = [w for w in before if any(f":{p}:" in w.raw for p in pid)]
        return (same or before)[-1]

    def _unread_oom(self) -> None:
        """An out-of-memory line that no OOM parser could read still is an OOM (without numbers)."""
        from ..model import OomEvent, OomKind

        ln = self._oom
        if ln is None or any(o.ref.source == self.path for o in self.out.ooms):
            return
        if any(f.ref.source == self.path and f.ref.line == ln.lineno and f.kind.value.startswith("nccl")
               for f in self.out.failures):
            return                              # NCCL's own OOM: the NCCL parser has it
        if any(k is FailureKind.NCCL_CUDA_OOM and f.lineno == ln.lineno for k, f in self._found):
            return                              # a communication library's OOM: recorded as its failure
        if any(_family(k) == "host" and f.lineno == ln.lineno for k, f in self._found):
            return                              # the kernel's OOM killer ("Out of memory: Killed process"): a host failure
        text = ln.text
        host = (bool(_HOSTISH.search(text)) and not re.search(r"CUDA|GPU|HIP|cuda|gpu", text)) or bool(
            re.search(r"on host|host memory|pinned", text))
        self.out.ooms.append(OomEvent(OomKind.HOST if host else OomKind.OTHER, ref(self.path, ln),
                                      rank=line_rank(ln, self.rank_hint), message_format="unparsed",
                                      exception=_exception_name(text)))

    def _rekind_generic_exceptions(self) -> None:
        """An exception line the exception parser could only call generic ("RuntimeError: Connection
        reset by peer", "RuntimeError: CUDA error: invalid device ordinal") gets the kind its text names."""
        import dataclasses

        mine = {ln.lineno: kind for kind, ln in self._found if kind is not FailureKind.PYTHON_EXCEPTION}
        have = {(_family(f.kind), f.rank) for f in self.out.failures if f.ref.source == self.path}
        for i, f in enumerate(self.out.failures):
            if f.kind is FailureKind.PYTHON_EXCEPTION and f.ref.source == self.path and f.ref.line in mine:
                kind = mine[f.ref.line]
                if (_family(kind), f.rank) not in have:
                    config = (_vllm_check(f.ref.text or f.message) or f.config) \
                        if kind is FailureKind.CONFIG_VALIDATION else f.config
                    self.out.failures[i] = dataclasses.replace(f, kind=kind, config=config)
                    have.add((_family(kind), f.rank))


def _killer(text: str) -> str | None:
    """Who killed a process for host memory, when the line says: Ray's memory monitor ("ray") or a notebook
    service restarting its runtime ("notebook"); None for the kernel / cgroup OOM killer."""
    if _RAY_MONITOR.search(text):
        return "ray"
    return "notebook" if _NOTEBOOK_RESTART.search(text) else None
