"""Turn input files into one ``Evidence``.

Each file is sniffed by content; text files are streamed once through every
text parser (all formats may be interleaved in one log), snapshot pickles go
through the restricted unpickler, JSON configs are loaded as data.  A bad file
becomes a warning on its ``InputInfo``; it never stops the others.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable

from ..errors import InputError
from ..model import DsConfigSeen, Evidence, InputInfo, InputKind, SourceRef
import re

from ..sources import (OUTPUT_KIND, LineScanner, TruncatedInput, decode_line, expand_paths, load_json_object,
                       rank_hint_from_name, sniff)
from .base import EvidenceBuilder, LineParser, TracebackTracker, ref


def _text_parser_factories() -> list:
    # Imported here so that `import oompost` stays cheap.
    from . import autograd_warnings, cues, deepspeed_log, exceptions, failure_lines, launcher, nccl, steps, torch_oom

    return [torch_oom.TorchOomParser, deepspeed_log.DeepSpeedLogParser, nccl.NcclParser,
            launcher.LauncherParser, steps.StepParser, exceptions.ExceptionParser, cues.CueParser,
            failure_lines.FailureLineParser, autograd_warnings.AutogradWarningParser]


def parse_paths(paths: Iterable[str], ds_config: str | None = None,
                on_ds_config: Callable[[], None] | None = None) -> Evidence:
    """Parse every input (directories are walked) into one Evidence.  ``on_ds_config`` is
    called once, as soon as a DeepSpeed config is found (a dump in a log, a file)."""
    out = EvidenceBuilder(on_ds_config=on_ds_config)
    files = expand_paths(list(paths))
    for path in files:
        parse_file(path, out)
    if ds_config is not None:
        _parse_ds_config(ds_config, out, explicit=True)
    return out.build()


def parse_file(path: str, out: EvidenceBuilder) -> None:
    try:
        s = sniff(path)
    except InputError as e:
        out.inputs.append(InputInfo(path, InputKind.UNKNOWN, (str(e),)))
        return
    if s.kind == OUTPUT_KIND:
        return  # our own report / expected.json inside a job directory: not evidence
    kind = InputKind(s.kind)
    if kind is InputKind.SNAPSHOT:
        _parse_snapshot(path, out)
    elif kind is InputKind.DS_CONFIG:
        _parse_ds_config(path, out, explicit=False)
    elif kind is InputKind.CAPTURE_META:
        _parse_capture_meta(path, out)
    elif kind is InputKind.UNKNOWN:
        out.inputs.append(InputInfo(path, kind, (s.reason,) if s.reason else ()))
    else:
        _parse_text(path, kind, out, sniff_note=s.reason)


def _parse_text(path: str, kind: InputKind, out: EvidenceBuilder, sniff_note: str = "") -> None:
    rank_hint = rank_hint_from_name(path)
    tracebacks = TracebackTracker()
    before = _counts(out)
    parsers: list[LineParser] = [f(path, out, rank_hint=rank_hint, tracebacks=tracebacks)
                                 for f in _text_parser_factories()]
    warnings: list[str] = []
    n = 0
    # Most lines of a big log interest no parser.  Each parser declares the literal
    # substrings its patterns need (SENTINELS); the scanner tests them once per line
    # shape, and only the lines holding one -- plus every line while a multi-line
    # block (a traceback, a JSON dump, a ChildFailedError) is open -- are decoded,
    # prefix-stripped and offered to the parsers.  A parser that has found what it
    # looks for narrows its sentinels (``on_narrow``) and stops being offered the rest.
    # bit i of a line's mask: parser i's sentinels occur in it; the last bit: a traceback starts
    scanner = LineScanner(path, [p.SENTINELS for p in parsers] + [TracebackTracker.SENTINELS],
                          shapes=[getattr(p, "SHAPE", None) for p in parsers])
    for i, p in enumerate(parsers):
        if hasattr(p, "on_narrow"):
            p.on_narrow = lambda sentinels, i=i: scanner.set_group(i, sentinels)
        if getattr(p, "SHAPE", None) is not None:
            p.on_shape_done = lambda i=i: scanner.drop_shape(i)
    on_close = [p for p in parsers if p.TRIGGER is None]
    indexed = [(1 << i, p) for i, p in enumerate(parsers) if p.TRIGGER is not None]
    from .steps import StepParser

    steps = next((p for p in parsers if isinstance(p, StepParser)), None)
    if steps is not None:      # step lines (most of a long run's log) go to it in bulk
        scanner.direct(parsers.index(steps), steps.raw_shape, steps.take_raw)  # type: ignore[arg-type]
    # The parsers with a multi-line block open.  A parser's ``busy`` changes only when it is fed,
    # so it is asked only then, not of every parser on every line.
    busy: set[LineParser] = set()
    try:
        for n, raw, prev, mask in scanner:
            for ln in decode_line(n, raw, prev=prev):
                rank = ln.rank if ln.rank is not None else (ln.local_rank if ln.local_rank is not None else rank_hint)
                tracebacks.feed(ln, rank)
                for bit, p in indexed:
                    if mask & bit or p in busy:
                        p.feed(ln)
                        if p.busy:
                            busy.add(p)
                        else:
                            busy.discard(p)
                closed = tracebacks.closed_on(rank, n)
                for p in on_close:
                    if closed or p in busy:
                        p.feed(ln)
                        if p.busy:
                            busy.add(p)
                        else:
                            busy.discard(p)
            scanner.want_all = bool(busy) or tracebacks.busy
        n = scanner.lines_read
    except TruncatedInput as e:
        warnings.append(f"file ends early after line {e.lineno} ({e.reason}); parsed what was there")
    except InputError as e:
        warnings.append(str(e))
    for p in parsers:
        p.finish()
    tracebacks.finish(n)
    out.stacks.extend((SourceRef(path, line, ""), st) for line, st in tracebacks.closed)
    for st, frame_ln in tracebacks.cut[-1:]:
        # an excerpt that ends inside a traceback: the exception line that names the error was not pasted
        last = st.frames[-1]
        out.fact("traceback.cut", f"{last.filename}:{last.line} in {last.name}" + (f": {last.code}" if last.code
                                                                                   else ""),
                 ref(path, frame_ln) if frame_ln is not None else SourceRef(path, n, ""))
    found = _delta(before, _counts(out))
    kind = _refine_kind(kind, found)
    if not any(found.values()):
        warnings.append("no OOM, failure, memory or DeepSpeed lines found" + (f" ({sniff_note})" if sniff_note else ""))
    out.inputs.append(InputInfo(path, kind, tuple(warnings), lines=n, bytes=_size(path)))


def _counts(out: EvidenceBuilder) -> dict[str, int]:
    return {"ooms": len(out.ooms), "failures": len(out.failures), "exits": len(out.exits),
            # cues say where a run was, not what happened to it; a rising memory series is evidence
            "facts": sum(1 for f in out.facts if not f.name.startswith("cue.")
                         or f.name in ("cue.memory_growing", "cue.host_memory_growing")),
            "memory": len(out.memory), "ds": len(out.ds_configs),
            "ds_facts": sum(1 for f in out.facts if f.name.startswith("deepspeed")),
            "nccl": sum(1 for f in out.failures if f.kind.value.startswith("nccl"))
            + sum(1 for f in out.facts if f.name.startswith("nccl"))}


def _delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b[k] - a[k] for k in a}


def _refine_kind(kind: InputKind, found: dict[str, int]) -> InputKind:
    if found["ds"] or found["ds_facts"]:
        return InputKind.DEEPSPEED_LOG
    if found["nccl"]:
        return InputKind.NCCL_LOG
    if kind is InputKind.UNKNOWN and any(found.values()):
        return InputKind.TORCH_LOG
    return kind if kind in (InputKind.TORCH_LOG, InputKind.NCCL_LOG, InputKind.DEEPSPEED_LOG) else InputKind.TORCH_LOG


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _parse_snapshot(path: str, out: EvidenceBuilder) -> None:
    from .snapshot import load_snapshot

    try:
        snap = load_snapshot(path)
    except InputError as e:
        out.inputs.append(InputInfo(path, InputKind.SNAPSHOT, (str(e),), bytes=_size(path)))
        return
    out.snapshots.append(snap)
    out.inputs.append(InputInfo(path, InputKind.SNAPSHOT, snap.warnings, bytes=_size(path)))


def _parse_ds_config(path: str, out: EvidenceBuilder, explicit: bool) -> None:
    try:
        data = load_json_object(path, "DeepSpeed config")
    except InputError as e:
        if explicit:
            raise
        out.inputs.append(InputInfo(path, InputKind.DS_CONFIG, (str(e),)))
        return
    out.ds_config(DsConfigSeen(data, SourceRef(path, None, ""), origin="file"))
    out.inputs.append(InputInfo(path, InputKind.DS_CONFIG, (), bytes=_size(path)))


def _parse_capture_meta(path: str, out: EvidenceBuilder) -> None:
    """oompost's own capture.json (tools/capture): provenance facts, not a verdict."""
    try:
        data = load_json_object(path, "capture metadata")
    except InputError as e:
        out.inputs.append(InputInfo(path, InputKind.CAPTURE_META, (str(e),)))
        return
    r = SourceRef(path, None, "")
    env = data.get("environment", {}) if isinstance(data.get("environment"), dict) else {}
    for key in ("gpu", "torch", "transformers", "deepspeed", "nccl", "emulated_card", "limit_bytes",
                "world_size"):
        if key in data:
            out.fact(f"capture.{key}", data[key], r)
        elif key in env:
            out.fact(f"capture.{key}", env[key], r)
    out.inputs.append(InputInfo(path, InputKind.CAPTURE_META, ()))


def parse_text(text: str, name: str = "log.txt") -> Evidence:
    """Parse a string as if it were a log file (tests, the Python API)."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, os.path.basename(name))
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        ev = parse_paths([p])
    # report the name the caller gave, not the temp path
    return _rename(ev, p, name)


def _rename(ev: Evidence, old: str, new: str) -> Evidence:
    import dataclasses

    def fix(obj):  # type: ignore[no-untyped-def]
        if isinstance(obj, SourceRef):
            return SourceRef(new if obj.source == old else obj.source, obj.line, obj.text)
        if isinstance(obj, InputInfo):
            return dataclasses.replace(obj, path=new if obj.path == old else obj.path)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            changes = {}
            for f in dataclasses.fields(obj):
                v = getattr(obj, f.name)
                nv = fix(v)
                if nv is not v:
                    changes[f.name] = nv
            return dataclasses.replace(obj, **changes) if changes else obj
        if isinstance(obj, tuple):
            items = tuple(fix(x) for x in obj)
            return items if any(a is not b for a, b in zip(items, obj)) else obj
        return obj

    return fix(ev)
