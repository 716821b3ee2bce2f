"""What a person sees in the Dagster UI after a nightly run, driven in headless Chromium.

The module loads the demo corpus and runs the nightly job into a fresh Dagster instance (a temporary
DAGSTER_HOME), starts `dagster dev` on 127.0.0.1, materialises the on-demand `decay_preview` beside it, and then
reads the asset graph, asset pages with their metadata, a check result and the plots, and the change set's review
page.
Screenshots land in artifacts/browser/ (with the server's and ChromeDriver's logs) for a person to look at.

Chromium and ChromeDriver come from the system's packages (scripts/install_browser.sh); without them, or without
selenium, the module skips and says how to install them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from tests.support.paths import REPO

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    pytest.skip("selenium is not installed: pip install -e '.[dev]'", allow_module_level=True)

ARTIFACTS = REPO / "artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_HINT = "run `bash scripts/install_browser.sh` as root (Debian packages chromium and chromium-driver)"

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(f"{CHROMIUM} or {CHROMEDRIVER} is missing: {INSTALL_HINT}", allow_module_level=True)

pytestmark = pytest.mark.browser

DEMO_SIZE = 1500
GROUPS = ("ingest", "analysis", "changes", "apply", "reports")
GRAPH_ASSETS = ("memory_snapshot", "decay_scores", "change_set", "applied_changes", "health_report")
# Bounded waits: generous for a loaded 2-core machine, short enough that a broken page fails within minutes.
SERVER_START_TIMEOUT = 90.0
PAGE_TIMEOUT = 30.0
VIEWPORT = {"width": 1600, "height": 1000, "deviceScaleFactor": 1.5, "mobile": False}
# On this closed network Chromium's background services (updates, sync, QUIC probes) only produce refused
# connections and slow starts; a fresh profile keeps runs independent.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    f"--window-size={VIEWPORT['width']},{VIEWPORT['height']}",
)
# Telemetry off (no calls out of a closed network) and no "Join the Dagster community" dialog over the pages.
DAGSTER_YAML = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"


@dataclass(frozen=True)
class Demo:
    """A store, warehouse and Dagster instance after the nightly job for `as_of`."""

    root: Path
    env: dict[str, str]
    as_of: str
    gated_change_set: str
    review_html: Path


# --- processes ----------------------------------------------------------------------------------------------


def _run(args: list[str], env: dict[str, str], log: Path, timeout: float = 150.0) -> str:
    """Run a command to completion from the repo root; its output goes to `log`; a failure names the command."""
    started = time.perf_counter()
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    with log.open("a") as handle:
        handle.write(
            f"$ {' '.join(args)}  # exit {done.returncode} in {time.perf_counter() - started:.1f}s\n"
        )
        handle.write(done.stdout + done.stderr + "\n")
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args[1:4])} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _default_sigint() -> None:
    # A job started from a non-interactive shell inherits SIGINT ignored, and Dagster's SIGTERM handler acts
    # through SIGINT: such a `dagster dev` ran on for minutes after SIGTERM here. Restore it in the child.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_group(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the whole process group, give it `grace` seconds, then SIGKILL whatever is left of it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    # The webserver, daemon and code servers share the group and may outlive `dagster dev` itself.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _get_json(url: str, body: dict[str, object] | None = None) -> dict[str, object] | None:
    """GET (or POST `body` as JSON to) `url`; None while the server is not answering yet."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


_LOCATIONS_QUERY = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"


def _code_location_loaded(base: str) -> bool:
    answer = _get_json(f"{base}/graphql", {"query": _LOCATIONS_QUERY}) or {}
    entries = (answer.get("data") or {}).get("workspaceOrError", {}).get("locationEntries", [])  # type: ignore[union-attr]
    return bool(entries) and all(entry["loadStatus"] == "LOADED" for entry in entries)


def _wait_for_server(proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
    """Until /server_info answers and the code location has loaded; fail early if `dagster dev` died."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dagster dev exited with {proc.returncode}; its log:\n{log.read_text()[-3000:]}")
        if _get_json(f"{base}/server_info") is not None and _code_location_loaded(base):
            return
        time.sleep(0.5)
    pytest.fail(f"dagster dev did not serve {base} within {SERVER_START_TIMEOUT:.0f}s; see {log}")


def _materialise_decay_preview(demo: Demo, log: Path) -> None:
    """The preview is not a nightly step: materialise it as a user would, from the command line (in process:
    the code location's executor is `execution.executor`, in_process by default)."""
    _run(
        [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "assets.definitions"]
        + ["--select", "decay_preview", "--partition", demo.as_of],
        demo.env,
        log,
    )


# --- fixtures -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    return ARTIFACTS


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, artifacts: Path) -> Demo:
    """The demo corpus after the nightly job, recorded in a fresh Dagster instance, and its review page."""
    root = tmp_path_factory.mktemp("browser")
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    env = {
        **os.environ,
        "ENGRAM_STORE_URL": f"sqlite:///{root}/engram.db",
        "ENGRAM_WAREHOUSE": str(root / "warehouse"),
        # The CLI runs jobs against DagsterInstance.get() when DAGSTER_HOME is set: the UI then shows the runs.
        "DAGSTER_HOME": str(home),
    }
    log = artifacts / "setup.log"
    log.write_text("")
    as_of = dt.datetime.now(dt.UTC).date().isoformat()  # today is a valid partition (end_offset=1)
    cli = [sys.executable, "-m", "engram_pipelines.cli"]

    summary = json.loads(_run([*cli, "demo", "--size", str(DEMO_SIZE), "--as-of", as_of, "--json"], env, log))
    assert summary["success"], summary.get("error")

    sets = json.loads(_run([*cli, "changes", "list", "--json"], env, log))
    gated = [s["change_set_id"] for s in sets if s["review_class"] == "gated" and s["status"] == "proposed"]
    assert gated, f"the nightly job proposed no gated change set: {sets}"
    review_html = root / "review.html"
    _run([*cli, "changes", "show", gated[0], "--html", str(review_html)], env, log)
    return Demo(root=root, env=env, as_of=as_of, gated_change_set=gated[0], review_html=review_html)


@pytest.fixture(scope="module")
def ui(demo: Demo, artifacts: Path) -> Iterator[str]:
    """`dagster dev` on a free loopback port over the demo's instance; its whole process group stops after."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = artifacts / "dagster-dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", str(REPO / "workspace.yaml")]
            + ["-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO,
            env=demo.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so teardown reaches every child
            preexec_fn=_default_sigint,
        )
    try:
        # While the server starts (~30 s), which also shows that the UI picks up a materialisation made beside it.
        _materialise_decay_preview(demo, artifacts / "setup.log")
        _wait_for_server(proc, base, log)
        yield base
    finally:
        _stop_group(proc)


@pytest.fixture(scope="module")
def browser(artifacts: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        # An explicit driver path: Selenium Manager (which would try to download one) is never consulted.
        service = Service(str(CHROMEDRIVER), log_output=str(artifacts / "chromedriver.log"))
        driver = webdriver.Chrome(options=options, service=service)
        try:
            driver.set_page_load_timeout(PAGE_TIMEOUT)
            # An exact viewport at 1.5x: screenshots a person can read, whatever the window decorations.
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", VIEWPORT)
            yield driver
        finally:
            driver.quit()


# --- page helpers -------------------------------------------------------------------------------------------


def _literal(text: str) -> str:
    assert '"' not in text, text
    return f'"{text}"'


def _has_text(text: str) -> str:
    """XPath: the innermost elements whose text contains `text` (React may split it over several text nodes)."""
    has = f"contains(normalize-space(.), {_literal(text)})"
    return f"//*[{has}][not(*[{has}])]"


def _shot(driver: WebDriver, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def _first_visible(driver: WebDriver, xpath: str) -> WebElement | Literal[False]:
    # Not EC.visibility_of_element_located: it looks at the first match only, which may be hidden (a <title>,
    # a collapsed panel) while a later one is on screen.
    with contextlib.suppress(StaleElementReferenceException):
        for element in driver.find_elements(By.XPATH, xpath):
            if element.is_displayed():
                return element
    return False


def _wait(driver: WebDriver, xpath: str, what: str, timeout: float = PAGE_TIMEOUT) -> WebElement:
    """The visible element at `xpath`; on timeout a screenshot of the page as it was, and a failure naming `what`."""
    try:
        return WebDriverWait(driver, timeout).until(lambda d: _first_visible(d, xpath))
    except TimeoutException:
        slug = re.sub(r"[^a-z0-9]+", "-", what.lower()).strip("-")[:60]
        shot = _shot(driver, f"FAILED-{slug}")
        pytest.fail(f"{driver.current_url} did not show {what} within {timeout:.0f}s (screenshot {shot})")


def _wait_text(driver: WebDriver, text: str, timeout: float = PAGE_TIMEOUT) -> WebElement:
    return _wait(driver, _has_text(text), repr(text), timeout)


def _scroll_to(driver: WebDriver, element: WebElement) -> None:
    # Dagster pages scroll inside their own panels, so scroll the element rather than the window.
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", element)


def _metadata_row(driver: WebDriver, key: str) -> WebElement:
    """The row of the asset's metadata table whose key is `key`."""
    return _wait(driver, f"//tr[td[1][normalize-space(.)={_literal(key)}]]", f"metadata entry {key!r}")


def _open_markdown_plot(driver: WebDriver, key: str) -> WebElement:
    """Open the Markdown metadata entry `key` (long entries sit behind "[Show Markdown]") and return its image."""
    row = _metadata_row(driver, key)
    _scroll_to(driver, row)
    row.find_element(By.XPATH, ".//a[contains(normalize-space(.), 'Show Markdown')]").click()
    image = _wait(driver, "//div[@role='dialog']//img", f"the image of {key!r}")
    loaded = "return arguments[0].complete && arguments[0].naturalWidth;"
    try:
        WebDriverWait(driver, PAGE_TIMEOUT).until(lambda d: d.execute_script(loaded, image))
    except TimeoutException:
        _shot(driver, f"FAILED-{key}-image")
        pytest.fail(f"the image of {key!r} did not load (a broken image has naturalWidth 0)")
    return image


def _close_dialog(driver: WebDriver) -> None:
    driver.find_element(By.XPATH, "//div[@role='dialog']//button[normalize-space(.)='Close']").click()
    WebDriverWait(driver, PAGE_TIMEOUT).until(
        EC.invisibility_of_element_located((By.XPATH, "//div[@role='dialog']"))
    )


# --- tests --------------------------------------------------------------------------------------------------


def test_asset_graph_shows_the_pipeline(ui: str, browser: WebDriver) -> None:
    # The global lineage draws each group collapsed; `expanded` opens them (group ids are `global@global:NAME`
    # unless Dagster's per-code-location grouping flag is on).
    expanded = ",".join(f"global@global:{group}" for group in GROUPS)
    browser.get(f"{ui}/asset-groups?expanded={expanded}")
    _wait_text(browser, "Global asset lineage")
    for name in GRAPH_ASSETS:
        node = f"//*[local-name()='foreignObject']//*[normalize-space(text())={_literal(name)}]"
        _wait(browser, node, f"the graph node {name!r}")
    _shot(browser, "asset-graph")


def test_asset_page_shows_latest_materialisation_metadata_and_plot(
    ui: str, demo: Demo, browser: WebDriver
) -> None:
    browser.get(f"{ui}/assets/decay_scores")
    _wait_text(browser, "Latest materialization")
    _wait_text(browser, demo.as_of)  # the partition of the latest materialisation
    _wait_text(browser, f"{DEMO_SIZE:,}")  # its row count
    _shot(browser, "decay-scores")

    for key in ("outcomes", "transitions", "stale", "mean_score"):
        _metadata_row(browser, key)
    _scroll_to(browser, _wait_text(browser, "Metadata"))
    _shot(browser, "decay-scores-metadata")
    bands = _metadata_row(browser, "score_bands")  # the distribution drawn inline, no dialog to open
    assert "█" in bands.text and "0.0-0.1" in bands.text, bands.text
    _scroll_to(browser, bands)
    _shot(browser, "decay-scores-inline-bars")

    image = _open_markdown_plot(browser, "score_distribution")
    assert image.size["width"] > 200, image.size  # drawn at a readable size, not a thumbnail
    _wait_text(browser, "score_distribution")  # the dialog's title
    _shot(browser, "decay-scores-plot")
    _close_dialog(browser)


def test_check_result_is_shown_as_passed(ui: str, demo: Demo, browser: WebDriver) -> None:
    browser.get(f"{ui}/assets/applied_changes?view=checks")
    _wait_text(browser, "apply_accounting_closes")
    _wait_text(browser, "Succeeded")  # the check's status in the list of checks
    _wait_text(browser, "Passed")  # the latest execution's evaluation result
    _wait_text(browser, demo.as_of)  # the partition it was evaluated for
    _wait_text(browser, "This is a blocking asset check.")
    _shot(browser, "applied-changes-check")


def test_decay_preview_plot_renders(ui: str, demo: Demo, browser: WebDriver) -> None:
    browser.get(f"{ui}/assets/decay_preview")
    _wait_text(browser, "Latest materialization")
    _wait_text(browser, demo.as_of)
    for key in ("totals", "preview", "chart_path"):
        _metadata_row(browser, key)
    image = _open_markdown_plot(browser, "score_distribution")
    assert image.size["width"] > 200, image.size
    _shot(browser, "decay-preview-plot")
    _close_dialog(browser)


def test_review_page_shows_clusters_and_the_approve_command(demo: Demo, browser: WebDriver) -> None:
    browser.get(demo.review_html.as_uri())
    _wait_text(browser, demo.gated_change_set)
    card = _wait(
        browser, "//div[contains(@class, 'cluster')][.//b[normalize-space(.)='canonical']]", "a cluster"
    )
    assert card.find_elements(By.CSS_SELECTOR, ".loser"), "a cluster card without a loser"
    command = _wait(browser, "//div[@class='cmd']", "the next-step commands")
    assert f"engram-pipelines approve {demo.gated_change_set}" in command.text
    _shot(browser, "review-page")
    _scroll_to(browser, command)
    _shot(browser, "review-page-next-step")

    # The namespace filter hides every card of other namespaces.
    namespace = card.get_attribute("data-ns")
    browser.find_element(By.ID, "ns").find_element(By.XPATH, f"./option[.={_literal(namespace)}]").click()
    shown = {
        c.get_attribute("data-ns")
        for c in browser.find_elements(By.CSS_SELECTOR, ".cluster")
        if c.is_displayed()
    }
    assert shown == {namespace}
    _shot(browser, "review-page-filtered")


def test_review_page_lists_only_memories_as_losers(demo: Demo, browser: WebDriver) -> None:
    browser.get(demo.review_html.as_uri())
    _wait(browser, "//div[contains(@class, 'cluster')]", "a cluster")
    # Every loser of a fresh demo's clusters is a live memory, so each one shows its content.
    orphans = [
        e.text
        for e in browser.find_elements(By.CSS_SELECTOR, ".cluster .loser")
        if "not in the store" in e.text
    ]
    assert not orphans, f"{len(orphans)} losers without a memory, e.g. {orphans[0]!r}"


def test_a_gated_set_is_approved_from_the_launchpad_and_applied(
    ui: str, demo: Demo, browser: WebDriver
) -> None:
    """Last in the module: it changes the store the pages above read. The review decision is the job `review`,
    configured in the launchpad as a person would, then launched."""
    from engram_pipelines.store import open_store

    browser.get(f"{ui}/jobs")
    _wait(browser, "//a[normalize-space(.)='review']", "the job review in the job list").click()
    _wait(browser, "//a[normalize-space(.)='Launchpad']", "the Launchpad tab").click()
    editor = _wait(browser, "//div[contains(@class, 'CodeMirror')]", "the launchpad's config editor")
    config = (
        "ops:\n  review_change_set:\n    config:\n"
        f"      change_set_id: {demo.gated_change_set}\n      action: approve_and_apply\n      actor: reviewer\n"
    )
    browser.execute_script("arguments[0].CodeMirror.setValue(arguments[1]);", editor, config)
    _shot(browser, "review-launchpad")
    _wait_text(browser, "No errors")  # the launchpad validated the config
    launch = "//button[normalize-space(.)='Launch Run' and not(@disabled)]"
    _wait(browser, launch, "the Launch Run button, enabled").click()
    WebDriverWait(browser, PAGE_TIMEOUT).until(lambda d: "/runs/" in d.current_url)  # the run's page
    _wait_text(browser, "Success", timeout=180)
    _shot(browser, "review-run")
    with open_store(demo.env["ENGRAM_STORE_URL"]) as store:
        record = store.get_change_set(demo.gated_change_set)
    assert record is not None and (record.status, record.approved_by) == ("applied", "reviewer")
