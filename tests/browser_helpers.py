"""The Space's page in a real headless Chromium driven by Selenium, for the browser tests
(tests/test_space_browser*.py): `serve` runs `python -m vaswani_hf.space` on the loopback address, offline; the
`browser` fixture (registered by conftest.py) skips, saying why, where Chromium, its driver, Selenium or Gradio is not
installed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
from cli_helpers import REPO, free_port


def browser_or_skip():
    missing = [name for name in ("gradio", "selenium") if not importable(name)]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing += [] if chromium else ["Chromium (apt-get install chromium)"]
    missing += [] if driver else ["its driver (apt-get install chromium-driver)"]
    if missing:
        pytest.skip("the browser test needs " + ", ".join(missing))
    return chromium, driver


def importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def wait_for_page(url: str, server: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the page's server exited with {server.returncode}: {server.stderr.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the page did not answer at {url} within {timeout:.0f} s")


@contextlib.contextmanager
def serve(folder, tmp_path):
    """`python -m vaswani_hf.space --model FOLDER --port P` (this checkout's package) on 127.0.0.1, offline, its
    temporary folder in tmp_path; stopped (by its id) afterwards."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GRADIO_")) and k != "PYTHONPATH"}
    (tmp_path / "tmp").mkdir(exist_ok=True)  # the server's temporary files
    env.update(
        GRADIO_ANALYTICS_ENABLED="False",
        TMPDIR=str(tmp_path / "tmp"),
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
        MPLCONFIGDIR=str(tmp_path / "mpl"),
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        PYTHONPATH=str(REPO),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "vaswani_hf.space", "--model", str(folder), "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_page(url, server)
        yield url, server
    finally:
        stop(server)


def stop(server: subprocess.Popen) -> None:
    """Stop the page's server as Ctrl-C does (Gradio shuts down and cleans its cache); kill it if it hangs."""
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGINT)
    try:
        server.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.communicate()


@pytest.fixture
def browser(monkeypatch):
    chromium, driver_path = browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must not look for a driver on the network
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="chromium_profile_")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,1400",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # every request the page makes
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def element(driver, css: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def wait(driver, condition, what: str, timeout: float = 90.0):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: condition())
    except TimeoutException:
        pytest.fail(f"the page did not show {what} within {timeout:.0f} s; it shows: {page_text(driver)[:1500]}")


def page_text(driver) -> str:
    return element(driver, "body").text


def translation(driver) -> str:
    return element(driver, "#translation textarea").get_attribute("value")


def status(driver) -> str:
    return element(driver, "#status").text


def submit(driver, text: str, paste: bool = False) -> None:
    """Type `text` into the source box (or paste it: one input event, as a paste gives) and press Enter."""
    from selenium.webdriver.common.keys import Keys

    box = element(driver, "#source textarea")
    box.send_keys(Keys.CONTROL, "a")  # select all and delete, as a person clears the box (the page sees it)
    box.send_keys(Keys.DELETE)
    if paste:
        driver.execute_script(
            "arguments[0].value = arguments[1];arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
            box,
            text,
        )
    elif text:
        box.send_keys(text)
    box.send_keys(Keys.ENTER)


def hover(driver, target) -> str:
    """Point at `target` (an element); the viewer's tip then."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(target).perform()
    return tip(driver)


def tip(driver) -> str:
    return element(driver, "#vz-tip").text


def map_shape(driver) -> tuple[int, int] | None:
    """(queries, keys) of the head view's map on screen (its canvas has one pixel a cell), or None."""
    shape = driver.execute_script(
        "const c = document.querySelector('#viewer canvas.vz-cells'); return c ? [c.height, c.width] : null"
    )
    return tuple(shape) if shape else None


def hover_cell(driver, query: int, key: int) -> str:
    """Point at the map's cell (query, key), its scroller scrolled to show it; the tip then."""
    from selenium.webdriver.common.action_chains import ActionChains

    queries, keys = map_shape(driver)
    x, y = driver.execute_script(
        "const c = document.querySelector('#viewer canvas.vz-cells'), s = c.closest('.vz-scroll');"
        "const [q, k, Q, K] = arguments, box = c.getBoundingClientRect(), w = box.width / K, h = box.height / Q;"
        "s.scrollIntoView({block: 'start'}); s.scrollLeft = (k + 0.5) * w - s.clientWidth / 2;"
        "s.scrollTop = (q + 0.5) * h - s.clientHeight / 2;"
        "const r = c.getBoundingClientRect(); return [r.left + (k + 0.5) * w, r.top + (q + 0.5) * h];",
        query,
        key,
        queries,
        keys,
    )
    actions = ActionChains(driver)
    actions.w3c_actions.pointer_action.move_to_location(int(x), int(y))
    actions.perform()
    return tip(driver)


def press(driver, *keys, shift: bool = False) -> None:
    """Press keys as a person does, on whatever has the focus."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    actions = ActionChains(driver)
    if shift:
        actions.key_down(Keys.SHIFT)
    actions.send_keys(*keys)
    if shift:
        actions.key_up(Keys.SHIFT)
    actions.perform()


def focused(driver) -> dict:
    """The focused element: its tag, id, class, data- attributes and outline (the visible focus)."""
    return driver.execute_script(
        "const a = document.activeElement, s = getComputedStyle(a);"
        "return {tag: a.tagName, id: a.id, cls: String(a.className), data: {...a.dataset},"
        "outline: s.outlineStyle === 'none' ? 0 : parseFloat(s.outlineWidth)}"
    )


def drawn(driver) -> str:
    """How many views the viewer has drawn (its data-drawn), to wait for the next one."""
    return driver.execute_script("const v = document.querySelector('#viewer .vz'); return v && v.dataset.drawn") or ""


def choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(element(driver, f"#{select_id}")).select_by_value(value)


def server_requests(driver) -> list[str]:
    """The requests the page sent since the last call (Chromium's performance log is read once)."""
    import json

    return [
        json.loads(e["message"])["message"]["params"]["request"]["url"]
        for e in driver.get_log("performance")
        if json.loads(e["message"])["message"]["method"] == "Network.requestWillBeSent"
    ]


def open_page(browser, url):
    browser.get(url)
    wait(browser, lambda: browser.find_elements("css selector", "#source textarea"), "the source box")


def requested_hosts(driver) -> set[str]:
    import json
    from urllib.parse import urlsplit

    hosts = set()
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if urlsplit(url).scheme in ("http", "https", "ws", "wss"):  # not data:, blob:, Chromium's own chrome:
                hosts.add(urlsplit(url).hostname)
    return hosts
