"""The Space's page as a person uses it: `python -m vaswani_hf.space` serving a tiny model on the loopback address,
driven by a real headless Chromium through Selenium (skipped, saying why, where Chromium, its driver, Selenium or
Gradio is not installed). Nothing leaves the machine: Gradio's analytics are off, the Hub is offline. The page's
logic without the page: tests/test_space.py."""

from __future__ import annotations

import contextlib
import importlib.util
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
from test_space import ARABIC, CHINESE, SENTENCE, space  # noqa: F401 - space: the page's model

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


@contextlib.contextmanager
def _serve(folder, tmp_path):
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
        _wait_for_page(url, server)
        yield url, server
    finally:
        _stop(server)


@pytest.fixture
def page_server(tiny, tmp_path):  # noqa: F811
    with _serve(tiny["folder"], tmp_path) as served:
        yield served


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


def _post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, str]:
    import urllib.error

    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _answer(url: str, session: str) -> str:
    """The queue's messages for `session` (the server-sent events of /queue/data), until its event completes."""
    seen = []
    with urllib.request.urlopen(f"{url}gradio_api/queue/data?session_hash={session}", timeout=60) as stream:
        for line in stream:
            seen.append(line.decode())
            if "process_completed" in seen[-1]:
                break
    return "".join(seen)


@pytest.mark.slow
def test_raw_requests_are_refused_in_one_sentence_with_no_traceback_and_no_upload_is_stored(page_server, tmp_path):
    """Requests the page never sends (an upload, the wrong number or shape of values, a function it does not have)
    are answered with a clear message; the server's log shows no traceback and stores nothing."""
    import json

    url, server = page_server
    upload = b'--x\r\nContent-Disposition: form-data; name="files"; filename="in.en"\r\n\r\nA man.\r\n--x--\r\n'
    for route in ("upload", "upload", "upload/", "upload?upload_id=x", "process_recording"):
        code, text = _post(f"{url}gradio_api/{route}", upload, "multipart/form-data; boundary=x")
        assert code == 403 and "accepts no uploads" in text
    answers = []
    for fn_index, data in (
        (0, [[0]]),
        (0, ["x"]),
        (0, [99]),
        (4, [SENTENCE]),
        (5, [SENTENCE, "cross"]),
        (99, [SENTENCE]),
        ("x", []),
        (4, [SENTENCE, [4], {}]),
    ):
        session = f"s{len(answers)}"
        body = json.dumps({"fn_index": fn_index, "data": data, "session_hash": session, "event_data": None})
        code, text = _post(f"{url}gradio_api/queue/join", body.encode())
        answers.append(text if code != 200 else _answer(url, session))
        assert code in (200, 422), (fn_index, code, text)
        assert '"error": null' not in answers[-1] and '"error":null' not in answers[-1], answers[-1]
    assert all("An example is chosen by its index, 0 to 3" in answer for answer in answers[:3])
    assert "needs 3 values, got 1" in answers[3] and "needs 6 values, got 2" in answers[4]
    assert "no function 99" in answers[5] and "no function 'x'" in answers[6] and "num_beams must be" in answers[7]
    assert "Traceback" not in "".join(answers) and server.poll() is None
    server.send_signal(signal.SIGINT)
    log = server.communicate(timeout=30)[1]
    assert "Traceback" not in log, log[-3000:]
    assert not [f for f in (tmp_path / "tmp").rglob("in.en")]  # nothing stored


@pytest.fixture
def browser(monkeypatch):
    chromium, driver_path = _browser_or_skip()
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


def _status(driver) -> str:
    return _element(driver, "#status").text


def _cells(driver):
    return driver.find_elements("css selector", "#viewer rect.vz-cell")


def _submit(driver, text: str, paste: bool = False) -> None:
    """Type `text` into the source box (or paste it: one input event, as a paste gives) and press Enter."""
    from selenium.webdriver.common.keys import Keys

    box = _element(driver, "#source textarea")
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


def _expect_refusal(driver, text: str, fragment: str, paste: bool = False) -> None:
    _submit(driver, text, paste)
    _wait(driver, lambda: fragment in _status(driver), f"the message {fragment!r}")
    assert _translation(driver) == "" and not _cells(driver)


def _hover(driver, element) -> str:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(element).perform()
    return _element(driver, "#vz-tip").text


def _choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(_element(driver, f"#{select_id}")).select_by_value(value)


def _server_requests(driver) -> list[str]:
    """The requests the page sent since the last call (Chromium's performance log is read once)."""
    import json

    return [
        json.loads(e["message"])["message"]["params"]["request"]["url"]
        for e in driver.get_log("performance")
        if json.loads(e["message"])["message"]["method"] == "Network.requestWillBeSent"
    ]


def _open_page(browser, url):
    browser.get(url)
    _wait(browser, lambda: browser.find_elements("css selector", "#source textarea"), "the source box")


@pytest.mark.slow
def test_a_person_translates_and_explores_the_attention_in_the_browser(browser, page_server, space, tiny):  # noqa: F811
    url, server = page_server
    expected = logic.translate_text(space, SENTENCE, 4, 0.6)  # the page's defaults: the generation config's
    _open_page(browser, url)
    text = _page_text(browser)
    assert "English → German" in text and "parameters" in text and "BLEU 12.35" in text
    assert str(tiny["folder"]) not in text and "marks a token that starts a word" in text

    _submit(browser, SENTENCE)  # Enter translates
    _wait(browser, lambda: _translation(browser) and _cells(browser), "a translation and its attention")
    assert _translation(browser) == expected.text
    status = _status(browser)
    assert f"{len(expected.attentions.source_tokens)} source and" in status
    S = len(expected.attentions.source_tokens)
    assert len(_cells(browser)) == S * S  # encoder self-attention, layer 1, the heads' mean
    cell = next(c for c in _cells(browser) if (c.get_attribute("data-q"), c.get_attribute("data-k")) == ("1", "2"))
    tip = _hover(browser, cell)
    tokens = expected.attentions.source_tokens
    weight = float(expected.attentions.encoder[0, :, 1, 2].mean())
    assert (
        f'query "{tokens[1]}" → key "{tokens[2]}": {weight:.3f}' in tip
        or abs(float(tip.split(": ")[1].split(" ")[0]) - weight) < 2e-3
    ), tip
    assert "per head" in tip

    _server_requests(browser)  # a change of view asks the server nothing, and the status stays
    _choose(browser, "vz-kind", "cross")
    _choose(browser, "vz-layer", "2")
    _choose(browser, "vz-head", "3")
    T = len(expected.attentions.target_tokens)
    _wait(browser, lambda: len(_cells(browser)) == T * S, "the cross-attention map")
    tip = _hover(browser, _cells(browser)[0])
    assert f"{float(expected.attentions.cross[1, 2, 0, 0]):.3f}" in tip and "head 3" in tip
    _element(browser, "#vz-mode-model").click()
    thumbs = browser.find_elements("css selector", "#viewer .vz-thumb")
    assert len(thumbs) == 2 * 4  # every layer and head of this 2-layer, 4-head model
    thumbs[5].click()  # layer 2, head 2, opened large
    _wait(browser, lambda: _cells(browser), "the opened head")
    assert (
        _element(browser, "#vz-layer").get_attribute("value"),
        _element(browser, "#vz-head").get_attribute("value"),
    ) == ("2", "2")
    browser.find_element("css selector", "#viewer text.vz-q").click()  # a query token: its weights over the keys
    assert "attends to" in _element(browser, "#vz-strip").text
    assert not [u for u in _server_requests(browser) if "127.0.0.1" in u] and _status(browser) == status

    figure, view, _ = logic.EXAMPLES[0]  # the example opens the paper's view: encoder self-attention at "making"
    result = logic.translate_text(space, figure, 4, 0.6)
    shown = logic.attention_payload(space, result.attentions, view)["view"]
    browser.find_element("xpath", "//*[@id='examples']//*[contains(text(), 'Figure 3')]").click()
    _wait(
        browser,
        lambda: (
            _element(browser, "#vz-kind").get_attribute("value") == "encoder"
            and browser.find_elements("css selector", "#vz-strip")
        ),
        "Figure 3's view",
    )
    assert _element(browser, "#source textarea").get_attribute("value") == figure
    assert _element(browser, "#vz-layer").get_attribute("value") == str(shown["layer"]) == "2"  # 5 of 6: the last
    assert _element(browser, "#vz-strip b").text == result.attentions.source_tokens[shown["query"]]

    _expect_refusal(browser, "", "text box is empty")
    _expect_refusal(browser, "x" * 10_000, "10,000 characters", paste=True)
    _expect_refusal(browser, CHINESE, "Chinese/Japanese (CJK) script")
    _expect_refusal(browser, ARABIC, "Arabic script")
    assert "Traceback" not in _page_text(browser)
    if importlib.util.find_spec("py3langid"):
        _submit(browser, "Das Gesetz wird niemals perfekt sein, aber seine Anwendung sollte gerecht sein.")
        _wait(browser, lambda: "looks like German" in _status(browser), "the language warning")
        assert _translation(browser)

    _submit(browser, SENTENCE)  # the server is still up and still translates
    _wait(browser, lambda: _translation(browser) == expected.text and _cells(browser), "the translation again")
    assert server.poll() is None
    assert _requested_hosts(browser) == {"127.0.0.1"}  # the page loads nothing from elsewhere (fonts, analytics)


TRAINED = REPO / "outputs" / "default" / "hub"  # the bundled model of `python scripts/train.py`
DOCS = REPO / "docs"


@pytest.mark.slow
@pytest.mark.skipif(
    not (TRAINED / "config.json").is_file(),
    reason="train the bundled model first: python scripts/train.py (the screenshots in docs/ show a trained model)",
)
def test_the_screenshots_in_docs_show_the_papers_figure_on_a_trained_model(browser, tmp_path):
    """docs/space_screenshot.png (Figure 3's example: head view, a hovered weight) and
    docs/space_screenshot_model_view.png, taken from the page serving the trained bundled model."""
    with _serve(TRAINED, tmp_path) as (url, _):
        browser.set_window_size(1200, 1700)
        _open_page(browser, url)
        browser.find_element("xpath", "//*[@id='examples']//*[contains(text(), 'Figure 3')]").click()
        _wait(browser, lambda: browser.find_elements("css selector", "#vz-strip") and _cells(browser), "Figure 3")
        query = _element(browser, "#vz-strip b").text  # the first subword of "making"
        assert query.startswith("▁") and "making".startswith(query[1:])
        _hover(browser, _cells(browser)[len(_cells(browser)) // 3])
        browser.save_screenshot(str(DOCS / "space_screenshot.png"))
        _element(browser, "#vz-mode-model").click()
        _hover(browser, browser.find_elements("css selector", "#viewer .vz-thumb")[0])
        browser.execute_script("document.querySelector('#viewer').scrollIntoView()")
        browser.save_screenshot(str(DOCS / "space_screenshot_model_view.png"))


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
