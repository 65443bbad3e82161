"""An index and a report built from logs that carry HTML and script, opened
in headless Chromium: nothing in the inputs runs, the table sorts and filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from oompost.scan import run_scan
from test_html_browser import _open, browser_context, playwright  # noqa: F401  (shared fixtures)

pytestmark = pytest.mark.browser

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
PAYLOADS = ("<script>alert('log')</script>", "<img src=x onerror=alert('img')>", "\"><svg onload=alert('svg')>",
            "javascript:alert('href')")


def _hostile_tree(root: Path) -> None:
    spike = (SAMPLES / "activation_spike_long_batch" / "run.log").read_text()
    leak = (SAMPLES / "leak_logits_kept_for_metrics" / "run.log").read_text()
    evil = " ".join(PAYLOADS)
    # the payload inside the OOM message, a step line, the exception text and the directory name
    spike = spike.replace("CUDA out of memory.", f"CUDA out of memory. {evil}", 1)
    spike = spike.replace("step 1/", f"step 1/ {evil} ", 1)
    for name, text in ((f"job <img src=x onerror=alert('dir')>", spike), ("plain_leak", leak),
                       ("<script>alert('name')<", leak + f"\nRuntimeError: {evil}\n")):
        d = root / name
        d.mkdir(parents=True)
        (d / "run.log").write_text(text)


def test_index_and_reports_from_hostile_logs_run_nothing(browser_context, tmp_path):  # noqa: F811
    root, out = tmp_path / "jobs", tmp_path / "nightly"
    _hostile_tree(root)
    result = run_scan([str(root)], str(out), jobs=1)
    assert len(result.rows) == 3 and not result.failed
    page, errors, left = _open(browser_context, out / "index.html", 1280)
    assert page.locator("script").count() == 1                          # only the index's own
    assert page.locator("img").count() == 0 and page.locator("[onerror], [onload]").count() == 0
    body = page.locator("body").inner_text()
    assert "job <img src=x onerror=alert('dir')>" in body                # shown as text
    rows = page.locator("#jobs tbody tr")
    assert rows.count() == 3
    # filter by text and by cause
    page.fill("#filter", "leak")
    assert sum(rows.nth(i).is_visible() for i in range(3)) == 2
    page.fill("#filter", "")
    page.select_option("#cause", "activation_spike")
    assert sum(rows.nth(i).is_visible() for i in range(3)) == 1
    page.select_option("#cause", "")
    # sort by confidence, both ways
    header = page.locator("#jobs thead th", has_text="confidence")
    header.click()
    asc = [float(rows.nth(i).locator("td").nth(2).inner_text() or -1) for i in range(3)]
    header.click()
    desc = [float(rows.nth(i).locator("td").nth(2).inner_text() or -1) for i in range(3)]
    assert asc == sorted(asc) and desc == sorted(desc, reverse=True)
    assert page.locator("svg[aria-label='jobs per cause and night'] rect").count() >= 2
    page.close()
    assert errors == [] and left == []
    for r in result.rows:                                                # each job's report too
        page, errors, left = _open(browser_context, out / r["report"], 1280)
        assert page.locator("[onerror], [onload]").count() == 0
        assert page.locator("img[src='x']").count() == 0
        page.close()
        assert errors == [] and left == [], r["job"]
