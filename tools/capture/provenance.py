#!/usr/bin/env python
"""Write sample_logs/README.md (the provenance table) from each scenario's
capture.json and expected.json.

    python tools/capture/provenance.py
    python tools/capture/provenance.py --append NAME,NAME   (only add these samples' rows)
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
SAMPLES = REPO / "sample_logs"


def _gib(n: float | None) -> str:
    return f"{n / 2**30:.2f} GiB" if n else "—"


def _cap(c: dict) -> str:
    args = (c.get("run") or {}).get("args") or []
    if "--emulate_card" in args:
        return args[args.index("--emulate_card") + 1]
    if "--memory_limit_gib" in args:
        return f"{args[args.index('--memory_limit_gib') + 1]} GiB cap"
    fs = c.get("fragmentation_search", {}).get("chosen")
    if fs:
        return f"{fs['cap_gib']} GiB cap"
    return "whole H200"


def row(d: Path, new: bool = False) -> tuple[str, dict | None]:
    """The README table row of one sample directory (and its capture environment)."""
    c = json.loads((d / "capture.json").read_text())
    e = json.loads((d / "expected.json").read_text())
    proof = "; ".join(f"{cf.get('setting')}: {cf.get('outcome')}" for cf in c.get("counterfactuals", []))
    rv = c.get("rerun_validation") or {}
    if rv.get("outcome") == "completed":
        rerun = f"completed {rv['steps_completed']} steps"
    elif rv.get("outcome") == "not run":
        rerun = "not run: " + rv["reason"]
    elif new:
        rerun = "not run yet (rerun.py plan/merge pending)"
    else:
        rerun = "no config fix (code change)"
    cause = f"**{e['cause']}**" + (f" ({e['sub_cause']})" if e.get("sub_cause") else "")
    files = ", ".join(sorted(p.name for p in d.iterdir() if p.name not in ("capture.json", "expected.json")))
    return (f"| `{d.name}` | {c['description']} | {c.get('launcher', '')} | {_cap(c)} | "
            f"{cause} | {proof or '—'} | {rerun} | {files} |"), c.get("environment")


def append_rows(names: list[str]) -> None:
    """Add the rows of these samples to sample_logs/README.md, leaving every other line as it is."""
    readme = SAMPLES / "README.md"
    text = readme.read_text()
    present = {line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `")}
    new = [row(SAMPLES / n, new=True)[0] for n in names if n not in present]
    readme.write_text(text.rstrip("\n") + "\n" + "".join(r + "\n" for r in new))
    print(f"appended {len(new)} row(s) to {readme}")


def main() -> int:
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == "--append":
        append_rows([n for n in sys.argv[2].split(",") if n])
        return 0
    rows = []
    env = None
    for d in sorted(p for p in SAMPLES.iterdir() if (p / "capture.json").exists()):
        r, e = row(d)
        env = env or e
        rows.append(r)
    text = f"""# sample_logs: real crash artifacts

Every file here was produced by a real run on the GPU machine by
`tools/capture/run.py` (the scenarios are defined in `tools/capture/scenarios.py`,
the training programs are `tools/capture/train.py`, `hf_trainer.py`,
`rollout_worker.py`, `straggler.py`, `plain_loop.py`, `seq2seq.py`,
`gen_eval_accelerate.py` and `vit_cached_loader.py`).  Logs are the processes' combined
stdout/stderr as a terminal would show them; nothing in them was edited.
Snapshots were dumped by `oompost.record` inside PyTorch's OOM observer and
gzipped.  `capture.json` holds the provenance of each scenario (command, env,
memory cap, versions, exit code, the counterfactual runs that prove the cause
and the validation of oompost's rerun plan); `expected.json` the verdict the
capture was built to produce.  oompost never reads either as evidence.

Environment: {env.get('nvidia_smi') if env else '?'}; torch {env.get('torch') if env else '?'}, CUDA
{env.get('cuda') if env else '?'}, NCCL {env.get('nccl') if env else '?'}, transformers
{env.get('transformers') if env else '?'}, DeepSpeed {env.get('deepspeed') if env else '?'}, accelerate
{env.get('accelerate') if env else '?'}, peft {env.get('peft') if env else '?'}, Python {env.get('python') if env else '?'}.

Cards are emulated on the H200 with `torch.cuda.set_per_process_memory_fraction`
set to the card's reported total minus 0.5 GiB of CUDA context (rtx3090: 23.69
GiB → 23.19 GiB allowed; a100-40g: 39.39 → 38.89).  The OOM messages therefore
show the H200's 139.80 GiB capacity plus an "allowed" figure.  Where NCCL must
run out, the card is filled for real.  Under a fraction cap NVML still reports
the H200's free memory, which changes one DeepSpeed decision: 0.19.8 flattens
the 16-bit parameter groups on the GPU when NVML reports enough free memory
(on a real 24 GB card it would flatten on the CPU); the 7B capture is
faithful to DeepSpeed under a cap, which is also how the seed thread's 27 GB
start-up peak was measured.

To regenerate (about 9 minutes of one H200, in three calls):

    ../shared/tools/device-wheels.sh .whl                      # DeepSpeed + pydantic wheels for the GPU machine
    python3 tools/capture/run.py --out OUT --scenarios         # on the GPU machine (PYTHONPATH with the wheels)
    python3 tools/capture/run.py --out OUT --matrix            # the estimator accuracy matrix
    python3 tools/capture/collect.py OUT --matrix docs/estimator/measurements.json
    python3 tools/capture/rerun.py plan -o tools/capture/reruns.json
    python3 tools/capture/run.py --out OUT --reruns tools/capture/reruns.json   # GPU machine
    python3 tools/capture/rerun.py merge OUT && python3 tools/capture/provenance.py

| scenario | what happened | launcher | memory | cause | proof (counterfactual runs) | oompost's rerun plan, run under the same cap | files |
|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"
    (SAMPLES / "README.md").write_text(text)
    print(f"wrote {SAMPLES / 'README.md'} ({len(rows)} scenarios)")
    write_rerun_table()
    return 0


def write_rerun_table() -> None:
    """docs/rerun_validation.md: each validated plan's predicted peak against what the run reached.

    These runs are held out from the estimator: the plans were emitted by the finished
    estimator and run afterwards.  Measured = the run's last max_reserved line plus the
    memory outside PyTorch (1.29 GiB under DeepSpeed, 0.74 GiB for plain PyTorch: the
    non-PyTorch memory of the matrix runs and of the OOM messages)."""
    import re

    lines = ["# Rerun plans, run on the GPU machine", "",
             "Every plan oompost emitted for a capture was run under the capture's own memory cap "
             "(`tools/capture/rerun.py`); the table compares the plan's predicted peak with the peak the run "
             "reached.  These runs were not used to build the estimator.  Measured = the run's final "
             "`max_reserved` plus the memory outside PyTorch (1.29 GiB with DeepSpeed, 0.74 GiB without).", "",
             "| scenario | outcome | steps | limit | predicted | measured | error |", "|---|---|---|---|---|---|---|"]
    for d in sorted(p for p in SAMPLES.iterdir() if (p / "capture.json").exists()):
        c = json.loads((d / "capture.json").read_text())
        v = c.get("rerun_validation")
        if not v:
            continue
        if v.get("outcome") == "not run":
            lines.append(f"| `{d.name}` | not run | — | — | — | — | {v.get('reason', '')} |")
            continue
        if v.get("outcome") != "completed":
            # a plan that failed on the GPU: recorded, and what it drove (README, sample_logs/README.md)
            plan = v.get("plan") or {}
            lines.append(f"| `{d.name}` | **{v.get('outcome')}** | {v.get('steps_completed', '—')} | "
                         f"{_gib(plan.get('device_bytes'))} | {_gib(plan.get('predicted_peak_bytes'))} | — | "
                         f"the plan ({', '.join(f'{k}={x}' for k, x in (plan.get('trainer_args') or {}).items())}) "
                         "failed; oompost no longer emits it |")
            continue
        plan = v["plan"]
        m = re.search(r"max_reserved=([\d.]+)GiB", " ".join(v.get("log_tail") or []))
        outside = 1.29 if plan.get("ds_config") else 0.74
        meas = (float(m.group(1)) + outside) * 2**30 if m else None
        pred = plan.get("predicted_peak_bytes")
        err = f"{100 * (pred - meas) / meas:+.1f} %" if pred and meas else "—"
        lines.append(f"| `{d.name}` | {v['outcome']} | {v['steps_completed']} | {_gib(plan.get('device_bytes'))} | "
                     f"{_gib(pred)} | {_gib(meas)} | {err} |")
    (REPO / "docs" / "rerun_validation.md").write_text("\n".join(lines) + "\n")
    print("wrote docs/rerun_validation.md")


if __name__ == "__main__":
    raise SystemExit(main())
