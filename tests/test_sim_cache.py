"""The disk cache of the memory model's replays (``estimate.sim_cache``): what comes back from it
is what the replay gives, a tampered file is never believed, and a scan's workers share it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from oompost.estimate import program, sim_cache
from oompost.estimate.models import preset
from oompost.estimate.setup import TrainSetup
from oompost.units import GiB

SPEC = preset("qwen2.5-0.5b")
SETUP = TrainSetup(zero_stage=2, micro_batch=2, seq_len=512, world_size=2)


@pytest.fixture
def cache_dir(tmp_path: Path):
    program._SIM_CACHE.clear()
    sim_cache.use_dir(tmp_path / "estimator")
    yield tmp_path / "estimator"
    sim_cache.use_dir(None)
    program._SIM_CACHE.clear()


def _files(d: Path) -> list[Path]:
    return sorted(d.rglob("*.json"))


def test_a_result_read_back_equals_the_replay(cache_dir: Path) -> None:
    sim_cache.use_dir(None)
    fresh = program._simulate(SPEC, SETUP, 24 * GiB)
    program._SIM_CACHE.clear()
    sim_cache.use_dir(cache_dir)
    first = program._simulate(SPEC, SETUP, 24 * GiB)          # computed, then written
    assert len(_files(cache_dir)) == 1
    program._SIM_CACHE.clear()                                   # as another worker process would be
    calls = []
    real_run = program._Program.run
    program._Program.run = lambda self: calls.append(1) or real_run(self)  # type: ignore[method-assign]
    try:
        again = program._simulate(SPEC, SETUP, 24 * GiB)
    finally:
        program._Program.run = real_run  # type: ignore[method-assign]
    assert calls == []                                           # read, not replayed
    assert again == first == fresh


def test_another_setup_or_device_is_another_entry(cache_dir: Path) -> None:
    program._simulate(SPEC, SETUP, 24 * GiB)
    program._simulate(SPEC, SETUP, 40 * GiB)
    program._simulate(SPEC, TrainSetup(zero_stage=3, micro_batch=2, seq_len=512, world_size=2), 24 * GiB)
    assert len(_files(cache_dir)) == 3


def test_where_a_spec_came_from_is_not_part_of_the_key(cache_dir: Path) -> None:
    # a spec inferred from a log quotes the log's parameter count in ``source``; the replay does not read it, so
    # jobs of one model share one entry (a scan of 150 jobs had keyed 27 variants of a few models apart)
    from dataclasses import replace

    program._simulate(replace(SPEC, source="preset qwen2.5-0.5b (same parameter count as the log's 494,000,000)"),
                      SETUP, 24 * GiB)
    program._simulate(replace(SPEC, source="config"), SETUP, 24 * GiB)
    assert len(_files(cache_dir)) == 1 and len(program._SIM_CACHE) == 1
    program._simulate(replace(SPEC, layers=SPEC.layers + 1), SETUP, 24 * GiB)
    assert len(_files(cache_dir)) == 2


@pytest.mark.parametrize("tamper", [
    lambda d: {**d, "peak_reserved": "1e99"},
    lambda d: {**d, "live_at_peak": {"weights": 1.5}},
    lambda d: {**d, "oom": ["backward"]},
    lambda d: [1, 2, 3],
])
def test_a_tampered_entry_is_recomputed_not_believed(cache_dir: Path, tamper) -> None:
    good = program._simulate(SPEC, SETUP, 24 * GiB)
    (f,) = _files(cache_dir)
    f.write_bytes(orjson.dumps(tamper(orjson.loads(f.read_bytes()))))
    program._SIM_CACHE.clear()
    assert program._simulate(SPEC, SETUP, 24 * GiB) == good


def test_garbage_and_an_unwritable_directory_only_cost_the_cache(cache_dir: Path, tmp_path: Path) -> None:
    good = program._simulate(SPEC, SETUP, 24 * GiB)
    (f,) = _files(cache_dir)
    f.write_bytes(b"\x80\x04not json")
    program._SIM_CACHE.clear()
    assert program._simulate(SPEC, SETUP, 24 * GiB) == good
    blocker = tmp_path / "file"
    blocker.write_text("")
    sim_cache.use_dir(blocker / "below-a-file")
    program._SIM_CACHE.clear()
    assert program._simulate(SPEC, SETUP, 24 * GiB) == good


def test_the_key_covers_the_code_and_is_the_same_in_every_process() -> None:
    key = (SPEC, SETUP, 24 * GiB, None)
    d1 = sim_cache.digest(key)
    assert d1 is not None and d1 == sim_cache.digest(key)
    old = sim_cache._CODE
    try:
        sim_cache._CODE = "another-version"
        assert sim_cache.digest(key) != d1
    finally:
        sim_cache._CODE = old
    # a set inside the key (hash-seed dependent order in repr) still gives one digest
    assert sim_cache.digest((frozenset({"b", "a", "c"}),)) == sim_cache.digest((frozenset({"c", "a", "b"}),))
    assert sim_cache.digest((2 ** 70,)) is None                 # not encodable: no disk cache, no crash


def test_a_scan_keeps_its_estimator_cache_beside_the_reports(tmp_path: Path) -> None:
    from oompost.scan import run_scan

    root = Path(__file__).resolve().parent.parent / "sample_logs"
    job = next(p for p in sorted(root.iterdir()) if (p / "ds_config.json").exists() and (p / "run.log").exists())
    jobs = tmp_path / "jobs" / job.name
    jobs.mkdir(parents=True)
    (jobs / "run.log").write_bytes((job / "run.log").read_bytes())
    (jobs / "ds_config.json").write_bytes((job / "ds_config.json").read_bytes())
    out = tmp_path / "nightly"
    run_scan([str(tmp_path / "jobs")], str(out), jobs=1)
    assert _files(out / ".cache" / "estimator"), "the scan's workers wrote the replays they ran"
    reports = {p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert reports == {job.name}                                  # the cache is not taken for a job


def test_a_job_uses_the_cache_only_while_it_runs(tmp_path: Path) -> None:
    """In the worker's own process: the job's replays land in the scan's cache, and the cache
    directory is not left switched on for whatever the process does next."""
    from oompost.scan.worker import analyze_job

    job = Path(__file__).resolve().parent.parent / "sample_logs" / "capacity_zero2_offload_7b_3090"
    files = tuple(str(p) for p in sorted(job.iterdir()) if p.name in ("run.log", "ds_config.json"))
    program._SIM_CACHE.clear()
    row = analyze_job("seed", str(job), files, str(tmp_path), "seed", ("json",), False)
    assert row["ok"], row["error"]
    assert _files(tmp_path / ".cache" / "estimator")
    assert not sim_cache.enabled()
