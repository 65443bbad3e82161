"""Memory estimator: model shapes (``models``) and the per-GPU memory model
(``memory``) behind ``oompost estimate`` and the capacity rule."""

from .memory import (
    CALIBRATION,
    DEFAULT_DEVICE_BYTES,
    Estimate,
    TrainSetup,
    activation_terms,
    estimate,
    kv_cache_bytes,
    logits_terms,
    lora_adapter_params,
)
from .models import (
    PRESET_ALIASES,
    PRESETS,
    ModelSpec,
    ModuleParams,
    load_model_spec,
    parse_param_count,
    preset,
    spec_from_hf_config,
    spec_from_param_count,
)

__all__ = [
    "CALIBRATION",
    "DEFAULT_DEVICE_BYTES",
    "Estimate",
    "ModelSpec",
    "ModuleParams",
    "PRESETS",
    "PRESET_ALIASES",
    "TrainSetup",
    "activation_terms",
    "estimate",
    "kv_cache_bytes",
    "load_model_spec",
    "logits_terms",
    "lora_adapter_params",
    "parse_param_count",
    "preset",
    "spec_from_hf_config",
    "spec_from_param_count",
]
