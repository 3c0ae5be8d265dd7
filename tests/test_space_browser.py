"""The Space's page as a person uses it: `python -m vaswani_hf.space` serving a tiny model on the loopback address,
driven by a real headless Chromium through Selenium (skipped, saying why, where Chromium, its driver, Selenium or
Gradio is not installed). Nothing leaves the machine: Gradio's analytics are off, the Hub is offline. The page's
logic without the page: tests/test_space.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
from hub_helpers import tiny  # noqa: F401 - the saved tiny model folder
from test_space import ARABIC, CHINESE, SENTENCE, _free_port, space  # noqa: F401 - space: the page's model

from vaswani_hf import space_logic as logic


# --- the page in a real browser --------------------------------------------------------------------------------------


def _browser_or_skip():
    missing = [name for name in ("gradio", "selenium") if not _importable(name)]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing += [] if chromium else ["Chromium (apt-get install chromium)"]
    missing += [] if driver else ["its driver (apt-get install chromium-driver)"]
    if missing:
        pytest.skip("the browser test needs " + ", ".join(missing))
    return chromium, driver


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _wait_for_page(url: str, server: subprocess.Popen, timeout: float = 120.0) -> None:
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


@pytest.fixture
def page_server(tiny, tmp_path):  # noqa: F811
    """`python -m vaswani_hf.space --model TINY --port P` on 127.0.0.1, offline, its temporary folder in tmp_path;
    stopped (by its id) afterwards."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GRADIO_")) and k != "PYTHONPATH"}
    (tmp_path / "tmp").mkdir()  # the server's temporary files, its Gradio cache folder among them
    env.update(GRADIO_ANALYTICS_ENABLED="False", TMPDIR=str(tmp_path / "tmp"), HF_HUB_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf"), MPLCONFIGDIR=str(tmp_path / "mpl"), OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    server = subprocess.Popen([sys.executable, "-m", "vaswani_hf.space", "--model", str(tiny["folder"]),
                               "--port", str(port)], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait_for_page(url, server)
        yield url, server
    finally:
        _stop(server)


def _stop(server: subprocess.Popen) -> None:
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
    chromium, driver_path = _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must not look for a driver on the network
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="chromium_profile_")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1200,1400", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # every request the page makes
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _element(driver, css: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def _wait(driver, condition, what: str, timeout: float = 90.0):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: condition())
    except TimeoutException:
        pytest.fail(f"the page did not show {what} within {timeout:.0f} s; it shows: {_page_text(driver)[:1500]}")


def _page_text(driver) -> str:
    return _element(driver, "body").text


def _translation(driver) -> str:
    return _element(driver, "#translation textarea").get_attribute("value")


def _heat_map(driver):
    """The heat map's <img> once it has loaded (naturalWidth > 0), else None."""
    from selenium.webdriver.common.by import By

    images = driver.find_elements(By.CSS_SELECTOR, "#attention img")
    if images and driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", images[0]):
        return images[0]
    return None


def _submit(driver, text: str, paste: bool = False) -> None:
    """Type `text` into the source box (or paste it: one input event, as a paste gives) and press Translate."""
    from selenium.webdriver.common.keys import Keys

    box = _element(driver, "#source textarea")
    box.send_keys(Keys.CONTROL, "a")  # select all and delete, as a person clears the box (the page sees it)
    box.send_keys(Keys.DELETE)
    if paste:
        driver.execute_script("arguments[0].value = arguments[1];"
                              "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));", box, text)
    elif text:
        box.send_keys(text)
    _element(driver, "#translate").click()


def _expect_refusal(driver, text: str, fragment: str, paste: bool = False) -> None:
    _submit(driver, text, paste)
    _wait(driver, lambda: fragment in _element(driver, "#status").text, f"the message {fragment!r}")
    assert _translation(driver) == "" and _heat_map(driver) is None


@pytest.mark.slow
def test_a_person_translates_looks_at_the_attention_and_gets_messages_for_bad_input(browser, page_server, space,
                                                                                    tmp_path):
    url, server = page_server
    expected = logic.translate_text(space, SENTENCE, 4, 0.6)  # the page's defaults: the generation config's
    browser.get(url)
    _wait(browser, lambda: browser.find_elements("css selector", "#source textarea"), "the source box")
    assert "The Transformer (Vaswani et al., 2017)" in _page_text(browser)

    _submit(browser, SENTENCE)
    _wait(browser, lambda: _translation(browser) and _heat_map(browser), "a translation and its heat map")
    assert _translation(browser) == expected.text
    assert f"{len(expected.attentions.source_tokens)} source and" in _element(browser, "#status").text
    first = _heat_map(browser).get_attribute("src")
    browser.find_element("xpath", "//label[contains(., 'encoder self-attention')]").click()  # another kind
    _wait(browser, lambda: _heat_map(browser) and _heat_map(browser).get_attribute("src") != first,
          "the encoder self-attention map")

    _expect_refusal(browser, "", "text box is empty")
    _expect_refusal(browser, "x" * 10_000, "10,000 characters", paste=True)
    _expect_refusal(browser, CHINESE, "Chinese/Japanese (CJK) script")
    _expect_refusal(browser, ARABIC, "Arabic script")
    assert "Traceback" not in _page_text(browser) and "Error" not in _page_text(browser)

    _submit(browser, SENTENCE)  # the server is still up and still translates
    _wait(browser, lambda: _translation(browser) == expected.text and _heat_map(browser), "the translation again")
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
    assert server.poll() is None
    assert _requested_hosts(browser) == {"127.0.0.1"}  # the page loads nothing from elsewhere (fonts, analytics)

    (cache,) = (tmp_path / "tmp").glob("vaswani_space_*")  # the server's own Gradio cache: the heat maps ...
    assert list(cache.rglob("*.png"))
    _stop(server)
    assert server.returncode is not None and not cache.exists()  # ... are deleted when it stops


def _requested_hosts(driver) -> set[str]:
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
