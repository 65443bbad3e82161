"""Snapshot pickle loading: the real 2.11 fixtures, older shapes, and hostile input."""

from __future__ import annotations

import gzip
import os
import pickle
import random
from dataclasses import replace
from pathlib import Path

import pytest

from oompost.errors import HostilePickleError, SnapshotError
from oompost.model import Frame
from oompost.parsers.snapshot import RestrictedUnpickler, decode_snapshot, load_snapshot, loads_restricted

DATA = Path(__file__).parent / "data" / "snapshots"
NATIVE = DATA / "torch2.11_native_fragmentation_oom_observer.pickle.gz"
EXP_OBS = DATA / "torch2.11_expandable_capacity_oom_observer.pickle.gz"
EXP_AFTER = DATA / "torch2.11_expandable_capacity_after_exception.pickle.gz"
MiB = 1 << 20


def raw(path: Path) -> dict:
    """The fixture as builtins (through the restricted unpickler: no plain pickle loading anywhere)."""
    return loads_restricted(gzip.decompress(path.read_bytes()))


def write(tmp_path: Path, obj: object, name: str = "snap.pickle", gz: bool = False) -> str:
    data = pickle.dumps(obj)
    p = tmp_path / name
    p.write_bytes(gzip.compress(data) if gz else data)
    return str(p)


# ------------------------------------------------------------------ fixtures


def test_native_fixture_decodes_every_field() -> None:
    s = load_snapshot(str(NATIVE))
    assert s.format == "dict"
    assert s.warnings == ()
    assert len(s.segments) == 1
    seg = s.segments[0]
    assert seg.total_size == 1_933_574_144
    assert seg.allocated_size == 900 * MiB
    assert (seg.segment_type, seg.stream, seg.pool_id, seg.is_expandable) == ("large", 0, (0, 0), False)
    assert len(seg.blocks) == 73
    assert sum(b.size for b in seg.blocks) == seg.total_size
    assert sum(1 for b in seg.blocks if b.state == "inactive") == 37
    # blocks are contiguous in address order
    for a, b in zip(seg.blocks, seg.blocks[1:]):
        assert a.address + a.size == b.address
    trace = s.traces[0]
    assert len(s.traces) == 1 and len(trace) == 149
    assert trace[0].action == "segment_alloc" and trace[0].size == 1_933_574_144
    oom = trace[-1]
    assert oom.action == "oom" and oom.size == 500 * MiB and oom.device_free == 147_623_903_232
    assert oom.time_us == 1796223887253230
    assert s.allocator_settings["expandable_segments"] is False
    assert s.expandable is False


def test_expandable_fixtures_decode() -> None:
    obs = load_snapshot(str(EXP_OBS))
    after = load_snapshot(str(EXP_AFTER))
    for s in (obs, after):
        assert s.expandable is True
        assert [x.total_size for x in s.segments] == [188_743_680, 167_772_160, 2_097_152]
        assert [x.segment_type for x in s.segments] == ["large", "large", "small"]
        assert all(x.is_expandable for x in s.segments)
    assert len(obs.traces[0]) == 54 and len(after.traces[0]) == 56
    assert [e.action for e in after.traces[0][-3:]] == ["oom", "snapshot", "snapshot"]
    maps = [e.size for e in obs.traces[0] if e.action == "segment_map"]
    assert len(maps) == 9 and maps[0] == 80 * MiB


def test_frames_are_interned() -> None:
    s = load_snapshot(str(NATIVE))
    seen: dict[tuple[str, str, int], object] = {}
    n = 0
    for e in s.traces[0]:
        for f in e.frames:
            n += 1
            key = (f.name, f.filename, f.line)
            assert seen.setdefault(key, f) is f
    assert n > 1000 and len(seen) < 100
    # blocks share the same Frame objects as trace entries
    block_frames = {id(f) for seg in s.segments for b in seg.blocks for f in b.frames}
    assert block_frames <= {id(f) for f in seen.values()}
    user = [f for f in s.traces[0][-1].frames if f.line > 0]
    assert ("repro/lab.py", 198, "<module>") in [(f.filename, f.line, f.name) for f in user]


def test_plain_and_gzipped_load_the_same(tmp_path: Path) -> None:
    p = tmp_path / "plain.pickle"
    p.write_bytes(gzip.decompress(NATIVE.read_bytes()))
    a = load_snapshot(str(p))
    b = load_snapshot(str(NATIVE))
    assert a.segments == b.segments and a.traces == b.traces


# ------------------------------------------------------------ other shapes


def test_segments_only_list(tmp_path: Path) -> None:
    """torch.cuda.memory_snapshot() returns only the segments list."""
    d = raw(NATIVE)
    s = load_snapshot(write(tmp_path, d["segments"]))
    ref = load_snapshot(str(NATIVE))
    assert s.format == "segments_only"
    assert s.traces == ()
    assert s.segments == ref.segments
    assert any("segments-only" in w for w in s.warnings)


def test_legacy_history_blocks(tmp_path: Path) -> None:
    """≤2.0 blocks: ``history`` instead of ``frames``/``requested_size``, and no addresses."""
    d = raw(NATIVE)
    for seg in d["segments"]:
        for b in seg["blocks"]:
            frames = b.pop("frames")
            req = b.pop("requested_size")
            del b["address"]
            b["history"] = [{"addr": 0, "real_size": req - 7, "frames": frames}] if b["state"] != "inactive" else []
        for k in ("segment_pool_id", "is_expandable", "requested_size", "active_size"):
            del seg[k]
    legacy = {"segments": d["segments"]}
    s = load_snapshot(write(tmp_path, legacy))
    ref = load_snapshot(str(NATIVE))
    assert s.format == "legacy_history"
    seg, rseg = s.segments[0], ref.segments[0]
    assert [b.address for b in seg.blocks] == [b.address for b in rseg.blocks]   # rebuilt from running sums
    live = [b for b in seg.blocks if b.state == "active_allocated"]
    assert all(b.requested_size == 25 * MiB - 7 for b in live)
    assert all(b.frames for b in live)
    assert seg.pool_id == (0, 0) and seg.is_expandable is False
    assert any("no device_traces" in w for w in s.warnings)


def test_states_missing_keys_unknown_actions_and_meta(tmp_path: Path) -> None:
    d = raw(EXP_OBS)
    d["segments"][0]["blocks"][0]["state"] = "active_awaiting_free"     # the docstring's spelling
    for seg in d["segments"]:
        del seg["segment_pool_id"], seg["is_expandable"]
    for e in d["device_traces"][0]:
        e.pop("time_us", None)
        e.pop("compile_context", None)
    d["device_traces"][0].append({"action": "user_defined", "addr": 0, "size": 0, "stream": 0,
                                  "user_metadata": "step 7"})
    d["oompost_meta"] = {"limit": 2 << 30, "rank": 3}
    d["future_key"] = [1, 2]
    s = load_snapshot(write(tmp_path, d))
    assert s.segments[0].blocks[0].state == "active_pending_free"
    assert all(x.pool_id == (0, 0) and x.is_expandable is False for x in s.segments)
    assert all(e.time_us is None for e in s.traces[0])
    last = s.traces[0][-1]
    assert (last.action, last.user_metadata) == ("user_defined", "step 7")
    assert any("user_defined" in w for w in s.warnings)
    assert s.meta["limit"] == 2 << 30 and s.meta["rank"] == 3 and s.meta["future_key"] == [1, 2]
    # settings still say expandable even though the segments lost their flag
    assert s.expandable is True


def test_missing_device_traces_warns(tmp_path: Path) -> None:
    d = raw(NATIVE)
    del d["device_traces"]
    s = load_snapshot(write(tmp_path, d))
    assert s.traces == ()
    assert any("no device_traces: allocator history was not recorded" in w for w in s.warnings)


def test_ring_buffer_truncation_warns(tmp_path: Path) -> None:
    d = raw(NATIVE)
    d["device_traces"][0] = d["device_traces"][0][10:]
    s = load_snapshot(write(tmp_path, d))
    assert any("trace starts mid-run" in w and "ring buffer" in w for w in s.warnings)


# ------------------------------------------------------------- hostile input


class _Evil:
    def __init__(self, sentinel: str) -> None:
        self.sentinel = sentinel

    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return (os.system, (f"touch {self.sentinel}",))


@pytest.mark.parametrize("gz", [False, True])
def test_hostile_pickle_is_refused_and_never_runs(tmp_path: Path, gz: bool) -> None:
    sentinel = tmp_path / "SENTINEL"
    path = write(tmp_path, _Evil(str(sentinel)), gz=gz)
    with pytest.raises(HostilePickleError) as ei:
        load_snapshot(path)
    assert "refusing to load" in str(ei.value) and "system" in str(ei.value)
    assert "only builtins" in str(ei.value)
    assert not sentinel.exists()


def test_hostile_object_nested_in_a_real_snapshot(tmp_path: Path) -> None:
    sentinel = tmp_path / "SENTINEL"
    d = raw(NATIVE)
    d["oompost_meta"] = {"x": _Evil(str(sentinel))}
    with pytest.raises(HostilePickleError):
        load_snapshot(write(tmp_path, d))
    assert not sentinel.exists()


def test_any_global_is_refused_even_harmless_ones(tmp_path: Path) -> None:
    import collections

    with pytest.raises(HostilePickleError, match="collections.deque"):
        load_snapshot(write(tmp_path, {"segments": [], "s": collections.deque([1])}))


def test_data_only_types_of_capture_hooks_become_builtins(tmp_path: Path) -> None:
    """memory_stats() is an OrderedDict and torch.__version__ a TorchVersion (a str
    subclass): hooks put both in snapshot metadata.  They load as dict and str;
    nothing is imported."""
    import collections

    class TorchVersion(str):
        pass

    TorchVersion.__module__, TorchVersion.__qualname__ = "torch.torch_version", "TorchVersion"
    import sys
    import types

    mod = types.ModuleType("torch.torch_version")
    mod.TorchVersion = TorchVersion
    saved = {k: sys.modules.get(k) for k in ("torch", "torch.torch_version")}
    if saved["torch"] is None:            # pickle imports the parent package first: stub it, do not import torch
        sys.modules["torch"] = types.ModuleType("torch")
    sys.modules["torch.torch_version"] = mod
    try:
        path = write(tmp_path, {"segments": [], "oompost_meta": {
            "stats": collections.OrderedDict(num_ooms=1), "torch": TorchVersion("2.11.0+cu130")}})
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    snap = load_snapshot(path)
    assert type(snap.meta["stats"]) is dict and snap.meta["stats"]["num_ooms"] == 1
    assert snap.meta["torch"] == "2.11.0+cu130" and isinstance(snap.meta["torch"], str)


def test_persistent_ids_are_refused(tmp_path: Path) -> None:
    import io

    class P(pickle.Pickler):
        def persistent_id(self, obj: object) -> str | None:
            return "storage0" if obj == "tensor" else None

    buf = io.BytesIO()
    P(buf).dump({"segments": [], "x": "tensor"})
    p = tmp_path / "pid.pickle"
    p.write_bytes(buf.getvalue())
    with pytest.raises(HostilePickleError, match="persistent"):
        load_snapshot(str(p))


def test_copyreg_extension_codes_are_refused(tmp_path: Path) -> None:
    """EXT1/EXT2/EXT4 reach globals through the copyreg registry, not GLOBAL: still refused."""
    import copyreg

    sentinel = tmp_path / "SENTINEL"
    copyreg.add_extension("posix", "system", 0xF0)
    try:
        data = pickle.dumps(_Evil(str(sentinel)), protocol=2)
        assert pickle.EXT1 in data
        p = tmp_path / "ext.pickle"
        p.write_bytes(data)
        with pytest.raises(HostilePickleError):
            load_snapshot(str(p))
    finally:
        copyreg.remove_extension("posix", "system", 0xF0)
    assert not sentinel.exists()


def test_restricted_unpickler_is_an_unpickler_subclass() -> None:
    assert issubclass(RestrictedUnpickler, pickle.Unpickler)


# ------------------------------------------------------------- broken input


def test_truncated_pickle(tmp_path: Path) -> None:
    data = gzip.decompress(NATIVE.read_bytes())
    p = tmp_path / "cut.pickle"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotError) as ei:
        load_snapshot(str(p))
    msg = str(ei.value)
    assert not isinstance(ei.value, HostilePickleError)
    assert "\n" not in msg and "truncated" in msg and "_dump_snapshot" in msg


def test_truncated_gzip(tmp_path: Path) -> None:
    data = NATIVE.read_bytes()
    p = tmp_path / "cut.pickle.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotError) as ei:
        load_snapshot(str(p))
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("payload", [b"\x80\x04garbage garbage garbage", random.Random(0).randbytes(4096), b"not a pickle\n",
                                     b"PK\x03\x04 zip archive body"])
def test_garbage_bytes(tmp_path: Path, payload: bytes) -> None:
    p = tmp_path / "junk.bin"
    p.write_bytes(payload)
    with pytest.raises(SnapshotError) as ei:
        load_snapshot(str(p))
    assert "\n" not in str(ei.value)


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.pickle"
    p.write_bytes(b"")
    with pytest.raises(SnapshotError, match="empty"):
        load_snapshot(str(p))


@pytest.mark.parametrize("obj", [42, "segments", (1, 2), {"device_traces": []}, {"segments": "nope"}])
def test_wrong_top_level(tmp_path: Path, obj: object) -> None:
    with pytest.raises(SnapshotError) as ei:
        load_snapshot(write(tmp_path, obj))
    assert not isinstance(ei.value, HostilePickleError)


# ------------------------------------------------------------------ columns


def _entries(n: int) -> list[dict]:
    frames_a = [{"name": "f", "filename": "a.py", "line": 1}, {"name": "g", "filename": "b.py", "line": 2}]
    frames_b = [{"name": "h", "filename": "c.py", "line": 3}]
    out = []
    for i in range(n):
        addr = 0x7F0000000000 + (i // 3) * 4096
        action = ("alloc", "free_requested", "free_completed")[i % 3]
        out.append({"action": action, "addr": addr, "size": 512 * (1 + i % 7), "stream": 0, "time_us": 10 * i,
                    "frames": list(frames_a if i % 2 else frames_b)})      # a fresh list of shared frame dicts
    out.append({"action": "oom", "addr": 0, "size": 1 << 30, "stream": 0, "time_us": None, "device_free": 123,
                "frames": []})
    return out


def test_trace_is_columns_that_read_back_as_events() -> None:
    """The C-level column path and the tolerant entry-by-entry path agree, across chunk borders."""
    from oompost.model import Trace, TraceEvent
    from oompost.parsers import snapshot as sp

    raw = {"segments": [], "device_traces": [_entries(3 * sp._CHUNK + 5)]}
    fast = decode_snapshot(raw).traces[0]
    bad = _entries(3 * sp._CHUNK + 5)
    bad[7]["size"] = "1024"                 # a string number: its chunk takes the tolerant path
    slow = decode_snapshot({"segments": [], "device_traces": [bad]}).traces[0]
    assert isinstance(fast, Trace) and len(fast) == len(slow) == 3 * sp._CHUNK + 6
    assert slow[7].size == 1024
    for i in (0, 1, 2, sp._CHUNK - 1, sp._CHUNK, 2 * sp._CHUNK + 1, len(fast) - 1):
        assert fast[i] == (replace(slow[i], size=fast[i].size) if i == 7 else slow[i])
    assert fast[1].frames == (Frame("a.py", 1, "f"), Frame("b.py", 2, "g"))
    assert fast[-1] == TraceEvent("oom", 0, 1 << 30, 0, None, (), device_free=123)
    assert len(fast.stacks) == 3                      # empty + the two distinct stacks, not one per entry
    assert fast.size.dtype.name == "int64" and not fast.size.flags.writeable
    assert [e.action for e in fast[:3]] == ["alloc", "free_requested", "free_completed"]


def test_loading_frees_the_raw_entries_as_it_goes() -> None:
    entries = _entries(1000)
    raw = {"segments": [], "device_traces": [entries]}
    decode_snapshot(raw)
    assert len(entries) == 1001                       # decode_snapshot leaves a caller's data alone
    snap = decode_snapshot(raw, consume=True)
    assert entries == [] and len(snap.traces[0]) == 1001


def test_hand_built_traces_become_columns_too() -> None:
    from oompost.model import Snapshot, Trace, TraceEvent

    ev = (TraceEvent("alloc", 4096, 512, 0, 1), TraceEvent("oom", 0, 1 << 20, 0, None, device_free=7))
    s = Snapshot("x", (), (ev,), {}, {})
    assert isinstance(s.traces[0], Trace) and tuple(s.traces[0]) == ev
    assert s.traces[0].actions == ("alloc", "oom") and s.traces[0][1].device_free == 7


def test_stacks_that_share_their_innermost_frame_stay_apart() -> None:
    """Entries are matched to stacks by (length, innermost frame) and confirmed frame by frame."""
    inner = {"name": "f", "filename": "a.py", "line": 1}
    one = [inner, {"name": "g", "filename": "b.py", "line": 2}]
    two = [inner, {"name": "h", "filename": "c.py", "line": 3}]          # same length, same innermost frame
    entries = [{"action": "alloc", "addr": 4096 * i, "size": 512, "stream": 0, "time_us": i,
                "frames": list(one if i % 3 else two)} for i in range(100)]
    t = decode_snapshot({"segments": [], "device_traces": [entries]}).traces[0]
    assert [e.frames[1].name for e in t[:4]] == ["h", "g", "g", "h"]
    assert len(t.stacks) == 3
