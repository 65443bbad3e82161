"""The allocation program: a training run's allocations in order, replayed through the shared
caching-allocator model (``analysis.allocator``) to find what is reserved at the peak."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

from ..analysis.allocator import Block, CachingAllocator
from ..analysis.allocator_rules import AllocatorSettings
from ..units import MiB
from . import sim_cache
from .activations import _factor, _layer_terms, _model_level_terms
from .calibration import CALIBRATION, OPTIMIZER_STATE_BYTES
from .models import ModelSpec, _tensors
from .nccl import _nccl_bytes
from .params import _lora_roles
from .setup import TrainSetup


# ------------------------------------------------------------ allocator model
# The allocation program runs through the one model of PyTorch's native caching
# allocator, ``analysis.allocator`` (reference/allocator.md §1–5), with the
# default settings; what the estimate adds is bookkeeping: live bytes per tag,
# the mix at the allocated peak, the peak per phase, and carrying on past an OOM.

_Block = Block
INF = float("inf")
_DEFAULT_TOTAL = 1 << 48           # only sizes expandable segments, which the estimate does not use


class _CachingAllocator(CachingAllocator):
    """The shared allocator model, default settings, plus the estimate's books.

    Without a cap segments are never returned (training code does not call
    empty_cache), which is what an unconstrained run reserves:
    ``peak_reserved`` is the measured ``max_memory_reserved``.  With a cap
    (the memory the process may use, less what is outside PyTorch) a request
    that needs a new segment beyond it first makes the allocator release every
    whole cached segment and retry (``release_cached_blocks``; counted in
    ``retries``, DeepSpeed's "allocator cache flushes"); if it still does not
    fit, that is the OOM (``oom``: the phase and the request) — and the
    estimate goes on past it, the segment taken anyway, to report the whole
    run's peak.  Live bytes are counted per tag, and the mix at the allocated
    peak is kept (``at_peak``)."""

    def __init__(self, cap: float | None = None) -> None:
        super().__init__(AllocatorSettings(), cap, INF, _DEFAULT_TOTAL, 0)
        self.oom: tuple[str, int] | None = None
        self.live: dict[str, int] = {}
        self.phase = ""
        self.at_peak: tuple[str, dict[str, int]] = ("", {})
        self.phase_peaks: dict[str, int] = {}

    def malloc(self, nbytes: float, stream: int = 0, tag: str = "other") -> Block:  # type: ignore[override]
        req = int(nbytes)
        peak = self.peak_allocated
        b = super().malloc(req, stream)
        if b is None:                   # beyond the cap even after releasing the cache: the OOM
            if self.oom is None:
                self.oom = (self.phase, self.s.round(req))
            cap, self.cap = self.cap, None
            b = super().malloc(req, stream)
            self.cap = cap
            assert b is not None        # no cap, unbounded device: always succeeds
        b.tag = tag
        self.live[tag] = self.live.get(tag, 0) + b.size
        if self.allocated > peak:
            self.at_peak = (self.phase, dict(self.live))
        if self.allocated > self.phase_peaks.get(self.phase, 0):
            self.phase_peaks[self.phase] = self.allocated
        return b

    def free(self, b: Block | None) -> None:
        if b is None or not b.allocated:
            return
        self.live[b.tag] -= b.size
        self.free_now(b)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: whole free segments go back to CUDA."""
        self._release_cached()



# ------------------------------------------------------------ allocation program
_STEPS = 2  # optimizer steps replayed: the layout (and max reserved) is settled by the end of step 2
_MICRO_STEPS = 2  # micro-batches replayed per step: the 2nd is the first to accumulate; later ones repeat it


@dataclass
class _PMod:
    """One parameter-holding module instance: its tensors (numel, trainable)."""

    key: str
    role: str
    block: str                      # 'first' | 'attn' | 'mlp' | 'last'
    layer: int
    tensors: tuple[tuple[int, bool], ...]


@dataclass
class _SimResult:
    startup_allocated: int
    startup_reserved: int
    peak_allocated: int
    peak_reserved: int
    peak_phase: str
    live_at_peak: dict[str, int]
    phase_peaks: dict[str, int]
    retries: int = 0
    oom: tuple[str, int] | None = None


_ATTN_NORMS = ("input_layernorm", "ln_1", "self_attn_layer_norm", "q_norm", "k_norm")
_ATTN_ROLES = ("q", "k", "v", "qkv", "o")
_FORWARD_ROLE_ORDER = {"norm": 0, "q": 1, "k": 2, "v": 3, "qkv": 1, "o": 5, "gate": 6, "up": 7, "down": 8,
                       "fc1": 6, "fc2": 8}


def _module_plan(spec: ModelSpec, setup: TrainSetup) -> tuple[list[_PMod], list[list[_PMod]], list[_PMod]]:
    """(modules before the blocks, modules of each block in forward order, modules after)
    with their parameter tensors; LoRA freezes the base and adds r·in + r·out adapters."""
    L = spec.layers
    lora = setup.lora_rank is not None
    roles = _lora_roles(setup.lora_targets) if lora else frozenset()
    r = setup.lora_rank or 0
    first: list[_PMod] = []
    last: list[_PMod] = []
    per_layer: list[tuple[int, str, str, tuple[tuple[int, bool], ...]]] = []
    projections = 0
    for idx, m in enumerate(spec.modules()):
        if m.shared:
            continue
        tensors = tuple((t, not lora) for t in _tensors(m))
        if lora and m.in_features and m.role in roles and m.role not in ("embed", "pos_embed"):
            tensors += ((r * m.in_features, True), (r * m.out_features, True))
        if m.count >= L and m.count % L == 0 and m.role not in ("embed", "pos_embed", "lm_head"):
            for j in range(m.count // L):
                if m.role == "norm":
                    attn_side = m.name in _ATTN_NORMS or (m.name == "layernorms" and j == 0)
                    block = "attn" if attn_side else "mlp"
                else:
                    block = "attn" if m.role in _ATTN_ROLES else "mlp"
                per_layer.append((idx * 16 + j, m.role, block, tensors))
        elif m.role in ("embed", "pos_embed") or (m.role == "proj" and projections == 0):
            projections += m.role == "proj"       # OPT's project_in runs first, project_out last
            first.append(_PMod(m.name, m.role, "first", -1, tensors))
        else:
            last.append(_PMod(m.name, m.role, "last", -1, tensors))
    blocks: list[list[_PMod]] = []
    for layer in range(L):
        mods = [_PMod(f"{layer}.{key}", role, block, layer, t) for key, role, block, t in per_layer]
        mods.sort(key=lambda p: (p.block != "attn", _FORWARD_ROLE_ORDER.get(p.role, 9)))
        blocks.append(mods)
    return first, blocks, last


def _registration_order(spec: ModelSpec, first: list[_PMod], blocks: list[list[_PMod]],
                        last: list[_PMod]) -> list[_PMod]:
    """``model.parameters()`` order (what DeepSpeed flattens and groups): registration order."""
    order = list(first)
    for mods in blocks:
        order += sorted(mods, key=lambda p: int(p.key.split(".", 1)[1]))
    return order + last


class _Program:
    """What ``tools/capture/train.py``-style training allocates on one GPU, in
    order, replayed through ``_CachingAllocator``: the model load, what
    ``deepspeed.initialize`` builds (reference/deepspeed.md §2; DeepSpeed
    0.19.8 ``stage_1_and_2.py``/``stage3.py`` code paths), then ``_STEPS``
    optimizer steps of forward (every saved activation tensor of
    ``_layer_terms``, the residual stream, the logits chain), backward (each
    layer's saved tensors freed, its gradients and backward working set
    allocated, ZeRO's bucket and partition buffers) and the optimizer step (the
    fp32 gradient copy, Adam's lazily created states, foreach temporaries).
    Tags say what each allocation is, for the breakdown at the peak.

    Tensor sizes come from the analytic terms; the order and lifetimes from the
    libraries' code; nothing is fitted here except ``cublas_workspace_bytes``."""

    def __init__(self, spec: ModelSpec, setup: TrainSetup, device_bytes: int, cap: float | None = None) -> None:
        self.spec, self.setup = spec, setup
        self.al = _CachingAllocator(cap)
        self.e = setup.element_bytes
        self.N = setup.world_size
        self.ds = setup.deepspeed
        self.stage = setup.zero_stage if setup.deepspeed else -1
        self.off_opt = setup.effective_offload_optimizer != "none"
        self.off_param = setup.effective_offload_param != "none"
        self.tok = setup.micro_batch * setup.seq_len
        self.sbh = self.tok * spec.hidden
        self.TV = self.tok * spec.vocab
        self.ckpt = setup.grad_ckpt
        self.amp = (not self.ds) and setup.torch_amp and self.e < 4
        self.we = 4 if self.amp else self.e             # bytes per stored weight element
        self.ge = self.we if not self.ds else self.e    # bytes per gradient element
        self.first, self.blocks, self.last = _module_plan(spec, setup)
        self.order = _registration_order(spec, self.first, self.blocks, self.last)
        self.T = sum(n for m in self.order for n, t in m.tensors if t)
        overlap = setup.effective_overlap_comm and self.ds
        self.rs = 1 if overlap else 0                  # reduction stream
        self.ags = 2 if overlap else 0                 # ZeRO-3 all-gather stream
        self.device_bytes = device_bytes
        self.state_tensors = OPTIMIZER_STATE_BYTES[setup.optimizer.lower()] // 4
        self.held_logits: _Block | None = None
        self.cublas: _Block | None = None
        self.grads: list[_Block] = []
        self.states: list[list[_Block]] = []
        self.gathered: dict[str, list[_Block]] = {}
        self.trace: list[_PMod] | None = None
        self._ng: list[int] | None = None          # trace positions whose module is not gathered
        self.rec: list[_PMod] = []
        self.pos = 0
        self.micro = 0
        self.boundary = True
        self.bufs: list[_Block | None] | None = None
        self.held_bufs: list[_Block] = []
        self.gip: _Block | None = None
        self.old_gip: _Block | None = None
        self.bucket_elems = 0
        self.bucket_tensors: list[int] = []
        self.persist: set[tuple[str, int]] = set()
        self.avail = 0
        self.modmap = {m.key: m for m in self.order}
        self._layer_sizes()

    # ---------------------------------------------------------------- helpers
    def A(self, nbytes: float, tag: str, stream: int = 0) -> _Block:
        return self.al.malloc(nbytes, stream, tag)

    def F(self, *blocks: _Block | None) -> None:
        for b in blocks:
            self.al.free(b)

    def phase(self, name: str) -> None:
        self.al.phase = name

    def _layer_sizes(self) -> None:
        """Saved activation tensors of one block, split into its attention and MLP halves."""
        spec, setup = self.spec, self.setup
        b, s = setup.micro_batch, setup.seq_len
        raw = _layer_terms(spec, setup, b, s)
        t = {k: v * _factor(f"act.{k}") for k, v in raw.items() if v}
        self.t = t
        # the HF Llama / Mistral / Qwen2 block, op by op as a torch 2.11 allocation trace shows it
        self.llama = (spec.family == "llama" and spec.norm == "rmsnorm" and spec.gated_mlp
                      and spec.norms_per_layer == 2 and not spec.fused_qkv)
        n_norm = max(1, spec.norms_per_layer)
        norm_keys = [k for k in ("norm_fp32_input", "norm_normalized", "norm_input") if k in t]
        norm1 = [t[k] / n_norm for k in norm_keys]
        attn = norm1 + [t[k] for k in ("attn_input", "q", "k", "v", "attn_softmax", "attn_probs", "attn_dropout",
                                        "attn_out", "attn_lse", "o_proj_input") if k in t]
        mlp = []
        for _ in range(n_norm - 1):
            mlp += [t[k] / n_norm for k in norm_keys]
        mlp += [t[k] for k in ("mlp_input", "mlp_gate", "mlp_act", "mlp_up", "mlp_product", "mlp_fc") if k in t]
        if "hidden_dropout" in t:
            attn.append(t["hidden_dropout"] / 2)
            mlp.append(t["hidden_dropout"] / 2)
        self.attn_saved, self.mlp_saved = attn, mlp
        self.attn_split = len(norm1)                     # attn[:attn_split] belong to the first norm
        self.mlp_split = (n_norm - 1) * len(norm_keys)   # mlp[:mlp_split] to the other norms
        model = _model_level_terms(spec, setup, b, s)
        self.final_saved = model.get("final_norm", 0) * _factor("act.final_norm")
        self.mask = model.get("attn_mask", 0) * _factor("act.attn_mask")
        e, tok = self.e, self.tok
        self.wide = e * tok * spec.intermediate         # an FFN-wide gradient in backward
        self.qwidth = e * tok * spec.q_dim
        self.kvwidth = e * tok * spec.kv_dim
        self.scores = b * spec.heads * s * s if setup.attn == "eager" else 0

    # ---------------------------------------------------------------- phases
    def run(self) -> _SimResult:
        self.phase("initialize")
        self.init()
        startup = (self.al.peak_allocated, self.al.peak_reserved)
        ga = min(max(1, self.setup.grad_accum_steps), _MICRO_STEPS)
        for step in range(1, _STEPS + 1):
            for micro in range(ga):
                self.micro = micro
                self.boundary = micro == ga - 1
                self.forward()
                self.backward()
            self.phase("optimizer step")
            self.step(step)
        phase, live = self.al.at_peak
        return _SimResult(startup_allocated=startup[0], startup_reserved=startup[1],
                          peak_allocated=self.al.peak_allocated, peak_reserved=self.al.peak_reserved,
                          peak_phase=phase, live_at_peak=live, phase_peaks=dict(self.al.phase_peaks),
                          retries=self.al.retries, oom=self.al.oom)

    # ---------------------------------------------------------------- init
    def init(self) -> None:
        if not self.ds:
            return self._init_torch()
        if self.stage == 3:
            return self._init_zero3()
        return self._init_zero012()

    def _module_to_device(self) -> dict[str, list[_Block]]:
        return {m.key: [self.A(self.e * n, "weights") for n, _ in m.tensors] for m in self.order}

    def _init_torch(self) -> None:
        """``model.cuda()``: every tensor (fp32 under AMP, adapters fp32 under LoRA), then DDP's buckets."""
        lora = self.setup.lora_rank is not None
        for m in self.order:
            for n, trainable in m.tensors:
                self.A((4 if (self.amp and (trainable or not lora)) else self.e) * n, "weights")
        if self.N > 1:
            # DDP Reducer: gradient buckets (bucket_cap_mb 25) holding a copy of every gradient
            left = self.ge * self.T
            while left > 0:
                self.A(min(left, 25 * MiB), "buckets")
                left -= 25 * MiB

    def _init_zero012(self) -> None:
        """stage_1_and_2.py / bf16_optimizer.py: module.to(device), the flat 16-bit copy of
        the trainable parameters, the fp32 master partition (a GPU clone first), the fp32
        gradient partition ``initialize_optimizer_states`` creates and drops."""
        e, N, T = self.e, self.N, self.T
        setup = self.setup
        blocks = self._module_to_device()
        trainable = [b for m in self.order for b, (n, t) in zip(blocks[m.key], m.tensors) if t]
        flat_bytes = e * T * _factor("startup.flat_copy")
        on_gpu = setup.startup_flatten == "gpu"
        if setup.startup_flatten == "auto":
            free_after_module = (self.device_bytes - CALIBRATION["cuda_context_bytes"] - _nccl_bytes(setup)[1]
                                 - self.al.reserved)
            on_gpu = free_after_module >= flat_bytes
        flattens = self.stage >= 1 or e < 4
        if not flattens:
            return
        if on_gpu:
            self.flat = self.A(flat_bytes, "weights")
            self.F(*trainable)
        else:
            self.F(*trainable)          # parameters moved to the CPU, flattened there
            self.al.empty_cache()
            self.flat = self.A(flat_bytes, "weights")
        if self.stage == 0:
            # BF16_Optimizer / FP16_Optimizer: fp32 master partition and a full fp32 gradient buffer
            self.master = self.A(4 * T / N, "optimizer")
            self.fp32_grads = self.A(4 * T, "gradients")
            return
        clone = self.A(e * T / N, "optimizer")       # partition.clone(), then .to(fp32 [, cpu])
        if self.off_opt:
            self.F(clone)
            self.A(e * max(n for m in self.order for n, t in m.tensors if t), "gradients")  # temp_grad_buffer_for_gpu_offload
            return
        self.master = self.A(4 * T / N, "optimizer")
        self.F(clone)
        z = self.A(4 * T / N, "optimizer")           # initialize_optimizer_states: zeros, then grad = None
        self.F(z)

    def _persistent(self, n: int) -> bool:
        return n <= self.setup.param_persistence_threshold

    def _init_zero3(self) -> None:
        """stage3.py: zero.Init builds each parameter on the GPU and partitions it; the
        optimizer defragments the trainable partitions into one flat buffer (via the CPU
        and empty_cache), clones fp32 partitions per sub-group (the previous sub-group's
        conversion still referenced), creates and drops a gradient buffer of the largest
        sub-group, then the IPG bucket, the flat gradient partitions, and gathers every
        parameter once to hook its AccumulateGrad."""
        e, N = self.e, self.N
        setup = self.setup
        parts: list[_Block] = []
        for m in self.order:
            for j, (n, t) in enumerate(m.tensors):
                if setup.zero_init:
                    full = self.A(e * n, "weights")
                    if not self.off_param:
                        parts.append(self.A(e * -(-n // N), "weights"))
                    self.F(full)
                else:
                    parts.append(self.A(e * n, "weights"))
                if self._persistent(n):
                    self.persist.add((m.key, j))
        if not setup.zero_init:
            whole = parts
            parts = []
            for m in self.order:
                for n, t in m.tensors:
                    if not self.off_param:
                        parts.append(self.A(e * -(-n // N), "weights"))
            self.F(*whole)
        # persistent parameters stay whole on every GPU (a real copy unless world size 1 on the GPU)
        if N > 1 or self.off_param:
            for m in self.order:
                for j, (n, _) in enumerate(m.tensors):
                    if (m.key, j) in self.persist:
                        self.A(e * n, "weights")
        tpart = [-(-n // N) for m in self.order for n, t in m.tensors if t]
        self.Tpart = sum(tpart)
        if not self.off_param:
            flags = [t for m in self.order for _, t in m.tensors]
            self.F(*[p for p, t in zip(parts, flags) if t])   # defragment: to the CPU, empty_cache, back
            self.al.empty_cache()
            self.lp = self.A(e * self.Tpart, "weights")
        subs, acc = [], 0
        for n in tpart:
            acc += n
            if acc >= setup.sub_group_size:
                subs.append(acc)
                acc = 0
        if acc:
            subs.append(acc)
        self.subs = subs
        if not self.off_opt:
            prev = None
            for n in subs:
                conv = self.A(4 * n, "optimizer")
                self.F(prev)
                self.A(4 * n, "optimizer")
                prev = conv
            self.F(prev)
            gb = self.A(4 * max(subs), "optimizer")
            self.F(gb)
        if setup.contiguous_gradients:
            self.A(e * setup.reduce_bucket_size, "buckets")
        gae = 4 if setup.grad_accum_dtype in ("fp32", "float32") else e
        if not self.off_opt:
            self.A(gae * self.Tpart, "gradients")
        for m in self.order:
            for j, (n, t) in enumerate(m.tensors):
                if t and (m.key, j) not in self.persist:
                    ft = self.A(e * n, "weights")
                    if self.off_param:
                        self.F(self.A(e * -(-n // N), "weights"))
                    self.F(ft)

    # ---------------------------------------------------------------- parameter fetch (ZeRO-3) / autocast copies
    def _needs_gather(self) -> bool:
        return self.stage == 3 and (self.N > 1 or self.off_param)

    def fetch(self, mods: list[_PMod]) -> None:
        if self.amp:
            # autocast: the 16-bit copy of each fp32 linear weight, saved by the matmul for backward
            for m in mods:
                if m.key not in self.gathered and m.role not in ("embed", "pos_embed", "norm"):
                    self.gathered[m.key] = [self.A(2 * n, "activations") for n, t in m.tensors
                                            if t or self.setup.lora_rank is None]
            return
        if not self._needs_gather():
            return
        for m in mods:
            self.rec.append(m)
            self._gather(m)
            if self.trace is not None:
                self.pos += 1
                self._prefetch()

    def _gather(self, m: _PMod) -> None:
        if m.key in self.gathered:
            return
        blocks = []
        for j, (n, _) in enumerate(m.tensors):
            if (m.key, j) not in self.persist:
                # the all-gathered full parameter: ZeRO-3's working set (a comm buffer in our taxonomy)
                blocks.append(self.A(self.e * n, "buckets", self.ags))
                self.avail += n
        self.gathered[m.key] = blocks
        if self._ng is not None:                   # its trace positions are no longer waiting
            ng = self._ng
            for i in self._tr_where.get(m.key, ()):
                k = bisect.bisect_left(ng, i)
                if k < len(ng) and ng[k] == i:
                    del ng[k]

    def _prefetch(self) -> None:
        """partitioned_param_coordinator: after a fetch, gather the next modules of the
        recorded trace, up to prefetch_bucket_size elements and while fewer than
        max_live_parameters elements are gathered."""
        setup = self.setup
        budget = min(setup.prefetch_bucket_size, setup.max_live_parameters - self.avail)
        num = 0
        i = self.pos
        trace = self.trace
        if trace is None:
            return
        # the next trace positions whose module is not gathered, in order (kept in self._ng, so
        # the walk does not step over the gathered ones one by one)
        numel, ng = self._tr_numel, self._ng
        assert ng is not None
        j = bisect.bisect_left(ng, i)
        while j < len(ng) and num < budget:
            i = ng[j]
            self._gather(trace[i])
            num += numel[i]
            j = bisect.bisect_left(ng, i + 1)

    def _index_trace(self) -> None:
        """Per position of the recorded trace: its elements, their running sum, and
        where each module occurs (release asks "used again within N elements?")."""
        assert self.trace is not None
        self._tr_numel = [sum(n for n, _ in m.tensors) for m in self.trace]
        cum = [0]
        for n in self._tr_numel:
            cum.append(cum[-1] + n)
        self._tr_cum = cum
        where: dict[str, list[int]] = {}
        for i, m in enumerate(self.trace):
            where.setdefault(m.key, []).append(i)
        self._tr_where = where
        self._ng = [i for i, m in enumerate(self.trace) if m.key not in self.gathered]

    def release(self, mods: list[_PMod]) -> None:
        if self.amp or not self._needs_gather():
            return
        if self.trace is None:
            for m in mods:
                self._drop(m.key)
            return
        # __params_to_release: keep what is used again within max_reuse_distance elements,
        # i.e. occurs at a trace position i ≥ pos whose elements before it (from pos) are < that distance
        pos, n = self.pos, len(self.trace)
        cum = self._tr_cum
        end = bisect.bisect_left(cum, cum[pos] + self.setup.max_reuse_distance, pos, n) if pos < n else pos
        for m in mods:
            occ = self._tr_where.get(m.key, ())
            k = bisect.bisect_left(occ, pos)
            if not (k < len(occ) and occ[k] < end):
                self._drop(m.key)

    def _drop(self, key: str) -> None:
        if self._ng is not None and key in self.gathered:
            for i in self._tr_where.get(key, ()):
                bisect.insort(self._ng, i)
        blocks = self.gathered.pop(key, None)
        if blocks:
            mod = self.modmap[key]
            self.avail -= sum(n for j, (n, _) in enumerate(mod.tensors) if (key, j) not in self.persist)
            self.F(*blocks)

    def release_casts(self, mods: list[_PMod]) -> None:
        if self.amp:
            for m in mods:
                self.F(*self.gathered.pop(m.key, ()))

    # ---------------------------------------------------------------- forward
    def forward(self) -> None:
        self.phase("forward")
        # ZeRO-3's coordinator resets at the start of every forward; the first full
        # forward + backward it saw is the trace it prefetches and releases by from then on
        if self.trace is None and self.rec:
            self.trace = self.rec
            self._index_trace()
        self.rec, self.pos = [], 0
        e, tok = self.e, self.tok
        ids = self.A(8 * tok, "activations")           # input ids (int64; the capture loop passes them as labels too)
        self.fetch(self.first)
        x = self.A(e * self.sbh, "activations")        # embedding output
        if any(m.role == "pos_embed" for m in self.first):
            x2 = self.A(e * self.sbh, "activations")
            self.F(x)
            x = x2
        self.release(self.first)
        if self.cublas is None:
            self.cublas = self.A(CALIBRATION["cublas_workspace_bytes"], "other")
        mask = self.A(self.mask, "activations") if self.mask else None
        self.saved: list[Any] = []
        self.inputs: list[_Block] = []
        for mods in self.blocks:
            if self.ckpt:
                self.inputs.append(x)
                x, sv = self._block_forward(mods, x, keep_input=True)
                self.F(*_saved_blocks(sv))
                self.release_casts(mods)
                self.saved.append(None)
            else:
                x, sv = self._block_forward(mods, x, keep_input=False)
                self.saved.append(sv)
        self.fetch([m for m in self.last if m.role != "lm_head"])
        fin = [self.A(part, "activations") for part in self._final_parts()]
        self.F(x)
        self.release([m for m in self.last if m.role != "lm_head"])
        head = [m for m in self.last if m.role == "lm_head"] or [m for m in self.first if m.role == "embed"]
        self.fetch(head)
        logits = self.A(e * self.TV, "logits")
        self.release(head)
        # HF ForCausalLMLoss: logits.float(), log_softmax saved by cross-entropy
        up = self.A(4 * self.TV * _factor("logits.fp32_upcast"), "logits") if e < 4 else None
        lab = self.A(8 * tok, "activations")
        lsm = self.A(4 * self.TV * _factor("logits.log_softmax"), "logits")
        self.F(up)
        # the training loop's `out = model(...)` drops the previous step's output only now
        self.F(self.held_logits)
        self.held_logits = logits
        self.fwd_state = (ids, lab, mask, fin, lsm, head)

    def _final_parts(self) -> list[float]:
        total = self.final_saved
        if not total:
            return []
        if self.spec.norm == "rmsnorm":
            e, sbh = self.e, self.sbh
            raw = [4 * sbh, e * sbh, e * sbh]
            scale = total / sum(raw)
            return [r * scale for r in raw]
        return [total / 2, total / 2]

    def _block_forward(self, mods: list[_PMod], x: _Block, keep_input: bool) -> tuple[_Block, Any]:
        if self.llama:
            return self._llama_forward(mods, x, keep_input)
        e = self.e
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        self.fetch(attn)
        sa = [self.A(sz, "activations") for sz in self.attn_saved]
        r1 = self.A(e * self.sbh, "activations")       # residual after attention
        self.release(attn)
        self.fetch(mlp)
        sm = [self.A(sz, "activations") for sz in self.mlp_saved]
        y = self.A(e * self.sbh, "activations")        # block output
        self.F(r1)
        self.release(mlp)
        if not keep_input:
            self.F(x)
        return y, (sa, sm)

    # ---------------------------------------------------------------- backward
    def backward(self) -> None:
        self.phase("backward")
        e = self.e
        ids, lab, mask, fin, lsm, head = self.fwd_state
        nll = self.A(4 * self.TV * _factor("logits.fp32_upcast"), "logits")   # dloss/dlogprobs
        lsg = self.A(4 * self.TV * _factor("logits.ce_grad"), "logits")       # log_softmax backward
        self.F(nll, lsm)
        if e < 4:
            gl = self.A(e * self.TV, "logits")                                # .float() backward
            self.F(lsg)
        else:
            gl = lsg
        self.fetch(head)
        hm = head[0]
        emb_acc = None
        gW = None
        if hm.tensors[0][1]:
            gW = self.A(self.ge * hm.tensors[0][0], "gradients")
        gh = self.A(e * self.sbh, "activations")
        self.F(gl)
        if gW is not None:
            if hm.role == "lm_head":
                self.grad(hm.key, 0, gW)
            else:
                emb_acc = gW          # tied: accumulated with the embedding's own gradient at the end
        self.release(head)
        self.release_casts(head)
        tail = [m for m in self.last if m.role != "lm_head"]
        self.fetch(tail)
        g = self._norm_backward(fin, tail, gh)
        self.release(tail)
        self.release_casts(tail)
        for layer in reversed(range(len(self.blocks))):
            mods = self.blocks[layer]
            if self.ckpt:
                x = self.inputs[layer]
                y, sv = self._block_forward(mods, x, keep_input=True)
                self.F(y)
            else:
                sv = self.saved[layer]
            g = self._block_backward(mods, sv, g)
            if self.ckpt:
                self.F(x)
        self.fetch(self.first)
        emb = [m for m in self.first if m.role == "embed"]
        dense = self.A(self.ge * emb[0].tensors[0][0], "gradients") if emb and emb[0].tensors[0][1] else None
        self.F(g)
        if emb_acc is not None and dense is not None:
            self.F(dense)
            dense = emb_acc
        for m in self.first:
            for j, (n, t) in enumerate(m.tensors):
                if not t:
                    continue
                if m.role == "embed" and j == 0:
                    if dense is not None:
                        self.grad(m.key, j, dense)
                else:
                    self.grad(m.key, j, self.A(self.ge * n, "gradients"))
        self.release(self.first)
        self.release_casts(self.first)
        self.F(ids, lab, mask)
        self.epilogue()

    def _module_grads(self, mods: list[_PMod]) -> None:
        for m in mods:
            for j, (n, t) in enumerate(m.tensors):
                if t:
                    self.grad(m.key, j, self.A(self.ge * n, "gradients"))

    def _norm_backward(self, saved: list[_Block], norms: list[_PMod], g: _Block) -> _Block:
        e = self.e
        t = self.A(4 * self.sbh, "activations")
        self.F(*reversed(saved))
        self._module_grads(norms)
        gx = self.A(e * self.sbh, "activations")
        self.F(t, g)
        return gx

    def _block_backward(self, mods: list[_PMod], sv: Any, g: _Block) -> _Block:
        if self.llama:
            return self._llama_backward(mods, sv, g)
        e = self.e
        sa, sm = sv
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        attn_norms = [m for m in attn if m.role == "norm"]
        mlp_norms = [m for m in mlp if m.role == "norm"]
        # MLP (down / fc2 first)
        self.fetch(mlp)
        out_proj = [m for m in mlp if m.role in ("down", "fc2")]
        in_proj = [m for m in mlp if m.role in ("gate", "up", "fc1")]
        self._module_grads(out_proj)
        w1 = self.A(self.wide, "activations")
        body = sm[self.mlp_split:]
        w2 = self.A(self.wide, "activations")
        w3 = self.A(self.wide, "activations") if self.spec.gated_mlp else None
        self.F(w1)
        self.F(*reversed(body))
        self._module_grads(list(reversed(in_proj)))
        gx = self.A(e * self.sbh, "activations")
        self.F(w2, w3)
        g2 = self._norm_backward(sm[:self.mlp_split], mlp_norms, gx)
        gm = self.A(e * self.sbh, "activations")     # residual: g + dL/dx of the MLP branch
        self.F(g2, g)
        self.release(mlp)
        self.release_casts(mlp)
        # attention (o first, then q/k/v)
        self.fetch(attn)
        self._module_grads([m for m in attn if m.role == "o"])
        ga = self.A(self.qwidth, "activations")
        if self.scores:
            p1 = self.A(e * self.scores, "activations")
            p2 = self.A((4 if self.spec.softmax_fp32 else e) * self.scores, "activations")
            self.F(p1)
        gq = self.A(self.qwidth, "activations")
        gkv = self.A(2 * self.kvwidth, "activations")
        if self.scores:
            self.F(p2)
        self.F(ga)
        body = sa[self.attn_split:]
        self.F(*reversed(body))
        self._module_grads([m for m in reversed(attn) if m.role in ("q", "k", "v", "qkv")])
        gx = self.A(e * self.sbh, "activations")
        self.F(gq, gkv)
        g3 = self._norm_backward(sa[:self.attn_split], attn_norms, gx)
        gout = self.A(e * self.sbh, "activations")
        self.F(g3, gm)
        self.release(attn)
        self.release_casts(attn)
        return gout

    # ---------------------------------------------------------------- the Llama-family block
    def _rms_forward(self, saved_out: float) -> tuple[list[_Block], _Block]:
        """LlamaRMSNorm: x.float() (saved), pow/mean temporaries, rsqrt (saved), the fp32
        product (temporary), its 16-bit cast (saved for the weight's gradient), the output."""
        e, sbh, t = self.e, self.sbh, self.t
        x32 = self.A(t["norm_fp32_input"] / 2, "activations")
        self.F(self.A(4 * sbh, "activations"))                     # pow(2)
        var = self.A(4 * self.tok, "activations")
        rs = self.A(4 * self.tok, "activations")
        hs = self.A(4 * sbh, "activations")
        nrm = self.A(t["norm_normalized"] / 2, "activations") if t.get("norm_normalized") else None
        out = self.A(saved_out or e * sbh, "activations")
        self.F(hs, var)
        return [x32, rs, nrm], out

    def _rope(self, width: float, saved: float) -> _Block:
        """apply_rotary_pos_emb on one of q / k: x·cos, rotate_half (neg + cat), ·sin, sum."""
        a = self.A(width, "activations")
        n = self.A(width / 2, "activations")
        c = self.A(width, "activations")
        self.F(n)
        r = self.A(width, "activations")
        self.F(c)
        out = self.A(saved, "activations")
        self.F(r, a)
        return out

    def _llama_forward(self, mods: list[_PMod], x: _Block, keep_input: bool) -> tuple[_Block, dict]:
        e, sbh, t = self.e, self.sbh, self.t
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        sv: dict[str, Any] = {}
        self.fetch(attn)
        sv["n1"], out1 = self._rms_forward(t.get("attn_input", 0))
        q = self.A(self.qwidth, "activations")
        k = self.A(self.kvwidth, "activations")
        sv["v"] = self.A(t.get("v") or self.kvwidth, "activations")
        sv["q"] = self._rope(self.qwidth, t["q"])
        sv["k"] = self._rope(self.kvwidth, t["k"])
        self.F(q, k)
        if not t.get("attn_input"):
            self.F(out1)
            out1 = None
        sv["out1"] = out1
        if self.scores:
            w = self.A(e * self.scores, "activations")                      # q @ kᵀ
            sv["sm"] = self.A(t["attn_softmax"], "activations")
            self.F(w)
            sv["probs"] = self.A(t.get("attn_probs") or t.get("attn_dropout", 0), "activations")
            ao = self.A(self.qwidth, "activations")                          # probs @ v, (b, a, s, d)
            sv["o"] = self.A(t.get("o_proj_input") or self.qwidth, "activations")  # transpose + reshape copy
            self.F(ao)
            sv["lse"] = None
        else:
            sv["o"] = self.A(t["attn_out"], "activations")
            sv["lse"] = self.A(t["attn_lse"], "activations")
        op = self.A(e * sbh, "activations")                                  # o_proj output
        r1 = self.A(e * sbh, "activations")                                  # + residual
        self.F(op)
        self.release(attn)
        self.fetch(mlp)
        sv["n2"], out2 = self._rms_forward(t.get("mlp_input", 0))
        wide = self.wide
        sv["g"] = self.A(t.get("mlp_gate") or wide, "activations")
        sv["sl"] = self.A(t.get("mlp_act") or wide, "activations")
        sv["u"] = self.A(t.get("mlp_up") or wide, "activations")
        sv["pr"] = self.A(t.get("mlp_product") or wide, "activations")
        dn = self.A(e * sbh, "activations")                                  # down_proj output
        y = self.A(e * sbh, "activations")                                   # + residual
        self.F(dn, r1)
        if not t.get("mlp_input"):
            self.F(out2)
            out2 = None
        sv["out2"] = out2
        if not t.get("mlp_product"):
            self.F(sv["pr"])
            sv["pr"] = None
        self.release(mlp)
        if not keep_input:
            self.F(x)
        return y, sv

    def _grad_of(self, mods: list[_PMod], role: str) -> list[tuple[_PMod, int, int]]:
        return [(m, j, n) for m in mods if m.role == role for j, (n, tr) in enumerate(m.tensors) if tr]

    def _alloc_grads(self, mods: list[_PMod], role: str) -> list[tuple[_PMod, int, _Block]]:
        return [(m, j, self.A(self.ge * n, "gradients")) for m, j, n in self._grad_of(mods, role)]

    def _hook_all(self, grads: list[tuple[_PMod, int, _Block]]) -> None:
        for m, j, blk in grads:
            self.grad(m.key, j, blk)

    def _rms_backward(self, saved: list[_Block | None], out: _Block | None, norms: list[_PMod]) -> _Block:
        e, sbh = self.e, self.sbh
        x32, rs, nrm = saved
        gw = self._alloc_grads(norms, "norm")
        self.F(self.A(8 * sbh, "activations"))
        a1 = self.A(e * sbh, "activations")
        self.F(out, nrm)
        b1 = self.A(4 * sbh, "activations")
        b2 = self.A(4 * sbh, "activations")
        b3 = self.A(4 * sbh, "activations")
        self.F(b1, x32, rs)
        gx = self.A(e * sbh, "activations")
        self.F(b2, b3, a1)
        self._hook_all(gw)
        return gx

    def _rope_backward(self, g: _Block, width: float) -> _Block:
        t1 = self.A(width, "activations")
        t2 = self.A(width / 2, "activations")
        t3 = self.A(width, "activations")
        self.F(t2)
        t4 = self.A(width, "activations")
        self.F(t1, t3, g)
        return t4

    def _llama_backward(self, mods: list[_PMod], sv: dict, gy: _Block) -> _Block:
        e, sbh, wide = self.e, self.sbh, self.wide
        attn = [m for m in mods if m.block == "attn"]
        mlp = [m for m in mods if m.block == "mlp"]
        adapters = [m for m in mods if m.role not in ("norm", "q", "k", "v", "o", "gate", "up", "down")]
        # MLP: down, then the SiLU·up product, then up and gate
        self.fetch(mlp)
        gwd = self._alloc_grads(mlp, "down")
        gpr = self.A(wide, "activations")
        self.F(sv["pr"])
        self._hook_all(gwd)
        gsl = self.A(wide, "activations")
        gu = self.A(wide, "activations")
        self.F(gpr, sv["u"], sv["sl"])
        gwu = self._alloc_grads(mlp, "up")
        gxu = self.A(e * sbh, "activations")
        self.F(gu)
        self._hook_all(gwu)
        gg = self.A(wide, "activations")
        self.F(gsl, sv["g"])
        gwg = self._alloc_grads(mlp, "gate")
        gxg = self.A(e * sbh, "activations")
        self.F(gg)
        self._hook_all(gwg)
        gx = self.A(e * sbh, "activations")
        self.F(gxu, gxg)
        gn = self._rms_backward(sv["n2"], sv["out2"], [m for m in mlp if m.role == "norm"])
        self.F(gx)
        gr = self.A(e * sbh, "activations")
        self.F(gn, gy)
        self.release(mlp)
        self.release_casts(mlp)
        # attention: o_proj, the attention kernel, RoPE, then v, k, q
        self.fetch(attn)
        gwo = self._alloc_grads(attn, "o")
        ga = self.A(self.qwidth, "activations")
        self._hook_all(gwo)
        if self.scores:
            p1 = self.A(e * self.scores, "activations")
            self.F(sv["sm"], sv["probs"])
            p2 = self.A((4 if self.spec.softmax_fp32 else e) * self.scores, "activations")
            self.F(p1)
        gq = self.A(self.qwidth, "activations")
        gk = self.A(self.kvwidth, "activations")
        gv = self.A(self.kvwidth, "activations")
        if self.scores:
            self.F(p2)
        else:
            self.F(self.A(4 * self.tok * self.spec.q_dim, "activations"))  # fp32 dq accumulator
        self.F(ga, sv["k"], sv["q"], sv["v"], sv["lse"], sv["o"])
        gq = self._rope_backward(gq, self.qwidth)
        gk = self._rope_backward(gk, self.kvwidth)
        gxs = None
        for role, gt in (("v", gv), ("k", gk), ("q", gq)):
            gws = self._alloc_grads(attn, role)
            gxp = self.A(e * sbh, "activations")
            self.F(gt)
            self._hook_all(gws)
            if gxs is None:
                gxs = gxp
            else:
                acc = self.A(e * sbh, "activations")
                self.F(gxs, gxp)
                gxs = acc
        self._module_grads(adapters)
        gn = self._rms_backward(sv["n1"], sv["out1"], [m for m in attn if m.role == "norm"])
        self.F(gxs)
        gin = self.A(e * sbh, "activations")
        self.F(gn, gr)
        self.release(attn)
        self.release_casts(attn)
        return gin

    # ---------------------------------------------------------------- gradients
    def grad(self, key: str, j: int, blk: _Block) -> None:
        """A parameter's gradient has been produced (its AccumulateGrad hook fires)."""
        numel = self.modmap[key].tensors[j][0]
        if not self.ds:
            if self.micro > 0:
                self.F(blk)       # accumulated into the existing .grad
            else:
                self.grads.append(blk)
            return
        if self.stage == 0:
            if self.e < 4:
                self.F(self.A(4 * numel, "gradients"), blk)   # hp_grad.add_(lp.grad.float())
            elif self.micro > 0:
                self.F(blk)
            else:
                self.grads.append(blk)
            return
        if self.stage == 3:
            return self._grad_zero3(numel, blk)
        return self._grad_zero12(numel, blk)

    def _grad_zero12(self, numel: int, blk: _Block) -> None:
        setup = self.setup
        if not self.bufs:
            # setup_buckets at the first gradient of each backward; a second one with overlap_comm
            be = 4 if (self.stage == 1 and setup.grad_accum_dtype in ("fp32", "float32") and self.e < 4) else self.e
            n = 2 if setup.effective_overlap_comm else 1
            self.bufs = [self.A(be * setup.reduce_bucket_size, "buckets") for _ in range(n)] \
                if setup.contiguous_gradients else [None]
            self.bucket_elems = 0
            self.bucket_tensors = []
        if numel > setup.reduce_bucket_size:
            self._flush12()
            self.bucket_tensors = [numel]
            self._flush12()
            self.F(blk)
            return
        if self.bucket_elems + numel > setup.reduce_bucket_size:
            self._flush12()
        self.F(blk)                               # copied into the contiguous bucket
        self.bucket_tensors.append(numel)
        self.bucket_elems += numel

    def _flush12(self) -> None:
        if not self.bucket_tensors:
            return
        N = self.N
        if self.off_opt:
            for n in self.bucket_tensors:
                part = n / N
                # set_norm_for_param_grad_in_gpu (fp64 copy) and the fp32 copy sent to the host
                self.F(self.A(8 * part, "gradients", self.rs))
                self.F(self.A(4 * part, "gradients", self.rs))
        elif self.gip is None:
            gae = 4 if self.setup.grad_accum_dtype in ("fp32", "float32") and self.stage == 1 else self.e
            self.gip = self.A(gae * self.T / N, "gradients", self.rs)
        self.bucket_tensors = []
        self.bucket_elems = 0

    def _grad_zero3(self, numel: int, blk: _Block) -> None:
        setup = self.setup
        if self.bucket_elems + numel > setup.reduce_bucket_size and self.bucket_elems > 0:
            self._flush3()
        self.F(blk)                               # copied into the IPG bucket on the reduction stream
        self.bucket_tensors.append(numel)
        self.bucket_elems += numel

    def _flush3(self) -> None:
        """__reduce_and_partition_ipg_grads: reduce_scatter_coalesced concatenates the
        bucket's gradients (one buffer), partition_grads copies this rank's share."""
        if not self.bucket_tensors:
            return
        N, e = self.N, self.e
        s = self.rs
        cat = self.A(e * self.bucket_elems, "buckets", s) if len(self.bucket_tensors) > 1 or N > 1 else None
        if self.off_opt:
            prev = None
            for n in self.bucket_tensors:
                part = -(-n // N)
                gbuf = self.A(e * part, "gradients", s)        # grad_buffer.to(device): back on the GPU
                self.F(prev)
                if self.boundary:
                    left = part
                    while left > 0:                             # _constant_buffered_norm2: fp64 chunks
                        c = min(left, 250_000_000)
                        self.F(self.A(8 * c, "gradients", s))
                        left -= c
                    self.F(self.A(4 * part, "gradients", s))     # fp32 copy for the host
                prev = gbuf
            self.F(prev)
        self.F(cat)
        self.bucket_tensors = []
        self.bucket_elems = 0

    def epilogue(self) -> None:
        if not self.ds:
            return
        if self.stage == 3:
            self._flush3()
            return
        if self.stage in (1, 2):
            self._flush12()
            if self.stage == 2:
                for b in self.bufs or ():
                    self.F(b)
            else:
                # stage 1: gradients outside this rank's partition stay as views into the bucket
                # until the step frees them, so the bucket storage lives on
                self.held_bufs += [b for b in self.bufs or () if b is not None]
            self.bufs = None
            if self.old_gip is not None:
                self.F(self.old_gip)
                self.old_gip = None
            if not self.boundary and not self.off_opt and self.gip is not None:
                # gradient accumulation: the next micro-step reduces into a new partition buffer;
                # this one lives (through the accumulated .grad views) until that copy is done
                self.old_gip, self.gip = self.gip, None

    # ---------------------------------------------------------------- optimizer step
    def _adam(self, n: float, key: int) -> None:
        """A torch AdamW step on n fp32 elements: lazily created states, the foreach sqrt temporary."""
        while len(self.states) <= key:
            self.states.append([self.A(4 * n, "optimizer") for _ in range(self.state_tensors)])
        if self.state_tensors:
            self.F(self.A(4 * n, "optimizer"))

    def step(self, step: int) -> None:
        N, T, e = self.N, self.T, self.e
        trainable = [n for m in self.order for n, t in m.tensors if t]
        if not self.ds or (self.stage == 0 and e == 4):
            se = 4 if (self.amp or e == 4) else e
            if not self.states:
                self.states = [[self.A(se * n, "optimizer") for _ in range(self.state_tensors)] for n in trainable]
            if self.state_tensors:
                tmp = [self.A(se * n, "optimizer") for n in trainable]
                self.F(*tmp)
            self.F(*self.grads)
            self.grads = []
            return
        if self.stage == 3:
            for key in list(self.gathered):   # _partition_all_parameters
                self._drop(key)
            if self.off_opt:
                return
            for n in trainable:
                self.F(self.A(8 * -(-n // N), "optimizer"))    # fp64 norm of each gradient partition
            for i, n in enumerate(self.subs):
                flat = self.A(e * n, "gradients")
                f32 = self.A(4 * n, "optimizer")
                self.F(flat)
                self._adam(n, i)
                self.F(f32)
            return
        if self.stage == 0:
            for n in trainable:
                self.F(self.A(8 * n / N, "optimizer"))
            self._adam(T / N, 0)
            return
        if self.off_opt:
            return
        for n in trainable:
            self.F(self.A(8 * n / N, "optimizer"))             # get_grad_norm_direct: fp64 copies
        flat = self.A(e * T / N, "gradients")                  # flatten(averaged_gradients)
        f32 = self.A(4 * T / N, "optimizer")                   # .to(fp32)
        self.F(flat, self.gip, *self.held_bufs)
        self.gip = None
        self.held_bufs = []
        self._adam(T / N, 0)
        self.F(f32)


def _saved_blocks(sv: Any) -> list[_Block | None]:
    """Every block a forward kept for backward (generic tuple or the Llama dict)."""
    if isinstance(sv, dict):
        out: list[_Block | None] = []
        for v in sv.values():
            out += v if isinstance(v, list) else [v]
        return out
    return list(sv[0]) + list(sv[1])


def _simulate(spec: ModelSpec, setup: TrainSetup, device_bytes: int, cap: float | None = None) -> _SimResult:
    """The replay, memoised: the analysis pipeline and the rerun planner ask for the same set-up
    several times.  The key includes CALIBRATION and the replay lengths, so changing them is seen."""
    # the spec's ``source`` says where its numbers came from (it quotes the log's parameter count) and changes
    # nothing in the replay: keyed without it, jobs of one model share a result
    key = (replace(spec, source=""), setup, int(device_bytes), cap, tuple(sorted(CALIBRATION.items())), _STEPS,
           _MICRO_STEPS)
    hit = _SIM_CACHE.get(key)
    if hit is None:
        name = sim_cache.digest(key) if sim_cache.enabled() else None
        hit = _from_disk(sim_cache.load(name)) if name is not None else None
        if hit is None:
            hit = _Program(spec, setup, device_bytes, cap).run()
            if name is not None:
                sim_cache.store(name, _to_disk(hit))
        if len(_SIM_CACHE) >= 256:
            _SIM_CACHE.pop(next(iter(_SIM_CACHE)))
        _SIM_CACHE[key] = hit
    return hit


_SIM_CACHE: dict[tuple[Any, ...], _SimResult] = {}


def _to_disk(r: _SimResult) -> dict[str, Any]:
    return {"startup_allocated": r.startup_allocated, "startup_reserved": r.startup_reserved,
            "peak_allocated": r.peak_allocated, "peak_reserved": r.peak_reserved, "peak_phase": r.peak_phase,
            "live_at_peak": r.live_at_peak, "phase_peaks": r.phase_peaks, "retries": r.retries,
            "oom": list(r.oom) if r.oom is not None else None}


def _from_disk(d: dict[str, Any] | None) -> _SimResult | None:
    """A cached result, only if every field has its type (the file is outside our control)."""
    if d is None:
        return None

    def is_int(v: Any) -> bool:
        return type(v) is int

    def int_map(v: Any) -> bool:
        return isinstance(v, dict) and all(isinstance(k, str) and is_int(x) for k, x in v.items())

    oom = d.get("oom")
    if not (all(is_int(d.get(k)) for k in ("startup_allocated", "startup_reserved", "peak_allocated",
                                            "peak_reserved", "retries"))
            and isinstance(d.get("peak_phase"), str) and int_map(d.get("live_at_peak"))
            and int_map(d.get("phase_peaks"))
            and (oom is None or (isinstance(oom, list) and len(oom) == 2 and isinstance(oom[0], str)
                                 and is_int(oom[1])))):
        return None
    return _SimResult(d["startup_allocated"], d["startup_reserved"], d["peak_allocated"], d["peak_reserved"],
                      d["peak_phase"], d["live_at_peak"], d["phase_peaks"], d["retries"],
                      (oom[0], oom[1]) if oom is not None else None)
