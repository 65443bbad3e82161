"""The exception that ends a traceback, when it is not an OOM or NCCL error.

Configuration mistakes stop runs outright and must be told apart from memory
failures (DESIGN.md: ``config_error``): DeepSpeed's pydantic validation
(multi-line: the model, then the field, then the reason), its batch-size
assertion, ``DeepSpeedConfigError`` / ``ZeRORuntimeException``, ``"auto"``
values that reach arithmetic (``TypeError`` inside deepspeed/runtime/config.py),
an unknown ``PYTORCH_CUDA_ALLOC_CONF`` key.  Every other exception becomes a
generic ``PYTHON_EXCEPTION`` failure so rank attribution knows the rank died
of its own error.
"""

from __future__ import annotations

import re

from ..model import ConfigIssue, Failure, FailureKind, Stack
from ..sources import LogLine
from .base import EvidenceBuilder, TracebackTracker, line_rank, ref

EXC_LINE = re.compile(r"^\s*(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|AssertionError)"
                      r"(?::\s?(?P<msg>.*))?$")
# (a launcher's subprocess.CalledProcessError — accelerate launch, LLaMA-Factory's torchrun wrapper, autotrain —
# reports the child's exit, not a failure of its own; a kill in it, "died with <Signals.SIGKILL: 9>", is read by
# failure_lines as any SIGKILL is)
SKIP = ("out of memory", "OutOfMemoryError", "DistBackendError", "NCCL", "ChildFailedError",
        "DefaultCPUAllocator", "ALLOC_FAILED", "ProcessExitedException", "CalledProcessError")
CONFIG_TEXTS = ("Check batch related parameters", "train_batch_size is not equal to",
                "Either train_batch_size or train_micro_batch_size_per_gpu",
                "bfloat16 and fp16 modes cannot be simultaneously enabled", "Partial offloading only supported",
                "in CUDA allocator config", "CachingAllocator option", "You are using ZeRO-Offload with a client provided optimizer",
                "deprecated version of ZeRO Stage 1", "Cannot provide deprecated parameter",
                "Duplicate GPU detected", "zero_force_ds_cpu_optimizer", "invalid device ordinal",
                "is not compatible with", "No CUDA GPUs are available", "compiled without GPU support",
                "cannot be used with", "is only supported", "must be divisible by", "must be evenly divisible by",
                # the rendezvous port is taken (a second job on the host, a stale one): MASTER_PORT / --master_port
                "Address already in use",
                "not supported with",
                "Please correct the following DeepSpeed config values")
CONFIG_EXC = ("DeepSpeedConfigError", "ZeRORuntimeException")
# pydantic: "1 validation error for DeepSpeedZeroConfig: stage3_prefetch_bucket_size; Input should be ...
#            [type=int_from_float, input_value=15099494.4, input_type=float]" (continuation lines joined)
# torch's allocator checking PYTORCH_CUDA_ALLOC_CONF at CUDA start-up:
# "CachingAllocator option max_split_size_mb too small, must be >= 20"
ALLOC_MINIMUM = re.compile(r"CachingAllocator option (?P<key>\w+) too small, must be >= (?P<min>\d+)")
PYDANTIC_FIELD = re.compile(r"validation errors? for (?P<model>\w+):\s*(?P<field>[\w.]+)")
PYDANTIC_TYPE = re.compile(r"\[type=(?P<type>\w+)")
PYDANTIC_INPUT = re.compile(r"input_value=(?P<v>[^,\]]+)")
# DeepSpeed's batch assertion: "... world_size 32 != 4 * 4 * 1"
BATCH_ASSERT = re.compile(r"(?P<train>\d+) != (?P<micro>\d+) \* (?P<gas>\d+) \* (?P<ws>[\d.]+)")
# a settings check DeepSpeed (or an integration driving it) makes with a plain ValueError / assert
SETTINGS_EXC = ("AssertionError", "ValueError", "NotImplementedError")
DS_SETTING = re.compile(r"\b(?:zero_optimization|stage3_\w+|offload_(?:param|optimizer)|train_micro_batch_size_per_gpu|"
                        r"gradient_accumulation_steps|train_batch_size|reduce_bucket_size|allgather_bucket_size|"
                        r"overlap_comm|contiguous_gradients|zero_stage|ds_config|[Dd]eep[Ss]peed config|"
                        r"ZeRO[- ]?(?:stage|Stage|Offload|offload|[0-3]\b)|[Zz]ero [Ss]tage|zero\.Init|fp16\.enabled|bf16\.enabled|"
                        r"[Mm]icro[ _]batch|batch size per gpu|[Dd]eep[Ss]peed)")
# assertions a training framework raises when two settings do not go together, quoted by their own text: ZeRO-1/2's
# "The parameter N has already been reduced. Gradient computed twice for this partition" (gradient checkpointing or
# a module run twice per step under that ZeRO stage), Megatron's "Cannot set grad twice" (DDP options that
# accumulate into main_grad twice), FSDP's "Integer parameters are unsupported" (quantized int8/4-bit weights
# wrapped by FSDP: QLoRA needs its quant-storage dtype set).  Their text is specific enough whatever the
# exception type (ZeRO's is a RuntimeError)
SETTING_ASSERTS = re.compile(r"has already been reduced|Gradient computed twice for this partition|"
                             r"Cannot set grad twice|Integer parameters are unsupported")
# a library refusing a combination of settings and naming the one to change ("The model's max seq len (4096)
# is larger than the maximum number of tokens that can be stored in KV cache (3792). Try increasing
# `gpu_memory_utilization` or decreasing `max_model_len`")
SETTING_ADVICE = re.compile(r"(?:[Tt]ry|[Pp]lease|[Cc]onsider|[Yy]ou (?:can|should|need to|must)) (?:increas|decreas|reduc|"
                            r"lower|rais|sett?|pass|specify|chang|us)\w* [^.]{0,60}`\w+`|"
                            r"[Yy]ou (?:can't|cannot|can not) (?:pass|use|set|specify|combine)\b[^.]{0,80}`\w+|"
                            r"is larger than the maximum|must be (?:smaller|less|greater|larger|at least|at most) than")
_OOM_WORDS = re.compile(r"out of memory|[Nn]o available memory|enough (?:GPU|CUDA|device) (?:RAM|memory)|OutOfMemory")
# a traceback pasted without its exception line still names what was raised
RAISE_CONFIG = re.compile(r"^\s*raise (?P<exc>DeepSpeedConfigError|ZeRORuntimeException)\b")
# the ds_config section each DeepSpeed pydantic model validates
PYDANTIC_SECTION = {"DeepSpeedZeroConfig": "zero_optimization"}


class ExceptionParser:
    # Fed when a traceback closes on a line, and on any line naming an exception: an excerpt
    # pasted into an issue is often the exception line alone ("[rank0]: AssertionError: ...").
    SENTINELS: tuple[str, ...] = ("Error", "Exception", "Exit", "Interrupt")
    TRIGGER = re.compile(r"Error|Exception|Exit|Interrupt")

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self.rank_hint = rank_hint
        self.tb = tracebacks or TracebackTracker()
        self._pending: dict[int | None, dict] = {}    # pydantic ValidationError continuation lines
        self._seen: set[tuple[int | None, int]] = set()
        self._raised: dict[int | None, tuple[str, LogLine]] = {}   # "raise ZeRORuntimeException(msg)" seen

    def feed(self, ln: LogLine) -> None:
        rank = line_rank(ln, self.rank_hint)
        pending = self._pending.get(rank)
        if pending is not None:
            if self._continue(pending, ln):
                return
            self._emit(self._pending.pop(rank))
        closes = self.tb.closed_on(rank, ln.lineno)
        text = self.tb.exception_text(rank, ln.lineno, ln.text) if closes else ln.text
        if any(s in text for s in SKIP):
            return
        if "raise " in text and (mr := RAISE_CONFIG.match(text)):
            self._raised[rank] = (mr.group("exc"), ln)
            return
        m = EXC_LINE.match(text)
        if m is None:
            return
        exc, msg = m.group("exc"), (m.group("msg") or "").strip()
        if not closes and (exc.endswith("Warning") or exc.startswith("nccl") or (rank, ln.lineno) in self._seen):
            return                      # a bare exception line; warnings are not failures
        self._seen.add((rank, ln.lineno))
        stack = self.tb.stack_for(rank)
        self._raised.pop(rank, None)
        record = {"exc": exc, "msg": msg, "ln": ln, "rank": rank, "stack": stack, "extra": [], "kind": None}
        if exc.endswith("ValidationError"):
            record["kind"] = FailureKind.CONFIG_VALIDATION
            self._pending[rank] = record
            return
        if not msg and m.group("msg") is not None and not exc.endswith(("Warning", "Interrupt", "Exit")):
            # "ValueError:" alone: the message starts on the next line (HF's DeepSpeed mismatch report)
            self._pending[rank] = record
            return
        self._classify(record)
        self._emit(record)

    def _classify(self, record: dict) -> None:
        exc, stack = record["exc"], record["stack"]
        msg = record["msg"]
        if record["extra"]:
            msg = (msg + ": " if msg else "") + "; ".join(record["extra"])
        if exc.split(".")[-1] in CONFIG_EXC or any(t in msg for t in CONFIG_TEXTS):
            record["kind"] = FailureKind.CONFIG_VALIDATION
        elif exc.endswith("TypeError") and _in_deepspeed_config(stack) and "str" in msg:
            record["kind"] = FailureKind.CONFIG_VALIDATION
            record["msg"] = record["msg"] + ' (a "auto" value reached DeepSpeed; only the HF integration fills those)'
        elif SETTING_ASSERTS.search(msg) or (exc.split(".")[-1] in SETTINGS_EXC and (
                _raised_by_deepspeed_setup(stack) or DS_SETTING.search(msg))):
            record["kind"] = FailureKind.CONFIG_VALIDATION
        elif (exc.split(".")[-1] in SETTINGS_EXC and SETTING_ADVICE.search(msg)
              and not _OOM_WORDS.search(msg)):
            record["kind"] = FailureKind.CONFIG_VALIDATION
        elif exc.split(".")[-1] == "AssertionError" and not msg and _asserts_settings(stack):
            record["kind"] = FailureKind.CONFIG_VALIDATION
            record["msg"] = "assert " + stack.frames[-1].code.strip()[len("assert"):].strip()
        else:
            record["kind"] = FailureKind.PYTHON_EXCEPTION

    def finish(self) -> None:
        for rank in list(self._pending):
            self._emit(self._pending.pop(rank))
        for rank, (exc, ln) in self._raised.items():
            # the excerpt ends at the raise: its exception line was not pasted
            self._emit({"exc": exc, "msg": "", "ln": ln, "rank": rank, "stack": self.tb.stack_for(rank),
                        "extra": [], "kind": FailureKind.CONFIG_VALIDATION})
        self._raised.clear()

    def _continue(self, pending: dict, ln: LogLine) -> bool:
        t = ln.text.rstrip()
        limit = 12 if pending["kind"] is not None else 4
        if not t or len(pending["extra"]) >= limit or t.startswith(("[20", "Traceback", "[rank", "W1", "E1", "I1")):
            return False
        if "errors.pydantic.dev" in t:
            return True
        pending["extra"].append(t.strip())
        return True

    def _emit(self, r: dict) -> None:
        if r["kind"] is None:                     # an exception whose message followed on the next lines
            self._classify(r)
        msg = r["msg"]
        if r["extra"]:
            msg = (msg + ": " if msg else "") + "; ".join(r["extra"])
        config = config_issue(msg) if r["kind"] is FailureKind.CONFIG_VALIDATION else None
        self.out.failures.append(Failure(r["kind"], ref(self.path, r["ln"]), r["rank"], message=msg[:1000],
                                         exception=r["exc"], stack=r["stack"], config=config))


def config_issue(msg: str) -> ConfigIssue:
    """The key and values a DeepSpeed (or allocator) configuration error names."""
    if (ma := ALLOC_MINIMUM.search(msg)):
        return ConfigIssue(key=f"PYTORCH_CUDA_ALLOC_CONF:{ma.group('key')}", error_type="below_minimum",
                           minimum=int(ma.group("min")))
    if (mb := BATCH_ASSERT.search(msg)):
        return ConfigIssue(key="train_batch_size", batch=(int(mb.group("train")), int(mb.group("micro")),
                                                          int(mb.group("gas")), float(mb.group("ws"))))
    key = None
    if (mf := PYDANTIC_FIELD.search(msg)):
        section = PYDANTIC_SECTION.get(mf.group("model"))
        key = f"{section}.{mf.group('field')}" if section else mf.group("field")
    mt = PYDANTIC_TYPE.search(msg)
    error_type = mt.group("type") if mt else ("extra_forbidden" if "Extra inputs" in msg else None)
    mv = PYDANTIC_INPUT.search(msg)
    return ConfigIssue(key=key, error_type=error_type, input_value=mv.group("v").strip() if mv else None)


# a bare AssertionError whose failing statement checks the run's settings: "assert args.batch_size % len(devices)
# == 0", "assert cfg.num_heads % tp_size == 0", "assert world_size <= n_gpus" -- a set-up check, not a crash
_SETTINGS_ASSERT = re.compile(r"^assert\b.*(?:\b(?:args|opt|opts|cfg|config|conf|hparams|hp|params|FLAGS)\.\w+|"
                              r"batch_size|world_size|n_?gpus?\b|num_gpus|devices|nproc|num_heads|tensor_parallel|"
                              r"pipeline_parallel|tp_size|pp_size|%\s*[\w.()\[\]]+\s*==\s*0)")


def _asserts_settings(stack: Stack) -> bool:
    """The innermost frame's statement is an ``assert`` on the run's arguments or sizes."""
    return bool(stack.frames) and bool(_SETTINGS_ASSERT.match(stack.frames[-1].code.strip()))


def _raised_by_deepspeed_setup(stack: Stack) -> bool:
    """The innermost frames are DeepSpeed checking its configuration (config, engine set-up, ZeRO init)."""
    for f in stack.frames[-2:]:
        fn = f.filename.replace("\\", "/")
        if "deepspeed/" in fn and ("/config" in fn or "engine.py" in fn or "/zero/" in fn or "__init__.py" in fn):
            return True
    return False


def _in_deepspeed_config(stack: Stack) -> bool:
    return any("deepspeed/runtime/config" in f.filename or "deepspeed/runtime/zero/config" in f.filename
               for f in stack.frames[-4:])
