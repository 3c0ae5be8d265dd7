"""The Space (vaswani_hf.space, vaswani_hf.space.logic, space/): the page's checks, translation and attention maps
in this process, and the page itself as a person uses it: `python -m vaswani_hf.space` serving a tiny model on the
loopback address, driven by a real headless Chromium through Selenium (skipped, saying why, where Chromium, its
driver, Selenium or Gradio is not installed). Nothing leaves the machine: Gradio's analytics are off, the Hub is
offline."""

from __future__ import annotations

import importlib.util
import math
import re

import pytest
import torch
from cli_helpers import free_port

from vaswani_hf import translate
from vaswani_hf.configuration_vaswani import SettingError
from vaswani_hf.errors import UsageError
from vaswani_hf.space import logic

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCE = "a man is riding a horse ."
CHINESE = "我们今天下午去公园散步吧"
ARABIC = "ذهب الرجل إلى السوق صباحا"


@pytest.fixture(scope="module")
def space(tiny):  # noqa: F811
    return logic.load_space_model(str(tiny["folder"]))


# --- the page's logic, without the page ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fragments",
    [
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
    ],
)
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
    assert (
        f"source tokens, more than the {logic.MAX_SOURCE_TOKENS})" in message and "too long for this page" in message
    )
    assert "a line" not in message and "line 1" not in message and "--max_input_tokens" not in message


def test_the_status_line_says_no_length_penalty_with_beam_1(space):
    from vaswani_hf.space import page

    note = page.on_translate(space, SENTENCE, 1, 0.6)[1]
    assert re.search(r"beam size 1 \(no length penalty with beam 1\); computed in \d+\.\d\d s\.$", note), note
    assert "0.6" not in note
    assert "beam size 4, length penalty 0.6; computed in" in page.on_translate(space, SENTENCE, 4.0, 0.6)[1]


def test_the_known_script_comes_from_the_vocabulary(space):
    assert space.script == "LATIN"
    assert set("amnhorse") <= space.known and "我" not in space.known and "\ufffd" not in space.known


@pytest.mark.parametrize(
    "beams, alpha, fragment",
    [
        (0, 0.6, "beam size: num_beams must be in [1, 12], got 0"),
        (13, 0.6, "in [1, 12], got 13"),
        (2.5, 0.6, "num_beams must be an integer in [1, 12], got 2.5 (float)"),
        ("4", 0.6, "got '4' (str)"),
        (True, 0.6, "an integer"),
        (4, -0.1, "alpha: length_penalty must be in [0, 2], got -0.1"),
        (4, math.nan, "a finite number"),
        (4, "x", "length_penalty must be a number in [0, 2]"),
    ],
)
def test_decoding_settings_out_of_range_are_refused(beams, alpha, fragment):
    with pytest.raises(SettingError) as error:
        logic.check_decoding(beams, alpha)
    assert fragment in str(error.value)


def test_the_pages_ranges_are_narrower_views_of_the_declared_settings():
    """The sliders and the checks come from GENERATION_SETTINGS (the same Setting: type, meaning, message), with
    bounds inside the declared ones; no second range check."""
    from vaswani_hf.settings import GENERATION_SETTINGS

    for name, narrow in logic.PAGE_SETTINGS.items():
        declared = GENERATION_SETTINGS[name]
        assert (narrow.name, narrow.type, narrow.help, narrow.default) == (
            declared.name,
            declared.type,
            declared.help,
            declared.default,
        )
        assert declared.min <= narrow.min <= narrow.default <= narrow.max <= declared.max


def test_translation_is_the_packages_translate_with_the_chosen_settings(space, tiny):  # noqa: F811
    for beams, alpha in ((1, 0.6), (4, 0.6), (3, 1.5)):
        result = logic.translate_text(space, f"  {SENTENCE} ", beams, alpha)
        expected = translate(
            tiny["model"], tiny["tokenizer"], [SENTENCE], num_beams=beams, length_penalty=alpha, progress=False
        )[0]
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


def test_an_examples_view_is_the_papers_and_fits_the_model(space):
    """Figure 3's example opens encoder self-attention, layer 5 (the last of this 2-layer model, said in a note), at
    "making"."""
    figure = logic.EXAMPLES[0]
    assert "Figure 3" in figure.label and figure.view == {
        "kind": "encoder",
        "layer": 5,
        "head": "all",
        "token": "making",
    }
    attn = logic.translate_text(space, figure.text, 1, 0.6).attentions
    shown = logic.attention_payload(space, attn, figure.view)["view"]
    tokens = attn.source_tokens
    assert shown["kind"] == "encoder" and shown["layer"] == 2 and shown["head"] == "all"
    assert "shows layer 5" in shown["note"] and "layer 2, is shown" in shown["note"]
    word_end = next(i for i in range(shown["query"] + 1, len(tokens)) if tokens[i].startswith(logic.WORD_START))
    assert "".join(tokens[shown["query"] : word_end]) == "▁making"
    assert logic.word_index(tokens, "absent") is None and logic.word_index(tokens, None) is None
    assert "its" in logic.EXAMPLES[1].text and logic.EXAMPLES[1].view["token"] == "its"


@pytest.mark.parametrize(
    "view, shown",
    [
        ("not json", None),
        ('["encoder"]', None),
        ('{"kind": ["x"]}', None),
        ('{"kind": "self"}', None),
        (
            '{"kind": "cross", "layer": "abc", "head": 99, "token": 5}',
            {"kind": "cross", "layer": 1, "head": "all", "query": None},
        ),
        (
            '{"kind": "decoder", "layer": 9, "head": 3}',
            {
                "kind": "decoder",
                "layer": 2,
                "head": 3,
                "query": None,
                "note": "The paper's figure shows layer 9; this model's decoder self-attention (masked) has 2 layers, "
                "so its last, layer 2, is shown.",
            },
        ),
    ],
)
def test_a_view_the_page_did_not_write_is_ignored_or_clamped(space, view, shown):
    """The hidden box holds an example's view; whatever a browser sends there, the page translates."""
    import json

    from vaswani_hf.space import page

    translation, _, payload = page.on_translate(space, SENTENCE, 1, 0.6, view)
    assert translation and json.loads(payload).get("view") == shown


@pytest.mark.parametrize(
    "view, fragment",
    [
        (("cross", 3, "all"), "has 2 layers: layer must be a whole number from 1 to 2, not 3"),
        (("cross", 0, "1"), "from 1 to 2"),
        (("encoder", 1, "5"), "4 heads per layer"),
        (("encoder", 1, "x"), "head must be 'all'"),
        (("self", 1, "1"), "kind must be one of encoder, decoder, cross"),
        (("cross", 1.5, "1"), "layer must be a whole number from 1 to 2, not 1.5"),
        (("cross", "1.5", "all"), "layer must be a whole number"),
        (("cross", math.nan, "all"), "whole number"),
        (("cross", True, "all"), "whole number"),
        (("encoder", 1, 1.5), "head must be 'all' or a whole number from 1 to 4, not 1.5"),
        (("encoder", 1, "2.5"), "whole number"),
    ],
)
def test_a_view_the_model_does_not_have_is_refused(space, view, fragment):
    with pytest.raises(UsageError, match=re.escape(fragment)):
        logic.check_view(space, *view)


def test_the_page_says_what_the_model_is_never_where_it_is(space, tiny):  # noqa: F811
    from vaswani_hf.space import page

    facts = space.facts
    assert (facts.source_lang, facts.target_lang, facts.title) == ("en", "de", "vaswani-base")
    assert facts.parameters == sum(p.numel() for p in tiny["model"].parameters())
    text = page.intro(facts)
    assert "English → German" in text and f"{facts.parameters:,} parameters" in text
    assert "BLEU 12.35 sacreBLEU on Multi30k test2016" in text
    assert str(tiny["folder"]) not in text and str(tiny["folder"].parent) not in text
    assert facts.card_text and "vaswani-base" in facts.card_text  # the card, shown in the page
    hub = logic.ModelFacts("org/m", "en", "de", 10**6, card_url="https://huggingface.co/org/m")
    assert "[model card](https://huggingface.co/org/m)" in page.intro(hub) and "1.0M parameters" in page.intro(hub)


def test_a_card_with_one_language_states_the_source_only(space, tmp_path):
    (tmp_path / "README.md").write_text("---\nlanguage: en\n---\n# a model\n", encoding="utf-8")
    facts = logic.read_facts(str(tmp_path), space.model)
    assert (facts.source_lang, facts.target_lang) == ("en", None)


@pytest.mark.skipif(not importlib.util.find_spec("py3langid"), reason="the language warning needs py3langid")
def test_a_source_in_another_language_is_translated_with_a_warning(space):
    german = "Das Gesetz wird niemals perfekt sein, aber seine Anwendung sollte gerecht sein."
    assert "looks like German, not English" in logic.translate_text(space, german, 1, 0.6).warning
    if importlib.util.find_spec("gradio"):  # the API says it too: gr.Warning (outside a request: warnings.warn)
        from vaswani_hf.space import page

        translate, attention = page.api_functions(space)
        with pytest.warns(UserWarning, match="looks like German"):
            assert translate(german, 1, 0.6)
        with pytest.warns(UserWarning):
            assert "looks like German" in attention(german, "cross", 1, "all", 1, 0.6)["warning"]
    assert logic.translate_text(space, "The law will never be perfect, but it should be just.", 1, 0.6).warning is None
    assert logic.language_warning("ein Mann", space) is None  # two words: too little to tell


def test_the_page_answers_bad_input_with_a_message_and_no_exception(space, monkeypatch):
    from vaswani_hf.space import page

    assert (
        page.on_translate(space, CHINESE, 4, 0.6)[::2] == ("", "")
        and "CJK" in page.on_translate(space, CHINESE, 4, 0.6)[1]
    )
    assert "num_beams must be in [1, 12]" in page.on_translate(space, SENTENCE, 40, 0.6)[1]
    # the sentence itself, not the repr of gr.Error's message (which adds Python's quotes)
    assert page.on_translate(space, "", 4, 0.6)[1] == "**⚠ Type a sentence to translate: the text box is empty.**"
    monkeypatch.setattr(logic, "translate_text", lambda *a: 1 / 0)  # a bug: logged, the page says so in one line
    translation, message, payload = page.on_translate(space, SENTENCE, 4, 0.6)
    assert translation == payload == "" and "could not translate this (ZeroDivisionError)" in message


@pytest.mark.slow
@pytest.mark.skipif(not importlib.util.find_spec("gradio"), reason="the page needs Gradio")
def test_the_api_is_two_named_endpoints_that_answer_bad_values_in_one_sentence(space, capfd, tmp_path, monkeypatch):
    """Through gradio_client: /translate and /attention only; a wrong type is a clear message and no traceback in
    the server's log; an upload (the page has none) of 100 MB is refused; a text in another language is warned of."""
    import urllib.error
    import urllib.request

    from gradio_client import Client
    from gradio_client.exceptions import AppError
    from starlette.middleware import Middleware

    from vaswani_hf.space import page

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # where Gradio would store an upload
    demo = page.build_demo(space).queue(default_concurrency_limit=page.QUEUE_CONCURRENCY)
    port = free_port()
    demo.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        app_kwargs={"middleware": [Middleware(page.Guard, blocks=demo)]},
    )
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        api = client.view_api(return_format="dict", print_info=False)
        assert set(api["named_endpoints"]) == {"/translate", "/attention"} and not api["unnamed_endpoints"]
        expected = logic.translate_text(space, SENTENCE, 2, 0.6)
        assert client.predict(SENTENCE, 2, 0.6, api_name="/translate") == expected.text
        view = client.predict(SENTENCE, "cross", 2, "all", 2, 0.6, api_name="/attention")
        assert view["translation"] == expected.text and view["keys"] == expected.attentions.source_tokens
        torch.testing.assert_close(torch.tensor(view["weights"]), expected.attentions.cross[1], atol=5e-5, rtol=0)
        packed = client.predict(SENTENCE, "cross", 2, "all", 2, 0.6, 4, 8, api_name="/attention")
        assert packed["weights"] is None and packed["shape"] == list(expected.attentions.cross[1].shape)
        if importlib.util.find_spec("py3langid"):  # a text in another language: a "log" status update of the job
            job = client.submit(
                "Das Gesetz wird niemals perfekt sein, aber seine Anwendung sollte gerecht sein.",
                1,
                0.6,
                api_name="/translate",
            )
            assert job.result()
            updates = [job.communicator.updates.get_nowait() for _ in range(job.communicator.updates.qsize())]
            assert "looks like German" in str([getattr(update, "log", None) for update in updates])
        for arguments, name, fragment in (
            ((SENTENCE, "four", 0.6), "/translate", "num_beams must be an integer"),
            ((12345, 4, 0.6), "/translate", "The text must be a string, not int"),
            ((SENTENCE, "self", 1, "all", 2, 0.6), "/attention", "kind must be one of"),
        ):
            with pytest.raises(AppError, match=fragment):
                client.predict(*arguments, api_name=name)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/gradio_api/upload",
            method="POST",
            data=b'--x\r\nContent-Disposition: form-data; name="files"; '
            b'filename="big.bin"\r\n\r\n' + b"0" * 100_000_000 + b"\r\n--x--\r\n",
            headers={"Content-Type": "multipart/form-data; boundary=x"},
        )
        with pytest.raises(urllib.error.URLError) as refused:  # 403, or the connection closed mid-upload
            urllib.request.urlopen(request, timeout=120)
        assert getattr(refused.value, "code", 403) == 403 or isinstance(refused.value.reason, ConnectionResetError)
    finally:
        demo.close()
    assert not [f for f in tmp_path.rglob("*") if f.is_file() and f.stat().st_size > 10_000]  # nothing stored
    assert "Traceback" not in capfd.readouterr().err
