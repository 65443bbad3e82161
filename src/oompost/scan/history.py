"""The scan history: one SQLite database in the output directory.

Embedded (the standard library's sqlite3, nothing to install).  Tables:

- ``scans``   one row per scan: start and end time, roots, counts, status
  (``running`` until it finishes, so an interrupted scan is visible).
- ``results`` one row per job and scan: time, job, cause, confidence, GPU,
  framework, summary, error, whether it was reused from an earlier scan.
  Trends are a query::

      SELECT date(time, 'unixepoch') AS night, cause, count(*) FROM results GROUP BY night, cause;

- ``jobs``    the latest analysis of each job and its input fingerprint (what
  makes the next scan incremental and an interrupted one resumable: each
  job is committed as soon as it is done).
- ``files``   the digest cache of ``fingerprint`` (path, size, mtime, inode).

Only the parent process writes; workers return rows.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS scans (scan_id INTEGER PRIMARY KEY, started REAL, finished REAL, roots TEXT,
    jobs INTEGER, analysed INTEGER, reused INTEGER, failed INTEGER, status TEXT);
CREATE TABLE IF NOT EXISTS results (scan_id INTEGER, time REAL, job TEXT, path TEXT, ok INTEGER, cause TEXT,
    sub_cause TEXT, confidence REAL, gpu TEXT, framework TEXT, summary TEXT, error TEXT, report TEXT,
    reused INTEGER, seconds REAL, PRIMARY KEY (scan_id, job));
CREATE INDEX IF NOT EXISTS results_time ON results (time);
CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, fingerprint TEXT, row TEXT, updated REAL);
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, ino INTEGER,
    digest TEXT);
"""

ROW_FIELDS = ("job", "path", "ok", "cause", "sub_cause", "confidence", "gpu", "framework", "summary", "error",
              "report", "reused", "seconds")


class History:
    def __init__(self, output: str) -> None:
        self.path = os.path.join(output, "history.sqlite")
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self._files: dict[str, tuple[int, int, int, str]] | None = None
        self._new_files: list[tuple[str, int, int, int, str]] = []

    # -------------------------------------------------------------- scans

    def interrupted(self) -> int:
        row = self.db.execute("SELECT count(*) FROM scans WHERE status = 'running'").fetchone()
        return int(row[0])

    def begin(self, roots: list[str]) -> int:
        self.db.execute("UPDATE scans SET status = 'interrupted' WHERE status = 'running'")
        cur = self.db.execute("INSERT INTO scans (started, roots, status) VALUES (?, ?, 'running')",
                              (time.time(), json.dumps(roots)))
        self.db.commit()
        return int(cur.lastrowid or 0)

    def finish(self, scan_id: int, jobs: int, analysed: int, reused: int, failed: int) -> None:
        self.db.execute("UPDATE scans SET finished = ?, jobs = ?, analysed = ?, reused = ?, failed = ?, "
                        "status = 'done' WHERE scan_id = ?", (time.time(), jobs, analysed, reused, failed, scan_id))
        self.flush_files()
        self.db.commit()

    # -------------------------------------------------------------- jobs

    def previous(self) -> dict[str, tuple[str, dict[str, Any]]]:
        return {job: (fp, json.loads(row)) for job, fp, row in self.db.execute("SELECT job, fingerprint, row FROM jobs")}

    def record(self, scan_id: int, fingerprint: str | None, row: dict[str, Any], commit: bool = True) -> None:
        now = time.time()
        self.db.execute(f"INSERT OR REPLACE INTO results (scan_id, time, {', '.join(ROW_FIELDS)}) "
                        f"VALUES (?, ?, {', '.join('?' * len(ROW_FIELDS))})",
                        (scan_id, now, *[_sql(row.get(k)) for k in ROW_FIELDS]))
        if fingerprint is not None and not row.get("reused"):
            self.db.execute("INSERT OR REPLACE INTO jobs (job, fingerprint, row, updated) VALUES (?, ?, ?, ?)",
                            (row["job"], fingerprint, json.dumps(row), now))
        if commit:
            self.db.commit()

    def commit(self) -> None:
        self.db.commit()

    # -------------------------------------------------------------- file digests

    def cached_digest(self, path: str, key: tuple[int, int, int]) -> str | None:
        if self._files is None:
            self._files = {p: (s, m, i, d) for p, s, m, i, d in
                           self.db.execute("SELECT path, size, mtime_ns, ino, digest FROM files")}
        hit = self._files.get(path)
        return hit[3] if hit is not None and hit[:3] == key else None

    def remember_digest(self, path: str, key: tuple[int, int, int], digest: str) -> None:
        self._new_files.append((path, *key, digest))

    def flush_files(self) -> None:
        if self._new_files:
            self.db.executemany("INSERT OR REPLACE INTO files (path, size, mtime_ns, ino, digest) VALUES (?,?,?,?,?)",
                                self._new_files)
            self._new_files.clear()

    # -------------------------------------------------------------- trends

    def cause_trend(self, nights: int = 14) -> list[dict[str, Any]]:
        """Causes per night (local date of the scan) over the last ``nights`` scan nights."""
        rows = self.db.execute(
            "SELECT date(s.started, 'unixepoch', 'localtime') AS night, r.cause, count(*) FROM results r "
            "JOIN scans s ON s.scan_id = r.scan_id WHERE r.ok = 1 AND s.status = 'done' "
            "AND s.scan_id = (SELECT max(s2.scan_id) FROM scans s2 WHERE s2.status = 'done' "
            "AND date(s2.started, 'unixepoch', 'localtime') = date(s.started, 'unixepoch', 'localtime')) "
            "GROUP BY night, r.cause ORDER BY night").fetchall()
        keep = sorted({r[0] for r in rows})[-nights:]
        return [{"night": n, "cause": c, "jobs": k} for n, c, k in rows if n in keep]

    def close(self) -> None:
        self.flush_files()
        self.db.commit()
        self.db.close()


def _sql(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    return v
