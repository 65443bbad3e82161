"""Ask the installed DeepSpeed whether it accepts a config.

DeepSpeed's own pydantic models (``DeepSpeedZeroConfig`` and the rest, all
built by ``DeepSpeedConfig``) run on a CPU-only machine, so the verdict here
is the verdict the user's launch would get from the same DeepSpeed version —
no re-implementation to drift.  DeepSpeed is imported lazily (it pulls in
torch, ~3 s) with ``DS_ACCELERATOR=cpu`` and its logger muted, so nothing it
prints leaks into oompost's output.

``DeepSpeedConfig`` stops at the first problem.  To report more than one,
``validate_with_deepspeed`` removes the key DeepSpeed complained about (when
that is safe) and asks again, up to a few rounds; the first error is always
DeepSpeed's first complaint.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import re
import sys
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterator
from unittest import mock

from . import keys as K

_MAX_ROUNDS = 8

# pydantic model title -> the dotted ds_config section it validates ("" = loc is already full).
_SECTION_OF_MODEL = {
    "DeepSpeedZeroConfig": "zero_optimization",
    "DeepSpeedFP16Config": "fp16",
    "DeepSpeedBF16Config": "bf16",
    "DeepSpeedMonitorConfig": "",
    "CommsLoggerConfig": "comms_logger",
    "CompileConfig": "compile",
    "HybridEngineConfig": "hybrid_engine",
    "TPTrainingConfig": "tensor_parallel",
    "WeightQuantConfig": "weight_quantization",
}

# DeepSpeed messages that carry no key name, mapped to the key they are about.
_TEXT_TO_KEY: tuple[tuple[str, str], ...] = (
    ("Partial offloading only supported", "zero_optimization.offload_optimizer.ratio"),
    ("bfloat16 and fp16 modes cannot be simultaneously enabled", "fp16.enabled"),
    ("train_batch_size is not equal to", "train_batch_size"),
    ("Either train_batch_size or train_micro_batch_size_per_gpu", "train_batch_size"),
    ("Train batch size:", "train_batch_size"),
    ("Micro batch size per gpu:", "train_micro_batch_size_per_gpu"),
    ("Gradient accumulation steps:", "gradient_accumulation_steps"),
    ("Fp16_master_weights_and_grads", "fp16.fp16_master_weights_and_grads"),
    ("Bf16_master_weights_and_grads", "bf16.bf16_master_weights_and_grads"),
    ("bf16_optimizer_states", "bf16.bf16_optimizer_states"),
    ("compute_grad_norm=false", "zero_optimization.compute_grad_norm"),
    ("gradient_allreduce_op", "gradient_allreduce_op"),
    ("communication_data_type", "communication_data_type"),
    ("tag_validation", "checkpoint.tag_validation"),
    ("Maximum supported ZeRO stage", "zero_optimization.stage"),
)


@dataclass(frozen=True, slots=True)
class ValidationOutcome:
    """What the installed DeepSpeed said.

    ``available`` is False when DeepSpeed could not be imported (``note`` says
    why); then nothing was checked and ``ok`` is True only in the sense that
    nothing rejected the config — callers that need a real verdict test
    ``passed``.  ``errors`` are one-line messages that start with the dotted
    key; ``error_keys`` holds that key for each error (``None`` where
    DeepSpeed named none).  ``world_size`` is the world size the batch
    assertion was checked for."""

    available: bool
    version: str | None
    ok: bool
    errors: tuple[str, ...] = ()
    error_keys: tuple[str | None, ...] = ()
    world_size: int | None = None
    note: str = ""

    @property
    def passed(self) -> bool:
        """True only when DeepSpeed actually ran and accepted the config."""
        return self.available and self.ok

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "version": self.version, "ok": self.ok,
                "errors": list(self.errors), "error_keys": list(self.error_keys),
                "world_size": self.world_size, "note": self.note}


# ------------------------------------------------------------ importing DeepSpeed

_DS: ModuleType | None = None
_DS_IMPORT_ERROR: str | None = None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Mute DeepSpeed while it works: its logger writes straight to stdout
    (own handler, no propagation), deprecations come as WARNING lines, and
    some paths ``print``.  Restores everything afterwards."""
    ds_logger = logging.getLogger("DeepSpeed")
    was_disabled = ds_logger.disabled
    ds_logger.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
    finally:
        ds_logger.disabled = was_disabled


@contextlib.contextmanager
def _import_context() -> Iterator[None]:
    """Import-time muting.  DeepSpeed's logger handler binds ``sys.stdout``
    when it is created, so during the import ``sys.stdout`` must be the real
    process stdout — not a capture buffer (ours, click's CliRunner's) that
    would swallow every later DeepSpeed line of whoever uses it next."""
    ds_logger = logging.getLogger("DeepSpeed")
    was_disabled = ds_logger.disabled
    ds_logger.disabled = True
    saved_out, saved_err = sys.stdout, sys.stderr
    sys.stdout = sys.__stdout__ or saved_out
    sys.stderr = sys.__stderr__ or saved_err
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stdout, sys.stderr = saved_out, saved_err
        ds_logger.disabled = was_disabled


def load_deepspeed() -> ModuleType | None:
    """Import DeepSpeed once, on the CPU accelerator, silently.

    ``DS_ACCELERATOR=cpu`` is set only for the import (DeepSpeed picks and
    caches its accelerator then), only when DeepSpeed is not imported yet and
    the user chose no accelerator; it is removed again so that processes
    oompost starts later (``oompost.record -- train.py``) do not inherit it.
    Any import failure (not installed, broken torch) makes validation
    unavailable rather than crashing ``check``."""
    global _DS, _DS_IMPORT_ERROR
    if _DS is not None or _DS_IMPORT_ERROR is not None:
        return _DS
    set_env = "deepspeed" not in sys.modules and "DS_ACCELERATOR" not in os.environ
    if set_env:
        os.environ["DS_ACCELERATOR"] = "cpu"
    try:
        with _import_context():
            import deepspeed
            import deepspeed.runtime.config  # noqa: F401  (the module validation patches)
            from deepspeed.accelerator import get_accelerator

            get_accelerator()               # pin the choice while the variable is set
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        _DS_IMPORT_ERROR = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return None
    finally:
        if set_env:
            os.environ.pop("DS_ACCELERATOR", None)
    _DS = deepspeed
    return _DS


def deepspeed_version() -> str | None:
    """The installed DeepSpeed's version, or None when it cannot be imported."""
    ds = load_deepspeed()
    return None if ds is None else str(getattr(ds, "__version__", "unknown"))


_TABLES: list[K.KeyTables | None] = []


def installed_key_tables() -> K.KeyTables | None:
    """``keys.installed_tables`` for the installed DeepSpeed, quietly and
    once per process; None when DeepSpeed is missing or its internals moved
    (lint then uses the static tables)."""
    if _TABLES:
        return _TABLES[0]
    ds = load_deepspeed()
    if ds is None:
        return None
    try:
        with _quiet(), _patched_world(1):
            tables: K.KeyTables | None = K.installed_tables(ds)
    except Exception:  # noqa: BLE001 - fall back to the static tables
        tables = None
    _TABLES.append(tables)
    return tables


# ------------------------------------------------------------ validation


def implied_world_size(cfg: dict[str, Any]) -> int | None:
    """The world size the three batch keys imply (train / (micro × accum)),
    or None when they do not pin one down."""
    train, micro, gas = (cfg.get(k) for k in K.BATCH_KEYS)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (train, micro, gas)):
        return None
    per_rank = micro * gas  # type: ignore[operator]
    if train % per_rank:  # type: ignore[operator]
        return None
    sp = cfg.get("sequence_parallel_size", 1)
    return train // per_rank * (sp if isinstance(sp, int) and sp > 0 else 1)  # type: ignore[operator]


@contextlib.contextmanager
def _patched_world(world_size: int) -> Iterator[None]:
    """Make ``DeepSpeedConfig`` believe it runs on ``world_size`` ranks: it
    calls ``dist.get_rank()`` / ``dist.get_world_size()`` and falls back to 1
    when torch.distributed is not initialised (passing an ``mpu`` does not
    help: ``get_rank`` fails first)."""
    import deepspeed.runtime.config as ds_runtime_config

    with mock.patch.object(ds_runtime_config.dist, "get_rank", return_value=0), \
            mock.patch.object(ds_runtime_config.dist, "get_world_size", return_value=world_size):
        yield


def validate_with_deepspeed(cfg: dict[str, Any], world_size: int | None = None, *,
                            hf_auto: bool = False) -> ValidationOutcome:
    """Build ``DeepSpeedConfig(cfg)`` with the installed DeepSpeed for
    ``world_size`` ranks and report what it rejects.

    ``world_size=None`` uses the world size the batch keys imply (1 when they
    imply none), so a config written for 8 GPUs is not failed for 1.
    ``hf_auto=True`` validates the config as the HF Trainer / Accelerate would
    hand it over: ``"auto"`` batch keys are replaced by a consistent
    placeholder (micro 1, accumulation 1) and the rest of the ``"auto"``
    values are left for DeepSpeed to drop, as it does.  ``cfg`` is never
    modified.  Used by ``check`` and by the rerun-config generator."""
    ds = load_deepspeed()
    if ds is None:
        return ValidationOutcome(available=False, version=None, ok=True,
                                 note=f"DeepSpeed is not importable ({_DS_IMPORT_ERROR}); "
                                      "install oompost[ml] to validate with it")
    version = str(getattr(ds, "__version__", "unknown"))
    work = copy.deepcopy(cfg)
    if hf_auto:
        _fill_hf_batch_autos(work, world_size)
    ws = world_size if world_size is not None else (implied_world_size(work) or 1)
    errors: list[str] = []
    error_keys: list[str | None] = []
    for _ in range(_MAX_ROUNDS):
        exc = _construct(work, ws)
        if exc is None:
            break
        found = _describe(exc, work)
        for key, text in found:
            errors.append(text)
            error_keys.append(key)
        if not _drop_offenders(exc, work):
            break
    return ValidationOutcome(available=True, version=version, ok=not errors, errors=tuple(errors),
                             error_keys=tuple(error_keys), world_size=ws)


def _construct(cfg: dict[str, Any], world_size: int) -> BaseException | None:
    """One ``DeepSpeedConfig`` construction; the exception it raised, if any.
    Any exception counts: at launch, any of them stops the run."""
    from deepspeed.runtime.config import DeepSpeedConfig

    try:
        with _quiet(), _patched_world(world_size):
            DeepSpeedConfig(copy.deepcopy(cfg))
    except Exception as exc:  # noqa: BLE001 - DeepSpeed raises many types; all are rejections
        return exc
    return None


def _fill_hf_batch_autos(cfg: dict[str, Any], world_size: int | None) -> None:
    """Replace ``"auto"`` batch keys the way HF would, with placeholders:
    micro=1 and accumulation=1 where unknown, train = micro × accum × world."""
    micro = cfg.get("train_micro_batch_size_per_gpu")
    gas = cfg.get("gradient_accumulation_steps")
    if micro == "auto":
        cfg["train_micro_batch_size_per_gpu"] = micro = 1
    if gas == "auto":
        cfg["gradient_accumulation_steps"] = gas = 1
    if cfg.get("train_batch_size") == "auto":
        ws = world_size or 1
        if isinstance(micro, int) and isinstance(gas, int):
            cfg["train_batch_size"] = micro * gas * ws
        else:
            del cfg["train_batch_size"]


# ------------------------------------------------------------ turning exceptions into lines


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(exc: BaseException, cfg: dict[str, Any]) -> list[tuple[str | None, str]]:
    """One ``(key, line)`` per problem in ``exc``; each line starts with the
    dotted key so a reader (and lint) can match it to the config."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return [_describe_pydantic(exc.title, err, cfg) for err in exc.errors(include_url=False)]
    text = _one_line(str(exc))
    if isinstance(exc, TypeError):
        key = _string_batch_key(cfg)
        if key is not None:
            value = cfg.get(key)
            return [(key, f"{key}: {value!r} is not a number (TypeError: {text})")]
    key = _key_from_text(text, cfg)
    kind = "" if isinstance(exc, AssertionError) else f"{type(exc).__name__}: "
    return [(key, f"{key or '(config)'}: {kind}{text}")]


def _describe_pydantic(title: str, err: Any, cfg: dict[str, Any]) -> tuple[str | None, str]:
    """A pydantic error dict as ``key: message (got value) [type]``."""
    section = _SECTION_OF_MODEL.get(title, title)
    if title == "DeepSpeedBF16Config" and "bf16" not in cfg and "bfloat16" in cfg:
        section = "bfloat16"
    loc = ".".join(str(p) for p in err.get("loc", ()))
    msg = _one_line(err.get("msg", ""))
    key: str | None = ".".join(p for p in (section, loc) if p) or None
    if not loc:
        key = _key_from_text(msg, cfg) or key
    got = ""
    if loc and "input" in err:
        got = f" (got {_short_repr(err['input'])})"
    return key, f"{key or title}: {msg}{got} [{title}, {err.get('type', 'error')}]"


def _string_batch_key(cfg: dict[str, Any]) -> str | None:
    """The first batch key holding a string ("auto"), behind the TypeError
    DeepSpeed raises when it does arithmetic on it."""
    for key in K.BATCH_KEYS:
        if isinstance(cfg.get(key), str):
            return key
    return None


def _key_from_text(text: str, cfg: dict[str, Any]) -> str | None:
    """Find the key a free-text DeepSpeed message is about: a known phrase,
    a quoted/removed key, or a config key named in the text."""
    for phrase, key in _TEXT_TO_KEY:
        if phrase in text:
            return key
    for model, section in _SECTION_OF_MODEL.items():
        if section and re.search(rf"\b{model}\b", text):
            return section
    m = re.search(r"Cannot provide deprecated parameter '(\w+)'", text)
    if m:
        return f"zero_optimization.{m.group(1)}"
    removed_top, removed_zero = _removed_tables()
    for removed, message in removed_top.items():
        if removed in cfg and _one_line(message) == text:
            return removed
    zero = cfg.get("zero_optimization")
    if isinstance(zero, dict):
        for removed, message in removed_zero.items():
            if removed in zero and _one_line(message) == text:
                return f"zero_optimization.{removed}"
    for key in sorted((k for k in cfg if isinstance(k, str)), key=len, reverse=True):
        if re.search(rf"\b{re.escape(key)}\b", text):
            return key
    return None


def _removed_tables() -> tuple[dict[str, str], dict[str, str]]:
    """The installed DeepSpeed's removed-key messages (top level, zero), to
    recognise which key a DeepSpeedConfigError is about."""
    import deepspeed.runtime.config as ds_runtime_config

    return (dict(getattr(ds_runtime_config, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", {})),
            dict(getattr(ds_runtime_config, "_REMOVED_ZERO_CONFIG_KEYS", {})))


# ------------------------------------------------------------ continuing past the first error


def _drop_offenders(exc: BaseException, cfg: dict[str, Any]) -> bool:
    """Remove (or neutralise) what ``exc`` complained about so the next round
    can find the next problem.  False when that is not safe — the batch
    checks, for instance, are DeepSpeed's last word."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        section = _SECTION_OF_MODEL.get(exc.title)
        if section is None:
            return False
        changed = False
        for err in exc.errors(include_url=False):
            path = [*(section.split(".") if section else []), *(str(p) for p in err.get("loc", ()))]
            if exc.title == "DeepSpeedBF16Config" and "bf16" not in cfg:
                path[0] = "bfloat16"
            if not err.get("loc"):
                key = _key_from_text(_one_line(err.get("msg", "")), cfg)
                path = key.split(".") if key else []
            changed |= _delete_path(cfg, path)
        return changed
    text = _one_line(str(exc))
    key = _key_from_text(text, cfg)
    if key is None or key in K.BATCH_KEYS or isinstance(exc, TypeError):
        return False
    if key == "fp16.enabled" and isinstance(cfg.get("fp16"), dict):
        cfg["fp16"]["enabled"] = False        # keep bf16; look further
        return True
    return _delete_path(cfg, key.split("."))


def _delete_path(cfg: dict[str, Any], path: list[str]) -> bool:
    """Delete a nested key; True when something was removed."""
    if not path:
        return False
    node: Any = cfg
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    if isinstance(node, dict) and path[-1] in node:
        del node[path[-1]]
        return True
    return False


# ------------------------------------------------------------ background import

class _Prefetched:
    """A helper process (``python -m oompost.dsconfig.validate --serve``) that
    imports DeepSpeed while the caller does other work (the import costs ~3 s of
    CPU, most of an analysis of a big log), then answers validation requests as
    JSON lines.  Any failure of the helper falls back to validating in-process."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-m", "oompost.dsconfig.validate", "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def validate(self, cfg: dict[str, Any], world_size: int | None, hf_auto: bool) -> ValidationOutcome | None:
        import json

        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write((json.dumps({"cfg": cfg, "ws": world_size, "hf": hf_auto}) + "\n").encode())
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            if not line:
                return None
            d = json.loads(line)
        except (OSError, ValueError, AssertionError):
            return None
        if "error" in d:
            return None
        return ValidationOutcome(available=d["available"], version=d["version"], ok=d["ok"],
                                 errors=tuple(d["errors"]), error_keys=tuple(d["error_keys"]),
                                 world_size=d["world_size"], note=d["note"])

    def close(self) -> None:
        """Stop the helper and reap it.  Its only work is what a request asks,
        so nothing is lost by ending it while it is still importing."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=2)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def _serve() -> int:
    import json
    import sys

    load_deepspeed()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            o = validate_with_deepspeed(req["cfg"], req["ws"], hf_auto=req["hf"])
            out = {"available": o.available, "version": o.version, "ok": o.ok, "errors": list(o.errors),
                   "error_keys": list(o.error_keys), "world_size": o.world_size, "note": o.note}
        except Exception as e:  # never leave the caller waiting
            out = {"error": repr(e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


_PREFETCHED: _Prefetched | None = None


def prefetch() -> None:
    """Start importing DeepSpeed in a helper process (no-op if already imported,
    if DeepSpeed is absent, or if a process cannot be started)."""
    global _PREFETCHED
    if _DS is not None or _PREFETCHED is not None:
        return
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        return
    try:
        _PREFETCHED = _Prefetched()
    except OSError:
        _PREFETCHED = None
        return
    import atexit

    atexit.register(stop_prefetch)        # never left running after oompost exits


def stop_prefetch() -> None:
    """End the helper process, if one was started (idempotent)."""
    global _PREFETCHED
    if _PREFETCHED is not None:
        p, _PREFETCHED = _PREFETCHED, None
        p.close()


def validate_prefetched(cfg: dict[str, Any], world_size: int | None = None, *,
                        hf_auto: bool = False) -> ValidationOutcome:
    """``validate_with_deepspeed`` through the prefetching helper when there is one."""
    global _PREFETCHED
    if _PREFETCHED is not None:
        out = _PREFETCHED.validate(cfg, world_size, hf_auto)
        if out is not None:
            return out
        _PREFETCHED.close()
        _PREFETCHED = None
    return validate_with_deepspeed(cfg, world_size, hf_auto=hf_auto)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    raise SystemExit(_serve())
