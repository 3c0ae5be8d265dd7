"""Do what the Space's page does, without the page.

`vaswani_hf.space` puts these functions behind a Gradio page. They need no web framework, so tests call them
directly.

The page says what the model is (`read_facts`, from `vaswani_hf.space.facts`) and checks the text and the decoding
settings before any work. Translation is `vaswani_hf.translation.inference.translate`, i.e. `model.generate` with the model's
generation config (for this model the paper's Section 6.1 decoding: beam search with GNMT's length penalty
((5 + |Y|) / 6) ** alpha, and at most input length + 50 tokens), with the page's beam size and alpha.
`collect_attentions` (`vaswani_hf.visualize`) then runs one teacher-forced pass over (source, translation) with
`output_attentions=True`, which gives every weight of encoder self-, decoder self- and encoder-decoder attention in
every layer (Section 3.2.3). The forced pass reads the translation's tokens as the tokenizer writes them; the
decoder's weights over that prefix are the ones it used while generating it (same prefix, dropout off).
`attention_payload` packs those weights for the page's script (`vaswani_hf.space.payload`), and `attention_numbers`
gives one view of them as numbers for the API.

A page cannot refuse input with an exit status, so every expected refusal is a `UsageError` (or, for a decoding
setting, the declarations' `SettingError`) whose one sentence the page shows: empty text, more than `MAX_CHARACTERS`
characters, text whose letters are mostly characters the model never saw in training (another script than its
source language's, as the tokenizer's vocabulary tells), a source longer than the page's token limit or the model's
positions, or a setting out of range.
"""

from __future__ import annotations

import base64
import functools
import math
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputLineError, UsageError
from ..settings import GENERATION_SETTINGS, settings_of
from ..translation.inference import load_for_decoding, translate
from ..visualize import KINDS, MAX_PLOT_TOKENS, Attentions, collect_attentions
from ..visualize.attention import KIND_TITLES
from .facts import (
    ALL_HEADS,
    CAPTIONS,
    EXAMPLES,
    LAST,
    NEWS,
    Example,
    ModelFacts,
    example_label,
    language_name,
    model_domain,
    read_facts,
)
from .payload import API_SETTINGS, CODES, PageWeights, WeightCache, codes, page_kinds
from .push import API_EXAMPLE

MAX_CHARACTERS = 1000  # A sentence or two, because the maps are tokens x tokens cells and a CPU Space decodes slowly.
MAX_SOURCE_TOKENS = MAX_PLOT_TOKENS  # Longer sources make unreadable maps (vaswani-visualize-attention's limit too).
UNKNOWN_SHARE = 0.5  # Text is refused when more than this share of its letters are characters the model never saw.
LANGUAGE_CONFIDENCE = 0.9  # The page warns when the identifier is this sure that the text is in another language.
WORD_START = "▁"  # The token labels' mark of a word-initial subword (see `vaswani_hf.visualize`).


# Beam sizes past 12 and alphas past 2 change nothing visible on a page's sentence except the waiting time.
PAGE_SETTINGS = {
    "num_beams": GENERATION_SETTINGS["num_beams"].narrowed(min=1, max=12, nullable=False),
    "length_penalty": GENERATION_SETTINGS["length_penalty"].narrowed(min=0.0, max=2.0, nullable=False),
}


@dataclass
class AttentionView:
    """Declare what the page's attention view may show: its kind, a layer and a head, both counted from 1.

    Each model bounds the layer and head by its own counts (`check_view`).
    """

    kind: str = field(default="encoder", metadata={"help": "which attention", "choices": KINDS})
    layer: int = field(default=1, metadata={"help": "the layer, from 1", "min": 1})
    head: int | str = field(
        default=ALL_HEADS, metadata={"help": "a head, from 1, or all", "min": 1, "words": (ALL_HEADS,)}
    )


VIEW_SETTINGS = settings_of(AttentionView)


__all__ = [
    "API_EXAMPLE",
    "MAX_CHARACTERS",
    "MAX_SOURCE_TOKENS",
    "ALL_HEADS",
    "PAGE_SETTINGS",
    "API_SETTINGS",
    "EXAMPLES",
    "Example",
    "example_label",
    "model_domain",
    "NEWS",
    "CAPTIONS",
    "read_facts",
    "language_name",
    "ModelFacts",
    "SpaceModel",
    "Translation",
    "load_space_model",
    "known_characters",
    "check_text",
    "language_warning",
    "check_decoding",
    "check_view",
    "translate_text",
    "attention_payload",
    "attention_numbers",
]


def known_characters(tokenizer) -> frozenset[str]:
    """Return every character that some token of the vocabulary decodes to whole: the characters of the training data.

    A byte-level piece of a character the tokenizer never merged decodes to U+FFFD and is left out."""
    pieces = tokenizer.batch_decode(
        [[i] for i in range(len(tokenizer))], skip_special_tokens=True, clean_up_tokenization_spaces=False
    )
    return frozenset(ch for piece in pieces for ch in piece if ch != "\ufffd" and not ch.isspace())


def _script(ch: str) -> str:
    """Return the script of a letter, the first word of its Unicode name, such as "LATIN", "CYRILLIC" or "CJK"."""
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else "unnamed"


_SCRIPT_NAMES = {"CJK": "Chinese/Japanese (CJK)", "HANGUL": "Korean (Hangul)"}


def _script_name(script: str) -> str:  # For example "Latin" for "LATIN", "Chinese/Japanese (CJK)" for "CJK".
    return _SCRIPT_NAMES.get(script, script.capitalize())


def _main_script(characters) -> str:
    letters = Counter(_script(ch) for ch in characters if ch.isalpha())
    return letters.most_common(1)[0][0] if letters else "unnamed"


@dataclass
class SpaceModel:
    """Hold a loaded model with what the page needs to know about it."""

    model: object
    tokenizer: object
    facts: ModelFacts
    known: frozenset = field(default_factory=frozenset)
    layers: dict = field(default_factory=dict)  # The number of layers of each kind.
    heads: int = 0
    cache: WeightCache = field(default_factory=WeightCache)  # The last translations' weights, kept for the page.

    @property
    def script(self) -> str:
        """Return the script most of the known letters belong to, e.g. "LATIN" for an English-German model."""
        return _main_script(self.known)


def load_space_model(name_or_path: str, device: str | None = "cpu", dtype: str | None = None) -> SpaceModel:
    """Load a model folder or Hub id with `load_for_decoding`, in the precision `dtype`, and return its `SpaceModel`.

    As with `load_for_inference`, a missing or broken file raises a UsageError naming it. `dtype` is one of
    `vaswani_hf.precision.DTYPE`, and None means fp32. When a precision was asked for, the choice made is printed on
    stderr.
    """

    model, tokenizer, choice = load_for_decoding(name_or_path, device, dtype or "fp32")
    if dtype is not None:
        print(choice.line(), file=sys.stderr)
    config = model.config  # These are transformers' common names (VaswaniConfig's attribute_map).
    return SpaceModel(
        model=model,
        tokenizer=tokenizer,
        facts=read_facts(name_or_path, model),
        known=known_characters(tokenizer),
        heads=config.encoder_attention_heads,
        layers={"encoder": config.encoder_layers, "decoder": config.decoder_layers, "cross": config.decoder_layers},
    )


def _visible(text: str) -> str:
    """Return `text` without the characters that show nothing.

    These are the control characters (Unicode category Cc, such as NUL and ESC), except whitespace, and the format
    characters (category Cf), such as the zero-width spaces and joiners U+200B-U+200D and U+2060, the byte order mark
    U+FEFF, and the bidirectional marks and overrides U+200E/F, U+202A-E and U+2066-9.
    """
    return "".join(ch for ch in text if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf"))


def check_text(text, space: SpaceModel) -> str:
    """Return the text to translate as one stripped line, or raise a UsageError saying what is wrong with it.

    The text is refused when it is not a string, when it shows nothing (the box looks empty), when it has no word at
    all (no letter or digit, only emoji or punctuation), when it has more than `MAX_CHARACTERS` characters, or when it
    is written in a script the model never saw. Invisible characters inside a real sentence are left to the tokenizer.
    """
    if text is not None and not isinstance(text, str):
        raise UsageError(f"The text must be a string, not {type(text).__name__}.")
    if not text or not _visible(text).strip():
        raise UsageError("Type a sentence to translate: the text box is empty.")
    if not any(ch.isalnum() for ch in text):
        raise UsageError(
            "Nothing to translate: the text has no words (no letter or digit, only symbols, emoji or "
            "punctuation). Type a sentence in the model's source language."
        )
    text = " ".join(text.split())
    if len(text) > MAX_CHARACTERS:
        raise UsageError(
            f"The text has {len(text):,} characters; this page translates up to {MAX_CHARACTERS:,} "
            "(a sentence or two, so that the attention maps stay readable). Shorten it, or translate "
            "long texts with vaswani-translate."
        )
    letters = [ch for ch in text if ch.isalpha()]
    unknown = [ch for ch in letters if ch not in space.known]
    if letters and len(unknown) > UNKNOWN_SHARE * len(letters):
        sample = "".join(dict.fromkeys(unknown))[:8]
        raise UsageError(
            f"The text is written in {_script_name(_main_script(unknown))} script ({sample} ...), "
            f"whose characters this model never saw in training: it reads "
            f"{_script_name(space.script)} script only. Type a sentence in the model's source language."
        )
    return text


@functools.lru_cache(maxsize=1)
def _language_identifier():
    """Return py3langid's identifier with probabilities, or None without that optional package (the `space` extra)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier  # An optional package, from the `space` extra.
    except ImportError:
        return None
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def language_warning(text: str, space: SpaceModel) -> str | None:
    """Return a sentence warning that `text` looks like another language than the model's source language, or None.

    The warning matters because the model translates anything into something. py3langid must be at least
    `LANGUAGE_CONFIDENCE` sure of the other language.
    """
    facts, identifier = space.facts, _language_identifier()
    if not facts.source_lang or identifier is None or len(text.split()) < 3:
        return None  # A word or two is too little to tell a language.
    found, probability = identifier.classify(text)
    if found == facts.source_lang.split("-")[0].lower() or probability < LANGUAGE_CONFIDENCE:
        return None
    return (
        f"This looks like {language_name(found)}, not {language_name(facts.source_lang)}: the model translates "
        f"{language_name(facts.source_lang)} to {language_name(facts.target_lang)} and makes no sense of other "
        "languages."
    )


def check_decoding(num_beams, length_penalty) -> tuple[int, float]:
    """Return (beam size, length penalty alpha) checked against `PAGE_SETTINGS`, which raise a SettingError otherwise.

    A whole float counts as an integer, because the page's sliders send 4.0.
    """
    if isinstance(num_beams, float) and math.isfinite(num_beams) and num_beams == int(num_beams):
        num_beams = int(num_beams)
    beams = PAGE_SETTINGS["num_beams"].check(num_beams, "beam size")
    alpha = PAGE_SETTINGS["length_penalty"].check(length_penalty, "alpha")
    return beams, float(alpha)


def check_view(space: SpaceModel, kind, layer, head) -> tuple[str, int, int | None]:
    """Turn the 1-based choices of a page or an API call into (kind, 0-based layer, 0-based head or None).

    A head of None means all heads. A bad choice raises a UsageError that names the model's own numbers of layers and
    heads.
    """

    if VIEW_SETTINGS["kind"].problem(kind):
        raise UsageError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    layers = space.layers[kind]
    number = _whole_number(layer)
    if number is None or VIEW_SETTINGS["layer"].narrowed(max=layers).problem(number):
        raise UsageError(
            f"the model's {KIND_TITLES[kind]} has {layers} layers: layer must be a whole number from 1 "
            f"to {layers}, not {layer!r}"
        )
    if head in (None, ALL_HEADS):
        return kind, number - 1, None
    chosen = _whole_number(head)
    if chosen is None or VIEW_SETTINGS["head"].narrowed(max=space.heads).problem(chosen):
        raise UsageError(
            f"the model has {space.heads} heads per layer: head must be '{ALL_HEADS}' or a whole "
            f"number from 1 to {space.heads}, not {head!r}"
        )
    return kind, number - 1, chosen - 1


def _whole_number(value) -> int | None:
    """Return `value` (a number, or its text) as an int if it is a whole number, else None, so 1.5 is not truncated."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(number) if math.isfinite(number) and number == int(number) else None


@dataclass
class Translation:
    source: str
    text: str
    attentions: Attentions
    num_beams: int
    length_penalty: float
    warning: str | None = None


def translate_text(space: SpaceModel, text, num_beams, length_penalty) -> Translation:
    """Check the input, translate it (`vaswani_hf.translation.inference.translate`) and return it with its attention weights."""
    source = check_text(text, space)
    beams, alpha = check_decoding(num_beams, length_penalty)
    try:
        translation = translate(
            space.model,
            space.tokenizer,
            [source],
            num_beams=beams,
            length_penalty=alpha,
            max_input_tokens=MAX_SOURCE_TOKENS,
            progress=False,
        )[0]
    # The source has more tokens than the page shows, or than the model has positions for. The message is worded for a
    # file of lines, so only its first clause is kept.
    except InputLineError as error:
        too_long = error.message.split("; ")[0].split(" a line")[0]
        raise UsageError(f"The text is too long for this page ({too_long}). Shorten it.") from error
    attentions = collect_attentions(space.model, space.tokenizer, source, translation)
    attentions.target_origin = f"beam-{beams}" if beams > 1 else "greedy"
    return Translation(source, translation, attentions, beams, alpha, language_warning(source, space))


def word_index(tokens: list[str], word: str | None) -> int | None:
    """Return the index of the first subword of `word` (case-insensitive) among the token labels, or None."""
    if not isinstance(word, str) or not word:
        return None
    starts = [i for i, t in enumerate(tokens) if t.startswith(WORD_START) or i == 0] + [len(tokens)]
    for start, end in zip(starts, starts[1:]):
        if "".join(tokens[start:end]).lstrip(WORD_START).lower() == word.lower():
            return start
    return None


def _shown_view(space: SpaceModel, kinds: dict, view: dict | None) -> dict | None:
    """Return the view an example opens, fitted to this model, or None when the view names no kind the page shows.

    The view holds the kind, the 1-based layer, the head and the token to follow, as in the paper's figure. The token
    is looked up among the queries, and a layer the model lacks is replaced by its last, which the view's `note` says.
    """

    if not (view and isinstance(view.get("kind"), str) and view["kind"] in kinds):
        return None
    kind = view["kind"]
    layers = space.layers[kind]
    asked = layers if view.get("layer") == LAST else _whole_number(view.get("layer"))
    layer = max(1, min(asked or 1, layers))
    head = _whole_number(view.get("head"))
    shown = {
        "kind": kind,
        "layer": layer,
        "head": head if head in range(1, space.heads + 1) else ALL_HEADS,
        "query": word_index(kinds[kind]["queries"], view.get("token")),
    }
    if asked is not None and asked > layers:
        shown["note"] = (
            f"The paper's figure shows layer {asked}; this model's {KIND_TITLES[kind]} has {layers} "
            f"layer{'s' if layers > 1 else ''}, so its last, layer {layer}, is shown."
        )
    return shown


def attention_payload(space: SpaceModel, attentions: Attentions, view: dict | None = None) -> dict:
    """Return what the page's script gets for a translation, and keep all its weights in `space.cache`.

    The payload holds each kind's tokens and shape, the key the page's later requests name, and the blocks of weights
    its first view needs, sent first within `PAGE_BUDGET` (`vaswani_hf.space.payload`). The cache lets the page ask
    for the rest later."""
    weights = PageWeights.of(attentions)
    space.cache.add(weights)
    payload = {"key": weights.key, "kinds": page_kinds(attentions), "heads": space.heads, "code": CODES[8]}
    shown = _shown_view(space, payload["kinds"], view)
    kind, layer, head = "encoder", 0, None
    if shown is not None:
        payload["view"] = shown
        kind, layer = shown["kind"], shown["layer"] - 1
        head = None if shown["head"] == ALL_HEADS else shown["head"] - 1
    payload["blocks"] = weights.packed(kind, layer, head)
    return payload


def attention_numbers(
    space: SpaceModel,
    attentions: Attentions,
    kind,
    layer,
    head,
    decimals=API_SETTINGS["decimals"].default,
    packed_bits=API_SETTINGS["packed_bits"].default,
) -> dict:
    """Return one view's weights for the API, as {kind, layer, head, queries, keys, shape, weights}.

    The layer and head are 1-based, as given. The weights are weights[q][k] for one head and weights[h][q][k] for all
    heads, as numbers rounded to `decimals` places. With `packed_bits` 8 (the page's code) or 16 they come instead as
    `packed`, the base64 of the codes in that shape, with `code` saying how to read them
    (`vaswani_hf.space.payload.CODES`)."""
    kind, layer_index, head_index = check_view(space, kind, layer, head)
    decimals = API_SETTINGS["decimals"].check(decimals, "/attention")
    bits = API_SETTINGS["packed_bits"].check(packed_bits, "/attention")
    queries, keys = attentions.axis_labels(kind)
    weights = attentions.weights(kind)[layer_index]
    if head_index is not None:
        weights = weights[head_index]
    answer = {
        "kind": kind,
        "layer": layer_index + 1,
        "head": ALL_HEADS if head_index is None else head_index + 1,
        "queries": queries,
        "keys": keys,
        "shape": list(weights.shape),
    }
    if bits:
        return {
            **answer,
            "weights": None,
            "packed": base64.b64encode(codes(weights, bits)).decode(),
            "code": CODES[bits],
        }
    # Rounded as float64, so that JSON writes 0.4653 rather than float32's 0.4652999937534332.
    return {**answer, "weights": np.round(weights.double().numpy(), decimals).tolist()}
