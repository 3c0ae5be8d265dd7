"""Recipes: every setting of a training run, declared once as dataclasses with help text.

A recipe is a YAML file of keys (`recipes/*.yaml`, or any path) whose values override the defaults below (the paper's
base model, Section 5 and Table 3); any key can be overridden again on the command line (`--dropout 0.2`). The same
declaration gives the command line (transformers' `HfArgumentParser`: one option per key, grouped in `--help`),
`--list-keys`, the validation (unknown keys and wrong types are refused with the file and key named, before anything
is loaded) and the objects built from a recipe: `Recipe.model_config()` -> `VaswaniConfig` (the model section's keys
are VaswaniConfig's own fields) and `training_arguments()` in `vaswani_hf.training.run`.

Where the paper is silent, defaults follow tensor2tensor's first release (t2t v1) and say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NewType

import yaml
from transformers import HfArgumentParser

from ..io import UsageError, add_debug_argument

# `vaswani_hf/recipes` is a link to the repository's `recipes/`, so that a built wheel carries the recipes as package
# data (pyproject.toml) and `--recipe NAME` works from an installed package too.
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
REPO_ROOT = Path(__file__).resolve().parents[2]
NULLS = ("null", "None", "none", "~")

IntOrAuto = NewType("IntOrAuto", str)  # an int, or "auto" (gradient accumulation derived from tokens_per_step)


class RecipeError(UsageError):
    """A recipe (YAML file or command-line override) is invalid; raised before any data is read or model built."""


def key(default: Any, help: str):  # noqa: A002 - `help` is argparse's name
    """A recipe key: its default and the help text shown by `--help` and `--list-keys`."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class RunKeys:
    _argument_group_name = "run"
    description: str | None = key(None, "free text describing the recipe")
    output_dir: str = key("outputs/run", "checkpoints, logs, metrics, plots and the exported model go here")
    seed: int = key(42, "seed of model init, dropout and batch order")
    torch_threads: int = key(0, "torch.set_num_threads per process (0: leave torch's default)")
    resume: bool = key(False, "continue from the latest checkpoint in output_dir")
    logging_steps: int = key(50, "log loss and learning rate every N updates")
    report_to: str = key("none", "Trainer integrations: none, tensorboard, ...")
    disable_tqdm: bool = key(False, "hide progress bars")
    use_cpu: bool = key(False, "train on CPU even if a GPU is present (multi-process CPU DDP over gloo)")
    bf16: bool = key(False, "bf16 mixed precision (Accelerate)")
    fp16: bool = key(False, "fp16 mixed precision (Accelerate)")
    dataloader_num_workers: int = key(0, "DataLoader worker processes (> 0: collation runs in the workers, so the "
                                         "tokens/s and padding statistics are not counted)")
    translate_examples: list[str] = key([], "sentences translated and printed at the end")
    export_dir: str | None = key(None, "Hub-ready folder (default: OUTPUT_DIR/hub)")
    debug_log_batches: bool = key(False, "write a hash of every training example seen, per process (tests)")


@dataclass
class DataKeys:
    _argument_group_name = "data (Section 5.1; relative paths: current folder, then the repository)"
    data_format: Literal["sample", "moses", "tsv", "jsonl", "hub"] = key(
        "sample", "where the corpus comes from: sample (bundled); moses (PREFIX.SRC + PREFIX.TGT, a sentence a line); "
        "tsv (a file whose first line names the columns' languages, e.g. en<TAB>de); jsonl (a file, "
        '{"en": ..., "de": ...} or {"translation": {...}} a line); hub (hub_dataset)')
    data_dir: str | None = key(None, "folder that relative train/valid/test paths are joined to")
    train_data: str = key("train", "moses: file prefix (PREFIX.src, PREFIX.tgt); tsv/jsonl: file; hub/sample: split")
    valid_data: str | None = key("valid", "like train_data; the dev set for validation loss/BLEU (null: none)")
    test_data: str | None = key("test", "like train_data; scored after training with the averaged model (null: none)")
    hub_dataset: str | None = key(None, "data_format hub: dataset name for datasets.load_dataset (e.g. wmt14)")
    hub_config: str | None = key(None, "data_format hub: dataset configuration (e.g. de-en)")
    src_lang: str = key("en", "source language code")
    tgt_lang: str = key("de", "target language code")
    max_length: int | None = key(256, "drop training pairs with a side longer than this many BPE tokens (null: keep)")
    max_length_ratio: float | None = key(9.0, "drop training pairs whose length ratio exceeds this (null: keep)")
    max_train_samples: int = key(0, "use only the first N training pairs (0: all)")
    max_eval_samples: int = key(0, "validate on the first N dev pairs (0: all)")
    preprocessing_num_workers: int | None = key(None, "processes for Dataset.map tokenisation")


@dataclass
class TokenizerKeys:
    _argument_group_name = "tokenizer (Section 5.1: one BPE vocabulary shared by source and target)"
    tokenizer_path: str | None = key(None, "existing tokenizer folder; null: train a joint BPE on the training data")
    vocab_size: int = key(37000, "joint BPE vocabulary size (paper: ~37000 EN-DE, 32000 EN-FR)")
    bpe_min_frequency: int = key(2, "minimum pair frequency for a BPE merge")
    lowercase: bool = key(False, "lowercase in the tokenizer (the paper's BLEU is cased)")


@dataclass
class ModelKeys:
    """Every key here is the VaswaniConfig field of the same name (Table 3; defaults: base)."""

    _argument_group_name = "model (Table 3; defaults: base)"
    d_model: int = key(512, "model width")
    d_ff: int = key(2048, "feed-forward inner width")
    num_heads: int = key(8, "attention heads")
    num_encoder_layers: int = key(6, "encoder layers N")
    num_decoder_layers: int = key(6, "decoder layers N")
    dropout: float = key(0.1, "residual dropout P_drop (Section 5.4; 0.3 for big EN-DE)")
    attention_dropout: float = key(0.0, "dropout on attention weights (not in the paper)")
    relu_dropout: float = key(0.0, "dropout after the FFN ReLU (not in the paper)")
    position_encoding: Literal["sinusoidal", "learned"] = key("sinusoidal",
                                                              "positional encoding (Section 3.5 / Table 3 E)")
    sinusoid_layout: Literal["interleaved", "concatenated"] = key("interleaved", "sin/cos layout")
    tie_word_embeddings: bool = key(True, "share source/target embeddings and output projection (Section 3.4)")


@dataclass
class OptimizationKeys:
    _argument_group_name = "optimisation (Sections 5.2, 5.3)"
    max_steps: int = key(100000, "optimizer updates (paper: 100k base, 300k big); <= 0: use num_train_epochs")
    num_train_epochs: float = key(1.0, "epochs, only if max_steps <= 0")
    warmup_steps: int = key(4000, "warmup_steps of the learning-rate formula (Section 5.3)")
    lr_multiplier: float = key(1.0, "constant factor in front of the Section 5.3 formula (paper: 1)")
    label_smoothing: float = key(0.1, "eps_ls of the training objective (Section 5.4; the model's own loss stays plain "
                                      "cross-entropy)")
    adam_beta1: float = key(0.9, "Adam beta1 (Section 5.3)")
    adam_beta2: float = key(0.98, "Adam beta2 (Section 5.3)")
    adam_epsilon: float = key(1e-9, "Adam epsilon (Section 5.3)")
    weight_decay: float = key(0.0, "L2 weight decay (the paper uses none)")
    max_grad_norm: float = key(0.0, "gradient clipping (0: none, as the paper and t2t v1)")
    max_tokens_per_device: IntOrAuto = key(
        4096, "padded source (and target) tokens per micro-batch per process; auto: from tokens_per_step, the "
              "process count and the device's memory (vaswani_hf.training.budget)")
    tokens_per_step: int = key(0, "target tokens per optimizer update for gradient_accumulation_steps: auto")
    gradient_accumulation_steps: IntOrAuto = key(1, "micro-batches per update; auto: ceil(tokens_per_step / "
                                                    "(max_tokens_per_device x processes))")
    max_sentences: int = key(0, "cap on pairs per micro-batch (0: none)")
    eval_max_tokens: int = key(0, "token budget of evaluation batches (0: max_tokens_per_device)")


@dataclass
class CheckpointKeys:
    _argument_group_name = "checkpoints (Section 6.1)"
    save_every_minutes: float = key(10.0, "checkpoint every N minutes of training (paper: 10; 0: off)")
    save_steps: int = key(0, "also checkpoint every N updates (0: off)")
    keep_last: int = key(5, "keep the last K checkpoints (0: keep all)")
    average_last: int = key(5, "average the last N checkpoints at the end (paper: 5 base, 20 big; 0/1: off)")
    max_train_minutes: float = key(0.0, "stop training after this wall-clock budget (0: none)")


@dataclass
class EvaluationKeys:
    _argument_group_name = "evaluation"
    eval_steps: int = key(0, "validation loss + BLEU every N updates (0: only at the end)")
    eval_num_beams: int = key(4, "beam size for validation BLEU during training (paper decoding: 4)")
    test_num_beams: int = key(0, "beam size for the final scores (0: the model's generation_config)")
    bleu_tokenize: Literal["13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200"] = \
        key("13a", "sacreBLEU tokenizer; 'none' for pre-tokenized references (Multi30k tok)")
    eval_on_start: bool = key(False, "validate before the first update")


SECTIONS = (RunKeys, DataKeys, TokenizerKeys, ModelKeys, OptimizationKeys, CheckpointKeys, EvaluationKeys)
_HINTS = {f.name: typing.get_type_hints(section)[f.name] for section in SECTIONS for f in dataclasses.fields(section)}
_SECTION_OF = {f.name: section for section in SECTIONS for f in dataclasses.fields(section)}


class Recipe(Mapping):
    """A validated recipe: the values of every section, read as `recipe.d_model` or `recipe["d_model"]` (a read-only
    mapping of all keys, so `dict(recipe)` and `yaml.safe_dump(dict(recipe))` give the full recipe)."""

    def __init__(self, values: Mapping[str, Any], name: str = "custom", file: str | None = None):
        self._sections = {section: section(**{f.name: values[f.name] for f in dataclasses.fields(section)})
                          for section in SECTIONS}
        self.name, self.file = name, file

    def section(self, section: type):
        return self._sections[section]

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in _SECTION_OF:
            raise AttributeError(name)
        return getattr(self._sections[_SECTION_OF[name]], name)

    def __getitem__(self, name: str):
        if name not in _SECTION_OF:
            raise KeyError(name)
        return getattr(self._sections[_SECTION_OF[name]], name)

    def __iter__(self) -> Iterator[str]:
        return iter(_SECTION_OF)

    def __len__(self) -> int:
        return len(_SECTION_OF)

    def __repr__(self) -> str:
        return f"Recipe({self.name!r}, {dict(self)!r})"

    def replace(self, **changes) -> Recipe:
        """A copy with some keys changed (checked like overrides)."""
        values = dict(self)
        values.update({name: check_value(name, value, "replace") for name, value in changes.items()})
        return Recipe(values, self.name, self.file)

    def model_config(self, vocab_size: int):
        """The `VaswaniConfig` of this recipe's model, for a tokenizer of `vocab_size` tokens."""
        from ..configuration_vaswani import VaswaniConfig

        return VaswaniConfig(vocab_size=vocab_size, **dataclasses.asdict(self._sections[ModelKeys]))

    def tokens_per_device(self, world_size: int, device="cpu", local_processes: int = 1) -> tuple[int, int]:
        """(max_tokens_per_device, gradient_accumulation_steps) on `world_size` processes of `device`: Section 5.1's
        ~25000 tokens per update as `max_tokens_per_device x processes x accumulation` (see `budget`)."""
        from .budget import tokens_per_device

        return tokens_per_device(self, world_size, device=device, local_processes=local_processes)


def defaults() -> dict[str, Any]:
    """Every key with its default."""
    values = {}
    for section in SECTIONS:
        values.update(dataclasses.asdict(section()))
    return values


# ---------------------------------------------------------------------------------------------------------------------
# Types: one checker for YAML values, programmatic overrides and command-line text
# ---------------------------------------------------------------------------------------------------------------------


def type_name(name: str) -> str:
    hint = _HINTS[name]
    if hint is IntOrAuto:
        return "int or auto"
    args = typing.get_args(hint)
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(str, args))
    if type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return f"{getattr(inner, '__name__', str(inner))} or null"
    return str(hint) if typing.get_origin(hint) else hint.__name__


def check_value(name: str, value: Any, where: str) -> Any:
    """`value` for key `name`, checked against its declared type (int -> float allowed); RecipeError otherwise."""
    if name not in _HINTS:
        raise _unknown_keys([name], where)
    hint = _HINTS[name]
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    inner = next((a for a in args if a is not type(None)), hint) if type(None) in args else hint
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if inner is IntOrAuto:
        ok = is_int or value == "auto"
    elif typing.get_origin(inner) is Literal:
        ok = value in typing.get_args(inner)
    elif inner is float:
        value = float(value) if is_int else value
        ok = isinstance(value, float)
    elif inner is int:
        ok = is_int
    elif typing.get_origin(inner) is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, inner)
    if not ok:
        raise RecipeError(f"{where}: {name} must be {type_name(name)}, got {value!r} ({type(value).__name__})")
    return value


def value_from_text(name: str, text: str) -> Any:
    """A command-line value (text) -> Python by the key's declared type: `null` for None, YAML syntax for lists,
    true/false for booleans."""
    if name not in _HINTS:
        raise _unknown_keys([name], "command line")
    hint = _HINTS[name]
    args = typing.get_args(hint)
    if text in NULLS and type(None) in args:
        return None
    inner = next((a for a in args if a is not type(None)), hint) if type(None) in args else hint
    if inner is str or typing.get_origin(inner) is Literal:
        return text  # strings verbatim ("1e-3" as a path name stays a string)
    if typing.get_origin(inner) is list:
        return yaml.safe_load(text) if text.lstrip().startswith("[") else [text]
    if inner is bool:
        low = text.lower()
        if low in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return low in ("true", "yes", "1", "on")
    elif inner is IntOrAuto:
        return "auto" if text == "auto" else _number(name, text, int)
    elif inner in (int, float):
        return _number(name, text, inner)
    raise RecipeError(f"command line: --{name} expects {type_name(name)}, got {text!r}")


def _number(name: str, text: str, kind: type) -> Any:
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if kind is float and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    return check_value(name, value, f"--{name}")


def _unknown_keys(names: Sequence[str], where: str) -> RecipeError:
    option = where == "command line"
    hints = []
    for name in names:
        close = difflib.get_close_matches(name, list(_HINTS), n=1)
        shown, guess = (f"--{name}", f"--{close[0]}" if close else "") if option else \
            (repr(name), repr(close[0]) if close else "")
        hints.append(shown + (f" (did you mean {guess}?)" if guess else ""))
    kind = "unknown option" if option else f"{where}: unknown recipe key"
    return RecipeError(f"{kind}{'s' if len(names) > 1 else ''} {', '.join(hints)}. Valid recipe keys: "
                       f"{', '.join(sorted(_HINTS))} (`--list-keys` explains each)")


# ---------------------------------------------------------------------------------------------------------------------
# Loading: YAML file + overrides -> Recipe
# ---------------------------------------------------------------------------------------------------------------------


def list_recipes() -> list[str]:
    """Names of the recipes bundled in `recipes/`."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | os.PathLike) -> Path:
    """A recipe name (`default`, `wmt14-en-de-base`, ...) or a path to a YAML file -> the file's path."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise RecipeError(f"recipe file not found: {p}")
        return p
    candidate = RECIPES_DIR / f"{name_or_path}.yaml"
    if not candidate.is_file():
        raise RecipeError(f"unknown recipe {str(name_or_path)!r}; bundled recipes: {', '.join(list_recipes())} "
                          "(or pass a path to a .yaml file)")
    return candidate


def read_recipe_file(path: Path) -> dict[str, Any]:
    """The checked key/value pairs of a recipe file (not yet merged with the defaults)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise RecipeError(f"{path}: invalid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of keys to values, got {type(data).__name__}")
    unknown = [k for k in data if k not in _HINTS]
    if unknown:
        raise _unknown_keys(unknown, str(path))
    return {k: check_value(k, v, str(path)) for k, v in data.items()}


def load_recipe(name_or_path: str | os.PathLike = "default", overrides: Mapping[str, Any] | None = None,
                check_paths: bool = True) -> Recipe:
    """Load a recipe, apply overrides (typed values, or text as on the command line), validate it.

    Unknown keys, wrong types and missing data paths raise `RecipeError` naming the file or key.
    """
    from .preflight import validate_recipe

    path = recipe_path(name_or_path)
    values = {**defaults(), **read_recipe_file(path)}
    for name, value in (overrides or {}).items():
        if name not in _HINTS:
            raise _unknown_keys([name], "overrides")
        if isinstance(value, str) and _HINTS[name] is not str:
            value = value_from_text(name, value)
        values[name] = check_value(name, value, f"--{name}")
    recipe = Recipe(values, path.stem, str(path))
    validate_recipe(recipe, check_paths=check_paths)
    return recipe


# ---------------------------------------------------------------------------------------------------------------------
# The command line of `vaswani-train` / scripts/train.py
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class CommandOptions:
    _argument_group_name = "command"
    recipe: str = key("default", "bundled recipe name (see --list-recipes) or path to a YAML file")
    check: bool = key(False, "validate the recipe, output folder and corpus files (streamed), then exit")
    list_keys: bool = key(False, "print every recipe key with its type, default and meaning, then exit")
    list_recipes: bool = key(False, "print the bundled recipes, then exit")
    overwrite: bool = key(False, "replace a previous run's files in output_dir (without it, a non-empty output_dir "
                                 "is refused unless --resume)")


class RecipeParser(HfArgumentParser):
    """HfArgumentParser over the recipe sections and the command's own options; a usage error is a RecipeError
    (one line, exit 2) rather than argparse's usage text."""

    def __init__(self):
        super().__init__((CommandOptions, *SECTIONS), prog="vaswani-train", description=__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
        add_debug_argument(self)
        for action in self._actions:  # `null` on the command line, by each key's declared type (lists: below)
            if action.dest in _HINTS and typing.get_origin(_HINTS[action.dest]) is not list:
                action.type = _text_converter(action.dest)

    def error(self, message: str):
        raise RecipeError(f"{message} (see --help)")


def _text_converter(name: str):
    def convert(text: str):
        try:
            return value_from_text(name, text)
        except RecipeError as error:
            raise argparse.ArgumentTypeError(str(error).split(": ", 1)[-1]) from None

    convert.__name__ = type_name(name)
    return convert


def parse_command_line(argv: Sequence[str]) -> tuple[Recipe | None, CommandOptions]:
    """`--recipe NAME_OR_PATH` and `--key value` pairs -> (Recipe, options). The recipe is None for --list-keys and
    --list-recipes. Validation of data paths is left to the caller (`--check` streams the corpus files)."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--recipe", default="default")
    known, _ = first.parse_known_args(list(argv))
    parser = RecipeParser()
    listing = any(a in argv for a in ("--list-keys", "--list_keys", "--list-recipes", "--list_recipes", "-h",
                                      "--help"))
    path = None if listing else recipe_path(known.recipe)
    if path is not None:
        parser.set_defaults(**read_recipe_file(path))
    *parsed, remaining = parser.parse_args_into_dataclasses(args=list(argv), return_remaining_strings=True)
    if remaining:
        unknown = [a[2:].split("=")[0].replace("-", "_") for a in remaining if a.startswith("--")]
        if unknown:
            raise _unknown_keys(unknown, "command line")
        raise RecipeError(f"unexpected argument {remaining[0]!r}: use --recipe NAME_OR_PATH and --key value pairs")
    options = parsed[0]
    sections = [x for x in parsed[1:] if dataclasses.is_dataclass(x)]  # (argparse's Namespace holds --debug)
    if path is None:
        return None, options
    values = {}
    for section in sections:
        values.update(dataclasses.asdict(section))
    for name, value in values.items():  # a list option: several values, or one in YAML syntax ('["a", "b"]')
        if typing.get_origin(_HINTS[name]) is list and len(value) == 1 and value[0].lstrip().startswith("["):
            values[name] = value_from_text(name, value[0])
    values = {name: check_value(name, value, f"--{name}") for name, value in values.items()}
    return Recipe(values, path.stem, str(path)), options


def format_keys() -> str:
    """The text of `--list-keys`: every key, grouped as in the recipe sections."""
    lines = []
    for section in SECTIONS:
        lines.append(f"# {section._argument_group_name}")
        for f in dataclasses.fields(section):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            lines.append(f"--{f.name:<28} {type_name(f.name):<14} default {default!r}\n      {f.metadata['help']}")
    return "\n".join(lines)
