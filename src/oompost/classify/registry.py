"""The rules, in DESIGN.md's decision order (an explicit list: no plugin magic).

Cause rules come first, in taxonomy order; advisory rules (settings that do
nothing, rank skew, a truncated trace, a misleading hint) follow.
"""

from __future__ import annotations

from .rules.activation import ActivationSpike
from .rules.capacity import Capacity
from .rules.checkpointing_section_unused import CheckpointingSectionUnused
from .rules.comm_buffer import CommBuffer
from .rules.config_error import ConfigError
from .rules.fragmentation import Fragmentation
from .rules.held_elsewhere import HeldElsewhere
from .rules.host_oom import HostOom
from .rules.impossible_request import ImpossibleRequest
from .rules.kept_across_batches import KeptAcrossBatches
from .rules.kept_across_generations import KeptAcrossGenerations
from .rules.kept_across_steps import KeptAcrossSteps
from .rules.leak import Leak
from .rules.nccl_error import NcclError
from .rules.offload_param_ignored import OffloadParamIgnored
from .rules.pytorch_hint import PytorchHint
from .rules.rank_skew import RankSkew
from .rules.retained_outputs import RetainedOutputs
from .rules.summed_loss_graph import SummedLossGraph
from .rules.tf_pool_refused import TfPoolRefused
from .rules.trace_truncated import TraceTruncated
from .rules.unknown import Unknown
from .rules.zero3_without_zero_init import Zero3WithoutZeroInit

CAUSE_RULES = (ConfigError(), Zero3WithoutZeroInit(), HeldElsewhere(), TfPoolRefused(), ImpossibleRequest(), HostOom(), NcclError(), Capacity(), Leak(), RetainedOutputs(), KeptAcrossSteps(), KeptAcrossBatches(), KeptAcrossGenerations(), SummedLossGraph(), CommBuffer(),
               Fragmentation(), ActivationSpike())
ADVICE_RULES = (OffloadParamIgnored(), CheckpointingSectionUnused(), PytorchHint(), RankSkew(), TraceTruncated())
FALLBACK = Unknown()
