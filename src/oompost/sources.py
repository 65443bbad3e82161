"""Opening inputs: gzip by magic bytes, content sniffing, streamed lines with
launcher prefixes (torchrun, DeepSpeed/pdsh, Slurm, Ray) stripped off.

Inputs are recognised by what they contain, never by their names.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from collections.abc import Callable, Generator, Iterator, Sequence
from functools import lru_cache
from itertools import repeat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from .errors import InputError
from .model import InputKind

SNIFF_BYTES = 64 * 1024
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_LINE_CHARS = 20_000          # longer lines are cut (a progress bar without newlines...)

OUTPUT_KIND = "oompost_output"    # our own reports and expected.json: never inputs


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a file for reading, transparently gunzipping it (by magic bytes)."""
    p = Path(path)
    try:
        f: IO[bytes] = open(p, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    head = f.read(2)
    f.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


def read_some(f: IO[bytes], n: int) -> tuple[bytes, str | None]:
    """Up to ``n`` bytes, and why reading stopped early (``None`` if it did
    not).  A truncated or corrupt gzip stream still gives what decompressed
    before the damage: ``GzipFile.read`` would throw that away."""
    if not isinstance(f, gzip.GzipFile):
        return f.read(n), None
    parts: list[bytes] = []
    got = 0
    try:
        while got < n:
            chunk = f.read1(n - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
    except (OSError, EOFError) as e:
        return b"".join(parts), str(e)
    return b"".join(parts), None


def read_head(path: str | os.PathLike[str], n: int = SNIFF_BYTES) -> bytes:
    with open_binary(path) as f:
        head, err = read_some(f, n)
    if err is not None and not head:
        raise InputError(f"{path}: unreadable compressed file ({err})")
    return head


@dataclass(frozen=True, slots=True)
class Sniff:
    kind: InputKind | str
    reason: str = ""


_DS_MARKERS = (b"deepspeed", b"DeepSpeed", b"zero_optimization", b"[launch.py:", b"ds_accelerator",
               b"see_memory_usage", b"ZeRO", b"[Rank 0]")
_NCCL_MARKERS = (b"NCCL INFO", b"NCCL WARN", b"ProcessGroupNCCL", b"ncclUnhandled", b"ncclRemoteError",
                 b"ChildFailedError", b"torch.distributed", b"NCCL version")
_TORCH_MARKERS = (b"Traceback (most recent call last)", b"out of memory", b"OutOfMemoryError",
                  b"torch", b"CUDA", b"cuda", b"RuntimeError", b"Killed", b"loss")
_DS_CONFIG_KEYS = {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu",
                   "gradient_accumulation_steps", "fp16", "bf16", "optimizer", "scheduler",
                   "zero_allow_untested_optimizer", "gradient_clipping", "steps_per_print"}


def _looks_binary(head: bytes) -> bool:
    if not head:
        return False
    head = head.rstrip(b"\x00")      # a crashed node's log often ends in a NUL-filled block
    if not head:
        return True                  # nothing but NULs: not a log
    sample = head[:8192]
    if sample.count(b"\x00") > max(2, len(sample) // 200):
        return True
    text = sample.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    return bad > max(8, len(text) // 20)


def sniff(path: str | os.PathLike[str]) -> Sniff:
    """Decide what a file is from its first bytes."""
    head = read_head(path)
    if not head:
        return Sniff(InputKind.UNKNOWN, "empty file")
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return Sniff(InputKind.SNAPSHOT, "pickle")
    if head[:2] == b"PK":
        return Sniff(InputKind.UNKNOWN, "zip archive (torch.save?): oompost reads pickles written by "
                     "torch.cuda.memory._dump_snapshot or pickle.dump(torch.cuda.memory._snapshot())")
    if _looks_binary(head):          # before the text sniffs: junk may open with "{" or "<html" by chance
        return Sniff(InputKind.UNKNOWN, "binary data, not a log, snapshot pickle or JSON config")
    stripped = head.lstrip()
    if stripped[:1] == b"{":
        return _sniff_json(path)
    if stripped[:15].lower().startswith((b"<!doctype html", b"<html")):
        if b'name="generator" content="oompost' in head:
            return Sniff(OUTPUT_KIND, "oompost HTML report")
        return Sniff(InputKind.UNKNOWN, "HTML page")
    if head.startswith(b"<!-- oompost report"):
        return Sniff(OUTPUT_KIND, "oompost Markdown report")
    if any(m in head for m in _DS_MARKERS):
        return Sniff(InputKind.DEEPSPEED_LOG)
    if any(m in head for m in _NCCL_MARKERS):
        return Sniff(InputKind.NCCL_LOG)
    if any(m in head for m in _TORCH_MARKERS):
        return Sniff(InputKind.TORCH_LOG)
    # Unrecognised text is still parsed (the interesting part may be past the head).
    return Sniff(InputKind.TORCH_LOG, "text with no known markers in its first 64 KiB")


# the top-level keys of an error payload (OpenAI-compatible servers, FastAPI, job runners' status files)
_ERROR_KEYS = frozenset(("error", "errors", "detail", "exception", "traceback", "stderr"))


def _sniff_json(path: str | os.PathLike[str]) -> Sniff:
    try:
        data = load_json(path)
    except InputError as e:
        if _is_json_lines(path):
            # e.g. oompost.record's steps_rankN.jsonl: each line is read like a log line
            return Sniff(InputKind.TORCH_LOG, "JSON Lines, read line by line")
        # a log that opens with a printed dict (a tensor census, a config), or a truncated JSON file: read it
        # as text, and say why, so nothing in it is lost
        return Sniff(InputKind.TORCH_LOG, f"starts like JSON but {str(e).split(': ', 1)[-1]}; read as text")
    if not isinstance(data, dict):
        return Sniff(InputKind.UNKNOWN, "JSON that is not an object")
    schema = str(data.get("schema", ""))
    if schema.startswith(("oompost.report", "oompost.expected", "oompost.index")):
        return Sniff(OUTPUT_KIND, f"oompost file ({schema})")
    if schema.startswith("oompost.capture"):
        return Sniff(InputKind.CAPTURE_META)
    if _DS_CONFIG_KEYS & set(data):
        return Sniff(InputKind.DS_CONFIG)
    if _ERROR_KEYS & set(data):
        # a server's error response ({"error": {"message": "... CUDA out of memory ..."}}, FastAPI's {"detail": ...}):
        # its strings carry the failure, so it is read as text rather than set aside
        return Sniff(InputKind.TORCH_LOG, "a JSON error response; read as text")
    return Sniff(InputKind.UNKNOWN, "JSON object that is not a DeepSpeed config")


def _is_json_lines(path: str | os.PathLike[str]) -> bool:
    """The first two lines each hold one JSON object."""
    lines = read_head(path).split(b"\n", 2)
    if len(lines) < 2:
        return False
    try:
        return all(isinstance(orjson.loads(ln), dict) for ln in lines[:2])
    except orjson.JSONDecodeError:
        return False


def load_json(path: str | os.PathLike[str]) -> object:
    with open_binary(path) as f:
        try:
            raw = f.read(MAX_JSON_BYTES + 1)
        except (OSError, EOFError) as e:  # truncated/corrupt gzip
            raise InputError(f"{path}: unreadable compressed file ({e})") from None
    if len(raw) > MAX_JSON_BYTES:
        raise InputError(f"{path}: JSON file larger than {MAX_JSON_BYTES // 2**20} MiB")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    # DeepSpeed accepts hjson-ish configs; try the stdlib as a last resort for NaN etc.
    import json

    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON ({e})") from None


def load_json_object(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """``load_json`` for files that must hold one JSON object (a ds_config,
    an HF config.json, capture metadata); ``what`` names it in the error."""
    try:
        data = load_json(path)
    except InputError as e:
        raise InputError(f"cannot read {what} {e}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: {what} must be a JSON object, not {type(data).__name__}")
    return data


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given, directories walked (sorted, hidden entries skipped)."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if not name.startswith("."):
                        out.append(os.path.join(root, name))
        else:
            out.append(p)
    return out


# ------------------------------------------------------------------ lines


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a text log after prefix stripping.

    ``rank`` is the global rank when a prefix said so (``[rank3]:``, Slurm
    ``3:``), ``local_rank`` when only a local one is known (``[default3]:``).
    ``text`` is what remains; ``raw`` the line as read (minus the newline)."""

    lineno: int
    text: str
    raw: str
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    prev_raw: bytes = b""           # the previous physical line as read (decoded only by who needs it)

    @property
    def prev(self) -> str:
        """The previous physical line, prefixes stripped (e.g. see_memory_usage's label line)."""
        return strip_prefixes(self.prev_raw.decode("utf-8", errors="replace"))[0] if self.prev_raw else ""


_PREFIX_RE = re.compile(
    r"(?:\[rank(?P<rank>\d+)\]:\s?"
    r"|\[(?P<role>[A-Za-z_]+?)(?P<local>\d+)\]:\s?"
    r"|\[(?P<jobid>\d+),(?P<mpirank>\d+)\]<std(?:out|err)>:"
    r"|(?P<srun>\s{0,4}\d{1,5}): (?=\S)"
    r"|\((?P<ray>[\w.]+) pid=(?P<raypid>\d+)[^)]*\)\s)"
)
# pdsh / deepspeed multi-node: "node07: ..." (only when the launcher is pdsh; see below)
_HOST_PREFIX_RE = re.compile(r"(?P<host>[A-Za-z][\w.-]{0,62}): (?=\S)")
_RANK_IN_NAME_RE = re.compile(r"(?:^|[_./-])rank[_-]?(\d+)(?:\D|$)", re.IGNORECASE)


def rank_hint_from_name(path: str) -> int | None:
    m = _RANK_IN_NAME_RE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


_PREFIX_START = frozenset("[( 0123456789")


def strip_prefixes(raw: str, *, host_prefixes: bool = False) -> tuple[str, int | None, int | None, str | None]:
    """Remove stacked launcher prefixes.  Returns (text, rank, local_rank, host)."""
    if not raw or (raw[0] not in _PREFIX_START and not host_prefixes):
        return raw, None, None, None
    if raw.startswith("[rank"):                      # the common case, without the regex
        close = raw.find("]:", 5, 12)
        if close > 5 and raw[5:close].isdigit():
            rest = raw[close + 2:]
            if rest[:1] == " ":
                rest = rest[1:]
            if not rest or rest[0] not in _PREFIX_START:
                return rest, int(raw[5:close]), None, None
    text = raw
    rank = local = None
    host = None
    for _ in range(4):
        m = _PREFIX_RE.match(text)
        if m is None and host_prefixes:
            hm = _HOST_PREFIX_RE.match(text)
            if hm and host is None:
                host = hm.group("host")
                text = text[hm.end():]
                continue
        if m is None:
            break
        if m.group("rank") is not None:
            rank = int(m.group("rank"))
        elif m.group("local") is not None:
            if m.group("role") == "Rank":      # "[Rank0]:" spelled oddly: treat as global
                rank = int(m.group("local"))
            else:
                local = int(m.group("local"))
        elif m.group("mpirank") is not None:
            rank = int(m.group("mpirank"))
        elif m.group("srun") is not None:
            if rank is not None or local is not None:
                break                          # "3: " after a rank prefix is text
            rank = int(m.group("srun"))
        text = text[m.end():]
    return text, rank, local, host


# a [rankN]: glued mid-line (progress bars: "...19.11s/it[rank1]:[E ...")
_MIDLINE_RANK_RE = re.compile(r"\[rank(\d+)\]:")


class LineScanner:
    """Streams a (possibly gzipped) file in large blocks and yields only the
    lines that contain a sentinel, plus every line while the consumer sets
    ``want_all`` (a multi-line construct is open).  Sentinel group ``i``
    belongs to consumer ``i``; a yielded line carries the bit mask of the
    consumers whose sentinels it contains (0 for a line yielded only because
    of ``want_all``).

    Dispatch is by line shape: the line with each digit turned into ``0``.  A
    big log repeats a few shapes (step lines, NCCL INFO lines, progress bars)
    millions of times, so which sentinels a shape holds is worked out once per
    shape.  A sentinel without digits occurs in a line exactly when it occurs
    in the line's shape, so the mask is exact; the few sentinels with digits
    in them ("137") are tested on the lines whose shape could hold them.  A
    consumer may also give a pattern the whole shape must match (``shapes``):
    a line of bare numbers has no literal in it to look for.

    A consumer can change its group while the file is read (``set_group``): a
    parser that has found what it looks for stops paying for lines it no
    longer needs.  One consumer can take its lines in bulk (``direct``): for a
    shape that only it wants, it decides once how to read such lines, and
    they go to it straight from the loop instead of being yielded.
    """

    BLOCK = 4 * 2**20
    MAX_SHAPE_BYTES = 16 * 2**20     # shapes remembered (a log of unique lines forgets them now and then)
    MAX_SHAPE_LEN = 4096            # longer lines are tested directly

    def __init__(self, path: str | os.PathLike[str], groups: list[tuple[str, ...]],
                 shapes: "Sequence[re.Pattern[bytes] | None]" = ()) -> None:
        self.path = path
        self._groups = [tuple(g) for g in groups]
        # a consumer may also ask for every line whose whole shape matches a pattern (a line of bare
        # numbers holds no literal to look for): tested once per new shape, like the sentinels
        self._shape_tests = tuple((rx, 1 << i) for i, rx in enumerate(shapes) if rx is not None)
        self.want_all = False
        self.lines_read = 0
        self._direct_bit = 0
        self._classify: Callable[[bytes], object] | None = None
        self._take: Callable[[list[tuple[int, bytes, bytes, Any]]], None] | None = None
        self._version = 0
        self._compile()

    def set_group(self, i: int, sentinels: tuple[str, ...]) -> None:
        """Consumer ``i`` is offered only lines with one of ``sentinels`` from the next line on."""
        self._groups[i] = tuple(sentinels)
        self._compile()

    def drop_shape(self, i: int) -> None:
        """Consumer ``i`` no longer wants the lines its shape pattern let through (it has read enough of them)."""
        bit = 1 << i
        if any(b == bit for _, b in self._shape_tests):
            self._shape_tests = tuple(t for t in self._shape_tests if t[1] != bit)
            self._compile()

    def direct(self, i: int, classify: Callable[[bytes], object],
               take: Callable[[list[tuple[int, bytes, bytes, Any]]], None]) -> None:
        """Lines that only consumer ``i`` wants, while no multi-line construct is open, and
        whose shape ``classify`` gives a ``how`` for (decided once per shape), go to ``take`` as
        ``(lineno, raw, prev, how)`` in lists, in file order, each list before any line yielded
        after it; the others are yielded as usual."""
        self._direct_bit, self._classify, self._take = 1 << i, classify, take
        self._compile()

    def _compile(self) -> None:
        self._plain, self._digits = _sentinel_tables(tuple(self._groups))
        self._shapes: dict[bytes, _Info] = {}
        self._held = 0
        self._version += 1

    def _infos(self, seg: list[bytes]) -> "list[_Info]":
        """What each line's shape asks for: looked up for the whole list at once (C loops); the
        shapes not seen before are worked out together (``_new_shapes``)."""
        keys = list(map(bytes.translate, seg, repeat(_ZERO)))
        shapes = self._shapes
        infos = list(map(shapes.get, keys))
        missing: dict[bytes, list[int]] = {}
        i = -1
        try:
            while True:
                i = infos.index(None, i + 1)
                missing.setdefault(keys[i], []).append(i)
        except ValueError:
            pass
        if missing:
            for (key, where), info in zip(missing.items(), self._new_shapes(list(missing))):
                if len(key) <= self.MAX_SHAPE_LEN:
                    self._held += len(key) + 100
                    if self._held > self.MAX_SHAPE_BYTES:
                        shapes.clear()
                        self._held = len(key) + 100
                    shapes[key] = info
                for i in where:
                    infos[i] = info
        return infos  # type: ignore[return-value]

    def _new_shapes(self, keys: list[bytes]) -> "list[_Info]":
        """``(mask, digit sentinels, how)`` of each shape.  The sentinels are looked for with
        ``bytes.find`` over all the new shapes at once (one pass per sentinel): a log of unique
        lines (addresses, ids) costs what a block-wide search costs, not a test per sentinel
        per line."""
        buf = b"\n".join(keys) + b"\n"
        hits = _candidates(buf, self._plain)
        # a sentinel with digits can occur in a line only where its zero form occurs in the shape
        zhits = _candidates(buf, tuple((z, 1 << i) for i, (z, _, _) in enumerate(self._digits)))
        combos: dict[int, tuple[tuple[bytes, int], ...]] = {0: ()}
        out: list[_Info] = []
        off = 0
        direct_bit, classify = self._direct_bit, self._classify
        for key in keys:
            mask = hits.get(off, 0)
            z = zhits.get(off, 0)
            off += len(key) + 1
            for rx, bit in self._shape_tests:
                if rx.fullmatch(key):
                    mask |= bit
            digits = combos.get(z)
            if digits is None:
                digits = combos[z] = tuple((s, bit) for i, (_, s, bit) in enumerate(self._digits) if z >> i & 1)
            how = classify(key) if classify is not None and mask == direct_bit else None
            out.append((mask, digits, how))
        return out

    def __iter__(self) -> Iterator[tuple[int, bytes, bytes, int]]:
        lineno = 0
        prev = b""
        try:
            for block in _blocks(self.path):
                lines = block.split(b"\n")
                lines.pop()                     # a block ends with a newline
                start = 0
                while start < len(lines):       # again from where a consumer changed its sentinels
                    start = yield from self._lines(lines, start, lineno, prev)
                lineno += len(lines)
                if lines:
                    prev = lines[-1]
        finally:
            self.lines_read = lineno

    def _lines(self, lines: list[bytes], start: int, base: int, prev: bytes
               ) -> Generator[tuple[int, bytes, bytes, int], None, int]:
        """Lines ``start:`` of a block with ``base`` lines before it.  Returns where to go on:
        the end, or the line after one whose consumer changed its sentinels."""
        version = self._version
        seg = lines[start:] if start else lines
        if start:
            prev = lines[start - 1]
        direct_bit, take = self._direct_bit, self._take
        taken: list[tuple[int, bytes, bytes, Any]] = []
        lineno = base + start
        want_all = self.want_all                # the consumer changes it only when given a line
        for line, (mask, digits, how) in zip(seg, self._infos(seg)):
            lineno += 1
            for s, bit in digits:
                if s in line:
                    mask |= bit
            if mask or want_all:
                if how is not None and mask == direct_bit and not want_all:
                    taken.append((lineno, line.rstrip(b"\r"), prev, how))
                else:
                    if taken:
                        take(taken)  # type: ignore[misc]
                        taken = []
                    yield lineno, line.rstrip(b"\r"), prev, mask
                    if self._version != version:
                        return lineno - base
                    want_all = self.want_all
            prev = line
        if taken:
            take(taken)  # type: ignore[misc]
        return len(lines)


_Info = tuple[int, tuple[tuple[bytes, int], ...], Any]      # (mask, digit sentinels and their bits, how)


def _candidates(buf: bytes, sentinels: tuple[tuple[bytes, int], ...]) -> dict[int, int]:
    """Line start offset → mask of the bits whose sentinels occur on that line (one ``find``
    pass per sentinel; each line found is skipped to its end)."""
    hits: dict[int, int] = {}
    find = buf.find
    rfind = buf.rfind
    for s, bit in sentinels:
        j = find(s)
        while j >= 0:
            start = rfind(b"\n", 0, j) + 1
            hits[start] = hits.get(start, 0) | bit
            nxt = find(b"\n", j)
            j = find(s, nxt + 1) if nxt >= 0 else -1
    return hits


_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _has_digit(s: bytes) -> bool:
    return s.translate(_ZERO) != s or b"0" in s


@lru_cache(maxsize=256)
def _sentinel_tables(groups: tuple[tuple[str, ...], ...]
                     ) -> tuple[tuple[tuple[bytes, int], ...], tuple[tuple[bytes, bytes, int], ...]]:
    """(sentinels without digits, sentinels with digits as (zero form, sentinel)), each with its
    consumer bit mask.  The same few groups recur for every file of a scan: worked out once."""
    merged = _merged_sentinels(groups)
    return (tuple((s, bit) for s, bit in merged.items() if not _has_digit(s)),
            tuple((s.translate(_ZERO), s, bit) for s, bit in merged.items() if _has_digit(s)))


def _merged_sentinels(groups: tuple[tuple[str, ...], ...]) -> dict[bytes, int]:
    """Sentinel → consumer bit mask.  Within one consumer's group, a sentinel
    containing a shorter one adds no lines and is dropped."""
    out: dict[bytes, int] = {}
    for i, group in enumerate(groups):
        kept: list[bytes] = []
        for b in sorted({g.encode() for g in group}, key=len):
            if not any(k in b for k in kept):
                kept.append(b)
        for b in kept:
            out[b] = out.get(b, 0) | (1 << i)
    return out


def _blocks(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """Newline-aligned blocks of the file (each ends with a newline)."""
    f = open_binary(path)
    carry = b""
    lineno = 0
    try:
        while True:
            data, err = read_some(f, LineScanner.BLOCK)
            if err is not None:
                block = carry + data
                if block:
                    block += b"" if block.endswith(b"\n") else b"\n"
                    lineno += block.count(b"\n")
                    yield block
                raise TruncatedInput(lineno, err)
            if not data:
                if carry:
                    yield carry + b"\n"
                return
            block = carry + data
            cut = block.rfind(b"\n")
            if cut < 0:
                carry = block
                continue
            carry = block[cut + 1:]
            block = block[:cut + 1]
            lineno += block.count(b"\n")
            yield block
    finally:
        f.close()


# What pasting a log into an issue tracker or a terminal adds around it: markdown
# quote markers ("> ", "> > "), the box of rich/IPython tracebacks ("│ ... │"),
# ANSI colour codes.  Removed before anything else so every parser sees the log
# as the program printed it.
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BOX = "│┃"


def forum_clean(text: str) -> str:
    """The line as the program printed it: quote markers, rich-traceback box and ANSI codes removed."""
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    if text[:1] == ">" or text[:2] == " >":
        t = text.lstrip()
        while t[:1] == ">":
            t = t[1:]
            t = t[1:] if t[:1] == " " else t
        text = t
    if text[:1] in _BOX and text[1:2] in (" ", "") and text.rstrip()[-1:] in _BOX:
        text = text.strip()[1:-1].rstrip()
        text = text[1:] if text[:1] == " " else text
    return text


_ESCAPED_OOM = re.compile(r"out of memory|OutOfMemory|Tried to allocate|would exceed allowed memory")
# the end of a tqdm bar ("| 5/40 [00:03<00:27,  1.29it/s]"): tqdm writes no newline after its last update, so
# the next line a logger prints into the same file starts right after it
_TQDM_END = re.compile(r"\d+/\d+ \[[\d:]+<[\d:?]+(?:,[^\]\n]*)?\]")


def decode_line(lineno: int, raw: bytes, *, host_prefixes: bool = False, prev: bytes = b"") -> list[LogLine]:
    """A physical line as LogLines (carriage returns split it, and "\\n" escapes inside a quoted OOM
    message), prefixes stripped."""
    text = raw.decode("utf-8", errors="replace")
    if text[:1] in ">│┃" or text[:2] == " >" or "\x1b" in text:
        text = forum_clean(text)
    if "\r" not in text and len(text) <= MAX_LINE_CHARS and "[rank" not in text[1:] and "\\n" not in text:
        body, rank, local, host = strip_prefixes(text, host_prefixes=host_prefixes)
        return [LogLine(lineno, body, text, rank, local, host, prev)]
    parts = text.split("\r") if "\r" in text else (text,)
    if "\r" in text and "]" in parts[-1]:
        m = _TQDM_END.search(parts[-1])
        if m is not None and parts[-1][m.end():].strip():
            parts = (*parts[:-1], parts[-1][:m.end()], parts[-1][m.end():])
    if "\\n" in text and _ESCAPED_OOM.search(text):
        # a multi-line OOM message kept as one string ("\n" escapes): a Rust panic quoting it (TGI), an
        # exception repr in a JSON log line, an API error body; read it as the lines it was printed as
        parts = tuple(q for p in parts for q in p.split("\\n"))
    out = []
    for part in parts:
        if not part:
            continue
        if len(part) > MAX_LINE_CHARS:
            part = part[:MAX_LINE_CHARS]
        if "[rank" in part and not part.startswith("[rank"):
            m = _MIDLINE_RANK_RE.search(part)
            if m:
                part = part[m.start():]
        body, rank, local, host = strip_prefixes(part, host_prefixes=host_prefixes)
        out.append(LogLine(lineno, body, part, rank, local, host, prev))
    return out


class TruncatedInput(Exception):
    """A compressed stream ended early; the lines before it were delivered."""

    def __init__(self, lineno: int, reason: str) -> None:
        super().__init__(reason)
        self.lineno = lineno
        self.reason = reason
