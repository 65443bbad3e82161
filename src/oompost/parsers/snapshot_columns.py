"""The compiled path of ``load_snapshot``: the pickle stream read straight into columns.

``oompost.parsers._snapcols`` (optional C extension, built by setup.py) reads a
snapshot pickle opcode by opcode — only those Python's pickler emits for
builtin data; nothing in the file is imported or called — and turns each
device trace's entries into C arrays as they arrive, so no Python object per
event outlives its own entry.  ``decode_columns`` returns the raw pickle with
its trace lists left empty plus one ``Trace`` per trace list, or ``None`` when
the extension is missing or the file holds anything outside that subset; the
caller then loads it with ``RestrictedUnpickler`` (which refuses or reports
what the fast path declined).  Set ``OOMPOST_NO_SNAPCOLS=1`` to force the
fallback."""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from ..model import NO_TIME, Frame, Trace

try:  # pragma: no cover - depends on the build
    from . import _snapcols
except ImportError:  # pragma: no cover - no compiler at install time
    _snapcols = None


def available() -> bool:
    """Whether the compiled decoder is built and not switched off."""
    return _snapcols is not None and not os.environ.get("OOMPOST_NO_SNAPCOLS")


class Columns:
    """One device trace as the extension left it: raw column bytes and tables."""

    __slots__ = ("list_id", "action", "addr", "size", "stream", "time_us", "stack", "names", "order", "extras")

    def __init__(self, row: tuple[Any, ...]) -> None:
        (self.list_id, self.action, self.addr, self.size, self.stream, self.time_us, self.stack,
         self.names, self.order, self.extras) = row

    def trace(self, stacks: list[tuple[Frame, ...]], extra_of: Any) -> Trace:
        """A ``Trace``; ``stacks[g]`` is the interned stack of global stack id ``g``;
        ``extra_of(entry)`` gives an entry's (device_free, pool_id, user_metadata) or None."""
        import numpy as np

        cols = [np.frombuffer(b, dt) for b, dt in ((self.action, np.uint8), (self.addr, np.int64),
                                                   (self.size, np.int64), (self.stream, np.int64),
                                                   (self.time_us, np.int64), (self.stack, np.int32))]
        assert NO_TIME == -(1 << 63)                     # the extension writes INT64_MIN for a missing time
        extra = {}
        for i, entry in self.extras:
            v = extra_of(entry)
            if v is not None:
                extra[i] = v
        local = [() if g < 0 else stacks[g] for g in self.order]
        return Trace(*cols, actions=tuple(self.names), stacks=tuple(local), extra=extra)


def decode_columns(f: BinaryIO, safe_types: dict[tuple[str, str], type]) -> tuple[Any, list[Columns], list[Any]] | None:
    """``(raw, columns, frame_lists)`` or ``None`` (no extension, or a stream it does not take)."""
    if not available():
        return None
    try:
        raw, rows, frame_lists = _snapcols.decode(f, dict(safe_types))
    except _snapcols.Unsupported:
        return None
    return raw, [Columns(r) for r in rows], frame_lists
