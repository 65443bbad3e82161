"""CFG002 — ZeRO-3 without ``zero.Init``: every rank first builds the whole model.

**Cause**  ZeRO-3 partitions parameters only if they were created under
``deepspeed.zero.Init`` (HF does this when ``TrainingArguments(deepspeed=…)``
exists before ``from_pretrained``).  A model built normally is moved to the GPU
whole by ``deepspeed.initialize`` (``_configure_distributed_model`` →
``module.to(device)``), so a model larger than one GPU dies there — a setting
that does not reduce per-GPU work (DESIGN.md: ``config_error``).

**Fix**  Build the model inside ``with deepspeed.zero.Init(config_dict_or_path=
ds_config):`` or create the HF ``TrainingArguments`` / ``HfDeepSpeedConfig``
before loading the model.  Offload settings do not help until then.
"""

from __future__ import annotations

from ...analysis.context import Context
from ...analysis.phase import Phase
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b, limit_label, oom_refs


class Zero3WithoutZeroInit:
    code = "CFG002"
    cause = Cause.CONFIG_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        o = ctx.oom
        if o is None or ctx.phase.phase is not Phase.MODEL_TO_DEVICE:
            return []
        in_engine = any("_configure_distributed_model" in fr.name for fr in o.stack.frames)
        stage = ctx.setup.get("zero_stage")
        if not in_engine or stage != 3:
            return []
        signals = [("OOM inside DeepSpeed's _configure_distributed_model (module.to(device))", 0.55),
                   ("ZeRO stage 3 configured", 0.25)]
        numbers = [("ZeRO stage", "3"), ("failing phase", "deepspeed.initialize moves the whole module")]
        n = ctx.setup.get("model_params")
        if n:
            weights = int(n) * (4 if ctx.setup.dtype == "fp32" else 2)
            numbers.append(("whole model in 16-bit", b(weights)))
            if ctx.limit_bytes and weights > ctx.limit_bytes:
                signals.append(("the unpartitioned model alone exceeds " + limit_label(ctx), 0.1))
        if ctx.limit_bytes:
            numbers.append((limit_label(ctx), b(ctx.limit_bytes)))
        return [Finding(
            self.code, self.cause, "ZeRO-3 without zero.Init: the whole model was moved to one GPU",
            confidence(signals), evidence=oom_refs(ctx),
            fixes=(Fix("code", "deepspeed.zero.Init", "with deepspeed.zero.Init(config_dict_or_path=ds_config): "
                       "model = AutoModelForCausalLM.from_config(...)",
                       "parameters are created already partitioned, so no rank ever holds the whole model"),
                   Fix("code", "TrainingArguments(deepspeed=...) before from_pretrained", "HfDeepSpeedConfig",
                       "with the HF integration, from_pretrained uses zero.Init only if the DeepSpeed config is "
                       "registered before the model is loaded")),
            not_fixes=(NotAFix("offload_param / offload_optimizer", "the engine moves the module to the GPU before "
                               "any offload takes effect"),
                       NotAFix("a smaller micro-batch", "the OOM happens before the first batch")),
            signals=tuple(signals), numbers=tuple(numbers),
            detail="The OOM happened inside deepspeed.initialize while the engine moved the unpartitioned module to "
                   "the GPU. Under ZeRO-3 that only happens when the model was not built under zero.Init; building "
                   "it there removes the OOM without reducing any per-GPU work.",
            sub_cause="zero3_without_zero_init")]
