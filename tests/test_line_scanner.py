"""The line scanner's shape dispatch against the plain definition.

The scanner decides which consumer wants a line from the line's shape (its
digits turned into 0s), works new shapes out together with ``bytes.find``,
hands the direct consumer's lines over in lists and changes groups while it
reads.  Whatever it does inside, what comes out must be what testing every
sentinel on every line gives: the same lines, masks, previous lines and line
numbers, in the same order, with blocks, long lines, carriage returns, digit
sentinels, ``want_all`` stretches and mid-file group changes.
"""

from __future__ import annotations

import random

import pytest

from oompost.sources import LineScanner

WORDS = ["alloc", "reserved", "step", "NCCL", "INFO", "WARN", "137", "-9", "Signal 9", "x1y", "a0b", "[rank3]:",
         "Traceback", "BEGIN", "END", "NARROW", "File \"", "0x7f3a", "GiB", "\r", "seq", "ste", "p", " ", "12",
         "1.5", "-", "9"]
GROUPS = [("alloc", "step"), ("NCCL WARN", "137", "Signal 9"), ("GiB", "-9", "seq", "INFO"), ("Traceback",)]
DIRECT = 0


def _classify(shape: bytes) -> object:
    return len(shape) % 3 if b"step" in shape and b"NCCL" not in shape else None


def _shape(line: bytes) -> bytes:
    return line.translate(bytes.maketrans(b"123456789", b"000000000"))


def _log(rng: random.Random) -> bytes:
    lines = []
    for _ in range(rng.randint(0, 400)):
        n = rng.choice([0, 1, 2, 3, 5, 8, 40])
        line = "".join(rng.choice(WORDS) + rng.choice(["", " ", "0", str(rng.randint(0, 99999))]) for _ in range(n))
        lines.append(line)
    text = "\n".join(lines)
    if rng.random() < 0.7:
        text += "\n"
    return text.encode()


class _Consumer:
    """Reacts to yielded lines as the parser driver does: opens and closes want_all, narrows a group."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.groups = [tuple(g) for g in GROUPS]

    def take(self, items) -> None:  # type: ignore[no-untyped-def]
        self.events.extend(("t", *it) for it in items)

    def react(self, scanner, lineno, raw, prev, mask) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("y", lineno, raw, prev, mask))
        if b"BEGIN" in raw:
            scanner.want_all = True
        elif b"END" in raw:
            scanner.want_all = False
        if b"NARROW" in raw and self.groups[2] != ("seq",):
            self.groups[2] = ("seq",)
            scanner.set_group(2, ("seq",))


def _scan(path, consumer: _Consumer) -> int:  # type: ignore[no-untyped-def]
    sc = LineScanner(path, [tuple(g) for g in GROUPS])
    sc.direct(DIRECT, _classify, consumer.take)
    for lineno, raw, prev, mask in sc:
        consumer.react(sc, lineno, raw, prev, mask)
    return sc.lines_read


def _reference(data: bytes, consumer: _Consumer) -> int:
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()
    want_all = False

    class _S:                                            # what react() needs of a scanner
        def set_group(self, i, sents):  # type: ignore[no-untyped-def]
            consumer.groups[i] = tuple(sents)

    s = _S()
    prev = b""
    for n, line in enumerate(lines, 1):
        mask = 0
        for i, g in enumerate(consumer.groups):
            if any(w.encode() in line for w in g):
                mask |= 1 << i
        raw = line.rstrip(b"\r")
        how = _classify(_shape(line)) if mask == 1 << DIRECT else None
        if how is not None and not want_all:
            consumer.events.append(("t", n, raw, prev, how))
        elif mask or want_all:
            s.want_all = want_all  # type: ignore[attr-defined]
            consumer.react(s, n, raw, prev, mask)
            want_all = s.want_all  # type: ignore[attr-defined]
        prev = line
    return len(lines)


@pytest.mark.parametrize("seed", range(40))
def test_scanner_yields_what_testing_every_line_gives(seed, tmp_path, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(LineScanner, "BLOCK", rng.choice([64, 333, 4096, 2**20]))
    monkeypatch.setattr(LineScanner, "MAX_SHAPE_LEN", rng.choice([20, 4096]))
    monkeypatch.setattr(LineScanner, "MAX_SHAPE_BYTES", rng.choice([300, 2**20]))
    data = _log(rng)
    path = tmp_path / "log.txt"
    path.write_bytes(data)
    got, want = _Consumer(), _Consumer()
    n_got = _scan(path, got)
    n_want = _reference(data, want)
    assert got.events == want.events
    assert n_got == n_want


def test_a_shape_pattern_offers_whole_shapes_until_its_consumer_drops_it(tmp_path):
    # bare-number lines hold no literal: consumer 0 asks for them by shape, reads three, then drops the pattern
    import re

    p = tmp_path / "log"
    p.write_text("a 1\n239657472\nx\n467977216\n694494720 1.5\n923125760\n1150851584\nalloc 5\n")
    sc = LineScanner(str(p), [("zzz",), ("alloc",)], shapes=[re.compile(rb"[ \t]*0+(?:\.0+)?(?:[ \t]+0+(?:\.0+)?)*"),
                                                              None])
    got = []
    for n, raw, _prev, mask in sc:
        got.append((n, mask))
        if mask & 1 and len(got) == 3:
            sc.drop_shape(0)
    assert got == [(2, 1), (4, 1), (5, 1), (8, 2)]
