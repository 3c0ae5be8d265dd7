"""The translation front end: the rules every decoding engine (our `generate()`, CTranslate2) shares, written once.

`translate_lines`: an empty or blank sentence translates to "" and is never given to the engine; others are stripped
before tokenization; every output is one stripped line (any `str.splitlines` boundary becomes a space), so N input
lines give N output lines. A source longer than the engine's position table (`PositionTable`) or `max_source_tokens`
(`MAX_SOURCE_TOKENS`: bounded work on unbounded input) is refused before anything is decoded, naming its sentence in
an `InputLineError`; a sentence of more than that limit times `MAX_CHARS_PER_TOKEN` characters is refused before it
is even tokenised. An engine provides only `encode` and `decode`.

Decoding options keep the names of `generate()`; one left unset keeps the model's generation config (the paper's,
Section 6.1). For `max_length_b` None is itself a value (no per-sentence limit), so "unset" there is `UNSET`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .constraints import MAX_POSITIONS, MAX_SENTENCES, MAX_TOKENS
from .io import InputLineError

MAX_SOURCE_TOKENS = 1024  # per line, `</s>` included: WMT sentences stay under 250 after the usual filtering
MAX_CHARS_PER_TOKEN = 64  # characters one source token may cover at most, for the limit checked before tokenising


@dataclass
class BatchSettings:
    """What the tools that translate a file (translate, evaluate; either engine) let their user set of the front end
    and its batches, declared once for their flags."""

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


UNSET = object()  # "keep the generation config's value" where None is itself a meaningful value (max_length_b)
_NONE_IS_A_VALUE = ("max_length_b",)  # None turns the per-sentence limit off


def given_options(**options) -> dict:
    """The decoding options that were set: not None nor `UNSET` (for `max_length_b`: not `UNSET`)."""
    return {
        key: value
        for key, value in options.items()
        if value is not UNSET and (value is not None or key in _NONE_IS_A_VALUE)
    }


def resolve_options(defaults: Mapping, **options) -> dict:
    """Every option of `defaults` (a generation config's values), replaced by those of `options` that were set."""
    return {**defaults, **given_options(**options)}


@dataclass(frozen=True)
class PositionTable:
    """The longest source, in tokens with `</s>`, an engine can embed (`rows`), and the words of its refusal."""

    rows: int
    covers: str
    remedy: str = ""

    def check(self, encoded: Sequence[Sequence], lines: Sequence[int]) -> None:
        """InputLineError naming the first sentence (`lines`: 1-based) longer than the table."""
        for tokens, line in zip(encoded, lines):
            if len(tokens) > self.rows:
                raise InputLineError(
                    line,
                    f"{len(tokens)} source tokens, but {self.covers} {self.rows} positions; "
                    f"shorten or split the line{self.remedy}",
                )


def output_line(text: str) -> str:
    """A translation as one output line: its lines joined with spaces, stripped; other whitespace kept."""
    return " ".join(text.splitlines()).strip()


def checked_sentences(sentences: Sequence[str]) -> list[str]:
    """`sentences` as a list of str; a single string or a non-str item is a TypeError (a caller's bug)."""
    if isinstance(sentences, str):
        raise TypeError("translate: `sentences` must be a sequence of strings, not a single string")
    sentences = list(sentences)
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"translate: sentence {i} is a {type(sentence).__name__}, not a str")
    return sentences


def max_source_chars(table: PositionTable | None, max_source_tokens: int | None) -> int | None:
    """The most characters a sentence may have: the engine's token limit times `MAX_CHARS_PER_TOKEN` (None: none)."""
    limits = [n for n in (table.rows if table is not None else None, max_source_tokens) if n is not None]
    return min(limits) * MAX_CHARS_PER_TOKEN if limits else None


def _check_characters(
    sentences: Sequence[str], todo: Sequence[int], table: PositionTable | None, max_source_tokens: int | None
) -> None:
    """InputLineError naming the first sentence of more characters than `max_source_chars` allows."""
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
    """One single-line translation per sentence, in order, by the rules of the module docstring: `encode` stripped
    sentences to token sequences (`</s>` included), `decode` those to translations; `table`, `max_source_tokens`:
    the limits (None: none)."""
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
