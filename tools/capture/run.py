#!/usr/bin/env python
"""Run the capture scenarios (and the estimator matrix) on the GPU machine.

    python tools/capture/run.py --out $OUT --deadline 540 [--only NAME,...] [--matrix] [--scenarios]
    python tools/capture/run.py --reruns reruns.json --out $OUT     (validate rerun plans)
    python tools/capture/run.py --heldout --scenarios --out $OUT     (tests/heldout_captures: scenarios_heldout.py)

Jobs run in parallel on the one GPU within a memory budget (each job declares
the cap it runs under); jobs that must fill the card run alone at the end.
Every job leaves a directory with run.log (stdout+stderr as the user's
terminal would show them), capture.json (provenance) and, for scenarios,
expected.json plus any snapshot pickle.  Results are packed into at most
eight .tar.gz files under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import asdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from scenarios import Run, Scenario, matrix, scenarios  # noqa: E402

GiB = 1024**3
GPU_BUDGET_GIB = 132.0          # an H200 (139 GiB) less room for the CUDA contexts; main() sizes it to the card
GPU_RESERVE_GIB = 7.0
HOST_BUDGET_GIB = 100.0
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda,
                    gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                    gpu_total_bytes=torch.cuda.get_device_properties(0).total_memory
                    if torch.cuda.is_available() else None,
                    nccl=".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None)
    except Exception as e:  # pragma: no cover - machine facts
        info["torch_error"] = str(e)
    for mod in ("transformers", "deepspeed", "accelerate", "peft"):
        try:
            m = __import__(mod)
            info[mod] = getattr(m, "__version__", "?")
        except Exception as e:
            info[mod] = f"unavailable: {type(e).__name__}"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        info["nvidia_smi"] = smi.stdout.strip()
    except Exception:
        pass
    return info


def card_budget_gib(env_info: dict[str, Any]) -> float:
    """The memory that concurrent runs may declare on this card: its size less room for the CUDA contexts.
    (The twentieth held-out set packed runs by an H200's 139 GiB on an 80 GB H100 and filled the real card.)"""
    total = env_info.get("gpu_total_bytes")
    return max(1.0, total / GiB - GPU_RESERVE_GIB) if total else GPU_BUDGET_GIB


class Budget:
    """GPU/host memory accounting so parallel jobs never exceed the card."""

    def __init__(self, gpu_budget_gib: float = GPU_BUDGET_GIB) -> None:
        self.cv = threading.Condition()
        self.cap = gpu_budget_gib
        self.gpu = gpu_budget_gib
        self.host = HOST_BUDGET_GIB
        self.running = 0

    def acquire(self, run: Run, deadline: float) -> bool:
        need_gpu = self.cap if run.exclusive else min(run.gpu_gib, self.cap)
        with self.cv:
            while not (self.gpu >= need_gpu and self.host >= min(run.host_gib, HOST_BUDGET_GIB)):
                if time.time() + 20 > deadline:
                    return False
                self.cv.wait(timeout=2)
            self.gpu -= need_gpu
            self.host -= min(run.host_gib, HOST_BUDGET_GIB)
            self.running += 1
            return True

    def release(self, run: Run) -> None:
        with self.cv:
            self.gpu += self.cap if run.exclusive else min(run.gpu_gib, self.cap)
            self.host += min(run.host_gib, HOST_BUDGET_GIB)
            self.running -= 1
            self.cv.notify_all()


_PORT = [29500]
_PORT_LOCK = threading.Lock()


def next_port() -> int:
    with _PORT_LOCK:
        _PORT[0] += 1
        return _PORT[0]


def command(run: Run, job_dir: str) -> list[str]:
    script = os.path.join(HERE, run.script)
    args = [a.replace("{job}", job_dir).replace("{here}", HERE) for a in run.args]
    if run.ds_config is not None and run.launcher != "bash":
        args += ["--deepspeed", os.path.join(job_dir, "ds_config.json")]
    if run.capture and run.launcher != "bash":
        args += ["--oompost_capture", job_dir, "--max_entries", str(run.max_entries)]
    port = str(next_port())
    if run.launcher == "python":
        return [sys.executable, script] + args
    if run.launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(run.nproc),
                "--master_port", port, script] + args
    if run.launcher == "accelerate":
        return [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(run.nproc),
                "--mixed_precision", "bf16", "--main_process_port", port, script] + args
    if run.launcher == "deepspeed":
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "1", "--master_port", port,
                script] + args
    if run.launcher == "bash":
        return ["bash", script] + args
    raise ValueError(run.launcher)


def execute(run: Run, job_dir: str, budget: Budget, deadline: float, extra_env: dict | None = None) -> dict:
    """Run one process tree; returns the provenance record."""
    os.makedirs(job_dir, exist_ok=True)
    if run.ds_config is not None:
        with open(os.path.join(job_dir, "ds_config.json"), "w") as f:
            json.dump(run.ds_config, f, indent=2)
    rec: dict[str, Any] = {"launcher": run.launcher, "env": {**run.env, **(extra_env or {})}}
    if not budget.acquire(run, deadline):
        rec.update(outcome="skipped", reason="deadline")
        return rec
    try:
        cmd = command(run, job_dir)
        env = {**os.environ, **SAFE_ENV, **run.env, **(extra_env or {}), "JOB": job_dir,
               "PYTHONPATH": os.pathsep.join(p for p in ["/tmp/site", os.path.join(REPO, "src"),
                                                         os.environ.get("PYTHONPATH", "")] if p)}
        if run.launcher == "bash":
            env["MASTER_PORT"] = str(next_port())
        env.setdefault("OMP_NUM_THREADS", "4")
        rec["command"] = " ".join(shlex.quote(c.replace(REPO + "/", "")) for c in cmd)
        limit = max(10, min(run.timeout, int(deadline - time.time())))
        t0 = time.time()
        with open(os.path.join(job_dir, "run.log"), "wb") as logf:
            proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=job_dir,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                rc = proc.wait()
                timed_out = True
        rec.update(exit_code=rc, seconds=round(time.time() - t0, 1), timed_out=timed_out)
        log = open(os.path.join(job_dir, "run.log"), "rb").read().decode("utf-8", "replace")
        rec["outcome"] = ("timeout" if timed_out else
                          "oom" if ("out of memory" in log or "OutOfMemoryError" in log) and rc != 0 else
                          "completed" if rc == 0 else "failed")
        m = os.path.join(job_dir, "measured.json")
        if os.path.exists(m):
            rec["measured"] = json.load(open(m))
    finally:
        budget.release(run)
    return rec


def write_json(path: str, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)


def run_scenario(sc: Scenario, out: str, budget: Budget, deadline: float, env_info: dict) -> None:
    job = os.path.join(out, "jobs", sc.name)
    os.makedirs(job, exist_ok=True)
    record: dict[str, Any] = {"schema": "oompost.capture/1", "scenario": sc.name, "description": sc.description,
                              "environment": env_info, "counterfactuals": []}
    run = sc.run
    if sc.fragmentation_search:
        run, search, rec, src = fragmentation_search(sc, out, budget, deadline)
        record["fragmentation_search"] = search
        if run is None:
            record["outcome"] = "not reproduced"
            write_json(os.path.join(job, "capture.json"), record)
            return
        for name in os.listdir(src):          # the OOM run found by the search is the scenario
            if name != "measured.json":
                shutil.move(os.path.join(src, name), os.path.join(job, name))
    else:
        rec = execute(run, job, budget, deadline)
    shutil.rmtree(os.path.join(job, "hf_out"), ignore_errors=True)
    record.update(rec)
    record["run"] = {k: v for k, v in asdict(run).items() if k != "ds_config"}
    for label, cf in sc.counterfactuals:
        cdir = os.path.join(out, "jobs", sc.name + "__cf" + str(len(record["counterfactuals"])))
        crec = execute(cf, cdir, budget, deadline)
        crec["setting"] = label
        crec["log_tail"] = tail(os.path.join(cdir, "run.log"))
        record["counterfactuals"].append(crec)
        shutil.rmtree(cdir, ignore_errors=True)
    if sc.fragmentation_search and record.get("fragmentation_search", {}).get("expandable_capped"):
        record["counterfactuals"].append(record["fragmentation_search"]["expandable_capped"])
    write_json(os.path.join(job, "capture.json"), record)
    write_json(os.path.join(job, "expected.json"), {"schema": "oompost.expected/1", **sc.expected})


def tail(path: str, n: int = 8) -> list[str]:
    try:
        return open(path, errors="replace").read().splitlines()[-n:]
    except OSError:
        return []


def fragmentation_search(sc: Scenario, out: str, budget: Budget, deadline: float):
    """Find a cap where the native allocator OOMs but expandable segments fit:
    measure both uncapped, cap just above the expandable peak, confirm both."""
    base = sc.run
    search: dict[str, Any] = {}
    variants = sc.search_variants or [base.args, base.args + ["--attn_implementation", "eager"]]
    for vi, args in enumerate(variants):
        peaks = {}
        threads = []
        for conf in ("native", "expandable"):
            d = os.path.join(out, "search", f"{sc.name}_{vi}_{conf}")
            # uncapped in spirit, but bounded so a parallel job can never take the card from another
            r = Run(base.launcher, base.script, args + ["--report", "{job}/measured.json",
                                                        "--memory_limit_gib", str(base.gpu_gib)],
                    gpu_gib=base.gpu_gib, host_gib=base.host_gib, capture=False, timeout=base.timeout)
            env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"} if conf == "expandable" else {}

            def go(r=r, d=d, env=env, conf=conf):
                peaks[conf] = execute(r, d, budget, deadline, env)
            t = threading.Thread(target=go)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        search[f"variant{vi}_uncapped"] = {k: {kk: vv for kk, vv in v.items() if kk != "env"}
                                           for k, v in peaks.items()}
        try:
            pn = peaks["native"]["measured"]["max_reserved"]
            pe = peaks["expandable"]["measured"]["max_reserved"]
        except KeyError:
            continue
        search[f"variant{vi}_gap"] = (pn - pe) / pe
        if pn < pe * 1.02:
            continue
        for margin in (0.02, 0.005):
            cap_gib = round(pe * (1 + margin) / GiB, 3)
            run = Run(base.launcher, base.script, args + ["--memory_limit_gib", str(cap_gib)],
                      gpu_gib=cap_gib + 1, host_gib=base.host_gib, max_entries=base.max_entries,
                      timeout=base.timeout)
            d = os.path.join(out, "search", f"{sc.name}_{vi}_native_cap{margin}")
            rec = execute(run, d, budget, deadline)
            search[f"variant{vi}_native_cap_{margin}"] = {k: v for k, v in rec.items() if k != "env"}
            if rec.get("outcome") != "oom":
                continue
            cf = Run(base.launcher, base.script, args + ["--memory_limit_gib", str(cap_gib)], gpu_gib=cap_gib + 1,
                     host_gib=base.host_gib, capture=False, timeout=base.timeout)
            d2 = os.path.join(out, "search", f"{sc.name}_{vi}_expandable_cap{margin}")
            crec = execute(cf, d2, budget, deadline, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
            crec["setting"] = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (same cap)"
            crec["log_tail"] = tail(os.path.join(d2, "run.log"))
            search["expandable_capped"] = crec
            search["chosen"] = {"variant": vi, "margin": margin, "cap_gib": cap_gib,
                                "native_uncapped_peak": pn, "expandable_uncapped_peak": pe}
            if crec.get("outcome") == "completed":
                return run, search, rec, d
    return None, search, None, None


def run_batch(runs: list[tuple[str, Run, dict]], out: str, sub: str, budget: Budget, deadline: float,
              env_info: dict, tail_lines: int) -> None:
    """Run independent jobs in parallel (within the budget); write <sub>/results.json."""
    threads = []
    results: dict[str, Any] = {}
    for name, run, extra in runs:
        d = os.path.join(out, sub, name)

        def go(name=name, run=run, d=d, extra=extra):
            rec = execute(run, d, budget, deadline)
            rec["log_tail"] = tail(os.path.join(d, "run.log"), tail_lines)
            results[name] = {**rec, **extra}
        t = threading.Thread(target=go)
        t.start()
        threads.append(t)
        time.sleep(0.2)
    for t in threads:
        t.join()
    write_json(os.path.join(out, sub, "results.json"), {"environment": env_info, "runs": results})


def run_matrix(out: str, budget: Budget, deadline: float, env_info: dict, only: set[str] | None) -> None:
    runs = [(name, run, {"ds_config": run.ds_config, "args": run.args}) for name, run in matrix()
            if not only or name in only]
    run_batch(runs, out, "matrix", budget, deadline, env_info, 4)


def run_reruns(spec_path: str, out: str, budget: Budget, deadline: float, env_info: dict) -> None:
    """Each entry: {name, launcher, script, args, env, ds_config, gpu_gib, host_gib, timeout}."""
    runs = [(spec["name"], Run(spec["launcher"], spec["script"], spec.get("args", []), spec.get("env", {}),
                               spec.get("ds_config"), spec.get("gpu_gib", 24), spec.get("host_gib", 8),
                               spec.get("timeout", 300), capture=False, exclusive=spec.get("exclusive", False)), {})
            for spec in json.load(open(spec_path))]
    run_batch(runs, out, "reruns", budget, deadline, env_info, 6)


def pack(out: str, dest: str, bin_bytes: int = 15 * 2**20, max_files: int = 8) -> None:
    """Gzip-tar the job tree into at most `max_files` archives of <= bin_bytes."""
    import gzip

    files = []
    for root, _, names in os.walk(out):
        for n in names:
            p = os.path.join(root, n)
            if p.endswith(".tar.gz"):
                continue
            files.append(p)
    sized = []
    for p in files:
        raw = open(p, "rb").read()
        sized.append((len(gzip.compress(raw, 6)), p))
    sized.sort(reverse=True)
    bins: list[list] = []
    for size, p in sized:
        for b in bins:
            if b[0] + size <= bin_bytes:
                b[0] += size
                b[1].append(p)
                break
        else:
            bins.append([size, [p]])
    for i, (_, members) in enumerate(bins[:max_files]):
        with tarfile.open(os.path.join(dest, f"capture_{i}.tar.gz"), "w:gz") as tf:
            for p in members:
                tf.add(p, arcname=os.path.relpath(p, out))
    if len(bins) > max_files:
        print(f"WARNING: {len(bins) - max_files} archive bins dropped", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=540, help="seconds from start")
    ap.add_argument("--only", default="", help="comma-separated scenario / matrix names")
    ap.add_argument("--scenarios", action="store_true")
    ap.add_argument("--matrix-only", default="", help="comma-separated matrix run names")
    ap.add_argument("--matrix", action="store_true")
    ap.add_argument("--skip-exclusive", action="store_true", help="leave out scenarios that fill the card")
    ap.add_argument("--reruns", default=None)
    ap.add_argument("--heldout", action="store_true",
                    help="run the held-out scenarios (scenarios_heldout.py, tests/heldout_captures) instead")
    args = ap.parse_args()
    t_start = time.time()
    deadline = t_start + args.deadline
    work = os.path.join("/tmp", "oompost_capture")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env_info = environment()
    write_json(os.path.join(work, "environment.json"), env_info)
    print(json.dumps(env_info), flush=True)
    budget = Budget(card_budget_gib(env_info))
    print(f"GPU budget for concurrent runs: {budget.cap:.1f} GiB", flush=True)
    only = {x for x in args.only.split(",") if x} or None
    threads = []
    if args.scenarios:
        if args.heldout:
            from scenarios_heldout import heldout_scenarios
            pool = heldout_scenarios()
        else:
            pool = scenarios()
        todo = sorted((s for s in pool if not only or s.name in only), key=lambda s: s.priority)
        shared = [s for s in todo if not s.run.exclusive]
        alone = [] if args.skip_exclusive else [s for s in todo if s.run.exclusive]
        for sc in alone:                      # these fill the card: run them alone, first
            run_scenario(sc, work, budget, deadline, env_info)
        for sc in shared:
            t = threading.Thread(target=run_scenario, args=(sc, work, budget, deadline, env_info), daemon=True)
            t.start()
            threads.append(t)
            time.sleep(0.5)
    if args.matrix:
        monly = {x for x in args.matrix_only.split(",") if x} or None
        t = threading.Thread(target=run_matrix, args=(work, budget, deadline, env_info, monly), daemon=True)
        t.start()
        threads.append(t)
    if args.reruns:
        t = threading.Thread(target=run_reruns, args=(args.reruns, work, budget, deadline, env_info), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=max(1, deadline - time.time()))
    status = {}
    for root in ("jobs", "matrix", "reruns"):
        d = os.path.join(work, root)
        if os.path.isdir(d):
            for name in sorted(os.listdir(d)):
                cj = os.path.join(d, name, "capture.json")
                if os.path.exists(cj):
                    c = json.load(open(cj))
                    status[name] = (c.get("outcome"), c.get("exit_code"), c.get("seconds"),
                                    [(x.get("setting"), x.get("outcome")) for x in c.get("counterfactuals", [])])
    print(json.dumps(status, indent=1), flush=True)
    for sub in ("matrix", "reruns"):
        rj = os.path.join(work, sub, "results.json")
        if os.path.exists(rj):
            r = json.load(open(rj))["runs"]
            print(sub, json.dumps({k: (v.get("outcome"), v.get("seconds")) for k, v in r.items()}), flush=True)
    os.makedirs(args.out, exist_ok=True)
    pack(work, args.out)
    print(f"total {time.time() - t_start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
