"""The command line: the only module that prints, writes report files and
chooses exit codes (DESIGN.md: 0 analysed, 1 internal error, 2 usage error,
3 unusable input, 4 scan finished with failed jobs)."""

from __future__ import annotations

import os
import sys
import traceback

import click

from . import __version__
from .errors import InputError, OompostError

FORMATS = ("html", "md", "json")
ALIASES = {"markdown": "md", "htm": "html"}   # the names people type for the same files
EXIT_INTERNAL, EXIT_USAGE, EXIT_INPUT, EXIT_SCAN_PARTIAL = 1, 2, 3, 4


def _formats(value: str) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(ALIASES.get(v, v) for v in (v.strip().lower() for v in value.split(",")) if v))
    bad = [v for v in out if v not in FORMATS]
    if bad or not out:
        raise click.BadParameter(f"choose from {', '.join(FORMATS)} (comma-separated), not {value!r}")
    return out


def write_report(report, out_dir: str, formats: tuple[str, ...], redact: bool) -> list[str]:  # type: ignore[no-untyped-def]
    """Render ``report`` into ``out_dir`` as report.<fmt>; returns the paths written."""
    from .render import render

    if redact:
        from .redact import redact_report

        report = redact_report(report)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for fmt in formats:
        path = os.path.join(out_dir, f"report.{fmt}")
        with open(path, "w", encoding="utf-8") as f:
            f.write(render(report, fmt))
        written.append(path)
    return written


class LazyGroup(click.Group):
    """Subcommands that live in their own modules are imported only when used,
    so ``oompost analyze`` does not pay for DeepSpeed's config tables."""

    LAZY = {"estimate": "oompost.commands.estimate:estimate", "check": "oompost.commands.check:check",
            "scan": "oompost.commands.scan:scan"}
    # The one-line help ``oompost --help`` lists, so that listing the commands
    # imports none of them (the memory model and the lint tables cost ~0.2 s);
    # tests/test_startup.py checks these against the commands' own docstrings.
    LAZY_HELP = {
        "estimate": "Per-GPU memory breakdown of a training set-up and whether it fits.",
        "check": 'Validate CONFIG with the installed DeepSpeed and lint it: typos, keys that do nothing at this '
                 'stage, "auto" leftovers, batch arithmetic, risky buffer sizes.',
        "scan": "Analyse every job under ROOTS (e.g. tonight's failed jobs), in parallel and incrementally; "
                "write an index, a summary table and the history.",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with the lazy commands' help taken from LAZY_HELP."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.LAZY_HELP:
                rows.append((name, self.LAZY_HELP[name]))
                continue
            cmd = super().get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, _short(h, limit) if isinstance(h, str) else h.get_short_help_str(limit))
                                    for name, h in rows])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY:
            import importlib

            mod, attr = self.LAZY[name].split(":")
            return getattr(importlib.import_module(mod), attr)
        return super().get_command(ctx, name)


def _short(text: str, limit: int) -> str:
    """click's own shortening of a help text to ``limit`` characters."""
    from click.utils import make_default_short_help

    return make_default_short_help(text, limit)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oompost")
def cli() -> None:
    """Postmortem analyzer for GPU out-of-memory crashes in large-model training."""


def prepare_output(output: str) -> tuple[str, bool]:
    """Check (before any work) that reports can be written under ``output``:
    an existing file, a missing parent or a directory that cannot be written
    is a usage error.  Returns the directory and whether it was created here."""
    import tempfile

    path = os.path.abspath(output)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{output} exists and is not a directory")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise OutputError(f"cannot write to {output}: its parent directory {parent} does not exist")
    created = not os.path.exists(path)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        if created:
            _remove_empty(path)
        raise OutputError(f"cannot write to {output}: {e.strerror or e}") from None
    return path, created


class OutputError(Exception):
    """An output path that cannot be used (exit 2)."""


def _remove_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def warn_inputs(report) -> None:  # type: ignore[no-untyped-def]
    """Damaged or unreadable inputs, named on stderr (the report lists them too)."""
    for i in report.inputs:
        for w in i.warnings:
            click.echo(f"oompost: warning: {i.path}: {w}", err=True)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--ds-config", type=click.Path(), default=None, help="The run's ds_config.json (if not among PATHS).")
@click.option("-o", "--output", "output", default="oompost-report", show_default=True,
              help="Directory for report.html / report.md / report.json; '-' writes the JSON to stdout.")
@click.option("--format", "fmt", default="html,md,json", show_default=True, help="Comma-separated: html, md (or markdown), json.")
@click.option("--redact", is_flag=True, help="Replace hostnames, IPs, user names, file and directory names in "
                                             "paths, and tokens.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the paths written.")
def analyze(paths: tuple[str, ...], ds_config: str | None, output: str, fmt: str, redact: bool, quiet: bool) -> None:
    """Analyse crash artifacts: logs (any ranks), snapshot pickles, or a directory holding them."""
    formats = _formats(fmt)
    to_stdout = output == "-"
    created = False
    try:
        if to_stdout:
            if formats not in (("json",), FORMATS) and "json" not in formats:
                raise OutputError("-o - writes the JSON report to stdout; --format must include json")
        else:
            output, created = prepare_output(output)
    except OutputError as e:
        click.echo(f"oompost: {e}", err=True)
        sys.exit(EXIT_USAGE)
    from .pipeline import analyze as run_analysis
    from .progress import Progress
    from .render.terminal import short_verdict

    try:
        with Progress("analysing", enabled=not quiet):
            report = run_analysis(list(paths), ds_config=ds_config)
            if to_stdout:
                written = []
                text = _render_one(report, "json", redact)
            else:
                written = write_report(report, output, formats, redact)
    except InputError as e:
        if created:
            _remove_empty(output)
        click.echo(f"oompost: {e}", err=True)
        sys.exit(EXIT_INPUT)
    except OompostError as e:
        click.echo(f"oompost: {e}", err=True)
        sys.exit(e.exit_code)
    except Exception:  # an internal bug: say so, keep the traceback for the ticket
        import traceback

        click.echo("oompost: internal error (please report it with the inputs):", err=True)
        traceback.print_exc()
        sys.exit(EXIT_INTERNAL)
    if not quiet:
        warn_inputs(report)
    if to_stdout:
        if not quiet:
            click.echo(short_verdict(report), err=True)
        click.echo(text, nl=False)
        return
    if not quiet:
        click.echo(short_verdict(report))
    for p in written:
        click.echo(p)


def _render_one(report, fmt: str, redact: bool) -> str:  # type: ignore[no-untyped-def]
    from .render import render

    if redact:
        from .redact import redact_report

        report = redact_report(report)
    return render(report, fmt)


def main() -> None:
    cli(prog_name="oompost")


if __name__ == "__main__":  # pragma: no cover
    main()
