#!/usr/bin/env python
"""Hold GIB of the GPU like a second job on the same card (a forgotten notebook kernel, another user's run),
then wait to be killed.  Used by gpu_hog_run.sh; its output goes to the job's hog.log, not to run.log.

    python gpu_hog.py --gib 120 --ready FILE
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, required=True)
    p.add_argument("--ready", required=True, help="file created once the memory is held")
    a = p.parse_args()
    import torch

    held = torch.ones(int(a.gib * 2**30), dtype=torch.uint8, device="cuda")   # touched: really resident
    torch.cuda.synchronize()
    print(f"[hog] pid {os.getpid()} holds {held.numel() / 2**30:.1f} GiB on cuda:0", flush=True)
    open(a.ready, "w").close()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())
