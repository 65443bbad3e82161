#!/usr/bin/env python
"""Does an OOM observer alone turn an OOM in backward into ``SystemError``?

    python observer_probe.py {none|noop|python|stats|device|import|snapshot|rec_PART|hist_CONTEXT_N} ARGS...

Runs hf_trainer.py's main() after attaching, through torch's
``_cuda_attach_out_of_memory_observer``: nothing (``none``), a function that
returns at once (``noop``), or one that runs ordinary Python with a caught
exception inside (``python``), or one piece of what oompost.record's
observer does: ``torch.cuda.memory_stats()`` (``stats``), the current
device and its properties (``device``), a failing ``import deepspeed``
(``import``), ``torch.cuda.memory._snapshot()`` (``snapshot``).  Written
on 2026-12-04 when a capture with oompost.record on ended in "SystemError:
<built-in method run_backward ...> returned NULL without setting an
exception" where the same run without it raised torch.OutOfMemoryError.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main() -> int:
    mode = sys.argv.pop(1)
    import torch

    if mode == "noop":
        torch._C._cuda_attach_out_of_memory_observer(lambda *a: None)
    elif mode == "python":
        def observer(*a: int) -> None:
            try:
                raise ValueError("inside the observer")
            except ValueError:
                pass
            print(f"[probe] observer called {a}", flush=True)
        torch._C._cuda_attach_out_of_memory_observer(observer)
    elif mode in ("stats", "device", "import", "snapshot"):
        def observer(*a: int) -> None:
            try:
                if mode == "stats":
                    torch.cuda.memory_stats(0)
                elif mode == "device":
                    torch.cuda.get_device_properties(torch.cuda.current_device())
                elif mode == "import":
                    try:
                        import deepspeed  # noqa: F401
                    except Exception:
                        pass
                else:
                    torch.cuda.memory._snapshot()
            except Exception as e:  # noqa: BLE001
                print(f"[probe] {mode}: {type(e).__name__}: {e}", flush=True)
            print(f"[probe] {mode} observer done", flush=True)
        torch._C._cuda_attach_out_of_memory_observer(observer)
    elif mode.startswith("hist_"):
        # allocator history alone, no observer: hist_<context>_<max_entries>
        _, context, entries = mode.split("_")
        torch.cuda.memory._record_memory_history(max_entries=int(entries), stacks="python",
                                                 context=None if context == "none" else context)
    elif mode.startswith("rec_"):
        # oompost.record itself, history off, its observer doing only one part of its work
        sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))
        import oompost.record as record

        rec = record.enable("/tmp/probe_rec", max_entries=0)
        part = mode[4:]

        def on_oom(device: int, alloc_size: int, limit: int, device_free: int) -> None:
            if part == "meta":
                rec._meta()
            elif part == "hostname":
                import socket
                socket.gethostname()
            elif part == "backend":
                record._allocator_backend(torch)
            elif part == "conf":
                record.alloc_conf()
            elif part == "dist":
                torch.distributed.is_available() and torch.distributed.is_initialized()
            elif part == "engine":
                rec._engine()
            elif part == "full":
                type(rec)._on_oom(rec, device, alloc_size, limit, device_free)
            print(f"[probe] {mode} done", flush=True)
        rec._on_oom = on_oom
    import hf_trainer

    return hf_trainer.main()


if __name__ == "__main__":
    sys.exit(main())
