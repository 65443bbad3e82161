"""oompost.record without a GPU: the API, the CLI, the files it writes (with a
stand-in for torch.cuda), and that analyze reads them (leak vs spike from the
per-step JSONL alone)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import oompost
from oompost import record as rec_mod
from oompost.parsers.snapshot import load_snapshot

SRC = str(Path(__file__).resolve().parents[1] / "src")
GiB = 1024**3


def _cli(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "oompost.record", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_help_prints_usage() -> None:
    r = _cli("--help")
    assert r.returncode == 0
    assert r.stdout.startswith("usage: python -m oompost.record")
    assert "--max-entries" in r.stdout


def test_missing_script_is_one_line() -> None:
    r = _cli("-o", "x", "--", "does_not_exist.py")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["oompost.record: no such script: does_not_exist.py"]


def test_without_cuda_it_says_it_records_nothing_and_runs_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\nraise SystemExit(7)\n")
    r = _cli("-o", str(tmp_path / "cap"), "--", str(script), "--lr", "1")
    assert r.returncode == 7                                  # the script's own exit status
    assert "args ['--lr', '1']" in r.stdout
    assert "recording nothing" in r.stderr
    assert not (tmp_path / "cap").exists()


def test_deepspeed_launcher_local_rank_is_passed_on(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\n")
    r = _cli("--local_rank=3", "-o", str(tmp_path / "cap"), "--", str(script), "--x", "1")
    assert r.returncode == 0, r.stderr
    assert "args ['--local_rank=3', '--x', '1']" in r.stdout


def test_module_is_callable_and_a_context_manager_without_cuda(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with oompost.record(dir=str(tmp_path / "c")) as rec:
            assert isinstance(rec, rec_mod.Recorder)
            assert not rec.enabled
    assert any("records nothing" in str(x.message) for x in w)


# --------------------------------------------------------------- fake CUDA


class FakeCuda:
    """Just enough of torch.cuda for the recorder, driven by the test."""

    def __init__(self, backend: str = "native") -> None:
        self.allocated = 2 * GiB
        self.reserved = 3 * GiB
        self.peak = 2 * GiB
        self.backend = backend
        self.history_calls: list[dict] = []
        mem = types.SimpleNamespace(_record_memory_history=self._history, _snapshot=self._snapshot)
        self.memory = mem

    def _history(self, enabled: object = "all", **kw: object) -> None:
        if self.backend == "cudaMallocAsync" and enabled is not None:
            raise RuntimeError("not supported with cudaMallocAsync")
        self.history_calls.append({"enabled": enabled, **kw})

    def _snapshot(self) -> dict:
        return {"segments": [], "device_traces": [[]]}

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def get_device_properties(self, d: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(name="NVIDIA H200", total_memory=140 * GiB)

    def get_allocator_backend(self) -> str:
        return self.backend

    def memory_stats(self, d: int = 0) -> dict:
        self.peak = max(self.peak, self.allocated)
        return {"allocated_bytes.all.current": self.allocated, "reserved_bytes.all.current": self.reserved,
                "allocated_bytes.all.peak": self.peak, "reserved_bytes.all.peak": self.reserved,
                "num_alloc_retries": 0}


class FakeHook:
    def __init__(self, hooks: list) -> None:
        self.hooks = hooks

    def remove(self) -> None:
        self.hooks.clear()


def fake_torch(backend: str = "native") -> types.SimpleNamespace:
    hooks: list = []
    observers: list = []

    def register_optimizer_step_post_hook(fn):  # type: ignore[no-untyped-def]
        hooks.append(fn)
        return FakeHook(hooks)

    cuda = FakeCuda(backend)
    t = types.SimpleNamespace(
        __version__="2.11.0+cu130", version=types.SimpleNamespace(cuda="13.0"), cuda=cuda,
        optim=types.SimpleNamespace(optimizer=types.SimpleNamespace(
            register_optimizer_step_post_hook=register_optimizer_step_post_hook)),
        _C=types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append),
        distributed=types.SimpleNamespace(is_available=lambda: False))
    t.hooks, t.observers = hooks, observers  # for the test
    return t


@pytest.fixture
def torch_fake(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    t = fake_torch()
    monkeypatch.setattr(rec_mod, "_import_torch", lambda: t)
    monkeypatch.setattr(rec_mod, "_OBSERVER_ATTACHED", False)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    yield t
    rec_mod.disable()


def _optimizer_step(t: types.SimpleNamespace) -> None:
    for h in list(t.hooks):
        h(types.SimpleNamespace(param_groups=[]), (), {})


def test_files_per_rank_and_snapshot_at_oom(tmp_path: Path, torch_fake: types.SimpleNamespace) -> None:
    t = torch_fake
    rec = oompost.record(dir=str(tmp_path))
    assert rec.enabled and rec.history
    # context "alloc": torch's "all" loses an OOM raised in backward's recomputation (docs/record.md)
    assert t.cuda.history_calls[0] == {"enabled": "all", "max_entries": 100_000, "stacks": "python",
                                       "context": "alloc"}
    for _ in range(5):
        t.cuda.allocated += GiB // 2
        _optimizer_step(t)
    t.observers[0](0, 3 * GiB, 23 * GiB, GiB)          # the allocator's OOM observer
    names = sorted(os.listdir(tmp_path))
    assert names == ["meta_rank3.json", "snapshot_rank3_oom.pickle", "steps_rank3.jsonl"]
    lines = [json.loads(x) for x in (tmp_path / "steps_rank3.jsonl").read_text().splitlines()]
    assert lines[0]["schema"] == "oompost.steps/1" and lines[0]["world_size"] == 8
    assert [r["step"] for r in lines[1:6]] == [1, 2, 3, 4, 5]
    assert lines[5]["allocated_gib"] == 4.5 and lines[-1]["event"] == "oom"
    meta = json.loads((tmp_path / "meta_rank3.json").read_text())
    assert meta["schema"] == "oompost.capture/1" and meta["rank"] == 3 and meta["world_size"] == 8
    assert meta["written_at"] == "oom" and meta["gpu"] == "NVIDIA H200"
    snap = load_snapshot(str(tmp_path / "snapshot_rank3_oom.pickle"))   # the restricted unpickler reads it
    assert snap.meta["alloc_size"] == 3 * GiB and snap.meta["limit"] == 23 * GiB
    t.observers[0](0, GiB, 23 * GiB, GiB)              # once: a second OOM writes no second snapshot
    assert len(rec.dumped) == 1


def test_stop_removes_the_hook_and_history(tmp_path: Path, torch_fake: types.SimpleNamespace) -> None:
    with oompost.record(dir=str(tmp_path)) as rec:
        assert torch_fake.hooks
    assert not torch_fake.hooks and not rec.enabled
    assert torch_fake.cuda.history_calls[-1]["enabled"] is None


def test_cuda_malloc_async_warns_and_records_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = fake_torch(backend="cudaMallocAsync")
    monkeypatch.setattr(rec_mod, "_import_torch", lambda: t)
    monkeypatch.setattr(rec_mod, "_OBSERVER_ATTACHED", False)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rec = oompost.record(dir=str(tmp_path))
    try:
        assert any("cudaMallocAsync" in str(x.message) for x in w)
        assert rec.enabled and not rec.history
        _optimizer_step(t)
        assert not t.observers                     # cudaMallocAsync has no OOM observer: not attached
        assert not any(n.startswith("snapshot") for n in os.listdir(tmp_path))
        assert (tmp_path / "steps_rank0.jsonl").exists()
    finally:
        rec.stop()


def test_a_failing_hook_warns_and_never_raises(tmp_path: Path, torch_fake: types.SimpleNamespace) -> None:
    oompost.record(dir=str(tmp_path))

    def boom(d: int = 0) -> dict:
        raise RuntimeError("driver went away")

    torch_fake.cuda.memory_stats = boom
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _optimizer_step(torch_fake)                   # must not raise into the training loop
        _optimizer_step(torch_fake)
    assert len([x for x in w if "driver went away" in str(x.message)]) == 1


def test_step_file_is_bounded(tmp_path: Path, torch_fake: types.SimpleNamespace) -> None:
    oompost.record(dir=str(tmp_path), max_step_lines=50)
    for _ in range(1000):
        _optimizer_step(torch_fake)
    n = len((tmp_path / "steps_rank3.jsonl").read_text().splitlines())
    assert n < 200                                   # thinned, not 1000


def _series(tmp_path: Path, torch_fake: types.SimpleNamespace, allocated_gib: list[float]) -> Path:
    oompost.record(dir=str(tmp_path))
    for a in allocated_gib:
        torch_fake.cuda.allocated = int(a * GiB)
        _optimizer_step(torch_fake)
    rec_mod.disable()
    return tmp_path                                  # no log at all: only what record wrote


def test_analyze_reads_the_step_series(tmp_path: Path, torch_fake: types.SimpleNamespace) -> None:
    from oompost.parsers import parse_paths

    d = _series(tmp_path, torch_fake, [2.0 + 0.6 * i for i in range(12)])
    ev = parse_paths([str(d)])
    steps = [m for m in ev.memory if m.label == "step"]
    assert [m.step for m in steps] == list(range(1, 13))
    assert abs(steps[-1].allocated - 8.6 * GiB) < 0.01 * GiB
    assert all(m.rank == 3 for m in steps)
    kinds = {i.kind.value for i in ev.inputs}
    assert kinds == {"torch_log", "capture_meta"}


def test_snapshot_pickle_is_builtins_only(tmp_path: Path, torch_fake: types.SimpleNamespace) -> None:
    rec = oompost.record(dir=str(tmp_path))
    rec.extra_meta = {"trainer_args": {"optim": "adamw_torch"}}
    path = rec.dump(reason="manual")

    class NoGlobals(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> None:  # type: ignore[override]
            raise AssertionError(f"global {module}.{name} in the snapshot")

    with open(path, "rb") as f:
        data = NoGlobals(f).load()
    assert data["oompost_meta"]["trainer_args"] == {"optim": "adamw_torch"}


def test_hf_callback_drives_the_recorder(tmp_path: Path, torch_fake: types.SimpleNamespace) -> None:
    from oompost.integrations.hf import OompostCallback

    cb = OompostCallback(dir=str(tmp_path))
    args = types.SimpleNamespace(per_device_train_batch_size=4, gradient_accumulation_steps=2, bf16=True,
                                 hf_deepspeed_config=types.SimpleNamespace(config={"zero_optimization": {"stage": 3}}))
    control = object()
    model = types.SimpleNamespace(parameters=lambda: [types.SimpleNamespace(numel=lambda: 1_500_000_000)])
    assert cb.on_train_begin(args, types.SimpleNamespace(global_step=0), control, model=model) is control
    assert not torch_fake.hooks                       # the callback numbers steps itself
    for s in (1, 2, 3):
        cb.on_step_end(args, types.SimpleNamespace(global_step=s), control)
    cb.on_train_end(args, types.SimpleNamespace(global_step=3), control)
    rows = [json.loads(x) for x in (tmp_path / "steps_rank3.jsonl").read_text().splitlines()[1:]]
    assert [r["step"] for r in rows] == [1, 2, 3]
    meta = json.loads((tmp_path / "meta_rank3.json").read_text())
    assert meta["model_params"] == 1_500_000_000
    assert meta["trainer_args"]["per_device_train_batch_size"] == 4
    assert json.loads((tmp_path / "ds_config.json").read_text()) == {"zero_optimization": {"stage": 3}}


def test_the_step_hook_is_the_real_torch_api() -> None:
    """The fake above mirrors torch's global optimizer hook; this checks that
    the real torch has it and calls it on a plain optimizer step."""
    torch = pytest.importorskip("torch")
    seen = []
    h = rec_mod._optim_module(torch).register_optimizer_step_post_hook(lambda opt, a, k: seen.append(type(opt).__name__))
    try:
        p = torch.nn.Parameter(torch.zeros(2))
        p.grad = torch.ones(2)
        torch.optim.AdamW([p]).step()
    finally:
        h.remove()
    assert seen == ["AdamW"]


def test_an_allocator_config_the_allocator_rejects_fails_as_without_the_recorder(
        tmp_path: Path, torch_fake: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on the GPU machine (tests/heldout_captures/config_error_max_split_size_mb_too_small_20g,
    capture.json "first_attempt"): the allocator rejects PYTORCH_CUDA_ALLOC_CONF while it initialises
    inside _record_memory_history; carrying on ended in SIGSEGV.  The job's own first allocation
    raises the same error, so the recorder lets it through instead of a crash without a traceback."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:16")

    def reject(*a: object, **kw: object) -> None:
        raise ValueError("CachingAllocator option max_split_size_mb too small, must be >= 20")

    torch_fake.cuda.memory._record_memory_history = reject
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="max_split_size_mb too small"):
            oompost.record(dir=str(tmp_path))
    assert any("max_split_size_mb:16" in str(x.message) for x in w)


def test_a_torch_that_cannot_record_history_still_records_steps(tmp_path: Path,
                                                                torch_fake: types.SimpleNamespace) -> None:
    def unsupported(*a: object, **kw: object) -> None:
        raise RuntimeError("record_context_cpp is not supported on this platform")

    torch_fake.cuda.memory._record_memory_history = unsupported
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        oompost.record(dir=str(tmp_path))               # a warning, never a crash of the job
        _optimizer_step(torch_fake)
    assert any("allocator history unavailable" in str(x.message) for x in w)
    assert (tmp_path / "steps_rank3.jsonl").exists()
