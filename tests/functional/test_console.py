"""The web console (``GET /console``): its security headers and static rules, and a real headless
chromium (Debian's ``chromium`` + ``chromium-driver``, driven by selenium) reading a running hub
with two agents: nodes with their power source, a workload with its status and placement, a
function with its instance, and a rejected token.

``EDGEPLANE_SCREENSHOT=1`` also saves the page to ``docs/img/console.png``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for, write_power_supply

from edgeplane_contract.messages import GpuTelemetry

from controlplane.api.console import CONTENT_SECURITY_POLICY
from controlplane.store.identities import IdentityStore

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "controlplane" / "console"
SCREENSHOT = ROOT / "docs" / "img" / "console.png"
ECHO = {"name": "echo", "source": "def handle(event, context):\n    return event\n", "handler": "handle"}
# Would run script if it were ever parsed as HTML. Names are validated, but any token holder can put
# it in the event log: the audit event of a DELETE quotes the path asked for.
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"
A100 = GpuTelemetry(
    index=0,
    name="A100",
    memory_total_bytes=40 * 2**30,
    mig_enabled=True,
    mig_devices=[{"index": 0, "profile": "3g.20gb"}, {"index": 1, "profile": "1g.5gb"}],
)


async def test_the_console_is_public_static_and_locked_down(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        # The page and its files need no token (they hold no data); the data still does.
        for path, content_type in (
            ("/console", "text/html"),
            ("/console/console.js", "text/javascript"),
            ("/console/console.css", "text/css"),
        ):
            async with api.session.get(api.base + path, headers={"Authorization": ""}) as response:
                assert response.status == 200, path
                assert response.content_type == content_type
                assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
                assert response.headers["X-Content-Type-Options"] == "nosniff"
                assert response.headers["X-Frame-Options"] == "DENY"
        async with api.session.get(api.base + "/v1/nodes", headers={"Authorization": ""}) as response:
            assert response.status == 401
    assert "default-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY


def test_the_console_has_no_inline_code_and_renders_api_strings_as_text():
    html = (STATIC / "index.html").read_text()
    # CSP forbids inline script and style: every script is a file, no handler or style attribute.
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", html))
    assert not re.search(r"<script[^>]*>\s*[^<\s]", html) and "<style" not in html
    assert not re.search(r"\s(on[a-z]+|style)\s*=", html)
    # Nothing external: the page must work offline.
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    lines = (STATIC / "console.js").read_text().splitlines()
    code = "\n".join(line for line in lines if not line.lstrip().startswith("//"))
    # API strings become text nodes; the token is kept in sessionStorage only.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "cookie"):
        assert sink not in code, sink
    assert "sessionStorage" in code and "localStorage" not in code


# ---- the browser ---------------------------------------------------------------------------------


def _chromium() -> tuple[str, str]:
    """Paths of the system's chromium and its driver, or skip (nothing is downloaded)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip(
            "no system chromium and chromedriver (Debian: apt-get install -y chromium chromium-driver); "
            "the console's browser test needs them"
        )
    return browser, driver


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless chromium driven by selenium, with the page's console log kept (CSP reports)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the [test] extra")
    binary, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument("--window-size=1500,1300")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Both paths given: selenium does not ask Selenium Manager to find or fetch anything.
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


class _Page:
    """The console in the browser (blocking calls: the test runs them in a thread, the hub serves)."""

    def __init__(self, driver: Any) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.waiter = WebDriverWait(driver, 20)

    def wait(self, condition: Any, what: str) -> Any:
        """``condition`` within 20 s, else a failure that shows the page's text and log."""
        from selenium.common.exceptions import TimeoutException

        try:
            return self.waiter.until(condition)
        except TimeoutException:
            body = self.find("body").text
            raise AssertionError(f"{what}: not seen\n{body}\n{self.driver.get_log('browser')}") from None

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def cells(self, table: str, key: str) -> list[str]:
        row = self.find(f'#{table} tbody tr[data-key="{key}"]')
        return [td.text for td in row.find_elements("tag name", "td")]

    def state(self) -> str:
        return str(self.find("#state").get_attribute("data-state"))

    def sign_in(self, token: str) -> None:
        self.find("#token").send_keys(token)
        self.find("#token-form button[type=submit]").click()

    def stored_token(self) -> str | None:
        value = self.driver.execute_script("return sessionStorage.getItem('edgeplane.console.token')")
        return None if value is None else str(value)


def _see_the_fleet(page: _Page, base: str, token: str, workload_id: str) -> None:
    page.driver.get(base + "/console")
    assert not page.find("#main").is_displayed()
    page.sign_in(token)
    page.wait(lambda d: page.state() == "ok", "the tables loaded")

    # Nodes of the fleet, with their power source, battery, w3 and GPUs.
    page.wait(lambda d: "battery" in page.cells("nodes", "edge-b"), "edge-b on battery")
    edge_a, edge_b = page.cells("nodes", "edge-a"), page.cells("nodes", "edge-b")
    assert edge_a[2] == "Ready" and edge_a[4] == "mains", edge_a
    assert edge_b[4] == "battery" and "35 %" in edge_b[5], edge_b
    assert edge_a[7] == "shipped", edge_a  # the local-policy version it decides with
    assert "A100" in edge_a[12] and "MIG 3g.20gb, 1g.5gb" in edge_a[12], edge_a
    # Requests are labelled as such, and what the node measured (telemetry) stands beside them.
    header = [th.text for th in page.driver.find_elements("css selector", "#nodes thead th")]
    assert header[7] == "Policy"
    assert header[8:12] == ["CPU requested / cap", "CPU in use", "Memory requested / cap", "Memory in use"]
    assert re.fullmatch(r"\d+ %", edge_a[9]) and re.fullmatch(r"[\d.]+ [KMGT]?i?B", edge_a[11]), edge_a

    # The rollouts: the profile in force and the canary of another one at its first share.
    assert page.cells("rollouts", "profile")[:3] == ["Scheduling profile", "edgeplane", "in force"]
    canary = page.cells("rollouts", "profile-canary")
    assert canary[:4] == ["Profile canary", "default (over edgeplane)", "canary", "50 %"], canary
    assert "placement delay" in canary[4] and "canary at 50%" in canary[4], canary

    # The workload with its status; a click shows where it went and why.
    page.wait(lambda d: "Running" in page.cells("workloads", workload_id), "the workload Running")
    page.find(f'#workloads tbody tr[data-key="{workload_id}"]').click()
    panel = page.find("#placement")
    page.wait(lambda d: "chosen" in panel.text and "profile edgeplane" in panel.text, "the explanation")
    # ... and what the replica printed, fetched from its node through the hub (as text, not markup).
    page.wait(lambda d: "hello-from-the-log" in panel.text, "the replica's log in the panel")
    log = panel.find_element("css selector", 'pre.log[data-replica="0"]')
    assert log.text.strip() == "hello-from-the-log", log.text

    # The function with its instance and cold-start stats.
    page.wait(lambda d: page.cells("functions", "echo")[4] == "1", "one invocation of echo")
    assert page.cells("functions", "echo")[5:7] == ["1", "100 %"]
    page.find('#functions tbody tr[data-key="echo"]').click()
    function = page.find("#function")
    page.wait(lambda d: "cold starts: 1 (100 %)" in function.text and "idle" in function.text, "its instance")

    # Events, newest first.
    page.wait(lambda d: "WorkloadCreated" in page.find("#events").text, "the events")

    # The token stays in this tab's sessionStorage: not in the URL, not in a cookie.
    assert page.stored_token() == token and token not in page.driver.current_url
    assert page.driver.execute_script("return document.cookie") == ""
    # Nothing the page did broke its CSP (a violation is logged as an error).
    errors = [e for e in page.driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors

    if os.environ.get("EDGEPLANE_SCREENSHOT"):
        page.driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        # The whole page in one image: a viewport as tall as the document.
        height = min(int(page.driver.execute_script("return document.documentElement.scrollHeight")), 2400)
        metrics = {"width": 1500, "height": height, "deviceScaleFactor": 1, "mobile": False}
        page.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        page.driver.save_screenshot(str(SCREENSHOT))
        page.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _see_text_not_markup_then_a_bad_token(page: _Page) -> None:
    # API strings are text: the hostile path is shown as it is, and nothing of it ran.
    page.wait(lambda d: HOSTILE in page.find("#events").text, "the hostile event, as text")
    assert page.driver.find_elements("css selector", "main img") == []
    assert page.driver.title == "edgeplane console"

    # A bad token: the rejected state, no data, and the token forgotten.
    page.find("#forget").click()
    assert not page.find("#main").is_displayed() and page.stored_token() is None
    page.sign_in("not-a-real-token")
    page.wait(lambda d: page.state() == "rejected", "the rejected state")
    assert "Token rejected" in page.find("#state").text
    assert not page.find("#main").is_displayed() and page.find("#token-form").is_displayed()
    assert page.stored_token() is None


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_the_console_shows_a_running_fleet_in_a_real_browser(
    browser, nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(
            nats_server.url, tmp_path, ["edge-a", "edge-b"], gpus=[A100], **PYTHON_FUNCTIONS
        ) as agents,
    ):
        write_power_supply(agents[1].power_dir, on_battery=True, percent=35)
        await wait_for(api.nodes, lambda nodes: any(n["power"]["source"] == "battery" for n in nodes))
        workload_id = await api.post_workload(
            {
                "name": "hello",
                "command": ["sh", "-c", "echo hello-from-the-log; sleep 60"],
                "resources": {"cpu": 0.5, "memory": "64Mi"},
            }
        )
        await api.wait_status(workload_id, "Running")
        status, _ = await api.call("POST", "/v1/functions", {**ECHO, "memory": "128Mi"})
        assert status == 201
        status, _ = await api.call("POST", "/v1/functions/echo/invoke", {"hi": 1}, timeout_s=30)
        assert status == 200
        # A scheduling profile change under way, for the rollouts table.
        canary = {"profile": "default", "steps": [50, 100], "dwell_s": 600}
        status, _ = await api.call("POST", "/v1/scheduling-profiles/canary", canary)
        assert status == 201
        # A read-only token is all the console needs.
        token = (await IdentityStore(running.hub.store).create_api_token("console", ["read"])).token
        page = _Page(browser)
        await asyncio.to_thread(_see_the_fleet, page, running.url, token, workload_id)
        assert (await api.call("DELETE", f"/v1/workloads/{HOSTILE}"))[0] == 404
        await asyncio.to_thread(_see_text_not_markup_then_a_bad_token, page)
