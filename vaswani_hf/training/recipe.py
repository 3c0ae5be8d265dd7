"""Recipes: every setting of a training run, declared once as dataclasses with help text and constraints.

A recipe is a YAML file of keys (`recipes/*.yaml`, or any path) whose values override the defaults below (the paper's
base model, Section 5 and Table 3); any key can be overridden again on the command line (`--dropout 0.2`). Each key
is declared here once, with its default, its help text and its constraint (`key(0.1, "...", **UNIT)`: the range a
number must lie in; NaN and infinity are refused everywhere). The same declaration gives the command line
(`vaswani_hf.cli.train`, through transformers' `HfArgumentParser`), `--list-keys`, and `load_recipe`, the one way a
recipe is built: unknown keys, wrong types, values out of range and contradictory keys are refused with the file or
key named, before anything is loaded. What the recipe means for a run on this machine (data sources, token budget,
output folder) is resolved once by `vaswani_hf.training.plan`.

Where the paper is silent, defaults follow tensor2tensor's first release (t2t v1) and say so.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NewType

from ..constraints import MAX_BEAMS, MAX_POSITIONS, MAX_SEED, MAX_SENTENCES, MAX_TOKENS, UNIT, Bound
from ..configuration_vaswani import MODEL_SETTINGS
from ..errors import UsageError, one_line
from ..metrics import SACREBLEU_TOKENIZERS
from .objective import PAPER_LABEL_SMOOTHING
from .recipe_files import read_yaml_mapping

# `vaswani_hf/recipes` is a link to the repository's `recipes/`, so that a built wheel carries the recipes as package
# data (pyproject.toml) and `--recipe NAME` works from an installed package too.
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
REPO_ROOT = Path(__file__).resolve().parents[2]
NULLS = ("null", "None", "none", "~")
BIG = 10**12  # the ceiling of counts that only cost time (steps, samples)

IntOrAuto = NewType("IntOrAuto", str)  # an int, or "auto" (gradient accumulation derived from tokens_per_step)


class RecipeError(UsageError):
    """A recipe (YAML file or command-line override) is invalid; raised before any data is read or model built."""


def key(default: Any, help: str, *, min=None, max=None, min_exclusive=False, max_exclusive=False):  # noqa: A002
    """A recipe key: its default, the help text shown by `--help` and `--list-keys`, and the range a number must lie
    in (NaN and infinity are always refused)."""
    metadata = {"help": help, "bound": Bound(min, max, min_exclusive, max_exclusive)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


PROBABILITY = {"min": UNIT.min, "max": UNIT.max, "max_exclusive": True}  # [0, 1)


@dataclass
class RunKeys:
    _argument_group_name = "run"
    description: str | None = key(None, "free text describing the recipe")
    output_dir: str = key("outputs/run", "checkpoints, logs, metrics, plots and the exported model go here")
    seed: int = key(42, "seed of model init, dropout and batch order", min=0, max=MAX_SEED)
    torch_threads: int = key(0, "torch.set_num_threads per process (0: leave torch's default)", min=0, max=1024)
    resume: bool = key(False, "continue from the latest checkpoint in output_dir")
    logging_steps: int = key(50, "log loss and learning rate every N updates", min=1, max=BIG)
    report_to: str = key("none", "Trainer integrations, comma-separated: none, all, tensorboard, ... (each must be "
                                 "installed)")
    disable_tqdm: bool = key(False, "hide progress bars")
    use_cpu: bool = key(False, "train on CPU even if a GPU is present (multi-process CPU DDP over gloo)")
    bf16: bool = key(False, "bf16 mixed precision (Accelerate; CPU autocast where there is no GPU)")
    fp16: bool = key(False, "fp16 mixed precision (Accelerate; needs a CUDA GPU)")
    torch_compile: bool = key(False, "compile the training step with torch.compile (transformers' own "
                                     "TrainingArguments.torch_compile)")
    dataloader_num_workers: int = key(0, "DataLoader worker processes (> 0: collation runs in the workers, so the "
                                         "tokens/s and padding statistics are not counted; -1: auto, 2 per process "
                                         "on CUDA, 0 on the CPU)", min=-1, max=256)
    dataloader_pin_memory: bool | None = key(None, "pinned host memory and non-blocking copies to the device (null: "
                                                   "on for CUDA, off otherwise; vaswani_hf.training.data_path)")
    dataloader_prefetch_factor: int | None = key(None, "batches each DataLoader worker loads ahead (null: 4 on CUDA, "
                                                       "torch's 2 otherwise; only with workers)", min=1, max=1024)
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
    max_length: int | None = key(256, "drop training pairs with a side longer than this many BPE tokens (null: keep "
                                      "what fits max_tokens_per_device)", min=1, max=MAX_POSITIONS)
    max_length_ratio: float | None = key(9.0, "drop training pairs whose length ratio exceeds this (null: keep)",
                                         min=1.0, max=10**6)
    max_train_samples: int = key(0, "use only the first N training pairs (0: all)", min=0, max=BIG)
    max_eval_samples: int = key(0, "validate on the first N dev pairs (0: all)", min=0, max=BIG)
    preprocessing_num_workers: int | None = key(None, "processes for Dataset.map tokenisation", min=1, max=256)


@dataclass
class TokenizerKeys:
    _argument_group_name = "tokenizer (Section 5.1: one BPE vocabulary shared by source and target)"
    tokenizer_path: str | None = key(None, "existing tokenizer folder; null: train a joint BPE on the training data")
    vocab_size: int = key(37000, "joint BPE vocabulary size (paper: ~37000 EN-DE, 32000 EN-FR); more than the 4 "
                                 "special tokens + 256 byte symbols", min=261, max=2**24)
    bpe_min_frequency: int = key(2, "minimum pair frequency for a BPE merge", min=0, max=BIG)
    lowercase: bool = key(False, "lowercase in the tokenizer (the paper's BLEU is cased)")


# The model's settings a recipe sets: each is the VaswaniConfig field of the same name, and its key takes its type,
# default (the base model, Table 3), meaning and range from that field's declaration (`MODEL_SETTINGS`).
MODEL_KEYS = ("d_model", "d_ff", "num_heads", "num_encoder_layers", "num_decoder_layers", "dropout",
              "attention_dropout", "relu_dropout", "position_encoding", "sinusoid_layout", "tie_word_embeddings")


def model_key(name: str) -> tuple[str, Any, Any]:
    """(name, type, field) of the recipe key for the VaswaniConfig setting `name`, from its declaration."""
    declared = MODEL_SETTINGS[name]
    hint = Literal[declared.choices] if declared.choices else declared.type
    if declared.nullable:
        hint = typing.Optional[hint]
    return name, hint, field(default=declared.default, metadata={"help": declared.help, "bound": declared.bound})


ModelKeys = dataclasses.make_dataclass(
    "ModelKeys", [model_key(name) for name in MODEL_KEYS],
    namespace={"_argument_group_name": "model (Table 3; defaults: base)",
               "__doc__": "Every key here is the VaswaniConfig setting of the same name (MODEL_SETTINGS)."})


@dataclass
class OptimizationKeys:
    _argument_group_name = "optimisation and objective (Sections 5.2-5.4)"
    max_steps: int = key(100000, "optimizer updates (paper: 100k base, 300k big); 0 or -1: use num_train_epochs",
                         min=-1, max=BIG)
    num_train_epochs: float = key(1.0, "epochs, only if max_steps <= 0", min=0, max=10**6)
    warmup_steps: int = key(4000, "warmup_steps of the learning-rate formula (Section 5.3)", min=1, max=BIG)
    lr_multiplier: float = key(1.0, "constant factor in front of the Section 5.3 formula (paper: 1)", min=0,
                               min_exclusive=True, max=1000)
    label_smoothing: float = key(PAPER_LABEL_SMOOTHING, "eps_ls of the training objective (Section 5.4; the "
                                                        "model's own loss stays plain cross-entropy)", **PROBABILITY)
    adam_beta1: float = key(0.9, "Adam beta1 (Section 5.3)", **PROBABILITY)
    adam_beta2: float = key(0.98, "Adam beta2 (Section 5.3)", **PROBABILITY)
    adam_epsilon: float = key(1e-9, "Adam epsilon (Section 5.3)", min=0, min_exclusive=True, max=1)
    weight_decay: float = key(0.0, "L2 weight decay (the paper uses none)", min=0, max=1)
    max_grad_norm: float = key(0.0, "gradient clipping (0: none, as the paper and t2t v1)", min=0, max=10**6)
    max_tokens_per_device: IntOrAuto = key(
        4096, "padded source (and target) tokens per micro-batch per process; auto: from tokens_per_step, the "
              "process count and the device's memory (vaswani_hf.training.budget)", min=1, max=MAX_TOKENS)
    tokens_per_step: int = key(0, "target tokens per optimizer update for gradient_accumulation_steps: auto",
                               min=0, max=MAX_TOKENS)
    gradient_accumulation_steps: IntOrAuto = key(1, "micro-batches per update; auto: ceil(tokens_per_step / "
                                                    "(max_tokens_per_device x processes))", min=1, max=10**6)
    max_sentences: int = key(0, "cap on pairs per micro-batch (0: none)", min=0, max=MAX_SENTENCES)
    eval_max_tokens: int = key(0, "token budget of evaluation batches (0: max_tokens_per_device)", min=0,
                               max=MAX_TOKENS)
    pad_to_multiple_of: int = key(0, "pad batch lengths up to a multiple of this (8: tensor-core friendly, 64: few "
                                     "shapes for torch_compile; 0: to the longest sentence)", min=0, max=MAX_TOKENS)
    loss_chunk_tokens: int = key(0, "compute the training loss this many target tokens at a time, never the whole "
                                    "(tokens x vocabulary) logits (GPU memory: e.g. 4096; 0: in one piece)", min=0,
                                 max=MAX_TOKENS)


@dataclass
class CheckpointKeys:
    _argument_group_name = "checkpoints (Section 6.1)"
    save_every_minutes: float = key(10.0, "checkpoint every N minutes of training (paper: 10; 0: off)", min=0,
                                    max=10**8)
    save_steps: int = key(0, "also checkpoint every N updates (0: off)", min=0, max=BIG)
    keep_last: int = key(5, "keep the last K checkpoints (0: keep all)", min=0, max=10**6)
    average_last: int = key(5, "average the last N checkpoints at the end (paper: 5 base, 20 big; 0/1: off)", min=0,
                            max=10**6)
    max_train_minutes: float = key(0.0, "stop training after this wall-clock budget (0: none)", min=0, max=10**8)


@dataclass
class EvaluationKeys:
    _argument_group_name = "evaluation"
    eval_steps: int = key(0, "validation loss + BLEU every N updates (0: only at the end)", min=0, max=BIG)
    eval_num_beams: int = key(4, "beam size for validation BLEU during training (paper decoding: 4)", min=1,
                              max=MAX_BEAMS)
    test_num_beams: int = key(0, "beam size for the final scores (0: the model's generation_config)", min=0,
                              max=MAX_BEAMS)
    bleu_tokenize: Literal[SACREBLEU_TOKENIZERS] = key(
        "13a", "sacreBLEU tokenizer; 'none' for pre-tokenized references (Multi30k tok)")
    eval_on_start: bool = key(False, "validate before the first update")


SECTIONS = (RunKeys, DataKeys, TokenizerKeys, ModelKeys, OptimizationKeys, CheckpointKeys, EvaluationKeys)
_FIELDS = {f.name: f for section in SECTIONS for f in dataclasses.fields(section)}
_HINTS = {f.name: typing.get_type_hints(section)[f.name] for section in SECTIONS for f in dataclasses.fields(section)}
_SECTION_OF = {f.name: section for section in SECTIONS for f in dataclasses.fields(section)}


class Recipe(Mapping):
    """A checked recipe: the values of every section, read as `recipe.d_model` or `recipe["d_model"]` (a read-only
    mapping of all keys, so `dict(recipe)` and `yaml.safe_dump(dict(recipe))` give the full recipe). Build one with
    `load_recipe`."""

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

    def model_config(self, vocab_size: int):
        """The `VaswaniConfig` of this recipe's model, for a tokenizer of `vocab_size` tokens."""
        from ..configuration_vaswani import VaswaniConfig

        return VaswaniConfig(vocab_size=vocab_size, **dataclasses.asdict(self._sections[ModelKeys]))


def defaults() -> dict[str, Any]:
    """Every key with its default."""
    values = {}
    for section in SECTIONS:
        values.update(dataclasses.asdict(section()))
    return values


def help_text(name: str) -> str:
    """A key's help text with its range, as `--help` and `--list-keys` show it."""
    bound = _FIELDS[name].metadata["bound"]
    limits = "" if bound == Bound() else f" [{bound.describe()}]"
    return _FIELDS[name].metadata["help"] + limits


# ---------------------------------------------------------------------------------------------------------------------
# Values: one checker for YAML values, programmatic overrides and command-line text
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


def shown(value: Any, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def check_value(name: str, value: Any, where: str) -> Any:
    """`value` for key `name`, checked against its declared type (int -> float allowed) and its declared range;
    RecipeError otherwise, naming `where` (a file, `--key`) and the key."""
    if name not in _HINTS:
        raise unknown_keys([name], where)
    hint = _HINTS[name]
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    inner = next((a for a in args if a is not type(None)), hint) if type(None) in args else hint
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if inner is IntOrAuto:
        ok = is_int or value == "auto"
    elif typing.get_origin(inner) is Literal:
        ok = isinstance(value, str) and value in typing.get_args(inner)
    elif inner is float:
        try:
            value = float(value) if is_int else value
        except OverflowError:  # an int beyond float's range is out of every declared range
            raise RecipeError(f"{where}: {name} must be {help_range(name)}, got {shown(value)}") from None
        ok = isinstance(value, float)
    elif inner is int:
        ok = is_int
    elif typing.get_origin(inner) is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, inner)
    if not ok:
        raise RecipeError(f"{where}: {name} must be {type_name(name)}, got {shown(value)} ({type(value).__name__})")
    problem = _FIELDS[name].metadata["bound"].problem(value)
    if problem:
        raise RecipeError(f"{where}: {name} must {problem}, got {shown(value)}")
    return value


def help_range(name: str) -> str:
    return _FIELDS[name].metadata["bound"].describe()


def value_from_text(name: str, text: str) -> Any:
    """A command-line value (text) -> Python by the key's declared type: `null` for None, YAML syntax for lists,
    true/false for booleans; then checked (`check_value`)."""
    if name not in _HINTS:
        raise unknown_keys([name], "command line")
    hint = _HINTS[name]
    args = typing.get_args(hint)
    if text in NULLS and type(None) in args:
        return None
    inner = next((a for a in args if a is not type(None)), hint) if type(None) in args else hint
    if inner is str or typing.get_origin(inner) is Literal:
        return check_value(name, text, f"--{name}")  # strings verbatim ("1e-3" as a path name stays a string)
    if typing.get_origin(inner) is list:
        from .recipe_files import read_yaml_text

        value = read_yaml_text(text, f"--{name}", RecipeError) if text.lstrip().startswith("[") else [text]
        return check_value(name, value, f"--{name}")
    if inner is bool:
        low = text.lower()
        if low in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return low in ("true", "yes", "1", "on")
    elif inner is IntOrAuto:
        return "auto" if text == "auto" else _number(name, text, int)
    elif inner in (int, float):
        return _number(name, text, inner)
    raise RecipeError(f"command line: --{name} expects {type_name(name)}, got {shown(text)}")


def _number(name: str, text: str, kind: type) -> Any:
    try:
        value = int(text) if kind is int else float(text)
    except ValueError:
        try:  # YAML spellings: 1e3 for an int key is refused below as a float, .inf is infinite
            value = float(text)
        except ValueError:
            value = text
    return check_value(name, value, f"--{name}")


def unknown_keys(names: Sequence[str], where: str) -> RecipeError:
    option = where == "command line"
    hints = []
    for name in names:
        close = difflib.get_close_matches(name, list(_HINTS), n=1)
        shown_name, guess = (f"--{name}", f"--{close[0]}" if close else "") if option else \
            (shown(name), repr(close[0]) if close else "")
        hints.append(shown_name + (f" (did you mean {guess}?)" if guess else ""))
    kind = "unknown option" if option else f"{where}: unknown recipe key"
    return RecipeError(f"{kind}{'s' if len(names) > 1 else ''} {', '.join(hints[:5])}. Valid recipe keys: "
                       f"{', '.join(sorted(_HINTS))} (`--list-keys` explains each)")


# ---------------------------------------------------------------------------------------------------------------------
# Rules between keys, and the model the keys describe
# ---------------------------------------------------------------------------------------------------------------------


def check_rules(recipe: Recipe) -> Recipe:
    """The rules that involve several keys, and the model settings (VaswaniConfig's own checks). RecipeError naming
    the keys otherwise. Values are already in range (`check_value`)."""
    r = recipe
    if r.max_steps <= 0 and r.num_train_epochs <= 0:
        raise RecipeError("set max_steps > 0 or num_train_epochs > 0")
    if r.src_lang == r.tgt_lang or not r.src_lang.strip() or not r.tgt_lang.strip():
        raise RecipeError(f"src_lang and tgt_lang must be two different language codes, got {shown(r.src_lang)} and "
                          f"{shown(r.tgt_lang)}")
    for name in ("gradient_accumulation_steps", "max_tokens_per_device"):
        if r[name] == "auto" and r.tokens_per_step <= 0:
            raise RecipeError(f"{name}: auto needs tokens_per_step > 0 (paper: 25000)")
    if r.max_tokens_per_device == "auto" and r.gradient_accumulation_steps != "auto":
        raise RecipeError("max_tokens_per_device: auto chooses the accumulation too: set gradient_accumulation_steps: "
                          "auto")
    if r.max_tokens_per_device != "auto":  # auto's number is checked when the run is planned, by the same rule
        from .budget import check_length_fits

        check_length_fits(r.max_tokens_per_device, r.max_length)
    if r.average_last > 1 and 0 < r.keep_last < r.average_last:
        raise RecipeError(f"average_last={r.average_last} needs keep_last >= {r.average_last} (or 0: keep all); got "
                          f"keep_last={r.keep_last}")
    if r.eval_steps > 0 and r.valid_data is None:
        raise RecipeError("eval_steps > 0 needs valid_data (a dev set); set eval_steps 0 or give valid_data")
    if r.bf16 and r.fp16:
        raise RecipeError("choose at most one of bf16 and fp16")
    if r.data_format == "hub" and not r.hub_dataset:
        raise RecipeError("data_format hub needs hub_dataset (e.g. wmt14) and usually hub_config (e.g. de-en)")
    check_report_to(r.report_to)
    try:
        r.model_config(vocab_size=r.vocab_size)
    except (ValueError, TypeError) as error:
        raise RecipeError(f"model settings: {one_line(error)}") from None
    return recipe


def check_report_to(value: str) -> None:
    """report_to names Trainer integrations that are installed ("none", "all", or a comma-separated list)."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if names in (["none"], ["all"]):
        return
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    available = set(get_available_reporting_integrations())
    for name in names or [""]:
        if name not in INTEGRATION_TO_CALLBACK:
            raise RecipeError(f"report_to: unknown integration {shown(name)}; known: none, all, "
                              f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}")
        if name not in available:
            raise RecipeError(f"report_to {name}: the integration is not installed (`pip install {name}`), or use "
                              "report_to none")


# ---------------------------------------------------------------------------------------------------------------------
# Building a recipe: YAML file + overrides -> Recipe (the one way)
# ---------------------------------------------------------------------------------------------------------------------


def list_recipes() -> list[str]:
    """Names of the recipes bundled in `recipes/`."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | os.PathLike) -> Path:
    """A recipe name (`default`, `wmt14-en-de-base`, ...) or a path to a YAML file -> the file's path."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise RecipeError(f"recipe file not found: {p}" if not p.exists() else f"recipe {p} is not a file")
        return p
    candidate = RECIPES_DIR / f"{name_or_path}.yaml"
    if not candidate.is_file():
        raise RecipeError(f"unknown recipe {shown(str(name_or_path))}; bundled recipes: {', '.join(list_recipes())} "
                          "(or pass a path to a .yaml file)")
    return candidate


def read_recipe_file(path: Path) -> dict[str, Any]:
    """The checked key/value pairs of a recipe file (not yet merged with the defaults)."""
    data = read_yaml_mapping(path, RecipeError)
    unknown = [k for k in data if k not in _HINTS]
    if unknown:
        raise unknown_keys([str(k) for k in unknown], str(path))
    return {k: check_value(k, v, str(path)) for k, v in data.items()}


def load_recipe(name_or_path: str | os.PathLike = "default", overrides: Mapping[str, Any] | None = None) -> Recipe:
    """The one way to build a recipe: a bundled name or a YAML file, then `overrides` (typed values, or text as on the
    command line), every value and rule checked. Paths are not looked at here: `vaswani_hf.training.plan` resolves
    them. Raises RecipeError naming the file or key."""
    path = recipe_path(name_or_path)
    values = {**defaults(), **read_recipe_file(path)}
    for name, value in (overrides or {}).items():
        if name not in _HINTS:
            raise unknown_keys([name], "overrides")
        if isinstance(value, str) and _HINTS[name] is not str:
            value = value_from_text(name, value)
        values[name] = check_value(name, value, f"--{name}")
    return check_rules(Recipe(values, path.stem, str(path)))


def format_keys() -> str:
    """The text of `--list-keys`: every key, grouped as in the recipe sections."""
    lines = []
    for section in SECTIONS:
        lines.append(f"# {section._argument_group_name}")
        for f in dataclasses.fields(section):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            lines.append(f"--{f.name:<28} {type_name(f.name):<14} default {default!r}\n      {help_text(f.name)}")
    return "\n".join(lines)
