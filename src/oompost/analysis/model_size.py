"""The model's size when the log never states it.

Other people's logs rarely print a parameter count, but they carry it
implicitly: a model name with its size (``Llama-2-7b-hf``, ``Qwen2-72B``), or
DeepSpeed's flat copy of the 16-bit weights failing at ZeRO-1/2 start-up (a
12.55 GiB bf16 flatten request is a 6.7 B-parameter model).  Each inference
says where it came from, so the report shows it as inferred, never as fact.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import Evidence, OomEvent, SourceRef
from .phase import Phase, PhaseMatch


@dataclass(frozen=True, slots=True)
class InferredSize:
    params: int
    ref: SourceRef | None
    how: str


def infer_params(ev: Evidence, oom: OomEvent | None, phase: PhaseMatch, dtype: str) -> InferredSize | None:
    """The parameter count from the flatten request or a model name (None when nothing carries it)."""
    if oom is not None and oom.requested_bytes and phase.phase is Phase.ZERO_INIT and any(
            "flatten" in f.name for f in oom.stack.frames):
        per = 4 if dtype == "fp32" else 2
        n = oom.requested_bytes // per
        if n >= 10_000_000:
            return InferredSize(n, oom.ref, f"DeepSpeed's flat {dtype} copy of the weights ({oom.requested_bytes:,} "
                                            f"bytes requested at start-up)")
    f = ev.fact("model.params_from_name")
    if f is not None:
        return InferredSize(int(f.value), f.ref, f"the model's name ({f.ref.text[:80]})")
    return None
