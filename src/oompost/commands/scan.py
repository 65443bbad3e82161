"""``oompost scan``: the nightly triage of a directory tree of failed jobs."""

from __future__ import annotations

import os
import sys

import click

EXIT_INPUT, EXIT_SCAN_PARTIAL = 3, 4


def _formats(value: str) -> tuple[str, ...]:
    from ..cli import _formats as parse

    return parse(value)


@click.command()
@click.argument("roots", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "output", required=True,
              help="Directory for one report per job, index.html, summary.csv/.parquet and history.sqlite.")
@click.option("--since", default=None, help="Only jobs with files modified within this window (e.g. 24h, 7d, 90m).")
@click.option("--pattern", default=None, help="Only jobs whose name matches this glob (e.g. 'llm-*').")
@click.option("-j", "--jobs", "jobs", type=click.IntRange(1, 4096), default=None,
              help="Worker processes (default: all cores).")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="local worker processes, or a Dask cluster.")
@click.option("--scheduler", default=None, help="Dask scheduler address (tcp://host:8786); without it a LocalCluster.")
@click.option("--format", "fmt", default="html,md,json", show_default=True, help="Report formats per job.")
@click.option("--redact", is_flag=True, help="Redact host names, IPs, user names and tokens in reports and index.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary (cron); the exit status still says.")
def scan(roots: tuple[str, ...], output: str, since: str | None, pattern: str | None, jobs: int | None,
         executor: str, scheduler: str | None, fmt: str, redact: bool, quiet: bool) -> None:
    """Analyse every job under ROOTS (e.g. tonight's failed jobs), in parallel and
    incrementally; write an index, a summary table and the history.

    Exit status: 0 all analysed, 3 a root is missing, 4 some job failed to analyse."""
    from ..scan import parse_window, run_scan

    formats = _formats(fmt)
    try:
        window = parse_window(since) if since else None
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--since") from None
    if scheduler and executor != "dask":
        raise click.BadParameter("--scheduler needs --executor dask", param_hint="--scheduler")
    missing = [r for r in roots if not os.path.isdir(r)]
    if missing:
        click.echo(f"oompost: not a directory: {', '.join(missing)}", err=True)
        sys.exit(EXIT_INPUT)
    bars: list = []
    progress = None
    if not quiet and sys.stderr.isatty():
        from tqdm import tqdm

        def progress(done: int, total: int) -> None:
            if not bars:                        # made once the number of jobs is known
                bars.append(tqdm(total=total, unit="job", desc="oompost scan", file=sys.stderr,
                                 dynamic_ncols=True))
            bars[0].n = done
            bars[0].refresh()
    try:
        result = run_scan(list(roots), output, formats=formats, since_seconds=window, pattern=pattern,
                          redact=redact, jobs=jobs, executor=executor, scheduler=scheduler, progress=progress)
    except RuntimeError as e:
        click.echo(f"oompost: {e}", err=True)
        sys.exit(EXIT_INPUT)
    finally:
        for b in bars:
            b.close()
    if not quiet:
        for line in result.summary_lines():
            click.echo(line)
    if result.failed:
        sys.exit(EXIT_SCAN_PARTIAL)
