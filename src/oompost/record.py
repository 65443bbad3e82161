"""Capture hook: leave it on in every job, and the next OOM leaves evidence.

In code (also a context manager)::

    import oompost
    oompost.record(dir="crash/")                 # before the model is built
    with oompost.record(dir="crash/") as rec:    # or around the training loop
        ...
        rec.watch(model_or_engine)               # optional: parameter count, DeepSpeed config

around a script (also as the module torchrun or the DeepSpeed launcher starts)::

    python -m oompost.record -o crash/ -- train.py --args ...
    torchrun --nproc-per-node 8 -m oompost.record -o crash/ -- train.py ...
    deepspeed --module oompost.record -o crash/ -- train.py ...

and for the HuggingFace Trainer, ``oompost.integrations.hf.OompostCallback``.

What each rank ``R`` writes into the directory (rank in every name):

- ``snapshot_rankR_oom.pickle`` — the allocator snapshot taken inside PyTorch's
  OOM observer, *before* the exception unwinds the activations, as plain
  builtins (readable by pytorch.org/memory_viz) plus an ``oompost_meta`` key:
  the failed request, the limit (device total or the ``allowed`` cap), free
  memory, rank, versions and ``memory_stats()``.
- ``steps_rankR.jsonl`` — one line per optimizer step (allocated, reserved and
  their peaks so far), found by a global ``torch.optim`` step hook, so
  ``oompost analyze`` tells a leak from a spike without any log.  Bounded:
  after ``max_step_lines`` lines only every 2nd, 4th, … step is kept.
- ``meta_rankR.json`` — versions, device, ``PYTORCH_CUDA_ALLOC_CONF``, world
  size and rank, parameter count, ``memory_stats()`` (rewritten atomically at
  the first step and at the OOM).
- ``ds_config.json`` — the DeepSpeed engine's config, when an engine exists.

Safe to leave on: without CUDA, or with ``backend:cudaMallocAsync`` (which
keeps no allocator history), it warns once and records what it can; an error
inside the hook is a warning, never a crash of the user's job.  torch is
imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import types
import warnings
from typing import Any

from .atomic import write_atomic

__all__ = ["Recorder", "enable", "disable", "dump", "main", "active"]

GiB = 1024**3
USAGE = "usage: python -m oompost.record [-o DIR] [--max-entries N] [--stacks python|all] -- script.py [ARGS...]"
_ACTIVE: "Recorder | None" = None
_OBSERVER_ATTACHED = False


class RecordWarning(UserWarning):
    """oompost.record could not record something; the job goes on."""


def _warn(msg: str) -> None:
    warnings.warn(f"oompost.record: {msg}", RecordWarning, stacklevel=3)


def _env_int(*names: str) -> int | None:
    for var in names:
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    return None


def _rank() -> int:
    r = _env_int("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "LOCAL_RANK")
    return 0 if r is None else r


def _world_size() -> int:
    w = _env_int("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")
    return 1 if w is None else w


def _is_alloc_conf_error(e: BaseException) -> bool:
    """The allocator refused its settings (``CachingAllocator option max_split_size_mb too small``,
    ``Unrecognized CachingAllocator option``, ``Expected ... in PYTORCH_CUDA_ALLOC_CONF``)."""
    text = str(e)
    return isinstance(e, (ValueError, RuntimeError)) and (
        "CachingAllocator option" in text or "PYTORCH_CUDA_ALLOC_CONF" in text or "allocator config" in text.lower())


def alloc_conf() -> str:
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", ""))


def _numbers(d: dict[Any, Any]) -> dict[str, int | float]:
    return {str(k): (int(v) if isinstance(v, int) else float(v)) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


class Recorder:
    """One recording session (see the module docstring).  ``oompost.record(...)``
    returns one, already started; ``with`` stops it on exit."""

    def __init__(self, dir: str = "oompost-capture", *, max_entries: int = 100_000, stacks: str = "python",
                 once: bool = True, steps: bool = True, max_step_lines: int = 20_000,
                 context: str = "alloc") -> None:
        self.dir = os.fspath(dir)
        self.max_entries = int(max_entries)
        self.stacks = stacks
        # torch's history context: "alloc" (stacks at allocations only; oompost pairs each free with its
        # allocation's stack itself) or "all" (at frees too, torch's default).  "alloc" is the default:
        # with "all", torch 2.11 turns an OOM inside backward's checkpoint recomputation into
        # "SystemError: ... run_backward ... returned NULL without setting an exception" (the job loses
        # its OOM message; tools/capture/observer_probe.py, docs/record.md); "alloc" keeps the OOM.
        # The overhead of the two is the same within the noise (docs/record.md).
        self.context = context
        self.once = once
        self.auto_steps = steps
        self.max_step_lines = int(max_step_lines)
        self.rank = _rank()
        self.world_size = _world_size()
        self.enabled = False            # recording anything at all
        self.history = False            # allocator history (snapshot trace) on
        self.dumped: list[str] = []
        self.step_count = 0
        self._lines = 0
        self._stride = 1
        self._steps_file: Any = None
        self._hook: Any = None
        self._torch: Any = None
        self._watched: Any = None
        self._params: int | None = None
        self._ds_config: dict[str, Any] | None = None
        self._meta_written_at_step = False
        self._failed_hook = False
        self.extra_meta: dict[str, Any] = {}   # builtins only (it goes into the snapshot pickle)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> "Recorder":
        global _ACTIVE
        if self.enabled:
            return self
        torch = _import_torch()
        if torch is None:
            _warn("torch is not installed: it records nothing")
            return self
        self._torch = torch
        if not torch.cuda.is_available():
            _warn("no CUDA device: it records nothing")
            return self
        os.makedirs(self.dir, exist_ok=True)
        if "cudaMallocAsync" in alloc_conf() or _allocator_backend(torch) == "cudaMallocAsync":
            _warn("backend:cudaMallocAsync keeps no allocator history: no snapshot at the OOM, "
                  "only per-step memory and metadata")
        else:
            try:
                torch.cuda.memory._record_memory_history(max_entries=self.max_entries, stacks=self.stacks,
                                                        context=self.context)
                self.history = True
            except Exception as e:  # an allocator or torch version that cannot record
                if _is_alloc_conf_error(e):
                    # PYTORCH_CUDA_ALLOC_CONF was rejected while the allocator initialised: the job's first
                    # CUDA allocation fails with this very error anyway, and carrying on past a half-made
                    # allocator ends in a segmentation fault (seen on torch 2.11, H200).  Fail as the job
                    # would without us, with the error that says what to fix.
                    _warn(f"PYTORCH_CUDA_ALLOC_CONF={alloc_conf()!r} was rejected by the allocator: {e}")
                    raise
                _warn(f"allocator history unavailable ({type(e).__name__}: {e}); recording steps and metadata only")
        if self.history:
            _attach_observer(torch)                 # (cudaMallocAsync has no OOM observer either)
        if self.auto_steps:
            try:
                # the global hook: every torch.optim optimizer (also the ones DeepSpeed and HF wrap)
                self._hook = _optim_module(torch).register_optimizer_step_post_hook(self._on_optimizer_step)
            except Exception as e:
                _warn(f"cannot hook optimizer steps ({e})")
        self.enabled = True
        _ACTIVE = self
        self._write_meta(reason="start")
        return self

    def stop(self) -> None:
        """Stop recording (allocator history off, hooks removed, files closed)."""
        global _ACTIVE
        if not self.enabled:
            return
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.history:
            try:
                self._torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:
                pass
            self.history = False
        if self._steps_file is not None:
            self._steps_file.close()
            self._steps_file = None
        self.enabled = False
        if _ACTIVE is self:
            _ACTIVE = None

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None and self.enabled and type(exc).__name__ == "OutOfMemoryError" and not self.dumped:
            # an OOM the observer did not see (e.g. another allocator): keep what we can
            self._safe(lambda: self.dump(reason="oom_exception"))
        self._safe(lambda: self._write_meta(reason="exit"))
        self.stop()

    # --------------------------------------------------------------- public

    def watch(self, obj: Any) -> None:
        """Tell the recorder about the model or the DeepSpeed engine (parameter
        count, DeepSpeed config).  Optional: found on its own where it can be."""
        self._watched = obj
        self._params = None
        self._safe(lambda: self._write_meta(reason="watch"))

    def step(self, step: int | None = None, **extra: Any) -> None:
        """Write one per-step line (called by the step hook, or by hand)."""
        if not self.enabled:
            return
        self.step_count = self.step_count + 1 if step is None else int(step)
        self._safe(lambda: self._write_step(extra))

    def dump(self, reason: str = "manual", extra: dict[str, Any] | None = None, path: str | None = None) -> str:
        """Write the current snapshot (with ``oompost_meta``) and return its path."""
        torch = self._torch
        import pickle

        if path is None:
            path = os.path.join(self.dir, f"snapshot_rank{self.rank}_{reason}.pickle")
        snap = torch.cuda.memory._snapshot()
        meta = self._meta()
        meta["reason"] = reason
        if extra:
            meta.update(extra)
        snap["oompost_meta"] = meta
        # builtins only (readable by memory_viz and by oompost's restricted unpickler)
        write_atomic(path, pickle.dumps(snap, protocol=4))
        self.dumped.append(path)
        return path

    # ------------------------------------------------------------- internal

    def _safe(self, fn: Any) -> Any:
        try:
            return fn()
        except Exception as e:  # never crash the user's job
            if not self._failed_hook:
                self._failed_hook = True
                _warn(f"{type(e).__name__}: {e} (recording goes on where it can)")
            return None

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.enabled:
            return
        self.step_count += 1
        self._safe(lambda: self._write_step({}, optimizer=optimizer))

    def _write_step(self, extra: dict[str, Any], optimizer: Any = None) -> None:
        torch = self._torch
        n = self.step_count
        if not self._meta_written_at_step:
            self._meta_written_at_step = True
            if self._watched is None and optimizer is not None:
                self._params = _optimizer_params(optimizer)
            self._write_meta(reason="first_step")
        if self._lines >= self.max_step_lines:
            # bounded disk: thin to every 2nd, 4th, ... step past the limit
            self._stride *= 2
            self._lines //= 2
        if n % self._stride:
            return
        if self._steps_file is None:
            path = os.path.join(self.dir, f"steps_rank{self.rank}.jsonl")
            self._steps_file = open(path, "a", buffering=1, encoding="utf-8")
            if self._steps_file.tell() == 0:
                self._steps_file.write(json.dumps({"schema": "oompost.steps/1", "rank": self.rank,
                                                   "world_size": self.world_size}) + "\n")
        dev = torch.cuda.current_device()
        st = torch.cuda.memory_stats(dev)
        g = lambda k: round(st.get(k, 0) / GiB, 4)  # noqa: E731
        row = {"step": n, "rank": self.rank, "t": round(time.time(), 3),
               "allocated_gib": g("allocated_bytes.all.current"), "reserved_gib": g("reserved_bytes.all.current"),
               "max_allocated_gib": g("allocated_bytes.all.peak"), "max_reserved_gib": g("reserved_bytes.all.peak"),
               "alloc_retries": int(st.get("num_alloc_retries", 0))}
        row.update(extra)
        self._steps_file.write(json.dumps(row) + "\n")
        self._lines += 1

    def _meta(self) -> dict[str, Any]:
        torch = self._torch
        dev = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(dev)
        meta: dict[str, Any] = {
            "rank": self.rank, "world_size": self.world_size,
            "local_rank": _env_int("LOCAL_RANK"), "host": socket.gethostname(), "pid": os.getpid(),
            "time": time.time(),
            "torch": str(torch.__version__),          # TorchVersion is a class: keep the pickle builtins-only
            "cuda": str(torch.version.cuda), "python": sys.version.split()[0],
            "device": int(dev), "device_name": str(props.name), "device_total": int(props.total_memory),
            "alloc_conf": alloc_conf(), "allocator_backend": _allocator_backend(torch),
            "memory_fraction_env": os.environ.get("OOMPOST_MEMORY_FRACTION"),
            "max_entries": self.max_entries, "stacks": self.stacks, "context": self.context,
            "steps_seen": self.step_count,
            "memory_stats": _numbers(torch.cuda.memory_stats(dev)),
        }
        meta.update(self.extra_meta)
        for mod in ("deepspeed", "transformers", "accelerate", "peft"):
            m = sys.modules.get(mod)
            if m is not None:
                meta[mod] = str(getattr(m, "__version__", ""))
        try:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                meta["rank"] = self.rank = torch.distributed.get_rank()
                meta["world_size"] = self.world_size = torch.distributed.get_world_size()
        except Exception:
            pass
        engine = self._engine()
        if engine is not None:
            cfg = _engine_config(engine)
            if cfg:
                self._ds_config = cfg
        if self._params is None:
            target = self._watched if self._watched is not None else engine
            if target is not None:
                self._params = _module_params(getattr(target, "module", target))
        if self._params:
            meta["model_params"] = self._params
        return meta

    def _engine(self) -> Any:
        w = self._watched
        if w is not None and type(w).__name__.endswith("Engine"):
            return w
        if w is None and "deepspeed" in sys.modules and self._ds_config is None:
            return _find_engine()
        return None

    def _write_meta(self, reason: str) -> None:
        if self._torch is None or not self.enabled:
            return
        meta = self._meta()
        meta["written_at"] = reason
        # "oompost.capture" metadata: oompost analyze reads gpu / torch / deepspeed / world_size from it
        doc = {"schema": "oompost.capture/1", "source": "oompost.record", "gpu": meta["device_name"],
               "torch": meta["torch"], "world_size": meta["world_size"], **meta}
        if "deepspeed" in meta:
            doc["deepspeed"] = meta["deepspeed"]
        write_atomic(os.path.join(self.dir, f"meta_rank{self.rank}.json"),
                      json.dumps(doc, indent=1, default=str).encode())
        if self._ds_config:
            write_atomic(os.path.join(self.dir, "ds_config.json"),
                          json.dumps(self._ds_config, indent=1, default=str).encode())

    def _on_oom(self, device: int, alloc_size: int, limit: int, device_free: int) -> None:
        if self.once and any("_oom" in p for p in self.dumped):
            return
        extra = {"alloc_size": int(alloc_size), "limit": int(limit), "device_free": int(device_free),
                 "device": int(device)}
        if self.history:
            self.dump(reason="oom", extra=extra)
        if self._steps_file is not None:
            self._steps_file.write(json.dumps({"event": "oom", "rank": self.rank, "after_step": self.step_count,
                                               "tried_gib": round(alloc_size / GiB, 4)}) + "\n")
            self._steps_file.flush()
        self._write_meta(reason="oom")


# ------------------------------------------------------------------ helpers


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _optim_module(torch: Any) -> Any:
    """torch.optim.optimizer (torch.optim deletes the name; import it)."""
    mod = getattr(torch.optim, "optimizer", None)
    if mod is None:
        import importlib

        mod = importlib.import_module("torch.optim.optimizer")
    return mod


def _allocator_backend(torch: Any) -> str:
    try:
        return str(torch.cuda.get_allocator_backend())
    except Exception:
        return "native"


def _attach_observer(torch: Any) -> None:
    """One process-wide OOM observer (torch has no detach): it forwards to
    the active recorder, if any."""
    global _OBSERVER_ATTACHED
    if _OBSERVER_ATTACHED:
        return

    def observer(device: int, alloc_size: int, device_total_or_allowed: int, device_free: int) -> None:
        rec = _ACTIVE
        if rec is not None and rec.enabled:
            rec._safe(lambda: rec._on_oom(device, alloc_size, device_total_or_allowed, device_free))

    try:
        torch._C._cuda_attach_out_of_memory_observer(observer)
        _OBSERVER_ATTACHED = True
    except Exception as e:
        _warn(f"cannot attach the OOM observer ({e}): no snapshot at the OOM")


def _module_params(module: Any) -> int | None:
    try:
        return int(sum(getattr(p, "ds_numel", None) or p.numel() for p in module.parameters()))
    except Exception:
        return None


def _optimizer_params(optimizer: Any) -> int | None:
    try:
        return int(sum(getattr(p, "ds_numel", None) or p.numel() for g in optimizer.param_groups
                       for p in g["params"]))
    except Exception:
        return None


def _find_engine() -> Any:
    """The DeepSpeed engine of this process, if one exists (looked for at the
    first step and at the OOM only)."""
    try:
        from deepspeed.runtime.engine import DeepSpeedEngine
    except Exception:
        return None
    import gc

    for obj in gc.get_objects():
        if isinstance(obj, DeepSpeedEngine):
            return obj
    return None


def _engine_config(engine: Any) -> dict[str, Any] | None:
    cfg = getattr(getattr(engine, "_config", None), "_param_dict", None)
    if not isinstance(cfg, dict):
        cfg = getattr(engine, "config", None)
    return dict(cfg) if isinstance(cfg, dict) else None


# --------------------------------------------------------------- module API


def enable(dir: str = "oompost-capture", *, max_entries: int = 100_000, stacks: str = "python",
           once: bool = True, steps: bool = True, max_step_lines: int = 20_000, context: str = "alloc") -> Recorder:
    """Start recording (see the module docstring); returns the Recorder.

    ``max_entries`` bounds the trace ring buffer (and the pickle size);
    ``stacks="python"`` keeps dumps fast (C++ stacks can take minutes)."""
    global _ACTIVE
    if _ACTIVE is not None:
        _ACTIVE.stop()
    return Recorder(dir, max_entries=max_entries, stacks=stacks, once=once, steps=steps,
                    max_step_lines=max_step_lines, context=context).start()


def disable() -> None:
    if _ACTIVE is not None:
        _ACTIVE.stop()


def active() -> Recorder | None:
    return _ACTIVE


def dump(reason: str = "manual", extra: dict[str, Any] | None = None, path: str | None = None) -> str:
    """Write the current snapshot of the active recorder (``enable`` first)."""
    if _ACTIVE is None:
        raise RuntimeError("oompost.record is not enabled (call oompost.record(dir=...) first)")
    return _ACTIVE.dump(reason=reason, extra=extra, path=path)


def _parse_cli(argv: list[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """(options, script argv, passthrough) for ``python -m oompost.record``.

    Options come before ``--`` (or before the script); ``--local_rank=N`` that
    the DeepSpeed launcher inserts is passed on to the script."""
    opts: dict[str, Any] = {"dir": "oompost-capture"}
    passthrough: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return opts, argv[i + 1:], passthrough
        if a in ("-h", "--help"):
            opts["help"] = True
        elif a in ("-o", "--output", "--dir", "--max-entries", "--stacks"):
            if i + 1 >= len(argv):
                raise ValueError(f"{a} needs a value")
            key = {"--max-entries": "max_entries", "--stacks": "stacks"}.get(a, "dir")
            opts[key] = argv[i + 1]
            i += 1
        elif a.startswith(("--output=", "--max-entries=", "--stacks=")):
            k, v = a.split("=", 1)
            opts[{"--output": "dir", "--max-entries": "max_entries", "--stacks": "stacks"}[k]] = v
        elif a.startswith(("--local_rank", "--local-rank")):
            if "=" not in a and i + 1 < len(argv):
                passthrough.append(f"{a}={argv[i + 1]}")
                i += 1
            else:
                passthrough.append(a)
        elif a.startswith("-"):
            raise ValueError(f"unknown option {a}")
        else:
            return opts, argv[i:], passthrough
        i += 1
    return opts, [], passthrough


HELP = f"""{USAGE}

Run a training script with oompost's capture hook on: at the first CUDA OOM
each rank dumps an allocator snapshot (taken before the exception unwinds),
and every optimizer step adds a line of allocated/reserved memory.  Then:
oompost analyze DIR.

  -o, --output DIR     where to write (default oompost-capture); each rank's files carry its rank
  --max-entries N      allocator trace ring buffer (default 100000)
  --stacks python|all  stack frames recorded per allocation (default python: fast)
  -h, --help           this help

Works as the module torchrun (-m) or the DeepSpeed launcher (--module) starts.
Without CUDA it warns that it records nothing and still runs the script."""


def main(argv: list[str] | None = None) -> int:
    import runpy

    try:
        opts, script, passthrough = _parse_cli(list(sys.argv[1:] if argv is None else argv))
        max_entries = int(opts.get("max_entries", 100_000))
    except ValueError as e:
        print(f"oompost.record: {e}\n{USAGE}", file=sys.stderr)
        return 2
    if opts.get("help"):
        print(HELP)
        return 0
    if not script:
        print(USAGE, file=sys.stderr)
        return 2
    if not os.path.isfile(script[0]):
        print(f"oompost.record: no such script: {script[0]}", file=sys.stderr)
        return 2
    import warnings

    with warnings.catch_warnings(record=True) as said:   # one line each on stderr, not a warning's two
        warnings.simplefilter("always", RecordWarning)
        rec = enable(opts["dir"], max_entries=max_entries, stacks=opts.get("stacks", "python"))
    for w in said:
        if not (issubclass(w.category, RecordWarning) and not rec.enabled and "no CUDA" in str(w.message)):
            print(str(w.message), file=sys.stderr)
    if not rec.enabled:
        print("oompost.record: no CUDA device here: recording nothing, running the script as is", file=sys.stderr)
    sys.argv = [script[0], *passthrough, *script[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script[0])))
    try:
        runpy.run_path(script[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        rec._safe(lambda: rec._write_meta(reason="exit"))
        rec.stop()
    return 0


class _CallableModule(types.ModuleType):
    """``oompost.record(dir=...)``: the module itself is callable (it is also
    a submodule, so ``import oompost.record`` and the call name one thing)."""

    def __call__(self, dir: str = "oompost-capture", **kwargs: Any) -> Recorder:
        return enable(dir, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    # one recorder state per process: the script's own ``import oompost.record`` must see it
    from oompost.record import main as _main

    raise SystemExit(_main())
