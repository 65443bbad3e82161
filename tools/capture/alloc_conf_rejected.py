"""Check on the GPU machine: an allocator config the allocator rejects, with and without
``oompost.record``.  Without the recorder the job stops on torch's ValueError at its first CUDA
allocation; with it, it must stop on the same error (not SIGSEGV, exit -11, as before the fix).

    PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:16 python tools/capture/alloc_conf_rejected.py [--record DIR]
"""

import sys

import torch

if "--record" in sys.argv:
    import oompost

    oompost.record(dir=sys.argv[sys.argv.index("--record") + 1])
x = torch.ones(1024, device="cuda")
print("allocated", x.sum().item())
