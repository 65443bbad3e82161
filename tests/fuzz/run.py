"""Long fuzz runs, one target at a time (the figures in docs/fuzzing.md).

    python -m tests.fuzz.run TARGET --seconds 600 [--seed N] [--engine atheris|hypothesis] [--out stats.json]

With atheris (coverage-guided; ``pip install atheris``) hypothesis turns
atheris' bytes into structured inputs through ``fuzz_one_input``; without
it, hypothesis explores on its own in seeded rounds until the time is up.
A crash (anything but oompost's InputError) is printed with the failing
input and the run exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

from hypothesis import HealthCheck, given, seed, settings

from .targets import TARGETS, runner, strategy

SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=False)


def hypothesis_rounds(target: str, seconds: float, base_seed: int, examples_per_round: int = 200) -> dict:
    """Seeded rounds of hypothesis until ``seconds`` have passed (the CI run uses this)."""
    run = runner(target)
    strat = strategy(target)
    count = [0]
    t0 = time.monotonic()
    rounds = 0
    while time.monotonic() - t0 < seconds:
        @seed(base_seed + rounds)
        @settings(max_examples=examples_per_round, **SETTINGS)
        @given(strat)
        def one(data: bytes) -> None:
            count[0] += 1
            run(data)

        one()
        rounds += 1
    return {"target": target, "engine": "hypothesis", "seconds": round(time.monotonic() - t0, 1),
            "examples": count[0], "rounds": rounds, "seed": base_seed, "crashes": 0}


def atheris_run(target: str, seconds: int, base_seed: int, out: str | None) -> None:
    import atheris

    with atheris.instrument_imports(include=["oompost"]):
        import oompost.dsconfig.lint  # noqa: F401
        import oompost.parsers  # noqa: F401
        from oompost.parsers import (deepspeed_log, exceptions, launcher, nccl, snapshot,  # noqa: F401
                                     steps, torch_oom)
        import oompost.sources  # noqa: F401
    run = runner(target)
    count = [0]
    t0 = time.monotonic()

    @settings(**SETTINGS)
    @given(strategy(target))
    def one(data: bytes) -> None:
        count[0] += 1
        run(data)

    def report() -> None:
        stats = {"target": target, "engine": "atheris+hypothesis", "seconds": round(time.monotonic() - t0, 1),
                 "examples": count[0], "seed": base_seed, "crashes": 0}
        print(json.dumps(stats), flush=True)
        if out:
            with open(out, "w") as f:
                json.dump(stats, f)

    import atexit

    atexit.register(report)
    atheris.Setup([sys.argv[0], f"-max_total_time={seconds}", f"-seed={base_seed}", "-rss_limit_mb=4096", "-max_len=8192",
                   "-print_final_stats=1"], one.hypothesis.fuzz_one_input)
    atheris.Fuzz()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", choices=TARGETS)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--engine", choices=["atheris", "hypothesis"], default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    engine = a.engine
    if engine is None:
        try:
            import atheris  # noqa: F401
            engine = "atheris"
        except ImportError:
            engine = "hypothesis"
    if engine == "atheris":
        atheris_run(a.target, int(a.seconds), a.seed, a.out)
        return 0
    try:
        stats = hypothesis_rounds(a.target, a.seconds, a.seed)
    except Exception:
        traceback.print_exc()
        return 1
    print(json.dumps(stats))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(stats, f)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OOMPOST_NO_WORKER", "1")
    raise SystemExit(main())
