"""CFG003 — most of the GPU (or a third of it, by one other process the message names) was held by memory this
process's PyTorch never allocated.

**Cause**  The OOM message says how big the card is, how much of it is free,
and how much PyTorch in the failing process has reserved.  When the card is
nearly full but PyTorch holds only a small part of it, the rest belongs to
someone else: another process on the same GPU (a second job, a notebook
kernel still alive, two ranks given one device), or another library inside
this process that grabs the card up front (TensorFlow and JAX preallocate
most of it by default; a TensorBoard/TF logger is enough).  No batch size or
allocator setting in this run can win that memory back: it is a set-up
mistake (DESIGN.md: ``config_error``).

**Fix**  Free the card: ``nvidia-smi`` shows who holds it; pick an idle GPU
with ``CUDA_VISIBLE_DEVICES``; stop TensorFlow preallocating
(``tf.config.experimental.set_memory_growth`` or ``TF_FORCE_GPU_ALLOW_GROWTH
=true``) or JAX (``XLA_PYTHON_CLIENT_PREALLOCATE=false``).
"""

from __future__ import annotations

from ...analysis.context import Context
from ...analysis.shared_card import held_elsewhere
from ..base import Cause, Finding, Fix, NotAFix, confidence
from ._common import b, oom_refs


class HeldElsewhere:
    code = "CFG003"
    cause = Cause.CONFIG_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        h = held_elsewhere(ctx.oom)
        if h is None:
            return []
        elsewhere, cap, own = h.elsewhere, h.capacity, h.own
        share = elsewhere / cap
        signals = [(f"{share:.0%} of the card is held outside this process's PyTorch allocator", 0.45)]
        if share >= 0.75:
            signals.append(("this process holds less than a quarter of the card", 0.1))
        if h.named:
            pid, n = max(h.named, key=lambda x: x[1])
            signals.append((f"the message names the other process: {pid} holds {b(n)}", 0.2))
        numbers = (("GPU capacity", b(cap)), ("free at the OOM", b(ctx.oom.free_bytes)),
                   ("held by this process", b(own)), ("held elsewhere", b(elsewhere)))
        title = ("Most of the GPU was held by something other than this run" if share >= 0.5 else
                 "Another process held a large part of the GPU")
        return [Finding(
            self.code, self.cause, title,
            confidence(signals), evidence=oom_refs(ctx),
            fixes=(Fix("code", "free the GPU (nvidia-smi shows who holds it)", "",
                       "a second job, a live notebook kernel or a second rank on the same device holds the memory"),
                   Fix("env", "CUDA_VISIBLE_DEVICES", "an idle GPU", "run where nothing else holds memory"),
                   Fix("env", "TF_FORCE_GPU_ALLOW_GROWTH", "true",
                       "TensorFlow in the same process (a logger is enough) otherwise preallocates most of the card; "
                       "for JAX: XLA_PYTHON_CLIENT_PREALLOCATE=false")),
            not_fixes=(NotAFix("a smaller batch or expandable_segments",
                               f"this run's PyTorch holds only {b(own)}; the card is full of memory it never "
                               "allocated"),),
            signals=tuple(signals), numbers=numbers,
            detail=f"The card has {b(cap)}, {b(ctx.oom.free_bytes)} of it free at the OOM, and PyTorch in the "
                   f"failing process holds {b(own)}: {b(elsewhere)} ({share:.0%}) is held by another process on "
                   "the same GPU or by another library in this process.")]
