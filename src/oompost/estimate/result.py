"""``Estimate``: what the memory model predicts for one set-up."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .activations import activation_terms
from .setup import TrainSetup


# -------------------------------------------------------------------- Estimate


@dataclass(frozen=True)
class Estimate:
    """The result.  ``breakdown`` holds per-GPU bytes by component *at the
    peak*: the tensors alive when the replayed run's allocated memory peaks
    (``peak_phase``: initialize, forward, backward or optimizer step), sorted
    into weights / gradients / optimizer / activations / logits / buckets /
    workspace, plus ``allocator_overhead`` (what the caching allocator keeps
    reserved beyond that: segments no later request could reuse), ``context``
    and ``nccl``.  Summing every entry except ``kv_cache`` and
    ``startup_extra`` gives ``step_peak_bytes``; ``startup_peak_bytes`` =
    weights + startup_extra + context + nccl.  ``predicted_peak_bytes`` is the
    largest phase.  ``model_states_bytes`` is the resident model states as
    DeepSpeed accounts them (``resident_states_bytes``), not the mix at the
    peak.  ``allocated_peak_bytes`` is the peak of live tensors plus
    non-PyTorch memory: what a perfectly packing allocator would need.  Host
    figures are per node (``host_bytes_per_rank`` for one rank)."""

    fits: bool
    predicted_peak_bytes: int
    startup_peak_bytes: int
    step_peak_bytes: int
    generation_peak_bytes: int | None
    device_bytes: int
    host_bytes: int
    host_bytes_per_rank: int
    host_pinned_bytes: int
    breakdown: Mapping[str, int]
    host_breakdown: Mapping[str, int]
    activation_terms: Mapping[str, int]
    assumptions: tuple[str, ...]
    model: str = ""
    n_params: int = 0
    trainable_params: int = 0
    setup: TrainSetup = field(default_factory=TrainSetup)
    allocated_peak_bytes: int = 0
    startup_allocated_bytes: int = 0
    peak_phase: str = ""
    phase_peaks: Mapping[str, int] = field(default_factory=dict)
    resident_states_bytes: int | None = None

    @property
    def model_states_bytes(self) -> int:
        """weights + gradients + optimizer resident on the GPU, as DeepSpeed's
        ``estimate_zero*_model_states_mem_needs`` count them (their gpu_mem,
        plus what they leave out: see the tests)."""
        if self.resident_states_bytes is not None:
            return self.resident_states_bytes
        b = self.breakdown
        return b["weights"] + b["gradients"] + b["optimizer"]

    @property
    def headroom_bytes(self) -> int:
        return self.device_bytes - self.predicted_peak_bytes

    def to_json(self) -> dict[str, Any]:
        """DESIGN.md's ``estimate --format json`` contract, plus added fields."""
        return {
            "fits": self.fits,
            "predicted_peak_bytes": int(self.predicted_peak_bytes),
            "startup_peak_bytes": int(self.startup_peak_bytes),
            "device_bytes": int(self.device_bytes),
            "host_bytes": int(self.host_bytes),
            "breakdown": {k: int(v) for k, v in self.breakdown.items()},
            "assumptions": list(self.assumptions),
            "schema": "oompost.estimate/1",
            "step_peak_bytes": int(self.step_peak_bytes),
            "generation_peak_bytes": None if self.generation_peak_bytes is None else int(self.generation_peak_bytes),
            "allocated_peak_bytes": int(self.allocated_peak_bytes),
            "startup_allocated_bytes": int(self.startup_allocated_bytes),
            "peak_phase": self.peak_phase,
            "phase_peaks": {k: int(v) for k, v in self.phase_peaks.items()},
            "model_states_bytes": int(self.model_states_bytes),
            "host_bytes_per_rank": int(self.host_bytes_per_rank),
            "host_pinned_bytes": int(self.host_pinned_bytes),
            "host_breakdown": {k: int(v) for k, v in self.host_breakdown.items()},
            "activation_terms": {k: int(v) for k, v in self.activation_terms.items()},
            "model": {"name": self.model, "n_params": self.n_params, "trainable_params": self.trainable_params},
            "setup": _setup_json(self.setup),
        }


def _setup_json(setup: TrainSetup) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(setup):
        v = getattr(setup, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    out["overlap_comm"] = setup.effective_overlap_comm
    return out
