"""NCCL's own log lines and PyTorch's ProcessGroupNCCL / c10d failure messages.

What it reads (reference/nccl.md §1, §3, §5):

* NCCL lines of every version: ``host:pid:tid [dev] [file:line [(func)] ]NCCL WARN|INFO|TRACE msg``,
  optionally led by the ≥2.26 ``[YYYY-MM-DD HH:MM:SS]`` timestamp, plus the bare version banner.
* PyTorch's multi-line ``NCCL error in: ..., <desc>, NCCL version x`` / ``nccl<Enum>: ...`` /
  ``Last error:`` / ``<text>`` block, with or without ``[rankN]:`` prefixes (continuation lines of
  C++ log messages carry none), the watchdog timeout, the heartbeat monitor and the
  ``last enqueued work`` status.

Attribution.  ``[dev]`` is a local CUDA ordinal, not a rank, so an NCCL line is first tied to its
process (``host:pid``).  At ``finish()`` processes are mapped to ranks, in order of trust: the
communicator ``Init START/COMPLETE`` lines (rank in the largest communicator), a PyTorch
``Last error:`` text that only one process printed as a WARN, and -- on one host only, when every
process shows a single distinct ``[dev]`` and nothing contradicts it -- the device ordinal.

Dedupe.  The watchdog prints its timeout 2-3 times, torchrun reprints error-file tracebacks,
``Cuda failure`` and ``Failed to CUDA calloc`` are two WARNs of one allocation: the result is one
Failure per (rank, kind, seq/bytes).  Records are appended to ``out.failures`` as they are found (so
file order is kept) and rewritten in place at ``finish()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..model import Failure, FailureKind, SourceRef, Stack
from ..sources import LogLine
from .base import literal_trigger, EvidenceBuilder, TracebackTracker, ref

K = FailureKind

# --------------------------------------------------------------- regexes

# host:pid:tid [dev] [ms ][file:line[ (func)] ]NCCL LEVEL msg  (searched: any leading timestamp
# or logger prefix is skipped; ranks.py reads the timestamp from the quoted line)
NCCL_LINE_RE = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:\d+(?:\.\d+)? )?"
    r"(?:(?P<file>[\w./<>+-]+):(?P<line>\d+)(?: \((?P<func>[^)\s]*)\))? )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|ERROR) ?(?P<msg>.*)$")
NCCL_VERSION_RE = re.compile(
    r"NCCL version (?P<ver>\d+\.\d+\.\d+)(?P<suffix>[^\s+,]*)(?:\+cuda(?P<cuda>\d+\.\d+))?")

CUDA_FAILURE_RE = re.compile(r"Cuda failure (?:(?P<code>\d+) )?'(?P<what>[^']*)'")
ALLOC_FAILED_RE = re.compile(
    r"Failed to CUDA (?P<how>calloc async|calloc|malloc async|malloc|host alloc) (?P<bytes>\d+) bytes")
HOST_MALLOC_FAILED_RE = re.compile(r"Failed to malloc (?P<bytes>\d+) bytes")
DUPLICATE_GPU_RE = re.compile(r"Duplicate GPU detected : rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device")
IB_COMPLETION_RE = re.compile(
    r"NET/IB(?:/GIN)? ?: Got completion (?:from peer (?P<peer>\S+) )?with (?:error |status=)(?P<status>\w+\(\d+\)|\d+)")
PEER_CLOSED_RE = re.compile(r"Connection closed by remote peer (?P<peer>\S+)")
RECV_FAILED_RE = re.compile(r"Call to recv from (?P<peer>\S+) failed")
CONNECT_FAILED_RE = re.compile(
    r"[Cc]onnect to (?P<peer>\S+?) (?:failed|returned .*exceeded error retry count)")
NVLS_BIND_RE = re.compile(r"Failed to bind NVLink SHARP \(NVLS\) Multicast memory of size (?P<bytes>\d+)")

INIT_RE = re.compile(
    r"(?:(?P<fn>nccl\w+) )?comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
    r"cudaDev (?P<dev>\d+).*? - Init (?P<phase>START|COMPLETE)")
CHANNELS_RE = re.compile(
    r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?P<nvls>\d+) nvls channels, "
    r"(?P<p2p>\d+) p2p channels, (?P<p2p_peer>\d+) p2p channels per peer")
NVLS_SIZE_RE = re.compile(
    r"NVLS comm 0x[0-9a-fA-F]+ headRank (?P<head>-?\d+) nHeads (?P<nheads>\d+).*?nvlsTotalSize (?P<bytes>\d+)")
NCCL_ENV_RE = re.compile(r"(?P<name>NCCL_[A-Z0-9_]+) set by environment to (?P<value>\S*)")
# DeepSpeed's launcher echoes every NCCL variable: "[launch.py:145:main] 0 NCCL_NVLS_ENABLE=0"
DS_NCCL_ENV_RE = re.compile(r"launch\.py:\d+:main\] \d+ (?P<name>NCCL_[A-Z0-9_]+)=(?P<value>\S*)\s*$")

# PyTorch side
TORCH_NCCL_ERROR_RE = re.compile(
    r"NCCL error(?: in: (?P<src>\S+?):(?P<srcline>\d+),|:) (?P<desc>.*?), NCCL version (?P<ver>\d[\w.+-]*)")
OLD_NCCL_ERROR_RE = re.compile(r"NCCL Error (?P<code>\d+): (?P<desc>[^,\n]+)")
NCCL_INIT_TIMEOUT_RE = re.compile(r"NCCL timeout in: (?P<src>\S+)")
EXCEPTION_BEFORE_RE = re.compile(r"(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception))\s*:\s*$")
ENUM_LINE_RE = re.compile(r"^(?P<enum>nccl[A-Z]\w+): ?(?P<interp>.*)$")
LAST_ERROR_RE = re.compile(r"^Last error:\s*(?P<rest>.*)$")
# the texts NCCL's WARNs (and so its "Last error:") carry for a failed CUDA call or a lost peer
NCCL_WARN_TEXT_RE = re.compile(r"^(?:Cuda failure \d+ '[^']*'|Cuda failure '[^']*'|"
                               r"(?:Call to|Failed to) \w+ failed\b)")

WATCHDOG_TIMEOUT_RE = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\((?P<fields>.*?)\) ran for (?P<ran>\d+) milliseconds")
WORK_FIELD_RE = re.compile(r"(\w+(?:\(ms\))?)=([^,]+)")
TIMEOUT_AT_WORK_RE = re.compile(r"Timeout at NCCL work: (?P<seq>-?\d+)")
WORK_STATUS_RE = re.compile(
    r"[Ll]ast enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)")
HEARTBEAT_RE = re.compile(
    r"watchdog got stuck for (?P<secs>\d+) seconds|Heartbeat monitor timed out|due to ProcessGroupNCCL watchdog hang")
PG_RANK_RE = re.compile(r"\[(?:PG (?:ID )?(?P<pg>\d+) (?:PG GUID \S+ )?)?Rank (?P<rank>\d+)\]")
PG_ID_RE = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)\b")

# the "rank : N (local_rank: M)" line of a torchrun ChildFailedError entry (for error-file tracebacks)
CFE_RANK_RE = re.compile(r"^\s*rank\s*: (?P<rank>\d+) \(local_rank: (?P<local>\d+)\)")

# ------------------------------------------------------------ constants

MAX_RECORDS = 5000           # distinct failures kept per file (a WARN flood must not eat memory)
MAX_WARN_TEXTS = 20000       # distinct WARN texts remembered for "Last error:" matching
THREAD_FOLLOW_LINES = 20     # "Failed to CUDA calloc" follows its "Cuda failure" within this many lines
BLOCK_SLACK_LINES = 4        # lines a PyTorch NCCL error block may wait for its next part

RESULT_BY_CODE = {1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                  4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError",
                  7: "ncclInProgress", 8: "ncclTimeout"}
RESULT_BY_DESC = {"unhandled cuda error": "ncclUnhandledCudaError",
                  "unhandled system error": "ncclSystemError",
                  "internal error": "ncclInternalError",
                  "invalid argument": "ncclInvalidArgument",
                  "invalid usage": "ncclInvalidUsage",
                  "remote process exited or there was a network error": "ncclRemoteError",
                  "nccl operation in progress": "ncclInProgress",
                  "timeout": "ncclTimeout"}
KIND_BY_RESULT = {"ncclUnhandledCudaError": K.NCCL_OTHER, "ncclSystemError": K.NCCL_SYSTEM,
                  "ncclInternalError": K.NCCL_INTERNAL, "ncclInvalidArgument": K.NCCL_INVALID_USAGE,
                  "ncclInvalidUsage": K.NCCL_INVALID_USAGE, "ncclRemoteError": K.NCCL_REMOTE,
                  "ncclInProgress": K.NCCL_OTHER, "ncclTimeout": K.NCCL_TIMEOUT}
SITE_TEXT = {"buffer": "a buffer allocation", "stream": "stream creation", "launch": "a kernel launch",
             "host": "a host-memory allocation", "nvls": "NVLS buffer allocation"}
_BYTES_KINDS = (K.NCCL_CUDA_OOM, K.NCCL_HOST_ALLOC, K.NCCL_NVLS)


# older NCCL / driver wordings of a device allocation failure (lower-cased text)
_OLD_OOM_RE = re.compile(r"cudaerrormemoryallocation|cuda_error_out_of_memory|call to cudamalloc failed|"
                         r"cudamalloc\w* failed|cumem(?:create|alloc|map)\w* failed.*(?:2|memory)")


def result_from_desc(desc: str) -> str | None:
    """ncclGetErrorString() text (any version) -> ncclResult_t name."""
    d = desc.split(" (run with", 1)[0].split(" - please", 1)[0].strip().lower()
    return RESULT_BY_DESC.get(d)


def kind_from(result: str | None, text: str) -> tuple[FailureKind, str | None]:
    """Failure kind (and allocation site) from an ncclResult_t name plus the WARN / Last-error text."""
    low = text.lower()
    if "duplicate gpu" in low:
        return K.DUPLICATE_GPU, None
    if "shared memory" in low or "/dev/shm" in low:
        return K.SHM, "host"
    if "host alloc" in low or "failed to malloc" in low:
        return K.NCCL_HOST_ALLOC, "host"
    if "nvlink sharp" in low or "nvls" in low:
        return K.NCCL_NVLS, "nvls"
    if "out of memory" in low or "failed to cuda" in low or _OLD_OOM_RE.search(low):
        return K.NCCL_CUDA_OOM, ("buffer" if "failed to cuda" in low or "cudamalloc" in low else None)
    if ("remote peer" in low or "got completion" in low or "call to recv" in low
            or "socket recv failed" in low or "retry count" in low):
        return K.NCCL_REMOTE, None
    if "mismatched nccl version" in low:
        return K.NCCL_INVALID_USAGE, None
    return KIND_BY_RESULT.get(result or "", K.NCCL_OTHER), None


def site_of(file: str | None, func: str | None = None) -> str | None:
    """What NCCL was doing when the CUDA call failed, from the WARN's source file (nccl.md §1.3)."""
    f = (file or "").lower()
    fn = (func or "").lower()
    if "shm" in f or "hostalloc" in fn or "cumemhost" in fn:
        return "host"
    if "nvls" in f:
        return "nvls"
    if "strongstream" in f:
        return "stream"
    if "enqueue" in f:
        return "launch"
    if "alloc" in f or "p2p" in f or "channel" in f or "proxy" in f or "transport" in f:
        return "buffer"
    return None


def _peer_of(text: str) -> str | None:
    for rx in (PEER_CLOSED_RE, RECV_FAILED_RE, IB_COMPLETION_RE, CONNECT_FAILED_RE):
        m = rx.search(text)
        if m and m.groupdict().get("peer"):
            return m.group("peer")
    return None


def _bytes_of(text: str) -> int | None:
    for rx in (ALLOC_FAILED_RE, HOST_MALLOC_FAILED_RE, NVLS_BIND_RE):
        m = rx.search(text)
        if m:
            return int(m.group("bytes"))
    return None


def _norm(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------- records

PidKey = tuple[str, int]


@dataclass(eq=False)
class _Rec:
    kind: FailureKind
    ref: SourceRef
    order: int
    origin: str                                  # "nccl" (NCCL's own line) | "torch"
    rank: int | None = None
    pidkey: PidKey | None = None
    message: str = ""
    bytes: int | None = None
    op_type: str | None = None
    seq_num: int | None = None
    timeout_ms: int | None = None
    exception: str = ""
    stack: Stack = field(default_factory=Stack)
    device: int | None = None
    site: str | None = None
    nccl_result: str | None = None
    last_error: str | None = None
    last_error_ref: SourceRef | None = None
    peer: str | None = None
    desc: str = ""
    interp: str = ""
    placeholder: Failure | None = None

    def ident(self) -> tuple | None:
        if self.rank is not None:
            return ("r", self.rank)
        if self.pidkey is not None:
            return ("p",) + self.pidkey
        return None

    def disc(self) -> int | None:
        if self.kind is K.NCCL_TIMEOUT:
            return self.seq_num
        if self.kind in _BYTES_KINDS:
            return self.bytes
        return None

    def same_event(self, other: "_Rec") -> bool:
        if self.kind is not other.kind:
            return False
        a, b = self.ident(), other.ident()
        if a is not None and b is not None and a != b:
            return False
        if self.kind is K.NCCL_TIMEOUT:
            if self.seq_num is not None and other.seq_num is not None and self.seq_num != other.seq_num:
                return False
            if self.op_type and other.op_type and self.op_type != other.op_type:
                return False
        elif self.kind in _BYTES_KINDS:
            if self.bytes is not None and other.bytes is not None and self.bytes != other.bytes:
                return False
        return True

    def absorb(self, o: "_Rec") -> None:
        if self.rank is None and o.rank is not None:
            self.rank = o.rank
        if self.pidkey is None and o.pidkey is not None:
            self.pidkey = o.pidkey
        for name in ("bytes", "op_type", "seq_num", "timeout_ms", "device", "site", "nccl_result",
                     "last_error", "last_error_ref", "peer"):
            if getattr(self, name) is None and getattr(o, name) is not None:
                setattr(self, name, getattr(o, name))
        if not self.exception and o.exception:
            self.exception = o.exception
        if not self.stack.frames and o.stack.frames:
            self.stack = o.stack
        if not self.desc and o.desc:
            self.desc = o.desc
        if not self.interp and o.interp:
            self.interp = o.interp

    def text(self) -> str:
        if self.message:
            return self.message
        parts = [f"{self.exception + ': ' if self.exception else ''}NCCL error: {self.desc}".strip()]
        if self.nccl_result:
            parts.append(f"{self.nccl_result}: {self.interp}".strip().rstrip(":"))
        if self.last_error:
            parts.append(f"Last error: {self.last_error}")
        return " | ".join(parts)

    def to_failure(self) -> Failure:
        host, pid = self.pidkey if self.pidkey is not None else (None, None)
        return Failure(kind=self.kind, ref=self.ref, rank=self.rank, message=self.text(), bytes=self.bytes,
                       op_type=self.op_type, seq_num=self.seq_num, timeout_ms=self.timeout_ms,
                       exception=self.exception, stack=self.stack, host=host, pid=pid, device=self.device,
                       site=self.site, nccl_result=self.nccl_result, last_error=self.last_error,
                       last_error_ref=self.last_error_ref, peer=self.peer)


@dataclass(eq=False)
class _Block:
    """An open PyTorch "NCCL error" block waiting for its enum / Last error lines."""

    rec: _Rec
    key: int | None
    stage: str = "enum"                          # enum -> last -> text -> done
    left: int = BLOCK_SLACK_LINES


@dataclass
class _Proc:
    devs: set[int] = field(default_factory=set)
    comms: dict[str, tuple[int, int]] = field(default_factory=dict)    # comm ptr -> (rank, nranks)
    complete: set[str] = field(default_factory=set)
    first_init: SourceRef | None = None
    last_init: SourceRef | None = None


# --------------------------------------------------------------- parser


class NcclParser:
    """Parses NCCL lines and PyTorch ProcessGroupNCCL messages into Failures and ``nccl.*`` Facts."""

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self.rank_hint = rank_hint
        self.tracebacks = tracebacks
        self._recs: list[_Rec] = []
        self._by_key: dict[tuple, _Rec] = {}
        self._thread_last: dict[tuple[str, int, int], tuple[_Rec, int]] = {}
        self._blocks: dict[int | None, _Block] = {}
        self._last_block: _Block | None = None
        self._cfe_rank: int | None = None
        self._procs: dict[PidKey, _Proc] = {}
        self._warn_texts: dict[str, set[PidKey]] = {}
        self._facts_seen: set[tuple] = set()
        self._full_warned = False
        self._shm_refused: set[PidKey] = set()   # processes whose shm_open was refused (a permission, not space)

    # ------------------------------------------------------------ feed

    # lines worth a look (the driver skips all others unless ``busy``)
    SENTINELS = ("NCCL WARN", "NCCL ERROR", "NCCL version", " - Init ", "channels", "NVLS", "set by environment",
                 "NCCL error", "NCCL Error", "NCCL timeout", "WorkNCCL", "NCCL work", "atchdog", "eartbeat",
                 "ast enqueued", "local_rank:", "Last error", "stuck", "NCCL_")
    TRIGGER = literal_trigger(SENTINELS)

    @property
    def busy(self) -> bool:
        return bool(self._blocks) or self._cfe_rank is not None

    def feed(self, ln: LogLine) -> None:
        t = ln.text
        if self._blocks and self._continue_block(ln, t):
            return
        if self._cfe_rank is not None:
            s = t.lstrip()
            if s[:3] in ("---", "===") or (s[:1] == "[" and s.rstrip().endswith("]:")):
                self._cfe_rank = None
        if "local_rank:" in t:
            m = CFE_RANK_RE.match(t)
            if m:
                self._cfe_rank = int(m.group("rank"))
        if "NCCL" in t:
            self._nccl_text(ln, t)
        elif "atchdog" in t or "eartbeat" in t or "ast enqueued" in t:
            self._torch_watchdog(ln, t)

    def _nccl_text(self, ln: LogLine, t: str) -> None:
        if "NCCL version" in t:
            self._version(ln, t)
        if "NCCL WARN" in t or "NCCL INFO" in t or "NCCL TRACE" in t or "NCCL ERROR" in t:
            self._nccl_line(ln, t)
        elif "launch.py" in t and "main]" in t:
            m = DS_NCCL_ENV_RE.search(t)
            if m:
                self._fact_once(f"nccl.env.{m.group('name')}", m.group("value"), ref(self.path, ln))
        elif "NCCL error" in t or "NCCL Error" in t or "NCCL timeout in" in t:
            self._torch_error(ln, t)
        elif "WorkNCCL" in t or "atchdog" in t or "NCCL work" in t or "eartbeat" in t:
            self._torch_watchdog(ln, t)

    # -------------------------------------------------- NCCL's own lines

    def _version(self, ln: LogLine, t: str) -> None:
        m = NCCL_VERSION_RE.search(t)
        if not m:
            return
        r = ref(self.path, ln)
        self._fact_once("nccl.version", m.group("ver"), r)
        if m.group("cuda"):
            self._fact_once("nccl.cuda_version", m.group("cuda"), r)

    def _nccl_line(self, ln: LogLine, t: str) -> None:
        warn = "NCCL WARN" in t or "NCCL ERROR" in t
        if not warn:
            if "NCCL TRACE" in t and "NCCL INFO" not in t:
                return
            if ("Init " not in t and "channels" not in t and "NVLS comm" not in t
                    and "set by environment" not in t):
                return
        m = NCCL_LINE_RE.search(t)
        if m is None:
            return
        pidkey = (m.group("host"), int(m.group("pid")))
        dev = int(m.group("dev"))
        proc = self._procs.get(pidkey)
        if proc is None:
            proc = self._procs[pidkey] = _Proc()
        proc.devs.add(dev)
        msg = m.group("msg").strip()
        if warn:
            self._warn(ln, m, msg, pidkey, dev)
        else:
            self._info(ln, msg, pidkey, proc)

    def _warn(self, ln: LogLine, m: re.Match[str], msg: str, pidkey: PidKey, dev: int) -> None:
        if len(self._warn_texts) < MAX_WARN_TEXTS or _norm(msg) in self._warn_texts:
            self._warn_texts.setdefault(_norm(msg), set()).add(pidkey)
        thread = (pidkey[0], pidkey[1], int(m.group("tid")))
        file, line, func = m.group("file"), m.group("line"), m.group("func")
        loc = f"{file}:{line}" if file else ""
        rank = self._line_rank(ln)
        r = ref(self.path, ln)

        def add(kind: FailureKind, message: str, **kw: object) -> _Rec:
            return self._add(kind, r, rank, pidkey, "nccl", message=message, device=dev, **kw)

        if "Cuda failure" in msg:
            mc = CUDA_FAILURE_RE.search(msg)
            if mc:
                if "out of memory" in mc.group("what") or _OLD_OOM_RE.search(mc.group("what").lower()):
                    site = site_of(file, func)
                    kind = K.NCCL_HOST_ALLOC if site == "host" else K.NCCL_CUDA_OOM
                    what = SITE_TEXT.get(site or "", "an allocation")
                    rec = add(kind, f"NCCL ran out of memory during {what}" + (f" ({loc})" if loc else "") + f": {msg}",
                              site=site, nccl_result="ncclUnhandledCudaError")
                else:
                    rec = add(K.NCCL_OTHER, f"NCCL CUDA call failed" + (f" ({loc})" if loc else "") + f": {msg}",
                              nccl_result="ncclUnhandledCudaError")
                self._thread_last[thread] = (rec, ln.lineno)
                return
        if "Failed to " in msg:
            ma = ALLOC_FAILED_RE.search(msg)
            mh = None if ma else HOST_MALLOC_FAILED_RE.search(msg)
            mn = None if (ma or mh) else NVLS_BIND_RE.search(msg)
            if ma or mh or mn:
                mm = ma or mh or mn
                assert mm is not None
                n = int(mm.group("bytes"))
                if mn:
                    kind, site = K.NCCL_NVLS, "nvls"
                elif mh or (ma and ma.group("how") == "host alloc"):
                    kind, site = K.NCCL_HOST_ALLOC, "host"
                else:
                    kind, site = K.NCCL_CUDA_OOM, (site_of(file, func) or "buffer")
                prev = self._follow(thread, ln.lineno)
                if prev is not None and prev.bytes is None and prev.kind in (K.NCCL_CUDA_OOM, K.NCCL_HOST_ALLOC,
                                                                            K.NCCL_OTHER):
                    # the second WARN of the same allocation ("Cuda failure" first, then this one):
                    # it names the size and whether it was host memory / NVLS
                    prev.bytes = n
                    if kind is not K.NCCL_CUDA_OOM:           # host alloc / NVLS bind: that is what failed
                        prev.kind, prev.site = kind, site
                    elif prev.kind is K.NCCL_CUDA_OOM and prev.site is None:
                        prev.site = site                       # a non-OOM Cuda failure stays NCCL_OTHER
                    prev.message += f"; {msg}"
                    self._by_key.setdefault((prev.kind, prev.ident(), prev.disc()), prev)
                    return
                rec = add(kind, f"NCCL ran out of memory during {SITE_TEXT.get(site, 'an allocation')}"
                          + (f" ({loc})" if loc else "") + f": {msg}", bytes=n, site=site,
                          nccl_result="ncclSystemError" if mh else "ncclUnhandledCudaError")
                self._thread_last[thread] = (rec, ln.lineno)
                return
            if "Failed to execute operation" in msg:
                add(K.NCCL_REMOTE, f"NCCL proxy failed ({loc}): {msg}" if loc else f"NCCL proxy failed: {msg}")
                return
        if "Duplicate GPU" in msg and DUPLICATE_GPU_RE.search(msg):
            add(K.DUPLICATE_GPU, msg, nccl_result="ncclInvalidUsage")
            return
        if "Mismatched NCCL version" in msg:
            add(K.NCCL_INVALID_USAGE, msg, nccl_result="ncclInvalidUsage")
            return
        if "shm_open failed" in msg and ("Permission denied" in msg or "Operation not permitted" in msg):
            # /dev/shm refused the segment (its permissions, a container's mount): nothing ran out (pytorch#37004)
            self._shm_refused.add(pidkey)
            add(K.NCCL_SYSTEM, f"NCCL could not open its shared-memory segment: {msg}", nccl_result="ncclSystemError")
            return
        if "shared memory" in msg or "/dev/shm" in msg:
            if pidkey in self._shm_refused:
                add(K.NCCL_SYSTEM, f"NCCL shared-memory transport refused: {msg}", nccl_result="ncclSystemError")
            else:
                add(K.SHM, f"NCCL shared-memory transport failed: {msg}", site="host", nccl_result="ncclSystemError")
            return
        if ("completion" in msg and "NET/IB" in msg) or "remote peer" in msg or "Call to recv" in msg \
                or "Socket recv failed" in msg or "retry count" in msg or ("onnect to" in msg and "failed" in msg):
            add(K.NCCL_REMOTE, msg, peer=_peer_of(msg),
                nccl_result="ncclRemoteError" if "remote peer" in msg or "Got completion from" in msg else None)
            return
        if "NVLS" in msg or "NVLink SHARP" in msg:
            low = msg.lower()
            if "fail" in low or "error" in low:
                add(K.NCCL_NVLS, msg, site="nvls")

    def _follow(self, thread: tuple[str, int, int], lineno: int) -> _Rec | None:
        got = self._thread_last.get(thread)
        if got is None or lineno - got[1] > THREAD_FOLLOW_LINES:
            return None
        return got[0]

    def _info(self, ln: LogLine, msg: str, pidkey: PidKey, proc: _Proc) -> None:
        if " - Init " in msg:
            m = INIT_RE.search(msg)
            if m:
                r = ref(self.path, ln)
                comm = m.group("comm")
                proc.comms[comm] = (int(m.group("rank")), int(m.group("nranks")))
                if m.group("phase") == "COMPLETE":
                    proc.complete.add(comm)
                if proc.first_init is None:
                    proc.first_init = r
                proc.last_init = r
            return
        if "channels" in msg:
            m = CHANNELS_RE.search(msg)
            if m:
                val = {k: (int(v) if v is not None else None) for k, v in m.groupdict().items()}
                self._fact_once("nccl.channels", val, ref(self.path, ln))
            return
        if "NVLS comm" in msg:
            m = NVLS_SIZE_RE.search(msg)
            if m:
                self._fact_once("nccl.nvls_total_bytes", int(m.group("bytes")), ref(self.path, ln))
            return
        if "set by environment" in msg:
            m = NCCL_ENV_RE.search(msg)
            if m:
                self._fact_once(f"nccl.env.{m.group('name')}", m.group("value"), ref(self.path, ln))

    # ------------------------------------------------- PyTorch messages

    def _torch_error(self, ln: LogLine, t: str) -> None:
        r = ref(self.path, ln)
        m = TORCH_NCCL_ERROR_RE.search(t)
        start = None
        if m:
            desc = m.group("desc")
            result = result_from_desc(desc)
            start = m.start()
        else:
            mo = OLD_NCCL_ERROR_RE.search(t)
            if mo:
                desc = mo.group("desc").strip()
                result = RESULT_BY_CODE.get(int(mo.group("code"))) or result_from_desc(desc)
                start = mo.start()
            else:
                mt = NCCL_INIT_TIMEOUT_RE.search(t)
                if not mt:
                    return
                desc, result, start = "timeout", "ncclTimeout", mt.start()
        me = EXCEPTION_BEFORE_RE.search(t[:start])
        exc = me.group("exc") if me else ""
        rank = self._torch_rank(ln, t)
        stack = Stack()
        if exc and self.tracebacks is not None:
            stack = self.tracebacks.stack_for(self._line_rank(ln))   # the driver's key
        kind, site = kind_from(result, "")
        rec = self._add(kind, r, rank, None, "torch", eager=False, exception=exc, stack=stack,
                        nccl_result=result, site=site)
        rec.desc = desc
        key = ln.rank if ln.rank is not None else ln.local_rank
        blk = _Block(rec, key)
        self._blocks[key] = blk
        self._last_block = blk

    def _continue_block(self, ln: LogLine, t: str) -> bool:
        key = ln.rank if ln.rank is not None else ln.local_rank
        blk = self._blocks.get(key)
        if blk is None and key is None and self._last_block is not None and self._last_block.stage != "done":
            blk = self._last_block
        if blk is None:
            return False
        s = t.strip()
        rec = blk.rec
        if blk.stage == "enum":
            me = ENUM_LINE_RE.match(s)
            if me:
                rec.nccl_result = me.group("enum")
                rec.interp = me.group("interp").strip()
                rec.kind, site = kind_from(rec.nccl_result, "")
                rec.site = rec.site or site
                blk.stage = "last"
                blk.left = BLOCK_SLACK_LINES
                return True
        if blk.stage in ("enum", "last"):
            ml = LAST_ERROR_RE.match(s)
            if ml:
                rest = ml.group("rest").strip()
                if rest:
                    self._set_last_error(blk, rest, ln)
                else:
                    blk.stage = "text"
                return True
            if blk.stage == "last" and NCCL_WARN_TEXT_RE.match(s):
                # the text NCCL's "Last error:" header introduces, the header itself lost (an excerpt, a quote)
                self._set_last_error(blk, s, ln)
                return True
        elif blk.stage == "text" and s:
            self._set_last_error(blk, s, ln)
            return True
        blk.left -= 1
        if blk.left <= 0:
            self._close_block(blk)
        return False

    def _set_last_error(self, blk: _Block, text: str, ln: LogLine) -> None:
        rec = blk.rec
        rec.last_error = text
        rec.last_error_ref = ref(self.path, ln)
        if text != "Unknown NCCL Error":
            kind, site = kind_from(rec.nccl_result, text)
            rec.kind = kind
            if site:
                rec.site = site
            rec.bytes = rec.bytes if rec.bytes is not None else _bytes_of(text)
            rec.peer = rec.peer or _peer_of(text)
        self._close_block(blk)

    def _close_block(self, blk: _Block) -> None:
        blk.stage = "done"
        if self._blocks.get(blk.key) is blk:
            del self._blocks[blk.key]
        if self._last_block is blk:
            self._last_block = None

    def _torch_watchdog(self, ln: LogLine, t: str) -> None:
        if "Watchdog caught" in t:
            m = WATCHDOG_TIMEOUT_RE.search(t)
            if m:
                fields = dict(WORK_FIELD_RE.findall(m.group("fields")))
                seq = _int(fields.get("SeqNum"))
                tmo = _int(fields.get("Timeout(ms)"))
                op = (fields.get("OpType") or "").strip() or None
                self._add(K.NCCL_TIMEOUT, ref(self.path, ln), self._torch_rank(ln, t), None, "torch",
                          message=f"collective timeout: WorkNCCL({m.group('fields')}) ran for {m.group('ran')} ms",
                          seq_num=seq, op_type=op, timeout_ms=tmo)
        elif "Timeout at NCCL work" in t:
            m = TIMEOUT_AT_WORK_RE.search(t)
            if m:
                self._add(K.NCCL_TIMEOUT, ref(self.path, ln), self._torch_rank(ln, t), None, "torch",
                          message=f"collective timeout at NCCL work {m.group('seq')}", seq_num=int(m.group("seq")))
        if "ast enqueued" in t:
            m = WORK_STATUS_RE.search(t)
            if m:
                mp = PG_ID_RE.search(t)
                val = {"rank": self._torch_rank(ln, t), "pg": mp.group("pg") if mp else None,
                       "last_enqueued": int(m.group("enq")), "last_completed": int(m.group("done"))}
                self._fact_once("nccl.work_status", val, ref(self.path, ln))
        if "stuck" in t or "eartbeat" in t or "watchdog hang" in t:
            m = HEARTBEAT_RE.search(t)
            if m:
                secs = m.group("secs")
                self._add(K.NCCL_HEARTBEAT, ref(self.path, ln), self._torch_rank(ln, t), None, "torch",
                          message="ProcessGroupNCCL watchdog hang (heartbeat monitor)"
                          + (f": stuck for {secs} s" if secs else ""),
                          timeout_ms=int(secs) * 1000 if secs else None)

    # ------------------------------------------------------- helpers

    def _line_rank(self, ln: LogLine) -> int | None:
        if ln.rank is not None:
            return ln.rank
        if ln.local_rank is not None:
            return ln.local_rank
        return self.rank_hint

    def _torch_rank(self, ln: LogLine, t: str) -> int | None:
        r = self._line_rank(ln)
        if r is not None:
            return r
        if self._cfe_rank is not None:
            return self._cfe_rank
        m = PG_RANK_RE.search(t)
        if m and m.group("pg") in (None, "0"):
            return int(m.group("rank"))
        return None

    def _fact_once(self, name: str, value: object, r: SourceRef) -> None:
        key = (name, repr(value))
        if key in self._facts_seen:
            return
        self._facts_seen.add(key)
        self.out.fact(name, value, r)

    def _add(self, kind: FailureKind, r: SourceRef, rank: int | None, pidkey: PidKey | None, origin: str,
             *, eager: bool = True, **kw: object) -> _Rec:
        rec = _Rec(kind=kind, ref=r, order=len(self._recs), origin=origin, rank=rank, pidkey=pidkey, **kw)  # type: ignore[arg-type]
        if eager:
            key = (kind, rec.ident(), rec.disc())
            old = self._by_key.get(key)
            if old is not None:
                old.absorb(rec)
                return old
        if len(self._recs) >= MAX_RECORDS:
            if not self._full_warned:
                self._full_warned = True
                self.out.warn(self.path, f"more than {MAX_RECORDS} distinct NCCL failures; later ones ignored",
                              r.line)
            return rec
        rec.placeholder = Failure(kind, r, rank=rank)
        self.out.failures.append(rec.placeholder)
        self._recs.append(rec)
        if eager:
            self._by_key[(kind, rec.ident(), rec.disc())] = rec
        return rec

    # ------------------------------------------------------------ finish

    def finish(self) -> None:
        for blk in list(self._blocks.values()):
            self._close_block(blk)
        pid_rank = self._emit_init_facts()
        if self._recs:
            self._resolve_ranks(pid_rank)
            self._commit(self._dedupe())

    def _emit_init_facts(self) -> dict[PidKey, int]:
        procs = {pk: p for pk, p in self._procs.items() if p.comms}
        pid_rank: dict[PidKey, int] = {}
        if not procs:
            return pid_rank
        best_pk = max(procs, key=lambda pk: len(procs[pk].complete or procs[pk].comms))
        best = procs[best_pk]
        assert best.last_init is not None
        self.out.fact("nccl.communicators", len(best.complete or best.comms), best.last_init)
        nranks = max(n for p in procs.values() for _, n in p.comms.values())
        first = min((p.first_init for p in procs.values() if p.first_init is not None),
                    key=lambda r: r.line or 0)
        self.out.fact("nccl.nranks", nranks, first)
        for pk, p in procs.items():
            rank, _ = max(p.comms.values(), key=lambda rn: rn[1])
            pid_rank[pk] = rank
        self.out.fact("nccl.rank_map", {f"{h}:{pid}": r for (h, pid), r in sorted(pid_rank.items())}, first)
        return pid_rank

    def _resolve_ranks(self, pid_rank: dict[PidKey, int]) -> None:
        # a PyTorch "Last error:" names the process's last WARN: if only one process printed it, it is that rank
        for rec in self._recs:
            if rec.origin == "torch" and rec.rank is not None and rec.last_error:
                pks = self._warn_texts.get(_norm(rec.last_error))
                if pks and len(pks) == 1:
                    pk = next(iter(pks))
                    if pk not in pid_rank and rec.rank not in {r for p, r in pid_rank.items() if p[0] == pk[0]}:
                        pid_rank[pk] = rec.rank
        unresolved = {rec.pidkey for rec in self._recs
                      if rec.rank is None and rec.pidkey is not None and rec.pidkey not in pid_rank}
        if unresolved:
            dev_of = self._device_ranks(pid_rank)
            for pk in unresolved:
                if pk in dev_of:
                    pid_rank[pk] = dev_of[pk]
        for rec in self._recs:
            if rec.rank is None and rec.pidkey is not None and rec.pidkey in pid_rank:
                rec.rank = pid_rank[rec.pidkey]

    def _device_ranks(self, known: dict[PidKey, int]) -> dict[PidKey, int]:
        """[dev] as the rank: only on one host, with one distinct device per process, and consistent
        with every mapping already known (otherwise nothing)."""
        procs = self._procs
        if len(procs) < 2 or len({h for h, _ in procs}) != 1:
            return {}
        if any(len(p.devs) != 1 for p in procs.values()):
            return {}
        dev_of = {pk: next(iter(p.devs)) for pk, p in procs.items()}
        if len(set(dev_of.values())) != len(dev_of):
            return {}
        if any(pk in dev_of and dev_of[pk] != r for pk, r in known.items()):
            return {}
        return dev_of

    def _dedupe(self) -> dict[int, Failure | None]:
        kept: dict[FailureKind, list[_Rec]] = {}
        final: dict[int, Failure | None] = {}
        for rec in self._recs:
            bucket = kept.setdefault(rec.kind, [])
            for k in bucket:
                if k.same_event(rec):
                    k.absorb(rec)
                    final[id(rec.placeholder)] = None
                    break
            else:
                bucket.append(rec)
        for bucket in kept.values():
            for k in bucket:
                final[id(k.placeholder)] = k.to_failure()
        return final

    def _commit(self, final: dict[int, Failure | None]) -> None:
        new: list[Failure] = []
        for f in self.out.failures:
            key = id(f)
            if key in final:
                g = final[key]
                if g is not None:
                    new.append(g)
            else:
                new.append(f)
        self.out.failures[:] = new


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    try:
        return int(v.strip())
    except ValueError:
        return None
