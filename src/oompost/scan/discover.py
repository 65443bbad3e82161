"""Which directories and files are jobs (the rule the README states).

Walking each ROOT (symlinked directories are not followed; hidden entries
and oompost's own outputs are skipped; at most ``MAX_DEPTH`` levels):

1. A directory holding ``attempt_<k>/`` subdirectories is one job: a
   torchrun ``--log-dir`` run (``<run>/attempt_<k>/<rank>/stdout.log``), all
   attempts included.
2. Slurm output files ``slurm-<id>.out`` / ``.err`` / ``slurm-<id>_<task>.out``
   are grouped by ``<id>``: each group is a job named ``slurm-<id>`` when the
   directory holds more than one id (the usual ``sbatch`` working directory);
   other files beside them belong to no job, subdirectories are walked.
3. Otherwise a directory that directly holds files is one job, with
   everything below it (per-rank log subdirectories, a ``crash/`` capture
   directory written by ``oompost.record``).
4. A directory holding only subdirectories is walked further.
5. At a root that also has subdirectories, loose files other than Slurm
   outputs (a README, a notes file) are not jobs.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

MAX_DEPTH = 8
ATTEMPT = re.compile(r"^attempt_\d+$")
SLURM = re.compile(r"^slurm-(?P<id>\d+)(?:_(?P<task>\d+))?\.(?:out|err|log)(?:\.gz)?$")
_OWN_OUTPUT = {"index.html", "index.json", "index.md", "summary.csv", "summary.parquet", "history.sqlite",
               "history.sqlite-journal", "history.sqlite-wal", "history.sqlite-shm"}


@dataclass(frozen=True)
class Job:
    """One job: a name (relative to its root), the directory it stands for and
    its input files (absolute paths, sorted)."""

    name: str
    root: str
    files: tuple[str, ...] = field(default=())


def _entries(path: str) -> tuple[list[str], list[str]]:
    """(subdirectories, regular files) of ``path``, names sorted, hidden and
    unreadable entries skipped, symlinked directories not followed."""
    dirs: list[str] = []
    files: list[str] = []
    try:
        it = os.scandir(path)
    except OSError:
        return dirs, files
    with it:
        for e in it:
            if e.name.startswith("."):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    dirs.append(e.name)
                elif e.is_file(follow_symlinks=True):      # a symlinked file is read (a loop is an error row)
                    files.append(e.name)
                elif e.is_symlink():
                    files.append(e.name)                    # dangling or looping link: the job reports it
            except OSError:
                continue
    return sorted(dirs), sorted(files)


def _all_files(path: str, depth: int = 0) -> list[str]:
    dirs, files = _entries(path)
    out = [os.path.join(path, f) for f in files]
    if depth < MAX_DEPTH:
        for d in dirs:
            out.extend(_all_files(os.path.join(path, d), depth + 1))
    return out


def _is_output_dir(path: str) -> bool:
    """An oompost scan output directory (never a job)."""
    return os.path.exists(os.path.join(path, "history.sqlite")) and os.path.exists(os.path.join(path, "index.json"))


def find_jobs(roots: list[str], exclude: tuple[str, ...] = ()) -> list[Job]:
    """Every job under ``roots`` (see the module docstring), in a stable order."""
    jobs: list[Job] = []
    skip = {os.path.realpath(x) for x in exclude}
    multi = len(roots) > 1
    for root in roots:
        prefix = os.path.basename(os.path.normpath(root)) if multi else ""
        _walk(root, "", prefix, jobs, skip, depth=0, is_root=True)
    return jobs


def _name(prefix: str, rel: str) -> str:
    parts = [p for p in (prefix, rel) if p]
    return "/".join(parts) or "."


def _walk(path: str, rel: str, prefix: str, jobs: list[Job], skip: set[str], depth: int, is_root: bool) -> None:
    if os.path.realpath(path) in skip or _is_output_dir(path):
        return
    dirs, files = _entries(path)
    files = [f for f in files if f not in _OWN_OUTPUT]
    if any(ATTEMPT.match(d) for d in dirs):                              # rule 1
        jobs.append(Job(_name(prefix, rel) if rel else (prefix or os.path.basename(os.path.normpath(path))),
                        path, tuple(_all_files(path))))
        return
    slurm: dict[str, list[str]] = {}
    for f in files:
        m = SLURM.match(f)
        if m:
            slurm.setdefault(m.group("id"), []).append(f)
    if len(slurm) > 1 or (slurm and is_root and dirs):                    # rule 2
        for sid, names in sorted(slurm.items(), key=lambda kv: int(kv[0])):
            jobs.append(Job(_name(prefix, "/".join(p for p in (rel, f"slurm-{sid}") if p)), path,
                            tuple(os.path.join(path, n) for n in names)))
        if depth < MAX_DEPTH:                  # other files beside several Slurm jobs belong to none
            for d in dirs:
                _walk(os.path.join(path, d), "/".join(p for p in (rel, d) if p), prefix, jobs, skip, depth + 1,
                      False)
        return
    if files and not (is_root and dirs):                                  # rule 3 (rule 5: else ignored)
        name = _name(prefix, rel) if rel else (prefix or os.path.basename(os.path.normpath(os.path.abspath(path))))
        jobs.append(Job(name, path, tuple(_all_files(path))))
        return
    if depth < MAX_DEPTH:                                                 # rule 4
        for d in dirs:
            _walk(os.path.join(path, d), "/".join(p for p in (rel, d) if p), prefix, jobs, skip, depth + 1, False)


def newest_mtime(job: Job) -> float:
    newest = 0.0
    for p in job.files:
        try:
            newest = max(newest, os.stat(p).st_mtime)
        except OSError:
            pass
    return newest


def file_is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False
