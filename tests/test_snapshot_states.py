"""Model states read off a snapshot alone (analysis.snapshot_states): weights from the blocks the model's
construction allocated, gradients from blocks of a weight's exact size, the optimizer's from its own files —
and the capacity verdict they give when the snapshot is all there is."""

from __future__ import annotations

from pathlib import Path

import pytest

import oompost
from oompost.analysis.snapshot_states import snapshot_states
from oompost.model import Block, Frame, Segment, Snapshot
from oompost.parsers.snapshot import load_snapshot

SAMPLES = Path(__file__).parent.parent / "sample_logs"
SNAP = "snapshot_rank0_oom.pickle.gz"
GiB = 2**30


def _load(case: str) -> Snapshot:
    return load_snapshot(str(SAMPLES / case / SNAP))


def test_fp32_full_fine_tune_weights_and_gradients():
    # Qwen2.5-3B-shaped, 3.09B parameters built in fp32: 11.5 GiB of weights and a gradient of each
    s = snapshot_states(_load("capacity_qwen2.5_3b_fp32_trainer_3090_24g"))
    assert s is not None
    assert 11.3 * GiB < s.weights_bytes < 11.7 * GiB
    assert s.grad_bytes > 0.9 * s.weights_bytes
    assert s.trains_all_weights
    assert s.floor_bytes >= 2 * s.weights_bytes


def test_optimizer_state_is_counted_from_the_optimizer_files():
    # the HF Trainer's AdamW had allocated its moments when the optimizer step failed
    s = snapshot_states(_load("capacity_mistral7b_fp32_hf_trainer_a100_80g"))
    assert s is not None and s.optimizer_bytes > 0.5 * s.weights_bytes
    assert s.with_adam_bytes >= s.floor_bytes


@pytest.mark.parametrize("case", ["activation_spike_long_batch", "fragmentation_dynamic_padding",
                                  "leak_logits_kept_for_metrics"])
def test_small_models_states_are_a_small_share(case):
    s = snapshot_states(_load(case))
    assert s is not None
    assert s.with_adam_bytes < 0.5 * s.live_bytes


@pytest.mark.parametrize("case", ["comm_buffer_zero2_buckets", "capacity_zero2_1.5b_3090"])
def test_deepspeed_zero_states_are_left_to_the_memory_model(case):
    assert snapshot_states(_load(case)) is None


@pytest.mark.parametrize("case", ["capacity_qwen2.5_3b_fp32_trainer_3090_24g", "capacity_llama3.2_1b_plain_loop_2080ti"])
def test_the_snapshot_alone_gives_capacity(case):
    r = oompost.analyze([str(SAMPLES / case / SNAP)])
    assert r.cause == "capacity", (r.cause, r.confidence)
    cap = next(f for f in r.findings if f.code == "CAP001")
    assert any("(snapshot)" in s[0] for s in cap.signals)


def _frames(*names: tuple[str, str]) -> tuple[Frame, ...]:
    return tuple(Frame(fn, 10, name) for fn, name in names)


_INIT = _frames(("/x/torch/nn/modules/linear.py", "__init__"), ("/x/train.py", "main"))
_FWD = _frames(("/x/torch/nn/functional.py", "linear"), ("/x/model.py", "forward"), ("/x/train.py", "main"))


def _snap(blocks: list[Block]) -> Snapshot:
    segs = tuple(Segment(0, b.address, b.size, b.size, 0, "large", (0, 0), False, (b,)) for b in blocks)
    return Snapshot("synthetic", segs, (), {}, {})


def test_a_gradient_is_a_block_of_a_weights_exact_size():
    w = 64 * 2**20
    s = snapshot_states(_snap([Block(0x1000_0000, w, w, "active_allocated", _INIT),
                               Block(0x2000_0000, w, w, "active_allocated", _INIT),
                               Block(0x3000_0000, w, w, "active_allocated", _FWD),       # one weight's gradient
                               Block(0x4000_0000, w + 512, w + 512, "active_allocated", _FWD)]))  # an activation
    assert s is not None
    assert s.weights_bytes == 2 * w and s.grad_bytes == w
    assert s.trains_all_weights                 # half the weights have gradients


def test_tiny_weights_never_match_activations():
    # a LayerNorm-sized weight shares its size with many activations: under 1 MiB is never matched
    n = 16 * 1024
    s = snapshot_states(_snap([Block(0x1000_0000, 64 * 2**20, 64 * 2**20, "active_allocated", _INIT),
                               Block(0x2000_0000, n, n, "active_allocated", _INIT),
                               Block(0x3000_0000, n, n, "active_allocated", _FWD)]))
    assert s is not None and s.grad_bytes == 0 and not s.trains_all_weights


def test_no_stacks_no_states():
    assert snapshot_states(_snap([Block(0x1000_0000, 2**20, 2**20, "active_allocated")])) is None
