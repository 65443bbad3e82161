"""Per-GPU memory estimate for one training set-up (DESIGN.md "Memory model").

Everything is bytes on one GPU unless a name says ``host``.  Ψ below is the
model's parameter count, N the data-parallel world size, e the element size of
the compute dtype (2 for bf16/fp16, 4 for fp32), b the micro-batch, s the
sequence length, h hidden, a heads, d head_dim, i FFN width, V vocabulary,
T = b·s tokens.

Two layers:

1. **Named terms** (analytic, each explained where it is computed).  Model
   states as DeepSpeed accounts them (ZeRO paper arXiv:1910.02054 §3;
   ``estimate_zero2/3_model_states_mem_needs``, reference/deepspeed.md §2.2):
   weights eΨ, gradients eΨ, optimizer 12Ψ (fp32 master 4 + Adam m, v 8) plus
   the 4Ψ fp32 gradient copy DeepSpeed builds for the step, divided per ZeRO
   stage, offload moving them to host RAM.  Activations as the tensors
   autograd saves for a HuggingFace block (``activation_terms``), the logits
   chain (``logits_terms``), buckets, KV cache, CUDA context and NCCL.

2. **What coexists, and what the allocator reserves for it** (``_Program``):
   the allocations of a training run in order — model load, what
   ``deepspeed.initialize`` builds, forward, backward, optimizer step, two
   steps — each tensor sized from the terms above, replayed through a model of
   PyTorch's caching allocator (``_CachingAllocator``).  Peaks are not sums of
   terms: the backward peak (saved activations + the fp32 loss chain), the
   optimizer-step peak (fp32 gradient copy, Adam states, foreach temporaries)
   and the start-up peak of ``initialize`` are different moments, and the
   caching allocator keeps segments it cannot reuse for the next, differently
   sized big tensor (2–9 GiB on the measured runs).  The prediction is the
   replay's max reserved plus non-PyTorch memory (context, NCCL): what
   ``max_memory_reserved`` + NVML show, and what runs out.

Calibration (``CALIBRATION``) is against docs/estimator/measurements.json
(H200, torch 2.11, DeepSpeed 0.19.8; docs/estimator_accuracy.md).  Nothing
here imports torch or deepspeed.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from .calibration import (  # noqa: F401  (re-exported: this module's names as before the split)
    CALIBRATION,
    DEFAULT_DEVICE_BYTES,
    MEMORY_OPT_ALLREDUCE_SIZE,
    OPTIMIZER_STATE_BYTES,
    _ALL_LINEAR,
    _ATTN,
    _DTYPE_BYTES,
    _LORA_ROLE,
    _OFFLOAD,
)
from .setup import (  # noqa: F401  (re-exported: this module's names as before the split)
    TrainSetup,
    _ZERO_INT_KEYS,
    _check,
    _ds_bool,
    _ds_int,
    _is_auto,
    _read_ds_config,
    _read_dtype,
)
from .params import (  # noqa: F401  (re-exported: this module's names as before the split)
    _g,
    _largest_param_tensor,
    _lora_largest_tensor,
    _lora_persistent,
    _lora_roles,
    lora_adapter_params,
)
from .activations import (  # noqa: F401  (re-exported: this module's names as before the split)
    _factor,
    _layer_terms,
    _model_level_terms,
    _trains,
    activation_terms,
    kv_cache_bytes,
    logits_terms,
)
from .result import (  # noqa: F401  (re-exported: this module's names as before the split)
    Estimate,
    _setup_json,
)
from .nccl import (  # noqa: F401  (re-exported: this module's names as before the split)
    _nccl_bytes,
)
from .states import (  # noqa: F401  (re-exported: this module's names as before the split)
    _States,
    _host_offload_012,
    _model_states,
    _opt_bytes,
    _params,
    _torch_states,
    _zero012_states,
    _zero3_states,
)
from .program import (  # noqa: F401  (re-exported: this module's names as before the split)
    INF,
    _ATTN_NORMS,
    _ATTN_ROLES,
    _Block,
    _CachingAllocator,
    _DEFAULT_TOTAL,
    _FORWARD_ROLE_ORDER,
    _MICRO_STEPS,
    _PMod,
    _Program,
    _SIM_CACHE,
    _STEPS,
    _SimResult,
    _module_plan,
    _registration_order,
    _saved_blocks,
    _simulate,
)

__all__ = [
    "CALIBRATION",
    "DEFAULT_DEVICE_BYTES",
    "Estimate",
    "TrainSetup",
    "activation_terms",
    "estimate",
    "kv_cache_bytes",
    "logits_terms",
    "lora_adapter_params",
]


# ------------------------------------------------------------------- estimate


def estimate(spec: ModelSpec, setup: TrainSetup, device_bytes: int | None = None,
             allocator_cap: bool = False) -> Estimate:
    """Per-GPU estimate of ``setup`` training ``spec``; ``device_bytes`` is
    the memory the process may use (default 80 GiB, said in assumptions).
    ``allocator_cap``: ``device_bytes`` caps PyTorch's caching allocator only
    (``torch.cuda.set_per_process_memory_fraction``, the OOM message's
    "allowed"): the CUDA context and NCCL's buffers lie outside the cap, so
    they are left out of every peak compared with it.

    The peaks come from replaying the run's allocations through the caching
    allocator model (``_Program``); the named terms give the tensor sizes, the
    resident model states (``model_states_bytes``) and the host side."""
    assumptions: list[str] = []
    if device_bytes is None:
        device_bytes = DEFAULT_DEVICE_BYTES
        assumptions.append(f"no device size given: compared against {_g(device_bytes)}")
    st = _model_states(spec, setup, device_bytes)
    P, T, _ = _params(spec, setup)

    acts = activation_terms(spec, setup)
    logit = logits_terms(spec, setup)
    context = int(CALIBRATION["cuda_context_bytes"])
    comms, nccl = _nccl_bytes(setup)
    outside = context + nccl
    if allocator_cap:
        context = nccl = 0
    # Unconstrained, the caching allocator keeps every segment it ever made: that max reserved is
    # what a run shows on a card with room to spare (and what the measurements are).  When it
    # exceeds the device, replay again under the cap: the allocator then frees whole cached
    # segments and retries before it gives up, and the run may still fit.
    sim = _simulate(spec, setup, device_bytes)
    capped = False
    if sim.peak_reserved + context + nccl > device_bytes:
        tight = _simulate(spec, setup, device_bytes, cap=device_bytes - context - nccl)
        if tight.oom is None:
            sim, capped = tight, True
        else:
            sim = replace(sim, oom=tight.oom)
    live = sim.live_at_peak

    breakdown = {
        "weights": int(live.get("weights", 0)),
        "gradients": int(live.get("gradients", 0)),
        "optimizer": int(live.get("optimizer", 0)),
        "activations": int(live.get("activations", 0)),
        "logits": int(live.get("logits", 0)),
        "buckets": int(live.get("buckets", 0)),
        "workspace": int(live.get("other", 0)),
        "context": context,
        "nccl": nccl,
        # cached segments the caching allocator keeps reserved beyond the live tensors at the peak
        "allocator_overhead": int(sim.peak_reserved - sim.peak_allocated),
        "kv_cache": 0,
        "startup_extra": 0,
    }
    step_peak = sum(v for k, v in breakdown.items() if k not in ("kv_cache", "startup_extra"))
    startup_peak = int(sim.startup_reserved) + context + nccl
    breakdown["startup_extra"] = startup_peak - breakdown["weights"] - context - nccl

    gen_peak = None
    if setup.generation:
        kv = kv_cache_bytes(spec, setup.gen_batch, setup.kv_len, setup.element_bytes)
        breakdown["kv_cache"] = kv
        gen_peak = _generation_peak(spec, setup, st, kv, context, nccl)

    predicted = max(startup_peak, step_peak, gen_peak or 0)
    host_rank, host_breakdown = _host_side(spec, setup, st, P)
    assumptions += _assumptions(spec, setup, st, comms, T, sim, context + nccl, capped)
    if allocator_cap:
        assumptions.append(f"the limit is an allowed cap (set_per_process_memory_fraction), which covers "
                           f"PyTorch's allocator only: the CUDA context and NCCL ({_g(outside)}) lie outside it "
                           "and are left out of the peaks")
    return Estimate(
        fits=predicted <= device_bytes,
        predicted_peak_bytes=int(predicted),
        startup_peak_bytes=int(startup_peak),
        step_peak_bytes=int(step_peak),
        generation_peak_bytes=None if gen_peak is None else int(gen_peak),
        device_bytes=int(device_bytes),
        host_bytes=int(host_rank * setup.gpus_per_node),
        host_bytes_per_rank=int(host_rank),
        host_pinned_bytes=int(st.host_pinned * setup.gpus_per_node),
        breakdown=MappingProxyType(breakdown),
        host_breakdown=MappingProxyType({k: int(v) for k, v in host_breakdown.items()}),
        activation_terms=MappingProxyType({**acts, **{f"logits.{k}": v for k, v in logit.items()}}),
        assumptions=tuple(assumptions),
        model=spec.name,
        n_params=P,
        trainable_params=T,
        setup=setup,
        allocated_peak_bytes=int(sim.peak_allocated) + context + nccl,
        startup_allocated_bytes=int(sim.startup_allocated) + context + nccl,
        peak_phase=sim.peak_phase,
        phase_peaks=MappingProxyType({k: int(v) + context + nccl for k, v in sim.phase_peaks.items()}),
        resident_states_bytes=int(st.weights + st.gradients + st.optimizer),
    )


def _generation_peak(spec: ModelSpec, setup: TrainSetup, st: _States, kv: int, context: int, nccl: int) -> int:
    """Generation (eval / RLHF rollout) between steps: model states stay,
    plus KV cache, one block's prefill transient (no grad) and last-token
    logits with their fp32 upcast; stage-3 IPG bucket persists."""
    no_ckpt = replace(setup, grad_ckpt=False)
    prefill = sum(_layer_terms(spec, no_ckpt, setup.gen_batch, setup.kv_len).values())
    gen_logits = setup.gen_batch * spec.vocab * (setup.element_bytes + 4)
    buckets = st.buckets if setup.zero_stage == 3 else 0
    return int(st.weights + st.gradients + st.optimizer + buckets + kv + prefill + gen_logits + context + nccl)


def _host_side(spec: ModelSpec, setup: TrainSetup, st: _States, P: int) -> tuple[float, dict[str, float]]:
    """Host RAM per rank: max(model load before initialize, steady offload state)."""
    e = setup.element_bytes
    if setup.deepspeed and setup.zero_stage == 3 and setup.zero_init:
        load = e * P / setup.world_size
    elif not setup.deepspeed and e < 4 and setup.lora_rank is None:
        load = 4 * P  # AMP: the fp32 module
    else:
        load = e * P
    steady = sum(st.host.values())
    breakdown = dict(st.host)
    breakdown["model_load"] = load
    return max(load, steady), breakdown


_PHASE_TEXT = {"initialize": "deepspeed.initialize / model load", "forward": "the forward pass",
               "backward": "the backward pass", "optimizer step": "the optimizer step"}


def _assumptions(spec: ModelSpec, setup: TrainSetup, st: _States, comms: int, T: int, sim: _SimResult,
                 non_torch: int, capped: bool) -> list[str]:
    out = [f"model {spec.describe()}" + (f" ({spec.source})" if spec.source not in ("preset", "config") else "")]
    if spec.approximate:
        out.append("model_type not known exactly: counted as Llama-shaped")
    e = setup.element_bytes
    if setup.deepspeed:
        master, states, fp32g = _opt_bytes(setup)
        out.append(f"DeepSpeed ZeRO-{setup.zero_stage}, {setup.dtype}, {setup.optimizer}: {e}-byte weights and "
                   f"gradients, optimizer {master}+{states} bytes/param (master + states) and {fp32g}-byte fp32 "
                   f"gradients (DeepSpeed's 18-byte accounting), world size {setup.world_size}")
    else:
        if e == 4:
            mode = "fp32"
        elif setup.torch_amp:
            mode = "AMP over an fp32 model"
        else:
            mode = f"the module in {setup.dtype} (16-bit weights, gradients and optimizer states)"
        out.append(f"plain PyTorch{' DDP' if setup.world_size > 1 else ''}, {mode}, {setup.optimizer} "
                   f"(torch.optim foreach: one temporary per state tensor in the step)")
    if setup.lora_rank is not None:
        out.append(f"LoRA r={setup.lora_rank} on {', '.join(setup.lora_targets)}: {T:,} trainable params; "
                   f"frozen base weights keep no gradients or optimizer state; lora_dropout 0")
    if setup.deepspeed and setup.offload_param != "none" and setup.zero_stage != 3:
        out.append(f"offload_param is ignored below ZeRO-3: DeepSpeed keeps all weights on every GPU at stage "
                   f"{setup.zero_stage}")
    if setup.deepspeed and setup.offload_optimizer != "none" and setup.zero_stage == 0:
        out.append("offload_optimizer needs ZeRO ≥ 1: ignored at stage 0")
    if setup.deepspeed and setup.zero_stage in (1, 2):
        out.append(f"overlap_comm {'on' if setup.effective_overlap_comm else 'off'}"
                   f"{' (DeepSpeed default: on only at stage 3)' if setup.overlap_comm is None else ''}: "
                   f"{2 if setup.effective_overlap_comm else 1} reduce bucket(s) of {setup.reduce_bucket_size:,} elements")
        out.append("allgather_bucket_size ignored: torch has all_gather_into_tensor, so DeepSpeed gathers "
                   "parameters without it")
    if setup.deepspeed and setup.zero_stage == 3:
        per = setup.world_size
        if T / per > setup.sub_group_size and setup.effective_offload_optimizer == "none":
            out.append(f"ZeRO-3 fp32 gradients built one sub-group ({setup.sub_group_size:,} elements) at a time; "
                       f"DeepSpeed's estimator counts all {int(T / per):,}")
        out.append(f"ZeRO-3 working set: largest module ({spec.largest_layer_params:,} params) gathered plus "
                   f"prefetch ≤ {setup.prefetch_bucket_size:,} elements (max_live_parameters "
                   f"{setup.max_live_parameters:,}); persistent params ≤ {setup.param_persistence_threshold:,} "
                   f"elements stay whole")
    ckpt = "full recompute (layer inputs + one recomputed block)" if setup.grad_ckpt else "no checkpointing"
    measured = spec.family == "llama" and setup.attn == "sdpa" and setup.lora_rank is None
    out.append(f"activations: the tensors autograd saves in a HF {spec.family} block, {setup.attn} attention, "
               f"{ckpt}, micro-batch {setup.micro_batch} × {setup.seq_len} tokens"
               + (f", {setup.grad_accum_steps} micro-batches per step" if setup.grad_accum_steps > 1 else "")
               + ("; measured exact on H200 for this family and attention (CALIBRATION)" if measured
                  else "; sizes from the same derivation, measured only for Llama-family SDPA blocks"))
    if setup.attn == "sdpa" and spec.kv_heads != spec.heads:
        out.append("SDPA assumed to take GQA keys/values unrepeated (enable_gqa); eager repeats them")
    out.append("loss in fp32: logits.float() + log-softmax + its gradient (HF ForCausalLMLoss); the training "
               "loop keeps the model output (its logits) through backward and the optimizer step, until the next "
               "forward replaces it (`out = model(...)`; HF Trainer drops it before backward)")
    where = _PHASE_TEXT.get(sim.peak_phase, sim.peak_phase or "start-up")
    cached = sim.peak_reserved - sim.peak_allocated
    out.append(f"peak: PyTorch's caching allocator replayed over the model load, initialize and {_STEPS} "
               f"steps: tensors peak at {_g(sim.peak_allocated)} in {where}; it reserves "
               f"{_g(sim.peak_reserved)} ({_g(cached)} cached in segments that later requests of other sizes "
               f"cannot reuse), plus {_g(non_torch)} outside PyTorch")
    if capped:
        out.append(f"fits only because the allocator frees its cached segments when the device is full: "
                   f"{sim.retries} cache flush(es) replayed (DeepSpeed warns \"pytorch allocator cache flushes\"); "
                   f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avoids them")
    elif sim.oom is not None:
        phase, request = sim.oom
        out.append(f"does not fit even after the allocator frees its cache: a {_g(request)} request in "
                   f"{_PHASE_TEXT.get(phase, phase)} finds no room")
    out.append(f"CUDA context {_g(CALIBRATION['cuda_context_bytes'])} and cuBLAS workspaces "
               f"{_g(CALIBRATION['cublas_workspace_bytes'])}; NCCL {comms} communicator(s)"
               + (" (world size 1: only the data-parallel group's communicator is ever created)"
                  if setup.deepspeed and setup.world_size == 1 else
                  " (DeepSpeed initialises NCCL: world group + its clone)" if setup.deepspeed else ""))
    out.append(f"host RAM per node = {setup.gpus_per_node} rank(s) × per-rank offload state and pinned buffers; "
               f"model loaded in {setup.dtype if setup.deepspeed else 'its training dtype'} before initialize")
    out += st.notes
    out += _auto_notes(spec, setup)
    out += list(setup.notes)
    return out


def _auto_notes(spec: ModelSpec, setup: TrainSetup) -> list[str]:
    """Say what each ds_config "auto" was taken as, and for bucket sizes what
    HF Trainer's ``HfTrainerDeepSpeedConfig`` would write instead."""
    h = spec.hidden
    hf = {"reduce_bucket_size": f"hidden²={h * h:,}",
          "stage3_prefetch_bucket_size": f"0.9·hidden²={int(0.9 * h * h):,}",
          "stage3_param_persistence_threshold": f"10·hidden={10 * h:,}"}
    out = []
    sizes = []
    for key in setup.auto_keys:
        leaf = key.rsplit(".", 1)[-1]
        if key.endswith(".enabled"):
            out.append(f"ds_config {key} \"auto\": dtype taken as {setup.dtype}")
        elif leaf == "train_micro_batch_size_per_gpu":
            out.append(f"ds_config {key} \"auto\": micro-batch {setup.micro_batch} (option or default)")
        elif leaf == "gradient_accumulation_steps":
            out.append(f"ds_config {key} \"auto\": {setup.grad_accum_steps} micro-batch(es) per step "
                       f"(option or default)")
        elif leaf in hf:
            sizes.append(f"{leaf} (HF Trainer would set {hf[leaf]})")
        else:
            sizes.append(leaf)
    if sizes:
        out.append(f"ds_config \"auto\" → DeepSpeed's code defaults for: {'; '.join(sizes)}")
    return out
