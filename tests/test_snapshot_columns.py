"""The compiled snapshot decoder (``parsers/_snapcols.c``) against the pure-Python path.

Both must give identical snapshots — columns, interned stacks, extras,
segments, warnings — on every real snapshot we have and on odd hand-made ones;
the compiled reader must never import or call anything from a file, and must
hand anything outside its opcode subset to the restricted unpickler.  Without
the extension (a build without a compiler) the comparisons are skipped and
the fallback is what every other test exercises."""

from __future__ import annotations

import gzip
import io
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from oompost.errors import HostilePickleError, SnapshotError
from oompost.model import Snapshot
from oompost.parsers import snapshot_columns
from oompost.parsers.snapshot import _DATA_ONLY, load_snapshot

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = sorted([*ROOT.glob("sample_logs/*/*.pickle*"), *(Path(__file__).parent / "data" / "snapshots").glob("*.pickle*"),
                    *(ROOT.parent / "shared" / "reference" / "snapshots").glob("*.pickle*"),
                    *(ROOT.parents[1] / "shared" / "reference" / "snapshots").glob("*.pickle*")])
needs_ext = pytest.mark.skipif(snapshot_columns._snapcols is None, reason="C extension not built")


def _fingerprint(s: Snapshot) -> Any:
    traces = [(t.actions, t.stacks, t.extra, [c.tolist() for c in (t.action, t.addr, t.size, t.stream, t.time_us,
                                                                    t.stack)]) for t in s.traces]
    return traces, s.segments, s.warnings, s.meta, s.allocator_settings, s.format, s.external_annotations


def _both(path: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    with monkeypatch.context() as m:
        m.setenv("OOMPOST_NO_SNAPCOLS", "1")
        slow = _outcome(path)
    m2 = monkeypatch
    m2.delenv("OOMPOST_NO_SNAPCOLS", raising=False)
    return slow, _outcome(path)


def _outcome(path: str) -> Any:
    try:
        return _fingerprint(load_snapshot(path))
    except (SnapshotError, HostilePickleError) as e:
        return type(e).__name__, str(e)


def _decodes_fast(data: bytes) -> bool:
    """Whether the compiled reader takes ``data`` (whatever OOMPOST_NO_SNAPCOLS says)."""
    ext = snapshot_columns._snapcols
    try:
        ext.decode(io.BytesIO(data), dict(_DATA_ONLY))
    except ext.Unsupported:
        return False
    return True


@needs_ext
@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_extension_and_fallback_agree_on_every_snapshot(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    assert _decodes_fast(data), "a real snapshot fell back to the slow path"
    slow, fast = _both(str(path), monkeypatch)
    assert slow == fast


def _entry(i: int, frames: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    e = {"action": ["alloc", "free_requested", "free_completed"][i % 3], "addr": 0x7F0000000000 + 512 * (i // 3),
         "size": 512 * (i % 7 + 1), "stream": 0, "time_us": 1000 + i, "frames": frames}
    e.update(kw)
    return e


def _odd_snapshot() -> dict[str, Any]:
    fa = {"name": "f", "filename": "a.py", "line": 1}
    fb = {"name": "g", "filename": "b.py", "line": 2}
    shared = [fa, fb]
    entries: list[Any] = []
    for i in range(3000):
        frames = shared if i % 2 else [dict(fa), {"name": "g", "filename": "b.py", "line": 2 + i % 5}]
        entries.append(_entry(i, frames if i % 11 else []))
    entries[5]["time_us"] = None
    del entries[6]["time_us"]
    del entries[7]["frames"]
    entries[8]["user_metadata"] = "step 3"
    entries[9] = {**entries[9], "action": "oom", "device_free": 123}
    entries[10]["pool_id"] = (1, 2)
    entries[12]["compile_context"] = "N/A"
    entries.append(_entry(3001, shared, action="segment_map"))
    return {"segments": [{"device": 0, "address": 0x7F0000000000, "total_size": 2 << 20, "allocated_size": 512,
                          "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                          "blocks": [{"address": 0x7F0000000000, "size": 2 << 20, "requested_size": 1,
                                      "state": "inactive", "frames": shared}]}],
            "device_traces": [entries, [], [_entry(1, [fb])]],
            "allocator_settings": {"expandable_segments": False}, "oompost_meta": {"rank": 0}}


@needs_ext
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_odd_entries_agree(tmp_path: Path, protocol: int, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "snap.pickle"
    data = pickle.dumps(_odd_snapshot(), protocol=protocol)
    p.write_bytes(data)
    assert _decodes_fast(data)
    slow, fast = _both(str(p), monkeypatch)
    assert slow == fast


@needs_ext
@pytest.mark.parametrize("change", ["bool_addr", "none_stream", "huge_size", "float_time", "non_dict_item",
                                    "tuple_frames", "shared_entry", "nested_trace_list", "protocol0"])
def test_values_the_columns_do_not_take_fall_back_with_the_same_result(
        tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = _odd_snapshot()
    entries = snap["device_traces"][0]
    protocol = 4
    if change == "bool_addr":
        entries[20]["addr"] = True
    elif change == "none_stream":
        entries[20]["stream"] = None
    elif change == "huge_size":
        entries[20]["size"] = 1 << 70
    elif change == "float_time":
        entries[20]["time_us"] = 1.5
    elif change == "non_dict_item":
        entries.insert(30, "junk")
    elif change == "tuple_frames":
        entries[20]["frames"] = tuple(entries[20]["frames"])
    elif change == "shared_entry":
        entries.append(entries[0])                 # the same dict twice: a memo reference to a consumed entry
    elif change == "nested_trace_list":
        snap["oompost_meta"]["copy"] = [dict(entries[0])]
    else:
        protocol = 0
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=protocol))
    slow, fast = _both(str(p), monkeypatch)
    assert slow == fast


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


@needs_ext
def test_hostile_pickles_are_declined_and_run_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    snap = _odd_snapshot()
    snap["x"] = _RunsCode(marker)
    for data in (pickle.dumps(snap, protocol=4), pickle.dumps(_RunsCode(marker), protocol=2),
                 b"\x80\x02N" + b"r" + (1_260_480_601).to_bytes(4, "little") + b".",      # memo bomb
                 b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x012\x85R.",              # a harmless global
                 pickle.dumps(_odd_snapshot(), protocol=4)[:5000]):                         # truncated
        assert not _decodes_fast(data)
    assert not marker.exists()
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    with pytest.raises(HostilePickleError):
        load_snapshot(str(p))
    assert not marker.exists()


@needs_ext
def test_data_only_types_are_built_without_importing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OrderedDict (memory_stats()) goes through STACK_GLOBAL + REDUCE; the real
    samples carry torch's TorchVersion (STACK_GLOBAL + NEWOBJ) and take the fast path."""
    from collections import OrderedDict

    snap = _odd_snapshot()
    snap["oompost_meta"]["stats"] = OrderedDict([("a", 1), ("b", [2])])
    data = pickle.dumps(snap, protocol=4)
    assert _decodes_fast(data)
    p = tmp_path / "snap.pickle"
    p.write_bytes(data)
    slow, fast = _both(str(p), monkeypatch)
    assert slow == fast


@needs_ext
def test_short_reads_give_the_same_columns() -> None:
    """A stream that returns fewer bytes than asked (a pipe) is read until it ends."""
    class Trickle(io.BytesIO):
        def read(self, n: int | None = -1) -> bytes:
            return super().read(7)

    ext = snapshot_columns._snapcols
    data = pickle.dumps(_odd_snapshot(), protocol=4)
    _, whole, _ = ext.decode(io.BytesIO(data), dict(_DATA_ONLY))
    _, trickled, _ = ext.decode(Trickle(data), dict(_DATA_ONLY))
    assert [row[1:8] for row in whole] == [row[1:8] for row in trickled]


def _s(text: str) -> bytes:
    b = text.encode()
    return b"\x8c" + bytes([len(b)]) + b


def test_a_frame_changed_after_its_entry_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written pickle that adds to a frame dict after an entry used it (no
    pickler writes this): the Python path sees the changed frame, so the compiled
    reader must decline rather than keep the interned one."""
    frame = b"}q\x06(" + _s("name") + _s("f") + _s("filename") + _s("a.py") + _s("line") + b"K\x01u"
    entry = (b"}q\x04(" + _s("action") + _s("alloc") + _s("addr") + b"K\x10" + _s("size") + b"K\x20"
             + _s("frames") + b"]q\x05(" + frame + b"eu")
    data = (b"\x80\x04}q\x00(" + _s("segments") + b"]q\x01" + _s("device_traces") + b"]q\x02(]q\x03("
            + entry + b"ee" + _s("x") + b"h\x06(" + _s("line") + b"K\x02u" + b"u.")
    p = tmp_path / "snap.pickle"
    p.write_bytes(data)
    if snapshot_columns._snapcols is not None:
        unchanged = data.replace(b"h\x06(" + _s("line") + b"K\x02u", b"h\x06")
        assert _decodes_fast(unchanged)            # the same file without the change takes the fast path
        assert not _decodes_fast(data)
        slow, fast = _both(str(p), monkeypatch)
        assert slow == fast
    snap = load_snapshot(str(p))
    assert snap.traces[0].stacks[snap.traces[0].stack[0]][0].line == 2
