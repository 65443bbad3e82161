"""What DeepSpeed reads from a ds_config, as tables.

``check`` must work where DeepSpeed is not installed, so the tables below are
static, copied from DeepSpeed 0.19.8 (``deepspeed/runtime/config.py``,
``runtime/zero/config.py``, ``runtime/zero/offload_config.py``,
``runtime/precision_config.py``).  Where DeepSpeed *is* installed,
``installed_tables()`` derives the same tables from its pydantic models (and
from the top-level keys ``DeepSpeedConfig`` actually looks up) and keeps the
static annotations — stage relevance, docs-vs-code defaults — that no model
carries.  ``tests/test_dsconfig.py`` checks the static table against the
installed DeepSpeed so the two cannot drift silently.

Nothing here imports DeepSpeed at module level.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

STATIC_VERSION = "0.19.8"
"""DeepSpeed release the static tables were copied from."""

ALL_STAGES: frozenset[int] = frozenset({0, 1, 2, 3})
ZERO_STAGES: frozenset[int] = frozenset({1, 2, 3})
STAGE3: frozenset[int] = frozenset({3})
STAGE12: frozenset[int] = frozenset({1, 2})


@dataclass(frozen=True, slots=True)
class Deprecation:
    """A deprecated key and what replaces it.  ``value_hint`` says how the old
    value maps to the new key, for the fix text."""

    replacement: str
    value_hint: str = ""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One key of a validated section.

    ``name`` is the pydantic field name, ``alias`` the JSON spelling when it
    differs (``stage3_prefetch_bucket_size`` for ``prefetch_bucket_size``);
    DeepSpeed accepts both (``populate_by_name``) but not both at once.
    ``kind`` is ``int`` / ``float`` / ``bool`` / ``enum`` / ``section`` /
    ``path`` / ``other``.  ``docs_default`` is set only where DeepSpeed's docs
    state a different default than its code.  ``stages`` lists the ZeRO
    stages at which the key has any effect."""

    name: str
    kind: str
    default: Any
    alias: str | None = None
    docs_default: Any = None
    stages: frozenset[int] = ZERO_STAGES
    deprecated: Deprecation | None = None
    buffer: bool = False          # an element count that sizes a GPU buffer

    @property
    def key(self) -> str:
        """The spelling configs (and DeepSpeed's docs) use."""
        return self.alias or self.name


def _f(name: str, kind: str, default: Any, **kw: Any) -> FieldSpec:
    return FieldSpec(name=name, kind=kind, default=default, **kw)


# ------------------------------------------------------------ zero_optimization

_ZERO_FIELDS: tuple[FieldSpec, ...] = (
    _f("stage", "enum", 0, stages=ALL_STAGES),
    _f("contiguous_gradients", "bool", True),
    _f("reduce_scatter", "bool", True),
    _f("reduce_bucket_size", "int", 500_000_000, buffer=True),
    _f("use_multi_rank_bucket_allreduce", "bool", True),
    _f("allgather_partitions", "bool", True, stages=STAGE12),
    _f("allgather_bucket_size", "int", 500_000_000, stages=STAGE12, buffer=True),
    # None = "decide by stage": True at stage 3, False otherwise (validator overlap_comm_valid);
    # the docs table says false.
    _f("overlap_comm", "bool", None, docs_default=False),
    _f("compute_grad_norm", "bool", True, stages=STAGE12),
    _f("load_from_fp32_weights", "bool", True),
    _f("elastic_checkpoint", "bool", False, stages=STAGE12),
    _f("offload_param", "section", None, stages=STAGE3),
    _f("offload_optimizer", "section", None),
    _f("zenflow", "section", None),
    _f("sub_group_size", "int", 1_000_000_000, docs_default=1_000_000_000_000, stages=STAGE3),
    _f("cpu_offload_param", "bool", None, stages=STAGE3,
       deprecated=Deprecation("offload_param", '{"device": "cpu"} when true')),
    _f("cpu_offload_use_pin_memory", "bool", None,
       deprecated=Deprecation("offload_param.pin_memory / offload_optimizer.pin_memory")),
    _f("cpu_offload", "bool", None,
       deprecated=Deprecation("offload_optimizer", '{"device": "cpu"} when true')),
    _f("prefetch_bucket_size", "int", 50_000_000, alias="stage3_prefetch_bucket_size",
       docs_default=500_000_000, stages=STAGE3, buffer=True),
    _f("param_persistence_threshold", "int", 100_000, alias="stage3_param_persistence_threshold",
       stages=STAGE3),
    _f("model_persistence_threshold", "int", sys.maxsize, alias="stage3_model_persistence_threshold",
       stages=STAGE3),
    _f("max_live_parameters", "int", 1_000_000_000, alias="stage3_max_live_parameters",
       stages=STAGE3, buffer=True),
    _f("max_reuse_distance", "int", 1_000_000_000, alias="stage3_max_reuse_distance", stages=STAGE3),
    _f("gather_16bit_weights_on_model_save", "bool", False,
       alias="stage3_gather_16bit_weights_on_model_save", stages=STAGE3),
    _f("module_granularity_threshold", "int", 0, alias="stage3_module_granularity_threshold",
       stages=STAGE3),
    _f("use_all_reduce_for_fetch_params", "bool", False, alias="stage3_use_all_reduce_for_fetch_params",
       stages=STAGE3),
    _f("allgather_sequential", "bool", False, alias="stage3_allgather_sequential", stages=STAGE3),
    _f("stage3_gather_fp16_weights_on_model_save", "bool", False, stages=STAGE3,
       deprecated=Deprecation("stage3_gather_16bit_weights_on_model_save")),
    _f("ignore_unused_parameters", "bool", True, stages=frozenset({2})),
    _f("legacy_stage1", "bool", False),
    _f("round_robin_gradients", "bool", False, stages=STAGE12),
    _f("parameter_alignment", "bool", False, stages=STAGE12),
    _f("zero_hpz_partition_size", "int", 1, stages=STAGE3),
    _f("zero_quantized_weights", "bool", False, stages=STAGE3),
    _f("zero_quantized_nontrainable_weights", "bool", False, stages=STAGE3),
    _f("zero_quantized_gradients", "bool", False, stages=STAGE3),
    _f("memory_efficient_linear", "bool", True, stages=STAGE3),
    _f("pipeline_loading_checkpoint", "bool", False, stages=STAGE3),
    _f("override_module_apply", "bool", True, stages=STAGE3),
    _f("log_trace_cache_warnings", "bool", False, stages=STAGE3),
    _f("enable_sanity_checks", "bool", False),
    _f("save_muon_momentum_buffer_in_memory", "bool", False, stages=STAGE3),
    _f("leaf_module", "section", None, stages=STAGE3),
)

# zero_optimization keys DeepSpeed 0.19.x refuses outright (DeepSpeedConfigError).
_REMOVED_ZERO_KEYS: Mapping[str, str] = MappingProxyType({
    "mics_shard_size": "MiCS ZeRO-3 sharding was removed",
    "mics_hierarchical_params_gather": "MiCS ZeRO-3 sharding was removed",
    "zeropp_loco_param": "LoCo-Zero++ was removed",
})

# ------------------------------------------------------------ offload sections

_OFFLOAD_PARAM_FIELDS: tuple[FieldSpec, ...] = (
    _f("device", "enum", "none"),
    _f("nvme_path", "path", None),
    _f("buffer_count", "int", 5),
    _f("buffer_size", "int", 100_000_000),
    _f("max_in_cpu", "int", 1_000_000_000),
    _f("pin_memory", "bool", True),
)

_OFFLOAD_OPTIMIZER_FIELDS: tuple[FieldSpec, ...] = (
    _f("device", "enum", "none"),
    _f("nvme_path", "path", None),
    _f("buffer_count", "int", 4),
    _f("pin_memory", "bool", True),
    _f("pipeline_read", "bool", False),
    _f("pipeline_write", "bool", False),
    _f("fast_init", "bool", False),
    _f("ratio", "float", 1.0, stages=STAGE3),     # < 1 is rejected below stage 3
    _f("super_offload", "bool", False),
    _f("cpuadam_cores_perc", "float", 0.8),
)

OFFLOAD_DEVICES: frozenset[str] = frozenset({"none", "cpu", "nvme"})

# ------------------------------------------------------------ precision sections

_FP16_FIELDS: tuple[FieldSpec, ...] = (
    _f("enabled", "bool", False, stages=ALL_STAGES),
    _f("auto_cast", "bool", False, stages=ALL_STAGES),
    _f("loss_scale", "float", 0, stages=ALL_STAGES),
    _f("initial_scale_power", "int", 16, stages=ALL_STAGES),
    _f("loss_scale_window", "int", 1000, stages=ALL_STAGES),
    _f("hysteresis", "int", 2, stages=ALL_STAGES),
    _f("consecutive_hysteresis", "bool", False, stages=ALL_STAGES),
    _f("min_loss_scale", "int", 1, stages=ALL_STAGES),
    _f("fp16_master_weights_and_grads", "bool", False),
)

_BF16_FIELDS: tuple[FieldSpec, ...] = (
    _f("enabled", "bool", False, stages=ALL_STAGES),
    _f("immediate_grad_update", "bool", False, stages=ALL_STAGES),
    _f("check_grad_overflow", "bool", True, stages=ALL_STAGES),
    _f("bf16_master_weights_and_grads", "bool", False),
    _f("bf16_optimizer_states", "bool", False),
)

# Not pydantic: unknown keys here are silently ignored (DeepSpeedActivationCheckpointingConfig).
_ACTIVATION_CHECKPOINTING_KEYS: frozenset[str] = frozenset({
    "partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
    "number_checkpoints", "synchronize_checkpoint_boundary", "profile",
})

# ------------------------------------------------------------ top level

# Keys DeepSpeedConfig (0.19.8) looks up, recorded with a dict that logs every
# lookup, plus the few the engine reads elsewhere (sequence_parallel_size).
_TOP_LEVEL_KEYS: frozenset[str] = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "managed_gradient_accumulation", "steps_per_print", "dump_state", "disable_python_gc",
    "disable_allgather", "communication_data_type", "seq_parallel_communication_data_type",
    "prescale_gradients", "gradient_predivide_factor", "gradient_allreduce_op",
    "zero_optimization", "activation_checkpointing", "comms_logger",
    "tensorboard", "wandb", "csv_monitor", "comet",
    "gradient_clipping", "fp16", "bf16", "bfloat16", "torch_autocast",
    "optimizer", "scheduler", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
    "flops_profiler", "wall_clock_breakdown", "memory_breakdown", "autotuning",
    "use_data_before_expert_parallelism", "hybrid_engine", "pipeline", "data_efficiency",
    "checkpoint", "data_types", "aio", "dataloader_drop_last", "log_level", "datastates_ckpt",
    "weight_quantization", "compile", "timers", "tensor_parallel", "expert_parallel",
    "vocabulary_size", "sequence_parallel_size",
})

# Top-level keys DeepSpeed 0.19.x refuses outright (_REMOVED_TOP_LEVEL_CONFIG_KEYS).
_REMOVED_TOP_LEVEL: Mapping[str, str] = MappingProxyType({
    "nebula": "Nebula checkpointing was removed; checkpoints would fall back to torch.save",
    "compression_training": "the compression library was removed; the model would train unquantized",
    "amp": "the NVIDIA Apex AMP integration was removed; use fp16, bf16 or torch_autocast",
    "quantize_training": "Mixture-of-Quantization was removed",
    "sparse_gradients": "sparse embedding-gradient compression was removed",
    "eigenvalue": "eigenvalue-based MoQ was removed",
    "sparse_attention": "DeepSpeed Sparse Attention was removed",
    "elasticity": "elastic training was removed; set the batch keys directly",
    "graph_harvesting": "graph harvesting was removed",
    "curriculum_learning": "top-level curriculum_learning was removed; use "
                           "data_efficiency.data_sampling.curriculum_learning",
    "progressive_layer_drop": "Progressive Layer Dropping was removed",
})

# Top-level keys that are read but superseded.
_DEPRECATED_TOP_LEVEL: Mapping[str, Deprecation] = MappingProxyType({
    "bfloat16": Deprecation("bf16", "same contents"),
})

# Keys people put in ds_config that DeepSpeed never reads, with the real fix.
NOT_DEEPSPEED_KEYS: Mapping[str, str] = MappingProxyType({
    "gradient_checkpointing": "enable it in the model or trainer (model.gradient_checkpointing_enable() / "
                              "--gradient_checkpointing); DeepSpeed's activation_checkpointing section only "
                              "configures deepspeed.checkpointing.checkpoint() and turns nothing on",
    "per_device_train_batch_size": "use train_micro_batch_size_per_gpu",
    "max_grad_norm": "use gradient_clipping",
    "zero_stage": "use zero_optimization.stage",
    "zero3_init_flag": "an Accelerate setting (accelerate config), not a ds_config key",
    "mixed_precision": "use bf16.enabled or fp16.enabled",
})

BATCH_KEYS: tuple[str, str, str] = (
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
)

# ------------------------------------------------------------ "auto"

# What the HF Trainer integration writes for each "auto" (transformers
# integrations/deepspeed.py, HfTrainerDeepSpeedConfig).
HF_TRAINER_AUTO: Mapping[str, str] = MappingProxyType({
    "train_micro_batch_size_per_gpu": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "train_batch_size": "world_size × per_device_train_batch_size × gradient_accumulation_steps",
    "gradient_clipping": "max_grad_norm",
    "optimizer.params.lr": "learning_rate",
    "optimizer.params.betas": "[adam_beta1, adam_beta2]",
    "optimizer.params.eps": "adam_epsilon",
    "optimizer.params.weight_decay": "weight_decay",
    "scheduler.params.warmup_min_lr": "0",
    "scheduler.params.warmup_max_lr": "learning_rate",
    "scheduler.params.warmup_num_steps": "warmup_steps / warmup_ratio",
    "scheduler.params.total_num_steps": "the number of training steps",
    "fp16.enabled": "fp16 or fp16_full_eval",
    "bf16.enabled": "bf16 or bf16_full_eval",
    "zero_optimization.reduce_bucket_size": "hidden_size²",
    "zero_optimization.stage3_prefetch_bucket_size": "int(0.9 × hidden_size²) (stage 3 only)",
    "zero_optimization.stage3_param_persistence_threshold": "10 × hidden_size (stage 3 only)",
})

# Extra keys Accelerate's DeepSpeedPlugin fills from `accelerate config`.
ACCELERATE_AUTO: Mapping[str, str] = MappingProxyType({
    "zero_optimization.stage": "zero_stage",
    "zero_optimization.offload_optimizer.device": "offload_optimizer_device",
    "zero_optimization.offload_param.device": "offload_param_device",
    "zero_optimization.offload_param.nvme_path": "offload_param_nvme_path",
    "zero_optimization.offload_optimizer.nvme_path": "offload_optimizer_nvme_path",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "zero3_save_16bit_model",
})


# ------------------------------------------------------------ the bundle


@dataclass(frozen=True, slots=True)
class KeyTables:
    """Everything lint needs to know about DeepSpeed's keys, from one source
    (``static`` or ``installed``) so a message can say which DeepSpeed it
    speaks for."""

    source: str
    version: str
    top_level: frozenset[str]
    removed_top_level: Mapping[str, str]
    deprecated_top_level: Mapping[str, Deprecation]
    zero: Mapping[str, FieldSpec]                  # by pydantic field name
    removed_zero: Mapping[str, str]
    offload_param: Mapping[str, FieldSpec]
    offload_optimizer: Mapping[str, FieldSpec]
    fp16: Mapping[str, FieldSpec]
    bf16: Mapping[str, FieldSpec]
    activation_checkpointing: frozenset[str]
    zero_aliases: Mapping[str, str] = field(default_factory=dict)   # alias -> field name

    def zero_field(self, key: str) -> FieldSpec | None:
        """Look a zero_optimization key up by JSON alias or field name."""
        name = self.zero_aliases.get(key, key)
        return self.zero.get(name)

    def zero_keys(self) -> tuple[str, ...]:
        """Every spelling DeepSpeed accepts inside zero_optimization."""
        return tuple(sorted({*self.zero, *self.zero_aliases}))


def _by_name(specs: tuple[FieldSpec, ...]) -> Mapping[str, FieldSpec]:
    return MappingProxyType({s.name: s for s in specs})


def _aliases(specs: Mapping[str, FieldSpec]) -> Mapping[str, str]:
    return MappingProxyType({s.alias: s.name for s in specs.values() if s.alias})


def static_tables() -> KeyTables:
    """The tables as copied from DeepSpeed ``STATIC_VERSION``: always
    available, no imports."""
    zero = _by_name(_ZERO_FIELDS)
    return KeyTables(
        source="static",
        version=STATIC_VERSION,
        top_level=_TOP_LEVEL_KEYS,
        removed_top_level=_REMOVED_TOP_LEVEL,
        deprecated_top_level=_DEPRECATED_TOP_LEVEL,
        zero=zero,
        zero_aliases=_aliases(zero),
        removed_zero=_REMOVED_ZERO_KEYS,
        offload_param=_by_name(_OFFLOAD_PARAM_FIELDS),
        offload_optimizer=_by_name(_OFFLOAD_OPTIMIZER_FIELDS),
        fp16=_by_name(_FP16_FIELDS),
        bf16=_by_name(_BF16_FIELDS),
        activation_checkpointing=_ACTIVATION_CHECKPOINTING_KEYS,
    )


# ------------------------------------------------------------ from the installed DeepSpeed


def _kind_of(annotation: Any) -> str:
    """Map a pydantic annotation to our coarse kinds (Optional[...] unwrapped)."""
    import enum
    import typing
    from pathlib import Path

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    ann = args[0] if len(args) == 1 else annotation
    if ann is bool:
        return "bool"
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return "enum"
    if ann is int:
        return "int"
    if ann is float:
        return "float"
    if ann is Path:
        return "path"
    if isinstance(ann, type) and hasattr(ann, "model_fields"):
        return "section"
    return "other"


def _default_of(info: Any) -> Any:
    """A field's default as a plain value (pp_int -> int, enum -> value)."""
    from pydantic_core import PydanticUndefined

    if info.default is PydanticUndefined:
        return None
    value = info.default
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    return getattr(value, "value", value)


def fields_from_model(model: Any, static: Mapping[str, FieldSpec]) -> Mapping[str, FieldSpec]:
    """FieldSpecs for a DeepSpeed pydantic model: names, aliases, kinds,
    defaults and deprecations from the model; stage relevance and docs
    defaults from the static entry of the same name (new fields get the
    neutral defaults)."""
    out: dict[str, FieldSpec] = {}
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        dep = None
        if extra.get("deprecated"):
            known = static.get(name)
            # keep the static wording (JSON spelling, value hint) where we have one
            dep = known.deprecated if known and known.deprecated else Deprecation(str(extra.get("new_param", "")))
        base = static.get(name) or FieldSpec(name=name, kind="other", default=None)
        out[name] = replace(base, kind=_kind_of(info.annotation), default=_default_of(info),
                            alias=info.alias, deprecated=dep)
    return MappingProxyType(out)


class _RecordingDict(dict):  # type: ignore[type-arg]
    """A dict that remembers which keys were looked up, to learn which
    top-level keys DeepSpeedConfig reads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.seen.add(key)  # type: ignore[arg-type]
        return super().__contains__(key)

    def keys(self) -> Any:  # `if OPTIMIZER in param_dict.keys()` must be recorded too
        return _RecordingKeys(self)


class _RecordingKeys:
    def __init__(self, owner: _RecordingDict) -> None:
        self._owner = owner

    def __contains__(self, key: object) -> bool:
        return self._owner.__contains__(key)

    def __iter__(self) -> Any:
        return iter(dict.keys(self._owner))

    def __len__(self) -> int:
        return dict.__len__(self._owner)


def top_level_keys_read(ds: Any) -> frozenset[str]:
    """Run the installed ``DeepSpeedConfig`` on a minimal config and return
    every top-level key it looked up (removed-feature keys included)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    probe = _RecordingDict({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1})
    DeepSpeedConfig(probe)
    return frozenset(k for k in probe.seen if isinstance(k, str))


def installed_tables(ds: Any) -> KeyTables:
    """Tables derived from the installed DeepSpeed module ``ds`` (imported by
    the caller — see ``validate.load_deepspeed``), annotated from the static
    tables.  Raises whatever DeepSpeed raises if its internals moved; callers
    fall back to ``static_tables()``."""
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime import precision_config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig,
        DeepSpeedZeroOffloadParamConfig,
    )

    static = static_tables()
    zero = fields_from_model(DeepSpeedZeroConfig, static.zero)
    removed_top = getattr(ds_config, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", static.removed_top_level)
    removed_zero = getattr(ds_config, "_REMOVED_ZERO_CONFIG_KEYS", static.removed_zero)
    read = top_level_keys_read(ds) - set(removed_top)
    return KeyTables(
        source="installed",
        version=str(getattr(ds, "__version__", "unknown")),
        top_level=frozenset(read | {"optimizer", "scheduler", "sequence_parallel_size"}),
        removed_top_level=MappingProxyType({k: _short(v) for k, v in removed_top.items()}),
        deprecated_top_level=static.deprecated_top_level,
        zero=zero,
        zero_aliases=_aliases(zero),
        removed_zero=MappingProxyType({k: _short(v) for k, v in removed_zero.items()}),
        offload_param=fields_from_model(DeepSpeedZeroOffloadParamConfig, static.offload_param),
        offload_optimizer=fields_from_model(DeepSpeedZeroOffloadOptimizerConfig, static.offload_optimizer),
        fp16=fields_from_model(precision_config.DeepSpeedFP16Config, static.fp16),
        bf16=fields_from_model(precision_config.DeepSpeedBF16Config, static.bf16),
        activation_checkpointing=static.activation_checkpointing,
    )


def _short(message: str) -> str:
    """First sentence of a DeepSpeed removal message (they end with an issue URL)."""
    head = message.split(". ")[0].strip()
    return head.rstrip(".")
