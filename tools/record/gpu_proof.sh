#!/usr/bin/env bash
# The GPU-machine proof for oompost.record (issue 9), one call: three real
# training scripts OOM under record (plain loop via python -m oompost.record,
# HF Trainer via OompostCallback, DeepSpeed via the launcher's --module), the
# cudaMallocAsync check, and the step-time overhead benchmark.  Run from a
# directory holding src/, tools/ and benchmarks/ (a copy of the worktree),
# with the DeepSpeed wheels in $WHL; results under $OUT.
set -u
WHL=${WHL:-../../.whl}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $WHL/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tools/capture PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
CAP=$OUT/cap; mkdir -p $CAP $OUT/logs
nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
t0=$SECONDS
timeout 90 python3 -m oompost.record -o $CAP/plain_leak -- tools/capture/train.py --model qwen2.5-0.5b \
  --emulate_card rtx3090 --per_device_train_batch_size 4 --max_seq_length 512 --keep_logits_for_metrics \
  --max_steps 200 > $OUT/logs/plain_leak.log 2>&1; echo "plain_leak rc=$? $((SECONDS-t0))s"
[ -n "${SKIP_HF_DS:-}" ] || {
t0=$SECONDS
timeout 120 python3 tools/record/hf_callback_oom.py --capture $CAP/hf_spike > $OUT/logs/hf_spike.log 2>&1
echo "hf_spike rc=$? $((SECONDS-t0))s"
t0=$SECONDS
cat > /tmp/ds_buckets.json <<'J'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 2, "overlap_comm": true, "contiguous_gradients": true, "reduce_scatter": true,
   "reduce_bucket_size": 4e9, "allgather_bucket_size": 4e9}, "gradient_clipping": 1.0, "steps_per_print": 10}
J
timeout 120 python3 -m deepspeed.launcher.runner --num_gpus 1 --master_port 29533 --module oompost.record \
  -o $CAP/ds_buckets -- tools/capture/train.py --deepspeed /tmp/ds_buckets.json --model qwen2.5-0.5b \
  --emulate_card rtx3090 --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --max_seq_length 512 \
  --max_steps 20 > $OUT/logs/ds_buckets.log 2>&1; echo "ds_buckets rc=$? $((SECONDS-t0))s"
}
t0=$SECONDS
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 40 python3 tools/record/async_backend.py $CAP/async \
  > $OUT/logs/async.log 2>&1; echo "async rc=$? $((SECONDS-t0))s"; tail -3 $OUT/logs/async.log
t0=$SECONDS
# the overhead with oompost's default context ("all") and with "alloc" (stacks at allocations only)
for ctx in ${OVERHEAD_CONTEXTS-all alloc}; do
  t0=$SECONDS
  timeout 240 python3 benchmarks/record_overhead.py --context $ctx ${OVERHEAD_ARGS:---blocks 10 --block-steps 25} \
    --out $OUT/overhead_$ctx.json > $OUT/logs/overhead_$ctx.log 2>&1
  echo "overhead ($ctx) rc=$? $((SECONDS-t0))s"; tail -2 $OUT/logs/overhead_$ctx.log
done
ls -laR $CAP | head -40
tar czf $OUT/captures.tar.gz -C $OUT cap && tar czf $OUT/logs.tar.gz -C $OUT logs && rm -rf $CAP $OUT/logs
ls -la $OUT
