"""Build large logs for the speed benchmark out of real captured lines.

Two shapes, both ending in a real crash (the OOM traceback of
sample_logs/activation_spike_long_batch, under a rank prefix):

``training``  what a 100 MB log of a long 8-rank run looks like: the real
    DeepSpeed start-up of a capture (its config dump included), then per-step
    lines of every rank in the format our training script printed (step
    counter and memory figures advanced), tqdm progress bars, NCCL INFO
    transport lines in NCCL's format (``host:pid:tid [dev] NCCL INFO Channel
    ...``) and Python warnings; at the end rank 3's OOM and the other ranks'
    NCCL watchdog timeouts.
``replay``    the pessimistic case: every captured log's lines re-emitted
    round-robin under ``[rankN]:`` prefixes, so most lines are start-up
    boilerplate, config dumps and tracebacks that the parsers must read.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
CRASH = SAMPLES / "activation_spike_long_batch" / "run.log"
WATCHDOG = SAMPLES / "nccl_watchdog_timeout" / "run.log"


def _crash_tail() -> list[str]:
    lines = CRASH.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if "Traceback" in ln)
    return [f"[rank3]: {ln}" for ln in lines[start:]]


def _watchdog_tail(ranks: int, oom_rank: int = 3) -> list[str]:
    """The other ranks waiting on the one that died: the real watchdog timeout line of a capture,
    under each surviving rank's prefix."""
    line = next(ln for ln in WATCHDOG.read_text().splitlines() if ln.startswith("[rank0]:")
                and "Watchdog caught collective operation timeout" in ln)
    return [line.replace("[rank0]:", f"[rank{r}]:").replace("[Rank 0]", f"[Rank {r}]")
            for r in range(ranks) if r != oom_rank]


def build_replay(path: str, size: int, ranks: int = 8) -> None:
    logs = sorted(SAMPLES.glob("*/run.log"))
    body = [ln for p in logs if p != CRASH for ln in p.read_text(errors="replace").splitlines()
            if "out of memory" not in ln and "OutOfMemoryError" not in ln]
    written = 0
    with open(path, "w") as f:
        for i, ln in zip(itertools.count(), itertools.cycle(body)):
            s = f"[rank{i % ranks}]: {ln}\n"
            f.write(s)
            written += len(s)
            if written >= size:
                break
        f.write("\n".join(_crash_tail()) + "\n")


def build_training(path: str, size: int, ranks: int = 8, seed: int = 0) -> None:
    rng = random.Random(seed)
    startup = (SAMPLES / "zero3_offload_activations_a100_40g" / "run.log").read_text().splitlines()
    startup = startup[: next(i for i, ln in enumerate(startup) if "Traceback" in ln)]
    warnings = [
        "/opt/torch/.venv/lib/python3.12/site-packages/torch/utils/checkpoint.py:86: UserWarning: None of the "
        "inputs have requires_grad=True. Gradients will be None",
        "`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`.",
    ]
    written = 0
    step = 0
    with open(path, "w") as f:
        for ln in startup:
            f.write(ln + "\n")
        while written < size:
            step += 1
            out = []
            for r in range(ranks):
                alloc = 3.44 + 0.001 * (step % 97)
                out.append(f"[rank{r}]: step {step}/400000 | loss {12 - step * 1e-5:.4f} | seq 512 | mem "
                           f"allocated={alloc:.2f}GiB reserved=11.44GiB max_allocated=9.61GiB "
                           f"max_reserved=11.44GiB | 0.13s")
            host = f"node{rng.randint(1, 2):02d}"
            for _ in range(3):
                ch = rng.randint(0, 31)
                out.append(f"{host}:{4000 + rng.randint(0, 7)}:{4100 + rng.randint(0, 40)} [{rng.randint(0, 7)}] "
                           f"NCCL INFO Channel {ch:02d}/0 : {rng.randint(0, 7)}[{rng.randint(0, 7)}] -> "
                           f"{rng.randint(0, 7)}[{rng.randint(0, 7)}] via P2P/CUMEM/read")
            out.append(f"{100 * step / 400000:3.0f}%|▍         | {step}/400000 [{step // 60:02d}:{step % 60:02d}<"
                       f"55:10:01,  1.95it/s]\r{100 * step / 400000:3.0f}%|▍         | {step + 1}/400000")
            if step % 50 == 0:
                out.append(rng.choice(warnings))
            s = "\n".join(out) + "\n"
            f.write(s)
            written += len(s)
        f.write("\n".join(_crash_tail() + _watchdog_tail(ranks)) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--kind", choices=["training", "replay"], default="training")
    a = ap.parse_args()
    (build_training if a.kind == "training" else build_replay)(a.out, int(a.mb * 2**20))
    print(os.path.getsize(a.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
