"""The ds_config, read once into one typed model.

Every reader (the run set-up, the estimator call sites, the lint, the rerun
planner, the report) asks this model, so they cannot disagree about what a
config means.  Each value is a ``Setting``: what applies, and whether the
file *stated* it or DeepSpeed's default applies (``stated=False``), so a
report never prints a default as a fact.  ``"auto"`` (the HF integration
fills it) is neither: ``auto=True``, and the value is what oompost assumes.

Defaults are DeepSpeed's own (``deepspeed/runtime/config.py``,
``runtime/zero/config.py``): no ``bf16``/``fp16`` section trains in fp32;
ZeRO stage 0; ``overlap_comm`` on only at stage 3; buckets 5e8 elements;
stage-3 prefetch 5e7, live parameters 1e9.

Files are read the way DeepSpeed reads them: with ``hjson`` (comments,
trailing commas, unquoted keys), duplicate keys reported.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from ..errors import InputError

T = TypeVar("T")

DEFAULT_BUCKET = 500_000_000
DEFAULT_PREFETCH = 50_000_000
DEFAULT_MAX_LIVE = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One value of the config: what applies, and where it comes from."""

    value: T
    stated: bool = False          # the file says so (else DeepSpeed's default applies)
    key: str = ""                 # dotted path in the file, where stated or "auto"
    auto: bool = False            # the file says "auto": filled by the HF integration, value assumed

    @property
    def source(self) -> str:
        return "auto (assumed)" if self.auto else ("stated" if self.stated else "DeepSpeed default")

    def describe(self) -> str:
        """'bf16' when stated; 'fp32 (DeepSpeed default)' / 'bf16 ("auto", assumed)' otherwise."""
        v = _show(self.value)
        if self.auto:
            return f'{v} ("auto", assumed)'
        return v if self.stated else f"{v} (DeepSpeed default)"


@dataclass(frozen=True)
class DsConfig:
    """A DeepSpeed config, typed.  ``raw`` is the file's own dict (read-only view)."""

    raw: Mapping[str, Any]
    precision: Setting[str]
    zero_stage: Setting[int]
    offload_optimizer: Setting[str]
    offload_param: Setting[str]
    micro_batch: Setting[int | None]
    grad_accum: Setting[int | None]
    train_batch: Setting[int | None]
    reduce_bucket_size: Setting[int]
    allgather_bucket_size: Setting[int]
    overlap_comm: Setting[bool]
    contiguous_gradients: Setting[bool]
    prefetch_bucket_size: Setting[int]
    max_live_parameters: Setting[int]
    sequence_parallel_size: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ---- derived
    @property
    def precision_bytes(self) -> int:
        return 4 if self.precision.value == "fp32" else 2

    @property
    def effective_offload_param(self) -> str:
        """offload_param acts only at stage 3."""
        return self.offload_param.value if self.zero_stage.value == 3 else "none"

    def allowed_world_sizes(self, limit: int = 4096) -> tuple[int, ...] | None:
        """The world sizes DeepSpeed's batch assertion accepts for these keys
        (None: any, when train_batch_size is not set)."""
        train, micro, gas = self.train_batch.value, self.micro_batch.value, self.grad_accum.value
        if train is None or not self.train_batch.stated:
            return None
        sp = self.sequence_parallel_size
        out = []
        for ws in range(sp, limit + 1, sp):
            dp = ws // sp
            if micro is not None and gas is not None:
                ok = train == micro * gas * dp
            elif micro is not None:
                ok = train % (micro * dp) == 0 and train // micro // dp > 0
            elif gas is not None:
                ok = train % (gas * dp) == 0 and train // gas // dp > 0
            else:
                ok = train % dp == 0
            if ok:
                out.append(ws)
        return tuple(out)

    def global_batch(self, world_size: int) -> int | None:
        if self.train_batch.value is not None:
            return self.train_batch.value
        if self.micro_batch.value is not None:
            return self.micro_batch.value * (self.grad_accum.value or 1) * world_size
        return None

    def settings(self) -> dict[str, Setting[Any]]:
        return {n: getattr(self, n) for n in ("precision", "zero_stage", "offload_optimizer", "offload_param",
                                              "micro_batch", "grad_accum", "train_batch", "reduce_bucket_size",
                                              "allgather_bucket_size", "overlap_comm", "contiguous_gradients",
                                              "prefetch_bucket_size", "max_live_parameters")}

    def to_json(self) -> dict[str, Any]:
        return {n: {"value": s.value, "source": s.source, "key": s.key} for n, s in self.settings().items()}


# ------------------------------------------------------------------ reading

def _is_auto(v: Any) -> bool:
    return isinstance(v, str) and v.strip().lower() == "auto"


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None or _is_auto(v):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f) or f != int(f):
        return None
    return int(f)


def _bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    if isinstance(v, int):
        return bool(v)
    return None


def _int_setting(section: Mapping[str, Any], keys: tuple[str, ...], prefix: str, default: Any) -> Setting[Any]:
    for k in keys:
        if k in section:
            v = section[k]
            path = f"{prefix}{k}"
            if _is_auto(v):
                return Setting(default, False, path, auto=True)
            n = _int(v)
            if n is not None:
                return Setting(n, True, path)
            return Setting(default, False, path)            # not a whole number: the lint says so
    return Setting(default)


def _precision(cfg: Mapping[str, Any]) -> Setting[str]:
    auto_key = ""
    for key, name in (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16")):
        sec = cfg.get(key)
        if isinstance(sec, Mapping) and "enabled" in sec:
            en = sec["enabled"]
            if _is_auto(en):
                auto_key = auto_key or f"{key}.enabled"
                continue
            if _bool(en):
                return Setting(name, True, f"{key}.enabled")
    if auto_key:
        return Setting("bf16", False, auto_key, auto=True)   # what the HF Trainer fills with --bf16
    stated = [f"{k}.enabled" for k in ("bf16", "bfloat16", "fp16")
              if isinstance(cfg.get(k), Mapping) and "enabled" in cfg[k]]
    return Setting("fp32", bool(stated), stated[0] if stated else "")


def _offload(zero: Mapping[str, Any], key: str, legacy: str) -> Setting[str]:
    sec = zero.get(key)
    if isinstance(sec, Mapping):
        dev = sec.get("device", "none")
        if _is_auto(dev):
            return Setting("none", False, f"zero_optimization.{key}.device", auto=True)
        dev = str(dev or "none").lower()
        return Setting(dev if dev in ("cpu", "nvme") else "none", True, f"zero_optimization.{key}.device")
    if _bool(zero.get(legacy)):
        return Setting("cpu", True, f"zero_optimization.{legacy}")
    return Setting("none")


def parse_ds_config(cfg: Mapping[str, Any]) -> DsConfig:
    """The typed model of a ds_config dict (the dict is not modified)."""
    if not isinstance(cfg, Mapping):
        raise InputError(f"a DeepSpeed config must be a JSON object, not {type(cfg).__name__}")
    notes: list[str] = []
    zraw = cfg.get("zero_optimization")
    if isinstance(zraw, bool):
        zero: Mapping[str, Any] = {}
        stage = Setting(1 if zraw else 0, True, "zero_optimization")
        notes.append("zero_optimization: true is the deprecated spelling of stage 1")
    else:
        zero = zraw if isinstance(zraw, Mapping) else {}
        stage = _int_setting(zero, ("stage",), "zero_optimization.", 0)
    s = stage.value if isinstance(stage.value, int) else 0
    overlap = _bool(zero.get("overlap_comm"))
    overlap_s = (Setting(overlap, True, "zero_optimization.overlap_comm") if overlap is not None
                 else Setting(s == 3, False, "zero_optimization.overlap_comm" if "overlap_comm" in zero else "",
                              auto=_is_auto(zero.get("overlap_comm"))))
    contiguous = _bool(zero.get("contiguous_gradients"))
    contiguous_s = (Setting(contiguous, True, "zero_optimization.contiguous_gradients") if contiguous is not None
                    else Setting(True))
    sp = _int(cfg.get("sequence_parallel_size"))
    return DsConfig(
        raw=MappingProxyType(dict(cfg)),
        precision=_precision(cfg),
        zero_stage=stage,
        offload_optimizer=_offload(zero, "offload_optimizer", "cpu_offload"),
        offload_param=_offload(zero, "offload_param", "cpu_offload_param"),
        micro_batch=_int_setting(cfg, ("train_micro_batch_size_per_gpu",), "", None),
        grad_accum=_int_setting(cfg, ("gradient_accumulation_steps",), "", None),
        train_batch=_int_setting(cfg, ("train_batch_size",), "", None),
        reduce_bucket_size=_int_setting(zero, ("reduce_bucket_size",), "zero_optimization.", DEFAULT_BUCKET),
        allgather_bucket_size=_int_setting(zero, ("allgather_bucket_size",), "zero_optimization.", DEFAULT_BUCKET),
        overlap_comm=overlap_s,
        contiguous_gradients=contiguous_s,
        prefetch_bucket_size=_int_setting(zero, ("stage3_prefetch_bucket_size", "prefetch_bucket_size"),
                                          "zero_optimization.", DEFAULT_PREFETCH),
        max_live_parameters=_int_setting(zero, ("stage3_max_live_parameters", "max_live_parameters"),
                                         "zero_optimization.", DEFAULT_MAX_LIVE),
        sequence_parallel_size=sp if sp and sp > 0 else 1,
        notes=tuple(notes),
    )


def read_config_text(raw: bytes, where: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Parse a ds_config file's bytes as DeepSpeed does (hjson: JSON plus
    comments, trailing commas, unquoted keys); returns the object and the
    dotted names of duplicate keys (DeepSpeed refuses them)."""
    import hjson

    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for k, v in items:
            if k in seen:
                duplicates.append(k)
            seen[k] = v
        return seen

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{where}: not a text file") from None
    try:
        data = hjson.loads(text, object_pairs_hook=pairs)
    except hjson.HjsonDecodeError as exc:
        raise InputError(f"{where}: not valid JSON or hjson ({exc.msg} at line {exc.lineno}, column {exc.colno})"
                         ) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{where}: not valid JSON or hjson ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: a DeepSpeed config must be a JSON object, not {type(data).__name__}")
    return _plain(data), tuple(duplicates)


def _plain(v: Any) -> Any:
    """hjson gives OrderedDicts and Decimals only on request; keep plain dicts and lists."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def load_ds_config(path: str | Path) -> tuple[DsConfig, tuple[str, ...]]:
    """Read a ds_config file (``.gz`` too) into the typed model; raises
    ``InputError`` with a one-line reason when it cannot."""
    p = Path(path)
    try:
        raw = gzip.open(p, "rb").read() if p.suffix == ".gz" else p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory, not a config file") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{p}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    cfg, dups = read_config_text(raw, str(p))
    return parse_ds_config(cfg), dups


_NICE_BUCKETS = (500_000_000, 200_000_000, 100_000_000, 50_000_000, 20_000_000, 10_000_000)


def recommended_bucket(current: int, per_element: int, warn_bytes: int = 2**30) -> int:
    """The reduce/allgather bucket to suggest instead of ``current`` elements
    (``per_element``: bytes per element × buffers): DeepSpeed's default 5e8
    when ``current`` is larger (the size DeepSpeed is tuned and tested at;
    ``check`` and ``analyze`` both suggest it), else the largest round size
    below ``current`` whose cost stays under ``warn_bytes``."""
    if current > DEFAULT_BUCKET:
        return DEFAULT_BUCKET
    for n in _NICE_BUCKETS:
        if n < current and n * per_element < warn_bytes:
            return n
    return _NICE_BUCKETS[-1]


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) and v >= 10_000:
        return f"{v:,}"
    return str(v)
