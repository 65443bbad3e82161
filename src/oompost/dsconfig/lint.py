"""Lint a DeepSpeed config for what DeepSpeed accepts silently or reports
only at launch, and combine that with DeepSpeed's own verdict.

``lint`` is a pure function of the config dict (plus the world size and
dtype you give it) and works without DeepSpeed installed, from the static key
tables in ``keys``.  ``check_config`` adds DeepSpeed's own validation
(``validate.validate_with_deepspeed``), derives the key tables from the
installed DeepSpeed, and reconciles the two so the verdict is the installed
DeepSpeed's: a lint error that only *predicts* a DeepSpeed rejection is
downgraded when that DeepSpeed accepts the config, and every DeepSpeed
complaint appears exactly once, on the key it names.

Every message names the dotted key, the effect on the run and the fix.
Checks are small functions registered in ``CHECKS``; codes are stable.
"""

from __future__ import annotations

import difflib
import gzip
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..errors import InputError
from . import keys as K
from .model import parse_ds_config, read_config_text, recommended_bucket
from .validate import ValidationOutcome, installed_key_tables, validate_with_deepspeed

GB = 1000**3
GiB = 1024**3
BUCKET_WARN_BYTES = GiB
"""A single DeepSpeed buffer at or above this size is worth a message."""

SEVERITIES = ("error", "warning", "info")

# Codes whose "error" is a prediction of DeepSpeed's own validation; when the
# installed DeepSpeed accepts the config these are downgraded (see check_config).
PREDICTS_REJECTION = frozenset({
    "DSC002", "DSC003", "DSC005", "DSC006", "DSC011", "DSC024", "DSC030",
    "DSC031", "DSC032", "DSC040", "DSC041", "DSC043", "DSC044",
})


@dataclass(frozen=True, slots=True)
class LintMessage:
    """One finding about one key.  ``key`` is a dotted path into the config
    (``zero_optimization.offload_param``); ``bytes`` is the GPU memory at
    stake where that is known."""

    code: str
    severity: str          # "error" | "warning" | "info"
    key: str
    message: str
    effect: str
    fix: str
    bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "key": self.key, "message": self.message,
                "effect": self.effect, "fix": self.fix, "bytes": self.bytes}


@dataclass(frozen=True, slots=True)
class LintContext:
    """What every check needs, computed once: the config, its ZeRO section
    and stage, the element size of the model dtype, and the key tables."""

    cfg: Mapping[str, Any]
    zero: Mapping[str, Any]
    stage: int | None              # None when unknown ("auto", invalid)
    world_size: int | None
    dtype_bytes: int
    dtype_name: str
    dtype_assumed: bool
    tables: K.KeyTables
    hf_auto: bool


Check = Callable[[LintContext], Iterable[LintMessage]]


# ------------------------------------------------------------ small helpers


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    # finite only: a config read by the stdlib's JSON may hold Infinity/NaN (no size, never a crash)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _did_you_mean(key: str, candidates: Iterable[str]) -> str | None:
    """The closest known spelling, matching case- and dash-insensitively."""
    pool = sorted(set(candidates))
    norm = {c.lower().replace("-", "_"): c for c in pool}
    probe = key.lower().replace("-", "_")
    if probe in norm:
        return norm[probe]
    hits = difflib.get_close_matches(probe, list(norm), n=1, cutoff=0.6)
    return norm[hits[0]] if hits else None


def _fmt_elems(n: int | float) -> str:
    return f"{int(n):,}"


def fmt_gb(n_bytes: int) -> str:
    """'8.0 GB (7.45 GiB)': DeepSpeed and HF docs speak decimal GB, torch's
    OOM message binary GiB; show both so either can be compared."""
    return f"{n_bytes / GB:.1f} GB ({n_bytes / GiB:.2f} GiB)"


def _ref(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def _zero_value(ctx: LintContext, name: str) -> tuple[str | None, Any]:
    """(spelling used, value) of a zero_optimization field, by field name or
    alias; (None, None) when unset."""
    spec = ctx.tables.zero.get(name)
    for spelling in (spec.alias, spec.name) if spec else (name,):
        if spelling and spelling in ctx.zero:
            return spelling, ctx.zero[spelling]
    return None, None


def _stage_of(zero: Mapping[str, Any]) -> int | None:
    """The ZeRO stage as DeepSpeed will read it (numeric strings coerce)."""
    raw = zero.get("stage", 0)
    if isinstance(raw, bool):
        return None
    if _is_int(raw) and 0 <= raw <= 3:
        return raw
    if isinstance(raw, str) and raw.strip().isdigit() and 0 <= int(raw) <= 3:
        return int(raw)
    if isinstance(raw, float) and raw.is_integer() and 0 <= raw <= 3:
        return int(raw)
    return None


def _model_dtype(cfg: Mapping[str, Any], override: int | None, hf_auto: bool) -> tuple[int, str, bool]:
    """(bytes per element, name, assumed?) of the dtype DeepSpeed trains in,
    from the typed model (``dsconfig.model``): bf16/fp16 when enabled, fp32
    otherwise.  ``"auto"`` is what DeepSpeed drops (so fp32) unless the HF
    integration fills it, which almost always means 16-bit — assumed, and
    flagged as such."""
    if override is not None:
        return override, {2: "16-bit", 4: "fp32"}.get(override, f"{override}-byte"), False
    precision = parse_ds_config(cfg).precision
    if precision.auto:
        return (2, "bf16/fp16", True) if hf_auto else (4, "fp32", False)
    return (4 if precision.value == "fp32" else 2), precision.value, False


def _walk(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted path, value) leaf of a JSON tree; list items as ``[i]``."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, _ref(prefix, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{prefix}[{i}]")
    else:
        yield prefix, node


def _sections(ctx: LintContext) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, K.FieldSpec]]]:
    """The pydantic-validated sub-sections present in the config, with their
    dotted name and field table."""
    for name in ("offload_param", "offload_optimizer"):
        sec = ctx.zero.get(name)
        if isinstance(sec, dict):
            yield f"zero_optimization.{name}", sec, getattr(ctx.tables, name)
    for name, table in (("fp16", ctx.tables.fp16), ("bf16", ctx.tables.bf16), ("bfloat16", ctx.tables.bf16)):
        sec = ctx.cfg.get(name)
        if isinstance(sec, dict):
            yield name, sec, table


# ------------------------------------------------------------ key spelling


def check_unknown_top_level(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC001: DeepSpeed reads top-level keys with ``dict.get`` and never
    complains about the rest, so a misspelt or misplaced key silently does
    nothing.  Keys starting with ``_`` are taken as comments."""
    t = ctx.tables
    for key in ctx.cfg:
        if not isinstance(key, str) or key.startswith("_"):
            continue
        if key in t.top_level or key in t.removed_top_level or key in t.deprecated_top_level:
            continue
        if key in K.NOT_DEEPSPEED_KEYS:
            fix = K.NOT_DEEPSPEED_KEYS[key]
            yield LintMessage("DSC001", "warning", key, f"{key} is not a DeepSpeed key",
                              "DeepSpeed ignores it without a warning: the setting has no effect", fix)
            continue
        spec = t.zero_field(key)
        if spec is not None:
            yield LintMessage("DSC001", "warning", key, f"{key} is a zero_optimization key placed at the top level",
                              "DeepSpeed ignores it here without a warning: ZeRO runs with its default",
                              f"move it into zero_optimization ({_ref('zero_optimization', key)})")
            continue
        guess = _did_you_mean(key, t.top_level)
        yield LintMessage("DSC001", "warning", key,
                          f"unknown top-level key {key}" + (f" — did you mean {guess}?" if guess else ""),
                          "DeepSpeed ignores unknown top-level keys without a warning: the setting has no effect",
                          f"rename it to {guess}" if guess else "remove it, or check the key in DeepSpeed's docs")


def check_unknown_zero_keys(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC002 / DSC006: ``zero_optimization`` is a pydantic model with
    ``extra="forbid"`` (since 0.7.0): an unknown key stops the run at
    ``deepspeed.initialize``.  Except when its value is ``"auto"`` — DeepSpeed
    drops every ``"auto"`` before validating, so a misspelt ``"auto"`` key
    vanishes silently.  Giving both the alias and the field name of one
    setting is also rejected."""
    t = ctx.tables
    for key, value in ctx.zero.items():
        if t.zero_field(key) is not None or key in t.removed_zero:
            continue
        ref = _ref("zero_optimization", key)
        guess = _did_you_mean(key, t.zero_keys())
        where = None
        if key in t.top_level:
            where = f"it is a top-level key: move it out of zero_optimization ({key})"
        elif key in t.offload_optimizer or key in t.offload_param:
            where = "it belongs inside zero_optimization.offload_optimizer / offload_param"
        fix = where or (f"rename it to {guess}" if guess else "remove it")
        hint = f" — did you mean {guess}?" if guess and not where else ""
        if value == "auto":
            yield LintMessage("DSC002", "warning", ref, f"unknown zero_optimization key {key}{hint}",
                              "its value is \"auto\", which DeepSpeed drops before validating: the key "
                              "silently does nothing", fix)
        else:
            yield LintMessage("DSC002", "error", ref, f"unknown zero_optimization key {key}{hint}",
                              "DeepSpeed rejects it (Extra inputs are not permitted): the run stops at "
                              "deepspeed.initialize", fix)
    for spec in t.zero.values():
        if spec.alias and spec.alias in ctx.zero and spec.name in ctx.zero:
            yield LintMessage("DSC006", "error", _ref("zero_optimization", spec.name),
                              f"{spec.alias} and {spec.name} are the same setting, given twice",
                              "DeepSpeed rejects the second spelling (Extra inputs are not permitted)",
                              f"keep only {spec.alias}")


def check_unknown_section_keys(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC003: offload_param / offload_optimizer / fp16 / bf16 are pydantic
    models that forbid unknown keys, so a typo there stops the run."""
    for section, sec, table in _sections(ctx):
        names = list(table)
        for key, value in sec.items():
            if key in table or value == "auto":
                continue
            guess = _did_you_mean(key, names)
            yield LintMessage("DSC003", "error", _ref(section, key),
                              f"unknown key {key} in {section}" + (f" — did you mean {guess}?" if guess else ""),
                              "DeepSpeed rejects it (Extra inputs are not permitted): the run stops at "
                              "deepspeed.initialize",
                              f"rename it to {guess}" if guess else f"remove it (valid: {', '.join(names)})")


def check_activation_checkpointing(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC004 / DSC060: the activation_checkpointing section is not pydantic
    (unknown keys vanish), and it only configures
    ``deepspeed.checkpointing.checkpoint`` — it never turns checkpointing on."""
    sec = ctx.cfg.get("activation_checkpointing")
    if not isinstance(sec, dict):
        return
    for key in sec:
        if key in ctx.tables.activation_checkpointing:
            continue
        guess = _did_you_mean(key, ctx.tables.activation_checkpointing)
        yield LintMessage("DSC004", "warning", _ref("activation_checkpointing", key),
                          f"unknown activation_checkpointing key {key}"
                          + (f" — did you mean {guess}?" if guess else ""),
                          "DeepSpeed ignores it without a warning", f"rename it to {guess}" if guess else "remove it")
    yield LintMessage("DSC060", "info", "activation_checkpointing",
                      "the activation_checkpointing section does not enable activation checkpointing",
                      "activations are kept for every layer unless the model itself checkpoints: this section "
                      "only configures deepspeed.checkpointing.checkpoint() calls the model makes",
                      "enable gradient checkpointing in the model or trainer "
                      "(model.gradient_checkpointing_enable() / --gradient_checkpointing)")


def check_removed_keys(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC005: features DeepSpeed removed; 0.19.x refuses configs that still
    mention them (DeepSpeedConfigError), older versions ran them."""
    t = ctx.tables
    for key, why in t.removed_top_level.items():
        if key in ctx.cfg:
            yield LintMessage("DSC005", "error", key, f"{key}: {why}",
                              f"DeepSpeed {t.version} refuses the config (DeepSpeedConfigError) before training",
                              f"remove the {key} section")
    for key, why in t.removed_zero.items():
        if key in ctx.zero:
            yield LintMessage("DSC005", "error", _ref("zero_optimization", key), f"{key}: {why}",
                              f"DeepSpeed {t.version} refuses the config (DeepSpeedConfigError) before training",
                              f"remove zero_optimization.{key}")


def check_deprecated_keys(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC010 / DSC011 / DSC012: deprecated spellings still work (DeepSpeed
    migrates them with a WARNING line few people read), but giving the old
    and the new key together is an assertion error, and the boolean
    ``zero_optimization`` form silently means stage 1."""
    t = ctx.tables
    for key, dep in t.deprecated_top_level.items():
        if key not in ctx.cfg:
            continue
        if dep.replacement in ctx.cfg:
            yield LintMessage("DSC010", "warning", key, f"{key} is the old name of {dep.replacement}, and both are set",
                              f"DeepSpeed reads {dep.replacement} and ignores {key} entirely",
                              f"merge {key} into {dep.replacement} and remove {key}")
        else:
            yield LintMessage("DSC010", "warning", key, f"{key} is deprecated; use {dep.replacement}",
                              f"still read for backward compatibility; may be dropped by a later DeepSpeed",
                              f"rename {key} to {dep.replacement}")
    raw_zero = ctx.cfg.get("zero_optimization")
    if isinstance(raw_zero, bool):
        yield LintMessage("DSC012", "warning", "zero_optimization",
                          f"zero_optimization: {str(raw_zero).lower()} is the legacy boolean format",
                          "true means ZeRO stage 1 with allgather_size as its bucket; every other ZeRO "
                          "setting is at its default",
                          'write a section, e.g. "zero_optimization": {"stage": 1}')
    for spec in t.zero.values():
        if spec.deprecated is None or spec.name not in ctx.zero:
            continue
        dep = spec.deprecated
        ref = _ref("zero_optimization", spec.name)
        value = ctx.zero[spec.name]
        new_spec = t.zero_field(dep.replacement.split(" ")[0].split(".")[0])
        new_key = new_spec.key if new_spec is not None and " " not in dep.replacement else dep.replacement
        both = new_spec is not None and (new_spec.name in ctx.zero or (new_spec.alias or "") in ctx.zero)
        if both and spec.name != "cpu_offload_use_pin_memory":
            yield LintMessage("DSC011", "error", ref,
                              f"deprecated {spec.name} and its replacement {new_key} are both set",
                              "DeepSpeed asserts (Cannot provide deprecated parameter ... together): the run "
                              "stops at deepspeed.initialize",
                              f"remove {spec.name}")
            continue
        hint = f" ({dep.value_hint})" if dep.value_hint else ""
        fix = (f"remove {spec.name}" if value is False or value is None
               else f"replace it with zero_optimization.{new_key}{hint}")
        yield LintMessage("DSC010", "warning", ref, f"{spec.name} is deprecated; use {new_key}",
                          "DeepSpeed migrates it with a warning; a later release may reject it", fix)


# ------------------------------------------------------------ stage relevance


def check_stage_relevance(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC020-DSC024: keys DeepSpeed validates and then never uses at the
    configured stage.  The costly one is offload_param below stage 3: the
    stage-1/2 optimizer is never given it, so parameters stay on the GPU."""
    stage = ctx.stage
    if stage is None:
        return
    for key, value in ctx.zero.items():
        spec = ctx.tables.zero_field(key)
        if spec is None or stage in spec.stages or value == "auto":
            continue
        ref = _ref("zero_optimization", key)
        offloads = _offload_device(value) not in (None, "none") if spec.kind == "section" else bool(value)
        if spec.name in ("offload_param", "cpu_offload_param") and stage > 0:
            if offloads:
                yield LintMessage("DSC020", "warning", ref, f"{key} has no effect at ZeRO stage {stage}",
                                  "parameters stay on the GPU: DeepSpeed accepts the key without a warning but "
                                  "only stage 3 offloads parameters",
                                  "set zero_optimization.stage to 3, or remove offload_param (at stage 1/2 only "
                                  "offload_optimizer moves memory to the host)")
            continue
        if stage == 0:
            severity = "warning" if spec.name in ("offload_optimizer", "cpu_offload") and offloads else "info"
            yield LintMessage("DSC023", severity, ref, f"{key} is set but ZeRO is disabled (stage 0)",
                              "DeepSpeed ignores every ZeRO setting at stage 0"
                              + (": the optimizer states stay on the GPU" if severity == "warning" else ""),
                              "set zero_optimization.stage to 1, 2 or 3, or remove the key")
        elif 3 in spec.stages:
            yield LintMessage("DSC021", "info", ref, f"{key} only matters at ZeRO stage 3 (configured: {stage})",
                              "accepted and ignored at this stage", "remove it, or use stage 3")
        else:
            yield LintMessage("DSC022", "info", ref,
                              f"{key} only matters at ZeRO stage {'/'.join(map(str, sorted(spec.stages)))} "
                              f"(configured: 3)",
                              "accepted and ignored at stage 3", "remove it")
    opt = ctx.zero.get("offload_optimizer")
    if isinstance(opt, dict) and _is_number(opt.get("ratio")) and opt["ratio"] < 1 and stage < 3:
        yield LintMessage("DSC024", "error", "zero_optimization.offload_optimizer.ratio",
                          f"offload_optimizer.ratio {opt['ratio']} (partial offload) needs ZeRO stage 3",
                          "DeepSpeed rejects it (Partial offloading only supported for ZeRO Stage 3)",
                          "remove ratio (offload everything) or use stage 3")


def _offload_device(section: Any) -> str | None:
    if isinstance(section, dict):
        device = section.get("device", "none")
        return device if isinstance(device, str) else None
    return None


# ------------------------------------------------------------ values


_AUTO_HIDDEN = {"zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
                "zero_optimization.stage3_param_persistence_threshold"}


def check_auto_values(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC030: ``"auto"`` is an HF Trainer / Accelerate placeholder.  Handed
    to DeepSpeed directly it either crashes (batch keys), silently becomes
    the default (inside pydantic sections — ``bf16.enabled: "auto"`` means
    fp32 training), or reaches the optimizer as a string.  With
    ``hf_auto=True`` (the config goes through HF) only keys HF does not fill
    are a problem."""
    for path, value in _walk(ctx.cfg):
        if value != "auto":
            continue
        trainer = K.HF_TRAINER_AUTO.get(path)
        accel = K.ACCELERATE_AUTO.get(path)
        if ctx.hf_auto:
            message = _auto_under_hf(ctx, path, trainer, accel)
            if message is not None:
                yield message
        else:
            yield _auto_without_hf(ctx, path, trainer or accel)


def _auto_under_hf(ctx: LintContext, path: str, trainer: str | None, accel: str | None) -> LintMessage | None:
    """None where the HF Trainer fills the key: that "auto" is correct."""
    if (path in _AUTO_HIDDEN and path != "zero_optimization.reduce_bucket_size"
            and ctx.stage is not None and ctx.stage != 3):
        return LintMessage("DSC030", "info", path, f"{path} is \"auto\"; HF fills it only at stage 3",
                           "DeepSpeed drops it and uses its default; harmless, the key only matters at stage 3",
                           "remove it")
    if trainer:
        return None
    if accel:
        return LintMessage("DSC030", "info", path,
                           f"{path} is \"auto\": Accelerate fills it from `accelerate config` ({accel})",
                           "where that setting is missing, DeepSpeed drops the \"auto\" and uses its default",
                           f"make sure {accel} is set in the Accelerate config, or write the value here")
    return LintMessage("DSC030", "warning", path, f"{path} is \"auto\", which neither the HF Trainer nor "
                       "Accelerate fills", _auto_effect(ctx, path)[1], "write the value you want")


def _auto_without_hf(ctx: LintContext, path: str, filler: str | None) -> LintMessage:
    severity, effect = _auto_effect(ctx, path)
    source = f" (HF fills it from {filler})" if filler else ""
    return LintMessage("DSC030", severity, path, f"{path} is \"auto\", which only the HF integration "
                       f"fills{source}", effect,
                       "write a value, or check with --hf if the HF Trainer / Accelerate loads this config")


def _auto_effect(ctx: LintContext, path: str) -> tuple[str, str]:
    """(severity, effect) of an unfilled ``"auto"`` at ``path``."""
    top = path.split(".")[0]
    if path in K.BATCH_KEYS:
        return "error", ("DeepSpeed cannot compute the batch sizes from a string: it raises TypeError at "
                         "deepspeed.initialize")
    if path == "zero_optimization.stage":
        return "warning", ("DeepSpeed drops \"auto\" → stage 0: ZeRO is off and every GPU holds the full "
                           "optimizer states, gradients and weights")
    if path in ("fp16.enabled", "bf16.enabled", "bfloat16.enabled"):
        return "warning", ("DeepSpeed drops \"auto\" → enabled=false: with neither fp16 nor bf16 enabled it "
                           "trains in fp32, twice the weight and gradient memory of bf16")
    if top in ("zero_optimization", "fp16", "bf16", "bfloat16"):
        leaf = path.split(".")[-1]
        spec = None
        if top == "zero_optimization" and path.count(".") == 1:
            spec = ctx.tables.zero_field(leaf)
        default = f" ({_fmt_default(spec.default)})" if spec is not None and spec.default is not None else ""
        return "warning", f"DeepSpeed drops \"auto\" and silently uses its default{default}"
    if top in ("optimizer", "scheduler"):
        return "warning", ("passed to the optimizer/scheduler constructor as the string \"auto\": "
                           "deepspeed.initialize fails")
    return "warning", "DeepSpeed reads it as the string \"auto\", which fails where the number is used"


def _fmt_default(value: Any) -> str:
    if _is_int(value) and value >= 10_000:
        return _fmt_elems(value)
    return json.dumps(value)


def check_non_integral_sizes(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC031 / DSC032: integer fields are strict about fractions since
    DeepSpeed 0.15 (pydantic v2): ``15099494.4`` — HF's old ``0.9 × h²`` for
    hidden 4096 — stops the run (DeepSpeed #6525).  Integral floats such as
    ``5e8`` are fine.  Values of the wrong type (a list, a stray string, an
    offload device DeepSpeed does not know) are rejected too."""
    groups: list[tuple[str, Mapping[str, Any], Mapping[str, K.FieldSpec]]] = [
        ("zero_optimization", ctx.zero, {**ctx.tables.zero, **{a: ctx.tables.zero[n]
                                                             for a, n in ctx.tables.zero_aliases.items()}})]
    groups.extend(_sections(ctx))
    for section, sec, table in groups:
        for key, value in sec.items():
            spec = table.get(key)
            if spec is None or value == "auto":
                continue
            yield from _value_messages(_ref(section, key), key, spec, value)


def _value_messages(ref: str, key: str, spec: K.FieldSpec, value: Any) -> Iterator[LintMessage]:
    if spec.kind == "int":
        if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
            yield LintMessage("DSC031", "error", ref, f"{key} = {value!r} is not a whole number{_hf_pattern(value)}",
                              "DeepSpeed ≥ 0.15 rejects it (int_from_float): the run stops at "
                              "deepspeed.initialize", f"write an integer: {int(value)}")
        elif not (_is_number(value) or isinstance(value, bool) or _is_int_text(value)) or (
                isinstance(value, float) and not math.isfinite(value)):
            yield LintMessage("DSC032", "error", ref, f"{key} = {value!r} is not a number",
                              "DeepSpeed rejects it: the run stops at deepspeed.initialize",
                              f"write an integer, e.g. {_fmt_default(spec.default)}" if spec.default is not None
                              else "write an integer")
    elif spec.kind == "bool" and not isinstance(value, bool) and value is not None:
        if not (value in (0, 1) or (isinstance(value, str) and value.lower() in
                                     ("true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n"))):
            yield LintMessage("DSC032", "error", ref, f"{key} = {value!r} is not a boolean",
                              "DeepSpeed rejects it: the run stops at deepspeed.initialize", "write true or false")
    elif spec.kind == "section" and value is not None and not isinstance(value, dict):
        yield LintMessage("DSC032", "error", ref, f"{key} must be a section ({{...}}), got {value!r}",
                          "DeepSpeed rejects it: the run stops at deepspeed.initialize",
                          f'write it as an object, e.g. "{key}": {{"device": "cpu"}}' if "offload" in key
                          else f"write {key} as an object")
    elif spec.name == "stage" and value is not None and not (isinstance(value, (int, str, float))
                                                              and _stage_of({"stage": value}) is not None):
        yield LintMessage("DSC032", "error", ref, f"stage = {value!r} is not a ZeRO stage",
                          "DeepSpeed rejects it (Input should be 0, 1, 2, 3): the run stops at deepspeed.initialize",
                          "write 0, 1, 2 or 3")
    elif spec.name == "device" and spec.kind == "enum" and not (isinstance(value, str)
                                                               and value in K.OFFLOAD_DEVICES):
        yield LintMessage("DSC032", "error", ref, f"device = {value!r} is not an offload device",
                          "DeepSpeed rejects it (Input should be 'none', 'cpu' or 'nvme')",
                          'use "cpu", "nvme" (with nvme_path) or "none"')


def _is_int_text(value: Any) -> bool:
    """pydantic's lax mode turns "100" into 100; accept what it accepts."""
    return isinstance(value, str) and value.strip().lstrip("+-").isdigit()


def _hf_pattern(value: float) -> str:
    """Name the HF ``0.9 × hidden²`` formula when the value is exactly that."""
    if not value > 0 or math.isinf(value):      # negative, NaN or inf: not the formula (found by fuzzing)
        return ""
    hidden = round(math.sqrt(value / 0.9))
    if hidden > 0 and abs(0.9 * hidden * hidden - value) < 1e-3:
        return f" (0.9 × {hidden}²: HF's old \"auto\" for hidden_size {hidden}, DeepSpeed #6525)"
    return ""


# ------------------------------------------------------------ batch sizes


def check_batch(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC040-DSC045: DeepSpeed derives the missing batch key by integer
    division and then asserts ``train == micro × accumulation × world`` —
    at launch, after the job waited in the queue.  Checking here needs the
    world size; without one, say which world size the keys imply."""
    values = {k: ctx.cfg.get(k) for k in K.BATCH_KEYS}
    if "auto" in values.values():
        return                              # check_auto_values speaks for them
    bad = False
    for key, value in values.items():
        if value is None:
            continue
        if not _is_number(value):
            bad = True
            yield LintMessage("DSC044", "error", key, f"{key} = {value!r} is not a number",
                              "DeepSpeed cannot compute the batch sizes from it: TypeError at deepspeed.initialize",
                              "write a positive integer")
        elif value <= 0:
            bad = True
            yield LintMessage("DSC044", "error", key, f"{key} = {value!r} must be greater than 0",
                              "DeepSpeed asserts at deepspeed.initialize", "write a positive integer")
        elif not _is_int(value):
            bad = True
            yield LintMessage("DSC045", "error", key, f"{key} = {value!r} is not a positive integer",
                              "DeepSpeed's batch assertion may pass, but the data loader and gradient accumulation "
                              "need an integer: the run fails at launch", "write a positive integer")
    if bad:
        return
    train, micro, gas = (values[k] for k in K.BATCH_KEYS)
    if train is None and micro is None:
        yield LintMessage("DSC041", "error", "train_batch_size",
                          "neither train_batch_size nor train_micro_batch_size_per_gpu is set",
                          "DeepSpeed asserts (Either train_batch_size or train_micro_batch_size_per_gpu needs to be "
                          "provided) at deepspeed.initialize",
                          "set train_micro_batch_size_per_gpu (and gradient_accumulation_steps)")
        return
    sp = ctx.cfg.get("sequence_parallel_size", 1)
    sp = sp if _is_int(sp) and sp > 0 else 1
    if ctx.world_size is None:
        yield from _batch_without_world(train, micro, gas, sp)
    elif ctx.world_size % sp:
        yield LintMessage("DSC040", "error", "sequence_parallel_size",
                          f"world size {ctx.world_size} is not a multiple of sequence_parallel_size {sp}",
                          "DeepSpeed's data-parallel size (world / sequence_parallel_size) is fractional and the "
                          "batch assertion cannot hold", f"run on a multiple of {sp} GPUs")
    else:
        yield from _batch_for_world(train, micro, gas, ctx.world_size // sp)


def _batch_without_world(train: int | None, micro: int | None, gas: int | None,
                         sp: int) -> Iterator[LintMessage]:
    if train is None or micro is None:
        return
    per_rank = micro * (gas or 1)
    if train % per_rank:
        yield LintMessage("DSC040", "error", "train_batch_size",
                          f"train_batch_size {train} is not a multiple of micro × accumulation = {per_rank}",
                          "no world size satisfies DeepSpeed's batch assertion: the run stops at initialize",
                          f"set train_batch_size to a multiple of {per_rank}, or remove it and let DeepSpeed "
                          f"derive it")
    elif gas is not None:
        dp = train // per_rank
        n = dp * sp
        sp_text = f" data-parallel ranks × sequence_parallel_size {sp}" if sp != 1 else ""
        yield LintMessage("DSC042", "info", "train_batch_size",
                          f"the batch keys are only valid on {n} GPU{'s' if n != 1 else ''} "
                          f"({train} = {micro} × {gas} × {dp}{sp_text})",
                          "on any other world size DeepSpeed's batch assertion stops the run at launch",
                          "pass --world-size to check for the real job, or drop train_batch_size so DeepSpeed "
                          "derives it")


def _batch_for_world(train: int | None, micro: int | None, gas: int | None, ws: int) -> Iterator[LintMessage]:
    """Replay ``DeepSpeedConfig._set_batch_related_parameters`` and
    ``_batch_assertion`` for ``ws`` data-parallel ranks."""
    if train is not None and micro is not None and gas is None:
        gas = train // micro // ws
    elif train is not None and gas is not None and micro is None:
        micro = train // ws // gas
    elif train is None:
        gas = gas or 1
        train = micro * gas * ws  # type: ignore[operator]
    elif micro is None:                        # only train given
        gas, micro = 1, train // ws
    if micro is None or gas is None:
        return
    for key, derived in (("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", gas)):
        if derived <= 0:
            yield LintMessage("DSC040", "error", key,
                              f"{key} derived for world size {ws} is {derived} "
                              f"(train_batch_size {train} is too small)",
                              "DeepSpeed asserts it has to be greater than 0 at deepspeed.initialize",
                              f"raise train_batch_size to at least {ws * max(micro, 1) * max(gas, 1)}")
            return
    if train != micro * gas * ws:
        text = ("Check batch related parameters. train_batch_size is not equal to "
                f"micro_batch_per_gpu * gradient_acc_step * world_size {train} != {micro} * {gas} * {ws}")
        options = [f"train_batch_size = {micro * gas * ws}"]
        if train % (micro * ws) == 0:
            options.append(f"gradient_accumulation_steps = {train // (micro * ws)}")
        yield LintMessage("DSC040", "error", "train_batch_size", text,
                          f"DeepSpeed stops the run at deepspeed.initialize on {ws} GPU{'s' if ws != 1 else ''}",
                          "set " + " or ".join(options) + ", or remove train_batch_size so DeepSpeed derives it")


def check_precision(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC043: fp16 and bf16 together is an assertion at start-up."""
    fp16 = ctx.cfg.get("fp16")
    bf16 = ctx.cfg.get("bf16", ctx.cfg.get("bfloat16"))
    if isinstance(fp16, dict) and isinstance(bf16, dict) and fp16.get("enabled") is True and bf16.get("enabled") is True:
        yield LintMessage("DSC043", "error", "fp16.enabled", "fp16 and bf16 are both enabled",
                          "DeepSpeed asserts (bfloat16 and fp16 modes cannot be simultaneously enabled)",
                          "enable one: bf16 on Ampere or newer, fp16 otherwise")


# ------------------------------------------------------------ buffers


_NICE_BUCKETS = (500_000_000, 200_000_000, 100_000_000, 50_000_000, 20_000_000, 10_000_000)


def _smaller_bucket(current: int, per_element: int) -> int:
    """The bucket size to suggest: ``dsconfig.model.recommended_bucket``, the
    same size ``oompost analyze``'s rerun plan uses."""
    return recommended_bucket(current, per_element)


def _grad_buffer_bytes(ctx: LintContext) -> tuple[int, str]:
    """Element size of the stage-1/2 reduce buffer: the model dtype, except
    at stage 1 where a separate fp32 ``data_types.grad_accum_dtype`` stages
    gradients in fp32 (``_gradient_reduction_buffer_dtype``)."""
    types = ctx.cfg.get("data_types")
    accum = types.get("grad_accum_dtype") if isinstance(types, dict) else None
    if ctx.stage == 1 and ctx.dtype_bytes == 2 and str(accum).lower() in ("fp32", "float32", "float", "torch.float32"):
        return 4, "fp32 (data_types.grad_accum_dtype)"
    return ctx.dtype_bytes, ctx.dtype_name


def check_buckets(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC050: bucket sizes are element counts; their GPU cost is count ×
    element size, and at stage 1/2 ``overlap_comm`` allocates the reduce
    bucket twice (default on only at stage 3).  Stage 3 adds the prefetch
    bucket and the live-parameter working set.  Buffers at or above 1 GiB are
    reported: a warning where the user chose the size, info where it is
    DeepSpeed's default.  ``"auto"`` under HF is sized from hidden_size and
    skipped."""
    stage = ctx.stage
    if stage is None or stage == 0:
        return
    yield from _reduce_bucket(ctx, stage)
    if stage == 3:
        yield from _stage3_buffer(ctx, "prefetch_bucket_size", "prefetch bucket",
                                  "parameters all-gathered ahead of use, on top of the layer being computed")
        yield from _stage3_buffer(ctx, "max_live_parameters", "live-parameter limit",
                                  "upper bound on gathered full parameters resident at once")


def _effective(ctx: LintContext, name: str) -> tuple[str | None, Any, bool]:
    """(spelling, effective value, user-set?) of a zero field, "auto" resolved
    to the default unless HF fills it (then value None)."""
    spelling, value = _zero_value(ctx, name)
    spec = ctx.tables.zero[name]
    if value == "auto":
        return spelling, (None if ctx.hf_auto else spec.default), False
    if value is None:
        return None, spec.default, False
    return spelling, value, True


def _reduce_bucket(ctx: LintContext, stage: int) -> Iterator[LintMessage]:
    spelling, n, user_set = _effective(ctx, "reduce_bucket_size")
    if not _is_number(n):
        return
    _, contiguous, _ = _effective(ctx, "contiguous_gradients")
    _, overlap_raw, overlap_set = _effective(ctx, "overlap_comm")
    overlap = (stage == 3) if overlap_raw is None else overlap_raw is True
    if stage < 3 and contiguous is False:
        return                               # no pre-allocated IPG buffer
    elem, dtype = _grad_buffer_bytes(ctx) if stage < 3 else (ctx.dtype_bytes, ctx.dtype_name)
    copies = 2 if (overlap and stage < 3) else 1
    cost = int(n) * elem * copies
    if cost < BUCKET_WARN_BYTES:
        return
    chosen = (user_set and n != ctx.tables.zero["reduce_bucket_size"].default) or (overlap_set and copies == 2)
    how = f"{copies} buffers (overlap_comm) × " if copies == 2 else ""
    assumed = " (dtype assumed from \"auto\")" if ctx.dtype_assumed else ""
    yield LintMessage(
        "DSC050", "warning" if chosen else "info", _ref("zero_optimization", spelling or "reduce_bucket_size"),
        f"reduce_bucket_size {_fmt_elems(n)} costs {fmt_gb(cost)} of GPU memory: {how}{_fmt_elems(n)} × "
        f"{elem} bytes ({dtype}){assumed}"
        + ("" if n != ctx.tables.zero["reduce_bucket_size"].default else " — DeepSpeed's default size"),
        ("allocated on every GPU at the first backward and held for the whole run" if stage < 3 else
         "the stage-3 gradient bucket, allocated after the optimizer states and held for the whole run")
        + "; it competes with activations",
        f"set zero_optimization.reduce_bucket_size to {_fmt_elems(_smaller_bucket(int(n), elem * copies))}"
        + (" or overlap_comm to false" if copies == 2 else ""),
        bytes=cost)


def _stage3_buffer(ctx: LintContext, name: str, label: str, what: str) -> Iterator[LintMessage]:
    spelling, n, user_set = _effective(ctx, name)
    if not _is_number(n):
        return
    cost = int(n) * ctx.dtype_bytes
    if cost < BUCKET_WARN_BYTES:
        return
    key = ctx.tables.zero[name].key
    assumed = " (dtype assumed from \"auto\")" if ctx.dtype_assumed else ""
    chosen = user_set and n != ctx.tables.zero[name].default
    yield LintMessage(
        "DSC050", "warning" if chosen else "info", _ref("zero_optimization", spelling or key),
        f"{key} {_fmt_elems(n)} allows up to {fmt_gb(cost)} per GPU: {_fmt_elems(n)} × {ctx.dtype_bytes} bytes "
        f"({ctx.dtype_name}){assumed}" + ("" if chosen else " — DeepSpeed's default"),
        f"{label}: {what}; a transient peak during forward/backward",
        f"lower zero_optimization.{key} (e.g. {_fmt_elems(_smaller_bucket(int(n), ctx.dtype_bytes))})",
        bytes=cost)


def check_allgather_bucket(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC051 / DSC052: with ``all_gather_into_tensor`` (every current torch)
    the stage-1/2 post-step all-gather ignores ``allgather_bucket_size`` — but
    the optimizer still asserts at launch that it is even."""
    if ctx.stage not in (1, 2) or "allgather_bucket_size" not in ctx.zero:
        return
    value = ctx.zero["allgather_bucket_size"]
    ref = "zero_optimization.allgather_bucket_size"
    if _is_number(value) and float(value).is_integer() and int(value) % 2:
        yield LintMessage("DSC052", "error", ref, f"allgather_bucket_size {_fmt_elems(value)} is odd",
                          "the ZeRO-1/2 optimizer asserts it is a multiple of 2 (NCCL start alignment) when "
                          "deepspeed.initialize builds it", f"use {_fmt_elems(int(value) + 1)}")
    yield LintMessage("DSC051", "info", ref, "allgather_bucket_size is inert with current torch",
                      "torch's all_gather_into_tensor gathers the updated partitions in one call, so the bucket "
                      "size neither bounds nor adds memory", "remove it; it does not limit the post-step all-gather")


_OBJECT_SECTIONS = ("zero_optimization", "fp16", "bf16", "bfloat16", "optimizer", "scheduler",
                    "activation_checkpointing", "data_types", "checkpoint")


def check_section_types(ctx: LintContext) -> Iterator[LintMessage]:
    """DSC032: a section that is not a JSON object (``"fp16": true``) makes
    DeepSpeed fail on attribute or ``**`` access at start-up.  The legacy
    boolean ``zero_optimization`` is DSC012's."""
    for name in _OBJECT_SECTIONS:
        value = ctx.cfg.get(name)
        if value is None or isinstance(value, dict) or (name == "zero_optimization" and isinstance(value, bool)):
            continue
        yield LintMessage("DSC032", "error", name, f"{name} must be an object ({{...}}), got {value!r}",
                          "DeepSpeed fails reading it: the run stops at deepspeed.initialize",
                          f'write it as an object, e.g. "{name}": {{...}}')


CHECKS: tuple[Check, ...] = (
    check_section_types,
    check_unknown_top_level,
    check_unknown_zero_keys,
    check_unknown_section_keys,
    check_activation_checkpointing,
    check_removed_keys,
    check_deprecated_keys,
    check_stage_relevance,
    check_auto_values,
    check_non_integral_sizes,
    check_batch,
    check_precision,
    check_buckets,
    check_allgather_bucket,
)
"""Every check, in report order.  Add new checks here."""


def _severity_rank(message: LintMessage) -> int:
    return SEVERITIES.index(message.severity)


def lint(cfg: dict[str, Any], world_size: int | None = None, dtype_bytes: int | None = None, *,
         tables: K.KeyTables | None = None, hf_auto: bool = False) -> tuple[LintMessage, ...]:
    """Run every check on ``cfg``; errors first, then warnings, then info.

    ``world_size`` enables the batch arithmetic; ``dtype_bytes`` overrides the
    element size taken from the fp16/bf16 sections; ``tables`` defaults to the
    static tables (``check_config`` passes the installed DeepSpeed's);
    ``hf_auto`` says the config goes through the HF Trainer / Accelerate,
    which fill ``"auto"``."""
    zero_raw = cfg.get("zero_optimization")
    zero = zero_raw if isinstance(zero_raw, dict) else {}
    if isinstance(zero_raw, bool):
        stage: int | None = 1 if zero_raw else 0
    else:
        stage = _stage_of(zero)
    elem, name, assumed = _model_dtype(cfg, dtype_bytes, hf_auto)
    ctx = LintContext(cfg=cfg, zero=zero, stage=stage, world_size=world_size, dtype_bytes=elem,
                      dtype_name=name, dtype_assumed=assumed, tables=tables or K.static_tables(), hf_auto=hf_auto)
    found = [m for check in CHECKS for m in check(ctx)]
    return tuple(sorted(found, key=_severity_rank))


# ------------------------------------------------------------ the whole check


@dataclass(frozen=True, slots=True)
class CheckResult:
    """``oompost check``'s answer: DeepSpeed's verdict, the lint messages
    (DeepSpeed's complaints merged in), and ``ok`` = no error at all."""

    path: str | None
    validation: ValidationOutcome
    messages: tuple[LintMessage, ...]
    ok: bool
    world_size: int | None = None
    hf_auto: bool = False
    tables: str = "static"
    allowed_world_sizes: tuple[int, ...] | None = None     # what the batch keys allow (None: any)

    @property
    def errors(self) -> tuple[LintMessage, ...]:
        return tuple(m for m in self.messages if m.severity == "error")

    def to_json(self) -> dict[str, Any]:
        return {"schema": "oompost.check/1", "path": self.path, "ok": self.ok, "world_size": self.world_size,
                "allowed_world_sizes": list(self.allowed_world_sizes) if self.allowed_world_sizes is not None
                else None,
                "hf_auto": self.hf_auto, "key_tables": self.tables, "deepspeed": self.validation.to_json(),
                "messages": [m.to_json() for m in self.messages]}


def load_config(path: str | Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Read a ds_config file (``.gz`` too) as DeepSpeed does — hjson, so
    comments and trailing commas are fine — and list its duplicate keys
    (DeepSpeed refuses them; ``json.load`` silently keeps the last value).
    Raises ``InputError`` with a one-line reason for anything unreadable."""
    p = Path(path)
    try:
        raw = gzip.open(p, "rb").read() if p.suffix == ".gz" else p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory, not a config file") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{p}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    return read_config_text(raw, str(p))


def _duplicate_messages(duplicates: tuple[str, ...]) -> list[LintMessage]:
    return [LintMessage("DSC007", "warning", key, f"{key} appears more than once in the file",
                        "DeepSpeed's own loader (config path) refuses the file (Duplicate keys); json.load, used by "
                        "the HF Trainer, silently keeps the last value", "keep one")
            for key in dict.fromkeys(duplicates)]


def _same_key(a: str | None, b: str) -> bool:
    """Whether a DeepSpeed error key and a lint key point at the same
    setting (one may be a parent of the other)."""
    if a is None:
        return False
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _reconcile(messages: list[LintMessage], outcome: ValidationOutcome) -> list[LintMessage]:
    """Make the installed DeepSpeed's verdict the verdict: attach each of its
    errors to the lint message on the same key (or add one), and downgrade
    predicted rejections it did not make."""
    if not outcome.available:
        return messages + [LintMessage(
            "DSC091", "info", "(config)", "DeepSpeed is not installed: validated with oompost's key tables "
            f"(DeepSpeed {K.STATIC_VERSION}) only", outcome.note or "DeepSpeed's own checks did not run",
            "pip install 'oompost[ml]' to validate with DeepSpeed itself")]
    v = outcome.version
    out = list(messages)
    for key, text in zip(outcome.error_keys, outcome.errors):
        idx = next((i for i, m in enumerate(out) if m.severity == "error" and m.code in PREDICTS_REJECTION
                    and _same_key(key, m.key)), None)
        if idx is None:
            out.append(LintMessage("DSC090", "error", key or "(config)", text,
                                   f"DeepSpeed {v} rejects the config: the run stops at deepspeed.initialize",
                                   "fix the key DeepSpeed names"))
            continue
        m = out[idx]
        said = text.split(": ", 1)[1] if ": " in text else text
        note = f" (DeepSpeed {v} agrees)" if said.split(" [")[0] in m.message else f" — DeepSpeed {v}: {said}"
        out[idx] = replace(m, message=m.message + note)
    if outcome.ok:
        out = [replace(m, severity="warning", effect=m.effect + f" — but DeepSpeed {v} accepts it "
                                                               "(other versions may not)")
               if m.severity == "error" and m.code in PREDICTS_REJECTION else m for m in out]
    return out


def _version_message(validated: str | None, run_version: str | None) -> list[LintMessage]:
    """DSC070: the verdict speaks for the installed DeepSpeed; say so when the
    run's log shows another one."""
    if not validated or not run_version:
        return []
    base = lambda s: s.split("+")[0].strip().lstrip("v")  # noqa: E731
    if base(validated) == base(run_version):
        return []
    return [LintMessage("DSC070", "info", "(config)",
                        f"validated with DeepSpeed {validated}, but the run used {run_version}",
                        "verdicts differ across versions: before 0.7.0 unknown zero_optimization keys were ignored, "
                        "before 0.15 fractional sizes were accepted, 0.19 refuses removed features",
                        f"install deepspeed=={base(run_version)} to reproduce the run's verdict")]


def check_config(path_or_dict: str | Path | dict[str, Any], world_size: int | None = None, *,
                 hf_auto: bool = False, run_version: str | None = None,
                 dtype_bytes: int | None = None) -> CheckResult:
    """Validate with the installed DeepSpeed and lint, for ``world_size``
    ranks (None: whatever the batch keys imply).  ``run_version`` is the
    DeepSpeed version a log shows the run used (adds DSC070 when it differs).
    Raises ``InputError`` when a path cannot be read as a JSON object."""
    if isinstance(path_or_dict, dict):
        cfg, duplicates, path = path_or_dict, (), None
    else:
        cfg, duplicates = load_config(path_or_dict)
        path = str(path_or_dict)
    outcome = validate_with_deepspeed(cfg, world_size, hf_auto=hf_auto)
    tables = installed_key_tables() if outcome.available else None
    messages = _duplicate_messages(duplicates) + list(lint(cfg, world_size, dtype_bytes, tables=tables,
                                                           hf_auto=hf_auto))
    messages = _reconcile(messages, outcome) + _version_message(outcome.version, run_version)
    messages.sort(key=_severity_rank)
    return CheckResult(path=path, validation=outcome, messages=tuple(messages),
                       ok=not any(m.severity == "error" for m in messages), world_size=world_size,
                       hf_auto=hf_auto, tables=(tables or K.static_tables()).source,
                       allowed_world_sizes=parse_ds_config(cfg).allowed_world_sizes(256))
