"""Out-of-memory messages of every torch generation (reference/pytorch.md §3).

- ≥2.2 / 2.1: "CUDA out of memory. Tried to allocate X. GPU N has a total
  capac(i)ty of T of which F is free. [Process P has X memory in use.]*
  [Including non-PyTorch memory, this process has X memory in use.]
  [X allowed; ]Of the allocated memory A is allocated by PyTorch, [with X
  allocated in private pools (e.g., CUDA Graphs), ]and R is reserved by
  PyTorch but unallocated."
- ≤2.0: "Tried to allocate X (GPU N; T total capacity; A already allocated;
  F free; [C allowed; ]R reserved in total by PyTorch)" (oldest: "R cached")
- ROCm "HIP out of memory" in either shape; ``backend:cudaMallocAsync``'s
  multi-line "would exceed allowed memory" block; raw ``CUDA error: out of
  memory``; cuBLAS/cuDNN/cuSOLVER/cuFFT allocation failures; the host
  ``DefaultCPUAllocator``, numpy's ``Unable to allocate X for an array`` and Python's
  ``MemoryError`` (host memory); Apple MPS (with its allocated / other / max-allowed figures).

Clauses are matched one by one, so their order and presence may vary.
Other runtimes' messages (TensorFlow, llama.cpp, TensorRT, ONNX Runtime,
PaddlePaddle, XLA, OpenCV) are read by parsers/runtime_ooms.py; this parser
keeps the events and completes them from the lines after them.
"Tried to allocate" is the segment-rounded size, kept as printed.
"""

from __future__ import annotations

import dataclasses
import re

from ..model import LOST_FRAME, Frame, OomEvent, OomKind, Stack
from ..sources import LogLine
from ..units import parse_size, parse_size_or_none
from . import runtime_ooms
from .base import EvidenceBuilder, TracebackTracker, line_rank, literal_trigger, match_frame, ref

_SZ = r"\d+(?:\.\d+)?\s?(?:bytes|[KMGTP]iB|[KMGTP]B|B)"

TRIGGERS = ("out of memory", "OutOfMemory", "Tried to allocate", "ALLOC_FAILED", "NOT_ENOUGH_WORKSPACE", "MemoryError",
            "Unable to allocate", "can't allocate memory", "not enough memory: you tried", "would exceed allowed memory",
            "Allocation on device", "instance of 'std::bad_alloc'")
TRIGGERS = tuple(dict.fromkeys(TRIGGERS + runtime_ooms.TRIGGERS))      # and other runtimes' (parsers/runtime_ooms.py)

# cudaMallocAsync's message cut to its first words, as ComfyUI shows it ("Error occurred when executing
# CogVideoDecode:" / "Allocation on device"), alone on its line or after the exception name
ALLOC_ON_DEVICE = re.compile(r"^(?:(?:torch\.(?:cuda\.)?)?OutOfMemoryError: )?Allocation on device(?: (?P<dev>\d+))?\s*$")
REQUEST = re.compile(rf"Tried to allocate (?:(?P<req>{_SZ})|(?P<eb>more than 1EB memory))")
NEW_CAPACITY = re.compile(rf"GPU ?(?P<dev>\d*) has a total capac(?P<typo>i?)ty of (?P<cap>{_SZ})"
                          rf"(?: of which (?P<free>{_SZ}) is free)?")
SELF_PROC = re.compile(rf"Including non-PyTorch memory, this process has (?P<sz>{_SZ}) memory in use")
OTHER_PROC = re.compile(rf"Process (?P<pid>\d+) has (?P<sz>{_SZ}) memory in use")
ALLOWED = re.compile(rf"(?P<sz>{_SZ}) allowed;")
NEW_ALLOCATED = re.compile(rf"Of the allocated memory (?P<sz>{_SZ}) is allocated by PyTorch")
PRIVATE = re.compile(rf"with (?P<sz>{_SZ}) allocated in private pools")
NEW_RESERVED_UNALLOC = re.compile(rf"and (?P<sz>{_SZ}) is reserved by PyTorch but unallocated")
OLD_BLOCK = re.compile(
    rf"\((?:GPU|NPU|XPU|MLU) (?P<dev>\d+); (?P<cap>{_SZ}) total capacity; (?P<alloc>{_SZ}) already allocated; "
    rf"(?P<free>{_SZ}) free;(?: (?P<allowed>{_SZ}) allowed;)? (?P<res>{_SZ}) (?:reserved in total by PyTorch|cached)")
# the old block's fields one by one, for a message cut or wrapped part-way through
OLD_FIELDS = {k: re.compile(rf"(?P<sz>{_SZ}) {v}") for k, v in (
    ("cap", "total capacity"), ("alloc", "already allocated"), ("free", r"free[;)]"),
    ("res", r"(?:reserved in total|cached)"))}
EXC_PREFIX = re.compile(r"^\s*(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception))\s*:\s")
ASYNC_FIELD = re.compile(rf"^\s*(?P<key>Currently allocated|Requested|Device limit|Free \(according to CUDA\)|"
                         rf"PyTorch limit \(set by user-supplied memory fraction\))?\s*:\s*(?P<sz>{_SZ})\s*$")
CUDA_ERROR_OOM = re.compile(r"CUDA error: out of memory")
LIB_ALLOC = re.compile(r"(?P<lib>CUBLAS|CUDNN|CUSOLVER|CUFFT)_(?:STATUS_)?(?:ALLOC_FAILED|NOT_ENOUGH_WORKSPACE)")
HOST_ALLOC = re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate "
                        r"(?P<n>\d+) bytes")
MPS = re.compile(r"MPS backend out of memory")
# Apple MPS: "MPS backend out of memory (MPS allocated: 6.04 GB, other allocations: 1.04 GB, max allowed: 6.77 GB).
# Tried to allocate 459.07 MB on private pool."
MPS_FIGURES = re.compile(rf"MPS allocated: (?P<alloc>{_SZ}), other allocations: (?P<other>{_SZ}), max allowed: "
                         rf"(?P<max>{_SZ})\)\.? Tried to allocate (?P<req>{_SZ})")
# host memory through Python / numpy: "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 26.3 GiB for an
# array with shape (1000000, 1, 4, 84, 84) and data type uint8", or a bare "MemoryError" (exactly that class)
NUMPY_ALLOC = re.compile(r"Unable to allocate (?P<num>\d+(?:\.\d*)?) ?(?P<unit>[KMGTPE]i?B) for an array with shape")
_GPU_WORDS = re.compile(r"cuda|CUDA|GPU|HIP|hipError|device memory")
# (a logger's bracketed prefixes may come first: "[00000600] [01-24-2023 23:20:26] MemoryError", n00mkrad/
# text2image-gui#65; torch 1.x translates a C++ std::bad_alloc as "MemoryError -- std::bad_alloc", snap-stanford/
# ogb#404), and the C++ runtime's own abort on a failed host allocation: "terminate called after throwing an
# instance of 'std::bad_alloc'"
PY_MEMORY_ERROR = re.compile(r"^\s*(?:\[[^\]]{1,40}\]\s*)*(?:[A-Za-z_]\w*\.)*_?(?:Array)?MemoryError\b(?:\s*$|:|\s+--\s)"
                             r"|terminate called after throwing an instance of 'std::bad_alloc'")


# where an OOM message starts; two ranks printing at once glue theirs onto one line
_MESSAGE_START = re.compile(r"(?:[\w.]*OutOfMemoryError: )?(?:CUDA|HIP) out of memory\. Tried to allocate")


def _glued_messages(text: str) -> list[str]:
    """The OOM messages of one line: each clause (``Process N has …``) must be read with its own message."""
    starts = [m.start() for m in _MESSAGE_START.finditer(text)]
    if len(starts) < 2:
        return [text]
    cuts = [0, *starts[1:], len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:])]


# A terminal that wraps a long line at a fixed width and pads each row to it, pasted back as one line: "... is
# free. Includi                                                ng non-PyTorch memory ...".  A run of 8+ spaces is
# the wrap: inside a word it joins (no space), between words it is one space; which of the two a run is can only
# be told by the figures each reading yields, so both are read and the one with more figures is kept.
_PAD = re.compile(r" {8,}")


def _unpad(text: str, join_words: bool) -> str:
    body = text.lstrip(" ")
    lead = text[:len(text) - len(body)]
    if not join_words:
        return lead + _PAD.sub(" ", body)
    return lead + _PAD.sub(lambda m: "" if m.start() > 0 and body[m.start() - 1].isalpha()
                           and body[m.end():m.end() + 1].islower() else " ", body)


# a message pasted lowercased (an issue title, a logger that lowers its text): "cuda out of memory. tried to
# allocate 78.88 mib (gpu 0; 3.95 gib total capacity; ...; 557.82 mib cached)" is read in PyTorch's own casing
_LOWER_WORDS = ((re.compile(r"\b(cuda|hip) out of memory"), lambda m: m.group(1).upper() + " out of memory"),
                (re.compile(r"\btried to allocate"), "Tried to allocate"),
                (re.compile(r"\bgpu ?(\d*)(?= has a total|;)"), lambda m: "GPU " + m.group(1) if m.group(1) else "GPU"),
                (re.compile(r"(\d) ?([kmgtp])ib\b"), lambda m: f"{m.group(1)} {m.group(2).upper()}iB"),
                (re.compile(r"\bpytorch\b"), "PyTorch"),
                (re.compile(r"\b(?:torch\.(?:cuda\.)?)?outofmemoryerror\b"), "torch.OutOfMemoryError"),
                (re.compile(r"\bof the allocated memory"), "Of the allocated memory"),
                (re.compile(r"\bincluding non-PyTorch"), "Including non-PyTorch"),
                (re.compile(r"\bprocess (\d+) has"), r"Process \1 has"))
_LOWER_MESSAGE = re.compile(r"\b(?:cuda|hip) out of memory\. tried to allocate")


def _recase(text: str) -> str:
    for rx, to in _LOWER_WORDS:
        text = rx.sub(to, text)
    return text


def _size(m: re.Match[str] | None, group: str = "sz") -> int | None:
    return parse_size_or_none(m.group(group)) if m else None


def _request_size(text: str) -> int | None:
    """"Tried to allocate" as printed.  Unlike a process reading, an exabyte-scale request is not NVML garbage but
    a corrupt size the allocator really was asked for (older torch prints "6056239117.41 GiB"; 2.x "more than
    1EB memory"): kept, capped so it stays a signed 64-bit integer."""
    try:
        return min(parse_size(text), 2**63 - 1)
    except ValueError:
        return None


class TorchOomParser:
    """Finds OOM messages; attaches the traceback that led to each."""

    SENTINELS = TRIGGERS
    TRIGGER = literal_trigger(TRIGGERS)

    @property
    def busy(self) -> bool:
        return bool(self._async) or bool(self._wrapped)

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self.rank_hint = rank_hint
        self.tb = tracebacks or TracebackTracker()
        self._seen: set[tuple[int | None, str]] = set()
        self._async: dict[int | None, dict] = {}      # rank -> pending cudaMallocAsync block
        # rank -> a message cut by a line wrap: [index in out.ooms, text so far, lines left to look at]
        self._wrapped: dict[int | None, list] = {}

    def feed(self, ln: LogLine) -> None:
        text = ln.text
        rank = line_rank(ln, self.rank_hint)
        if self._async:
            pending = self._async.get(rank)
            if pending is not None and self._feed_async(pending, ln, rank):
                return
        if self._wrapped and self._continue_wrapped(ln, rank):
            return
        if not any(t in text for t in TRIGGERS):
            return
        if ("{{node " in text or "[[node " in text) and "OOM when" not in text:
            self._tf_node(text, ln)
            return
        if "would exceed allowed memory" in text:
            self._async[rank] = {"ln": ln, "fields": {}, "last_key": None, "n": 0}
            return
        if "Allocation on device" in text:
            if (m := ALLOC_ON_DEVICE.match(text.strip())) is not None and (rank, "alloc-on-device") not in self._seen:
                self._seen.add((rank, "alloc-on-device"))
                self.out.ooms.append(OomEvent(
                    OomKind.MALLOC_ASYNC, ref(self.path, ln), rank, int(m.group("dev")) if m.group("dev") else None,
                    message_format="malloc_async", exception="OutOfMemoryError", stack=self._stack(rank),
                    truncated=True))
            return
        if "tried to allocate" in text and "Tried to allocate" not in text and _LOWER_MESSAGE.search(text):
            text = _recase(text)
        if "        " in text.strip() or "**" in text:
            text = self._best_reading(text, ln, rank)
        for part in _glued_messages(text):
            event = self._parse_line(part, ln, rank)
            if event is None:
                continue
            key = (rank, part.strip()[:300])
            if key in self._seen:
                continue
            self._seen.add(key)
            so_far = part.rstrip()
            if self._completes_cut_message(event, ln):
                event, so_far = self.out.ooms[-1], self.out.ooms[-1].ref.text
            else:
                self.out.ooms.append(event)
            if event.truncated and event.kind in (OomKind.CACHING_ALLOCATOR, OomKind.HIP) and (
                    event.requested_bytes or so_far.endswith("Tried to allocate")):
                # (a wrap right after "Tried to allocate": the size starts the next line)
                self._wrapped[rank] = [len(self.out.ooms) - 1, so_far, 6]

    def _best_reading(self, text: str, ln: LogLine, rank: int | None) -> str:
        """Of the line as pasted, its two un-padded readings and the line without markdown's bold markers (a forum
        post: "Tried to allocate 1**72.00 MiB"), the one whose OOM message carries most figures."""
        best, score = text, -1
        bare = text.replace("**", "")
        for cand in (text, _unpad(text, True), _unpad(text, False), bare):
            ev = self._parse_line(cand, ln, rank)
            n = _figure_count(ev) if ev is not None else -1
            if n > score:
                best, score = cand, n
        return best

    # a message wrapped by a terminal, a forum or a logger: its clauses continue on the next lines
    _CONTINUATION = re.compile(r"total capac|already allocated|free;|reserved in total|in total by PyTorch|cached\)|"
                               r"allocated by PyTorch|^\s*unallocated\b|"
                               r"reserved by PyTorch|memory in use|allowed;|^\s*\((?:GPU|NPU|XPU) \d+;|^\s*(?:GPU \d+ has|"
                               r"Of the allocated|Including non-PyTorch|[\d.]+\s?[KMGT]i?B\b)")

    def _continue_wrapped(self, ln: LogLine, rank: int | None) -> bool:
        pending = self._wrapped.get(rank)
        if pending is None and ln.rank is None and ln.local_rank is None and len(self._wrapped) == 1:
            # the terminal's wrap carries no "[rankN]:" prefix: the one message being wrapped is this line's
            rank, pending = next(iter(self._wrapped.items()))
        if pending is None:
            return False
        idx, so_far, left = pending
        if "Tried to allocate" in ln.text:
            del self._wrapped[rank]
            return False
        old = self.out.ooms[idx]
        text = ln.text.strip()
        continues = self._CONTINUATION.search(ln.text) is not None
        sep = " "
        event = self._parse_line(so_far + sep + text, ln, rank) if continues else None
        if event is None or _figure_count(event) <= _figure_count(old):
            # a terminal that wraps at a fixed width cuts words ("has a to" / "tal capacity of 23.67 GiB"):
            # the line belongs to the message when, joined without a space, it adds the message's figures
            cut = self._parse_line(so_far + text, ln, rank)
            if cut is not None and old.requested_bytes in (None, cut.requested_bytes) and \
                    _figure_count(cut) > _figure_count(old):
                event, sep, continues = cut, "", True
        if not continues:
            del self._wrapped[rank]
            return False
        joined = so_far + sep + text
        if event is not None and old.requested_bytes in (None, event.requested_bytes):
            # the quoted evidence is the whole message, its continuation lines joined (still cited at its first line)
            quoted = ref(self.path, ln, old.ref.text + sep + ln.raw.strip())
            self.out.ooms[idx] = dataclasses.replace(
                event, ref=dataclasses.replace(old.ref, text=quoted.text),
                stack=old.stack if old.stack.frames else event.stack, exception=old.exception or event.exception)
            if event.truncated and left > 1:
                self._wrapped[rank] = [idx, joined, left - 1]
            else:
                del self._wrapped[rank]
        else:
            del self._wrapped[rank]
        return True

    def _completes_cut_message(self, event: OomEvent, ln: LogLine) -> bool:
        """A message wrapped right after "CUDA out of memory." (a forum, a logger, a terminal): its figures start
        the next line ("Tried to allocate 1.02 GiB. GPU 0 has …").  They complete the event read a line or two
        above, which keeps its line, exception and stack; True when they did."""
        last = self.out.ooms[-1] if self.out.ooms else None
        if last is None or last.message_format != "truncated" or last.requested_bytes is not None \
                or last.ref.source != self.path or not 0 < ln.lineno - last.ref.line <= 2 \
                or event.requested_bytes is None or "out of memory" in event.ref.text \
                or not ln.text.lstrip().startswith("Tried to allocate") or last.rank != event.rank:
            return False
        self.out.ooms[-1] = dataclasses.replace(
            event, ref=dataclasses.replace(last.ref, text=f"{last.ref.text} {ln.raw.strip()}"),
            stack=last.stack if last.stack.frames else event.stack, exception=last.exception or event.exception,
            kind=OomKind.HIP if last.kind is OomKind.HIP else event.kind)
        return True

    def finish(self) -> None:
        for rank in list(self._async):
            self._emit_async(self._async.pop(rank), rank)

    # ------------------------------------------------------------ one line

    def _parse_line(self, text: str, ln: LogLine, rank: int | None) -> OomEvent | None:
        m_exc = EXC_PREFIX.match(text)
        exc = m_exc.group("exc") if m_exc else ""
        stack = self._stack(rank)
        if not stack.frames:
            stack = statement_before(ln)
        if MPS.search(text):
            m = MPS_FIGURES.search(text)
            if m is None:
                return OomEvent(OomKind.OTHER, ref(self.path, ln), rank, exception=exc, message_format="MPS",
                                stack=stack, truncated=True)
            alloc, other, most = (parse_size_or_none(m.group(k)) for k in ("alloc", "other", "max"))
            free = max(0, most - alloc - other) if None not in (alloc, other, most) else None
            # "max allowed" is the limit the process may use (the high-watermark ratio of unified memory)
            return OomEvent(OomKind.OTHER, ref(self.path, ln), rank, requested_bytes=parse_size_or_none(m.group("req")),
                            capacity_bytes=most, free_bytes=free, allocated_bytes=alloc,
                            process_in_use_bytes=(alloc + other) if alloc is not None and other is not None else None,
                            exception=exc, message_format="MPS", stack=stack)
        m_req = REQUEST.search(text)
        if m_req and ("out of memory" in text or "OutOfMemory" in text or "total capacity" in text
                      or "total capac" in text):
            kind = OomKind.HIP if "HIP out of memory" in text else OomKind.CACHING_ALLOCATOR
            return self._caching(text, ln, rank, kind, exc, stack, m_req)
        m = HOST_ALLOC.search(text)
        if m:
            return OomEvent(OomKind.HOST, ref(self.path, ln), rank, None, requested_bytes=int(m.group("n")),
                            exception=exc or "RuntimeError", message_format="DefaultCPUAllocator", stack=stack)
        ggml = self._ggml(text, ln, rank, exc)
        if ggml is not None:
            return ggml
        trt = runtime_ooms.tensorrt_event(text, ref(self.path, ln), rank, exc)
        if trt is not None:
            return self._tensorrt(trt, ln)
        tf = (runtime_ooms.tensorflow_event(text, ref(self.path, ln), rank, exc)
              or runtime_ooms.tf_device_alloc_event(text, ref(self.path, ln), rank, exc))
        if tf is not None:
            return tf
        m = LIB_ALLOC.search(text)
        if m:
            kind = OomKind.CUBLAS if m.group("lib") == "CUBLAS" else (
                OomKind.CUDNN if m.group("lib") == "CUDNN" else OomKind.OTHER)
            return OomEvent(kind, ref(self.path, ln), rank, exception=exc, message_format=m.group(0), stack=stack)
        if CUDA_ERROR_OOM.search(text):
            return OomEvent(OomKind.CUDA_ERROR, ref(self.path, ln), rank, exception=exc,
                            message_format="CUDA error: out of memory", stack=stack)
        other = runtime_ooms.other_runtime_event(text, ref(self.path, ln), rank, exc, stack)
        if other is not None:
            return other
        m = NUMPY_ALLOC.search(text)
        if m:
            return OomEvent(OomKind.HOST, ref(self.path, ln), rank, None,
                            requested_bytes=parse_size_or_none(f"{float(m.group('num'))} {m.group('unit')}"),
                            exception=exc or "MemoryError", message_format="numpy", stack=stack)
        if PY_MEMORY_ERROR.search(text):
            # a CUDA extension's std::bad_alloc surfaces as MemoryError too ("MemoryError: std::bad_alloc:
            # cudaErrorMemoryAllocation: out of memory"): that one is the GPU's
            gpu = _GPU_WORDS.search(text) is not None
            return OomEvent(OomKind.OTHER if gpu else OomKind.HOST, ref(self.path, ln), rank, None,
                            exception=exc or "MemoryError", message_format="MemoryError", stack=stack, truncated=True)
        if "CUDA out of memory" in text or "HIP out of memory" in text:
            # e.g. a message cut before "Tried to allocate"
            kind = OomKind.HIP if "HIP" in text else OomKind.CACHING_ALLOCATOR
            return OomEvent(kind, ref(self.path, ln), rank, exception=exc, truncated=True, stack=stack,
                            message_format="truncated")
        return None

    def _tf_node(self, text: str, ln: LogLine) -> bool:
        """The graph node a TensorFlow OOM names on the line after it: that event's frame (the node path says
        which layer, and whether it is a gradient)."""
        node = runtime_ooms.tf_node_frame(text, ln.lineno)
        last = self._just_before(ln, "tensorflow")
        if node is None or last is None:
            return False
        self.out.ooms[-1] = dataclasses.replace(last, stack=Stack((*last.stack.frames, node)))
        return True

    def _tensorrt(self, event: OomEvent, ln: LogLine) -> OomEvent | None:
        """``event``, or None when it only completes the one a few lines above (TensorRT prints the error two or
        three times, and the size in a warning after it)."""
        last = self._just_before(ln, "tensorrt")
        if last is None:
            return event
        if event.requested_bytes is not None and last.requested_bytes is None:
            self.out.ooms[-1] = dataclasses.replace(last, requested_bytes=event.requested_bytes)
        return None

    def _just_before(self, ln: LogLine, fmt: str) -> OomEvent | None:
        """The last OOM read, when it is another runtime's (``fmt``) message a few lines above ``ln`` in this
        file: the lines after such a message complete it (its graph node, the buffer it was for)."""
        last = self.out.ooms[-1] if self.out.ooms else None
        if last is None or last.message_format != fmt or last.ref.source != self.path \
                or not 0 < ln.lineno - last.ref.line <= 3:
            return None
        return last

    def _ggml(self, text: str, ln: LogLine, rank: int | None, exc: str) -> OomEvent | None:
        """A llama.cpp / ggml allocation failure; None when the line is not one.  The buffer's own line
        (``failed to allocate CUDA0 buffer``) after the cudaMalloc line of the same size replaces it: one
        failure, and the later line names what the buffer was for."""
        event = runtime_ooms.ggml_event(text, ref(self.path, ln), rank, exc)
        if event is None:
            return None
        last = self._just_before(ln, "ggml")
        req = event.requested_bytes
        if last is not None and req is not None and last.requested_bytes is not None \
                and abs(last.requested_bytes - req) <= 2**20:
            self.out.ooms[-1] = dataclasses.replace(last, stack=event.stack, kind=event.kind)
            return None
        return event

    def _caching(self, text: str, ln: LogLine, rank: int | None, kind: OomKind, exc: str, stack: Stack,
                 m_req: re.Match[str]) -> OomEvent:
        requested = _request_size(m_req.group("req")) if m_req.group("req") else 2**60
        old = OLD_BLOCK.search(text)
        others = tuple((int(m.group("pid")), b) for m in OTHER_PROC.finditer(text)
                       if (b := _size(m)) is not None)
        partial = None
        if old is None and ("(GPU" in text or "PU " in text) and "already allocated" in text:
            partial = {k: _size(r.search(text)) for k, r in OLD_FIELDS.items()}
        if old or partial:
            get = (lambda k: parse_size_or_none(old.group(k))) if old else partial.get
            alloc = get("alloc")
            res = get("res")
            if res is not None and alloc is not None and res < alloc and "cached" in text:
                res = alloc + res        # 2018-19 messages: "cached" was the cached free memory, not the total
            dev = re.search(r"\((?:GPU|NPU|XPU|MLU) (\d+)", text)
            return OomEvent(
                kind, ref(self.path, ln), rank, int(dev.group(1)) if dev else None, requested_bytes=requested,
                capacity_bytes=get("cap"), free_bytes=get("free"),
                allowed_bytes=parse_size_or_none(old.group("allowed")) if old and old.group("allowed") else None,
                allocated_bytes=alloc, reserved_bytes=res,
                reserved_unallocated_bytes=(res - alloc) if res is not None and alloc is not None else None,
                other_processes=others, message_format="<=2.0", exception=exc, stack=stack,
                truncated=old is None and (res is None or alloc is None))
        cap = NEW_CAPACITY.search(text)
        alloc = _size(NEW_ALLOCATED.search(text))
        ru = _size(NEW_RESERVED_UNALLOC.search(text))
        private = _size(PRIVATE.search(text))
        reserved = alloc + ru if alloc is not None and ru is not None else None
        fmt = ""
        if cap:
            fmt = "2.1" if cap.group("typo") == "" or "max_split_size_mb to avoid" in text else ">=2.2"
        truncated = cap is None or alloc is None or ru is None
        return OomEvent(
            kind, ref(self.path, ln), rank, int(cap.group("dev")) if cap and cap.group("dev") else None,
            requested_bytes=requested,
            capacity_bytes=_size(cap, "cap"), free_bytes=_size(cap, "free") if cap and cap.group("free") else None,
            allowed_bytes=_size(ALLOWED.search(text)), allocated_bytes=alloc, reserved_bytes=reserved,
            reserved_unallocated_bytes=ru, process_in_use_bytes=_size(SELF_PROC.search(text)),
            other_processes=others, private_pool_bytes=private, message_format=fmt or "truncated",
            exception=exc, stack=stack, truncated=truncated)

    # ------------------------------------------------------- cudaMallocAsync

    def _feed_async(self, pending: dict, ln: LogLine, rank: int | None) -> bool:
        m = ASYNC_FIELD.match(ln.text)
        if m is None:
            stripped = ln.text.strip()
            if stripped.startswith("PyTorch limit"):
                pending["last_key"] = "PyTorch limit"
                return True
            self._emit_async(self._async.pop(rank), rank)
            return False
        key = m.group("key") or pending["last_key"] or ""
        pending["fields"][key.split(" (")[0]] = parse_size_or_none(m.group("sz"))
        pending["n"] += 1
        if pending["n"] >= 6:
            self._emit_async(self._async.pop(rank), rank)
        return True

    def _emit_async(self, pending: dict, rank: int | None) -> None:
        f = pending["fields"]
        ln: LogLine = pending["ln"]
        m_dev = re.search(r"Allocation on device (\d+)", ln.text)
        m_exc = EXC_PREFIX.match(ln.text)
        exc = m_exc.group("exc") if m_exc else ""
        limit = f.get("PyTorch limit")
        key = (rank, ln.text.strip()[:300] + str(sorted(f.items())))
        if key in self._seen:
            return
        self._seen.add(key)
        self.out.ooms.append(OomEvent(
            OomKind.MALLOC_ASYNC, ref(self.path, ln), rank, int(m_dev.group(1)) if m_dev else None,
            requested_bytes=f.get("Requested"), capacity_bytes=f.get("Device limit"),
            free_bytes=f.get("Free"), allowed_bytes=limit, allocated_bytes=f.get("Currently allocated"),
            message_format="malloc_async", exception=exc, stack=self._stack(rank)))

    def _stack(self, rank: int | None) -> Stack:
        return self.tb.stack_for(rank)


# A Python statement as a traceback quotes it: an assignment, a call, a return/raise ("denom =
# exp_avg_sq.sqrt().add_(group['eps'])", "return F.linear(x, w)"), not a log line ("INFO: ...", "Epoch 3: ...")
_STATEMENT = re.compile(r"^(?:return |raise |yield )?[A-Za-z_][\w.]*(?:\[[^\]]*\])*"
                        r"(?:\s*,\s*[A-Za-z_][\w.]*)*\s*(?:[-+*/@]?=(?!=)\s*\S|\()")


def statement_before(ln: LogLine) -> Stack:
    """The failing statement of an excerpt that kept only the traceback's last source line above the message
    (the frame's header lost): one frame with that code, else no frames."""
    prev = ln.prev.strip().strip("`").strip()
    if not prev or len(prev) > 300 or match_frame(prev) is not None or not _STATEMENT.match(prev):
        return Stack()
    return Stack((Frame("", 0, LOST_FRAME, prev[:200]),))


def _figure_count(e: OomEvent) -> int:
    """How many of the message's figures an event carries (a continuation line must add some)."""
    return sum(v is not None for v in (e.capacity_bytes, e.free_bytes, e.allowed_bytes, e.allocated_bytes,
                                       e.reserved_bytes, e.reserved_unallocated_bytes, e.process_in_use_bytes))
