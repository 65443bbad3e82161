"""The evidence model: typed, frozen records of what the crash artifacts say.

Parsers produce these; analysis and rules read them; nothing mutates them.
Every record that came from a text line carries a ``SourceRef`` (file:line and
the line itself) so a report can quote the proof behind each claim.  This
module imports nothing from the rest of oompost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class InputKind(str, Enum):
    TORCH_LOG = "torch_log"
    DEEPSPEED_LOG = "deepspeed_log"
    NCCL_LOG = "nccl_log"
    SNAPSHOT = "snapshot"
    DS_CONFIG = "ds_config"
    CAPTURE_META = "capture_meta"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class SourceRef:
    """Where a fact came from: the path as the user gave it, a 1-based line
    (None for binary sources), and the (stripped, truncated) line text."""

    source: str
    line: int | None = None
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text}


# the name of a frame whose header ("File ..., line N, in f") the input lost: only its source line is known
LOST_FRAME = "(frame header not in the input)"
# the filename of the frame a JAX/XLA OOM's "[executable_name='jit_train_step']" becomes: the compiled program
XLA_PROGRAM = "XLA executable"
# frames another runtime's OOM names instead of a Python traceback (parsers/runtime_ooms.py): the frame's filename is
# the runtime's key, its name the C function, op or graph node that failed, its line the log line
# runtimes other than PyTorch whose own allocator's failure a message names (``OomEvent.message_format``): their
# knobs are their own (classify/rules/_runtimes.py), not PyTorch's allocator settings or a trainer's arguments
OWN_RUNTIMES = ("ggml", "tensorrt", "rmm", "xla", "tensorflow", "paddle", "mlx", "faiss", "xgboost", "catboost",
                "onnxruntime", "nvmap")
# ... of them, the training frameworks: a step with optimizer state and activations, priced like PyTorch's
TRAINING_RUNTIMES = ("xla", "tensorflow", "paddle", "mlx")
# ... of them, the libraries that keep data on the GPU, not a network's activations (a vector index, a training matrix,
# a dataframe): what fails is the data not fitting, never a step's activations
DATA_RUNTIMES = ("rmm", "faiss", "xgboost", "catboost")
# OOM messages only an inference server prints (LMDeploy's TurboMind): its knobs are a server's (quantisation, tensor
# parallelism, the KV-cache share), never a trainer's
SERVING_FORMATS = ("turbomind",)
RUNTIME_FRAMES = {"ggml": "llama.cpp", "tensorflow": "TensorFlow", "onnxruntime": "ONNX Runtime",
                  "tensorrt": "TensorRT", XLA_PROGRAM: "XLA's compiled program"}


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame, from a Python traceback or a snapshot (innermost first
    in snapshots, outermost first in tracebacks: see ``Stack``)."""

    filename: str
    line: int
    name: str
    code: str = ""


@dataclass(frozen=True, slots=True)
class Stack:
    """Frames ordered outermost first (as a Python traceback prints them)."""

    frames: tuple[Frame, ...] = ()

    @property
    def statement_only(self) -> bool:
        """Only the failing source line is known (an excerpt kept it above the message, no frame header)."""
        return bool(self.frames) and all(f.name == LOST_FRAME and f.line <= 0 for f in self.frames)

    def innermost(self, n: int = 1) -> tuple[Frame, ...]:
        return self.frames[-n:]


# ---------------------------------------------------------------- OOM events


class OomKind(str, Enum):
    CACHING_ALLOCATOR = "caching_allocator"   # "CUDA out of memory. Tried to allocate ..."
    MALLOC_ASYNC = "malloc_async"             # backend:cudaMallocAsync text
    CUDA_ERROR = "cuda_error"                 # "CUDA error: out of memory" (raw CUDA call)
    CUBLAS = "cublas"                         # CUBLAS_STATUS_ALLOC_FAILED
    CUDNN = "cudnn"                           # CUDNN_STATUS_ALLOC_FAILED / NOT_ENOUGH_WORKSPACE
    HIP = "hip"                               # ROCm "HIP out of memory"
    HOST = "host"                             # DefaultCPUAllocator: can't allocate memory
    NCCL = "nccl"                             # NCCL could not allocate device memory
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class OomEvent:
    """One out-of-memory failure as the message reports it.  All sizes in bytes;
    None where the message does not say (or NVML printed garbage)."""

    kind: OomKind
    ref: SourceRef
    rank: int | None = None
    device: int | None = None
    requested_bytes: int | None = None        # "Tried to allocate" (segment-rounded)
    capacity_bytes: int | None = None         # "total capacity"
    free_bytes: int | None = None             # "of which X is free" (whole card)
    allowed_bytes: int | None = None          # "X allowed;" (memory fraction)
    allocated_bytes: int | None = None        # "allocated by PyTorch" / "already allocated"
    reserved_bytes: int | None = None         # total reserved, when stated or derivable
    reserved_unallocated_bytes: int | None = None
    process_in_use_bytes: int | None = None   # "this process has X memory in use"
    other_processes: tuple[tuple[int, int], ...] = ()   # (pid, bytes) of "Process N has X"
    private_pool_bytes: int | None = None
    message_format: str = ""                  # "<=2.0", "2.1", ">=2.2", "malloc_async", ...
    exception: str = ""                       # e.g. "torch.OutOfMemoryError"
    request_scope: str = ""                   # "program": the request figure is every buffer of a compiled program;
    #                                           "pool": an allocator's reservation of its pool (TensorFlow's BFC)
                                              # (XLA's compile-time "Used 215.17G of 31.25G hbm"), not one allocation
    stack: Stack = field(default_factory=Stack)
    truncated: bool = False

    @property
    def limit_bytes(self) -> int | None:
        """What this process may use: the ``allowed`` cap if set, else capacity."""
        return self.allowed_bytes if self.allowed_bytes is not None else self.capacity_bytes


# ----------------------------------------------------------- other failures


class FailureKind(str, Enum):
    NCCL_CUDA_OOM = "nccl_cuda_oom"           # NCCL "Cuda failure 'out of memory'" / "Failed to CUDA calloc"
    NCCL_HOST_ALLOC = "nccl_host_alloc"       # cuMem host / "Failed to CUDA host alloc"
    NCCL_REMOTE = "nccl_remote"               # remote peer exited / network error (a victim)
    NCCL_SYSTEM = "nccl_system"
    NCCL_INTERNAL = "nccl_internal"
    NCCL_INVALID_USAGE = "nccl_invalid_usage"
    NCCL_TIMEOUT = "nccl_timeout"             # watchdog collective timeout
    NCCL_HEARTBEAT = "nccl_heartbeat"         # watchdog hang
    NCCL_OTHER = "nccl_other"
    DUPLICATE_GPU = "duplicate_gpu"
    SHM = "shm"                               # /dev/shm exhausted (bus error, shared memory segment)
    HOST_OOM_KILL = "host_oom_kill"           # kernel/cgroup/Slurm OOM killer
    SIGKILL = "sigkill"                       # rc -9 / exit 137, cause not stated
    KILLED = "killed"                         # a bare "Killed" from the shell
    CONFIG_VALIDATION = "config_validation"   # DeepSpeed/pydantic validation, batch assertions
    PYTHON_EXCEPTION = "python_exception"     # any other uncaught exception ending a rank
    PINNED_HOST = "pinned_host"               # pin_memory / cudaHostAlloc failure
    NCCL_NVLS = "nccl_nvls"                   # NVLS multicast bind/alloc failure (Fabric Manager / NVSwitch set-up)


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """What a configuration error names, read from DeepSpeed's message."""

    key: str | None = None                    # ds_config key path, e.g. "zero_optimization.stage3_prefetch_bucket_size"
    error_type: str | None = None             # pydantic error type: "int_from_float", "extra_forbidden", ...
    input_value: str | None = None            # pydantic "input_value=", as printed
    batch: tuple[int, int, int, float] | None = None  # batch assertion: train, micro, accumulation, world size
    minimum: int | None = None                # the least value the checker accepts (allocator settings)


@dataclass(frozen=True, slots=True)
class Failure:
    """A non-OOM (or not-only-OOM) failure line: NCCL, watchdog, host, config."""

    kind: FailureKind
    ref: SourceRef
    rank: int | None = None
    message: str = ""
    bytes: int | None = None                  # e.g. "Failed to CUDA calloc N bytes"
    op_type: str | None = None                # watchdog OpType
    seq_num: int | None = None
    timeout_ms: int | None = None
    exception: str = ""
    stack: Stack = field(default_factory=Stack)
    host: str | None = None                   # NCCL "host:pid:tid" prefix, when the line had one
    pid: int | None = None                    # process id (NCCL prefix, kernel OOM-killer line)
    device: int | None = None                 # NCCL "[dev]": local CUDA ordinal, not the rank
    site: str | None = None                   # what NCCL was allocating: buffer | stream | launch | host | nvls
    nccl_result: str | None = None            # ncclResult_t name, e.g. "ncclUnhandledCudaError"
    last_error: str | None = None             # PyTorch's "Last error:" text (NCCL's last WARN)
    last_error_ref: SourceRef | None = None   # the line it was read from (often the line that names the cause)
    peer: str | None = None                   # "Connection closed by remote peer X": points at the dead rank's host
    killer: str | None = None                 # HOST_OOM_KILL: "ray" (Ray's memory monitor), "notebook" (Colab), else the kernel
    config: ConfigIssue | None = None         # CONFIG_VALIDATION: the key / values the message names


@dataclass(frozen=True, slots=True)
class RankExit:
    """A rank's exit as a launcher reports it (torchrun ChildFailedError entry,
    DeepSpeed launcher ``exits with return code``, Slurm task exit)."""

    ref: SourceRef
    exitcode: int
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    host: str | None = None
    time: str | None = None
    message: str = ""
    launcher: str = ""                        # "torchrun" | "deepspeed" | "slurm" | "mp.spawn" | "shell"
    reported_root_cause: bool = False
    error_file: str | None = None             # torchrun error_file (None for <N/A>)
    traceback: str = ""                       # torchrun "traceback :" field (multi-line, truncated)
    killed_by_launcher: bool = False          # the launcher sent it SIGTERM/SIGKILL while shutting down: a survivor


# ------------------------------------------------------------- run facts


@dataclass(frozen=True, slots=True)
class Fact:
    """A single named fact about the run with its source (versions, world size,
    parameter counts, micro-batch, sequence length, GPU name...)."""

    name: str
    value: Any
    ref: SourceRef


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """A memory figure printed during the run: DeepSpeed ``see_memory_usage``
    (MA/Max_MA/CA/Max_CA), throughput-timer lines or a training loop's own
    allocated/reserved print.  ``step`` is set when the line names one."""

    ref: SourceRef
    label: str = ""
    step: int | None = None
    rank: int | None = None
    allocated: int | None = None
    max_allocated: int | None = None
    reserved: int | None = None
    max_reserved: int | None = None
    host_used: int | None = None


@dataclass(frozen=True, slots=True)
class DsConfigSeen:
    """A DeepSpeed config as a run printed it (``json = {...}`` dump) or as the
    user passed it (``--ds-config`` / a ds_config.json found among the inputs)."""

    config: dict[str, Any]
    ref: SourceRef
    origin: str = "log"                        # "log" | "file"


@dataclass(frozen=True, slots=True)
class ParseWarning:
    source: str
    message: str
    line: int | None = None


@dataclass(frozen=True, slots=True)
class InputInfo:
    path: str
    kind: InputKind
    warnings: tuple[str, ...] = ()
    lines: int | None = None
    bytes: int | None = None


# ------------------------------------------------------------- snapshots


@dataclass(frozen=True, slots=True)
class Block:
    address: int
    size: int
    requested_size: int
    state: str                                 # active_allocated | active_pending_free | inactive
                                               # ("active_awaiting_free" is normalised to active_pending_free)
    frames: tuple[Frame, ...] = ()             # innermost first, as stored


@dataclass(frozen=True, slots=True)
class Segment:
    device: int
    address: int
    total_size: int
    allocated_size: int
    stream: int
    segment_type: str                          # "large" | "small"
    pool_id: tuple[int, int]
    is_expandable: bool
    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class TraceEvent:
    action: str
    addr: int
    size: int
    stream: int
    time_us: int | None
    frames: tuple[Frame, ...] = ()             # innermost first
    device_free: int | None = None             # only on "oom"
    pool_id: tuple[int, int] | None = None     # torch > 2.11 records it; None when absent
    user_metadata: str = ""                    # torch.cuda.memory._set_memory_metadata (>= 2.10)


NO_TIME = -(1 << 63)                           # Trace.time_us where an entry has none


class Trace:
    """One device's allocator trace as columns: a sequence of ``TraceEvent``
    that holds no Python object per entry.

    ``action`` (uint8 codes into ``actions``), ``addr``, ``size``, ``stream``,
    ``time_us`` (int64; ``NO_TIME`` where absent) and ``stack`` (int32 index into
    ``stacks``, whose entry 0 is the empty stack) are read-only numpy arrays of
    one length; the rare per-entry extras (``device_free`` of ``oom`` entries,
    ``pool_id``, ``user_metadata``) live in ``extra``, keyed by index.  Indexing
    and iterating build ``TraceEvent`` records on demand; analyses read the
    columns.  Immutable like the rest of the model."""

    __slots__ = ("action", "addr", "size", "stream", "time_us", "stack", "actions", "stacks", "extra")

    def __init__(self, action: Any, addr: Any, size: Any, stream: Any, time_us: Any, stack: Any,
                 actions: tuple[str, ...], stacks: tuple[tuple[Frame, ...], ...],
                 extra: dict[int, tuple[int | None, tuple[int, int] | None, str]] | None = None) -> None:
        for name, col in (("action", action), ("addr", addr), ("size", size), ("stream", stream),
                          ("time_us", time_us), ("stack", stack)):
            col.flags.writeable = False
            object.__setattr__(self, name, col)
        object.__setattr__(self, "actions", tuple(actions))
        object.__setattr__(self, "stacks", tuple(stacks))
        object.__setattr__(self, "extra", dict(extra or {}))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Trace is immutable")

    @classmethod
    def from_events(cls, events: Any) -> "Trace":
        """Columns from ``TraceEvent`` records (tests, legacy decoders)."""
        import numpy as np

        events = list(events)
        codes: dict[str, int] = {}
        stacks: dict[tuple[Frame, ...], int] = {(): 0}
        extra: dict[int, tuple[int | None, tuple[int, int] | None, str]] = {}
        for i, e in enumerate(events):
            codes.setdefault(e.action, len(codes))
            stacks.setdefault(e.frames, len(stacks))
            if e.device_free is not None or e.pool_id is not None or e.user_metadata:
                extra[i] = (e.device_free, e.pool_id, e.user_metadata)
        n = len(events)
        return cls(np.fromiter((codes[e.action] for e in events), np.uint8, n),
                   np.fromiter((e.addr for e in events), np.int64, n),
                   np.fromiter((e.size for e in events), np.int64, n),
                   np.fromiter((e.stream for e in events), np.int64, n),
                   np.fromiter((NO_TIME if e.time_us is None else e.time_us for e in events), np.int64, n),
                   np.fromiter((stacks[e.frames] for e in events), np.int32, n),
                   tuple(codes), tuple(stacks), extra)

    def __len__(self) -> int:
        return len(self.action)

    def __bool__(self) -> bool:
        return len(self.action) > 0

    def event(self, i: int) -> TraceEvent:
        t = int(self.time_us[i])
        df, pid, um = self.extra.get(i, (None, None, ""))
        return TraceEvent(self.actions[self.action[i]], int(self.addr[i]), int(self.size[i]), int(self.stream[i]),
                          None if t == NO_TIME else t, self.stacks[self.stack[i]], df, pid, um)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return tuple(self.event(k) for k in range(start, stop, step))
            return Trace(self.action[start:stop], self.addr[start:stop], self.size[start:stop],
                         self.stream[start:stop], self.time_us[start:stop], self.stack[start:stop], self.actions,
                         self.stacks, {k - start: v for k, v in self.extra.items() if start <= k < stop})
        n = len(self)
        k = int(i)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("trace index out of range")
        return self.event(k)

    def __iter__(self) -> Any:
        for k in range(len(self)):
            yield self.event(k)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Trace):
            other = tuple(other)
        if not isinstance(other, (tuple, list)):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = object.__hash__

    def __add__(self, other: Any) -> tuple[TraceEvent, ...]:
        return tuple(self) + tuple(other)

    def __radd__(self, other: Any) -> tuple[TraceEvent, ...]:
        return tuple(other) + tuple(self)

    def __repr__(self) -> str:
        return f"Trace({len(self)} entries)"

    def code_of(self, action: str) -> int:
        """The column code of ``action`` (-1 when the trace has no such entry)."""
        try:
            return self.actions.index(action)
        except ValueError:
            return -1

    def codes_of(self, *actions: str) -> list[int]:
        return [c for c in (self.code_of(a) for a in actions) if c >= 0]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A ``torch.cuda.memory._snapshot()`` pickle, decoded into typed records."""

    path: str
    segments: tuple[Segment, ...]
    traces: tuple[Trace, ...]                            # per device (a Trace is a sequence of TraceEvent)
    allocator_settings: dict[str, Any]
    meta: dict[str, Any]                                 # oompost_meta / capture extras
    format: str = ""                                     # "dict" | "segments_only" | "legacy_history"
    warnings: tuple[str, ...] = ()
    external_annotations: tuple[Any, ...] = ()           # record_function annotations, opaque dicts

    def __post_init__(self) -> None:
        # traces built by hand (tests, tools) as sequences of TraceEvent become columns too,
        # so every reader can rely on Trace's columns
        if not all(isinstance(t, Trace) for t in self.traces):
            object.__setattr__(self, "traces", tuple(t if isinstance(t, Trace) else Trace.from_events(t)
                                                     for t in self.traces))

    @property
    def expandable(self) -> bool:
        if "expandable_segments" in self.allocator_settings:
            return bool(self.allocator_settings["expandable_segments"])
        return any(s.is_expandable for s in self.segments)


# ---------------------------------------------------------------- the bag


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the inputs say, merged across files."""

    inputs: tuple[InputInfo, ...] = ()
    ooms: tuple[OomEvent, ...] = ()
    failures: tuple[Failure, ...] = ()
    exits: tuple[RankExit, ...] = ()
    facts: tuple[Fact, ...] = ()
    memory: tuple[MemoryReading, ...] = ()
    ds_configs: tuple[DsConfigSeen, ...] = ()
    snapshots: tuple[Snapshot, ...] = ()
    warnings: tuple[ParseWarning, ...] = ()
    stacks: tuple[tuple[SourceRef, Stack], ...] = ()   # every traceback seen (ref: where it ended)

    def fact(self, name: str) -> Fact | None:
        """The first recorded fact of that name (file order)."""
        for f in self.facts:
            if f.name == name:
                return f
        return None

    def fact_value(self, name: str, default: Any = None) -> Any:
        f = self.fact(name)
        return default if f is None else f.value

    def facts_named(self, name: str) -> tuple[Fact, ...]:
        return tuple(f for f in self.facts if f.name == name)
