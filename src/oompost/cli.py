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
EXIT_INTERNAL, EXIT_INPUT, EXIT_SCAN_PARTIAL = 1, 3, 4


def _formats(value: str) -> tuple[str, ...]:
    out = tuple(v.strip().lower() for v in value.split(",") if v.strip())
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

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY:
            import importlib

            mod, attr = self.LAZY[name].split(":")
            return getattr(importlib.import_module(mod), attr)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oompost")
def cli() -> None:
    """Postmortem analyzer for GPU out-of-memory crashes in large-model training."""


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--ds-config", type=click.Path(), default=None, help="The run's ds_config.json (if not among PATHS).")
@click.option("-o", "--output", "output", default="oompost-report", show_default=True,
              help="Directory for report.html / report.md / report.json.")
@click.option("--format", "fmt", default="html,md,json", show_default=True, help="Comma-separated: html, md, json.")
@click.option("--redact", is_flag=True, help="Replace hostnames, IPs, user names in paths and tokens.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the paths written.")
def analyze(paths: tuple[str, ...], ds_config: str | None, output: str, fmt: str, redact: bool, quiet: bool) -> None:
    """Analyse crash artifacts: logs (any ranks), snapshot pickles, or a directory holding them."""
    formats = _formats(fmt)
    from .pipeline import analyze as run_analysis
    from .render.terminal import short_verdict

    try:
        report = run_analysis(list(paths), ds_config=ds_config)
        written = write_report(report, output, formats, redact)
    except InputError as e:
        click.echo(f"oompost: {e}", err=True)
        sys.exit(EXIT_INPUT)
    except OompostError as e:
        click.echo(f"oompost: {e}", err=True)
        sys.exit(e.exit_code)
    except Exception:  # an internal bug: say so, keep the traceback for the ticket
        click.echo("oompost: internal error (please report it with the inputs):", err=True)
        traceback.print_exc()
        sys.exit(EXIT_INTERNAL)
    if not quiet:
        click.echo(short_verdict(report))
    for p in written:
        click.echo(p)


def main() -> None:
    cli(prog_name="oompost")


if __name__ == "__main__":  # pragma: no cover
    main()
