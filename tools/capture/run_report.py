"""The small JSON report a capture loop writes at the end of a run that completed
(``--report``): what run.py's counterfactuals read to say "completed, peak X"."""

from __future__ import annotations

import json
import time
from typing import Any


def write_run_report(path: str, args: Any, allowed: int | None, steps_completed: int, t0: float) -> None:
    import torch

    with open(path, "w") as f:
        json.dump({"args": vars(args), "allowed_bytes": allowed,
                   "max_reserved": torch.cuda.max_memory_reserved(),
                   "max_allocated": torch.cuda.max_memory_allocated(),
                   "steps_completed": steps_completed, "seconds": time.time() - t0}, f, indent=1)
