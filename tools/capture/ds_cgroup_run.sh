#!/usr/bin/env bash
# Run train.py under the DeepSpeed launcher inside a cgroup whose memory.max is
# $1 (a container's RAM limit); the remaining arguments go to train.py, which
# reads the job's ds_config.json:
#   ds_cgroup_run.sh 12G --model opt-1.3b --per_device_train_batch_size 2 ...
# The cgroup, its exit code 99 when unavailable and the files it leaves in $JOB
# are cgroup_run.sh's.
set -u
limit=${1:?usage: ds_cgroup_run.sh LIMIT TRAIN_ARGS...}; shift
here=$(dirname "$0")
exec "$here/cgroup_run.sh" "$limit" python3 -m deepspeed.launcher.runner --num_gpus 1 \
  --master_port "${MASTER_PORT:-29700}" "$here/train.py" --deepspeed "$JOB/ds_config.json" "$@"
