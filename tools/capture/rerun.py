#!/usr/bin/env python
"""Turn oompost's rerun plans for the captured scenarios into runs.

    python tools/capture/rerun.py plan  -o reruns.json [--only NAME,...]  # here: analyse sample_logs/*, write specs
    python tools/capture/run.py --reruns reruns.json --out $OUT   # GPU machine: run them
    python tools/capture/rerun.py merge EXTRACTED_DIR        # here: record the outcomes in capture.json

A rerun is the scenario's own command under the same memory cap, with the
plan applied: its complete ds_config, its env, and its trainer_args mapped
onto the script's HF-style arguments.  The outcome, the exact plan that was
run and the steps it completed are stored in the scenario's capture.json
under ``rerun_validation``; tests/test_rerun_validation.py checks that the
plan oompost emits today is still the one that was validated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "src"))

from scenarios import scenarios  # noqa: E402

SAMPLES = REPO / "sample_logs"
# Scenarios whose plan cannot run on the GPU machine, and why (recorded, not hidden).
NOT_RUNNABLE = {
    "capacity_zero2_offload_7b_3090": "ZeRO-3 with parameter and optimizer offload for 6.7B parameters at world size 1 "
                                      "needs ~120 GiB of pinned host RAM; the GPU machine has 128 GiB in all",
    "zero3_without_zero_init_13b": "the fix is code (build the model under zero.Init); the offloaded 13B run would "
                                   "need ~230 GiB of host RAM",
}


# Where a plan's HF-style argument means something else in a capture script.  In
# train.py, --max_seq_length is the length of ordinary batches and the staged long
# document has --long_batch_length tokens; "truncate sequences to N tokens" is that
# document cut to N tokens.
ARG_MAP = {"activation_spike_long_batch": {"max_seq_length": "long_batch_length"}}
# the same, per capture script: hf_trainer.py builds the model itself, in --model_dtype
SCRIPT_ARG_MAP = {"hf_trainer.py": {"torch_dtype": "model_dtype"}}


def plan_for(report_rerun: dict, run_args: list[str], scenario: str = "", script: str = "") -> list[str]:
    """The scenario's arguments with the plan's trainer_args applied."""
    args = list(run_args)
    for key, value in (report_rerun.get("trainer_args") or {}).items():
        key = ARG_MAP.get(scenario, {}).get(key, SCRIPT_ARG_MAP.get(script, {}).get(key, key))
        flag = f"--{key}"
        if isinstance(value, bool):
            if flag in args:
                i = args.index(flag)
                if i + 1 < len(args) and not args[i + 1].startswith("--"):
                    args[i + 1] = str(value)
                elif not value:
                    args.pop(i)
            elif value:
                args.append(flag)
            continue
        if flag in args:
            args[args.index(flag) + 1] = str(value)
        else:
            args += [flag, str(value)]
    return args


def cmd_plan(out: str, only: set[str] | None = None) -> int:
    import oompost
    from scenarios_heldout import heldout_scenarios

    specs = []
    # the sample_logs scenarios, and held-out ones that moved to sample_logs after driving a fix
    for sc in scenarios() + heldout_scenarios():
        d = SAMPLES / sc.name
        if not d.exists() or (only and sc.name not in only):
            continue
        report = oompost.analyze([str(d)]).to_json()
        rr = report.get("rerun")
        if not rr or sc.name in NOT_RUNNABLE:
            continue
        run = sc.run
        args = plan_for(rr, run.args, sc.name, run.script)
        if sc.fragmentation_search:
            cap = json.loads((d / "capture.json").read_text())["fragmentation_search"]["chosen"]["cap_gib"]
            args += ["--memory_limit_gib", str(cap)]
        args = [a for a in args if a not in ("--oompost_capture",)]
        for flag in ("--max_steps", "--steps"):        # train.py / hf_trainer.py; heldout_loop.py / fsdp_loop.py
            if flag in args:
                i = args.index(flag)
                args[i + 1] = str(max(20, int(args[i + 1]) if args[i + 1].isdigit() else 20))
        specs.append({
            "name": sc.name, "launcher": run.launcher, "script": run.script, "args": args,
            "env": {**run.env, **(rr.get("env") or {})},
            "ds_config": rr.get("ds_config") if run.ds_config is not None else None,
            "gpu_gib": _budget_gib(args, rr), "host_gib": run.host_gib + 16, "timeout": 420,
            "plan": {k: rr.get(k) for k in ("ds_config", "ds_config_diff", "env", "trainer_args",
                                            "predicted_peak_bytes", "device_bytes", "global_batch_kept")},
        })
    for sp in specs:                      # CPU Adam steps of offloaded runs want threads
        if "offload" in json.dumps(sp["ds_config"] or {}):
            sp["env"]["OMP_NUM_THREADS"] = "8"
    # slowest first (CPU-offloaded optimizer steps), so a deadline cuts the quick ones
    specs.sort(key=lambda sp: (0 if "offload" in json.dumps(sp["ds_config"] or {}) else 1, sp["name"]))
    Path(out).write_text(json.dumps(specs, indent=1))
    print(f"{len(specs)} rerun(s) written to {out}: {', '.join(s['name'] for s in specs)}")
    return 0


def _budget_gib(args: list[str], rr: dict) -> float:
    """GPU memory the rerun may take: its emulated card, its cap, or (uncapped) the plan's prediction."""
    from cards import CARDS

    if "--emulate_card" in args:
        return CARDS[args[args.index("--emulate_card") + 1]] + 0.5
    if "--memory_limit_gib" in args:
        return float(args[args.index("--memory_limit_gib") + 1]) + 1
    pred = rr.get("predicted_peak_bytes") or 40 * 2**30
    return min(100.0, pred / 2**30 * 1.3 + 4)


# "step 3/20 | ..." (train.py), "step 3 | ..." (plain_loop.py, seq2seq.py), "step 3: ..." (gen_eval_accelerate.py,
# after a tqdm bar on the same line), "[rank0] step:  3  loss: ..." (fsdp_loop.py, as torchtitan-style recipes log)
_STEP = re.compile(r"(?:^|[\r\]]|\] )step:? +(\d+)(?:/\d+)?[ :]")
_HF_STEP = re.compile(r"'loss':|\{'train_runtime'")


def steps_completed(log: str) -> int:
    n = 0
    for line in log.splitlines():
        m = _STEP.search(line)
        if m:
            n = max(n, int(m.group(1)))
        elif "'loss':" in line:
            n += 1
    return n


def cmd_merge(src: str, specs_path: str) -> int:
    specs = {s["name"]: s for s in json.loads(Path(specs_path).read_text())}
    results = json.loads((Path(src) / "reruns" / "results.json").read_text())
    for name, rec in results["runs"].items():
        cap_path = SAMPLES / name / "capture.json"
        capture = json.loads(cap_path.read_text())
        log_path = Path(src) / "reruns" / name / "run.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        capture["rerun_validation"] = {
            "outcome": rec.get("outcome"), "exit_code": rec.get("exit_code"), "seconds": rec.get("seconds"),
            "steps_completed": steps_completed(log), "command": rec.get("command"),
            "plan": specs[name]["plan"], "log_tail": rec.get("log_tail"),
            "environment": results.get("environment")}
        cap_path.write_text(json.dumps(capture, indent=2))
        print(f"{name}: {rec.get('outcome')}, {capture['rerun_validation']['steps_completed']} steps")
    for name, why in NOT_RUNNABLE.items():
        cap_path = SAMPLES / name / "capture.json"
        if cap_path.exists():
            capture = json.loads(cap_path.read_text())
            capture["rerun_validation"] = {"outcome": "not run", "reason": why}
            cap_path.write_text(json.dumps(capture, indent=2))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("-o", "--out", default="reruns.json")
    p.add_argument("--only", default="", help="comma-separated scenario names")
    m = sub.add_parser("merge")
    m.add_argument("src")
    m.add_argument("--specs", default="reruns.json")
    a = ap.parse_args()
    if a.cmd == "plan":
        return cmd_plan(a.out, {x for x in a.only.split(",") if x} or None)
    return cmd_merge(a.src, a.specs)


if __name__ == "__main__":
    raise SystemExit(main())
