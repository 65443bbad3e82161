"""Parameter counts that depend on the set-up: LoRA adapters, the largest tensors."""

from __future__ import annotations

from ..units import GiB
from .calibration import _ALL_LINEAR, _LORA_ROLE
from .models import ModelSpec


# ----------------------------------------------------------------- LoRA / params


def _lora_roles(targets: tuple[str, ...]) -> frozenset[str]:
    roles: set[str] = set()
    for t in targets:
        key = t.strip().lower()
        if key in ("all-linear", "all_linear", "all"):
            roles.update(_ALL_LINEAR)
        elif key in _LORA_ROLE:
            roles.add(_LORA_ROLE[key])
    if roles & {"q", "k", "v"}:
        roles.add("qkv")  # fused projections (GPT-NeoX, GPT-2, Falcon)
    return frozenset(roles)


def lora_adapter_params(spec: ModelSpec, rank: int, targets: tuple[str, ...]) -> int:
    """Σ over adapted linear modules of r·(in_features + out_features) (PEFT
    ``LoraConfig`` A: r×in, B: out×r), times the number of such modules."""
    roles = _lora_roles(targets)
    return sum(rank * (m.in_features + m.out_features) * m.count for m in spec.linear_modules() if m.role in roles)


def _lora_largest_tensor(spec: ModelSpec, rank: int, targets: tuple[str, ...]) -> int:
    roles = _lora_roles(targets)
    sizes = [rank * max(m.in_features, m.out_features) for m in spec.linear_modules() if m.role in roles]
    return max(sizes, default=0)


def _lora_persistent(spec: ModelSpec, rank: int, targets: tuple[str, ...], threshold: int) -> int:
    roles = _lora_roles(targets)
    total = 0
    for m in spec.linear_modules():
        if m.role in roles:
            for t in (rank * m.in_features, rank * m.out_features):
                if t <= threshold:
                    total += t * m.count
    return total


def _largest_param_tensor(spec: ModelSpec) -> int:
    """Largest single parameter tensor (DeepSpeed's ``largest_param_numel`` for
    the CPU-offload gradient staging buffers)."""
    return max(m.weight_numel for m in spec.modules())


def _g(n: float) -> str:
    return f"{n / GiB:.2f} GiB"
