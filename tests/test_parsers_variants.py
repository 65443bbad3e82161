"""Message variants other people's logs carry, each from a real line of the corpus dev fold.

Every excerpt is verbatim from the thread named beside it (tests/corpus/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import oompost
from oompost.model import FailureKind, OomKind
from oompost.parsers import parse_text

CORPUS = Path(__file__).parent / "corpus"


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


# MichalBusta/E2E-MLT#37's message (dev), as a terminal or a forum wraps it: the clauses on the next line
E2E_MLT = ("RuntimeError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 983.69 MiB total capacity; "
           "209.53 MiB already allocated; 69.56 MiB free; 6.47 MiB cached)")


def test_old_message_wrapped_before_its_numbers():
    head, tail = E2E_MLT.split(" (GPU 0;")
    (o,) = parse_text(head + "\n(GPU 0;" + tail + "\n").ooms
    assert o.capacity_bytes is not None and o.allocated_bytes is not None and o.free_bytes is not None
    assert not o.truncated


# NVIDIA/Megatron-LM#525's message (dev), wrapped after "total capacity;"
def test_old_message_wrapped_mid_clause():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB (GPU 0; 31.74 GiB total "
            "capacity;\n28.82 GiB already allocated; 577.12 MiB free; 29.97 GiB reserved in total by PyTorch)\n")
    (o,) = parse_text(text).ooms
    assert o.reserved_unallocated_bytes is not None and o.reserved_unallocated_bytes > 1_000_000_000


# graphdeco-inria/gaussian-splatting#890's message (dev), wrapped inside "reserved in total by PyTorch"
def test_old_message_wrapped_inside_the_reserved_clause():
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 7.94 GiB (GPU 0; 23.67 GiB total capacity; 13.48 GiB "
            "already allocated; 4.58 GiB free; 17.59 GiB reserved\n in total by PyTorch)\n")
    (o,) = parse_text(text).ooms
    assert not o.truncated
    assert round(o.reserved_unallocated_bytes / 2**30, 2) == 4.11


# vllm-project/compressed-tensors#587's message (dev), wrapped before "Of the allocated memory"
def test_new_message_wrapped():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
            "79.18 GiB of which 1.08 GiB is free. Including non-PyTorch memory, this process has 78.09 GiB memory in "
            "use.\nOf the allocated memory 75.31 GiB is allocated by PyTorch, and 1.83 GiB is reserved by PyTorch but "
            "unallocated.\nNext line of the log\n")
    (o,) = parse_text(text).ooms
    assert o.allocated_bytes is not None and o.reserved_unallocated_bytes is not None


# unslothai/unsloth#3896's message (dev), wrapped right after "CUDA out of memory."
def test_new_message_wrapped_before_tried_to_allocate():
    text = ("OutOfMemoryError: CUDA out of memory. \n"
            "Tried to allocate 1.02 GiB. GPU 0 has a total capacity of 15.89 GiB of which 137.12 MiB is free. \n")
    (o,) = parse_text(text).ooms
    assert o.ref.line == 1 and o.exception == "OutOfMemoryError"
    assert round(o.requested_bytes / 2**30, 2) == 1.02 and round(o.capacity_bytes / 2**30, 2) == 15.89


def test_a_second_message_is_not_glued_to_a_cut_one_far_above():
    text = ("RuntimeError: CUDA out of memory.\nepoch 1\nstep 2\n"
            "Tried to allocate 1.02 GiB. GPU 0 has a total capacity of 15.89 GiB of which 137.12 MiB is free.\n")
    first, second = parse_text(text).ooms
    assert first.requested_bytes is None and second.ref.line == 4


def test_a_following_unrelated_line_is_not_joined():
    (o,) = parse_text(E2E_MLT.split(" (GPU 0;")[0] + "\nEpoch 3 loss 0.2\n").ooms
    assert o.capacity_bytes is None


# huggingface/peft#2014 (dev): a settings ValueError from the DeepSpeed integration, no traceback
def test_deepspeed_settings_valueerror_is_a_config_error():
    line = ("ValueError: Model was not initialized with `Zero-3` despite being configured for DeepSpeed Zero-3. "
            "Please re-initialize your model via `Model.from_pretrained(...)` or `Model.from_config(...)` after "
            "creating your `TrainingArguments`!")
    assert FailureKind.CONFIG_VALIDATION in kinds(line)


def test_subprocess_exit_status_minus_9_is_a_sigkill():
    line = ("subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'finetune.py', '--local_rank=0']' "
            "returned non-zero exit status -9.")
    assert FailureKind.SIGKILL in kinds(line)


# facebookresearch/fairseq#2442 (dev): torch.cuda.memory_summary() printed after the OOM
FAIRSEQ_SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|           CUDA OOMs: 1             |       cudaMalloc retries: 6          |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   26377 MB |   26988 MB |  767743 GB |  767717 GB |
|       from large pool |   25981 MB |   26595 MB |  738567 GB |  738542 GB |
"""


def test_memory_summary_table_counts_an_oom():
    ev = parse_text(FAIRSEQ_SUMMARY)
    assert ev.fact_value("memory_summary.retries") == 6
    assert ev.fact_value("memory_summary.allocated") == 26377 * 2**20
    (o,) = ev.ooms
    assert o.message_format == "memory_summary" and o.allocated_bytes == 26377 * 2**20


def test_memory_summary_without_an_oom_is_not_a_failure():
    ev = parse_text(FAIRSEQ_SUMMARY.replace("CUDA OOMs: 1", "CUDA OOMs: 0"))
    assert not ev.ooms


def test_memory_series_are_kept_per_rank():
    text = "".join(f"[rank0]: step {i} mem {3000 + 100 * i} MiB\n[rank1]: step {i} mem {1000 + 50 * i} MiB\n"
                   for i in range(4))
    assert parse_text(text).fact("cue.memory_growing") is not None


def test_memory_figures_with_thousands_separators():
    text = "".join(f"epoch {i}: GPU memory used {v} MiB\n" for i, v in enumerate(("1,234", "1,890", "2,512", "3,020")))
    assert parse_text(text).fact("cue.memory_growing") is not None


# a traceback behind prefixes that no launcher rule strips (a pdsh host, Ray's "(pid=N)", a logger's stamp, and
# srun's "0: " before indented frame lines): the frames still reach the OOM
def _prefixed_oom(prefix: str) -> str:
    body = ["Traceback (most recent call last):",
            '  File "/x/train.py", line 10, in <module>',
            "    loss.backward()",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.00 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
            "1.00 GiB is reserved by PyTorch but unallocated."]
    return "\n".join(prefix + line for line in body) + "\n"


def test_traceback_frames_behind_unknown_prefixes():
    for prefix in ("node-12: ", "(pid=2345) ", "2024-01-01 10:00:00,123 - ERROR - ", "trainer-1  | ", "0: "):
        (o,) = parse_text(_prefixed_oom(prefix)).ooms
        assert [f.name for f in o.stack.frames] == ["<module>"], prefix
        assert o.stack.frames[0].code == "loss.backward()", prefix


def test_prefixed_settings_assertion_is_still_read():
    text = ("node-3: Traceback (most recent call last):\n"
            'node-3:   File "/x/deepspeed/runtime/engine.py", line 1000, in _configure_optimizer\n'
            "node-3:     assert self.zero_optimization_stage() == 3\n"
            "node-3: AssertionError: offload requires stage 3\n")
    assert FailureKind.CONFIG_VALIDATION in kinds(text)


# pytorch/pytorch#7343 (dev): a REPL session, each query's value on the next line
def test_repl_memory_queries_that_rise():
    text = (">>> print(torch.cuda.memory_allocated())\n865280\n>>> x = torch.randn(1, device='cuda')\n"
            ">>> del x, y\n>>> gc.collect()\n0\n>>> print(torch.cuda.memory_allocated())\n867328\n")
    assert parse_text(text).fact("cue.memory_growing") is not None


def test_repl_memory_queries_that_stay_flat():
    text = ">>> print(torch.cuda.memory_allocated())\n865280\n>>> print(torch.cuda.memory_allocated())\n865280\n"
    assert parse_text(text).fact("cue.memory_growing") is None


# older NCCL and driver wordings of a device allocation failure
def test_older_nccl_warn_allocation_failures():
    for line in ("node1:1234:5678 [0] NCCL WARN Call to cudaMalloc failed : 2",
                 "node1:1234:5678 [0] NCCL WARN Cuda failure 'cudaErrorMemoryAllocation'",
                 "node1:1234:5678 [0] NCCL WARN Cuda failure 'CUDA_ERROR_OUT_OF_MEMORY'",
                 "NCCL WARN Call to cudaMalloc failed : 2"):
        assert FailureKind.NCCL_CUDA_OOM in kinds(line + "\n"), line


def test_evaluation_loop_frames_are_an_evaluation_cue():
    text = ('Traceback (most recent call last):\n  File "/x/pytorch_lightning/loops/epoch.py", line 5, in _run\n'
            '    output = self.trainer.validation_step(batch)\n'
            '  File "/x/model.py", line 40, in validation_step\n    out = self(x)\n')
    assert parse_text(text).fact("cue.evaluation") is not None


# netease-youdao/QAnything#289 (dev): a serving engine refuses a combination of settings and names them
def test_settings_advice_valueerror_is_a_config_error():
    line = ("ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be "
            "stored in KV cache (3792). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine.")
    assert FailureKind.CONFIG_VALIDATION in kinds(line)


# vllm-project/vllm#2447 (dev): the same advice about an allocation that failed stays a memory failure
def test_memory_advice_valueerror_stays_an_oom():
    line = ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.")
    ev = parse_text(line)
    assert ev.ooms and FailureKind.CONFIG_VALIDATION not in {f.kind for f in ev.failures}


# MAGICS-LAB/DNABERT_2#134 (dev): a Jupyter (old IPython) traceback
DNABERT = """\
---------------------------------------------------------------------------
OutOfMemoryError                          Traceback (most recent call last)
<ipython-input-13-941869335d74> in <cell line: 1>()
----> 1 predictions = trainer.predict(test_dataset)
      2 

/usr/local/lib/python3.10/dist-packages/transformers/trainer.py in predict(self, test_dataset, ignore_keys, metric_key_prefix)
   3007         eval_loop = self.prediction_loop if self.args.use_legacy_prediction_loop else self.evaluation_loop
-> 3008         output = eval_loop(
   3009             test_dataloader, description="Prediction", ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
   3010         )

/usr/local/lib/python3.10/dist-packages/transformers/trainer.py in evaluation_loop(self, dataloader, description)
-> 3140                 preds_host = logits if preds_host is None else nested_concat(preds_host, logits)
   3141             self.control = self.callback_handler.on_prediction_step(args, self.state, self.control)

OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.50 GiB already allocated; 1.00 GiB free; 14.00 GiB reserved in total by PyTorch)
"""


def test_old_ipython_traceback_frames():
    (o,) = parse_text(DNABERT).ooms
    assert [f.name for f in o.stack.frames] == ["<cell line: 1>", "predict", "evaluation_loop"]
    assert o.stack.frames[-1].line == 3140 and o.stack.frames[-1].code.startswith("preds_host = ")


def test_new_ipython_traceback_frames():
    text = ("OutOfMemoryError                          Traceback (most recent call last)\n"
            "Cell In[5], line 3\n      1 x = torch.randn(10)\n----> 3 y = model(x)\n\n"
            "File ~/lib/python3.10/site-packages/torch/nn/modules/module.py:1501, in Module._call_impl(self, *args)\n"
            "-> 1501     return forward_call(*args, **kwargs)\n\n"
            + DNABERT.splitlines()[-1] + "\n")
    (o,) = parse_text(text).ooms
    assert [f.filename for f in o.stack.frames][0] == "Cell In[5]" and o.stack.frames[0].code == "y = model(x)"
    assert len(o.stack.frames) == 2


# huggingface/trl#1626 (dev): the device index left out of "GPU  has a total capacity"
def test_new_message_without_device_index():
    line = ("CUDA out of memory. Tried to allocate 20.39 GiB. GPU  has a total capacity of 22.19 GiB of which 11.72 GiB "
            "is free. Process 3141 has 10.46 GiB memory in use. Of the allocated memory 7.48 GiB is allocated by "
            "PyTorch, and 2.43 GiB is reserved by PyTorch but unallocated.")
    (o,) = parse_text(line).ooms
    assert o.capacity_bytes is not None and o.device is None and o.reserved_unallocated_bytes is not None


# wtdcode/vllm-backport#94 (dev): an allocator's own byte counts
def test_bytes_free_total_allocation_failure():
    (o,) = parse_text("while trying to allocate 671088640 bytes (free: 513736704, total: 85095874560).\n").ooms
    assert (o.requested_bytes, o.free_bytes, o.capacity_bytes) == (671088640, 513736704, 85095874560)


# pcyin/tranX#41 (dev): the kernel's OOM killer is a host failure, not a GPU OOM without numbers
def test_kernel_oom_killer_line_is_not_a_gpu_oom():
    ev = parse_text("[2059991.491542] Out of memory: Killed process 25315 (python3) total-vm:53312244kB\n")
    assert not ev.ooms and FailureKind.HOST_OOM_KILL in {f.kind for f in ev.failures}


# other accelerators' caching-allocator messages: torch_npu (with its extra "current active" clause), XPU
def test_npu_and_xpu_old_style_messages():
    npu = ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity; 57.05 GiB "
           "already allocated; 57.05 GiB current active; 1.16 GiB free; 58.50 GiB reserved in total by PyTorch)")
    (o,) = parse_text(npu).ooms
    assert o.device == 0 and o.capacity_bytes and o.allocated_bytes and o.reserved_unallocated_bytes
    xpu = ("RuntimeError: XPU out of memory. Tried to allocate 2.00 GiB (XPU 1; 15.11 GiB total capacity; 12.00 GiB "
           "already allocated; 1.00 GiB free; 13.00 GiB reserved in total by PyTorch)")
    (o,) = parse_text(xpu).ooms
    assert o.device == 1 and not o.truncated


def test_paddle_out_of_memory():
    line = ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 256.000244MB memory on GPU 0, "
            "15.719055GB memory has been allocated and available memory is only 3.625000MB.")
    (o,) = parse_text(line).ooms
    assert o.requested_bytes and o.allocated_bytes and o.free_bytes


# facebookresearch/detectron2#214 (dev): detectron2's event lines carry "max_mem: 2996M" (no "B")
D2 = ("[11/01 19:18:23 d2.utils.events]: eta: 4:58:26  iter: {i}  total_loss: 1.619  loss_cls: 1.110  "
      "time: 0.1999  data_time: 0.0032  lr: 0.006593  max_mem: {m}M\n")


def test_detectron2_max_mem_series():
    assert parse_text("".join(D2.format(i=659 + 20 * k, m=2996) for k in range(7))).fact("cue.memory_growing") is None
    assert parse_text("".join(D2.format(i=659 + 20 * k, m=2996 + 300 * k) for k in range(7))).fact(
        "cue.memory_growing") is not None


# HF's DeepSpeed integration raises ValueError("\nPlease correct the following DeepSpeed config values ..."):
# the exception line is "ValueError: " and the message follows
def test_exception_message_on_the_following_lines():
    text = ("ValueError: \nPlease correct the following DeepSpeed config values that mismatch TrainingArguments "
            "values:\n- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=8\n\n")
    fails = parse_text(text).failures
    assert [f.kind for f in fails] == [FailureKind.CONFIG_VALIDATION]
    assert "mismatch" in fails[0].message


def test_memory_series_in_bytes_and_host_figures():
    for shape in ("after iteration {i}: {v} bytes allocated", "allocated={v}"):
        text = "".join(shape.format(i=i, v=1000 + 100 * i) + "\n" for i in range(5))
        assert parse_text(text).fact("cue.memory_growing") is not None, shape
    for shape in ("RAM: {v}%", "rss {v}"):              # the host's memory: its own cue (host_oom, not leak)
        text = "".join(shape.format(i=i, v=1000 + 100 * i) + "\n" for i in range(5))
        ev = parse_text(text)
        assert ev.fact("cue.host_memory_growing") is not None and ev.fact("cue.memory_growing") is None, shape
    assert parse_text("".join(f"param count {1000 + i}\n" for i in range(5))).fact("cue.memory_growing") is None


def test_incompatible_loader_options_are_a_config_error():
    line = ("ValueError: You can't pass `load_in_4bit`or `load_in_8bit` as a kwarg when passing `quantization_config` "
            "argument at the same time.")
    assert FailureKind.CONFIG_VALIDATION in kinds(line)
    assert kinds("ValueError: too many values to unpack (expected 2)\n") == {FailureKind.PYTHON_EXCEPTION}


# Host memory through Python and numpy (all from dev cases): numpy's array allocation, a bare MemoryError
# https://github.com/vwxyzjn/cleanrl/issues/453
NUMPY_OOM = ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 26.3 GiB for an array with shape (1000000, 1, "
             "4, 84, 84) and data type uint8\n")
# https://github.com/tambetm/simple_dqn/issues/14
BARE_MEMORY_ERROR = ("    self.screens = np.empty((self.size, args.screen_height, args.screen_width), dtype = np.uint8)\n"
                     "MemoryError\n")


def test_numpy_and_python_memory_errors_are_host_ooms():
    from oompost.model import OomKind

    (o,) = parse_text(NUMPY_OOM).ooms
    assert o.kind is OomKind.HOST and round(o.requested_bytes / 2**30, 1) == 26.3
    (o,) = parse_text(BARE_MEMORY_ERROR).ooms
    assert o.kind is OomKind.HOST and o.requested_bytes is None
    # torch's and Ray's OutOfMemoryError end in "MemoryError" but are neither
    assert parse_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n").ooms[0].kind \
        is not OomKind.HOST


# https://github.com/Comfy-Org/ComfyUI/issues/8984 (dev): Apple MPS states its allocation, the rest and its limit
MPS_OOM = ("MPS backend out of memory (MPS allocated: 15.72 GiB, other allocations: 2.41 MiB, max allowed: 18.13 GiB). "
           "Tried to allocate 5.81 GiB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit "
           "for memory allocations (may cause system failure).\n")


def test_mps_message_figures():
    (o,) = parse_text(MPS_OOM).ooms
    assert o.message_format == "MPS"
    assert [round(x / 2**30, 2) for x in (o.requested_bytes, o.allocated_bytes, o.capacity_bytes)] == [5.81, 15.72, 18.13]
    assert round(o.free_bytes / 2**30, 2) == 2.41          # max allowed - allocated - other allocations


# https://github.com/open-mmlab/mmsegmentation/issues/308 (dev): a zh_CN shell's "Killed" glued to a progress bar
ZH_KILLED = ("2020-12-18 19:56:07,472 - mmseg - INFO - Saving checkpoint at 4000 iterations [>>>>>>>>>>>>>>>>>>>>>>>>>>>>>"
             ">>>>>>>>>>>> ] 3217/3849, 4.0 task/s, elapsed: 799s, ETA: 157s已杀死\n")
# https://github.com/microsoft/SpareNet/issues/3 (dev): the caching host allocator is pinned host memory
THC_HOST = ("> THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1616554800319/work/aten/src/THC/"
            "THCCachingHostAllocator.cpp line=278 error=2 : out of memory\n")


def test_killed_glued_to_a_keras_progress_line_is_a_kill_but_not_inside_a_word():
    # keras-team/keras#3476 (test fold; the kill was scored as missed on arrival): the progress bar is redrawn
    # with "\r", so the shell's message lands on its line: "... - ETA: 365s - loss: 2.1371Killed"
    from oompost.model import FailureKind

    line = "165376/296960 [===============>..............] - ETA: 365s - loss: 2.1371Killed\n"
    assert [f.kind for f in parse_text(line).failures] == [FailureKind.KILLED]
    assert not parse_text("pod status: NotKilled\n").failures


@pytest.mark.parametrize("case", ["NVIDIA__nccl__525", "facebookresearch__detectron2__384",
                                  # fastai/docker-containers#21 (dev): the loader's bus-error message wrapped over
                                  # three lines by the paste ("signal: Bus" / "error. ... out of shared" / "memory.")
                                  "fastai__docker-containers__21"])
def test_a_full_dev_shm_under_nccl_and_a_loader_worker_that_exited_are_host_memory(case):
    # NVIDIA/nccl#525 (dev, host_oom): "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on
    # device" in a Kubeflow pod; facebookresearch/detectron2#384 (dev, host_oom): "RuntimeError: DataLoader worker
    # (pid(s) 25) exited unexpectedly" in Docker, fixed by --shm-size
    import oompost

    r = oompost.analyze([str(CORPUS / case / "log.txt")])
    assert r.cause == "host_oom" and r.primary.sub_cause == "shm"
    keys = [f.key for f in r.primary.fixes]
    assert keys[0] == "docker run --shm-size"
    assert ("NCCL_SHM_DISABLE" in keys) is (case == "NVIDIA__nccl__525")


def test_a_cuda_error_where_the_statement_allocates_pinned_memory_is_the_hosts():
    # FMInference/FlexLLMGen#47 (dev, host_oom): "cpu_buf = torch.empty((1 * GB,), dtype=torch.float16,
    # pin_memory=True)" then "RuntimeError: CUDA error: out of memory" (WSL2 caps page-locked memory)
    import oompost

    r = oompost.analyze([str(CORPUS / "FMInference__FlexLLMGen__47" / "log.txt")])
    assert r.cause == "host_oom" and r.primary.sub_cause == "pinned"


def test_ascends_hccl_process_group_error_is_a_distributed_failure_with_its_own_fixes():
    # hiyouga/LlamaFactory#3839 (dev, nccl_error): "RuntimeError: [ERROR] HCCL error in:
    # torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64" at the first barrier, no memory failure anywhere
    import oompost

    r = oompost.analyze([str(CORPUS / "hiyouga__LlamaFactory__3839" / "log.txt")])
    assert r.cause == "nccl_error" and r.primary.sub_cause == "hccl"
    keys = [f.key for f in r.primary.fixes]
    assert keys[0] == "leftover processes on the NPUs" and not any(k.startswith("TORCH_NCCL") for k in keys)


def test_an_excerpt_cut_inside_a_traceback_is_unknown_and_asks_for_the_exception_line():
    # NVIDIA-NeMo/RL#2859 (dev, activation_spike by its thread): the paste stops at "val = val.float()" in
    # Megatron's float_conversion, before the OutOfMemoryError line -- DESIGN.md: no failure in the inputs, unknown
    import oompost

    r = oompost.analyze([str(CORPUS / "NVIDIA-NeMo__RL__2859" / "log.txt")])
    assert r.cause == "unknown"
    assert "module.py:373 in float_conversion: val = val.float()" in r.primary.detail
    assert r.primary.detail.startswith("The inputs end inside a Python traceback")
    assert r.primary.fixes[0].key == "the lines after the traceback's last frame"
    assert "line 373, in float_conversion" in r.primary.evidence[0].text
    # a closed traceback leaves no such fact
    ev = parse_text('Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n    f()\n'
                    "ValueError: bad\n")
    assert ev.fact("traceback.cut") is None


def test_localised_killed_and_the_caching_host_allocator_are_host_failures():
    from oompost.model import FailureKind

    assert [f.kind for f in parse_text(ZH_KILLED).failures] == [FailureKind.KILLED]
    ev = parse_text(THC_HOST)
    assert [f.kind for f in ev.failures] == [FailureKind.PINNED_HOST] and not ev.ooms


# https://github.com/fwilliams/scalable-pytorch-sinkhorn/issues/2 (dev): KeOps' driver-API allocation failure
KEOPS = "[KeOps] error: cuMemAlloc(&p_data, sizeof(TYPE *) * nargs) failed with error CUDA_ERROR_OUT_OF_MEMORY  \n"


def test_the_driver_apis_out_of_memory_is_a_gpu_oom():
    from oompost.model import OomKind

    (o,) = parse_text(KEOPS).ooms
    assert o.kind is OomKind.OTHER and o.message_format == "unparsed"


# https://github.com/NVlabs/instant-ngp/issues/393 (dev): tiny-cuda-nn's cudaMalloc failure, its pasted line cut
# inside the last word; the same line whole, and one that is only the start of the word, for contrast
TCNN = ("13:54:28 ERROR    Uncaught exception: Could not allocate memory: C:\\x\\tiny-cuda-nn/gpu_memory.h:112 "
        "cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with error out of memor\n")


def test_a_cudamalloc_failure_cut_inside_its_last_word_is_still_a_gpu_oom():
    from oompost.model import OomKind

    (o,) = parse_text(TCNN).ooms
    assert o.kind is OomKind.OTHER and o.ref.line == 1
    assert parse_text(TCNN.replace("out of memor", "out of memory")).ooms
    assert not parse_text(TCNN.replace("out of memor", "out of m")).ooms


# https://github.com/bghira/SimpleTuner/issues/3176 (dev): the caching allocator's expandable-segment warning is the
# only memory line when AOTInductor-compiled code fails the allocation
EXPANDABLE_WARN = ("[W831 10:32:25.255074645 CUDACachingAllocator.cpp:508] expandable_segments: memory mapping failed "
                   "with OOM on device 0 while trying to map 20971520 bytes (free: 15663104, total: 33671348224).\n")
# https://github.com/facebookresearch/faiss/issues/648 and #128 (dev): Faiss's own assertions on a failed cudaMalloc
FAISS = ("Faiss assertion 'cudaMalloc(p, size) == cudaSuccess' failed in void faiss::gpu::allocMemorySpace("
         "faiss::gpu::MemorySpace, void**, size_t) at utils/MemorySpace.cpp:20; details: Failed to cudaMalloc "
         "16000000000 bytes\n")
FAISS_TEMP = ("Faiss assertion err == cudaSuccess failed in void faiss::gpu::StackDeviceMemory::Stack::returnAlloc("
              "char*, size_t, cudaStream_t) at utils/StackDeviceMemory.cpp:136Aborted (core dumped)\n")
# https://github.com/pytorch/xla/issues/1735 (dev): the TPU runtime cannot reserve a compiled program's memory
TPU = ("RuntimeError: Resource exhausted: From /job:tpu_worker/replica:0/task:0:\n"
       "Attempting to reserve 3.95G at the bottom of memory. That was not possible. There are 1.92G free, 0B "
       "reserved, and 1.92G reservable.; \n")


def test_other_allocators_own_failure_lines_are_gpu_ooms_with_their_figures():
    from oompost.model import OomKind

    (o,) = parse_text(EXPANDABLE_WARN).ooms
    assert (o.kind, o.requested_bytes, o.free_bytes, o.capacity_bytes, o.device) == (
        OomKind.CACHING_ALLOCATOR, 20971520, 15663104, 33671348224, 0)
    (o,) = parse_text(FAISS).ooms
    assert (o.message_format, o.requested_bytes) == ("faiss", 16000000000)
    (o,) = parse_text(FAISS_TEMP).ooms
    assert o.message_format == "faiss" and o.requested_bytes is None
    (o,) = parse_text(TPU).ooms
    assert abs(o.requested_bytes - 3.95 * 2**30) < 2**20 and abs(o.free_bytes - 1.92 * 2**30) < 2**20
    # Faiss's warning that it fell back to cudaMalloc is not a failure
    assert not parse_text("WARN: increase temp memory to avoid cudaMalloc, or decrease query/add size (alloc "
                          "1280000000 B, highwater 1280000000 B)\n").ooms


def test_of_two_cut_failure_lines_the_one_naming_its_request_is_the_verdicts_oom():
    # faiss#648 (dev) posts the temporary-memory assertion (no size) before the cudaMalloc line with the size:
    # both are truncated events, and the one that quotes 16000000000 bytes is the one the report must quote
    from oompost.analysis.context import build_context

    ev = parse_text(FAISS_TEMP + "\n" + FAISS)
    assert [o.requested_bytes for o in ev.ooms] == [None, 16000000000]
    assert all(o.truncated for o in ev.ooms)
    assert build_context(ev).oom.requested_bytes == 16000000000


# ADLab-AutoDrive/BEVFusion#28 (dev): spconv's CUDA macro prints only the runtime's error code (2 is
# cudaErrorMemoryAllocation); NVIDIA-ISAAC-ROS/isaac_ros_nvblox#30 (dev): "CUDA error = 2 at ..."
SPCONV = ("RuntimeError: mmdet3d/ops/spconv/src/indice_cuda.cu 124\n"
          "cuda execution failed with error 2\n")
NVBLOX = ("CUDA error = 2 at /home/nvidia/zed_ws/src/isaac_ros_nvblox/nvblox/nvblox/include/nvblox/core/impl/"
          "unified_vector_impl.h:209 'cudaMalloc(&new_buffer, sizeof(T) * capacity)'. Error string: out of memory.\n")


def test_a_cuda_extensions_bare_error_code_2_is_a_gpu_allocation_failure():
    for text in (SPCONV, NVBLOX):
        (o,) = parse_text(text).ooms
        assert (o.kind, o.message_format) == (OomKind.CUDA_ERROR, "CUDA error 2")
    # another code is not, nor (a line written here, not captured) NCCL's code 2, a system error, nor a
    # connection's "error code 2" (Ray, in TinyZero#30's real log)
    assert not parse_text(SPCONV.replace("error 2", "error 20")).ooms
    assert not parse_text("RuntimeError: NCCL error 2: cuda unhandled system error\n").ooms
    ray = (Path(__file__).resolve().parent / "corpus/Jiayi-Pan__TinyZero__30/log.txt").read_text()
    assert "connection error code 2" in ray
    assert not [o for o in parse_text(ray).ooms if o.message_format == "CUDA error 2"]


# InternLM/lmdeploy#1593 and #998 (dev): TurboMind's CUDA runtime error names the source file that failed
TM_WEIGHTS = "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32 \n"
TM_BUFFERS = "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/allocator.h:231 \n"


def test_turbominds_runtime_error_names_its_source_file_and_deviceMalloc_is_the_weights(tmp_path):
    from oompost.analysis.context import build_context
    from oompost.analysis.phase import Phase

    (o,) = parse_text(TM_WEIGHTS).ooms
    assert o.message_format == "turbomind" and o.stack.frames[0].filename.endswith("utils/memory_utils.cu")
    ctx = build_context(parse_text(TM_WEIGHTS))
    assert ctx.phase.phase is Phase.MODEL_INIT
    # only an inference server prints it: its fixes are a server's (tensor parallelism, quantisation), not LoRA's
    assert ctx.is_serving
    log = tmp_path / "serve.log"
    log.write_text(TM_WEIGHTS)
    keys = [f.key for f in oompost.analyze(log).findings[0].fixes]
    assert "--tensor-parallel-size" in keys and "lora_r" not in keys, keys
    (o,) = parse_text(TM_BUFFERS).ooms
    assert o.stack.frames[0].line == 231
    assert build_context(parse_text(TM_BUFFERS)).phase.phase is not Phase.MODEL_INIT


def test_onnx_runtimes_arena_limit_and_a_jetsons_nvmap_enomem_are_gpu_allocation_failures():
    # infiniflow/ragflow#4826 and asierarranz/Cool_Demos#4 (dev, merged in the eighteenth session): both were
    # 'unknown' on arrival
    corpus = Path(__file__).resolve().parent / "corpus"
    (o,) = parse_text((corpus / "infiniflow__ragflow__4826/log.txt").read_text()).ooms
    assert (o.message_format, o.requested_bytes, o.free_bytes) == ("onnxruntime", 5505024, 0)
    assert o.stack.frames[0].name == "/model.23/dfl/Softmax"
    (o,) = parse_text((corpus / "asierarranz__Cool_Demos__4/log.txt").read_text()).ooms
    assert o.message_format == "nvmap" and o.requested_bytes is None      # 1075072515 is a tag, not a size
    # EINVAL is not memory (a line written here, not captured: no thread in the corpus shows one)
    assert not parse_text("NvMapMemAllocInternalTagged: 1075072515 error 22\n").ooms
    for case in ("infiniflow__ragflow__4826", "asierarranz__Cool_Demos__4"):
        r = oompost.analyze(corpus / case / "log.txt")
        said = " ".join(f.key + " " + str(f.value) for f in r.primary.fixes)
        assert r.cause != "unknown" and "gradient_checkpointing" not in said, (case, said)
        assert r.rerun is None or not r.rerun.trainer_args


def test_tensorflows_refused_pool_reservation_is_a_set_up_mistake():
    # ROCm/tensorflow-upstream#82 and horovod/horovod#1350 (dev): TensorFlow's stream executor refuses the BFC
    # pool's first reservation and retries about 10 % smaller ("failed to allocate 7.35G (7889485824 bytes) from
    # device: hipError_t(1002)", then 6.61G, 5.95G): the card is held by another process or rank (CFG005)
    corpus = Path(__file__).resolve().parent / "corpus"
    ev = parse_text((corpus / "ROCm__tensorflow-upstream__82/log.txt").read_text())
    assert [o.requested_bytes for o in ev.ooms] == [7889485824, 7100536832, 6390482944]
    assert {o.message_format for o in ev.ooms} == {"tensorflow"}
    for case in ("ROCm__tensorflow-upstream__82", "horovod__horovod__1350"):
        r = oompost.analyze(corpus / case / "log.txt")
        assert (r.cause, r.primary.code) == ("config_error", "CFG005"), case
        keys = [f.key for f in r.primary.fixes]
        assert "CUDA_VISIBLE_DEVICES" in keys and "gradient_checkpointing" not in keys
    # one refused allocation is not a retried reservation (a run with memory growth on can be refused mid-run:
    # WorldModelsExperiments#25, dev, logs one), and a pinned host allocation ("failed to alloc 1073741824 bytes on
    # host: CUDA_ERROR_OUT_OF_MEMORY", jina-ai/dalle-flow#57, dev) is not a device one
    from oompost.analysis.context import build_context
    from oompost.classify.rules.tf_pool_refused import TfPoolRefused

    one = parse_text((corpus / "hardmaru__WorldModelsExperiments__25/log.txt").read_text())
    assert [o.request_scope for o in one.ooms if o.message_format == "tensorflow"] == ["pool"]
    assert TfPoolRefused().evaluate(build_context(one)) == []
    host = parse_text((corpus / "jina-ai__dalle-flow__57/log.txt").read_text())
    assert any(f.kind is FailureKind.PINNED_HOST and "on host:" in f.ref.text for f in host.failures)
    assert not [o for o in host.ooms if o.request_scope == "pool"]


def test_a_json_error_response_is_read_as_text(tmp_path):
    # mudler/LocalAI#2126 (dev): the server's JSON error response carries the OOM message; it was set aside as "a
    # JSON object that is not a DeepSpeed config" and the analysis failed with nothing usable
    log = Path(__file__).resolve().parent / "corpus/mudler__LocalAI__2126/log.txt"
    r = oompost.analyze(log)
    assert r.oom is not None and r.oom.requested_bytes == 46 * 2**20


def test_the_expandable_segment_warning_yields_to_the_exception_after_it():
    # the exception line is written here in PyTorch >= 2.2's format (no captured log holds both lines yet: the GPU
    # machine could not be had when this was written); what is tested is that a complete message wins
    text = EXPANDABLE_WARN + ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
                              "total capacity of 31.36 GiB of which 14.94 MiB is free. Including non-PyTorch memory, "
                              "this process has 31.34 GiB memory in use. Of the allocated memory 30.10 GiB is "
                              "allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.\n")
    from oompost.analysis.context import build_context

    ctx = build_context(parse_text(text))
    assert ctx.oom.message_format != "expandable_segments map" and ctx.oom.allocated_bytes is not None


# https://github.com/huggingface/trl/issues/3934 (dev): the watchdog's lines wrapped mid-word by the paste
WRAPPED_WATCHDOG = (
    "[rank7]:[E821 16:40:45.240894715 ProcessGroupNCCL.cpp:632] [Rank 7] Watchdog caught colle\n"
    "ctive operation timeout: WorkNCCL(SeqNum=5701784, OpType=_ALLGATHER_BASE, NumelIn=6288000, NumelOut=50304000, "
    "Timeout(ms)=1800000) ran for 1800006 milliseconds before\n"
    " timing out.\n")


def test_a_watchdog_timeout_wrapped_mid_word_is_still_a_timeout():
    assert FailureKind.NCCL_TIMEOUT in kinds(WRAPPED_WATCHDOG)
    status = ("[rank7]:[E821 16:40:45.241026910 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 7]  "
              "failure detected by watchdog at work sequence id: 5701784 PG statu\n")
    assert FailureKind.NCCL_TIMEOUT in kinds(status)
    assert FailureKind.NCCL_TIMEOUT not in kinds("[rank0]: training ran for 120 milliseconds per step\n")


# EleutherAI/gpt-neox#1166: DeepSpeed's assertion names the setting to add; the fix is that setting
def test_an_error_that_asks_for_a_setting_is_a_config_error_with_that_fix():
    from pathlib import Path

    import oompost

    log = Path(__file__).parent / "corpus" / "EleutherAI__gpt-neox__1166" / "log.txt"
    assert FailureKind.CONFIG_VALIDATION in kinds(log.read_text())
    r = oompost.analyze([str(log)])
    assert r.cause == "config_error"
    fix = r.primary.fixes[0]
    assert (fix.key, fix.value) == ("zero_allow_untested_optimizer", True)


def test_an_oom_message_that_says_please_set_is_still_an_oom():
    # the config pattern never claims a line that reads as an out-of-memory error
    line = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB. Please set max_split_size_mb: the "
            "configuration file is ignored")       # arranged: an OOM line holding the config words
    assert FailureKind.CONFIG_VALIDATION not in kinds(line)


# AgentR1/Agent-R1#33 (dev): a Ray worker gone under Kubernetes with no exit code
def test_a_ray_worker_past_its_k8s_pod_memory_limit_is_a_host_oom_kill():
    line = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
            "Worker exits unexpectedly. Worker exits with an exit code None. The worker may have exceeded K8s pod "
            "memory limits.")
    assert FailureKind.HOST_OOM_KILL in kinds(line)


# neuralmagic/sparseml#152 (dev): the poster replaced the pid with a placeholder
def test_a_dataloader_worker_kill_with_a_placeholder_pid():
    assert FailureKind.KILLED in kinds("RuntimeError: DataLoader worker (pid <worker_pid>) is killed by signal: Killed.")


# dhcode-cpp/X-R1#22 (dev): TRL's GRPO batch check, quoted with "> "
def test_a_batch_divisibility_valueerror_is_a_config_error():
    line = ("> ValueError: The global train batch size (3 x 1) must be evenly divisible by the number of generations "
            "per prompt (4). Given the current train batch size, the valid values for the number of generations "
            "are: [3].")
    assert FailureKind.CONFIG_VALIDATION in kinds(line)


# ml-explore/mlx-examples#70 (dev): Apple MLX's Metal allocator
def test_mlx_unable_to_allocate_is_a_device_oom():
    (o,) = parse_text("`libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc_or_wait] "
                      "Unable to allocate 12 bytes.`\n").ooms
    assert o.message_format == "mlx" and o.requested_bytes == 12


# pytorch/pytorch#62066 (dev): host RAM printed every step, rising, and no failure line
def test_a_rising_host_ram_series_is_host_memory_not_a_gpu_leak():
    import oompost

    path = CORPUS / "pytorch__pytorch__62066" / "log.txt"
    ev = parse_text(path.read_text())
    assert ev.fact("cue.host_memory_growing") is not None and ev.fact("cue.memory_growing") is None
    assert oompost.analyze([str(path)]).cause == "host_oom"


# huggingface/peft#1703 (dev) without its "Last error:" header line: the CUDA failure under the NCCL error
def test_nccls_cuda_failure_text_counts_without_its_last_error_header():
    lines = (CORPUS / "huggingface__peft__1703" / "log.txt").read_text().splitlines(keepends=True)
    assert lines[6].startswith("Last error:")
    assert FailureKind.NCCL_CUDA_OOM in kinds("".join(lines[:6] + lines[7:]))


# open-mmlab/mmdetection#2129 (dev): a second job on the host took the rendezvous port
def test_a_rendezvous_port_in_use_is_a_config_error_with_its_fix():
    import oompost

    path = CORPUS / "open-mmlab__mmdetection__2129" / "log.txt"
    assert FailureKind.CONFIG_VALIDATION in kinds(path.read_text())
    r = oompost.analyze([str(path)])
    assert r.cause == "config_error" and r.to_json()["fixes"][0]["key"] == "MASTER_PORT"


# kijai/ComfyUI-CogVideoXWrapper#26 (dev): ComfyUI shows cudaMallocAsync's message cut to "Allocation on device"
def test_a_cut_allocation_on_device_message_is_an_oom():
    path = CORPUS / "kijai__ComfyUI-CogVideoXWrapper__26" / "log.txt"
    assert "\nAllocation on device\n" in path.read_text()
    (o,) = parse_text(path.read_text()).ooms
    assert o.message_format == "malloc_async" and o.truncated
    # Comfy-Org/ComfyUI#6176 (dev): the same cut message after the exception's name
    oo = parse_text((CORPUS / "Comfy-Org__ComfyUI__6176" / "log.txt").read_text()).ooms
    assert any(o.message_format == "malloc_async" for o in oo)


# vllm-project/vllm#2669 (dev): Ray's memory monitor killed the worker past its usage threshold
def test_rays_memory_threshold_kill_is_a_host_oom():
    import oompost

    path = CORPUS / "vllm-project__vllm__2669" / "log.txt"
    assert FailureKind.HOST_OOM_KILL in kinds(path.read_text())
    assert oompost.analyze([str(path)]).cause == "host_oom"


# PV-Lab/FTCP#8 (dev): Google Colab's notice that it restarted a runtime whose RAM ran out is the whole log
def test_colabs_session_crashed_notice_is_a_host_oom_kill_by_the_notebook():
    import oompost

    path = CORPUS / "PV-Lab__FTCP__8" / "log.txt"
    (f,) = [f for f in parse_text(path.read_text()).failures if f.kind is FailureKind.HOST_OOM_KILL]
    assert f.killer == "notebook"
    r = oompost.analyze([str(path)])
    assert r.cause == "host_oom"
    assert "notebook service restarted" in r.findings[0].detail and "rank" not in r.findings[0].detail
    assert "high-RAM runtime" in r.findings[0].fixes[0].key
    # a sentence about RAM that is no such notice stays out
    assert FailureKind.HOST_OOM_KILL not in kinds("we used all available RAM for the cache\n")


# deepspeedai/DeepSpeedExamples#86 (ZeRO-2's "already been reduced" is a RuntimeError) and
# tatsu-lab/alpaca_farm#63 (FSDP refusing quantized integer weights), both dev: settings that do not go together
@pytest.mark.parametrize("case", ["deepspeedai__DeepSpeedExamples__86", "tatsu-lab__alpaca_farm__63"])
def test_framework_refusals_of_a_setting_combination_are_config_errors(case):
    import oompost

    path = CORPUS / case / "log.txt"
    assert FailureKind.CONFIG_VALIDATION in kinds(path.read_text())
    assert oompost.analyze([str(path)]).cause == "config_error"


# graphdeco-inria/gaussian-splatting#587 (dev): "Tried to allocate 67109892.01 GiB" is no tensor, a corrupt size
def test_a_petabyte_request_is_a_corrupt_size_not_a_memory_cause():
    import oompost

    r = oompost.analyze([str(CORPUS / "graphdeco-inria__gaussian-splatting__587" / "log.txt")])
    assert r.cause == "config_error" and r.findings[0].code == "CFG004"
    assert "nvcc --version" in r.findings[0].settle[0] and "snapshot" not in " ".join(r.findings[0].settle)
    # ROCm/TheRock#4598 (dev): a large but real request (16 GiB on a 15.49 GiB card) is not
    r = oompost.analyze([str(CORPUS / "ROCm__TheRock__4598" / "log.txt")])
    assert r.oom is not None and r.oom.requested_bytes == 16 * 2**30
    assert "CFG004" not in {f.code for f in r.findings} and r.cause != "config_error"


# tests/heldout_captures/ (tutorial_loop.py, a real run): a logger line written straight after tqdm's last bar
# update, with its memory named in words ("memory allocated 7.61 GiB"), is a step reading
def test_a_memory_print_glued_to_a_tqdm_bar_is_read():
    path = (Path(__file__).parent / "heldout_captures" / "leak_gpt2_medium_eval_loss_graph_tutorial_t4_16g"
            / "run.log")
    raw = path.read_text()
    assert "s/it]12/04/2026" in raw
    got = {(m.step, round(m.allocated / 2**30, 2)) for m in parse_text(raw).memory if m.allocated}
    assert {(2, 7.61), (4, 11.18)} <= got


# hiyouga/LlamaFactory#8968 (dev): the launcher's CalledProcessError reports the child's exit, not a failure of its own
def test_a_launchers_called_process_error_is_not_a_python_exception():
    text = (CORPUS / "hiyouga__LlamaFactory__8968" / "log.txt").read_text()
    assert "subprocess.CalledProcessError: Command '['torchrun'" in text
    assert not any(f.kind is FailureKind.PYTHON_EXCEPTION and "CalledProcessError" in (f.exception or "")
                   or "returned non-zero exit status" in (f.message or "")
                   for f in parse_text(text).failures)


# Runtimes the eleventh collection's dev cases brought (each line verbatim from the thread named)
@pytest.mark.parametrize("case,kind,fmt,req", [
    # Windows' commit limit while torch loads its DLLs (English and Chinese text after the code): host memory
    ("prophesier__diff-svc__24", "host", "windows_pagefile", None),
    ("YYuX-1145__Bert-VITS2-Integration-package__5", "host", "windows_pagefile", None),
    # MLX asking Metal for one buffer above the device maximum
    ("lmstudio-ai__lmstudio-bug-tracker__2240", "other", "mlx", 48736917632),
    # the TPU runtime's older "Resource exhausted:" spelling
    ("pytorch__xla__2569", "other", "xla", int(180.59 * 2**20)),
    # Ascend's CANN runtime: a device-memory resource of 2 GiB
    ("vllm-project__vllm-ascend__3141", "other", "ascend", 2147483648),
    # JAX's PjRt client: "Resource exhausted: Failed to allocate request for 128.00MiB (134217728B) on device
    # ordinal 0" (kingoflolz/mesh-transformer-jax#90, dev)
    ("kingoflolz__mesh-transformer-jax__90", "other", "xla", 134217728),
])
def test_other_runtimes_device_and_host_ooms(case, kind, fmt, req):
    oo = parse_text((CORPUS / case / "log.txt").read_text()).ooms
    o = next(o for o in oo if o.message_format == fmt)
    assert o.kind.value == kind
    assert req is None or abs(o.requested_bytes - req) <= 2**20


@pytest.mark.parametrize("case,kind", [
    ("deepseek-ai__DeepEP__157", FailureKind.NCCL_CUDA_OOM),       # NVSHMEM's heap: cuMemCreate status 2
    ("vllm-project__vllm-ascend__486", FailureKind.NCCL_OTHER),     # HCCL's all-reduce failing (error code 6)
    ("NVIDIA__ai-cloud-validation__643", FailureKind.SHM),          # UCX's shared-memory receive FIFO
    ("NVIDIA__nccl__2363", FailureKind.NCCL_CUDA_OOM),             # "Failed to CUDA calloc" without its WARN prefix
    ("vllm-project__vllm-ascend__3141", FailureKind.NCCL_CUDA_OOM),  # HCCL's communication resources
    ("NVIDIA__nccl__33", FailureKind.NCCL_CUDA_OOM),               # NCCL 1.x: "failed to allocate ... device buffer"
    ("vllm-project__vllm-ascend__2754", FailureKind.NCCL_CUDA_OOM),  # HCCL's queue pairs: resource[qp] exhausted
])
def test_communication_libraries_failures(case, kind):
    assert kind in kinds((CORPUS / case / "log.txt").read_text())


# NVIDIA/nccl#2363 and vllm-project/vllm-ascend#3141 (dev): a communication library out of device memory is a
# communication buffer, also when the device runtime reported the same failure a line before (Ascend's CANN)
@pytest.mark.parametrize("case", ["NVIDIA__nccl__2363", "vllm-project__vllm-ascend__3141",
                                  "vllm-project__vllm-ascend__2754"])
def test_a_communication_librarys_allocation_is_a_comm_buffer(case):
    import oompost

    r = oompost.analyze([str(CORPUS / case / "log.txt")])
    assert r.cause == "comm_buffer" and any(f.code == "COMM001" for f in r.findings)


# The twelfth collection's dev cases (each line verbatim from the thread named in its case.json)
@pytest.mark.parametrize("case,kind", [
    # JAX's coordination service at multi-host start-up: a barrier, GetKeyValue or RegisterTask timing out
    ("AI-Hypercomputer__gpu-recipes__2", FailureKind.NCCL_TIMEOUT),
    ("EnzymeAD__Enzyme-JAX__623", FailureKind.NCCL_TIMEOUT),
    ("jax-ml__jax__35905", FailureKind.NCCL_TIMEOUT),
    ("ayaka14732__llama-2-jax__20", FailureKind.NCCL_TIMEOUT),
    # Slurm refusing the request or failing to launch the step
    ("meta-pytorch__torchforge__590", FailureKind.CONFIG_VALIDATION),
    ("ai4d-iasc__trixie__58", FailureKind.CONFIG_VALIDATION),
    # the kubelet evicting the pod: "The node was low on resource: memory."
    ("kubeflow__kubeflow__1261", FailureKind.HOST_OOM_KILL),
])
def test_schedulers_and_coordination_services(case, kind):
    assert kind in kinds((CORPUS / case / "log.txt").read_text())


def test_a_coordination_timeout_and_a_refused_job_say_what_they_are():
    import oompost

    jax = oompost.analyze([str(CORPUS / "AI-Hypercomputer__gpu-recipes__2" / "log.txt")])
    assert jax.cause == "nccl_error" and jax.primary.sub_cause == "coordination_timeout"
    assert not any(f.key.startswith("TORCH_NCCL") for f in jax.primary.fixes)
    slurm = oompost.analyze([str(CORPUS / "meta-pytorch__torchforge__590" / "log.txt")])
    assert slurm.cause == "config_error" and slurm.primary.sub_cause == "scheduler"
    assert "sbatch" in slurm.primary.title
    assert slurm.primary.detail.startswith("The job never started") and "rank" not in slurm.primary.detail


def test_rapids_memory_manager_is_a_device_oom_with_its_own_knobs():
    # rapidsai/deployment#523 (dev): XGBoost on Dask-CUDA, "std::bad_alloc: out_of_memory: CUDA error at: ...
    # cuda_memory_resource.hpp": a device OOM whose fixes are partitions and spilling, not trainer arguments
    import oompost

    oo = parse_text((CORPUS / "rapidsai__deployment__523" / "log.txt").read_text()).ooms
    assert oo and oo[0].message_format == "rmm" and oo[0].kind is OomKind.OTHER
    r = oompost.analyze([str(CORPUS / "rapidsai__deployment__523" / "log.txt")])
    assert not any(f.fix.kind == "trainer_arg" for f in r.fixes)
    assert any("spill" in f.fix.key for f in r.fixes)
    # the message is the OOM and a failure line at once: the finding cites it once
    cited = [(e.source, e.line) for e in r.primary.evidence]
    assert cited and len(cited) == len(set(cited))


def test_a_message_wrapped_right_after_tried_to_allocate_keeps_its_figures():
    # aws-samples/amazon-sagemaker-llm-fine-tuning-remote-decorator#2 (dev): SageMaker's AlgorithmError wraps the
    # message at "Tried to allocate" / "5.00 GiB (GPU 3; ..."; the figures on the next lines are the same message's
    oo = parse_text((CORPUS / "aws-samples__amazon-sagemaker-llm-fine-tuning-remote-decorator__2" / "log.txt")
                    .read_text()).ooms
    assert len(oo) == 1
    o = oo[0]
    assert o.requested_bytes == 5 * 2**30 and o.device == 3
    assert o.reserved_unallocated_bytes is not None and o.reserved_unallocated_bytes > o.requested_bytes


def test_xlas_compile_time_hbm_overflow_with_the_models_size_in_words_is_capacity():
    # erfanzar/EasyDeL#78 (dev): "Model Contain  1.100048384  Billion Parameters", then the TPU compiler's "Ran out
    # of memory in memory space hbm. Used 21.90G of 7.48G hbm." inside trainer.train(): a 1.1B model's training
    # states alone exceed 7.48 GiB
    import oompost

    ev = parse_text((CORPUS / "erfanzar__EasyDeL__78" / "log.txt").read_text())
    assert ev.fact_value("model.params") == 1100048384
    o = ev.ooms[0]
    assert o.message_format == "xla" and o.capacity_bytes is not None and o.requested_bytes > o.capacity_bytes
    assert oompost.analyze([str(CORPUS / "erfanzar__EasyDeL__78" / "log.txt")]).cause == "capacity"


def test_a_kbit_model_on_another_ranks_device_is_a_setting_with_its_fix():
    # yangjianxin1/Firefly#270 (dev): accelerate's "You can't train a model that has been loaded in 8-bit precision
    # on a different device than the one you're training on" under torchrun
    import oompost

    r = oompost.analyze([str(CORPUS / "yangjianxin1__Firefly__270" / "log.txt")])
    assert r.cause == "config_error" and r.primary.sub_cause == "device_map"
    assert r.primary.fixes and r.primary.fixes[0].key == "device_map"


def test_a_message_padded_by_a_terminals_wrap_keeps_its_figures():
    # aigc-apps/EasyAnimate#168 (dev): each wrapped row was padded to the terminal's width and pasted back as one
    # line ("... is free. Includi<48 spaces>ng non-PyTorch memory ... reserved b<48 spaces>y PyTorch but unallocated")
    o = parse_text((CORPUS / "aigc-apps__EasyAnimate__168" / "log.txt").read_text()).ooms[0]
    assert o.requested_bytes == 1008 * 2**20
    assert o.reserved_unallocated_bytes is not None and abs(o.reserved_unallocated_bytes - 12.26 * 2**30) < 2**24
    assert o.process_in_use_bytes is not None


def test_a_table_row_of_memory_readings_is_a_series():
    # AUTOMATIC1111/stable-diffusion-webui#6068 (dev): "Memory (GiB)  | 8.7      | 12.1  | 13.9  | ..." over seven
    # identical generations
    ev = parse_text((CORPUS / "AUTOMATIC1111__stable-diffusion-webui__6068" / "log.txt").read_text())
    assert ev.fact_value("cue.memory_growing") == 8
    assert ev.fact_value("cue.memory_growing_range") == (8.7, 19.5)


def test_markdown_bold_markers_inside_a_message_do_not_hide_its_figures():
    # hpcaitech/ColossalAI#3502 (dev): "C**UDA out of memory. Tried to allocate 1**72.00 MiB (GPU 0; 23.68 GiB ..."
    o = parse_text((CORPUS / "hpcaitech__ColossalAI__3502" / "log.txt").read_text()).ooms[0]
    assert o.requested_bytes == 172 * 2**20 and o.capacity_bytes is not None and o.reserved_bytes is not None


def test_frees_mem_row_is_read_by_its_used_column():
    # google/automl#224 (dev): `free --giga` sampled over a run, "Mem:  65  1  19  0  44  63" -> "Mem:  65  6 ...":
    # the total is constant, what the processes use (the second column) rises
    ev = parse_text((CORPUS / "google__automl__224" / "log.txt").read_text())
    assert ev.fact_value("cue.host_memory_growing") is not None
    first, last = ev.fact_value("cue.host_memory_growing_range")
    assert first == 1 and last > first


def test_a_library_handle_that_cannot_be_created_is_a_set_up_to_correct():
    # georgeguimaraes/soothsayer#6 (dev): EXLA preallocates 22816161792 bytes, then "Could not create cudnn handle:
    # CUDNN_STATUS_INTERNAL_ERROR" with 433717248 bytes free
    import oompost

    r = oompost.analyze([str(CORPUS / "georgeguimaraes__soothsayer__6" / "log.txt")])
    assert r.cause == "config_error" and r.primary.sub_cause == "library_init"
    assert any("PREALLOCATE" in f.key for f in r.primary.fixes)


def test_pytorchs_cublas_handle_failure_points_at_who_else_holds_the_gpu_not_at_tensorflow():
    # stanford-futuredata/ColBERT#151 (dev): "CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling
    # cublasCreate(handle)" after four "#> Starting..." lines (nranks=4 on one GPU; nranks=1 fixed it)
    import oompost

    r = oompost.analyze([str(CORPUS / "stanford-futuredata__ColBERT__151" / "log.txt")])
    assert r.cause == "config_error" and r.primary.sub_cause == "library_init"
    assert "who else holds the GPU" in r.primary.fixes[0].key
    assert not any("PREALLOCATE" in f.key for f in r.primary.fixes)
    # the allocation failure of the same call stays an out-of-memory of its own
    ev = parse_text("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n")
    assert ev.ooms and not any(f.kind.name == "CONFIG_VALIDATION" for f in ev.failures)


def test_onnx_runtimes_session_initialization_is_model_loading():
    # iperov/DeepFaceLive#33 (dev, capacity): "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Exception during
    # initialization: ... BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size
    # 150994944" -- the session places the model's weights when it is created
    ev = parse_text((CORPUS / "iperov__DeepFaceLive__33" / "log.txt").read_text())
    assert ev.fact("cue.model_loading") is not None
    assert parse_text("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running "
                      "Conv node.\n").fact("cue.model_loading") is None


def test_riches_marked_source_line_places_an_excerpt_without_frame_headers():
    # deepspeedai/DeepSpeed#2672 (dev): only rich's boxed source context survives above the message; its marked
    # line ("❱  905 │ ... return t.to(device, ...") is the failing statement: the model moving to the GPU
    import oompost

    ev = parse_text((CORPUS / "deepspeedai__DeepSpeed__2672" / "log.txt").read_text())
    fr = ev.ooms[0].stack.frames
    assert fr and fr[-1].code.startswith("return t.to(device")
    r = oompost.analyze([str(CORPUS / "deepspeedai__DeepSpeed__2672" / "log.txt")])
    assert r.to_json()["oom"]["phase"] == "model_to_device"


# NCCL's shm_open refused with "Permission denied" is a set-up failure of its shared-memory transport, not a full
# /dev/shm: pytorch/pytorch#37004 (dev, nccl_error; fixing /dev/shm's permissions removed it).  A full /dev/shm
# (posix_fallocate: No space left on device) stays host memory: pytorch/pytorch#40622 (dev, host_oom).
def test_a_refused_shm_open_is_a_distributed_set_up_failure_not_host_memory():
    refused = oompost.analyze([str(CORPUS / "pytorch__pytorch__37004" / "log.txt")])
    assert refused.cause == "nccl_error"
    nccl = next(f for f in refused.findings if f.code == "NCCL001")
    assert nccl.sub_cause == "shm_refused" and any(x.key == "NCCL_SHM_DISABLE" for x in nccl.fixes)
    assert not any("P2P" in n.what for n in nccl.not_fixes)       # there is no stuck rank to speak of
    assert not any(f.code == "HOST001" for f in refused.findings)
    full = oompost.analyze([str(CORPUS / "pytorch__pytorch__40622" / "log.txt")])
    assert full.cause == "host_oom"


# From the fifteenth collection's dev misses, each on its real corpus input.
def test_a_bare_memoryerror_behind_a_loggers_brackets_is_host_memory():
    # n00mkrad/text2image-gui#65 (dev, host_oom): "[00000600] [01-24-2023 23:20:26] MemoryError" after pickler.dump
    ev = parse_text((CORPUS / "n00mkrad__text2image-gui__65" / "log.txt").read_text())
    assert [o.kind for o in ev.ooms] == [OomKind.HOST]


def test_a_message_wrapped_before_unallocated_keeps_its_reserved_figure():
    # RosettaCommons/foundry#79 (dev, fragmentation): "... and 9.28 GiB is reserved by PyTorch but" / "unallocated."
    ev = parse_text((CORPUS / "RosettaCommons__foundry__79" / "log.txt").read_text())
    (o,) = ev.ooms
    assert o.reserved_unallocated_bytes is not None and abs(o.reserved_unallocated_bytes / 2**30 - 9.28) < 0.01
    assert oompost.analyze([str(CORPUS / "RosettaCommons__foundry__79" / "log.txt")]).cause == "fragmentation"


def test_a_transformer_call_is_the_forward_pass():
    # TheDenk/cogvideox-controlnet#16 (dev, activation_spike): "model_output = transformer(" is a model call
    r = oompost.analyze([str(CORPUS / "TheDenk__cogvideox-controlnet__16" / "log.txt")])
    assert r.cause == "activation_spike"
    assert any(f.code == "ACT001" and "in forward" in f.detail for f in r.findings)


# From the sixteenth collection's dev misses, each on its real corpus input.
def test_a_message_pasted_lowercased_is_read_in_pytorchs_casing():
    # mozilla/TTS#149 (dev, fragmentation): "cuda out of memory. tried to allocate 78.88 mib (gpu 0; 3.95 gib total
    # capacity; 2.99 gib already allocated; 74.44 mib free; 557.82 mib cached)" between markdown markers
    ev = parse_text((CORPUS / "mozilla__TTS__149" / "log.txt").read_text())
    (o,) = ev.ooms
    assert o.kind is OomKind.CACHING_ALLOCATOR
    assert abs(o.requested_bytes / 2**20 - 78.88) < 0.01 and abs(o.capacity_bytes / 2**30 - 3.95) < 0.01
    assert abs(o.reserved_unallocated_bytes / 2**20 - 557.82) < 0.01
    # bmaltais/kohya_ss#3329 (dev): the newer lowercased form, "reserved in total by pytorch"
    ev = parse_text((CORPUS / "bmaltais__kohya_ss__3329" / "log.txt").read_text())
    assert [round(o.requested_bytes / 2**20) for o in ev.ooms] == [30]
    assert ev.ooms[0].reserved_bytes is not None and abs(ev.ooms[0].reserved_bytes / 2**30 - 7.28) < 0.01


# From the seventeenth collection's dev misses, each on its real corpus input.
def test_a_bare_assertion_on_the_runs_arguments_is_a_setup_check():
    # maszhongming/MatchSum#11 (dev, config_error): "assert args.batch_size % len(devices) == 0" / "AssertionError"
    ev = parse_text((CORPUS / "maszhongming__MatchSum__11" / "log.txt").read_text())
    (f,) = [f for f in ev.failures if f.exception == "AssertionError"]
    assert f.kind is FailureKind.CONFIG_VALIDATION and "batch_size % len(devices)" in f.message
    assert oompost.analyze([str(CORPUS / "maszhongming__MatchSum__11" / "log.txt")]).cause == "config_error"
    # a bare AssertionError on anything else stays an uncaught exception
    other = parse_text('Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n'
                       '    assert len(outputs) > 0\nAssertionError\n')
    assert [f.kind for f in other.failures] == [FailureKind.PYTHON_EXCEPTION]


def test_a_closed_rendezvous_is_a_distributed_failure_with_rendezvous_fixes():
    # pytorch/pytorch#116974 (dev, nccl_error): "torch.distributed.elastic.rendezvous.api.RendezvousClosedError"
    r = oompost.analyze([str(CORPUS / "pytorch__pytorch__116974" / "log.txt")])
    assert (r.cause, r.sub_cause) == ("nccl_error", "rendezvous")
    assert any("rdzv" in str(f.value) or "master_port" in str(f.value) for f in r.primary.fixes)


# From the eighteenth collection's dev misses, each on its real corpus input.
def test_a_dataloader_kill_retyped_in_a_post_is_still_a_worker_kill():
    # NVlabs/GroupViT#12 (dev, host_oom): "RuntimeError:DataLoader worker(pid xxxxx) is killed by signal:killed."
    ev = parse_text((CORPUS / "NVlabs__GroupViT__12" / "log.txt").read_text())
    assert [f.kind for f in ev.failures if f.kind is FailureKind.KILLED]
    assert oompost.analyze([str(CORPUS / "NVlabs__GroupViT__12" / "log.txt")]).cause == "host_oom"


def test_a_localised_killed_inside_markdown_backticks_is_the_shells_kill():
    # QwenLM/Qwen3-VL#1938 (dev, host_oom): the shell's "已杀死" (zh_CN "Killed") closing a code span: "已杀死`"
    ev = parse_text((CORPUS / "QwenLM__Qwen3-VL__1938" / "log.txt").read_text())
    assert [f.kind for f in ev.failures] == [FailureKind.KILLED]
    # the word inside a sentence is not a kill
    assert not parse_text("the job was Killed by the admin yesterday\n").failures


# Project-MONAI/tutorials#564 (dev): a corrupt request larger than an exabyte, printed in GiB by an older torch
def test_an_exabyte_request_is_kept_and_called_corrupt(tmp_path):
    text = ("CUDA out of memory. Tried to allocate 6056239117.41 GiB (GPU 0; 44.56 GiB total capacity; 2.20 GiB "
            "already allocated; 40.30 GiB free; 2.54 GiB reserved in total by PyTorch). unable to sync buffer "
            "contents\n")
    (o,) = parse_text(text).ooms
    assert o.requested_bytes is not None and o.requested_bytes > 6 * 10**18
    (tmp_path / "run.log").write_text(text)
    r = oompost.analyze([tmp_path / "run.log"])
    assert r.cause == "config_error" and r.findings[0].code == "CFG004"


@pytest.mark.parametrize("line", ["MemoryError -- std::bad_alloc",            # snap-stanford/ogb#404 (dev), torch 1.x
                                  "terminate called after throwing an instance of 'std::bad_alloc'"])
def test_a_cpp_bad_alloc_is_host_memory(line):
    (o,) = parse_text("loading\n" + line + "\n  what():  std::bad_alloc\n").ooms
    assert o.kind is OomKind.HOST


# marian-nmt/marian#270 (dev): an OOM line no parser reads, behind a timestamp; the report's exception was
# "[2020-05-05 18" (the text before the first colon)
@pytest.mark.parametrize("line,exc", [
    ("[2020-05-05 18:48:50] Error: CUDA error 2 'out of memory' - device.cu:38: cudaMalloc(&data_, size)", ""),
    ("12:01:02 MyLib.DeviceAllocError: out of memory on device 0 while building the index", "MyLib.DeviceAllocError"),
])
def test_an_unread_oom_line_names_no_timestamp_as_its_exception(line, exc):
    (o,) = parse_text(line + "\n").ooms
    assert o.exception == exc


# sample_logs/host_oom_pinned_prefetch_loader_cgroup_6g: a training loop's DataLoader (8 workers, prefetch 8, pinned)
# killed in a 6 GiB container at its first batch; nothing offloaded, nothing loading: the fix names the loader first
def test_a_kill_inside_a_training_loop_names_the_dataloader_first(tmp_path):
    log = Path(__file__).parent.parent / "sample_logs" / "host_oom_pinned_prefetch_loader_cgroup_6g" / "run.log"
    r = oompost.analyze([str(log)])
    assert r.cause == "host_oom"
    keys = [x.key for x in r.findings[0].fixes]
    assert keys[0].startswith("DataLoader num_workers") and keys[-1].startswith("more host RAM")
    # the same kill while a model's shards load keeps the loading advice, not the loader's (the bar is a loading bar)
    loading = tmp_path / "loading.log"
    loading.write_text(log.read_text().replace("train:   0%|          | 0/40 [00:00<?, ?it/s]",
                                               "Loading checkpoint shards:  50%|█████     | 1/2 [00:10<00:10, "
                                               "10.00s/it]"))
    assert "Loading checkpoint shards" in loading.read_text()
    r2 = oompost.analyze([str(loading)])
    assert r2.cause == "host_oom"
    assert not any(x.key.startswith("DataLoader num_workers") for x in r2.findings[0].fixes)


# bigscience-workshop/Megatron-DeepSpeed#384 (dev): 37,631.79 GiB on a 79.21 GiB card (475x) is a shape gone wrong
# (a dataloader's batch read as a sequence), not a spike; the corpus's real spikes ask at most 25x their card
def test_a_request_hundreds_of_times_the_card_is_a_wrong_shape():
    r = oompost.analyze([str(CORPUS / "bigscience-workshop__Megatron-DeepSpeed__384" / "log.txt")])
    assert r.cause == "config_error" and r.findings[0].code == "CFG004"
    assert r.findings[0].fixes[0].key == "check the inputs of the failing call"
    assert "shapes" in r.findings[0].settle[0]
    # TMElyralab/MusePose#20 (dev): 243 GiB on a 16 GiB card (15x) is a spike a reader decides as such
    r = oompost.analyze([str(CORPUS / "TMElyralab__MusePose__20" / "log.txt")])
    assert "CFG004" not in {f.code for f in r.findings}


# horovod/horovod#676 (dev): TensorFlow's form of two processes on one GPU, after the allocations it caused
def test_tensorflow_s_device_mapped_twice_is_two_ranks_on_one_gpu():
    path = CORPUS / "horovod__horovod__676" / "log.txt"
    assert [f.kind for f in parse_text(path.read_text()).failures] == [FailureKind.DUPLICATE_GPU]
    r = oompost.analyze([str(path)])
    assert r.cause == "config_error" and r.sub_cause == "duplicate_gpu"
    assert r.findings[0].fixes[0].key == "gpu_options.visible_device_list"
