"""ADV002 — an ``activation_checkpointing`` section that turns nothing on.

**Cause**  DeepSpeed's ``activation_checkpointing`` section only configures
``deepspeed.checkpointing.checkpoint()``; it does not enable checkpointing.
The model must call it, or the HF model must be told
(``gradient_checkpointing=True`` / ``model.gradient_checkpointing_enable()``).
Only the run's logs or stacks show whether it was on.

**Fix**  Enable gradient checkpointing in the model or trainer.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, Severity


class CheckpointingSectionUnused:
    code = "ADV002"
    cause = Cause.ACTIVATION_SPIKE

    def evaluate(self, ctx: Context) -> list[Finding]:
        cfg = ctx.setup.ds_config
        if not isinstance(cfg, dict) or not isinstance(cfg.get("activation_checkpointing"), dict):
            return []
        ck = ctx.setup.grad_ckpt
        stacks = [o.stack for o in ctx.evidence.ooms]
        used = any("checkpoint" in f.filename or "checkpoint" in f.name for st in stacks for f in st.frames)
        if used or (ck is not None and ck.value):
            return []
        evidence_off = ck is not None and ck.value is False
        in_forward = ctx.oom is not None and ctx.phase.phase.is_activation and bool(ctx.oom.stack.frames)
        if not (evidence_off or in_forward):
            return []
        refs = tuple(r for r in (ctx.setup.ds_config_ref, ck.ref if ck else None,
                                 ctx.oom.ref if ctx.oom else None) if r is not None)
        how = "the log says gradient_checkpointing=False" if evidence_off else \
            "the OOM's forward stack has no checkpoint frames"
        return [Finding(
            self.code, self.cause, "activation_checkpointing is configured but checkpointing is off", 0.85,
            evidence=refs,
            fixes=(Fix("trainer_arg", "gradient_checkpointing", True,
                       "the DeepSpeed section only configures deepspeed.checkpointing; it enables nothing"),),
            detail=f"The DeepSpeed config has an activation_checkpointing section, but {how}.",
            severity=Severity.ADVICE, sub_cause="checkpointing_section_without_checkpointing")]
