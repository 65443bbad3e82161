"""What every text parser shares: the line protocol and the evidence builder.

A text parser is a small state machine fed one ``LogLine`` at a time.  It never
raises on a bad line: it records a ``ParseWarning`` and goes on.  Parsers keep
per-rank state because ranks interleave in one file.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Callable, Protocol, TypeVar

from ..model import (DsConfigSeen, Evidence, Fact, Failure, InputInfo, MemoryReading, OomEvent,
                     ParseWarning, RankExit, Snapshot, SourceRef)
from ..sources import LogLine

MAX_REF_TEXT = 400
T = TypeVar("T")


def ref(path: str, ln: LogLine, text: str | None = None) -> SourceRef:
    """A SourceRef for a log line; the quoted text keeps the rank prefix."""
    t = (ln.raw if text is None else text).strip()
    if len(t) > MAX_REF_TEXT:
        t = t[: MAX_REF_TEXT - 1] + "…"
    return SourceRef(path, ln.lineno, t)


def line_rank(ln: LogLine, default: int | None = None) -> int | None:
    """Global rank of a line: its prefix, else the file's rank hint."""
    if ln.rank is not None:
        return ln.rank
    if ln.local_rank is not None:
        return ln.local_rank
    return default


@dataclass
class EvidenceBuilder:
    """Mutable accumulator that parsers append to; ``build()`` freezes it."""

    inputs: list[InputInfo] = field(default_factory=list)
    ooms: list[OomEvent] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    exits: list[RankExit] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    memory: list[MemoryReading] = field(default_factory=list)
    ds_configs: list[DsConfigSeen] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    warnings: list[ParseWarning] = field(default_factory=list)
    stacks: list[tuple[SourceRef, "Stack"]] = field(default_factory=list)
    on_ds_config: "Callable[[], None] | None" = None     # called at the first DeepSpeed config found

    def ds_config(self, seen: DsConfigSeen) -> None:
        self.ds_configs.append(seen)
        if self.on_ds_config is not None:
            hook, self.on_ds_config = self.on_ds_config, None
            hook()

    def fact(self, name: str, value: object, r: SourceRef) -> None:
        self.facts.append(Fact(name, value, r))

    def warn(self, source: str, message: str, line: int | None = None) -> None:
        self.warnings.append(ParseWarning(source, message, line))

    def build(self) -> Evidence:
        return Evidence(
            inputs=tuple(self.inputs), ooms=tuple(self.ooms), failures=tuple(self.failures),
            exits=tuple(self.exits), facts=tuple(self.facts), memory=tuple(self.memory),
            ds_configs=tuple(self.ds_configs), snapshots=tuple(self.snapshots),
            warnings=tuple(self.warnings), stacks=tuple(self.stacks))


def literal_trigger(words: "tuple[str, ...] | list[str]") -> "re.Pattern[str]":
    """One regex matching any of ``words`` (literals), built as a trie so the
    engine tries few branches per position."""
    trie: dict = {}
    for w in set(words):
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return re.compile(build(trie))


_MISS = object()


def memo_by_text(fn: "Callable[[str], T]") -> "Callable[[str], T]":
    """``fn``, a pure function of one line's text, computed once per distinct text: a long log
    repeats the same lines (restarts, config dumps, warnings) thousands of times.  Bounded: texts
    of up to 4,000 characters, 2 million characters remembered at most (then forgotten at once)."""
    cache: dict[str, T] = {}
    held = [0]

    @functools.wraps(fn)
    def wrapper(text: str) -> T:
        got = cache.get(text, _MISS)
        if got is _MISS:
            got = fn(text)
            if len(text) <= 4000:
                if held[0] + len(text) > 2_000_000:
                    cache.clear()
                    held[0] = 0
                cache[text] = got
                held[0] += len(text)
        return got  # type: ignore[return-value]

    return wrapper


class LineParser(Protocol):
    """A text parser.  One instance per input file."""

    def feed(self, ln: LogLine) -> None:
        """Consume one line (prefixes already stripped into ``ln.rank`` etc.)."""

    def finish(self) -> None:
        """End of file: flush any pending multi-line construct."""


def _ignore(sentinels: tuple[str, ...]) -> None:
    pass


def _nothing() -> None:
    pass


class SentinelParser:
    """A single-line parser fed only the lines holding one of its ``SENTINELS`` (literal substrings),
    and the lines whose shape (digits as ``0``) matches ``SHAPE`` whole, when it has one."""

    SENTINELS: tuple[str, ...] = ()
    SHAPE: "re.Pattern[bytes] | None" = None
    busy = False

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: "TracebackTracker | None" = None) -> None:
        self.path = path
        self.out = out
        self.rank_hint = rank_hint
        self.on_narrow: Callable[[tuple[str, ...]], None] = _ignore
        self.on_shape_done: Callable[[], None] = _nothing        # stop offering the lines SHAPE let through
        self.setup()

    def narrow(self, sentinels: tuple[str, ...]) -> None:
        """From now on, offer this parser only the lines holding one of ``sentinels``
        (a subset of ``SENTINELS``: the parser promises that no other line could
        change what it reports).  The line driver binds ``on_narrow``."""
        self.on_narrow(sentinels)

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        cls.TRIGGER = re.compile("|".join(re.escape(s) for s in cls.SENTINELS))

    def setup(self) -> None:
        """Per-file state (subclasses)."""


class ParserFactory(Protocol):
    def __call__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None,
                 tracebacks: "TracebackTracker") -> LineParser: ...


# ------------------------------------------------------------ tracebacks

from ..model import LOST_FRAME, Frame, Stack  # noqa: E402  (kept next to its only user)

_TB_START = "Traceback (most recent call last)"      # rich prints it without the colon, in a box
# A frame as CPython prints it, as IPython prints it ("File /x.py:12, in f(a, b)"), and as rich
# prints it ("/x.py:12 in f", after the box is removed by sources.forum_clean).
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+?)\s*$')
_TB_FRAME_IPY = re.compile(r'^\s*File (?P<file>\S+\.py):(?P<line>\d+), in (?P<name>[\w.<>]+)')
_TB_FRAME_RICH = re.compile(r'^\s*(?P<file>(?:/|~|[A-Za-z]:\\|\.)?\S*?\.py):(?P<line>\d+) in (?P<name>[\w.<>]+)\s*$')
_RICH_CODE = re.compile(r"^\s*(?:❱\s*)?\d+\s")                   # rich's numbered source context
_BOX_ONLY = frozenset("╭╰─╮╯│ ")
_RICH_MARKED = re.compile(r"^\s*❱\s*\d+\s*")                         # "❱  905 │ return t.to(device, ..."


# a CPython frame behind a prefix no launcher rule knows ("node-12: ", "(pid=2345) ", a logger's stamp)
_TB_FRAME_PREFIXED = re.compile(r'^(?P<prefix>[^"]{1,80}?\S)?(?P<sep>\s)\s*File "(?P<file>[^"]+)", line (?P<line>\d+), '
                                r'in (?P<name>.+?)\s*$')


def match_frame(text: str) -> "re.Match[str] | None":
    """A traceback frame line in any of the three layouts, else None."""
    if "File" in text:
        return _TB_FRAME.match(text) or _TB_FRAME_IPY.match(text)
    if ".py:" in text:
        return _TB_FRAME_RICH.match(text)
    return None
_TB_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


# IPython / Jupyter tracebacks: "Cell In[5], line 3", "Input In [5], in <cell line: 3>()",
# "<ipython-input-13-941869335d74> in <cell line: 1>()", "/x/trainer.py in predict(self, ...)", and the
# arrow that marks the frame's line ("----> 1 predictions = ...", "-> 3008 output = eval_loop(")
_IPY_CELL = re.compile(r"^\s*(?:Cell|Input) In\s?\[\s*(?P<cell>\d*)\],? (?:line (?P<line>\d+)|in (?P<name>[^(]+))")
_IPY_OLD_FRAME = re.compile(r"^\s*(?P<file><ipython-input-[\w-]+>|(?:/|~|[A-Za-z]:\\)\S*\.py) in (?P<name>[^(]+?)\(")
_IPY_ARROW = re.compile(r"^\s*-+>\s*(?P<line>\d+)\s(?P<code>.*\S)")


def _ipython_frame(text: str) -> "Frame | None":
    m = _IPY_CELL.match(text)
    if m is not None:
        return Frame(f"Cell In[{m.group('cell')}]", int(m.group("line") or 0), (m.group("name") or "<cell>").strip())
    m = _IPY_OLD_FRAME.match(text)
    if m is not None:
        return Frame(m.group("file"), 0, m.group("name").strip())
    return None


_SRUN_INDENTED = re.compile(r"\s{0,4}(\d{1,5}): (?=\s)")
_SRUN_START = frozenset(" 0123456789")


@dataclass
class _TbState:
    frames: list[Frame] = field(default_factory=list)
    active: bool = False
    expect_code: bool = False
    prefix: str = ""                # a prefix every line of this traceback carries (stripped before reading)
    frame_ln: LogLine | None = None  # the line of the last frame header read


class TracebackTracker:
    """Follows Python tracebacks per rank, so the parser that recognises the
    exception line (an OOM, a DistBackendError, a ValidationError...) can ask
    for the stack that led to it.  Shared by all parsers of one file and fed
    before them."""

    def __init__(self) -> None:
        self._state: dict[int | None, _TbState] = {}
        self._last: dict[int | None, Stack] = {}
        self._closed_at: dict[int | None, int] = {}
        self._exc_text: dict[int | None, str] = {}           # the exception line, its traceback's prefix removed
        self.closed: list[tuple[int, Stack]] = []          # (line where it ended, frames), in file order
        self.cut: list[tuple[Stack, LogLine | None]] = []  # still open at the end of input: exception line lost

    # a frame line also opens a traceback: excerpts pasted into issues often lack the header
    SENTINELS = (_TB_START, 'File "', "File /", ".py:", "❱")
    TRIGGER = re.compile(re.escape(_TB_START))

    @property
    def busy(self) -> bool:
        """A traceback is open on some rank: every line matters until it closes."""
        return any(st.active for st in self._state.values())

    def feed(self, ln: LogLine, rank: int | None) -> None:
        text = ln.text
        if rank is None and text[:1] in _SRUN_START and ": " in text[:12] and (ms := _SRUN_INDENTED.match(text)):
            # srun's "0: " before an indented frame or code line (the launcher rules keep those)
            rank, text = int(ms.group(1)), text[ms.end():]
        st = self._state.get(rank)
        if _TB_START in text:
            st = self._state[rank] = _TbState(active=True, prefix=self._prefix_of(text, text.find(_TB_START)))
            return
        if st is not None and st.active and st.prefix and text.startswith(st.prefix):
            text = text[len(st.prefix):]
        if (st is None or not st.active) and "❱" in text and text.lstrip().startswith("❱"):
            # rich's marked line of an excerpt that kept only the boxes' source context (no frame header): the
            # failing statement, as a traceback whose frame header was lost
            code = _RICH_MARKED.sub("", text).replace("│", " ").strip()
            if code:
                self._last[rank] = Stack((Frame("", 0, LOST_FRAME, " ".join(code.split())[:200]),))
            return
        if st is None or not st.active:
            m = match_frame(text)
            prefix = ""
            if m is None and 'File "' in text:
                mp = _TB_FRAME_PREFIXED.match(text)
                if mp is not None and mp.group("prefix"):
                    prefix = mp.group("prefix") + mp.group("sep")
                    text = text[len(prefix):]
                    m = match_frame(text)
            if m is None:
                return
            st = self._state[rank] = _TbState(active=True, prefix=prefix)      # a header-less excerpt
        else:
            m = match_frame(text)
            if m is None:
                fr = _ipython_frame(text)
                if fr is not None:                   # IPython / Jupyter: "Cell In[5], line 3", "<ipython-input-..> in"
                    st.frames.append(fr)
                    st.expect_code = False
                    return
                if st.frames and "->" in text and (ma := _IPY_ARROW.match(text)):
                    last = st.frames[-1]           # IPython's "----> 3 y = model(x)": the frame's own line
                    st.frames[-1] = Frame(last.filename, last.line or int(ma.group("line")), last.name,
                                          ma.group("code").strip()[:200])
                    return
        if m:
            st.frames.append(Frame(m.group("file"), int(m.group("line")), m.group("name")))
            st.expect_code = True
            st.frame_ln = ln
            return
        stripped = text.strip()
        if not stripped or set(stripped) <= _BOX_ONLY or _RICH_CODE.match(text):
            return
        if st.expect_code and text[:1] in (" ", "\t") and stripped and not set(stripped) <= set("^~ "):
            last = st.frames[-1]
            st.frames[-1] = Frame(last.filename, last.line, last.name, stripped[:200])
            st.expect_code = False
            return
        if not stripped or set(stripped) <= set("^~ "):
            return
        if stripped.startswith(("...", "[Previous line repeated")):
            return
        if text[:1] in (" ", "\t") and st.frames and not st.expect_code:
            # an indented line is source, never the exception line: a second one under a frame is the
            # statement of a frame whose header the excerpt lost (its caller's file stands in for it)
            last = st.frames[-1]
            st.frames.append(Frame(last.filename, last.line, LOST_FRAME, stripped[:200]))
            return
        # the exception line ends the traceback
        st.active = False
        self._exc_text[rank] = text
        self._last[rank] = Stack(tuple(st.frames))
        self._closed_at[rank] = ln.lineno
        if st.frames:
            self.closed.append((ln.lineno, self._last[rank]))

    def finish(self, lineno: int) -> None:
        """End of input: a traceback still open (an excerpt cut before its exception line) is kept too."""
        for st in self._state.values():
            if st.active and st.frames:
                st.active = False
                self.closed.append((lineno, Stack(tuple(st.frames))))
                self.cut.append((Stack(tuple(st.frames)), st.frame_ln))

    def stack_for(self, rank: int | None) -> Stack:
        """Frames of the traceback that just ended (or is ending) on this rank."""
        st = self._state.get(rank)
        if st is not None and st.active:
            return Stack(tuple(st.frames))
        return self._last.get(rank, Stack())

    @staticmethod
    def _prefix_of(text: str, start: int) -> str:
        """What stands before the header ("node-12: Traceback ..."): carried by every line of the block."""
        if start <= 0 or start > 80 or '"' in text[:start]:
            return ""
        return text[:start]

    def exception_text(self, rank: int | None, lineno: int, text: str) -> str:
        """The line that closed this rank's traceback here, without the prefix its block carried."""
        if self._closed_at.get(rank) == lineno:
            return self._exc_text.get(rank, text)
        return text

    def closed_on(self, rank: int | None, lineno: int) -> bool:
        """True when a traceback of this rank ended on this line (its exception line)."""
        return self._closed_at.get(rank) == lineno
