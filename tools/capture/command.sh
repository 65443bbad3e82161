#!/usr/bin/env bash
# Run a command line as it is (a launcher the runner does not build itself, e.g. torchrun with --tee),
# e.g.  command.sh python3 -m torch.distributed.run --nproc_per_node 1 --tee 3 plain_loop.py ...
exec "$@"
