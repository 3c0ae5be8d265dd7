"""The Space (vaswani_hf.space, vaswani_hf.space_logic, space/): the page's checks, translation and attention maps
in this process, and the page itself as a person uses it: `python -m vaswani_hf.space` serving a tiny model on the
loopback address, driven by a real headless Chromium through Selenium (skipped, saying why, where Chromium, its
driver, Selenium or Gradio is not installed). Nothing leaves the machine: Gradio's analytics are off, the Hub is
offline."""

from __future__ import annotations

import importlib.util
import math
import os
import socket
import subprocess
import sys
import tomllib

import pytest
import torch
from cli_helpers import REPO, assert_one_line_error
from hub_helpers import tiny  # noqa: F401 - the saved tiny model folder

from vaswani_hf import space_logic as logic
from vaswani_hf import translate
from vaswani_hf.errors import UsageError
from vaswani_hf.hub import space as hub_space
from vaswani_hf.visualize import KIND_TITLES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCE = "a man is riding a horse ."
CHINESE = "我们今天下午去公园散步吧"
ARABIC = "ذهب الرجل إلى السوق صباحا"


@pytest.fixture(scope="module")
def space(tiny):  # noqa: F811
    return logic.load_space_model(str(tiny["folder"]))


# --- the page's logic, without the page ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, fragments", [
    ("", ["text box is empty"]),
    (" \n\t ", ["text box is empty"]),
    (None, ["text box is empty"]),
    ("\u200b\u200b\u200d\ufeff \u2060", ["text box is empty"]),  # zero-width spaces, joiner, BOM, word joiner
    ("\x00 \x07\x1b", ["text box is empty"]),  # NUL and other control characters
    ("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069", ["text box is empty"]),  # bidi marks
    ("😀😀😀 🐶🐱", ["Nothing to translate: the text has no words"]),
    ("!!! ... ??? ,,, ;;;", ["Nothing to translate: the text has no words"]),
    ("\u0301\u0301", ["the text has no words"]),  # combining accents, on nothing
    ("a" * 10_000, ["10,000 characters", f"up to {logic.MAX_CHARACTERS:,}", "Shorten it"]),
    (CHINESE, ["Chinese/Japanese (CJK) script", "never saw in training", "Latin script only"]),
    (ARABIC, ["Arabic script", "Latin script only"]),
    ("Мы идём домой", ["Cyrillic script"]),
])
def test_bad_text_is_refused_with_a_message_saying_what_to_do(space, text, fragments):
    with pytest.raises(UsageError) as error:
        logic.translate_text(space, text, 4, 0.6)
    message = str(error.value)
    assert "\n" not in message and len(message) < 400
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_text_is_one_line_and_a_few_unknown_letters_pass(space):
    assert logic.check_text("  a man\nis riding  ", space) == "a man is riding"
    assert logic.check_text("a man is riding a horse in 東京", space)  # 2 of 16 letters unknown: translated
    assert logic.check_text("!!! 123 ...", space) == "!!! 123 ..."  # digits only: no script to judge
    assert logic.check_text("A dog 🐶 runs in the park!!!", space) == "A dog 🐶 runs in the park!!!"
    assert logic.check_text("\u200ba man\u200b", space) == "\u200ba man\u200b"  # visible words: the tokenizer's


def test_a_sentence_over_the_token_limit_is_refused_in_words_for_the_page(space):
    text = " ".join(["man"] * (logic.MAX_SOURCE_TOKENS + 5))
    with pytest.raises(UsageError) as error:
        logic.translate_text(space, text, 1, 0.6)
    message = str(error.value)
    assert f"at most {logic.MAX_SOURCE_TOKENS} are allowed here" in message and "the sentence has" in message
    assert "a line may have" not in message and "--max_input_tokens" not in message


def test_the_status_line_says_no_length_penalty_with_beam_1(space):
    from vaswani_hf import space as page

    note = page.on_translate(space, SENTENCE, 1, 0.6, "cross", 2, "all")[1]
    assert "beam size 1 (no length penalty with beam 1)." in note and "0.6" not in note
    assert "beam size 4, length penalty 0.6." in page.on_translate(space, SENTENCE, 4, 0.6, "cross", 2, "all")[1]


def test_the_known_script_comes_from_the_vocabulary(space):
    assert space.script == "LATIN"
    assert set("amnhorse") <= space.known and "我" not in space.known and "\ufffd" not in space.known


@pytest.mark.parametrize("beams, alpha, fragment", [
    (0, 0.6, "beam size must be a whole number from 1"), (13, 0.6, "from 1 to 12"), (2.5, 0.6, "whole number"),
    ("x", 0.6, "must be numbers"), (4, -0.1, "length penalty must be between"), (4, math.nan, "between 0.0 and 2.0"),
])
def test_decoding_settings_out_of_range_are_refused(beams, alpha, fragment):
    with pytest.raises(UsageError, match=fragment):
        logic.check_decoding(beams, alpha)


def test_translation_is_the_packages_translate_with_the_chosen_settings(space, tiny):  # noqa: F811
    for beams, alpha in ((1, 0.6), (4, 0.6), (3, 1.5)):
        result = logic.translate_text(space, f"  {SENTENCE} ", beams, alpha)
        expected = translate(tiny["model"], tiny["tokenizer"], [SENTENCE], num_beams=beams, length_penalty=alpha,
                             progress=False)[0]
        assert result.text == expected and (result.num_beams, result.length_penalty) == (beams, alpha)
    assert result.attentions.target_origin == "beam-3"


def test_attention_weights_are_those_of_the_source_and_the_shown_translation(space, tiny):  # noqa: F811
    result = logic.translate_text(space, SENTENCE, 4, 0.6)
    attn, tokenizer = result.attentions, tiny["tokenizer"]
    source_ids = tokenizer([SENTENCE])["input_ids"][0]
    assert attn.source_ids == source_ids
    assert tokenizer.decode(attn.target_ids, skip_special_tokens=True) == result.text
    S, T = len(source_ids), len(attn.target_ids)
    assert attn.encoder.shape == (2, 4, S, S) and attn.decoder.shape == (2, 4, T, T)
    assert attn.cross.shape == (2, 4, T, S)
    torch.testing.assert_close(attn.cross.sum(-1), torch.ones(2, 4, T), atol=1e-5, rtol=0)  # rows of Eq. (1)


def test_a_heat_map_is_the_packages_plot_of_the_chosen_layer_and_head(space):
    attn = logic.translate_text(space, SENTENCE, 2, 0.6).attentions
    fig = logic.attention_figure(space, attn, "encoder", "2", "3")  # the page's choices are 1-based
    ax = fig.axes[0]
    assert ax.get_title() == f"{KIND_TITLES['encoder']}, layer 2, head 3"
    torch.testing.assert_close(torch.as_tensor(ax.images[0].get_array().data), attn.encoder[1, 2])
    assert [t.get_text() for t in ax.get_xticklabels()] == attn.source_tokens
    all_heads = logic.attention_figure(space, attn, "cross", 1, logic.ALL_HEADS)
    assert sum(1 for ax in all_heads.axes if ax.images) == 4  # 4 heads + 1 colorbar axes
    image = logic.figure_image(all_heads)
    assert image.format is None and image.mode in ("RGBA", "RGB") and min(image.size) > 100
    assert max(image.size) <= logic.MAX_IMAGE_PIXELS


@pytest.mark.parametrize("view, fragment", [
    (("cross", 3, "all"), "has 2 layers: choose a layer from 1 to 2"), (("cross", 0, "1"), "from 1 to 2"),
    (("encoder", 1, "5"), "4 heads per layer"), (("encoder", 1, "x"), "head must be 'all'"),
    (("self", 1, "1"), "attention must be one of encoder, decoder, cross"),
    (("cross", 1.5, "1"), "layer must be a whole number from 1 to 2, not 1.5"),
    (("cross", "1.5", "all"), "layer must be a whole number"), (("cross", math.nan, "all"), "whole number"),
    (("encoder", 1, 1.5), "head must be 'all' or a whole number from 1 to 4, not 1.5"),
    (("encoder", 1, "2.5"), "whole number"),
])
def test_a_view_the_model_does_not_have_is_refused(space, view, fragment):
    with pytest.raises(UsageError, match=fragment):
        logic.check_view(space, *view)


def test_the_page_answers_bad_input_with_a_message_and_no_exception(space, monkeypatch):
    from vaswani_hf import space as page

    translation, message, image, weights = page.on_translate(space, CHINESE, 4, 0.6, "cross", 2, "all")
    assert (translation, image, weights) == ("", None, None) and "CJK" in message
    monkeypatch.setattr(logic, "translate_text", lambda *a: 1 / 0)  # a bug: logged, the page says so in one line
    translation, message, image, _ = page.on_translate(space, SENTENCE, 4, 0.6, "cross", 2, "all")
    assert translation == "" and image is None and "could not translate this (ZeroDivisionError)" in message


# --- the files of space/ and the command line ------------------------------------------------------------------------


def test_space_folder_is_what_push_space_writes():
    """space/ in the repository is the Space `push_space` uploads (less the model id and the package source)."""
    from huggingface_hub import SpaceCard
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    folder = REPO / "space"
    assert (folder / "app.py").read_text(encoding="utf-8") == hub_space.SPACE_APP
    assert (folder / "README.md").read_text(encoding="utf-8") == hub_space.render_space_readme()
    assert (folder / "requirements.txt").read_text(encoding="utf-8") == hub_space.space_requirements()
    card = SpaceCard.load(folder / "README.md").data
    assert (card.sdk, card.app_file, card.sdk_version) == ("gradio", "app.py", hub_space.GRADIO_SDK_VERSION)
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = {str(Requirement(line)) for line in hub_space.space_requirements().splitlines()
              if line and not line.startswith(("#", "-"))}
    assert listed == {str(Requirement(r)) for r in project["dependencies"]}  # reinstall (pip install -e .) if not
    (gradio,) = [Requirement(r) for r in project["optional-dependencies"]["space"]]
    assert gradio.name == "gradio" and hub_space.GRADIO_SDK_VERSION in SpecifierSet(str(gradio.specifier))
    assert project["scripts"]["vaswani-space"] == "vaswani_commands:space"  # the runner, then vaswani_hf.space:main


def test_model_comes_from_the_flag_the_environment_the_readme_then_the_bundled_folder(tmp_path, monkeypatch):
    from vaswani_hf import space as page

    monkeypatch.delenv(page.MODEL_ENV, raising=False)
    assert page.resolve_model(None) == "outputs/default/hub"
    (tmp_path / "README.md").write_text(hub_space.render_space_readme("org/vaswani-base"), encoding="utf-8")
    readme_model = page.model_from_readme(tmp_path / "app.py")
    assert readme_model == "org/vaswani-base" and page.model_from_readme(REPO / "space" / "app.py") is None
    assert page.resolve_model(None, readme_model) == "org/vaswani-base"
    monkeypatch.setenv(page.MODEL_ENV, "env/model")
    assert page.resolve_model(None, readme_model) == "env/model"
    assert page.resolve_model("flag/model", readme_model) == "flag/model"


def test_an_empty_model_name_is_refused_not_replaced(monkeypatch):
    from vaswani_hf import space as page

    monkeypatch.setenv(page.MODEL_ENV, "env/model")
    for empty in ("", "  "):
        with pytest.raises(UsageError, match="--model is empty"):
            page.resolve_model(empty, "org/readme-model")
    monkeypatch.setenv(page.MODEL_ENV, "")
    with pytest.raises(UsageError, match=f"{page.MODEL_ENV} is set but empty"):
        page.resolve_model(None, "org/readme-model")


@pytest.fixture
def taken_port():
    """A port on 127.0.0.1 that another program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


@pytest.fixture
def no_gradio_variables(monkeypatch):
    from vaswani_hf import space as page

    for name in (page.HOST_ENV, page.PORT_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_gradio_variables")
def test_the_address_is_checked_and_named_by_its_flag_or_variable(taken_port, monkeypatch):
    from vaswani_hf import space as page

    port = _free_port()
    assert page.listen_address(None, port) == ("127.0.0.1", port) and page.listen_address() == ("127.0.0.1", None)
    cases = [((None, taken_port), {}, f"--port {taken_port}: the port is in use"),
             (("999.1.1.1", None), {}, "--host '999.1.1.1' is not an address or a host name this machine knows"),
             (("192.0.2.1", port), {}, "--host '192.0.2.1' is not an address of this machine"),  # TEST-NET-1
             (("", None), {}, "--host is empty"),
             ((None, None), {page.PORT_ENV: "abc"}, "GRADIO_SERVER_PORT='abc' is not a port number"),
             ((None, None), {page.PORT_ENV: "70000"}, "GRADIO_SERVER_PORT='70000' is not a port number"),
             ((None, None), {page.PORT_ENV: str(taken_port)}, f"GRADIO_SERVER_PORT={taken_port}: the port is in use"),
             ((None, None), {page.HOST_ENV: "999.1.1.1"}, "GRADIO_SERVER_NAME '999.1.1.1' is not an address")]
    for arguments, environment, fragment in cases:
        with monkeypatch.context() as patch:
            for name, value in environment.items():
                patch.setenv(name, value)
            with pytest.raises(UsageError) as error:
                page.listen_address(*arguments)
        assert fragment in str(error.value) and "\n" not in str(error.value), (arguments, environment, error.value)
    monkeypatch.setenv(page.PORT_ENV, str(port))
    assert page.listen_address("127.0.0.1", None) == ("127.0.0.1", port)  # the variable, as Gradio reads it


@pytest.mark.usefixtures("no_gradio_variables")
def test_command_line_refuses_a_bad_address_before_loading_the_model(tiny, taken_port, capsys,  # noqa: F811
                                                                     monkeypatch):
    from vaswani_hf import space as page

    monkeypatch.setattr(logic, "load_space_model", lambda *a, **k: pytest.fail("the model was loaded first"))
    folder = str(tiny["folder"])
    assert_one_line_error(page.main, ["--model", folder, "--port", str(taken_port)], capsys, 2,
                          "vaswani-space: error: --port", "in use")
    assert_one_line_error(page.main, ["--model", folder, "--host", "999.1.1.1"], capsys, 2, "--host '999.1.1.1'")
    assert_one_line_error(page.main, ["--model", ""], capsys, 2, "--model is empty")
    monkeypatch.setenv(page.PORT_ENV, "abc")
    assert_one_line_error(page.main, ["--model", folder], capsys, 2, "GRADIO_SERVER_PORT='abc'")


@pytest.mark.slow
def test_vaswani_space_with_its_port_taken_is_one_line_exit_2(tiny, taken_port, tmp_path):  # noqa: F811
    """The real process: the refusal comes before Gradio is imported and the model loaded (no traceback)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GRADIO_")) and k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for argv, extra, fragment in ((["--port", str(taken_port)], {}, f"--port {taken_port}: the port is in use"),
                                  ([], {"GRADIO_SERVER_PORT": "abc"}, "GRADIO_SERVER_PORT='abc'")):
        done = subprocess.run([sys.executable, "-m", "vaswani_hf.space", "--model", str(tiny["folder"]), *argv],
                              env={**env, **extra}, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.count("\n") == 1 and fragment in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(not importlib.util.find_spec("gradio"), reason="the page needs Gradio")
def test_the_page_deletes_its_heat_maps_from_gradios_cache(space):
    from vaswani_hf import space as page

    assert page.build_demo(space).delete_cache == (page.CACHE_SECONDS, page.CACHE_SECONDS)


def test_command_line_refuses_a_missing_model_in_one_line(tmp_path, capsys):
    from vaswani_hf import space as page

    assert_one_line_error(page.main, ["--model", str(tmp_path / "absent")], capsys, 2, "vaswani-space: error:",
                          str(tmp_path / "absent"))
    assert_one_line_error(page.main, ["--port", "0"], capsys, 2, "--port")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
