"""``oompost check ds_config.json [--world-size N]``: DeepSpeed's verdict plus
lint, before a job is queued.

Exit codes: 0 no errors, 5 DeepSpeed rejects the config or lint found an
error, 3 unreadable input (one-line reason on stderr).  (1 stays what
DESIGN.md makes it for every command: an internal error.)
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import click
import orjson

from ..dsconfig.lint import CheckResult, LintMessage, check_config
from ..errors import InputError

EXIT_CONFIG_ERRORS = 5
_SEVERITY_LABEL = {"error": "ERROR", "warning": "WARN", "info": "info"}


@click.command("check")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("--world-size", "-n", type=click.IntRange(min=1), default=None,
              help="Number of GPUs (data-parallel ranks) the job will run on; checks the batch arithmetic.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@click.option("--hf", "hf_auto", is_flag=True,
              help='The config is passed to the HF Trainer / Accelerate, which fill "auto" values.')
@click.option("--run-version", default=None, metavar="VERSION",
              help="DeepSpeed version the run used (from its log), to flag a different installed version.")
@click.pass_context
def check(ctx: click.Context, config: Path, world_size: int | None, fmt: str, hf_auto: bool,
          run_version: str | None) -> None:
    """Validate CONFIG with the installed DeepSpeed and lint it: typos, keys
    that do nothing at this stage, "auto" leftovers, batch arithmetic, risky
    buffer sizes."""
    try:
        result = check_config(config, world_size, hf_auto=hf_auto, run_version=run_version)
    except InputError as exc:
        click.echo(f"oompost check: {exc}", err=True)
        ctx.exit(3)
        return
    if fmt == "json":
        click.echo(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render_text(result))
    ctx.exit(0 if result.ok else EXIT_CONFIG_ERRORS)


def _verdict(result: CheckResult) -> str:
    """The headline: what DeepSpeed says, for which world size, then what oompost says.
    Without --world-size nothing is guessed: the world sizes the batch keys allow are named."""
    v = result.validation
    allowed = result.allowed_world_sizes
    if result.world_size is not None:
        where = f" on {result.world_size} GPU{'s' if result.world_size != 1 else ''}"
    elif allowed is None:
        where = " (its batch keys fit any world size)"
    elif not allowed:
        where = " (no world size satisfies its batch keys)"
    else:
        shown = ", ".join(map(str, allowed[:6])) + (", …" if len(allowed) > 6 else "")
        where = (f" if run on {shown} GPU{'s' if allowed != (1,) else ''} — the world size"
                 f"{'s' if len(allowed) > 1 else ''} its batch keys allow; pass --world-size N for the real job")
    if not v.available:
        ds = "not validated by DeepSpeed (not installed)"
    elif v.ok:
        ds = f"DeepSpeed {v.version} accepts it{where}"
    else:
        ds = f"DeepSpeed {v.version} rejects it{where}"
    return f"{result.path or '<config>'}: {ds}"


def _counts(messages: tuple[LintMessage, ...]) -> str:
    n = {s: sum(m.severity == s for m in messages) for s in ("error", "warning", "info")}
    return (f"{n['error']} error{'s' * (n['error'] != 1)}, {n['warning']} warning{'s' * (n['warning'] != 1)}, "
            f"{n['info']} note{'s' * (n['info'] != 1)}")


def render_text(result: CheckResult, width: int | None = None) -> str:
    """A table, one row per message: severity, key (and code), then the
    message, its effect and the fix wrapped in the last column."""
    width = width or max(80, min(shutil.get_terminal_size((100, 24)).columns, 140))
    msgs = result.messages
    lines = [_verdict(result), ""]
    if not msgs:
        lines.append("no findings")
    else:
        key_w = min(max(len(m.key) for m in msgs), 48)
        key_w = max(key_w, len("KEY"))
        text_w = max(30, width - 8 - key_w - 4)
        lines.append(f"{'SEVERITY':<8}  {'KEY':<{key_w}}  MESSAGE")
        lines.append(f"{'-' * 8}  {'-' * key_w}  {'-' * min(text_w, 40)}")
        for m in msgs:
            lines.extend(_row(m, key_w, text_w))
    lines.append("")
    verdict = "OK" if result.ok else "FAIL"
    lines.append(f"{_counts(msgs)} — {verdict}")
    return "\n".join(lines)


def _row(m: LintMessage, key_w: int, text_w: int) -> list[str]:
    """One table row: the first line carries severity and key; the key column
    of the continuation lines carries the code, then the overflow of a long key."""
    wrap = {"width": text_w, "break_long_words": False, "break_on_hyphens": False}
    body: list[str] = textwrap.wrap(m.message, **wrap) or [""]  # type: ignore[arg-type]
    body += textwrap.wrap("effect: " + m.effect, subsequent_indent="        ", **wrap)  # type: ignore[arg-type]
    body += textwrap.wrap("fix:    " + m.fix, subsequent_indent="        ", **wrap)  # type: ignore[arg-type]
    key_cells = _wrap_key(m.key, key_w)
    key_cells.append(f"[{m.code}]")
    rows = max(len(body), len(key_cells))
    sev = _SEVERITY_LABEL.get(m.severity, m.severity)
    out = []
    for i in range(rows):
        left = sev if i == 0 else ""
        key = key_cells[i] if i < len(key_cells) else ""
        text = body[i] if i < len(body) else ""
        out.append(f"{left:<8}  {key:<{key_w}}  {text}".rstrip())
    return out


def _wrap_key(key: str, width: int) -> list[str]:
    """Split a dotted key over lines at its dots (a long leaf is cut only
    when it alone is wider than the column)."""
    cells: list[str] = []
    current = ""
    for i, part in enumerate(key.split(".")):
        piece = part if i == 0 else "." + part
        if current and len(current) + len(piece) > width:
            cells.append(current)
            current = piece
        else:
            current += piece
    cells.append(current)
    out: list[str] = []
    for cell in cells:
        out.extend(cell[j:j + width] for j in range(0, len(cell), width))
    return out or [""]
