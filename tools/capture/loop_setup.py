"""The scenario plumbing every capture loop shares: the arguments run.py passes (card or cap, the
recorder's directory, the report file) and starting a run with them (recorder on, memory capped)."""

from __future__ import annotations

import argparse


def add_scenario_args(p: argparse.ArgumentParser, max_entries: int = 15000) -> None:
    p.add_argument("--emulate_card", default=None, help="scenario: cap memory like this card (cards.py)")
    p.add_argument("--memory_limit_gib", type=float, default=None, help="scenario: cap memory at this many GiB")
    p.add_argument("--oompost_capture", default=None, help="dir: dump a memory snapshot at the OOM")
    p.add_argument("--max_entries", type=int, default=max_entries)
    p.add_argument("--report", default=None, help="write measured peaks to this JSON file")


def start_scenario(args: argparse.Namespace, cap: bool = True, log=print) -> int | None:
    """Recorder on (when asked), then the card's cap; returns the allowed bytes (None: uncapped)."""
    from cards import apply_limit

    if args.oompost_capture:
        import oompost.record

        oompost.record.enable(args.oompost_capture, max_entries=args.max_entries)
    return apply_limit(args.emulate_card, args.memory_limit_gib, log) if cap else None
