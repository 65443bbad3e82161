"""Capture hook: record allocator history and dump a snapshot at the OOM.

In code::

    import oompost.record
    oompost.record.enable("crash/")          # before the model is built

or around a script::

    python -m oompost.record -o crash/ -- train.py --args ...

The snapshot is taken inside the allocator's OOM observer, *before* the
exception unwinds the stack, so it still holds the activations that were live
when the allocation failed (reference/pytorch.md §6).  It is written with plain
``pickle.dump`` of builtins (readable by pytorch.org/memory_viz) plus an
``oompost_meta`` key: the failed request, the limit (device total or the
``allowed`` cap), free device memory, rank, versions and ``memory_stats()``.

torch is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import os
import pickle
import runpy
import socket
import sys
import time
from typing import Any

_STATE: dict[str, Any] = {}


def _rank() -> int:
    for var in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    return 0


def enable(dir: str = "oompost-capture", *, max_entries: int = 100_000, stacks: str = "python",
           once: bool = True) -> None:
    """Start recording allocator history and dump a snapshot on the first OOM.

    ``max_entries`` bounds the trace ring buffer (and the pickle size);
    ``stacks="python"`` keeps dumps fast (C++ stacks can take minutes)."""
    import torch

    if not torch.cuda.is_available():
        return
    os.makedirs(dir, exist_ok=True)
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks=stacks)
    _STATE.update(dir=dir, once=once, dumped=0)

    def observer(device: int, alloc_size: int, device_total_or_allowed: int, device_free: int) -> None:
        if _STATE.get("once") and _STATE.get("dumped"):
            return
        _STATE["dumped"] = _STATE.get("dumped", 0) + 1
        dump(reason="oom", extra={"alloc_size": int(alloc_size), "limit": int(device_total_or_allowed),
                                  "device_free": int(device_free), "device": int(device)})

    torch._C._cuda_attach_out_of_memory_observer(observer)


def dump(reason: str = "manual", extra: dict[str, Any] | None = None, path: str | None = None) -> str:
    """Write the current snapshot (with ``oompost_meta``) and return its path."""
    import torch

    rank = _rank()
    out_dir = _STATE.get("dir", ".")
    if path is None:
        path = os.path.join(out_dir, f"snapshot_rank{rank}_{reason}.pickle")
    snap = torch.cuda.memory._snapshot()
    device = torch.cuda.current_device()
    meta: dict[str, Any] = {
        "reason": reason,
        "rank": rank,
        "host": socket.gethostname(),
        "time": time.time(),
        "torch": str(torch.__version__),          # TorchVersion is a class: keep the pickle builtins-only
        "cuda": str(torch.version.cuda),
        "device_name": torch.cuda.get_device_name(device),
        "device_total": int(torch.cuda.get_device_properties(device).total_memory),
        "memory_stats": {str(k): (int(v) if isinstance(v, int) else float(v))
                         for k, v in torch.cuda.memory_stats(device).items() if isinstance(v, (int, float))},
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", "")),
    }
    if extra:
        meta.update(extra)
    snap["oompost_meta"] = meta
    with open(path, "wb") as f:
        pickle.dump(snap, f)
    return path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out = "oompost-capture"
    if args[:1] in (["-o"], ["--output"]):
        out = args[1]
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m oompost.record [-o DIR] -- script.py [ARGS...]", file=sys.stderr)
        return 2
    enable(out)
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
