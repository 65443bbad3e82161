"""ADV001 — ``offload_param`` below ZeRO stage 3 does nothing.

**Cause**  DeepSpeed passes the parameter-offload config only to the ZeRO-3
optimizer; at stages 1 and 2 the key validates and is silently ignored, so
the 16-bit weights stay on every GPU.  (The most repeated advice in the seed
threads is "also turn on offload_param" for a ZeRO-2 run.)

**Fix**  Remove it, or move to stage 3 where it takes effect.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, Severity


class OffloadParamIgnored:
    code = "ADV001"
    cause = Cause.CONFIG_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        stage = ctx.setup.get("zero_stage")
        if ctx.setup.offload_param == "none" or stage not in (0, 1, 2):
            return []
        refs = (ctx.setup.ds_config_ref,) if ctx.setup.ds_config_ref else ()
        return [Finding(
            self.code, self.cause, f"offload_param is ignored at ZeRO stage {stage}", 0.95, evidence=refs,
            fixes=(Fix("ds_config", "zero_optimization.offload_param", None,
                       "remove it: below stage 3 the weights stay on the GPU whatever it says"),
                   Fix("ds_config", "zero_optimization.stage", 3, "parameter offload exists only at stage 3")),
            detail=f"The config offloads parameters, but at ZeRO stage {stage} DeepSpeed never gives the "
                   "parameter-offload config to the optimizer: the 16-bit weights stay on every GPU.",
            severity=Severity.ADVICE, sub_cause="offload_param_below_stage3")]
