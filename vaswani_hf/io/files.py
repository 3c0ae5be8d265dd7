"""Declare the shape of every file the package reads, and check it when the file is read.

A file of the right name can have the wrong shape: a `trainer_state.json` that is a list, a `config.json` whose
`d_model` is a string, a `tokenizer.json` that is valid JSON but no tokenizer, a `tokenizer_config.json` whose special
token is a number. Each is refused here in one line naming the file and the field (`UsageError`, exit status 2), before
a library meets it and fails with a traceback deep inside.

- JSON shapes are written in a small declarative spec (`ListOf(...)`, `Obj(required=..., optional=..., extra=...)`,
  `Nullable(...)`, `OneOf(...)`). Its single values are `Setting`s, the package's one form of a value's rule: dataclass
  fields with their metadata. `JsonValues` declares the kinds of value, and `TokenizerConfigFields` and the like
  declare the fields that have a range or choices. Where a class owns a file, its fields are declared once, by that
  class: a vaswani config.json's settings are `VaswaniConfig`'s (`MODEL_SETTINGS`), and `spec_of` builds the shape of
  trainer_state.json from the annotations of transformers' `TrainerState`.
- `read_json(path, shape)` parses a file (with `vaswani_hf.io.text.read_json`) and checks it. The shapes are `CONFIG`,
  `TRAINER_STATE`, `TOKENIZER`, `TOKENIZER_CONFIG`, `SPECIAL_TOKENS_MAP`, `WEIGHTS_INDEX_SHAPE`, `GENERATION_CONFIG`,
  `CT2_CONFIG`, `CT2_METADATA` and `CT2_VOCABULARY`.
- The binary weight files (safetensors, CTranslate2's model.bin) are checked by their headers in `io.binary_files`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError, one_line
from ..settings import MODEL_SETTINGS, Setting, settings_of, shown
from .outputs import utf8_name
from .panics import RustPanic, rust_call
from .text import read_json as _parse_json


class ShapeError(Exception):
    """Raised when a value does not have its declared shape. `field` is the value's dotted path ("" for the whole
    file), and `problem` says what the value must be."""

    def __init__(self, field: str, problem: str, kind_ok: bool = False):
        super().__init__(problem)
        # kind_ok says that the value is of the right kind but out of bounds.
        self.field, self.problem, self.kind_ok = field, problem, kind_ok


def _got(value: Any) -> str:
    if value is None:
        return "null"
    name = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
    shown = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (bool, int, float, str)) else ""
    return f"{name} {one_line(shown, 40)}" if shown else name


def _at(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


def check_spec(spec, value: Any, path: str = "") -> None:
    """Raise a ShapeError naming `path` if `value` breaks `spec`, which is a Spec, or a Setting for a single value."""
    if not isinstance(spec, Setting):
        return spec.check(value, path)
    problem = spec.problem(value)
    if problem is not None:
        kind_ok = spec.of_kind(value)
        phrase = f"be {spec.describe()}" if kind_ok and problem == f"be {spec.limits()}" else problem
        raise ShapeError(path, f"must {phrase}, got {_got(value)}", kind_ok=kind_ok)


class Spec:
    """Describe the shape of a JSON value that holds others; `check(value, path)` raises a ShapeError where the value
    breaks it. The base class accepts any value."""

    def describe(self) -> str:
        return "a value"

    def check(self, value: Any, path: str = "") -> None:
        return None


@dataclasses.dataclass(eq=False)
class Nullable(Spec):
    spec: Any

    def describe(self) -> str:
        return f"{self.spec.describe()} or null"

    def check(self, value, path=""):
        if value is not None:
            check_spec(self.spec, value, path)


class OneOf(Spec):
    def __init__(self, *specs):
        self.specs = specs

    def describe(self) -> str:
        return " or ".join(s.describe() for s in self.specs)

    def check(self, value, path=""):
        problems = []
        for spec in self.specs:
            try:
                return check_spec(spec, value, path)
            except ShapeError as error:
                problems.append(error)
        closer = [p for p in problems if p.kind_ok or p.field != path]  # prefer alternatives of the value's own kind
        if closer:
            raise closer[0]
        raise ShapeError(path, f"must be {self.describe()}, got {_got(value)}")


@dataclasses.dataclass(eq=False)
class ListOf(Spec):
    """Describe a list whose items have the shape `item`, of exactly `length` items when `length` is given."""

    item: Any = Spec()
    length: int | None = None

    def describe(self) -> str:
        return f"a list of {self.length} items" if self.length is not None else "a list"

    def check(self, value, path=""):
        if not isinstance(value, list) or (self.length is not None and len(value) != self.length):
            raise ShapeError(
                path,
                f"must be {self.describe()}, got {_got(value)}"
                + (f" of {len(value)} items" if isinstance(value, list) else ""),
            )
        for i, item in enumerate(value):
            check_spec(self.item, item, _at(path, i))


class Obj(Spec):
    """Describe a JSON object with `required` and `optional` fields, each with its spec. Any other field must match
    `extra` when that is a spec; it is allowed when `extra` is True and refused when it is False."""

    def __init__(self, required: Mapping | None = None, optional: Mapping | None = None, extra=True):
        self.required, self.optional, self.extra = dict(required or {}), dict(optional or {}), extra

    def describe(self) -> str:
        return "an object"

    def check(self, value, path=""):
        if not isinstance(value, dict):
            raise ShapeError(path, f"must be an object {{...}}, got {_got(value)}")
        for key in self.required:
            if key not in value:
                raise ShapeError(_at(path, key), "is missing")
        for key, item in value.items():
            spec = self.required.get(key) or self.optional.get(key)
            if spec is None and self.extra is False:
                known = ", ".join(sorted({*self.required, *self.optional}))
                raise ShapeError(_at(path, key), f"is not a known field (known: {one_line(known, 200)})")
            check_spec(spec or (Spec() if isinstance(self.extra, bool) else self.extra), item, _at(path, key))


@dataclass
class JsonValues:
    """Declare the kinds of JSON value that the shapes below name, each as a setting like any other."""

    string: str = field(default="", metadata={"help": "a string"})
    integer: int = field(default=0, metadata={"help": "an integer"})
    count: int = field(default=0, metadata={"help": "an integer >= 0", "min": 0})
    boolean: bool = field(default=False, metadata={"help": "a boolean"})
    number: float = field(default=0.0, metadata={"help": "a finite number"})
    any_number: float = field(default=0.0, metadata={"help": "a number, infinities and NaN included", "finite": False})


VALUES = settings_of(JsonValues)
STR, INT, COUNT, BOOL = VALUES["string"], VALUES["integer"], VALUES["count"], VALUES["boolean"]
_KIND_OF = {str: STR, int: INT, bool: BOOL}


# Specs are built from dataclass annotations, so that a class's fields are declared once, by the class.
def spec_of(annotation: Any, finite: bool = True):
    """Return the spec of a type annotation such as `int | None`, `list[int]` or `dict[str, float]`. Any other
    annotation (a library class, a `Literal`) gives a spec that accepts anything. When `finite` is true, a float must
    be finite."""
    if annotation in (int, float, str, bool):
        return _KIND_OF.get(annotation) or VALUES["number" if finite else "any_number"]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is list or origin is list:
        return ListOf(spec_of(args[0], finite) if args else Spec())
    if annotation is dict or origin is dict:
        return Obj(extra=spec_of(args[1], finite) if len(args) == 2 else True)
    if origin in (typing.Union, types.UnionType):
        specs = [spec_of(a, finite) for a in args if a is not type(None)]
        spec = specs[0] if len(specs) == 1 else OneOf(*specs)
        return Nullable(spec) if type(None) in args else spec
    return Spec()


# The declared JSON files follow.


@dataclasses.dataclass(frozen=True)
class FileShape:
    name: str
    spec: Spec | Setting | typing.Callable[[Any], Spec]
    advice: str
    prefix: str = ""  # said before the field (as "not a tokenizer file: ") of a file that is more than its fields


def _config_spec(data: Any) -> Spec:
    """Return the shape of a config.json: an object with a model_type, whose settings, in a vaswani config, are
    declared by `MODEL_SETTINGS`."""
    vaswani = isinstance(data, dict) and data.get("model_type") == "vaswani"
    return Obj(required={"model_type": STR}, optional=MODEL_SETTINGS if vaswani else None)


def _trainer_state_spec(data: Any) -> Spec:
    """Return the shape of a trainer_state.json: global_step is required, and every other field must be one of
    `TrainerState`'s, because transformers refuses other fields when it resumes a run."""
    from transformers import TrainerState

    saved = {"stateful_callbacks": Nullable(Obj()), "log_history": ListOf(Obj()), "trial_params": Nullable(Obj())}
    fields = {f.name: saved.get(f.name) or spec_of(f.type, finite=False) for f in dataclasses.fields(TrainerState)}
    return Obj(required={"global_step": COUNT}, optional=fields, extra=False)


CONFIG = FileShape("config.json", _config_spec, "save the model again (save_pretrained) or fix the field")
TRAINER_STATE = FileShape(
    "trainer_state.json",
    _trainer_state_spec,
    "the checkpoint is not one this training wrote: remove it or save it again",
)
_TOKEN = Obj(required={"id": COUNT, "content": STR})
TOKENIZER = FileShape(
    "tokenizer.json",
    Obj(
        required={"model": Obj(optional={"type": STR, "vocab": OneOf(Obj(extra=COUNT), ListOf())})},
        optional={
            "added_tokens": ListOf(_TOKEN),
            "version": STR,
            **{
                k: Nullable(Obj())
                for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "truncation", "padding")
            },
        },
    ),
    "give the tokenizer.json written by tokenizer.save_pretrained (vaswani-train-tokenizer)",
    prefix="not a tokenizer file: ",
)
# tokenizer_config.json and special_tokens_map.json are transformers' tokenizer files beside tokenizer.json. A special
# token there is its text or an AddedToken's fields; transformers meets any other shape with a traceback.
# TOKENIZER_CLASSES are the classes that transformers 5 and 4 save for a tokenizer.json.
TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
_ADDED_TOKEN = Obj(
    required={"content": STR}, optional={k: BOOL for k in ("lstrip", "rstrip", "normalized", "single_word", "special")}
)
_SPECIAL = OneOf(STR, _ADDED_TOKEN)
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass
class TokenizerConfigFields:
    """Declare the fields of tokenizer_config.json, as transformers writes them, that have a range or choices."""

    model_max_length: float = field(
        default=1e30,
        metadata={
            "help": "the longest sequence (transformers writes a huge number for none)",
            "min": 1,
            "finite": False,
        },
    )
    tokenizer_class: str = field(
        default="TokenizersBackend", metadata={"help": "the tokenizer class", "choices": TOKENIZER_CLASSES}
    )
    padding_side: str = field(default="right", metadata={"help": "where padding goes", "choices": ("right", "left")})
    truncation_side: str = field(
        default="right", metadata={"help": "where truncation cuts", "choices": ("right", "left")}
    )


_TOKENIZER_CONFIG = settings_of(TokenizerConfigFields)
_SPECIAL_FIELDS = {
    **{k: Nullable(_SPECIAL) for k in _SPECIAL_NAMES},
    "additional_special_tokens": Nullable(ListOf(_SPECIAL)),
}
TOKENIZER_CONFIG = FileShape(
    "tokenizer_config.json",
    Obj(
        optional={
            **_SPECIAL_FIELDS,
            "model_max_length": _TOKENIZER_CONFIG["model_max_length"],
            "tokenizer_class": Nullable(_TOKENIZER_CONFIG["tokenizer_class"]),
            "clean_up_tokenization_spaces": BOOL,
            **{k: _TOKENIZER_CONFIG[k] for k in ("padding_side", "truncation_side")},
            "added_tokens_decoder": Obj(extra=_ADDED_TOKEN),
            "extra_special_tokens": OneOf(ListOf(_SPECIAL), Obj(extra=_SPECIAL)),
            "backend": STR,
        }
    ),
    "save the tokenizer again (tokenizer.save_pretrained) or fix the field",
)
SPECIAL_TOKENS_MAP = FileShape(
    "special_tokens_map.json",
    Obj(optional=_SPECIAL_FIELDS),
    "save the tokenizer again (tokenizer.save_pretrained) or fix the field",
)
WEIGHTS_INDEX_SHAPE = FileShape(
    "model.safetensors.index.json",
    Obj(required={"weight_map": Obj(extra=STR)}, optional={"metadata": Nullable(Obj())}),
    "save the model again",
)
# generation_config.json is only an object here: its settings' bounds are the generation settings' own check, which
# `check_generation_config_file` in vaswani_hf.io.models calls.
GENERATION_CONFIG = FileShape("generation_config.json", Obj(), "save the model again or fix the file")
CT2_CONFIG = FileShape(
    "CTranslate2 config.json",
    Obj(
        optional={
            "add_source_bos": BOOL,
            "add_source_eos": BOOL,
            "bos_token": STR,
            "eos_token": STR,
            "unk_token": STR,
            "decoder_start_token": Nullable(STR),
            "layer_norm_epsilon": Nullable(VALUES["number"]),
        }
    ),
    "export the model again (vaswani-export-ctranslate2)",
)


@dataclass
class CTranslate2MetadataFields:
    """Declare the fields of vaswani_ctranslate2.json that have a range."""

    max_positions: int = field(default=1024, metadata={"help": "rows of the exported position table", "min": 1})


_CT2_METADATA = settings_of(CTranslate2MetadataFields)
CT2_METADATA = FileShape(
    "vaswani_ctranslate2.json",
    Obj(
        optional={"max_positions": Nullable(_CT2_METADATA["max_positions"]), "generation": Obj(), "quantization": STR}
    ),
    "export the model again (vaswani-export-ctranslate2)",
)
CT2_VOCABULARY = FileShape(
    "CTranslate2 vocabulary", ListOf(STR), "export the model again (vaswani-export-ctranslate2)"
)


def check_shape(data: Any, shape: FileShape, path: str | os.PathLike) -> Any:
    """Return `data` (read from `path`) if it has `shape`, and otherwise raise a UsageError naming the file and the
    field."""
    spec = shape.spec(data) if callable(shape.spec) else shape.spec
    try:
        check_spec(spec, data)
    except ShapeError as error:
        where = (
            f"field {error.field} "
            if error.field
            else "the file "
            if shape.prefix
            else f"not a {shape.name}: the file "
        )
        raise UsageError(f"{path}: {shape.prefix}{where}{error.problem}; {shape.advice}") from None
    return data


def read_json(path: str | os.PathLike, shape: FileShape, what: str | None = None) -> Any:
    """Return the content of a JSON file after checking it against its declared `shape`; a problem raises a UsageError
    naming the file (and the line, or the field)."""
    return check_shape(_parse_json(path, what=what or shape.name), shape, path)


def check_library_input(
    path: str | os.PathLike, named: str, readers: str = "the tokenizers and safetensors libraries"
) -> None:
    """Raise a UsageError where the path of a model, tokenizer or CTranslate2 folder (or of its tokenizer.json) is not
    UTF-8, since the libraries that read these files (`readers`) take only UTF-8 paths. The tokenizers library's
    `Tokenizer.from_file` (which transformers' `from_pretrained` calls) raises UnicodeEncodeError for any other,
    safetensors refuses to open the weights, and CTranslate2 refuses the argument, so the folder could not be read
    part way through the work. The whole absolute path counts, because a folder above it can be the one whose name is
    not UTF-8. `named` is how the message names the path (the flag or key and the path)."""
    if not utf8_name(path):
        raise UsageError(
            f"{named}: its name is not UTF-8, and {readers} can read only a UTF-8 path; rename it (or the folder "
            "above it that is not UTF-8), or copy it to a UTF-8 path"
        )


def check_tokenizer_file(path: str | os.PathLike, what: str | None = None):
    """Return the `tokenizers.Tokenizer` of a tokenizer.json after checking the file, first against its declared shape
    and then by loading it with the library itself. The library reports a file of the right shape but broken content
    in a multi-line message, which becomes one line of a UsageError here, and a regular expression of the file that
    makes the library panic (`regex_fields`, `probe_regexes`) is refused in one line too, and so is a path that the
    library cannot take (`check_library_input`)."""
    check_library_input(path, what or f"tokenizer file {path}", "the tokenizers library")
    data = read_json(path, TOKENIZER, what=what)
    from tokenizers import Tokenizer

    try:
        tokenizer = rust_call(lambda: Tokenizer.from_str(json.dumps(data)))
    except Exception as error:  # noqa: BLE001 - the tokenizers library raises a plain Exception (or panics: RustPanic)
        raise UsageError(f"{path}: not a tokenizer file ({one_line(error, 160)}); {TOKENIZER.advice}") from None
    probe_regexes(tokenizer, data, path)
    return tokenizer


def regex_fields(value: Any, at: str = "") -> dict[str, str]:
    """Return {field: pattern} for every regular expression (`{"Regex": pattern}`) in a tokenizer.json's value, its
    field written as a dotted path ("pre_tokenizer.pretokenizers.0.pattern")."""
    if isinstance(value, Mapping):
        if set(value) == {"Regex"} and isinstance(value["Regex"], str):
            return {at: value["Regex"]}
        return {k: v for key, item in value.items() for k, v in regex_fields(item, _at(at, key)).items()}
    if isinstance(value, list):
        return {k: v for index, item in enumerate(value) for k, v in regex_fields(item, _at(at, index)).items()}
    return {}


# Each probe is one character repeated this often, then a character that may end no match: a pattern that backtracks
# exponentially, such as `((a+)+)+c`, exceeds Oniguruma's retry limit (10 million steps) on 40 of its characters.
PROBE_REPEATS = 48


def probe_texts(patterns: list[str]) -> list[str]:
    """Return the probe sentences for the patterns: each letter or digit that the patterns name (`a` of `(a+)+`, `s`
    of `\\s`, `L` of `\\p{L}`), and a letter, a digit, a space and a full stop, repeated `PROBE_REPEATS` times and
    followed by "!" or a line end."""
    characters = sorted({c for pattern in patterns for c in pattern if c.isalnum()} | set("a0 ."))
    return [c * PROBE_REPEATS + end for c in characters for end in ("!", "\n")]


def probe_regexes(tokenizer, data: Mapping, path: str | os.PathLike) -> None:
    """Encode and decode probe sentences (`probe_texts`) with a tokenizer whose file has regular expressions, and
    raise a UsageError naming the file and the patterns' fields if the library panics on one.

    The tokenizers library compiles a pattern when the file is loaded, so an invalid pattern fails the load, but it
    finds a pattern that backtracks without end only when a sentence makes it give up, and then panics
    (`io.panics`): in a translation, in the middle of a training run's data preparation, or in the Space. The probes
    find it while the file is checked, before any work; a probe costs microseconds unless the pattern backtracks.
    """
    fields = {
        k: v
        for part in ("normalizer", "pre_tokenizer", "decoder")
        for k, v in regex_fields(data.get(part), part).items()
    }
    if not fields:
        return
    for text in probe_texts(list(fields.values())):
        try:
            rust_call(lambda text=text: tokenizer.decode(tokenizer.encode(text).ids))
        except RustPanic as panic:
            named = ", ".join(f"{field} {shown(pattern, 40)}" for field, pattern in list(fields.items())[:3])
            raise UsageError(
                f"{path}: a regular expression of the tokenizer backtracks without end ({named}): the tokenizers "
                f"library panicked on the probe {shown(text[0] * 8)}... ({one_line(panic.message, 80)}); fix the "
                "pattern, or use a tokenizer without it"
            ) from None


__all__ = [
    "Spec",
    "JsonValues",
    "VALUES",
    "check_spec",
    "Nullable",
    "OneOf",
    "ListOf",
    "Obj",
    "ShapeError",
    "spec_of",
    "FileShape",
    "CONFIG",
    "TRAINER_STATE",
    "TOKENIZER",
    "TOKENIZER_CONFIG",
    "SPECIAL_TOKENS_MAP",
    "WEIGHTS_INDEX_SHAPE",
    "GENERATION_CONFIG",
    "CT2_CONFIG",
    "CT2_METADATA",
    "CT2_VOCABULARY",
    "check_shape",
    "read_json",
    "check_tokenizer_file",
]


# These tokenizer.json fields do not change which id a text gets: they are set per call.
_NOT_VOCABULARY = ("truncation", "padding")


def vocabulary_fingerprint(folder: os.PathLike) -> str | None:
    """Return a hash of what decides the token ids in `folder`'s tokenizer.json, or None without one. Two tokenizers
    of the same size but other merges or tokens give other ids to the same text."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    data = read_json(path, TOKENIZER)
    kept = {k: v for k, v in data.items() if k not in _NOT_VOCABULARY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
