"""Describe what a value may be with `Setting`, the package's view of one declared setting, read from a dataclass
field.

Every rule about a value is written one way: as a dataclass field whose metadata declares its meaning and the values
it may take, in the form of transformers' `TrainingArguments` (`field(default=..., metadata={"help": ..., "min": 1,
"max": 8})`; validation_vaswani.py lists the metadata keys). The model's settings are `VaswaniConfig`'s fields and
the decoding settings are those of `DecodingSettings` (generation_config_vaswani.py). A recipe's keys are the fields
of its sections (`vaswani_hf.training.recipe`), a tool's own flags the fields of its options (`vaswani_hf.cli`),
and the fields of a file the package reads, or the launchers' environment variables, are declared the same way.
`settings_of(cls)` reads such fields as `Setting`s, which describe, check and read values, narrow a setting to what a
tool or the Space offers of it, and give command-line flags (`flag`, below). The check itself is the
Hub files' `check_setting` (validation_vaswani.py), so that a value is judged by one implementation with or without
this package.

The second half of this module builds command-line flags from these settings, so that a flag takes the values, the
default and the meaning of the setting it sets: `flag(setting)` gives its `add_argument` keywords, its checked argparse
type or its choices, its default, and its meaning and range as help. So a flag cannot disagree with the setting it
sets, and a bad value is one line naming its flag before any work: no value reaches torch or transformers unchecked.
`device` checks a torch device in the same way, against what this machine has.

Upper bounds exist where a huge value would exhaust memory or overflow a library's integer rather than fail with a
message (a seed beyond 2^32, a beam of a million hypotheses); they are far above any real use.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import operator
import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from . import validation_vaswani as hub_check
from .configuration_vaswani import MAX_POSITIONS, VaswaniConfig
from .generation_config_vaswani import DecodingSettings
from .validation_vaswani import SettingError, declared_fields, shown

_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
# A narrower view may change the range, the choices, the default (one of the allowed values), the help text, and
# whether None is refused.
_NARROWING = {"min", "max", "choices", "default", "help", "nullable"}


@dataclasses.dataclass(frozen=True, eq=False)
class Setting:
    """Describe one declared setting as a dataclass field holds it: its `name`, its annotation `kind` (`int`,
    `float | int | None`, `list[str]`, ...), its `default` and its declaration `metadata` (help, min, max, choices,
    words, token_id, architecture, recipe, ...). Build one with `settings_of`. `narrowed` gives a view that allows
    fewer values, which is what a tool or the Space offers of a setting."""

    name: str
    kind: Any
    default: Any
    metadata: Mapping

    @classmethod
    def of(cls, declared: dataclasses.Field) -> Setting:
        """Return the setting that a dataclass field declares."""
        default = declared.default_factory() if declared.default is dataclasses.MISSING else declared.default
        return cls(declared.name, declared.type, default, MappingProxyType(dict(declared.metadata)))

    @property
    def help(self) -> str:
        return self.metadata.get("help", "")

    @property
    def min(self):
        return self.metadata.get("min")

    @property
    def max(self):
        return self.metadata.get("max")

    @property
    def min_exclusive(self) -> bool:
        return bool(self.metadata.get("min_exclusive"))

    @property
    def max_exclusive(self) -> bool:
        return bool(self.metadata.get("max_exclusive"))

    @property
    def token_id(self) -> bool:
        """Tell whether the value is a token id of the model's vocabulary (or a list of them), checked against its
        size."""
        return bool(self.metadata.get("token_id"))

    @property
    def architecture(self) -> bool:
        """Tell whether the weights' meaning depends on the setting, so that a checkpoint resumes only with the same
        value."""
        return bool(self.metadata.get("architecture"))

    @property
    def recipe(self) -> bool:
        """Tell whether a training recipe sets the setting, through a recipe key of the same name."""
        return bool(self.metadata.get("recipe"))

    @property
    def choices(self) -> tuple:
        return tuple(self.metadata.get("choices", ()))

    @property
    def words(self) -> tuple:
        return tuple(self.metadata.get("words", ()))

    @property
    def finite(self) -> bool:
        return self.metadata.get("finite", True) is not False

    @property
    def arms(self) -> list:
        """Return the types a value may have besides None, without `str` where it stands for the declared words."""
        return hub_check.value_types(self.kind, self.metadata)

    @property
    def nullable(self) -> bool:
        return hub_check.is_nullable(self.kind)

    @property
    def type(self) -> type:
        """Return the setting's kind of value: int, float (an int is taken as one), bool, str, list or dict."""
        arms = self.arms
        if float in arms:
            return float
        return typing.get_origin(arms[0]) or arms[0] if arms else object

    @property
    def many(self) -> bool:
        """Tell whether a list of values is allowed (for token ids, several ids, as eos_token_id may be)."""
        return any(typing.get_origin(arm) is list for arm in self.arms)

    @property
    def nested(self) -> bool:
        """Tell whether the value is a list of lists of token ids (as bad_words_ids is)."""
        return list[list[int]] in self.arms

    def limits(self) -> str:
        """Return the range as a phrase, such as "in [1, 1,024]", "> 0" or "<= 10", or "" where there is none."""
        return hub_check.describe_limits(self.metadata)

    def of_kind(self, value) -> bool:
        """Return whether `value` has the declared type (a bool is no number; an int is a float), whatever its
        range."""
        return hub_check.of_kind(self.kind, self.metadata, value)

    def describe(self) -> str:
        """Return what the setting may be, as a phrase such as "an integer in [1, 1,024]" or "one of 'gnmt', 'hf'"."""
        return hub_check.describe_setting(self.kind, self.metadata)

    def problem(self, value, vocab_size: int | None = None) -> str | None:
        """Return why `value` breaks the declaration, as a phrase to follow "must", or None if it does not."""
        return hub_check.setting_problem(self.kind, self.metadata, value, vocab_size)

    def check(self, value, where: str, vocab_size: int | None = None):
        """Return `value` if the declaration allows it, else raise SettingError "{where}: {name} must ..., got
        {value}". The check is the Hub files' `check_setting`, so a value is judged the same way with or without this
        package."""
        return hub_check.check_setting(self.name, self.kind, self.metadata, value, where, vocab_size)

    def read(self, text: str, where: str, none: tuple = ()):
        """Return the value that `text` spells (the text of a command-line flag or an environment variable), not yet
        checked against the range.

        Any of the words in `none` (such as "none" or "null") gives None, and any word in `words` is returned as it
        is. For a boolean setting, "true"/"false" (also yes/no, 1/0, on/off) give True or False. Digits give a number:
        an integer setting reads "1.5" and "1e3" as numbers too, so that its check can then refuse them with its range
        in the message. Text that spells no value of the setting's kind raises SettingError.
        """
        word = text.strip()
        if word.lower() in none:
            return None
        if text in self.words or self.type is str or self.choices:
            return text
        if self.type is bool and word.lower() in _TRUE + _FALSE:
            return word.lower() in _TRUE
        for read in (int, float) if self.type is int else (float,) if self.type is float else ():
            try:
                return read(word)
            except ValueError:
                continue
        described = self.describe().replace(" or None", f" or {none[0]!r}") if none else self.describe()
        phrase = f"must be {described}, got {shown(text)}"
        raise SettingError(f"{where}: {self.name} {phrase}", phrase, self.name)

    def parse(self, text: str, where: str, none: tuple = ()):
        """Return the value that a flag or an environment variable sets. The text is first turned into a value by
        `read` (where the words in `none` mean None), and the value is then checked against the declaration, which
        raises a SettingError if the value breaks it."""
        value = self.read(text, where, none)
        try:
            return self.check(value, where)
        except SettingError as error:
            if not none:
                raise
            phrase = error.phrase.replace(" or None", f" or {none[0]!r}")
            raise SettingError(f"{where}: {self.name} {phrase}", phrase, self.name) from None

    def narrowed(self, **limits) -> Setting:
        """Return this setting with fewer allowed values, which is what a tool or the Space offers of it, for example
        `GENERATION_SETTINGS["num_beams"].narrowed(max=12)`.

        `min`, `max` and `choices` narrow the values, `default` picks one of them, `nullable=False` refuses None and
        `help` rewords the meaning. Every value the narrower setting allows must be one this setting allows, so
        limits beyond this setting's raise ValueError.
        """
        metadata = {**self.metadata, **{k: v for k, v in limits.items() if k not in ("default", "nullable")}}
        kind = self.kind
        if limits.get("nullable") is False and self.nullable:  # Keep the same types of value, without None.
            kind = functools.reduce(operator.or_, self.arms + ([str] if self.words else []))
        narrow = Setting(self.name, kind, limits.get("default", self.default), MappingProxyType(metadata))
        unbounded = any(narrow.metadata.get(k) is None and self.metadata.get(k) is not None for k in ("min", "max"))
        values = (narrow.min, narrow.max, *narrow.choices, narrow.default)
        wider = any(v is not None and self.problem(v) for v in values)
        if set(limits) - _NARROWING or unbounded or wider or narrow.nullable > self.nullable:
            raise ValueError(f"{self.name}: {limits} does not narrow {self.describe()}")
        return narrow


def settings_of(cls) -> dict[str, Setting]:
    """Return a `Setting` by name for each field of the dataclass `cls` that is declared as a setting (with a `help`
    in its metadata), in field order. The annotations are resolved first, so that a module written with
    `from __future__ import annotations` (where they are strings) declares its settings too."""
    fields = declared_fields(cls)
    hints = typing.get_type_hints(cls) if any(isinstance(f.type, str) for f in fields) else {}
    return {f.name: dataclasses.replace(Setting.of(f), kind=hints.get(f.name, f.type)) for f in fields}


# The model's settings are VaswaniConfig's fields; the decoding settings (generation_config.json and generate()'s
# arguments) are DecodingSettings' fields.
MODEL_SETTINGS = settings_of(VaswaniConfig)
GENERATION_SETTINGS = settings_of(DecodingSettings)


# Command-line flags built from the declared settings.

MAX_SEED = 2**32 - 1  # numpy's and Python's seeding accept 0 .. 2^32 - 1
MAX_SENTENCES = 10**7  # the upper bound of batch sizes and of counts of sentences
MAX_TOKENS = 10**9  # the upper bound of token budgets


def flag_type(setting: Setting, none: str | None = None):
    """Return the argparse type of a flag that sets `setting`, which reads and checks the flag's text.

    When `none` is given (for example "none"), a user who types that word as the flag's value gets None. A bad value
    raises argparse.ArgumentTypeError, so argparse's error names the flag, as in "argument --num_beams: must be in
    [1, 8], got 0".
    """
    words = (none,) if none else ()

    def convert(text: str):
        try:
            return setting.parse(text, "", none=words)
        except SettingError as error:
            raise argparse.ArgumentTypeError(error.phrase) from None

    convert.__name__ = setting.type.__name__
    convert.setting = setting
    return convert


_UNSET = object()


def flag(setting: Setting, *, none: str | None = None, default=_UNSET, **keywords) -> dict:
    """Return the `add_argument` keywords of the flag that sets the declared `setting`: its choices, or its checked
    argparse type (`flag_type`), its meaning and range as help, and its declared default. `default` gives another
    default where the tool has one of its own, e.g. None for "the model's generation_config"; `--help` shows it.
    `none` names a word that the user may type to mean None, such as "none" for `--max_length_b none`: it is added to
    the choices, or the type turns it into None. `keywords` are passed to argparse as they are (metavar, or
    type=str.upper to apply before the choices are checked)."""
    limits = setting.limits() if setting.type in (int, float) else ""
    derived = {
        "help": setting.help + (f" [{limits}]" if limits else ""),
        "default": setting.default if default is _UNSET else default,
    }
    if setting.choices:
        derived["choices"] = (*setting.choices, none) if none else setting.choices
    else:
        derived["type"] = flag_type(setting, none)
    return {**derived, **keywords}


@dataclasses.dataclass
class _Counts:
    count: int = dataclasses.field(default=1, metadata={"help": "a whole number >= 1", "min": 1})


# positive_int is the argparse type of a whole number >= 1, for scripts outside the tools (benchmarks) that declare
# nothing else.
positive_int = flag_type(settings_of(_Counts)["count"])


def device(text: str):
    """Check a `--device` value as an argparse type, before anything is loaded, and return it. It must be a torch
    device this machine has: cpu; cuda, or cuda:N with N below the GPU count; or mps where it is available."""
    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def device_problem(text: str) -> str | None:
    """Return why the torch device `text` cannot be used on this machine, or None if it can be."""
    import torch  # imported only when a device is checked, so that `--help` and a refused flag stay fast

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        return f"{text!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps)"
    if dev.type == "cpu":
        return None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return f"{text!r}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use cpu"
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            return f"{text!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered from 0"
        return None
    if dev.type == "mps":
        return None if torch.backends.mps.is_available() else f"{text!r}: MPS is not available on this machine"
    return f"{text!r}: device type {dev.type} is not supported here (use cpu, cuda or mps)"


__all__ = [
    "Setting",
    "SettingError",
    "settings_of",
    "shown",
    "MODEL_SETTINGS",
    "GENERATION_SETTINGS",
    "flag",
    "flag_type",
    "positive_int",
    "device",
    "device_problem",
    "MAX_SEED",
    "MAX_SENTENCES",
    "MAX_TOKENS",
    "MAX_POSITIONS",
]
