"""Fuzz targets: every parser, fed hypothesis-built inputs.

Each target takes inputs built from real lines of ``sample_logs/`` (whole,
cut, spliced, with junk, ANSI escapes, NUL bytes and invalid UTF-8) or raw
bytes, and runs one parser through the real driver.  The only acceptable
failure is oompost's clear input error (``InputError``); anything else is a
bug.  Used by ``tests/test_fuzz.py`` (a fixed-seed 60-second run in CI) and by
``python -m tests.fuzz.run`` (the long per-parser runs in docs/fuzzing.md;
coverage-guided with atheris when it is installed).
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tempfile
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

from oompost.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_logs"
TEXT_PARSERS = ("torch_oom", "deepspeed_log", "nccl", "launcher", "steps", "exceptions")
TARGETS = (*TEXT_PARSERS, "snapshot", "ds_config", "sniff")


@lru_cache(maxsize=1)
def real_lines() -> tuple[bytes, ...]:
    lines: list[bytes] = []
    for p in sorted(SAMPLES.glob("*/*.log")):
        lines.extend(ln for ln in p.read_bytes().splitlines() if ln.strip())
    return tuple(dict.fromkeys(lines))


@lru_cache(maxsize=None)
def lines_for(parser: str) -> tuple[bytes, ...]:
    """Real lines holding one of the parser's sentinels (plus some others)."""
    cls = _parser_class(parser)
    sentinels = [s.encode() for s in cls.SENTINELS] if getattr(cls, "SENTINELS", None) else []
    mine = [ln for ln in real_lines() if any(s in ln for s in sentinels)] if sentinels else list(real_lines())
    return tuple(mine or real_lines())


def _parser_class(name: str):  # type: ignore[no-untyped-def]
    from oompost.parsers import _text_parser_factories

    by = {c.__module__.rsplit(".", 1)[-1]: c for c in _text_parser_factories()}
    return by[name]


JUNK = st.sampled_from([b"\x00", b"\x1b[31m", b"\x1b[0m", b"\xff\xfe", b"\xc3", b"\r", b"\t", b"}", b"{", b"(",
                        b"[rank3]: ", b"[default0]:", b"0: ", b"node07: ", b"Traceback (most recent call last):",
                        b"  File \"x.py\", line 1, in f", b"GiB", b" = ", b"\xe2\x80", b"9" * 30, b"-1", b"nan",
                        b"<script>alert(1)</script>"])


def line_strategy(pool: tuple[bytes, ...]) -> st.SearchStrategy[bytes]:
    real = st.sampled_from(pool)
    cut = st.tuples(real, st.integers(0, 400), st.integers(0, 400)).map(lambda t: t[0][min(t[1], t[2]):max(t[1], t[2])])
    spliced = st.tuples(real, real, st.integers(0, 200)).map(lambda t: t[0][:t[2]] + t[1][t[2]:])
    junked = st.tuples(real, JUNK, st.integers(0, 200)).map(lambda t: t[0][:t[2]] + t[1] + t[0][t[2]:])
    digits = st.tuples(real, st.integers(0, 10**12)).map(
        lambda t: bytes(c if not chr(c).isdigit() else ord(str(t[1] % 10)) for c in t[0]))
    return st.one_of(real, real, cut, spliced, junked, digits, st.binary(max_size=120),
                     st.text(max_size=80).map(lambda s: s.encode("utf-8", "surrogatepass")))


def text_input(parser: str) -> st.SearchStrategy[bytes]:
    return st.lists(line_strategy(lines_for(parser)), min_size=1, max_size=60).map(b"\n".join)


# ------------------------------------------------------------------ runners


def _tmpfile(data: bytes, suffix: str = ".log") -> str:
    fd, path = tempfile.mkstemp(suffix=suffix, prefix="oompost-fuzz-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def run_text_parser(parser: str, data: bytes) -> None:
    """One parser through the real line driver (sentinel scan, prefix strip, tracebacks)."""
    import oompost.parsers as P
    from oompost.parsers.base import EvidenceBuilder

    cls = _parser_class(parser)
    path = _tmpfile(data)
    saved = P._text_parser_factories
    P._text_parser_factories = lambda: [cls]  # type: ignore[assignment]
    try:
        out = EvidenceBuilder()
        P._parse_text(path, P.InputKind.TORCH_LOG, out)
        out.build()
    except InputError:
        pass
    finally:
        P._text_parser_factories = saved  # type: ignore[assignment]
        os.unlink(path)


@lru_cache(maxsize=1)
def _real_snapshot() -> bytes:
    p = ROOT / "tests" / "data" / "snapshots" / "torch2.11_native_fragmentation_oom_observer.pickle.gz"
    return gzip.decompress(p.read_bytes())


def snapshot_input() -> st.SearchStrategy[bytes]:
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=20),
                     st.binary(max_size=20))
    frame = st.fixed_dictionaries({"filename": st.text(max_size=10), "line": st.integers(-5, 10**6),
                                   "name": st.text(max_size=10)})
    block = st.fixed_dictionaries({"size": st.integers(-10, 2**40), "requested_size": st.integers(-10, 2**40),
                                   "state": st.sampled_from(["active_allocated", "inactive", "active_pending_free",
                                                             "weird"]), "address": st.integers(-1, 2**48),
                                   "frames": st.lists(frame, max_size=3)})
    seg = st.fixed_dictionaries({"device": st.integers(-1, 8), "address": st.integers(-1, 2**48),
                                 "total_size": st.integers(-1, 2**40), "allocated_size": st.integers(-1, 2**40),
                                 "active_size": st.integers(-1, 2**40), "stream": st.integers(-1, 2**40),
                                 "segment_type": st.sampled_from(["large", "small", "?"]),
                                 "segment_pool_id": st.one_of(st.tuples(st.integers(), st.integers()), leaf),
                                 "blocks": st.lists(block, max_size=4)})
    trace = st.fixed_dictionaries({"action": st.sampled_from(["alloc", "free_requested", "free_completed",
                                                               "segment_alloc", "segment_free", "oom", "snapshot",
                                                               "bogus"]),
                                   "addr": st.integers(-1, 2**48), "size": st.integers(-10, 2**40),
                                   "stream": st.integers(-1, 10), "frames": st.lists(frame, max_size=3),
                                   "device_free": st.integers(-1, 2**40), "time_us": st.integers(0, 2**50)})
    structured = st.fixed_dictionaries(
        {"segments": st.one_of(st.lists(seg, max_size=4), leaf),
         "device_traces": st.one_of(st.lists(st.lists(trace, max_size=6), max_size=2), leaf)},
        optional={"allocator_settings": st.dictionaries(st.text(max_size=8), leaf, max_size=3),
                  "oompost_meta": st.dictionaries(st.text(max_size=8), leaf, max_size=4)}
    ).map(lambda d: pickle.dumps(d, protocol=4))
    real = _real_snapshot()
    mutated = st.tuples(st.integers(0, len(real) - 1), st.binary(min_size=1, max_size=8)).map(
        lambda t: real[:t[0]] + t[1] + real[t[0] + len(t[1]):])
    truncated = st.integers(0, len(real)).map(lambda n: real[:n])
    return st.one_of(structured, mutated, truncated, st.binary(max_size=200).map(lambda b: b"\x80\x04" + b))


def run_snapshot(data: bytes) -> None:
    from oompost.parsers.snapshot import load_snapshot

    path = _tmpfile(data, ".pickle")
    try:
        load_snapshot(path)
    except InputError:
        pass
    finally:
        os.unlink(path)


def json_input() -> st.SearchStrategy[bytes]:
    import json

    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                     st.text(max_size=12), st.just("auto"))
    keys = st.sampled_from(["zero_optimization", "stage", "offload_param", "offload_optimizer", "device",
                            "reduce_bucket_size", "allgather_bucket_size", "train_batch_size", "bf16", "fp16",
                            "enabled", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                            "stage3_prefetch_bucket_size", "overlap_comm", "optimizer", "params", "type",
                            "activation_checkpointing", "x"])
    tree = st.recursive(leaf, lambda ch: st.one_of(st.lists(ch, max_size=3), st.dictionaries(keys, ch, max_size=5)),
                        max_leaves=20)
    # the stdlib writes Infinity/NaN and huge ints, which oompost's JSON fallback reads back
    obj = st.dictionaries(keys, tree, min_size=1, max_size=8).map(lambda d: json.dumps(d).encode())
    return st.one_of(obj, obj, st.binary(max_size=100).map(lambda b: b"{" + b))


def run_ds_config(data: bytes) -> None:
    """The config as ``analyze`` reads it (parse + rerun-relevant lint)."""
    from oompost.dsconfig.lint import lint

    path = _tmpfile(data, ".json")
    try:
        from oompost.sources import load_json_object

        cfg = load_json_object(path, "DeepSpeed config")
        lint(cfg)
        lint(cfg, world_size=3, dtype_bytes=2)
    except InputError:
        pass
    finally:
        os.unlink(path)


def any_input() -> st.SearchStrategy[bytes]:
    return st.one_of(text_input("torch_oom"), snapshot_input(), json_input(), st.binary(max_size=300),
                     st.binary(max_size=300).map(lambda b: gzip.compress(b)[: max(1, len(b) // 2)]))


def run_sniff(data: bytes) -> None:
    """Sniffing and the whole parse of one file of any kind (the driver every input meets)."""
    from oompost.parsers import parse_paths

    path = _tmpfile(data, ".gz" if data[:2] == b"\x1f\x8b" else ".log")
    try:
        parse_paths([path])
    except InputError:
        pass
    finally:
        os.unlink(path)


def strategy(target: str) -> st.SearchStrategy[bytes]:
    if target in TEXT_PARSERS:
        return text_input(target)
    return {"snapshot": snapshot_input, "ds_config": json_input, "sniff": any_input}[target]()


def runner(target: str):  # type: ignore[no-untyped-def]
    if target in TEXT_PARSERS:
        return lambda data: run_text_parser(target, data)
    return {"snapshot": run_snapshot, "ds_config": run_ds_config, "sniff": run_sniff}[target]


_ = io  # (kept for atheris' instrumentation of stdlib-free code paths)
