"""What the Space's page does, without the page: check the text, translate it with the paper's decoding, and draw one
attention map. `vaswani_hf.space` puts these behind a Gradio page; they need no web framework, so tests call them.

Translation is `vaswani_hf.inference.translate`, i.e. `model.generate` with the model's generation config (for this
model the paper's Section 6.1 decoding: beam search, length penalty alpha with GNMT's ((5 + |Y|) / 6) ** alpha,
output length <= input length + 50), with the page's beam size and alpha. The attention maps are the package's own
(`vaswani_hf.visualize`): `collect_attentions` runs one teacher-forced pass over (source, translation) with
`output_attentions=True`, and `plot_attention_head` / `plot_layer_heads` draw encoder self-, decoder self- and
encoder-decoder attention (Section 3.2.3) of one layer as heat maps labelled with the subword pieces. The forced
pass reads the translation's tokens as the tokenizer writes them; the decoder's weights over that prefix are the
ones it used while generating it (same prefix, dropout off).

A page cannot refuse input with an exit status, so every expected refusal is a `UsageError` whose message the page
shows: empty text, more than `MAX_CHARACTERS` characters, text whose letters are mostly characters the model never
saw in training (another script than its source language's: the tokenizer's vocabulary says which characters it
knows), a source longer than the model's positions, decoding settings out of range.
"""

from __future__ import annotations

import io
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from .errors import InputLineError, UsageError
from .inference import load_for_inference, translate
from .visualize import (KIND_TITLES, KINDS, MAX_PLOT_TOKENS, Attentions, collect_attentions, plot_attention_head,
                        plot_layer_heads)

MAX_CHARACTERS = 1000  # a sentence or two: the maps are tokens x tokens cells, and a CPU Space decodes slowly
MAX_SOURCE_TOKENS = MAX_PLOT_TOKENS  # longer sources make unreadable maps (vaswani-visualize-attention's limit)
MAX_BEAMS = 12
LENGTH_PENALTY_RANGE = (0.0, 2.0)
UNKNOWN_SHARE = 0.5  # refuse text when more than this share of its letters are characters the model never saw
MAX_IMAGE_PIXELS = 2400  # the longer side of a drawn map, in pixels: the resolution drops for long sentences
ALL_HEADS = "all"

__all__ = ["MAX_CHARACTERS", "MAX_SOURCE_TOKENS", "MAX_BEAMS", "LENGTH_PENALTY_RANGE", "ALL_HEADS", "SpaceModel",
           "Translation", "load_space_model", "known_characters", "check_text", "check_decoding", "check_view",
           "translate_text", "attention_figure", "figure_image"]


def known_characters(tokenizer) -> frozenset[str]:
    """Every character that some token of the vocabulary decodes to whole (a byte-level piece of a character the
    tokenizer never merged decodes to U+FFFD and is left out): the characters of the training data."""
    pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=True,
                                    clean_up_tokenization_spaces=False)
    return frozenset(ch for piece in pieces for ch in piece if ch != "\ufffd" and not ch.isspace())


def _script(ch: str) -> str:
    """The script of a letter by its Unicode name's first word: "LATIN", "CYRILLIC", "ARABIC", "CJK", ..."""
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else "unnamed"


_SCRIPT_NAMES = {"CJK": "Chinese/Japanese (CJK)", "HANGUL": "Korean (Hangul)"}


def _script_name(script: str) -> str:
    return _SCRIPT_NAMES.get(script, script.capitalize())


def _main_script(characters) -> str:
    letters = Counter(_script(ch) for ch in characters if ch.isalpha())
    return letters.most_common(1)[0][0] if letters else "unnamed"


@dataclass
class SpaceModel:
    """A loaded model with what the page needs to know about it."""

    model: object
    tokenizer: object
    name: str
    known: frozenset = field(default_factory=frozenset)
    layers: dict = field(default_factory=dict)  # kind -> number of layers
    heads: int = 0

    @property
    def script(self) -> str:
        """The script most of the known letters belong to, e.g. "LATIN" for an English-German model."""
        return _main_script(self.known)


def load_space_model(name_or_path: str, device: str | None = "cpu") -> SpaceModel:
    """Load a model folder or Hub id (`load_for_inference`: a missing or broken file is a UsageError naming it)."""
    model, tokenizer = load_for_inference(name_or_path, device=device)
    config = model.config
    encoder_layers = getattr(config, "num_encoder_layers", None) or config.encoder_layers
    decoder_layers = getattr(config, "num_decoder_layers", None) or config.decoder_layers
    heads = getattr(config, "num_heads", None) or config.encoder_attention_heads
    return SpaceModel(model=model, tokenizer=tokenizer, name=str(name_or_path), known=known_characters(tokenizer),
                      layers={"encoder": encoder_layers, "decoder": decoder_layers, "cross": decoder_layers},
                      heads=heads)


def _visible(text: str) -> str:
    """`text` without the characters that show nothing: control characters (NUL, ESC, ...; Unicode category Cc,
    whitespace aside) and format characters (Cf: zero-width spaces and joiners U+200B-U+200D, U+2060, the byte order
    mark U+FEFF, the bidirectional marks and overrides U+200E/F, U+202A-E, U+2066-9)."""
    return "".join(ch for ch in text if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf"))


def check_text(text, space: SpaceModel) -> str:
    """The text to translate, as one stripped line, or a UsageError saying what is wrong with it: nothing visible
    (the box looks empty), no word at all (no letter or digit: emoji or punctuation only), too long, or a script the
    model never saw. Invisible characters inside a real sentence are left to the tokenizer."""
    if not isinstance(text, str) or not _visible(text).strip():
        raise UsageError("Type a sentence to translate: the text box is empty.")
    if not any(ch.isalnum() for ch in text):
        raise UsageError("Nothing to translate: the text has no words (no letter or digit, only symbols, emoji or "
                         "punctuation). Type a sentence in the model's source language.")
    text = " ".join(text.split())
    if len(text) > MAX_CHARACTERS:
        raise UsageError(f"The text has {len(text):,} characters; this page translates up to {MAX_CHARACTERS:,} "
                         "(a sentence or two, so that the attention maps stay readable). Shorten it, or translate "
                         "long texts with vaswani-translate.")
    letters = [ch for ch in text if ch.isalpha()]
    unknown = [ch for ch in letters if ch not in space.known]
    if letters and len(unknown) > UNKNOWN_SHARE * len(letters):
        sample = "".join(dict.fromkeys(unknown))[:8]
        raise UsageError(f"The text is written in {_script_name(_main_script(unknown))} script ({sample} ...), "
                         f"whose characters this model never saw in training: it reads "
                         f"{_script_name(space.script)} script only. Type a sentence in the model's source language.")
    return text


def check_decoding(num_beams, length_penalty) -> tuple[int, float]:
    """(beam size, length penalty alpha) within the page's ranges, or a UsageError."""
    try:
        beams, alpha = int(num_beams), float(length_penalty)
    except (TypeError, ValueError) as error:
        raise UsageError(f"beam size and length penalty must be numbers ({error})") from error
    if beams != float(num_beams) or not 1 <= beams <= MAX_BEAMS:
        raise UsageError(f"beam size must be a whole number from 1 to {MAX_BEAMS}, not {num_beams}")
    low, high = LENGTH_PENALTY_RANGE
    if not low <= alpha <= high:
        raise UsageError(f"length penalty must be between {low} and {high}, not {length_penalty}")
    return beams, alpha


def check_view(space: SpaceModel, kind, layer, head) -> tuple[str, int, int | None]:
    """(kind, 0-based layer, 0-based head or None for all heads) from the page's 1-based choices, or a UsageError."""
    if kind not in KINDS:
        raise UsageError(f"attention must be one of {', '.join(KINDS)}, not {kind!r}")
    layers = space.layers[kind]
    number = _whole_number(layer)
    if number is None:
        raise UsageError(f"layer must be a whole number from 1 to {layers}, not {layer!r}")
    if not 1 <= number <= layers:
        raise UsageError(f"the model's {KIND_TITLES[kind]} has {layers} layers: choose a layer from 1 to {layers}")
    if head in (None, ALL_HEADS):
        return kind, number - 1, None
    chosen = _whole_number(head)
    if chosen is None:
        raise UsageError(f"head must be '{ALL_HEADS}' or a whole number from 1 to {space.heads}, not {head!r}")
    if not 1 <= chosen <= space.heads:
        raise UsageError(f"the model has {space.heads} heads per layer: choose a head from 1 to {space.heads}")
    return kind, number - 1, chosen - 1


def _whole_number(value) -> int | None:
    """`value` (a number, or its text as the page sends it) as an int if it is a whole number, else None: 1.5 is
    refused, not truncated to 1."""
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


def translate_text(space: SpaceModel, text, num_beams, length_penalty) -> Translation:
    """Check the input, translate it (`vaswani_hf.inference.translate`) and collect its attention weights."""
    source = check_text(text, space)
    beams, alpha = check_decoding(num_beams, length_penalty)
    try:
        translation = translate(space.model, space.tokenizer, [source], num_beams=beams, length_penalty=alpha,
                                max_input_tokens=MAX_SOURCE_TOKENS, progress=False)[0]
    except InputLineError as error:  # too many tokens for the page, or for the model's positions
        raise UsageError(f"The text is too long: {_too_long(error.message)}. Shorten it.") from error
    attentions = collect_attentions(space.model, space.tokenizer, source, translation)
    attentions.target_origin = f"beam-{beams}" if beams > 1 else "greedy"
    return Translation(source, translation, attentions, beams, alpha)


def _too_long(message: str) -> str:
    """The translation frontend's refusal of a long line (worded for a file of lines: "201 source tokens, more than
    the 200 a line may have; split the line ...") reworded for the page's one sentence."""
    limit = re.match(r"([\d,]+) (source tokens|characters), more than the ([\d,]+)", message)
    if limit:
        return f"the sentence has {limit[1]} {limit[2].split()[-1]}; at most {limit[3]} are allowed here"
    positions = re.match(r"([\d,]+) source tokens, but .*?([\d,]+) positions", message)
    if positions:
        return f"the sentence has {positions[1]} tokens; the model has positions for at most {positions[2]}"
    return message.split("; ")[0]


def attention_figure(space: SpaceModel, attentions: Attentions, kind, layer, head):
    """The heat map of one head (rows: queries, columns: keys) or of all heads of one layer, as a matplotlib Figure
    drawn by `vaswani_hf.visualize`."""
    kind, layer, head = check_view(space, kind, layer, head)
    if head is None:
        return plot_layer_heads(attentions, kind, layer)
    return plot_attention_head(attentions, kind, layer, head)


def figure_image(fig):
    """The figure as a PIL image (PNG), at most `MAX_IMAGE_PIXELS` on its longer side."""
    from PIL import Image

    dpi = min(100.0, MAX_IMAGE_PIXELS / max(fig.get_size_inches()))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    with Image.open(buffer) as image:
        return image.copy()
