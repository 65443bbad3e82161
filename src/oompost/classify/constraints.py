"""Causes that physics and DESIGN.md's definitions rule out, whatever the weights say.

The verdict model weighs signals; these are the facts no weight may override:
a request larger than every free byte cannot be fragmentation; a leak needs an
input that shows memory rising, and a step series that stays flat up to the OOM
rules it out; an allocation that concatenates outputs kept from every earlier
batch, or live blocks kept from every earlier step (a snapshot's LEAK003), make
a leak that DESIGN.md's order puts before fragmentation and a step's
activations; model states that alone exceed the limit (by the memory model, or
measured in a snapshot's live blocks) make the run's capacity the cause (DESIGN.md's order puts it before the causes of a step);
a generation whose measured growth a position would use up all free memory within a tenth of the positions
already generated cannot be fragmentation (its remaining demand);
a request of a petabyte or more is no tensor at all (CFG004): its size is corrupt, so no memory cause explains it.
"""

from __future__ import annotations

from ..analysis.context import Context
from ..analysis.logits import loss_demand
from ..analysis.site_history import LARGER_BATCH
from ..analysis.phase import Phase
from ..analysis.steps import flat
from ..model import DATA_RUNTIMES
from .base import Cause
from .rules._common import headroom
from .rules.impossible_request import impossible_request


# the share of a generation's positions that all free memory must still hold for its layout to be the cause
GENERATION_HEADROOM = 0.1


def impossible_causes(ctx: Context) -> frozenset[Cause]:
    """Causes that physics rules out, whatever the weights say."""
    out = set()
    o = ctx.oom
    if o is not None and o.requested_bytes and o.reserved_unallocated_bytes is not None:
        h = headroom(ctx)
        if h is not None and o.requested_bytes > o.reserved_unallocated_bytes + h:
            out.add(Cause.FRAGMENTATION)      # even one perfect block of all free memory is too small
        demand = loss_demand(ctx)
        if demand is None and ctx.snapshot is not None:
            hist = ctx.site_history
            if hist is not None and hist.ratio >= LARGER_BATCH:
                # a batch far larger than those the trace recorded: what the same forward needed after that line,
                # scaled as the request was, is the phase's remaining demand
                demand = hist.scaled_demand
        if h is not None and demand is not None and demand > o.reserved_unallocated_bytes + h:
            # the request is one batch's logits (or a batch far larger than the trace's earlier ones): what the
            # phase still needs exceeds all free memory, however it were laid out (DESIGN.md: remaining demand)
            out.add(Cause.FRAGMENTATION)
        g = ctx.generation
        if (h is not None and g is not None and g.bytes_per_position and ctx.phase.phase is Phase.GENERATION
                and o.reserved_unallocated_bytes + h < GENERATION_HEADROOM * g.positions * g.bytes_per_position):
            # a generation whose live memory grows by a measured amount a position: everything still free would
            # be gone within a tenth of the positions already generated, so the rest of the call cannot fit however
            # it were laid out (DESIGN.md: remaining demand)
            out.add(Cause.FRAGMENTATION)
    # the steps logged up to the OOM hold allocated memory flat: nothing is kept from step to step (an
    # evaluation loop between the logged steps can still keep its outputs: not ruled out then)
    if (ctx.steps and flat(ctx.steps, ctx.limit_bytes) and _steps_reach_the_oom(ctx)
            and ctx.phase.phase is not Phase.RETAINED and ctx.evidence.fact("cue.evaluation") is None):
        out.add(Cause.LEAK)
    # DESIGN.md's leak is memory rising step after step: with no input showing any rise, nothing supports it
    if not ctx.growth_shown:
        out.add(Cause.LEAK)
    if ctx.retention is not None and ctx.retention.material:
        # the snapshot shows tensors kept from every earlier step, a material part of the live memory (LEAK003):
        # the leak holds, and DESIGN.md's order puts it before fragmentation and the causes of a step
        out |= {Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE}
    if ctx.evidence.fact("cue.graph_kept") is not None and ctx.evidence.fact("cue.training_progress") is not None:
        # PyTorch's own warning names a summed loss that still holds its graph, and iterations ran (LEAK005): the
        # leak holds, and DESIGN.md's order puts it before fragmentation and the causes of a step
        out |= {Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE}
    if ctx.phase.phase is Phase.RETAINED:
        # the failing allocation concatenates outputs kept from every earlier batch (LEAK002): the leak holds,
        # and DESIGN.md's order puts it before fragmentation and the causes of a step
        out |= {Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE}
    if ctx.own_runtime in DATA_RUNTIMES:
        # a vector index, a boosting matrix or a dataframe has no activations: what failed is the data not fitting
        # (or kept, or fragmented), never a step's activations (none of the 11 dev cases of these libraries is one)
        out.add(Cause.ACTIVATION_SPIKE)
    if impossible_request(ctx):
        # no tensor is that large: the size was computed wrong (CFG004), whatever memory there was
        out |= {Cause.CAPACITY, Cause.LEAK, Cause.COMM_BUFFER, Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE}
    if _states_alone_exceed_the_limit(ctx) or _snapshot_states_fill_the_limit(ctx):
        # capacity proven by arithmetic holds, and DESIGN.md's order puts it before the causes of a step
        out |= {Cause.LEAK, Cause.COMM_BUFFER, Cause.FRAGMENTATION, Cause.ACTIVATION_SPIKE}
    return frozenset(out)


_TRAINING = (Phase.BACKWARD, Phase.OPTIMIZER_STEP, Phase.OPTIMIZER_INIT, Phase.GRAD_PARTITION)


def _states_alone_exceed_the_limit(ctx: Context) -> bool:
    """A training run whose model states alone exceed the limit, on figures the inputs state: the parameter
    count printed by the run (not guessed from a name), every parameter trained (no adapters), no DeepSpeed
    partitioning or offload to misread, and the failing allocation in training (backward, the optimizer)."""
    s, e, L = ctx.setup, ctx.estimate_min, ctx.limit_bytes
    if e is None or not L or s.model_params is None or s.lora_r is not None or s.deepspeed:
        return False
    if s.trainable_params is not None and s.trainable_params.value < 0.9 * s.model_params.value:
        return False
    if not _training(ctx):
        return False
    return e.model_states_bytes > 1.1 * L


def _snapshot_states_fill_the_limit(ctx: Context) -> bool:
    """A training step whose snapshot shows the model states filling the limit by themselves: weights built
    by the model's construction or loading, a gradient of each (every weight is trained) and the optimizer
    state already allocated take ≥ 97 % of it, so no micro-batch's activations can fit beside them — or, with
    Adam's two moments of every trained weight still to come (the optimizer a log that names none is priced
    with), more than 110 % of it."""
    ss, L = ctx.snapshot_states, ctx.limit_bytes
    # (gradients or optimizer state of most weights already live prove the run trains, whichever frame failed)
    if ss is None or not L or not ss.trains_all_weights or ss.weights_bytes < 0.3 * L:
        return False
    # the memory model's assumption for a log that names no optimizer, Adam(W), made on measured weights: its two
    # moments of every trained weight with the weights and their gradients exceed the limit by a tenth
    return ss.floor_bytes >= 0.97 * L or ss.with_adam_bytes > 1.1 * L


# frames only a training run has: the HF Trainer's step and loop, autograd's engine, a checkpoint's recomputation,
# a train() / train_step() of a trainer (EasyDeL's trainer.train -> sharded_train_step_fn): an inference run has
# no optimizer state to hold, a training run must hold it wherever in the run it failed
_TRAINING_FRAMES = frozenset(("training_step", "_engine_run_backward", "run_backward", "recompute_fn",
                              "unpack_hook", "_inner_training_loop", "train", "train_step", "train_epoch",
                              "train_one_epoch"))


def _training(ctx: Context) -> bool:
    """The failing allocation belongs to a training step: backward or the optimizer by its phase, or a
    forward whose stack runs inside a training step (the Trainer's step, autograd, a recomputation)."""
    if ctx.phase.phase in _TRAINING:
        return True
    o = ctx.oom
    return o is not None and any(fr.name in _TRAINING_FRAMES for fr in o.stack.frames)


def _steps_reach_the_oom(ctx: Context) -> bool:
    """The logged steps run up to the OOM: the last step line shortly before the OOM in the same log,
    or a line of oompost.record's step file (it logs every step until the OOM), known by its content."""
    last = ctx.steps[-1].reading.ref
    text = (last.text or "").lstrip()
    if text.startswith('{"step"') and '"allocated_gib"' in text:
        return True
    o = ctx.oom
    return (o is not None and o.ref.source == last.source and o.ref.line is not None and last.line is not None
            and 0 < o.ref.line - last.line <= 300)


# An evaluation that fails while more is live than its failing request, with no snapshot and no memory series to
# say what that is: a batch too large and outputs kept from earlier batches (a list of logits) read the same from
# the log (a captured Accelerate evaluation keeping every batch's logits failed in a batch twice the training
# one).  Its step verdict is kept below 0.8, as an OOM message alone is.
EVAL_AMBIGUOUS_CONFIDENCE = 0.79


def confidence_ceiling(ctx: Context, cause: Cause) -> float | None:
    """The most a verdict of ``cause`` may claim on these inputs, where they cannot tell it from another cause
    (None: no ceiling beyond the model's own)."""
    from ..analysis.evaluation import evaluation_pass

    o = ctx.oom
    if (cause is Cause.ACTIVATION_SPIKE and o is not None and o.allocated_bytes is not None and o.requested_bytes
            and o.allocated_bytes >= o.requested_bytes and ctx.snapshot is None and not ctx.steps
            and evaluation_pass(ctx) is not None):
        return EVAL_AMBIGUOUS_CONFIDENCE
    return None
