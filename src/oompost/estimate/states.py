"""Model states (weights, gradients, optimizer) per ZeRO stage and offload, on the GPU and the host."""

from __future__ import annotations

from dataclasses import dataclass, field

from .activations import _factor
from .calibration import CALIBRATION, MEMORY_OPT_ALLREDUCE_SIZE, OPTIMIZER_STATE_BYTES
from .models import ModelSpec
from .nccl import _nccl_bytes
from .params import _g, _largest_param_tensor, _lora_largest_tensor, _lora_persistent, lora_adapter_params
from .setup import TrainSetup


# ----------------------------------------------------------------- model states


@dataclass
class _States:
    weights: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    buckets: float = 0.0
    host: dict[str, float] = field(default_factory=dict)
    host_pinned: float = 0.0
    notes: list[str] = field(default_factory=list)


def _params(spec: ModelSpec, setup: TrainSetup) -> tuple[int, int, int]:
    """(all weights P, trainable T, largest trainable module) — LoRA adds r·(in+out) adapters."""
    if setup.lora_rank is None:
        return spec.n_params, spec.n_params, spec.largest_layer_params
    adapters = lora_adapter_params(spec, setup.lora_rank, setup.lora_targets)
    if adapters == 0:
        raise ValueError(f"LoRA targets {setup.lora_targets} match no linear module of {spec.name}")
    return spec.n_params + adapters, adapters, _lora_largest_tensor(spec, setup.lora_rank, setup.lora_targets)


def _model_states(spec: ModelSpec, setup: TrainSetup, device_bytes: int) -> _States:
    if not setup.deepspeed:
        return _torch_states(spec, setup)
    if setup.zero_stage == 3:
        return _zero3_states(spec, setup)
    return _zero012_states(spec, setup, device_bytes)


def _opt_bytes(setup: TrainSetup) -> tuple[int, int, int]:
    """(master, states, fp32 grads) bytes per trainable parameter under DeepSpeed.
    ZeRO ≥ 1 always clones an fp32 master partition and builds an fp32 gradient
    partition for the step (even in fp32 runs); ZeRO-0 only with 16-bit dtypes
    (FP16_Optimizer for fp16 and for bf16)."""
    states = OPTIMIZER_STATE_BYTES[setup.optimizer.lower()]
    mixed = setup.element_bytes < 4
    if setup.zero_stage >= 1 or mixed:
        return 4, states, 4
    return 0, states, 0


def _zero012_states(spec: ModelSpec, setup: TrainSetup, device_bytes: int) -> _States:
    """ZeRO-0/1/2 (``stage_1_and_2.py``, ``fp16/fused_optimizer.py``):

    * weights e·P on every GPU; gradients e·T (stage 0/1) or e·T/N (stage 2
      ``grads_in_partition``); with CPU offload stage 2 keeps only the
      ``temp_grad_buffer_for_gpu_offload`` (largest param · e).
    * optimizer (master + states + fp32 grads)·T, ÷N at stage 1/2, or on host.
    * buckets: ``reduce_bucket_size`` · e, ×2 with ``overlap_comm`` (stage 1/2,
      contiguous_gradients); stage 0 all-reduces in 5e8-element buffers.
    * start-up (replayed in ``_Program._init_zero012``): module e·P on the
      GPU, then the flat copy e·T of the trainable params (4Ψ allocated for a
      full fine-tune), the fp32 partition cloned on the GPU, the fp32 gradient
      partition created and dropped.
    These are the resident states DeepSpeed's estimators count
    (``Estimate.model_states_bytes``); the peaks come from the replay.
    """
    st = _States()
    e, N = setup.element_bytes, setup.world_size
    P, T, _largest_trainable = _params(spec, setup)
    master, states, fp32g = _opt_bytes(setup)
    stage = setup.zero_stage
    offload = setup.effective_offload_optimizer != "none"
    div = N if stage >= 1 else 1

    st.weights = e * P
    largest_param = _largest_param_tensor(spec) if setup.lora_rank is None else _largest_trainable
    if stage == 2:
        st.gradients = e * largest_param if offload else e * T / N
    else:
        st.gradients = e * T
    if offload:
        _host_offload_012(st, setup, T, largest_param)
    else:
        st.optimizer = (master + states + fp32g) * T / div

    bucket_e = 4 if (stage == 1 and setup.grad_accum_dtype in ("fp32", "float32") and e < 4) else e
    if stage >= 1:
        if setup.contiguous_gradients:
            st.buckets = setup.reduce_bucket_size * bucket_e * (2 if setup.effective_overlap_comm else 1)
    elif N > 1:
        st.buckets = min(MEMORY_OPT_ALLREDUCE_SIZE, T) * e

    # where initialize flattens (the replay in _Program builds the start-up peak itself)
    flattens = stage >= 1 or e < 4
    on_gpu = setup.startup_flatten == "gpu"
    if setup.startup_flatten == "auto":
        # NVML free memory after module.to(device): card − context − NCCL − module
        free_after_module = device_bytes - CALIBRATION["cuda_context_bytes"] - _nccl_bytes(setup)[1] - e * P
        on_gpu = free_after_module >= e * T
    if flattens and on_gpu:
        st.notes.append(
            f"start-up: deepspeed.initialize holds the module ({_g(e * P)}) plus its flat 16-bit copy "
            f"({_g(e * T)}) built on the GPU; DeepSpeed 0.19.8 does so when NVML reports that much free memory "
            f"(true under a memory-fraction cap on a large card: the measured ~27 GB 7B case), else it flattens "
            f"on the CPU; the freed per-parameter blocks of the module stay cached")
    elif flattens:
        st.notes.append(
            f"start-up: flat 16-bit copy built on the CPU (DeepSpeed's fallback when NVML reports less free "
            f"memory than {_g(e * T)}): the module leaves the GPU and its cache is emptied first; the GPU then "
            f"holds the flat copy plus the partition clone ({_g(e * T / div)})")
    return st


def _host_offload_012(st: _States, setup: TrainSetup, T: int, largest_param: int) -> None:
    """ZeRO-1/2 CPU offload host side per rank: fp32 master partition 4T/N
    (pinned), fp32 grad partition 4T/N (pinned), 16-bit param staging buffer
    e·T/N (pinned), Adam states (pageable), gradient staging buffer
    (largest param · e, pinned).  NVMe optimizer offload is not supported
    below stage 3 by DeepSpeed (treated as CPU)."""
    e, N = setup.element_bytes, setup.world_size
    master, states, fp32g = 4, OPTIMIZER_STATE_BYTES[setup.optimizer.lower()], 4
    host = {
        "fp32_master": master * T / N,
        "optimizer_states": states * T / N,
        "fp32_gradients": fp32g * T / N,
        "bit16_param_buffer": e * T / N,
        "grad_staging_buffer": e * largest_param,
    }
    st.host.update(host)
    if setup.pin_memory:
        st.host_pinned += sum(v for k, v in host.items() if k != "optimizer_states")
    if setup.effective_offload_optimizer == "nvme":
        st.notes.append("offload_optimizer device nvme needs ZeRO-3 (ZeRO-Infinity); estimated as cpu")


def _zero3_states(spec: ModelSpec, setup: TrainSetup) -> _States:
    """ZeRO-3 (``stage3.py``, ``partition_parameters.py``):

    * weights: e·(P − persistent)/N partition (host when ``offload_param``) +
      e·persistent (params with numel ≤ ``stage3_param_persistence_threshold``,
      whole on every GPU) + the gathered largest module e·largest_layer.
    * gradients: ``grad_partitions_flat_buffer`` e·T/N (host with optimizer
      offload) + the full gradient of the largest trainable module.
    * optimizer: (master 4 + states)·T/N + fp32 grads of one sub-group
      4·min(sub_group_size, T/N) (``_prepare_sub_group`` creates and frees them
      per sub-group — DeepSpeed's estimator counts 4·T/N instead).
    * buckets: one IPG buffer ``reduce_bucket_size``·e + prefetch
      min(prefetch_bucket_size, max_live − largest)·e.
    * start-up (replayed in ``_Program._init_zero3``): with ``zero_init`` the
      partitions, defragmented through the CPU into one flat buffer, fp32
      partitions per sub-group; without it the whole module e·P is moved to
      every GPU first.
    """
    st = _States()
    e, N = setup.element_bytes, setup.world_size
    P, T, largest_trainable = _params(spec, setup)
    master, states, fp32g = _opt_bytes(setup)
    thr = setup.param_persistence_threshold
    persistent = spec.persistent_params(thr)
    if setup.lora_rank is not None:
        persistent += _lora_persistent(spec, setup.lora_rank, setup.lora_targets, thr)
    partitioned = P - persistent
    largest = spec.largest_layer_params
    live = _factor("zero3.live_params") * largest
    off_param = setup.effective_offload_param != "none"
    off_opt = setup.effective_offload_optimizer != "none"

    part_w = e * partitioned / N
    st.weights = (0 if off_param else part_w) + e * persistent + e * live
    part_g = e * T / N
    st.gradients = (0 if off_opt else part_g) + e * largest_trainable
    per_rank_t = T / N
    if not off_opt:
        st.optimizer = (master + states) * per_rank_t + fp32g * min(setup.sub_group_size, per_rank_t)
    prefetch = min(setup.prefetch_bucket_size, max(0, setup.max_live_parameters - largest))
    st.buckets = (setup.reduce_bucket_size * e if setup.contiguous_gradients else 0) + prefetch * e

    # host side per rank
    if off_opt:
        host = {"fp32_master": master * per_rank_t, "fp32_gradients": fp32g * per_rank_t,
                "grad_partitions": part_g}
        if setup.effective_offload_optimizer == "nvme":
            swap = setup.nvme_optimizer_buffer_count * min(setup.sub_group_size, per_rank_t) * 4
            host["nvme_swap_buffers"] = swap
            st.notes.append(f"offload_optimizer nvme: optimizer states and fp32 master on NVMe "
                            f"({_g((master + states) * per_rank_t)} per rank); host keeps "
                            f"{setup.nvme_optimizer_buffer_count} pinned swap buffers of one sub-group")
            del host["fp32_master"]
        else:
            host["optimizer_states"] = states * per_rank_t
        st.host.update(host)
        if setup.pin_memory:
            st.host_pinned += sum(v for k, v in host.items() if k != "optimizer_states")
    if off_param:
        if setup.effective_offload_param == "nvme":
            buf = setup.nvme_param_buffer_count * setup.nvme_param_buffer_size * e
            st.host["nvme_param_buffers"] = buf
            st.host_pinned += buf
        else:
            st.host["param_partitions"] = part_w
            if setup.pin_memory:
                st.host_pinned += part_w

    if not setup.zero_init:
        st.notes.append(f"ZeRO-3 without zero.Init: every GPU first holds the whole model ({_g(e * P)}) before "
                        f"DeepSpeed partitions it, and every rank builds it in host RAM")
    return st


def _torch_states(spec: ModelSpec, setup: TrainSetup) -> _States:
    """Plain PyTorch / DDP.  With ``torch_amp`` and a 16-bit dtype: AMP over an
    fp32 module (HF Trainer ``bf16=True``): weights 4P plus the autocast 16-bit
    copies (2P, saved for backward); fp32 gradients 4T; optimizer states
    (fp32) per trainable param; no master copy.  Without it the module itself
    is 16-bit: weights, gradients and states in e bytes.  LoRA: frozen base
    loaded in the 16-bit dtype (e·base), adapters fp32 under AMP (PEFT upcasts
    them).  DDP buckets hold a copy of every gradient
    (``gradient_as_bucket_view=False``)."""
    st = _States()
    P, T, _ = _params(spec, setup)
    states = OPTIMIZER_STATE_BYTES[setup.optimizer.lower()]
    e = setup.element_bytes
    amp = e < 4 and setup.torch_amp
    we = 4 if amp else e
    if setup.lora_rank is None:
        st.weights = we * P + (2 * P if amp else 0)
    else:
        base = P - T
        st.weights = e * base + we * T + (2 * T if amp else 0)
    st.gradients = we * T
    st.optimizer = states * we / 4 * T
    if setup.world_size > 1:
        st.buckets = we * T
    return st
