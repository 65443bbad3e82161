"""CFG005 — TensorFlow could not reserve its GPU memory pool: the device was already taken.

**Cause**  TensorFlow's BFC allocator reserves most of the card for itself
when a process first uses it, unless memory growth is on.  When CUDA (or
HIP) refuses that reservation, the stream executor logs "failed to allocate
7.35G (7889485824 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY" and retries
about 10 % smaller, line after line.  A card that refuses its own process's
first reservation is held by someone else: a second process or rank on the
same GPU (Horovod or Ray workers without per-rank device pinning, two
sessions, a notebook kernel still alive), or another TensorFlow in the same
job that already took the pool.  No batch size changes that — it is a
set-up mistake (DESIGN.md: ``config_error``); of the corpus threads that
show the retried reservation, all are.

**Fix**  One process per GPU (``CUDA_VISIBLE_DEVICES`` per rank, Horovod's
``tf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU')``); memory
growth (``tf.config.experimental.set_memory_growth`` or
``TF_FORCE_GPU_ALLOW_GROWTH=true``) or a per-process memory fraction when
processes must share a card.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b
from ._runtimes import runtime_fixes

RETRY = 0.95            # each retry asks for at most this share of the one before (TensorFlow's is 0.9)


class TfPoolRefused:
    code = "CFG005"
    cause = Cause.CONFIG_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        refused = [o for o in ctx.evidence.ooms if o.request_scope == "pool" and o.requested_bytes]
        if len(refused) < 2:
            return []
        by_rank: dict[int | None, list[int]] = {}
        for o in refused:
            by_rank.setdefault(o.rank, []).append(o.requested_bytes or 0)
        run = max(by_rank.values(), key=len)
        retried = sum(1 for a, c in zip(run, run[1:]) if c <= RETRY * a)
        if retried == 0:
            return []
        signals = [(f"TensorFlow's first reservation of the GPU was refused and retried smaller {retried} time"
                    f"{'s' if retried > 1 else ''} ({b(run[0])} → {b(run[-1])})", 0.5)]
        if retried >= 2:
            signals.append(("the retries shrink by about a tenth each: the allocator reserving its pool, not "
                            "a step's tensor", 0.15))
        if len(by_rank) > 1:
            signals.append((f"{len(by_rank)} ranks log refused reservations", 0.1))
        fixes = (Fix("env", "CUDA_VISIBLE_DEVICES", "one GPU per process (Horovod: "
                     "tf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU'))",
                     "two processes on one card each try to reserve most of it"),
                 *runtime_fixes("tensorflow", Cause.CONFIG_ERROR))
        return [Finding(
            self.code, self.cause, "TensorFlow could not reserve the GPU: something else already holds it",
            confidence(signals), evidence=tuple(o.ref for o in refused[:4]),
            fixes=fixes,
            not_fixes=(NotAFix("a smaller batch", "the reservation fails before any batch: the card is taken"),),
            signals=tuple(signals),
            numbers=(("first reservation refused", b(run[0])), ("last retry refused", b(run[-1])),
                     ("refused reservations", str(len(refused)))),
            detail=("TensorFlow's allocator asked the device for its memory pool and was refused, then retried "
                    "smaller: the card was already held by another process or rank, or by another TensorFlow "
                    "in the same job."))]
