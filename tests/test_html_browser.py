"""The HTML report in a real browser: headless Chromium, network blocked, no JS errors.

Screenshots go to tests/.artifacts/ (gitignored) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from oompost.render.html import render_html

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent / ".artifacts"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]

pytestmark = pytest.mark.browser

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None


def _skip_reason() -> str | None:
    if sync_playwright is None:
        return "playwright (Python) is not installed"
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        return f"{CHROMIUM} is not installed"
    return None


@pytest.fixture(scope="module")
def playwright():
    reason = _skip_reason()
    if reason and os.environ.get("OOMPOST_REQUIRE_BROWSER"):
        pytest.fail(f"headless Chromium is required here (.ci/run sets OOMPOST_REQUIRE_BROWSER): {reason}")
    if reason:
        pytest.skip(reason)
    with sync_playwright() as p:
        yield p


def _launch(playwright, profile: Path, **kw):
    # a fresh user-data-dir per context: no extensions, no cached state, nothing phoning home
    return playwright.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, args=ARGS,
                                                         viewport={"width": 1280, "height": 900}, **kw)


@pytest.fixture(scope="module")
def browser_context(playwright, tmp_path_factory):
    ctx = _launch(playwright, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield ctx
    finally:
        ctx.close()


def _open(ctx, path: Path, width: int):
    page = ctx.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    errors: list[str] = []
    left: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))   # alert() from log text
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    me = path.resolve().as_uri()

    def route(r):
        if r.request.url == me:
            r.continue_()
        else:
            left.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(me, wait_until="load")
    return page, errors, left


def _artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    ignore = ARTIFACTS / ".gitignore"          # keeps the screenshots out of git without touching the top .gitignore
    if not ignore.exists():
        ignore.write_text("*\n")
    return ARTIFACTS


def _write(tmp_path: Path, name: str, report) -> Path:
    path = tmp_path / name
    path.write_text(render_html(report), encoding="utf-8")
    return path


def test_report_opens_offline_without_errors(browser_context, tmp_path):
    from test_render import fragmentation_report

    path = _write(tmp_path, "report.html", fragmentation_report())
    page, errors, left = _open(browser_context, path, 1280)
    assert page.locator("#verdict-title").is_visible()
    assert page.locator("#verdict-title").inner_text() == "Allocator fragmentation"
    assert page.locator(".summary").is_visible()
    assert page.locator("svg.oombar-svg").count() == 1 and page.locator("svg.oombar-svg").is_visible()
    assert page.locator("svg.timeline-svg").count() == 1 and page.locator("svg.timeline-svg").is_visible()
    assert page.locator(".segmap svg.segbar").first.is_visible()
    # the data island parses in the page and matches what the page shows
    assert page.evaluate("JSON.parse(document.getElementById('oompost-data').textContent).cause") == "fragmentation"
    # JS niceties ran: copy buttons exist only with JS, stacks expand
    page.locator("[data-toggle-details='#stacks']").click()
    assert page.locator("#stacks details").first.evaluate("d => d.open") is True
    page.locator(".tl-plot").hover()
    assert "allocated" in page.locator(".tl-hover .readout").inner_text()
    page.mouse.move(0, 0)
    page.screenshot(path=str(_artifacts() / "report.png"), full_page=True)
    page.close()
    assert errors == []
    assert left == []


def test_capacity_and_ranks_reports_narrow_and_wide(browser_context, tmp_path):
    from test_render import capacity_report, hostile_report, nccl_report

    _artifacts()
    for name, report in (("capacity", capacity_report()), ("nccl", nccl_report()), ("hostile", hostile_report())):
        path = _write(tmp_path, f"{name}.html", report)
        for width in (1280, 420):
            page, errors, left = _open(browser_context, path, width)
            assert page.locator("#verdict-title").is_visible()
            assert page.locator("pre[data-copy] + button.copy-btn").count() == (
                3 + bool(report.rerun.ds_config) if report.rerun else 0)
            # nothing overflows the page sideways (wide charts scroll inside their box)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{name} at {width}px overflows by {overflow}px"
            page.screenshot(path=str(ARTIFACTS / f"report-{name}-{width}.png"), full_page=True)
            page.close()
            assert errors == [], (name, width, errors)
            assert left == [], (name, width, left)


def test_narrow_viewport_screenshot(browser_context, tmp_path):
    from test_render import fragmentation_report

    path = _write(tmp_path, "report.html", fragmentation_report())
    page, errors, left = _open(browser_context, path, 420)
    assert page.locator("#verdict-title").is_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1
    page.screenshot(path=str(_artifacts() / "report-narrow.png"), full_page=True)
    page.close()
    assert errors == [] and left == []


def test_page_reads_without_javascript(playwright, tmp_path):
    from test_render import fragmentation_report

    path = _write(tmp_path, "report.html", fragmentation_report())
    ctx = _launch(playwright, tmp_path / "profile", java_script_enabled=False)
    try:
        page = ctx.new_page()
        page.goto(path.resolve().as_uri())
        assert page.locator("#verdict-title").is_visible()
        assert page.locator("svg.timeline-svg").is_visible()
        assert page.locator("button.copy-btn").count() == 0          # JS-only extras are absent
        assert not page.locator("[data-toggle-details]").is_visible()
        page.locator("#stacks summary").first.click()                # native <details> still expands
        assert page.locator("#stacks ol.frames").first.is_visible()
    finally:
        ctx.close()


@pytest.mark.parametrize("scenario", ["fragmentation_dynamic_padding", "capacity_zero2_offload_7b_3090",
                                      "nccl_watchdog_timeout"])
def test_real_capture_reports_in_the_browser(browser_context, tmp_path, scenario):
    """The reports of real captures (the full pipeline, not hand-built views) open offline
    without script errors and show their verdict."""
    import oompost

    samples = Path(__file__).parent.parent / "sample_logs"
    report = oompost.analyze([str(samples / scenario)])
    path = _write(tmp_path, f"{scenario}.html", report)
    page, errors, left = _open(browser_context, path, 1280)
    assert page.locator("#verdict-title").is_visible()
    assert page.evaluate("JSON.parse(document.getElementById('oompost-data').textContent).cause") == report.cause
    if report.oom is not None:
        assert page.locator("svg.oombar-svg").is_visible()
    page.screenshot(path=str(_artifacts() / f"real-{scenario}.png"))
    page.close()
    assert errors == [] and left == []


# Characters on either side of a line break inside a table cell: both letters or digits = a
# break in the middle of a word (a break after "/", "_", "." or a space is a normal wrap).
MID_WORD_BREAKS = """() => {
  const out = [];
  const alnum = /[A-Za-z0-9]/;
  for (const cell of document.querySelectorAll('td, th')) {
    if (!cell.getClientRects().length) continue;            // hidden (closed <details>)
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const t = node.textContent;
      let prevTop = null;
      for (let i = 0; i < Math.min(t.length, 600); i++) {
        const r = document.createRange();
        r.setStart(node, i); r.setEnd(node, i + 1);
        const rects = r.getClientRects();
        if (!rects.length) { prevTop = null; continue; }
        const top = rects[rects.length - 1].top;
        if (prevTop !== null && top > prevTop + 2 && alnum.test(t[i - 1]) && alnum.test(t[i])) {
          out.push(cell.tagName + ': ' + JSON.stringify(t.slice(Math.max(0, i - 15), i + 15)));
          break;
        }
        prevTop = rects[0].top;
      }
    }
  }
  return out;
}"""


@pytest.mark.parametrize("scenario", ["capacity_zero2_offload_7b_3090", "leak_logits_kept_for_metrics",
                                      "fragmentation_dynamic_padding", "config_error_prefetch_float",
                                      "activation_spike_long_batch"])
def test_no_table_cell_wraps_mid_word(browser_context, tmp_path, scenario):
    """At 1400 px and at 760 px no table cell breaks a word in two (long values
    scroll inside their table instead); the page itself never scrolls sideways."""
    from sample_cache import SAMPLES, analyzed

    report = analyzed(str((SAMPLES / scenario).resolve()))
    path = _write(tmp_path, f"{scenario}.html", report)
    for width in (1400, 760):
        page, errors, left = _open(browser_context, path, width)
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        broken = page.evaluate(MID_WORD_BREAKS)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        page.screenshot(path=str(_artifacts() / f"wrap-{scenario}-{width}.png"), full_page=True)
        page.close()
        assert broken == [], (width, broken[:5])
        assert overflow <= 1, (width, overflow)
        assert errors == [] and left == []
