"""Headless Chromium for the browser tests: the fixture that starts it offline with a fresh profile
and leaves no process behind, and the helpers that screenshot a page and read its script errors."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradci._testing.processes import wait_for

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
PHONE = (400, 900)
# Offline, Chromium stalls on network calls that cannot succeed unless told not to.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,1000")

def _chromium_missing() -> str | None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if not missing:
        return None
    return f"{' and '.join(missing)} not installed (make test installs chromium and chromium-driver)"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium with a fresh profile; afterwards, not one of its processes is left."""
    reason = _chromium_missing()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    profile = tempfile.mkdtemp(prefix="gradci-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        try:
            wait_for(lambda: not _processes_using(profile), "Chromium's processes to exit", timeout_s=20)
        finally:
            shutil.rmtree(profile, ignore_errors=True)


def _processes_using(profile: str) -> list[int]:
    """Processes whose command line names the profile folder (every Chromium process of this test)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and profile.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def shoot(driver: Any, name: str, width: int = 1280) -> None:
    """A screenshot of the whole page (up to 4000 px tall) at ``width``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.set_window_size(width, 1000)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(height, 800), 4000))
    time.sleep(0.5)  # plotly redraws its charts at the new size
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    driver.set_window_size(1280, 1000)


def shoot_phone(driver: Any, name: str) -> None:
    """The page at phone width: nothing wider than the screen but what scrolls inside its own box
    (tables, the heatmap), and a screenshot."""
    driver.set_window_size(*PHONE)
    time.sleep(0.5)  # as shoot: plotly redraws at the new width
    overflowing = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflowing <= 1, f"{name}: the page is {overflowing} px wider than a phone"
    shoot(driver, f"{name}-phone", width=PHONE[0])


def script_errors(driver: Any) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
