"""What a value may be: `Setting`, the package's view of one declared setting, read from a dataclass field.

Every rule about a value is written one way: a dataclass field whose metadata declares its meaning and the values
it may take, in the form of transformers' `TrainingArguments` (`field(default=..., metadata={"help": ..., "min": 1,
"max": 8})`; the keys: validation_vaswani.py). The model's settings are `VaswaniConfig`'s fields, the decoding
settings `DecodingSettings`' (generation_config_vaswani.py), a recipe's keys the fields of its sections
(`vaswani_hf.training.recipe`), a tool's own flags the fields of its options (`vaswani_hf.cli`), a file's fields and
the launchers' environment variables theirs. `settings_of(cls)` reads them as `Setting`s, which describe, check and
read values, narrow (what a tool or the Space offers of a setting), and give command-line flags
(`vaswani_hf.constraints.flag`). The check itself is the Hub files' `check_setting` (validation_vaswani.py), so that
a value is judged by one implementation with or without this package.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from . import validation_vaswani as hub_check
from .configuration_vaswani import VaswaniConfig
from .generation_config_vaswani import DecodingSettings
from .validation_vaswani import SettingError, declared_fields, shown

_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
# What a narrower view may change: the range, the choices, the default among them, the meaning, None refused.
_NARROWING = {"min", "max", "choices", "default", "help", "nullable"}


@dataclasses.dataclass(frozen=True, eq=False)
class Setting:
    """One declared setting: its `name`, its annotation (`kind`: `int`, `float | int | None`, `list[str]`, ...), its
    `default` and its declaration (`metadata`: help, min, max, choices, words, token_id, architecture, recipe, ...),
    as a dataclass field holds them. Build one with `settings_of`; `narrowed` gives a view with fewer values."""

    name: str
    kind: Any
    default: Any
    metadata: Mapping

    @classmethod
    def of(cls, declared: dataclasses.Field) -> Setting:
        """The setting a dataclass field declares."""
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
        """A token id of the model's vocabulary (or a list of them), checked against its size."""
        return bool(self.metadata.get("token_id"))

    @property
    def architecture(self) -> bool:
        """The weights' meaning depends on it: a checkpoint resumes only with the same value."""
        return bool(self.metadata.get("architecture"))

    @property
    def recipe(self) -> bool:
        """A training recipe sets it (a recipe key of the same name)."""
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
        """The types a value may have besides None (`str` stands for the words where there are words)."""
        return hub_check.value_types(self.kind, self.metadata)

    @property
    def nullable(self) -> bool:
        return hub_check.is_nullable(self.kind)

    @property
    def type(self) -> type:
        """The setting's kind of value: int, float (an int is taken as one), bool, str, list or dict."""
        arms = self.arms
        if float in arms:
            return float
        return typing.get_origin(arms[0]) or arms[0] if arms else object

    @property
    def many(self) -> bool:
        """A list of values is allowed (token ids: several ids, as eos_token_id)."""
        return any(typing.get_origin(arm) is list for arm in self.arms)

    @property
    def nested(self) -> bool:
        """A list of lists of token ids (bad_words_ids)."""
        return list[list[int]] in self.arms

    def limits(self) -> str:
        """The range as a phrase ("in [1, 1,024]", "> 0", "<= 10"), or "" where there is none."""
        return hub_check.describe_limits(self.metadata)

    def of_kind(self, value) -> bool:
        """Whether `value` has the declared type (a bool is no number; an int is a float), whatever its range."""
        return hub_check.of_kind(self.kind, self.metadata, value)

    def describe(self) -> str:
        """What the setting may be, as a phrase: "an integer in [1, 1,024]", "one of 'gnmt', 'hf'"."""
        return hub_check.describe_setting(self.kind, self.metadata)

    def problem(self, value, vocab_size: int | None = None) -> str | None:
        """Why `value` breaks the declaration (a phrase to follow "must"), or None."""
        return hub_check.setting_problem(self.kind, self.metadata, value, vocab_size)

    def check(self, value, where: str, vocab_size: int | None = None):
        """`value`, or SettingError "{where}: {name} must ..., got {value}" (the Hub files' `check_setting`)."""
        return hub_check.check_setting(self.name, self.kind, self.metadata, value, where, vocab_size)

    def read(self, text: str, where: str, none: tuple = ()):
        """The value that `text` (a command-line flag's, an environment variable's) spells, not yet checked against
        the range: a word of `none` ("none", "null") gives None, a word of `words` itself, "true"/"false" (yes/no,
        1/0, on/off) a boolean, digits a number (an integer setting reads "1.5" and "1e3" as numbers, which its
        check then refuses); SettingError for text that spells no value of the setting's kind."""
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
        """`read`, then checked: the value a flag or an environment variable sets (`none` as in `read`)."""
        value = self.read(text, where, none)
        try:
            return self.check(value, where)
        except SettingError as error:
            if not none:
                raise
            phrase = error.phrase.replace(" or None", f" or {none[0]!r}")
            raise SettingError(f"{where}: {self.name} {phrase}", phrase, self.name) from None

    def narrowed(self, **limits) -> Setting:
        """This setting with fewer allowed values (`min`, `max`, `choices`, a `default` among them, `nullable`
        False; `help`): what a tool or the Space offers of it, e.g.
        `GENERATION_SETTINGS["num_beams"].narrowed(max=12)`.
        A value the narrower setting allows, this one allows: ValueError for limits beyond this setting's."""
        metadata = {**self.metadata, **{k: v for k, v in limits.items() if k not in ("default", "nullable")}}
        kind = self.kind
        if limits.get("nullable") is False and self.nullable:  # the same arms without None
            kind = functools.reduce(operator.or_, self.arms + ([str] if self.words else []))
        narrow = Setting(self.name, kind, limits.get("default", self.default), MappingProxyType(metadata))
        unbounded = any(narrow.metadata.get(k) is None and self.metadata.get(k) is not None for k in ("min", "max"))
        values = (narrow.min, narrow.max, *narrow.choices, narrow.default)
        wider = any(v is not None and self.problem(v) for v in values)
        if set(limits) - _NARROWING or unbounded or wider or narrow.nullable > self.nullable:
            raise ValueError(f"{self.name}: {limits} does not narrow {self.describe()}")
        return narrow


def settings_of(cls) -> dict[str, Setting]:
    """{name: Setting} of the fields of dataclass `cls` declared as settings (a `help` in their metadata), in field
    order. Types are resolved first, so that a module with `from __future__ import annotations` declares too."""
    fields = declared_fields(cls)
    hints = typing.get_type_hints(cls) if any(isinstance(f.type, str) for f in fields) else {}
    return {f.name: dataclasses.replace(Setting.of(f), kind=hints.get(f.name, f.type)) for f in fields}


MODEL_SETTINGS = settings_of(VaswaniConfig)  # the model's settings: VaswaniConfig's fields
GENERATION_SETTINGS = settings_of(DecodingSettings)  # the decoding settings: generation_config.json, generate()

__all__ = ["Setting", "SettingError", "settings_of", "shown", "MODEL_SETTINGS", "GENERATION_SETTINGS"]
