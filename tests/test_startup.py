"""Start-up: nothing is imported or started that the command does not need.

``oompost --help`` lists the subcommands without importing them (their help is
in ``LazyGroup.LAZY_HELP``), ``analyze`` starts the DeepSpeed helper process
only when there is a config to validate, and the helper never outlives
oompost.  Time is measured by ``benchmarks/startup_speed.py``, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from oompost.cli import LazyGroup, cli

ROOT = Path(__file__).parent.parent
SAMPLES = ROOT / "sample_logs"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}

HEAVY = ("oompost.estimate", "oompost.dsconfig", "oompost.commands", "oompost.pipeline", "torch", "deepspeed",
         "pandas", "numpy", "jinja2")


def _modules_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         env=ENV, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_imports_no_subcommand_and_nothing_heavy():
    mods = _modules_after("from oompost.cli import cli\ntry:\n    cli(['--help'], standalone_mode=False)\n"
                          "except SystemExit:\n    pass")
    heavy = [m for m in mods if m.split(".")[0] in HEAVY or any(m.startswith(h + ".") or m == h for h in HEAVY)]
    assert heavy == []


def test_help_lists_every_command_with_its_own_short_help():
    out = subprocess.run([sys.executable, "-m", "oompost", "--help"], env=ENV, capture_output=True, text=True,
                         check=True).stdout
    for name in ("analyze", "scan", "estimate", "check"):
        assert f"  {name} " in out
    group = LazyGroup()
    for name in LazyGroup.LAZY:
        cmd = group.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None
        assert LazyGroup.LAZY_HELP[name] == cmd.get_short_help_str(limit=10_000)


def _helpers(token: str) -> list[int]:
    """Processes started by a test run: they inherit its OOMPOST_TEST_TOKEN."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"OOMPOST_TEST_TOKEN={token}".encode() in env.split(b"\0"):
            found.append(int(pid))
    return found


def _analyze_and_watch(args: list[str], tmp_path: Path) -> tuple[bool, list[int]]:
    """Run ``oompost analyze`` in a child; report whether a validate helper was
    started (seen by the child itself) and which processes remain afterwards."""
    token = uuid.uuid4().hex
    code = ("import sys\nfrom oompost.cli import cli\nimport oompost.dsconfig.validate as v\n"
            "started = []\norig = v._Prefetched.__init__\n"
            "def spy(self):\n    started.append(1)\n    orig(self)\n"
            "v._Prefetched.__init__ = spy\n"
            "import atexit\natexit.register(lambda: print('HELPERS', len(started), file=sys.stderr))\n"
            f"cli({['analyze', *args, '-o', str(tmp_path / 'out'), '--format', 'json']!r}, standalone_mode=True)\n")
    r = subprocess.run([sys.executable, "-c", code], env={**ENV, "OOMPOST_TEST_TOKEN": token},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("HELPERS")][-1]
    return int(line.split()[1]) > 0, _helpers(token)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_no_deepspeed_process_without_a_config(tmp_path):
    started, left = _analyze_and_watch([str(SAMPLES / "fragmentation_dynamic_padding")], tmp_path)
    assert not started
    assert left == []


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_helper_started_for_a_config_and_gone_after_exit(tmp_path):
    pytest.importorskip("deepspeed")
    started, left = _analyze_and_watch([str(SAMPLES / "capacity_zero2_1.5b_3090")], tmp_path)
    assert started
    assert left == []
