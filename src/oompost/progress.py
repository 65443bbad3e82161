"""Progress on a terminal for long work, silent when stderr is not a TTY.

A background thread redraws one status line on stderr ("oompost: analysing…
12 s", then the stage when the pipeline reports one) every half second after
the first two seconds, and erases it when the work ends, so short runs and
piped or redirected output never see it.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

_current: "Progress | None" = None


def stage(text: str) -> None:
    """Name what is being done now (a no-op when nothing is shown)."""
    if _current is not None:
        _current.stage = text


class Progress:
    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None,
                 delay: float = 2.0, interval: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and _isatty(self.stream)
        self.label, self.stage, self.delay, self.interval = label, "", delay, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False

    def __enter__(self) -> "Progress":
        global _current
        if self.enabled:
            _current = self
            self._t0 = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="oompost-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        global _current
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self._shown:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
        _current = None

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        while not self._stop.is_set():
            elapsed = time.monotonic() - self._t0
            what = f" — {self.stage}" if self.stage else ""
            self.stream.write(f"\r\x1b[2Koompost: {self.label}{what}… {elapsed:.0f} s")
            self.stream.flush()
            self._shown = True
            self._stop.wait(self.interval)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
