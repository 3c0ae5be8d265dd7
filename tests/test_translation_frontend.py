"""The translation front end both engines share (vaswani_hf.translation.frontend): what an engine is given, what comes
back, and which decoding options count as set. The engines' own tests check that they run through it:
tests/test_inference.py (our generate()) and tests/test_export_ctranslate2.py (CTranslate2)."""

import pytest

from vaswani_hf.io import InputLineError
from vaswani_hf.translation.frontend import (
    UNSET,
    PositionTable,
    given_options,
    output_line,
    resolve_options,
    translate_lines,
)


class FakeEngine:
    """Encodes a sentence as its words + "</s>"; translates it as `reply(words)`; records what it was given."""

    def __init__(self, reply=lambda words: " ".join(reversed(words))):
        self.encoded, self.decoded, self.reply = [], [], reply

    def encode(self, texts):
        self.encoded.append(list(texts))
        return [text.split() + ["</s>"] for text in texts]

    def decode(self, sequences):
        self.decoded.append([list(s) for s in sequences])
        return [self.reply(s[:-1]) for s in sequences]


def test_empty_lines_are_never_given_to_the_engine_and_others_are_stripped():
    engine = FakeEngine()
    lines = ["a b", "", "   ", "\t", " c  d ", "\u00a0e\u3000", "\r"]
    assert translate_lines(lines, engine.encode, engine.decode) == ["b a", "", "", "", "d c", "e", ""]
    assert engine.encoded == [["a b", "c  d", "e"]]  # stripped (Unicode whitespace too), only the non-empty ones
    assert translate_lines(["", " "], engine.encode, engine.decode) == ["", ""]
    assert translate_lines([], engine.encode, engine.decode) == []
    assert len(engine.encoded) == 1 and len(engine.decoded) == 1  # nothing to translate: the engine is not called


@pytest.mark.parametrize("reply", ["x\ny", "x\r\ny", "x\u2028y", "x\x0by", " x y ", "x\n\ny\n", "\nx y"])
def test_every_output_is_one_stripped_line(reply):
    engine = FakeEngine(reply=lambda words: reply)
    out = translate_lines(["a", "b"], engine.encode, engine.decode)
    assert out[0] == out[1] and out[0].replace("  ", " ") == "x y" and out[0].splitlines() == [out[0]]
    assert output_line(reply) == out[0]


def test_a_source_longer_than_the_position_table_is_refused_naming_its_line_before_decoding():
    engine = FakeEngine()
    table = PositionTable(3, "the engine's table has", ", or use another engine")
    lines = ["a b", "", "a b c d", "a b c"]  # "a b" + </s> = 3 tokens fits; "a b c d" + </s> = 5 does not
    with pytest.raises(InputLineError) as error:
        translate_lines(lines, engine.encode, engine.decode, table)
    assert str(error.value) == (
        "line 3: 5 source tokens, but the engine's table has 3 positions; shorten or split "
        "the line, or use another engine"
    )
    assert error.value.line == 3 and engine.decoded == []  # 1-based, counting the empty line; nothing decoded
    assert translate_lines(lines[:2], engine.encode, engine.decode, table) == ["b a", ""]


def test_an_engine_that_loses_a_sentence_is_an_error_not_a_shifted_output():
    engine = FakeEngine()
    with pytest.raises(RuntimeError, match="1 translations for 2 sentences"):
        translate_lines(["a", "b"], engine.encode, lambda sequences: engine.decode(sequences)[:1])


def test_a_single_string_or_a_non_string_is_a_type_error():
    engine = FakeEngine()
    with pytest.raises(TypeError, match="not a single string"):
        translate_lines("a b", engine.encode, engine.decode)
    with pytest.raises(TypeError, match="sentence 2 is an int, not a str"):
        translate_lines(["a", 3], engine.encode, engine.decode)
    with pytest.raises(TypeError, match="`sentences` must be a sequence of strings, not a NoneType"):
        translate_lines(None, engine.encode, engine.decode)
    assert engine.encoded == []


def test_unset_options_keep_the_generation_config_and_none_turns_the_length_limit_off():
    assert given_options(num_beams=None, length_penalty=0.0, max_length_b=UNSET) == {"length_penalty": 0.0}
    assert given_options(num_beams=1, max_length_b=None) == {"num_beams": 1, "max_length_b": None}
    paper = {"num_beams": 4, "length_penalty": 0.6, "max_length_b": 50}
    assert resolve_options(paper, num_beams=None, max_length_b=UNSET) == paper
    assert resolve_options(paper, num_beams=1, max_length_b=None) == {
        "num_beams": 1,
        "length_penalty": 0.6,
        "max_length_b": None,
    }
