#!/usr/bin/env python
"""oompost.record under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: it
must warn and keep the job running (steps + metadata, no snapshot), and the
OOM must still be the user's own exception."""

import sys
import warnings

import torch

import oompost

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    rec = oompost.record(dir=sys.argv[1])
print("warnings:", [str(x.message) for x in w])
torch.cuda.set_per_process_memory_fraction(0.02)
p = torch.nn.Parameter(torch.zeros(1024, 1024, device="cuda"))
opt = torch.optim.SGD([p], lr=0.1)
kept = []
try:
    for step in range(1000):
        (p * 2).sum().backward()
        opt.step()
        kept.append(torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError as e:
    print("user's OOM at step", step, ":", str(e).splitlines()[0][:120])
print("recorded steps:", rec.step_count, "history:", rec.history)
