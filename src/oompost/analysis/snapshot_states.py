"""Model states read off one snapshot's live blocks: DESIGN.md's capacity question without a log.

A snapshot knows no parameter count and no dtype, but it knows where every live
block was allocated.  The weights are the blocks a model's construction,
loading or ``.to(device)`` allocated; the optimizer's are the blocks its own
files allocated (Adam's moments); a gradient has exactly the size of its
parameter, so the live blocks of a parameter's requested size that neither
built were the gradients (matched one for one, ignoring parameters under
1 MiB, whose sizes activations share too often).  That holds in eager and in
compiled backward alike: inductor allocates a gradient as ``empty_strided_cuda``
of the parameter's shape.

In bytes, whatever the dtype, plain PyTorch training keeps a gradient of each
weight's size, and Adam two moments of it: weights + gradients is what every
batch size needs, and with Adam 4 x weights.  DeepSpeed partitions and
flattens all of these, so a snapshot with DeepSpeed's ZeRO blocks is left to
the memory model (``None``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from ..model import Snapshot
from .phase import Phase, block_phase
from .snapshot_metrics import live_blocks_at_oom

MIB = 2**20
_WEIGHT_PHASES = frozenset((Phase.MODEL_INIT, Phase.MODEL_TO_DEVICE, Phase.CHECKPOINT_LOAD))
_OPTIMIZER_PHASES = frozenset((Phase.OPTIMIZER_INIT, Phase.OPTIMIZER_STEP))
_ZERO_PHASES = frozenset((Phase.ZERO_INIT, Phase.GRAD_PARTITION, Phase.ZERO3_GATHER, Phase.DS_BUCKET))


@dataclass(frozen=True, slots=True)
class SnapshotStates:
    """Live bytes at the OOM by owner: the model's weights, their gradients, the optimizer's state."""
    weights_bytes: int
    weight_blocks: int
    grad_bytes: int                   # live blocks of a (≥ 1 MiB) parameter's exact size that nothing else built
    optimizer_bytes: int
    live_bytes: int

    @property
    def trains_all_weights(self) -> bool:
        """Gradients (or optimizer state) exist for most of the weights: full fine-tuning, not adapters or
        inference."""
        w = self.weights_bytes
        return w > 0 and (self.grad_bytes >= 0.5 * w or self.optimizer_bytes >= 0.5 * w)

    @property
    def floor_bytes(self) -> int:
        """What every batch size needs at once: the weights, plus a gradient of each when all are trained,
        plus the optimizer state already allocated."""
        return self.weights_bytes * (2 if self.trains_all_weights else 1) + self.optimizer_bytes

    @property
    def with_adam_bytes(self) -> int:
        """The floor once Adam has its two moments of every trained weight (in the weights' dtype)."""
        if not self.trains_all_weights:
            return self.floor_bytes
        return 2 * self.weights_bytes + max(self.optimizer_bytes, 2 * self.weights_bytes)


def snapshot_states(snap: Snapshot) -> SnapshotStates | None:
    """The model states live at the OOM, or None when the blocks carry no stacks, no weights are found, or
    DeepSpeed's ZeRO owns the states."""
    blocks = live_blocks_at_oom(snap)
    if not blocks or not any(blk.frames for blk in blocks):
        return None

    weights = opt = grads = nweights = 0
    sizes: collections.Counter = collections.Counter()
    rest = []
    for blk in blocks:
        ph = block_phase(blk.frames) if blk.frames else Phase.UNKNOWN
        if ph in _ZERO_PHASES:
            return None
        if ph in _WEIGHT_PHASES:
            weights += blk.size
            nweights += 1
            if blk.requested_size >= MIB:
                sizes[blk.requested_size] += 1
        elif ph in _OPTIMIZER_PHASES:
            opt += blk.size
        else:
            rest.append(blk)
    if not weights:
        return None
    for blk in rest:
        if sizes[blk.requested_size] > 0:
            sizes[blk.requested_size] -= 1
            grads += blk.size
    return SnapshotStates(weights, nweights, grads, opt, sum(blk.size for blk in blocks))
