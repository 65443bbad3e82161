"""Decode ``torch.cuda.memory._snapshot()`` pickles into typed ``Snapshot`` records.

Snapshots are user uploads, so they never go through the stdlib's unrestricted
loader: a pickle can run any code while it loads.  Real snapshots contain only
builtins (dict, list, tuple, str, int, float, bool — reference/pytorch.md
§1.1), so ``RestrictedUnpickler`` refuses *every* global and every persistent
id.  Anything that needs one is hostile (or not a snapshot) and is rejected
before a single byte of it runs.

Shapes accepted (pytorch.md §1.2–1.9):

* the ``_snapshot()`` dict: ``segments``, ``device_traces``,
  ``allocator_settings``, ``external_annotations``, plus extra keys
  (``oompost_meta`` from our capture hook → ``Snapshot.meta``);
* the bare segments list returned by ``torch.cuda.memory_snapshot()``;
* legacy (≤2.0) blocks carrying ``history`` instead of ``frames`` /
  ``requested_size`` (ported from ``_memory_viz._block_extra``).

Stack frames are interned — one ``Frame`` object per distinct (name, file,
line) and one tuple per distinct stack — so a 100k-entry trace whose entries
all carry ~30 frames costs a few thousand objects, not millions.
"""

from __future__ import annotations

import gc
import io
import operator
import os
import pickle
from collections import Counter
from collections.abc import Iterable
from itertools import compress, repeat
from typing import Any

from ..errors import HostilePickleError, SnapshotError
from ..model import NO_TIME, Block, Frame, Segment, Snapshot, Trace
from ..sources import open_binary
from .memguard import address_space_budget, load_budget
from .snapshot_columns import Columns, decode_columns

CAPTURE_HINT = ("capture one with torch.cuda.memory._record_memory_history(max_entries=100000) and, at the "
                "OOM, torch.cuda.memory._dump_snapshot('snapshot.pickle') — or run under "
                "`python -m oompost.record -o DIR -- train.py`")

# Block states as the allocator writes them.  The _snapshot() docstring says
# "active_awaiting_free"; the binaries write "active_pending_free" (§1.4).
_STATE_ALIASES = {"active_awaiting_free": "active_pending_free"}
KNOWN_STATES = frozenset({"active_allocated", "active_pending_free", "inactive"})
KNOWN_ACTIONS = frozenset({"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                           "segment_map", "segment_unmap", "snapshot", "oom"})
_KNOWN_TOP_KEYS = frozenset({"segments", "device_traces", "allocator_settings", "external_annotations"})
_SMALL_SEGMENT = 2 * 1024 * 1024


class _VersionString(str):
    """Stands in for torch.torch_version.TorchVersion (a str subclass)."""


_DATA_ONLY: dict[tuple[str, str], type] = {
    ("torch.torch_version", "TorchVersion"): _VersionString,
    ("collections", "OrderedDict"): dict,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that can only build builtin containers and scalars.

    ``find_class`` is the single door through which a pickle reaches code
    (``GLOBAL``/``STACK_GLOBAL``, and through them ``REDUCE``/``BUILD``/
    ``NEWOBJ``/``INST``/``OBJ``); it refuses everything except the two
    data-only types in ``_DATA_ONLY``, which it maps to builtins.  ``persistent_load`` is the
    other extension hook and refuses too."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401 - pickle API
        # Two data-only types that capture hooks commonly put in the snapshot's
        # metadata (``torch.__version__`` and ``memory_stats()``); both are
        # rebuilt as plain builtins, never imported.
        safe = _DATA_ONLY.get((module, name))
        if safe is not None:
            return safe
        raise HostilePickleError(
            f"refusing to load {module}.{name}: snapshot pickles contain only builtins; "
            "this file tries to import code")

    def persistent_load(self, pid: Any) -> Any:
        raise HostilePickleError(
            f"refusing persistent id {str(pid)[:60]!r}: snapshot pickles contain only builtins; "
            "this file references external objects")


def loads_restricted(data: bytes) -> Any:
    """Unpickle bytes with ``RestrictedUnpickler`` (for tests and in-memory data)."""
    return RestrictedUnpickler(io.BytesIO(data)).load()


def load_snapshot(path: str) -> Snapshot:
    """Read a snapshot pickle (optionally gzipped) without executing anything in it.

    Raises ``HostilePickleError`` when the pickle tries to import code and
    ``SnapshotError`` (one line, with a capture hint) when it is truncated,
    corrupt or not a snapshot at all."""
    # Unpickling builds millions of containers; the cyclic GC would rescan them
    # over and over (2-3x the load time).  Nothing here creates cycles.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _load(path: str) -> Snapshot:
    with open_binary(path) as f:
        try:
            head = f.read(4)
            f.seek(0)
        except (OSError, EOFError) as e:
            raise SnapshotError(f"{path}: unreadable compressed file ({_one_line(e)}); {CAPTURE_HINT}") from None
        if not head:
            raise SnapshotError(f"{path}: empty file; {CAPTURE_HINT}")
        prebuilt: _Prebuilt | None = None
        try:
            with address_space_budget(load_budget(_size(path), compressed=head[:2] == b"\x1f\x8b")):
                fast = decode_columns(f, _DATA_ONLY)
                if fast is not None and _matches(fast[0], fast[1]):
                    raw, prebuilt = fast[0], _Prebuilt(fast[1], fast[2])
                else:
                    del fast
                    f.seek(0)
                    raw = RestrictedUnpickler(f).load()
        except HostilePickleError as e:
            raise HostilePickleError(f"{path}: {e}") from None
        except RecursionError:
            raise SnapshotError(f"{path}: pickle nests too deeply to be a memory snapshot; {CAPTURE_HINT}") from None
        except MemoryError:
            raise SnapshotError(f"{path}: the pickle asks for more memory than a snapshot of its size can need "
                                "(a corrupt or hostile length or memo index); not loaded") from None
        except Exception as e:  # EOFError, UnpicklingError, gzip's BadGzipFile/EOFError, ValueError...
            raise SnapshotError(f"{path}: {_describe_failure(head, e)}; {CAPTURE_HINT}") from None
    return decode_snapshot(raw, path, consume=True, prebuilt=prebuilt)


class _Prebuilt:
    """Trace columns the compiled decoder built (``snapshot_columns``), keyed by
    the identity of the (empty) trace list they came from."""

    def __init__(self, columns: list[Columns], frame_lists: list[Any]) -> None:
        self.by_list = {c.list_id: c for c in columns}
        self.frame_lists = frame_lists
        self.stacks: list[tuple[Frame, ...]] | None = None

    def trace(self, dev_trace: Any, interner: _Interner) -> Trace | None:
        cols = self.by_list.get(id(dev_trace))
        if cols is None:
            return None
        if self.stacks is None:
            self.stacks = [interner.stack(fl) for fl in self.frame_lists]
        return cols.trace(self.stacks, _entry_extra)


def _matches(raw: Any, columns: list[Columns]) -> bool:
    """Whether every column set belongs to one of ``raw['device_traces']``'s lists
    (a trace-like list anywhere else would lose its items: use the fallback)."""
    if not columns:
        return True
    traces = raw.get("device_traces") if isinstance(raw, dict) and "segments" in raw else None
    ids = {id(t) for t in traces if isinstance(t, list)} if isinstance(traces, (list, tuple)) else set()
    return all(c.list_id in ids for c in columns)


def _entry_extra(e: dict[str, Any]) -> tuple[int | None, tuple[int, int] | None, str] | None:
    """An entry's rare fields, as ``_Columns._fast`` reads them (None when all are absent)."""
    df, pid, um = e.get("device_free"), e.get("pool_id"), e.get("user_metadata", "")
    if df is None and pid is None and not um:
        return None
    return (df if (df is None or type(df) is int) else _int(df), None if pid is None else _pool_id(pid),
            um if type(um) is str else str(um))


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _describe_failure(head: bytes, e: BaseException) -> str:
    if head[:2] == b"PK":
        return ("a zip archive (torch.save output?), not a snapshot pickle written by "
                "torch.cuda.memory._dump_snapshot or pickle.dump(torch.cuda.memory._snapshot())")
    if isinstance(e, EOFError) or "truncated" in str(e).lower() or "ended before" in str(e).lower():
        return f"truncated pickle ({_one_line(e) or 'ran out of input'}): the file was cut short while being written or copied"
    return f"not a readable pickle ({type(e).__name__}: {_one_line(e)})"


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""


# ---------------------------------------------------------------- decoding


_frame_key = operator.itemgetter("name", "filename", "line")


class _Interner:
    """Shares Frame objects and frame tuples across blocks and trace entries.

    The cache key of a stack is the tuple of raw (name, filename, line)
    triples, built by ``itemgetter`` in C: strings cache their hashes, so a
    30-frame stack is looked up without creating a single Python object per
    frame.  Only a miss builds ``Frame`` objects."""

    def __init__(self) -> None:
        self.frames: dict[tuple[Any, Any, Any], Frame] = {}
        self.stacks: dict[tuple[tuple[Any, Any, Any], ...], tuple[Frame, ...]] = {}

    def _frame(self, key: tuple[Any, Any, Any]) -> Frame:
        f = self.frames.get(key)
        if f is None:
            name, filename, line = key
            f = Frame(filename=filename if isinstance(filename, str) else str(filename),
                      line=line if isinstance(line, int) else _int(line),
                      name=name if isinstance(name, str) else str(name))
            self.frames[key] = f
        return f

    def stack(self, frames: Any) -> tuple[Frame, ...]:
        if not frames or not isinstance(frames, (list, tuple)):
            return ()
        try:
            keys = tuple(map(_frame_key, frames))
        except (KeyError, TypeError):
            keys = tuple((d.get("name", ""), d.get("filename", ""), d.get("line", 0))
                         for d in frames if isinstance(d, dict))
        try:
            hit = self.stacks.get(keys)
        except TypeError:                      # an unhashable value inside a frame dict
            keys = tuple((str(n), str(f), _int(ln)) for n, f, ln in keys)
            hit = self.stacks.get(keys)
        if hit is None:
            hit = tuple(self._frame(k) for k in keys)
            self.stacks[keys] = hit
        return hit


def _int(v: Any, default: int = 0) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _pool_id(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return (_int(v[0]), _int(v[1]))
    return (0, 0)


def decode_snapshot(raw: Any, path: str = "<memory>", consume: bool = False,
                    prebuilt: _Prebuilt | None = None) -> Snapshot:
    """Turn the unpickled builtins into a ``Snapshot`` (no I/O; usable on dicts from tests).
    ``consume=True`` empties the trace lists of ``raw`` while decoding them, so
    their entries are freed as soon as they are columns."""
    warnings: list[str] = []
    interner = _Interner()
    meta: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    annotations: tuple[Any, ...] = ()
    raw_traces: Any = None
    if isinstance(raw, dict):
        if "segments" not in raw:
            keys = ", ".join(sorted(str(k) for k in raw)[:8])
            raise SnapshotError(f"{path}: a pickled dict without 'segments' (keys: {keys or 'none'}) is not a "
                                f"memory snapshot; {CAPTURE_HINT}")
        fmt = "dict"
        raw_segments = raw["segments"]
        raw_traces = raw.get("device_traces")
        s = raw.get("allocator_settings")
        if isinstance(s, dict):
            settings = dict(s)
        ea = raw.get("external_annotations")
        if isinstance(ea, (list, tuple)):
            annotations = tuple(ea)
        om = raw.get("oompost_meta")
        if isinstance(om, dict):
            meta.update(om)
        for k, v in raw.items():
            if k not in _KNOWN_TOP_KEYS and k != "oompost_meta":
                meta[str(k)] = v
    elif isinstance(raw, list):
        fmt = "segments_only"
        raw_segments = raw
        warnings.append("segments-only snapshot (torch.cuda.memory_snapshot()): no allocator history or settings; "
                        "use torch.cuda.memory._snapshot() for the trace")
    else:
        raise SnapshotError(f"{path}: the pickle holds a {type(raw).__name__}, not a memory snapshot dict or "
                            f"segments list; {CAPTURE_HINT}")
    if not isinstance(raw_segments, (list, tuple)):
        raise SnapshotError(f"{path}: 'segments' is a {type(raw_segments).__name__}, not a list; {CAPTURE_HINT}")

    segments, legacy = _decode_segments(raw_segments, interner, warnings)
    if fmt == "segments_only" and raw_segments and not segments:
        raise SnapshotError(f"{path}: a pickled list of {len(raw_segments)} item(s) that are not memory segments, "
                            f"not a snapshot; {CAPTURE_HINT}")
    if legacy:
        fmt = "legacy_history"
    traces = _decode_traces(raw_traces, interner, warnings, consume, prebuilt) if raw_traces is not None else ()
    if isinstance(raw, dict) and not any(traces):
        warnings.append("no device_traces: allocator history was not recorded "
                        "(enable torch.cuda.memory._record_memory_history before the OOM)")
    for dev, trace in enumerate(traces):
        warnings.extend(_trace_warnings(dev, trace, [s for s in segments if s.device == dev]))
    return Snapshot(path=path, segments=tuple(segments), traces=traces, allocator_settings=settings,
                    meta=meta, format=fmt, warnings=tuple(warnings), external_annotations=annotations)


def _block_extra(b: dict[str, Any]) -> tuple[Any, int]:
    """Frames and requested size of a block, as ``_memory_viz._block_extra`` reads them."""
    if "frames" not in b:
        hist = b.get("history")
        if isinstance(hist, (list, tuple)) and hist and isinstance(hist[0], dict):
            h = hist[0]
            return h.get("frames", []), _int(h.get("real_size", b.get("size", 0)))
        return [], _int(b.get("requested_size", b.get("size", 0)))
    return b["frames"], _int(b.get("requested_size", b.get("size", 0)))


def _decode_segments(raw_segments: Iterable[Any], interner: _Interner,
                     warnings: list[str]) -> tuple[list[Segment], bool]:
    out: list[Segment] = []
    legacy = False
    bad_segments = 0
    size_mismatch = 0
    unknown_states: set[str] = set()
    for rs in raw_segments:
        if not isinstance(rs, dict):
            bad_segments += 1
            continue
        address = _int(rs.get("address"))
        blocks: list[Block] = []
        offset = address
        raw_blocks = rs.get("blocks") or []
        for rb in raw_blocks if isinstance(raw_blocks, (list, tuple)) else ():
            if not isinstance(rb, dict):
                continue
            if "history" in rb and "frames" not in rb:
                legacy = True
            size = _int(rb.get("size"))
            frames, requested = _block_extra(rb)
            state = str(rb.get("state", "inactive"))
            state = _STATE_ALIASES.get(state, state)
            if state not in KNOWN_STATES:
                unknown_states.add(state)
            baddr = _int(rb.get("address"), offset) if "address" in rb else offset
            blocks.append(Block(address=baddr, size=size, requested_size=requested, state=state,
                                frames=interner.stack(frames)))
            offset = baddr + size
        block_total = sum(b.size for b in blocks)
        total = _int(rs.get("total_size"), block_total) if "total_size" in rs else block_total
        if blocks and block_total != total:
            size_mismatch += 1
        allocated = (_int(rs.get("allocated_size")) if "allocated_size" in rs
                     else sum(b.size for b in blocks if b.state == "active_allocated"))
        expandable = bool(rs.get("is_expandable", False))
        stype = rs.get("segment_type")
        if stype not in ("small", "large"):
            stype = "small" if (total <= _SMALL_SEGMENT and not expandable) else "large"
        out.append(Segment(device=_int(rs.get("device")), address=address, total_size=total,
                           allocated_size=allocated, stream=_int(rs.get("stream")), segment_type=stype,
                           pool_id=_pool_id(rs.get("segment_pool_id")), is_expandable=expandable,
                           blocks=tuple(blocks)))
    out.sort(key=lambda s: (s.device, s.address))
    if bad_segments:
        warnings.append(f"{bad_segments} segment entries were not dicts and were skipped")
    if size_mismatch:
        warnings.append(f"{size_mismatch} segments whose block sizes do not add up to total_size")
    if unknown_states:
        warnings.append("unknown block states kept as is: " + ", ".join(sorted(unknown_states)))
    return out, legacy


_CHUNK = 1 << 16


def _decode_traces(raw_traces: Any, interner: _Interner, warnings: list[str],
                   consume: bool = False, prebuilt: _Prebuilt | None = None) -> tuple[Trace, ...]:
    """``device_traces`` → one columnar ``Trace`` per device.

    Each device's list is consumed from the front in chunks: a chunk's entries
    become column slices and are released at once, so the raw entries and the
    columns never coexist in full (peak memory stays at what the unpickler
    built).  Chunks whose entries are all dicts with plain values take the
    C-level path (``map(dict.get, …)`` into ``numpy.fromiter``); anything else
    goes entry by entry through the tolerant decoder."""
    if not isinstance(raw_traces, (list, tuple)):
        warnings.append(f"device_traces is a {type(raw_traces).__name__}, not a list: ignored")
        return ()
    out: list[Trace] = []
    acc = _Columns(interner)
    for dev_trace in raw_traces:
        built = prebuilt.trace(dev_trace, interner) if prebuilt is not None else None
        if built is not None:
            counts = acc.action_counts
            import numpy as np

            for code, k in enumerate(np.bincount(built.action, minlength=len(built.actions)).tolist()):
                if k:
                    counts[built.actions[code]] = counts.get(built.actions[code], 0) + k
            out.append(built)
            continue
        acc.reset()
        if isinstance(dev_trace, list) and consume:
            while dev_trace:
                chunk = dev_trace[:_CHUNK]
                del dev_trace[:_CHUNK]
                acc.add(chunk)
                del chunk
        elif isinstance(dev_trace, (list, tuple)):
            for k in range(0, len(dev_trace), _CHUNK):
                acc.add(list(dev_trace[k:k + _CHUNK]))
        out.append(acc.build())
    if acc.skipped:
        warnings.append(f"{acc.skipped} trace entries were not dicts and were skipped")
    unknown = {a: n for a, n in acc.action_counts.items() if a not in KNOWN_ACTIONS}
    if unknown:
        warnings.append("trace actions not known to this version kept as is: "
                        + ", ".join(f"{a} ×{n}" for a, n in sorted(unknown.items())))
    return tuple(out)


class _Columns:
    """Accumulates one device's columns, chunk by chunk."""

    def __init__(self, interner: _Interner) -> None:
        self.interner = interner
        self.skipped = 0
        self.action_counts: dict[str, int] = {}
        self.codes: dict[str, int] = {}
        self.stack_index: dict[int, int] = {}          # id(interned stack tuple) → index
        self.stacks: list[tuple[Frame, ...]] = []
        self.reset()

    def reset(self) -> None:
        self.parts: list[tuple[Any, ...]] = []
        self.extra: dict[int, tuple[int | None, tuple[int, int] | None, str]] = {}
        self.n = 0
        self.codes = {}
        self.stack_index = {}
        self.stacks = [()]
        self.stack_index[id(self.stacks[0])] = 0

    def build(self) -> Trace:
        import numpy as np

        cols = list(zip(*self.parts)) if self.parts else [()] * 6
        dtypes = (np.uint8, np.int64, np.int64, np.int64, np.int64, np.int32)
        arrays = [np.concatenate(c) if c else np.zeros(0, dt) for c, dt in zip(cols, dtypes)]
        self.parts = []
        arrays[5], stacks = _first_seen_order(arrays[5], self.stacks)
        return Trace(*arrays, actions=tuple(self.codes), stacks=tuple(stacks), extra=self.extra)

    def _code(self, action: Any) -> int:
        if not isinstance(action, str):
            action = str(action)
        c = self.codes.get(action)
        if c is None:
            c = self.codes[action] = len(self.codes)
        return c

    def _stack(self, frames: Any) -> int:
        st = self.interner.stack(frames)
        k = self.stack_index.get(id(st))
        if k is None:
            k = self.stack_index[id(st)] = len(self.stacks)
            self.stacks.append(st)
        return k

    def add(self, chunk: list[Any]) -> None:
        if set(map(type, chunk)) != {dict}:
            kept = [e for e in chunk if type(e) is dict]
            self.skipped += len(chunk) - len(kept)
            chunk = kept
        if not chunk:
            return
        try:
            part = self._fast(chunk)
        except (TypeError, ValueError, OverflowError, KeyError):
            part = self._slow(chunk)
        base = self.n
        for i, v in part[6].items():
            self.extra[base + i] = v
        self.parts.append(part[:6])
        self.n += len(chunk)

    def _fast(self, chunk: list[dict]) -> tuple[Any, ...]:
        import numpy as np

        n = len(chunk)
        get = dict.get
        acts = list(map(get, chunk, repeat("action")))
        seen = Counter(acts)
        for a in seen:
            if not isinstance(a, str):
                raise TypeError("non-string action")
        counts = self.action_counts
        for a, k in seen.items():
            counts[a] = counts.get(a, 0) + k
        codes = self.codes
        for a in dict.fromkeys(acts):
            if a not in codes:
                codes[a] = len(codes)
        if len(codes) > 255:
            raise ValueError("too many distinct actions")
        action = np.fromiter(map(codes.__getitem__, acts), np.uint8, n)
        del acts
        addr = np.fromiter(map(get, chunk, repeat("addr"), repeat(0)), np.int64, n)
        size = np.fromiter(map(get, chunk, repeat("size"), repeat(0)), np.int64, n)
        stream = np.fromiter(map(get, chunk, repeat("stream"), repeat(0)), np.int64, n)
        times = list(map(get, chunk, repeat("time_us")))
        if None in times:
            times = [NO_TIME if t is None else t for t in times]
        time_us = np.fromiter(times, np.int64, n)
        del times
        frames = list(map(get, chunk, repeat("frames"), repeat(())))
        # Stacks are few (hundreds) and entries many.  An entry's stack is guessed from
        # a cheap signature — its length and the identity of its innermost frame dict
        # (pickle shares identical frames) — and confirmed by comparing the whole list
        # with the signature's representative (C-level, identity first); only entries
        # whose list differs from it are read on their own.
        sigs = list(zip(map(len, frames), map(id, map(next, map(iter, frames), repeat(None)))))
        rep = dict(zip(sigs, frames))
        sig_index = {k: self._stack(f) for k, f in rep.items()}
        stack = np.fromiter(map(sig_index.__getitem__, sigs), np.int32, n)
        same = list(map(operator.eq, frames, map(rep.__getitem__, sigs)))
        if not all(same):
            for i in compress(range(n), map(operator.not_, same)):
                stack[i] = self._stack(frames[i])
        del sigs, rep, sig_index, same, frames
        extra: dict[int, tuple[int | None, tuple[int, int] | None, str]] = {}
        dfs = list(map(get, chunk, repeat("device_free")))
        pids = list(map(get, chunk, repeat("pool_id")))
        ums = list(map(get, chunk, repeat("user_metadata"), repeat("")))
        for i in set(compress(range(n), map(operator.is_not, dfs, repeat(None)))) \
                | set(compress(range(n), map(operator.is_not, pids, repeat(None)))) | set(compress(range(n), ums)):
            df, pid, um = dfs[i], pids[i], ums[i]
            extra[i] = (df if (df is None or type(df) is int) else _int(df), None if pid is None else _pool_id(pid),
                        um if type(um) is str else str(um))
        return action, addr, size, stream, time_us, stack, extra

    def _slow(self, chunk: list[dict]) -> tuple[Any, ...]:
        """Entry by entry, converting odd values the way ``_int`` does."""
        import numpy as np

        n = len(chunk)
        action = np.zeros(n, np.uint8)
        addr = np.zeros(n, np.int64)
        size = np.zeros(n, np.int64)
        stream = np.zeros(n, np.int64)
        time_us = np.zeros(n, np.int64)
        stack = np.zeros(n, np.int32)
        extra: dict[int, tuple[int | None, tuple[int, int] | None, str]] = {}
        counts = self.action_counts
        for i, e in enumerate(chunk):
            get = e.get
            a = get("action")
            a = a if isinstance(a, str) else str(a)
            counts[a] = counts.get(a, 0) + 1
            code = self._code(a)
            if code > 255:
                raise SnapshotError("more than 255 distinct trace actions: not a memory snapshot")
            action[i] = code
            addr[i] = _clamp(_int(get("addr", 0)))
            size[i] = _clamp(_int(get("size", 0)))
            stream[i] = _clamp(_int(get("stream", 0)))
            t = get("time_us")
            time_us[i] = NO_TIME if t is None else _clamp(_int(t))
            stack[i] = self._stack(get("frames"))
            df, pid, um = get("device_free"), get("pool_id"), get("user_metadata", "")
            if df is not None or pid is not None or um:
                extra[i] = (None if df is None else _int(df), None if pid is None else _pool_id(pid),
                            um if type(um) is str else str(um))
        return action, addr, size, stream, time_us, stack, extra


def _first_seen_order(stack: Any, stacks: list[tuple[Frame, ...]]) -> tuple[Any, list[tuple[Frame, ...]]]:
    """Stack indices renumbered by first appearance in the trace (0 stays the
    empty stack), the order the compiled decoder produces, so both paths give
    identical columns."""
    import numpy as np

    n_st = len(stacks)
    n = len(stack)
    if n_st <= 1 or not n:
        return stack, stacks
    first = np.full(n_st, n, np.int64)
    first[stack[::-1]] = np.arange(n - 1, -1, -1)      # repeated indices: the last write (the earliest) wins
    first[0] = -1
    order = np.argsort(first, kind="stable")
    if (order == np.arange(n_st)).all():
        return stack, stacks
    remap = np.empty(n_st, np.int32)
    remap[order] = np.arange(n_st, dtype=np.int32)
    return remap[stack], [stacks[k] for k in order.tolist()]


def _grouped(action: Any, addr: Any, codes: list[int]) -> tuple[Any, Any, Any]:
    """The entries with one of ``codes``, sorted by (address, trace index): their
    actions, addresses and trace indices."""
    import numpy as np

    idx = np.flatnonzero(np.isin(action, codes))
    order = np.lexsort((idx, addr[idx]))
    idx = idx[order]
    return action[idx], addr[idx], idx


def _last_is(a: Any, ad: Any, kinds: tuple[int, int], which: int) -> tuple[Any, Any]:
    """For entries grouped by address (``_grouped``): whether the last entry of
    one of ``kinds`` strictly before each entry, in its group, is ``which``; and,
    per entry, whether it is the group's last such entry and is ``which``
    (the state at the end of the trace)."""
    import numpy as np

    n = len(a)
    pos = np.arange(n)
    start = np.zeros(n, bool)
    if n:
        start[0] = True
        start[1:] = ad[1:] != ad[:-1]
    group_start = np.maximum.accumulate(np.where(start, pos, 0)) if n else pos
    mark = np.isin(a, kinds)
    last = np.maximum.accumulate(np.where(mark, pos, -1)) if n else pos
    prev = np.empty(n, np.int64)
    if n:
        prev[0] = -1
        prev[1:] = last[:-1]
    valid = prev >= group_start
    before = valid & (a[np.where(valid, prev, 0)] == which) if n else np.zeros(0, bool)
    end = np.zeros(n, bool)
    if n:
        stop = np.r_[np.flatnonzero(start)[1:], n] - 1          # last position of each group
        lg = last[stop]
        ok = lg >= group_start[stop]
        sel = lg[ok]
        end[sel[a[sel] == which]] = True
    return before, end


_I64 = (1 << 63) - 1


def _clamp(v: int) -> int:
    """Values that do not fit a signed 64-bit column (never seen in real traces)."""
    return v if -_I64 <= v <= _I64 else (_I64 if v > 0 else -_I64)


def _trace_warnings(device: int, trace: Trace, segments: list[Segment]) -> list[str]:
    """Oddities worth telling the user: a ring buffer that wrapped, frees never completed."""
    out: list[str] = []
    if not len(trace):
        return out
    import numpy as np

    A, RQ, CP, SA, SM, SF = (trace.code_of(a) for a in ("alloc", "free_requested", "free_completed",
                                                         "segment_alloc", "segment_map", "segment_free"))
    act, addr = trace.action, trace.addr
    n_requested = int(np.count_nonzero(act == RQ)) if RQ >= 0 else 0
    n_completed = int(np.count_nonzero(act == CP)) if CP >= 0 else 0
    # Each address lives its own history: after sorting the entries by (address, index),
    # "is it live before this entry" is the kind of the last alloc/free_completed before it
    # in its group, and "was its free requested" the kind of the last free_requested/free_completed.
    a, ad, _ = _grouped(act, addr, [c for c in (A, RQ, CP) if c >= 0])
    a = a.astype(np.int16)                                # codes compare with -1 (absent) safely
    live_before, live_end = _last_is(a, ad, (A, CP), A)
    req_before, req_end = _last_is(a, ad, (RQ, CP), RQ)
    is_rq, is_cp = a == RQ, a == CP
    orphan_frees = int(np.count_nonzero(is_rq & ~live_before)) + int(np.count_nonzero(is_cp & ~req_before & ~live_before))
    completed_without_request = int(np.count_nonzero(is_cp & ~req_before & live_before))
    known = set(ad[live_end | req_end].tolist())
    sa, sad, _ = _grouped(act, addr, [c for c in (SA, SM, SF) if c >= 0])
    sa = sa.astype(np.int16)
    if SM >= 0:
        sa[sa == SM] = SA if SA >= 0 else SM            # a map opens a range like an alloc
    opener = SA if SA >= 0 else SM
    seg_before, _ = _last_is(sa, sad, (opener, SF), opener)
    orphan_segment_frees = int(np.count_nonzero((sa == SF) & ~seg_before)) if SF >= 0 else 0
    if orphan_frees or orphan_segment_frees:
        out.append(f"device {device}: trace starts mid-run ({orphan_frees} frees and {orphan_segment_frees} "
                   "segment frees whose allocation is not in the trace): the ring buffer was truncated by "
                   "max_entries, or history was enabled late; live state before the first entry is inferred")
    else:
        pre = sum(1 for s in segments for b in s.blocks
                  if b.state != "inactive" and b.address not in known)
        if pre:
            out.append(f"device {device}: {pre} live blocks were allocated before the trace starts "
                       "(history enabled late or ring buffer truncated)")
    if completed_without_request:
        out.append(f"device {device}: {completed_without_request} free_completed entries without free_requested")
    if n_requested and not n_completed:
        out.append(f"device {device}: the trace has free_requested but no free_completed entries "
                   "(skip_actions?); frees are treated as completed at once")
    return out
