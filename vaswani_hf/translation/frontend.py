"""Apply the rules that every decoding engine shares, written once: this module is the translation front end.

Both engines, our `generate()` (`vaswani_hf.translation.inference.translate`) and CTranslate2
(`vaswani_hf.export.ctranslate2.CTranslate2Translator`), run their sentences through `translate_lines`, and so does the
checking pass of a file to translate (`vaswani_hf.translation.stream`). It applies these rules:

- a sentence that is empty or only whitespace translates to "" and is never given to the engine, because a model would
  still emit some sentence for a source made of `</s>` alone;
- other sentences are stripped of leading and trailing whitespace before tokenization;
- every output is a single stripped line: the line breaks an engine may produce (byte-level BPE's newline byte, U+2028,
  any `str.splitlines` boundary) become spaces, so that N input lines give N output lines, in order;
- a source longer than the engine's position table (`PositionTable`), or than `max_source_tokens` (by default
  `MAX_SOURCE_TOKENS`, so that unbounded input means bounded work: a 1 MB line is no sentence), is refused before
  anything is decoded, naming its sentence (1-based) in a `vaswani_hf.io.InputLineError`, which the translate tool
  turns into `file:line`;
- and before anything is even tokenised, a sentence of more characters than that token limit times
  `MAX_CHARS_PER_TOKEN` (`max_source_chars`: 65,536 characters for the default 1,024 tokens) is refused in the same
  way. It cannot fit, and tokenising a line of megabytes would cost the very time the limit is there to bound. The
  bound is generous (a BPE token of natural text has far fewer characters), so that a line it lets through is judged by
  its token count.

An engine provides only `encode`, which returns the token sequences of the stripped sentences (`</s>` included), and
`decode`, which returns the translation of each encoded sentence, in order.

Decoding options keep the names of `generate()`. An option left unset keeps the model's generation config (for this
model the paper's, Section 6.1: `vaswani_hf.generation_config_vaswani.default_generation_config`): `given_options`
keeps the options that were set, and `resolve_options` fills the others from a generation config. For `max_length_b`
None is itself a value (no per-sentence limit), so "unset" there is the `UNSET` sentinel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..io import InputLineError
from ..settings import MAX_POSITIONS, MAX_SENTENCES, MAX_TOKENS

# A line may have at most this many source tokens, `</s>` included; WMT sentences stay under 250 after the usual
# filtering.
MAX_SOURCE_TOKENS = 1024
# One source token may cover at most this many characters; this sets the limit that is checked before tokenising.
MAX_CHARS_PER_TOKEN = 64


@dataclass
class BatchSettings:
    """Declare, once for their flags, the settings of the front end and its batches that the tools which translate a
    file (translate and evaluate, with either engine) let their user set."""

    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "padded source tokens per batch (default: 4096, vaswani_hf.data.TRANSLATE_MAX_TOKENS)",
            "min": 1,
            "max": MAX_TOKENS,
        },
    )
    batch_size: int | None = field(
        default=None,
        metadata={
            "help": "at most this many sentences per batch (default: no cap; the token budget decides)",
            "min": 1,
            "max": MAX_SENTENCES,
        },
    )
    max_input_tokens: int = field(
        default=MAX_SOURCE_TOKENS,
        metadata={
            "help": "a line with more source tokens (</s> included) is refused, naming it, before anything is decoded",
            "min": 1,
            "max": MAX_POSITIONS,
        },
    )


# UNSET means "keep the generation config's value" for an option where None is itself a value (max_length_b).
UNSET = object()
_NONE_IS_A_VALUE = ("max_length_b",)  # for these, None turns the per-sentence limit off


def given_options(**options) -> dict:
    """Return the decoding options that were set. None and `UNSET` mean "keep the generation config's value", except
    for `max_length_b`, where None turns the per-sentence limit off and only `UNSET` keeps the config's value."""
    return {
        key: value
        for key, value in options.items()
        if value is not UNSET and (value is not None or key in _NONE_IS_A_VALUE)
    }


def resolve_options(defaults: Mapping, **options) -> dict:
    """Return every option of `defaults` (a generation config's values), with the options of `options` that were set
    put in their place."""
    return {**defaults, **given_options(**options)}


@dataclass(frozen=True)
class PositionTable:
    """Hold the longest source, counted in tokens with `</s>`, that an engine can embed (`rows`), and the words its
    refusal uses for the table: "N source tokens, but {covers} {rows} positions; shorten or split the line{remedy}"."""

    rows: int
    covers: str
    remedy: str = ""

    def check(self, encoded: Sequence[Sequence], lines: Sequence[int]) -> None:
        """Raise an InputLineError naming the first sentence that is longer than the table; `lines` holds the
        sentences' numbers, counted from 1."""
        for tokens, line in zip(encoded, lines):
            if len(tokens) > self.rows:
                raise InputLineError(
                    line,
                    f"{len(tokens)} source tokens, but {self.covers} {self.rows} positions; "
                    f"shorten or split the line{self.remedy}",
                )


def output_line(text: str) -> str:
    """Return a translation as one output line: its lines are joined with spaces and the result is stripped, while
    other whitespace is kept."""
    return " ".join(text.splitlines()).strip()


def checked_sentences(sentences: Sequence[str]) -> list[str]:
    """Return `sentences` as a list of str. A single string, something that is not a collection, or an item that is
    not a str raises a TypeError (a caller's bug), which names the item as the other messages do, counting from 1."""
    if isinstance(sentences, str):
        raise TypeError("translate: `sentences` must be a sequence of strings, not a single string")
    try:
        sentences = list(sentences)
    except TypeError:
        raise TypeError(
            f"translate: `sentences` must be a sequence of strings, not {_a(type(sentences).__name__)}"
        ) from None
    for i, sentence in enumerate(sentences, start=1):
        if not isinstance(sentence, str):
            raise TypeError(f"translate: sentence {i} is {_a(type(sentence).__name__)}, not a str")
    return sentences


def _a(noun: str) -> str:
    """Return `noun` with its indefinite article, as in "an int" or "a NoneType"."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def max_source_chars(table: PositionTable | None, max_source_tokens: int | None) -> int | None:
    """Return the most characters a sentence may have: the engine's token limit (the smaller of its position table
    and `max_source_tokens`) times `MAX_CHARS_PER_TOKEN`, or None when there is no token limit."""
    limits = [n for n in (table.rows if table is not None else None, max_source_tokens) if n is not None]
    return min(limits) * MAX_CHARS_PER_TOKEN if limits else None


def _check_characters(
    sentences: Sequence[str], todo: Sequence[int], table: PositionTable | None, max_source_tokens: int | None
) -> None:
    """Raise an InputLineError naming the first sentence, of those whose indexes `todo` lists, that has more
    characters once stripped than `max_source_chars` allows. This runs before tokenising, so that a line of megabytes
    is refused without the time tokenising it would cost (see the module docstring)."""
    limit = max_source_chars(table, max_source_tokens)
    if limit is None:
        return
    tokens = limit // MAX_CHARS_PER_TOKEN
    by_table = table is not None and table.rows == tokens
    remedy = table.remedy if by_table else ", or raise the limit (--max_input_tokens)"
    for i in todo:
        length = len(sentences[i].strip())
        if length > limit:
            raise InputLineError(
                i + 1,
                f"{length:,} characters, more than the {limit:,} a line of at most {tokens:,} "
                f"source tokens may have ({MAX_CHARS_PER_TOKEN} per token); split the "
                f"line{remedy}",
            )


def translate_lines(
    sentences: Sequence[str],
    encode: Callable[[list[str]], list[Sequence]],
    decode: Callable[[list[Sequence]], Sequence[str]],
    table: PositionTable | None = None,
    max_source_tokens: int | None = MAX_SOURCE_TOKENS,
) -> list[str]:
    """Translate `sentences` and return one single-line translation per sentence, in order, by the rules of the
    module docstring.

    Args:
        encode: a function that returns the token sequences (`</s>` included) of the stripped, non-empty sentences, as
            the engine takes them.
        decode: a function that returns one translation for each of those token sequences, in the same order.
        table: the engine's position table, if it has a limit (None for sinusoids, which embed any length).
        max_source_tokens: the most source tokens a line may have; None means no limit.

    Raises:
        InputLineError: a sentence is too long, named by its number counted from 1.
        TypeError: `sentences` is not a collection of strings.
    """
    sentences = checked_sentences(sentences)
    outputs = [""] * len(sentences)
    todo = [i for i, sentence in enumerate(sentences) if sentence.strip()]
    if not todo:
        return outputs
    _check_characters(sentences, todo, table, max_source_tokens)
    encoded = encode([sentences[i].strip() for i in todo])
    if table is not None:
        table.check(encoded, [i + 1 for i in todo])
    if max_source_tokens is not None:
        for tokens, i in zip(encoded, todo):
            if len(tokens) > max_source_tokens:
                raise InputLineError(
                    i + 1,
                    f"{len(tokens):,} source tokens, more than the {max_source_tokens:,} a "
                    "line may have; split the line, or raise the limit (--max_input_tokens)",
                )
    translations = list(decode(encoded))
    if len(translations) != len(todo):  # an engine bug must never silently misalign lines
        raise RuntimeError(f"the engine returned {len(translations)} translations for {len(todo)} sentences")
    for i, text in zip(todo, translations):
        outputs[i] = output_line(text)
    return outputs
