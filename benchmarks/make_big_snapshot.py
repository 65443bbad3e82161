#!/usr/bin/env python
"""Build a big memory snapshot by extending a real one, for the snapshot benchmarks.

    python benchmarks/make_big_snapshot.py SOURCE.pickle[.gz] OUT.pickle --mb 500

How: the allocator state (live blocks, pending frees, mapped segments) is
fingerprinted after every trace entry; the longest stretch of the real trace
that starts and ends in the same state (a training step, typically) is a
closed loop, so repeating it any number of times, just before the state it
returns to, gives a trace the real program could have produced: the segment
events, the OOM, the final segments and therefore the verdict are those of the
original.  Repeated entries are fresh dicts (their own ``time_us``, shifted by
the loop's duration) with their own frame lists of the original's frame
dicts: a trace recorded for longer repeats its frames, not its lists, and
this gives ~200 bytes per entry, as in issue 8's 467 MiB / 2.47 M-entry file
(``--share-frame-lists`` shares the lists too: ~80 bytes per entry).

The generated file is big: write it to a temporary directory, never commit it.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import pickle
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from oompost.parsers.snapshot import RestrictedUnpickler, _VersionString  # noqa: E402

MASK = (1 << 64) - 1


class _Pickler(pickle.Pickler):
    """Writes the data-only ``TorchVersion`` strings back as torch wrote them."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is _VersionString:
            from torch.torch_version import TorchVersion

            return TorchVersion, (str(obj),)
        return NotImplemented


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=4).dump(obj)
    return buf.getvalue()


def load_raw(path: str) -> Any:
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return RestrictedUnpickler(io.BytesIO(data)).load()


def closed_loop(trace: list[dict]) -> tuple[int, int]:
    """(start, end): trace[start:end] leaves the allocator state as it found it;
    the longest such stretch before the first oom/snapshot entry."""
    live: dict[int, int] = {}
    h_live = h_pend = h_seg = 0
    first: dict[tuple[int, int, int], int] = {(0, 0, 0): 0}
    best = (0, 0)
    for j, e in enumerate(trace):
        a = e.get("action")
        if a in ("oom", "snapshot"):
            break
        addr, size = e.get("addr", 0), e.get("size", 0)
        if a == "alloc":
            live[addr] = size
            h_live = (h_live + hash((addr, size))) & MASK
        elif a == "free_requested":
            sz = live.pop(addr, None)
            if sz is not None:
                h_live = (h_live - hash((addr, sz))) & MASK
            h_pend = (h_pend + hash(addr)) & MASK
        elif a == "free_completed":
            h_pend = (h_pend - hash(addr)) & MASK
        elif a in ("segment_alloc", "segment_map"):
            h_seg = (h_seg + hash((addr, size))) & MASK
        elif a in ("segment_free", "segment_unmap"):
            h_seg = (h_seg - hash((addr, size))) & MASK
        key = (h_live, h_pend, h_seg)
        i = first.setdefault(key, j + 1)
        if j + 1 - i > best[1] - best[0]:
            best = (i, j + 1)
    return best


def _copy(e: dict, shift: int, share_lists: bool) -> dict:
    c = dict(e)
    if isinstance(c.get("time_us"), int):
        c["time_us"] += shift
    if not share_lists and isinstance(c.get("frames"), list):
        c["frames"] = list(c["frames"])
    return c


def extend(raw: dict, target_bytes: int, device: int | None = None,
           share_lists: bool = False) -> tuple[dict, dict[str, int]]:
    """A copy of ``raw`` whose trace repeats its longest closed loop until the
    pickle is about ``target_bytes``."""
    traces = raw["device_traces"]
    dev = device if device is not None else max(range(len(traces)), key=lambda d: len(traces[d]))
    trace = traces[dev]
    start, end = closed_loop(trace)
    if end - start < 2:
        raise SystemExit("no repeatable stretch found in the trace")
    base = len(_dumps(raw))
    loop = trace[start:end]
    one = [_copy(e, 1, share_lists) for e in loop]
    two = [_copy(e, 2, share_lists) for e in loop]
    filler = [f"m{i}" for i in range(300)]    # memo indices past 255: 4-byte memo refs, as in a big file
    per_loop = (len(_dumps([filler, loop, one, two])) - len(_dumps([filler, loop]))) // 2
    reps = max(1, (target_bytes - base) // max(per_loop, 1))
    t0 = next((e["time_us"] for e in loop if isinstance(e.get("time_us"), int)), 0)
    t1 = next((e["time_us"] for e in reversed(loop) if isinstance(e.get("time_us"), int)), t0)
    nxt = next((e["time_us"] for e in trace[end:] if isinstance(e.get("time_us"), int)), t1)
    dt = max(1, t1 - t0 + max(1, nxt - t1))
    out: list[dict] = list(trace[:end])
    for r in range(1, reps + 1):
        shift = r * dt
        out.extend(_copy(e, shift, share_lists) for e in loop)
    out.extend(_copy(e, reps * dt, True) for e in trace[end:])
    new = dict(raw)
    new["device_traces"] = [out if d == dev else t for d, t in enumerate(traces)]
    return new, {"device": dev, "loop_start": start, "loop_end": end, "repeats": reps,
                 "events_before": len(trace), "events_after": len(out)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=500)
    ap.add_argument("--share-frame-lists", action="store_true")
    a = ap.parse_args()
    raw = load_raw(a.source)
    new, info = extend(raw, int(a.mb * 2**20), share_lists=a.share_frame_lists)
    with open(a.out, "wb") as f:
        _Pickler(f, protocol=4).dump(new)
    info["bytes"] = os.path.getsize(a.out)
    print(" ".join(f"{k}={v}" for k, v in info.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
