"""Message variants other people's logs carry, each from a real line of the corpus dev fold.

Every excerpt is verbatim from the thread named beside it (tests/corpus/).
"""

from __future__ import annotations

from oompost.model import FailureKind
from oompost.parsers import parse_text


def kinds(text: str) -> set[FailureKind]:
    return {f.kind for f in parse_text(text).failures}


# openxla/xla#7201: NCCL's OOM quoted inside XLA's own error message
def test_nccl_cuda_oom_quoted_in_another_runtimes_message():
    line = ("NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error (run with "
            "NCCL_DEBUG=INFO for details). Last NCCL warning(error) log entry (may be unrelated) 'Cuda failure 2 "
            "'out of memory''.; current tracing scope: all-reduce-start.285")
    ev = parse_text(line)
    assert FailureKind.NCCL_CUDA_OOM in {f.kind for f in ev.failures}
    assert not ev.ooms                      # the communicator's OOM, not a tensor's


# intel/intel-extension-for-pytorch#640: oneCCL on Level Zero runs out of device memory
def test_oneccl_out_of_device_memory():
    line = ("2024:05:29-19:16:18:(202165) |CCL_ERROR| worker.cpp:338 ccl_worker_func: worker 0 caught internal "
            "exception: oneCCL: ze_call.cpp:28 do_call: EXCEPTION: ze error at zeCommandQueueExecuteCommandLists, "
            "code: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY")
    assert FailureKind.NCCL_CUDA_OOM in kinds(line)


# NVIDIA/nccl#697: an older NCCL's error return chain, no WARN line
def test_nccl_info_error_return_chain():
    text = ("dgxa100:1050:1315 [0] NCCL INFO Channel 15/0 : 0[90000] -> 1[1000] [send] via NET/Socket/7\n"
            "dgxa100:1050:1316 [0] NCCL INFO include/net.h:25 -> 2\n"
            "dgxa100:1050:1316 [0] NCCL INFO transport/net.cc:515 -> 2\n")
    assert FailureKind.NCCL_SYSTEM in kinds(text)


def test_nccl_channel_arrows_are_not_errors():
    assert not kinds("dgxa100:1050:1315 [0] NCCL INFO Channel 03/0 : 0[90000] -> 1[1000] [send] via NET/Socket/3\n")


# NVIDIA/TensorRT-LLM#5872: a serving engine's own out-of-memory wording
def test_insufficient_gpu_memory_is_an_oom():
    line = ("[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] Failed to initialize executor on rank 1: Executor creation "
            "failed due to insufficient GPU memory.")
    assert parse_text(line).ooms


# bitsandbytes-foundation/bitsandbytes#596: a traceback pasted up to the raise, without its exception line
def test_traceback_ending_at_a_deepspeed_config_raise():
    text = ('  File "/x/src/deepspeed/runtime/engine.py", line 1172, in _configure_optimizer\n'
            "    self._configure_optimizer(optimizer, model_parameters)\n"
            '  File "/x/src/deepspeed/runtime/engine.py", line 1172, in _configure_optimizer\n'
            "    raise ZeRORuntimeException(msg)\n")
    fails = [f for f in parse_text(text).failures if f.kind is FailureKind.CONFIG_VALIDATION]
    assert fails and fails[0].exception == "ZeRORuntimeException"


def test_a_settings_assertion_raised_by_deepspeed_is_a_config_error():
    text = ("Traceback (most recent call last):\n"
            '  File "/x/deepspeed/runtime/engine.py", line 1000, in _configure_optimizer\n'
            "    assert self.zero_optimization_stage() == 3\n"
            "AssertionError: Partial offloading requires stage 3\n")
    assert FailureKind.CONFIG_VALIDATION in kinds(text)


def test_an_assertion_elsewhere_stays_a_python_exception():
    text = ("Traceback (most recent call last):\n"
            '  File "/x/model.py", line 10, in forward\n'
            "    assert x.shape[0] == 4\n"
            "AssertionError\n")
    assert kinds(text) == {FailureKind.PYTHON_EXCEPTION}


# NVlabs/nvdiffrast#23: per-GPU memory figures that rise every iteration (two GPUs interleaved)
def test_memory_rising_every_iteration_per_device():
    text = ("nvidia-smi GPU-0 memory (MB) 2796\nnvidia-smi GPU-1 memory (MB) 1494\nIter 8 Time 0.575\n"
            "nvidia-smi GPU-0 memory (MB) 2798\nnvidia-smi GPU-1 memory (MB) 1495\nIter 9 Time 0.544\n"
            "nvidia-smi GPU-0 memory (MB) 2800\nnvidia-smi GPU-1 memory (MB) 1497\n")
    assert parse_text(text).fact("cue.memory_growing") is not None


def test_flat_memory_figures_are_not_growth():
    text = "".join(f"torch.cuda.memory_allocated(0) 318986240\nIter {i} Time 0.5\n" for i in range(5))
    assert parse_text(text).fact("cue.memory_growing") is None
