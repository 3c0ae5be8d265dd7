"""Check a setting's value against its declaration: the one such check, for the files copied next to the weights.

The model's settings (configuration_vaswani.py) and the decoding settings (generation_config_vaswani.py) are dataclass
fields whose metadata declares what a value may be, in the form of transformers' own `TrainingArguments`
(`field(default=..., metadata={"help": ..., "min": 1, "max": 8})`), and `check_setting` judges a value by it. This
file runs under `trust_remote_code` where vaswani_hf is not installed, because config.json, generation_config.json
and `generate()`'s arguments are entries there too. vaswani_hf's `Setting` (`vaswani_hf.settings`) calls the same
functions, so that one implementation judges a value with or without the package.

A declaration is a field's type (`int`, `float | int`, `int | None`, `list[str] | None`, ...) and its metadata. `help`
gives the setting's meaning. A value must lie in `min` <= value <= `max`, or be one of `choices`. Where
`min_exclusive` or `max_exclusive` is set, that bound is strict (`<`). Numbers must be finite unless `finite` is
False. `words` lists text
values accepted besides, such as "auto". `token_id` marks a token id of the model's vocabulary (`int`), a list of them
(`list[int]`) or a list of non-empty lists of them (`list[list[int]]`). vaswani_hf reads two more keys: `architecture`
(the weights' meaning depends on the setting) and `recipe` (a training recipe sets it).
The file imports only the standard library.
"""

import dataclasses
import math
import types
import typing
from collections.abc import Mapping


class SettingError(ValueError):
    """Report a value that its setting's declaration refuses, in one line naming the setting, the value and what it
    may be.

    `name` is the setting's name and `phrase` the part of the message after it ("must be ..., got ..."). The class is
    a `ValueError`, so that callers without this package catch it as one."""

    exit_code = 2  # The command line reports it as bad input, with exit status 2.

    def __init__(self, message: str, phrase: str | None = None, name: str | None = None):
        super().__init__(message)
        self.phrase, self.name = phrase or message, name


def shown(value, limit: int = 60) -> str:
    """Return `value` as an error message quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def value_types(kind, declaration: Mapping) -> list:
    """Return the types a value of `kind` may have besides None: the arms of a union, without `str` where it stands
    for the declared `words`."""
    arms = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
    return [a for a in arms if a is not type(None) and not (a is str and declaration.get("words"))]


def _is(value, kind) -> bool:
    """Return whether `value` has the type `kind`. A bool is no number, an int counts as a float (as in PEP 484) and
    a tuple as a list."""
    if typing.get_origin(kind) is list:
        return isinstance(value, (list, tuple)) and all(_is(item, typing.get_args(kind)[0]) for item in value)
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, (int, float) if kind is float else kind)


def _number(x) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) >= 10**4 else f"{x:g}" if isinstance(x, float) else str(x)


def describe_limits(declaration: Mapping) -> str:
    """Return the declared range as a phrase, such as "in [1, 1,024]", "> 0" or "<= 10", or "" where there is none."""
    low, high = declaration.get("min"), declaration.get("max")
    opening, closing = (
        "(" if declaration.get("min_exclusive") else "[",
        ")" if declaration.get("max_exclusive") else "]",
    )
    if low is not None and high is not None:
        return f"in {opening}{_number(low)}, {_number(high)}{closing}"
    if low is not None:
        return f"{'>' if declaration.get('min_exclusive') else '>='} {_number(low)}"
    return f"{'<' if declaration.get('max_exclusive') else '<='} {_number(high)}" if high is not None else ""


_KIND_NAMES = {
    int: "an integer",
    bool: "a boolean",
    str: "a string",
    dict: "an object",
    list[str]: "a list of strings",
}
_IDS = "token ids (integers in [0, vocab_size))"


def describe_setting(kind, declaration: Mapping) -> str:
    """Return what a declared setting may be, as a phrase such as "an integer in [1, 1,024]" or "one of 'gnmt', 'hf'
    or None"."""
    arms = value_types(kind, declaration)
    if "choices" in declaration:
        text = "one of " + ", ".join(repr(c) for c in declaration["choices"])
    elif declaration.get("token_id") and int in arms:
        text = "a token id (an integer in [0, vocab_size))" + (" or a list of them" if list[int] in arms else "")
    elif declaration.get("token_id"):
        text = f"a list of {'non-empty lists of ' * (list[list[int]] in arms)}{_IDS}"
    else:
        numeric = float in arms or int in arms
        limits = describe_limits(declaration) if numeric else ""
        text = ("a number" if float in arms else _KIND_NAMES.get(arms[0], "a value")) + (
            f" {limits}" if limits else ""
        )
    text += "".join(f" or {word!r}" for word in declaration.get("words", ()))
    return text + (" or None" if is_nullable(kind) else "")


def is_nullable(kind) -> bool:
    return kind is type(None) or type(None) in typing.get_args(kind)


def _token_ids(value, arms: list) -> list | None:
    """Return the ids in a token-id value of a shape that `arms` allows, or None if its shape is not allowed.

    The shapes are an id; a list of ids, which must not be empty where it may also be a single id (as eos_token_id);
    and a non-empty list of non-empty lists of ids (as bad_words_ids)."""
    if int in arms and _is(value, int):
        return [value]
    if list[int] in arms and _is(value, list[int]) and (value or int not in arms):
        return list(value)
    if list[list[int]] in arms and _is(value, list[list[int]]) and value and all(value):
        return [token for group in value for token in group]
    return None


def setting_problem(kind, declaration: Mapping, value, vocab_size: int | None = None) -> str | None:
    """Return why `value` breaks the declaration, as a phrase to follow "must", or None if it does not.
    `vocab_size`, where given, bounds a token id."""
    arms = value_types(kind, declaration)
    if value is None:
        return None if is_nullable(kind) else f"be {describe_setting(kind, declaration)}"
    if isinstance(value, str) and value in declaration.get("words", ()):
        return None
    if "choices" in declaration:
        found = any(value is c or (type(value) is type(c) and value == c) for c in declaration["choices"])
        return None if found else f"be {describe_setting(kind, declaration)}"
    if declaration.get("token_id"):
        ids = _token_ids(value, arms)
        if ids is None:
            return f"be {describe_setting(kind, declaration)}"
        if vocab_size is not None and any(not 0 <= token < vocab_size for token in ids):
            return f"be a token id of the vocabulary, in [0, {vocab_size - 1}]"
        return "be a token id, an integer >= 0" if any(token < 0 for token in ids) else None
    if not any(_is(value, arm) for arm in arms):
        return f"be {describe_setting(kind, declaration)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    limits = describe_limits(declaration)
    if isinstance(value, float) and not math.isfinite(value):
        return None if declaration.get("finite") is False else "be a finite number" + (f" {limits}" if limits else "")
    low, high = declaration.get("min"), declaration.get("max")
    below = low is not None and (value <= low if declaration.get("min_exclusive") else value < low)
    above = high is not None and (value >= high if declaration.get("max_exclusive") else value > high)
    return f"be {limits}" if below or above else None


def of_kind(kind, declaration: Mapping, value) -> bool:
    """Return whether `value` has the declared type, or one of the choices' types where there are choices, whatever
    its range."""
    choices = declaration.get("choices", ())
    return (
        any(type(value) is type(c) for c in choices)
        if choices
        else any(_is(value, a) for a in value_types(kind, declaration))
    )


def check_setting(name: str, kind, declaration: Mapping, value, where: str, vocab_size: int | None = None):
    """Return `value` if its declaration allows it; otherwise raise a SettingError "{where}: {name} must ..., got
    {value}", which adds the value's type where that is not the declared one."""
    problem = setting_problem(kind, declaration, value, vocab_size)
    if problem is None:
        return value
    named = "" if value is None or of_kind(kind, declaration, value) else f" ({type(value).__name__})"
    phrase = f"must {problem}, got {shown(value)}{named}"
    raise SettingError(f"{where}: {name} {phrase}", phrase, name)


def declared_fields(cls) -> list[dataclasses.Field]:
    """Return the fields of dataclass `cls` that are declared as settings (with a `help` in their metadata), in
    order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


__all__ = [
    "SettingError",
    "check_setting",
    "declared_fields",
    "describe_limits",
    "describe_setting",
    "is_nullable",
    "of_kind",
    "setting_problem",
    "shown",
    "value_types",
]
