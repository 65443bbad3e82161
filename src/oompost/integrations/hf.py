"""``OompostCallback``: oompost.record for the HuggingFace Trainer.

    from oompost.integrations.hf import OompostCallback
    trainer = Trainer(..., callbacks=[OompostCallback(dir="crash/")])

It starts recording at ``on_train_begin`` (before the optimizer state and
the first activations exist), writes one per-step line at each
``on_step_end`` with the Trainer's ``global_step`` (instead of the optimizer
hook, so gradient accumulation and the Trainer's step numbers agree), records
the model's parameter count, the Trainer's batch settings and the DeepSpeed
config when the Trainer runs DeepSpeed, and stops at ``on_train_end``.
transformers is needed only to run a Trainer: without it the class is a
plain object with the same methods.
"""

from __future__ import annotations

from typing import Any

from .. import record as _record

try:  # pragma: no cover - depends on the environment
    from transformers import TrainerCallback as _Base
except Exception:  # transformers absent or broken: the Trainer is not in use either
    _Base = object

_TRAINER_ARGS = ("per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
                 "bf16", "fp16", "max_steps", "optim", "torch_compile")


class OompostCallback(_Base):  # type: ignore[misc,valid-type]
    def __init__(self, dir: str = "oompost-capture", **kwargs: Any) -> None:
        self.dir = dir
        self.kwargs = kwargs
        self.recorder: _record.Recorder | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        rec = self.recorder
        if rec is None or not rec.enabled:
            rec = self.recorder = _record.enable(self.dir, steps=False, **self.kwargs)
        if not rec.enabled:
            return control
        ds = getattr(getattr(args, "hf_deepspeed_config", None), "config", None)
        if isinstance(ds, dict):
            rec._ds_config = dict(ds)
        rec.extra_meta = {"trainer_args": {k: _plain(getattr(args, k)) for k in _TRAINER_ARGS
                                            if hasattr(args, k)}}
        if model is not None:
            rec.watch(model)
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.recorder is not None:
            self.recorder.step(int(getattr(state, "global_step", 0)) or None)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.recorder is not None:
            self.recorder._safe(lambda: self.recorder._write_meta(reason="train_end"))
            self.recorder.stop()
        return control


def _plain(v: Any) -> Any:
    """Builtins only (enums such as OptimizerNames become their text)."""
    return v if type(v) in (int, float, bool, str, type(None)) else str(getattr(v, "value", v))
