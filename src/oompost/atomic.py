"""Write a file atomically: a reader sees the old content or the new, never half of it.

One helper for everything oompost writes that another process may read while
it is written (a scan's reports and tables, the recorder's snapshot and
metadata inside a running job, the estimator cache shared by a scan's
workers): a temporary file in the same directory, then ``os.replace``.
Stdlib only, so that ``oompost.record`` stays cheap to import in a training job.
"""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, data: str | bytes) -> None:
    """``path`` holds ``data`` (str is written as UTF-8) or, if anything fails, what it held before."""
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix="-" + os.path.basename(path)[:40])
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
