"""NCCL communicator memory per set-up."""

from __future__ import annotations

from .calibration import CALIBRATION
from .setup import TrainSetup


# ---------------------------------------------------------------------- NCCL


def _nccl_bytes(setup: TrainSetup) -> tuple[int, int]:
    """(communicators, bytes).  DeepSpeed creates the world group plus its
    clone (``groups._clone_world_group``, the data-parallel group).  With more
    than one rank ``init_distributed`` binds ``device_id``, so torch creates the
    world communicator eagerly and splits the clone from it: 2 communicators.
    At world size 1 it does not (deepspeed/comm/torch.py), communicators are
    created lazily, and only the data-parallel group ever carries a
    collective: 1 (measured: 1316 MiB of non-PyTorch memory = context 738 +
    one communicator 578).  DDP uses 1; a single plain process none.  First
    communicator 578 MiB (incl. kernel image), each further 388 MiB (measured
    on H200, nccl.md §2.2), plus peer connection buffers when world_size > 1."""
    if setup.deepspeed:
        comms = 2 if setup.world_size > 1 else 1
    elif setup.world_size > 1:
        comms = 1
    else:
        return 0, 0
    total = CALIBRATION["nccl_first_comm_bytes"] + (comms - 1) * CALIBRATION["nccl_comm_bytes"]
    if setup.world_size > 1:
        total += comms * CALIBRATION["nccl_peer_bytes"]
    return comms, int(total)
