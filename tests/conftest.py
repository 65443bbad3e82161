"""Shared fixtures: the real torch 2.11 snapshot fixtures (H200), gzipped copies of
shared/reference/snapshots so a fresh clone has them."""

from __future__ import annotations

from pathlib import Path

import pytest

from oompost.model import Snapshot
from oompost.parsers.snapshot import load_snapshot

DATA = Path(__file__).parent / "data" / "snapshots"


@pytest.fixture(scope="session")
def native() -> Snapshot:
    return load_snapshot(str(DATA / "torch2.11_native_fragmentation_oom_observer.pickle.gz"))


@pytest.fixture(scope="session")
def exp_obs() -> Snapshot:
    return load_snapshot(str(DATA / "torch2.11_expandable_capacity_oom_observer.pickle.gz"))


@pytest.fixture(scope="session")
def exp_after() -> Snapshot:
    return load_snapshot(str(DATA / "torch2.11_expandable_capacity_after_exception.pickle.gz"))
