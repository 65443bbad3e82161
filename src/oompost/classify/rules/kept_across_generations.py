"""LEAK006 — a snapshot shows per-token outputs kept from earlier ``generate()`` calls.

**Cause**  A ``generate()`` call frees its per-token scores and logits when
it returns, unless they are returned (``return_dict_in_generate=True`` with
``output_scores`` / ``output_logits``) and the caller keeps the returned
object: ``outputs.append(model.generate(...))`` in a batched-inference loop
holds every call's scores (batch × vocabulary floats per token) — and its
KV cache — on the GPU.  The snapshot dates them by the KV cache: a cache that
grows by concatenation allocates each layer's tensor one position larger at
every token, so the sequence being generated has at most that many
positions, while one generation-side allocation site holds more live blocks
of one size than that: tokens of earlier calls.  Live memory grows by one
call's outputs per batch until the limit — DESIGN.md's leak, across calls
instead of steps.

**Fix**  Keep what the loop needs, on the host: ``out.sequences.cpu()`` (or
the decoded text), and request ``output_scores`` / ``output_logits`` only
when they are used — then reduce them (``compute_transition_scores``, a
top-k) and move them to the host before the next call.  A smaller batch or a
larger card only delays the OOM.
"""

from __future__ import annotations

from ...analysis.context import Context
from ..base import Cause, Finding, Fix, confidence
from ._common import LEAK_NOT_FIXES, b, kept_signals, of_live, oom_refs, site_label


class KeptAcrossGenerations:
    code = "LEAK006"
    cause = Cause.LEAK

    def evaluate(self, ctx: Context) -> list[Finding]:
        r = ctx.retention
        if r is None or not r.generated:
            return []
        top = r.generated[0]
        site = site_label(top.label)
        kept = top.kept * top.block_bytes
        signals = [(f"{top.kept} live blocks of {b(top.block_bytes)} from {site}, more than the {top.per_step} "
                    "positions of the sequence being generated (its KV cache's size): tokens of earlier calls", 0.55)]
        signals += kept_signals(r, kept, "those outputs are")
        numbers = [("kept per-token outputs", f"{top.kept} × {b(top.block_bytes)} at {site} {of_live(r, kept)}"),
                   ("positions of the current sequence (KV cache)", f"at most {top.per_step}")]
        return [Finding(
            self.code, self.cause, "Outputs of earlier generate() calls are still on the GPU",
            confidence(signals), evidence=oom_refs(ctx),
            fixes=(Fix("code", "keep host copies of what you use", "out.sequences.cpu() (or the decoded text), "
                       "not the GenerateOutput",
                       f"{site} leaves {b(top.block_bytes)} on the GPU for every token of every kept call"),
                   Fix("code", "output_scores / output_logits", "request them only when used; reduce them "
                       "(compute_transition_scores, a top-k) and move them to the host before the next call",
                       "each token's scores are batch × vocabulary floats")),
            not_fixes=LEAK_NOT_FIXES,
            signals=tuple(signals), numbers=tuple(numbers),
            detail=(f"At the OOM, {top.kept} blocks of {b(top.block_bytes)} allocated at {site} during generation "
                    f"are alive, while the sequence being generated has at most {top.per_step} positions: the "
                    "per-token outputs of earlier generate() calls were kept, so live memory grew by one call's "
                    "outputs per batch until the limit."))]
