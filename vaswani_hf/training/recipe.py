"""Recipes: every setting of a training run, declared once as a `Setting` with its default, meaning and range.

A recipe is a YAML file of keys (`recipes/*.yaml`, or any path) whose values override the defaults below (the paper's
base model, Section 5 and Table 3); any key can be overridden again on the command line (`--dropout 0.2`). A key is
one declaration and its consumer: the run's keys below (`setting(0.1, "...", min=0, max=1)`, in sections), the
model's in `VaswaniConfig` (its settings declared with `recipe=True`). The declarations give the command line
(`vaswani_hf.cli.train`), `--list-keys`, and `load_recipe`, the one way a recipe is built: unknown keys, wrong types,
values out of range and contradictory keys are refused with the file or key named, before anything is loaded. What
the recipe means for a run on this machine is resolved once by `vaswani_hf.training.plan`.

Where the paper is silent, defaults follow tensor2tensor's first release (t2t v1) and say so.
"""

import dataclasses
import difflib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..configuration_vaswani import (
    MAX_POSITIONS,
    MODEL_SETTINGS,
    PROBABILITY,
    SettingError,
    VaswaniConfig,
    declared_settings,
    setting,
    shown,
)
from ..constraints import MAX_SEED, MAX_SENTENCES, MAX_TOKENS
from ..errors import UsageError, one_line
from ..generation_vaswani import GENERATION_SETTINGS
from ..metrics import SACREBLEU_TOKENIZERS
from ..precision import BF16_AUTO
from .objective import PAPER_LABEL_SMOOTHING
from .recipe_files import read_yaml_mapping, read_yaml_text

# `vaswani_hf/recipes` is a link to the repository's `recipes/`, so that a built wheel carries the recipes as package
# data (pyproject.toml) and `--recipe NAME` works from an installed package too.
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
REPO_ROOT = Path(__file__).resolve().parents[2]
NULLS = ("null", "none", "~")  # command-line words for None (any case)
BIG = 10**12  # the ceiling of counts that only cost time (steps, samples)
key = setting  # a recipe key is declared as any setting (the command's own options use the name too)


class RecipeError(UsageError):
    """A recipe (YAML file or command-line override) is invalid; raised before any data is read or model built."""


@dataclass
class RunKeys:
    _argument_group_name = "run"
    description: str | None = setting(None, "free text describing the recipe")
    output_dir: str = setting("outputs/run", "checkpoints, logs, metrics, plots and the exported model go here")
    seed: int = setting(42, "seed of model init, dropout and batch order", min=0, max=MAX_SEED)
    torch_threads: int = setting(0, "torch.set_num_threads per process (0: leave torch's default)", min=0, max=1024)
    resume: bool = setting(False, "continue from the latest checkpoint in output_dir")
    logging_steps: int = setting(50, "log loss and learning rate every N updates", min=1, max=BIG)
    report_to: str = setting(
        "none", "Trainer integrations, comma-separated: none, all, tensorboard, ... (each must be installed)"
    )
    disable_tqdm: bool = setting(False, "hide progress bars")
    use_cpu: bool = setting(False, "train on CPU even if a GPU is present (multi-process CPU DDP over gloo)")
    bf16: bool | str = setting(
        False,
        "bf16 mixed precision (Accelerate; CPU autocast where there is no GPU); auto: on a CUDA GPU with bf16, or a "
        "CPU with bf16 matrix units (AMX, AVX-512 BF16) when the model is large enough to gain "
        "(vaswani_hf.precision), else fp32",
        words=(BF16_AUTO,),
    )
    fp16: bool = setting(False, "fp16 mixed precision (Accelerate; needs a CUDA GPU)")
    torch_compile: bool = setting(
        False, "compile the training step with torch.compile (transformers' own TrainingArguments.torch_compile)"
    )
    dataloader_num_workers: int = setting(
        0,
        "DataLoader worker processes (> 0: collation runs in the workers, so "
        "the tokens/s and padding statistics are not counted; -1: auto, 2 per "
        "process on CUDA, 0 on the CPU)",
        min=-1,
        max=256,
    )
    dataloader_pin_memory: bool | None = setting(
        None,
        "pinned host memory and non-blocking copies to the device "
        "(null: on for CUDA, off otherwise; "
        "vaswani_hf.training.data_path)",
    )
    dataloader_prefetch_factor: int | None = setting(
        None,
        "batches each DataLoader worker loads ahead (null: 4 on CUDA, torch's 2 otherwise; only with workers)",
        min=1,
        max=1024,
    )
    translate_examples: list[str] = setting([], "sentences translated and printed at the end")
    export_dir: str | None = setting(None, "Hub-ready folder (default: OUTPUT_DIR/hub)")
    debug_log_batches: bool = setting(False, "write a hash of every training example seen, per process (tests)")


@dataclass
class DataKeys:
    _argument_group_name = "data (Section 5.1; relative paths: current folder, then the repository)"
    data_format: str = setting(
        "sample",
        "where the corpus comes from: sample (bundled); moses (PREFIX.SRC + PREFIX.TGT, a sentence a line); "
        "tsv (a file whose first line names the columns' languages, e.g. en<TAB>de); jsonl (a file, "
        '{"en": ..., "de": ...} or {"translation": {...}} a line); hub (hub_dataset)',
        choices=("sample", "moses", "tsv", "jsonl", "hub"),
    )
    data_dir: str | None = setting(None, "folder that relative train/valid/test paths are joined to")
    train_data: str = setting(
        "train", "moses: file prefix (PREFIX.src, PREFIX.tgt); tsv/jsonl: file; hub/sample: split"
    )
    valid_data: str | None = setting("valid", "like train_data; the dev set for validation loss/BLEU (null: none)")
    test_data: str | None = setting(
        "test", "like train_data; scored after training with the averaged model (null: none)"
    )
    hub_dataset: str | None = setting(None, "data_format hub: dataset name for datasets.load_dataset (e.g. wmt14)")
    hub_config: str | None = setting(None, "data_format hub: dataset configuration (e.g. de-en)")
    src_lang: str = setting("en", "source language code")
    tgt_lang: str = setting("de", "target language code")
    max_length: int | None = setting(
        256,
        "drop training pairs with a side longer than this many BPE tokens (null: "
        "keep what fits max_tokens_per_device)",
        min=1,
        max=MAX_POSITIONS,
    )
    max_length_ratio: float | None = setting(
        9.0, "drop training pairs whose length ratio exceeds this (null: keep)", min=1.0, max=10**6
    )
    max_train_samples: int = setting(0, "use only the first N training pairs (0: all)", min=0, max=BIG)
    max_eval_samples: int = setting(0, "validate on the first N dev pairs (0: all)", min=0, max=BIG)
    preprocessing_num_workers: int | None = setting(None, "processes for Dataset.map tokenisation", min=1, max=256)


@dataclass
class TokenizerKeys:
    _argument_group_name = "tokenizer (Section 5.1: one BPE vocabulary shared by source and target)"
    tokenizer_path: str | None = setting(
        None, "existing tokenizer folder; null: train a joint BPE on the training data"
    )
    vocab_size: int = setting(
        37000,
        "joint BPE vocabulary size (paper: ~37000 EN-DE, 32000 EN-FR); more than the 4 "
        "special tokens + 256 byte symbols",
        min=261,
        max=2**24,
    )
    bpe_min_frequency: int = setting(2, "minimum pair frequency for a BPE merge", min=0, max=BIG)
    lowercase: bool = setting(False, "lowercase in the tokenizer (the paper's BLEU is cased)")


# The model's settings a recipe sets: those VaswaniConfig declares with `recipe=True` (type, default -- the base
# model, Table 3 --, meaning and range are that declaration).
ModelKeys = dataclasses.make_dataclass(
    "ModelKeys",
    [
        (s.name, str if s.choices else s.type, dataclasses.field(default=s.default, metadata={"setting": s}))
        for s in MODEL_SETTINGS.values()
        if s.recipe
    ],
    namespace={
        "_argument_group_name": "model (Table 3; defaults: base)",
        "__doc__": "The VaswaniConfig settings declared with recipe=True (MODEL_SETTINGS).",
    },
)
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(ModelKeys))


@dataclass
class OptimizationKeys:
    _argument_group_name = "optimisation and objective (Sections 5.2-5.4)"
    max_steps: int = setting(
        100000, "optimizer updates (paper: 100k base, 300k big); 0 or -1: use num_train_epochs", min=-1, max=BIG
    )
    num_train_epochs: float = setting(1.0, "epochs, only if max_steps <= 0", min=0, max=10**6)
    warmup_steps: int = setting(4000, "warmup_steps of the learning-rate formula (Section 5.3)", min=1, max=BIG)
    lr_multiplier: float = setting(
        1.0, "constant factor in front of the Section 5.3 formula (paper: 1)", min=0, min_exclusive=True, max=1000
    )
    label_smoothing: float = setting(
        PAPER_LABEL_SMOOTHING,
        "eps_ls of the training objective (Section 5.4; the model's own loss stays plain cross-entropy)",
        **PROBABILITY,
    )
    adam_beta1: float = setting(0.9, "Adam beta1 (Section 5.3)", **PROBABILITY)
    adam_beta2: float = setting(0.98, "Adam beta2 (Section 5.3)", **PROBABILITY)
    adam_epsilon: float = setting(1e-9, "Adam epsilon (Section 5.3)", min=0, min_exclusive=True, max=1)
    weight_decay: float = setting(0.0, "L2 weight decay (the paper uses none)", min=0, max=1)
    max_grad_norm: float = setting(0.0, "gradient clipping (0: none, as the paper and t2t v1)", min=0, max=10**6)
    max_tokens_per_device: int | str = setting(
        4096,
        "padded source (and target) tokens per micro-batch per process; auto: from tokens_per_step, the "
        "process count and the device's memory (vaswani_hf.training.budget)",
        min=1,
        max=MAX_TOKENS,
        words=("auto",),
    )
    tokens_per_step: int = setting(
        0, "target tokens per optimizer update for gradient_accumulation_steps: auto", min=0, max=MAX_TOKENS
    )
    gradient_accumulation_steps: int | str = setting(
        1,
        "micro-batches per update; auto: ceil(tokens_per_step / (max_tokens_per_device x processes))",
        min=1,
        max=10**6,
        words=("auto",),
    )
    max_sentences: int = setting(0, "cap on pairs per micro-batch (0: none)", min=0, max=MAX_SENTENCES)
    eval_max_tokens: int = setting(
        0, "token budget of evaluation batches (0: max_tokens_per_device)", min=0, max=MAX_TOKENS
    )
    pad_to_multiple_of: int = setting(
        0,
        "pad batch lengths up to a multiple of this (8: tensor-core friendly, 64: "
        "few shapes for torch_compile; 0: to the longest sentence)",
        min=0,
        max=MAX_TOKENS,
    )
    loss_chunk_tokens: int = setting(
        0,
        "compute the training loss this many target tokens at a time, never the "
        "whole (tokens x vocabulary) logits (GPU memory: e.g. 4096; 0: in one piece)",
        min=0,
        max=MAX_TOKENS,
    )


@dataclass
class CheckpointKeys:
    _argument_group_name = "checkpoints (Section 6.1)"
    save_every_minutes: float = setting(
        10.0, "checkpoint every N minutes of training (paper: 10; 0: off)", min=0, max=10**8
    )
    save_steps: int = setting(0, "also checkpoint every N updates (0: off)", min=0, max=BIG)
    keep_last: int = setting(5, "keep the last K checkpoints (0: keep all)", min=0, max=10**6)
    average_last: int = setting(
        5, "average the last N checkpoints at the end (paper: 5 base, 20 big; 0/1: off)", min=0, max=10**6
    )
    max_train_minutes: float = setting(0.0, "stop training after this wall-clock budget (0: none)", min=0, max=10**8)


@dataclass
class EvaluationKeys:
    _argument_group_name = "evaluation"
    eval_steps: int = setting(0, "validation loss + BLEU every N updates (0: only at the end)", min=0, max=BIG)
    eval_num_beams: int = setting(
        4,
        "beam size for validation BLEU during training (paper decoding: 4)",
        min=1,
        max=GENERATION_SETTINGS["num_beams"].max,
    )
    test_num_beams: int = setting(
        0,
        "beam size for the final scores (0: the model's generation_config)",
        min=0,
        max=GENERATION_SETTINGS["num_beams"].max,
    )
    bleu_tokenize: str = setting(
        "13a", "sacreBLEU tokenizer; 'none' for pre-tokenized references (Multi30k tok)", choices=SACREBLEU_TOKENIZERS
    )
    eval_on_start: bool = setting(False, "validate before the first update")


SECTIONS = (RunKeys, DataKeys, TokenizerKeys, ModelKeys, OptimizationKeys, CheckpointKeys, EvaluationKeys)
SETTINGS = {name: s for section in SECTIONS for name, s in declared_settings(section).items()}  # {key: Setting}


class Recipe(Mapping):
    """A checked recipe: every key's value, read as `recipe.d_model` or `recipe["d_model"]` (a read-only mapping of
    all keys, so `dict(recipe)` and `yaml.safe_dump(dict(recipe))` give the full recipe). Build one with
    `load_recipe`."""

    def __init__(self, values: Mapping[str, Any], name: str = "custom", file: str | None = None):
        self._values = {name: values[name] for name in SETTINGS}
        self.name, self.file = name, file

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in SETTINGS:
            raise AttributeError(name)
        return self._values[name]

    def __getitem__(self, name: str):
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Recipe({self.name!r}, {self._values!r})"

    def model_config(self, vocab_size: int) -> VaswaniConfig:
        """The `VaswaniConfig` of this recipe's model, for a tokenizer of `vocab_size` tokens."""
        return VaswaniConfig(vocab_size=vocab_size, **{name: self._values[name] for name in MODEL_KEYS})


def defaults() -> dict[str, Any]:
    """Every key with its default."""
    return {name: list(s.default) if isinstance(s.default, list) else s.default for name, s in SETTINGS.items()}


# ---------------------------------------------------------------------------------------------------------------------
# Values: the keys' declarations check YAML values, programmatic overrides and command-line text
# ---------------------------------------------------------------------------------------------------------------------


def check_value(name: str, value: Any, where: str) -> Any:
    """`value` for key `name`, checked against its declaration (an int is taken as a float where a float is
    declared); RecipeError otherwise, naming `where` (a file, `--key`) and the key."""
    return _declared(name, where, lambda declared: declared.check(value, where))


def value_from_text(name: str, text: str) -> Any:
    """A command-line value (text) -> Python by the key's declaration (`Setting.parse`: `null` for None, true/false
    for booleans; YAML syntax for lists), checked."""
    where = f"--{name}"
    if name in SETTINGS and SETTINGS[name].type is list:
        return check_value(
            name, read_yaml_text(text, where, RecipeError) if text.lstrip().startswith("[") else [text], where
        )
    return _declared(name, "command line", lambda s: s.parse(text, where, none=NULLS if s.nullable else ()))


def _declared(name: str, where: str, read) -> Any:
    """`read(the key's Setting)`, a SettingError as a RecipeError; an int where a float is declared as a float."""
    if name not in SETTINGS:
        raise unknown_keys([name], where)
    try:
        value = read(SETTINGS[name])
    except SettingError as error:
        raise RecipeError(str(error)) from None
    return float(value) if SETTINGS[name].type is float and type(value) is int else value


def unknown_keys(names: Sequence[str], where: str) -> RecipeError:
    option = where == "command line"
    hints = []
    for name in names:
        close = difflib.get_close_matches(name, list(SETTINGS), n=1)
        shown_name, guess = (
            (f"--{name}", f"--{close[0]}" if close else "")
            if option
            else (shown(name), repr(close[0]) if close else "")
        )
        hints.append(shown_name + (f" (did you mean {guess}?)" if guess else ""))
    kind = "unknown option" if option else f"{where}: unknown recipe key"
    return RecipeError(
        f"{kind}{'s' if len(names) > 1 else ''} {', '.join(hints[:5])}. Valid recipe keys: "
        f"{', '.join(sorted(SETTINGS))} (`--list-keys` explains each)"
    )


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
        raise RecipeError(
            f"src_lang and tgt_lang must be two different language codes, got {shown(r.src_lang)} and "
            f"{shown(r.tgt_lang)}"
        )
    for name in ("gradient_accumulation_steps", "max_tokens_per_device"):
        if r[name] == "auto" and r.tokens_per_step <= 0:
            raise RecipeError(f"{name}: auto needs tokens_per_step > 0 (paper: 25000)")
    if r.max_tokens_per_device == "auto" and r.gradient_accumulation_steps != "auto":
        raise RecipeError(
            "max_tokens_per_device: auto chooses the accumulation too: set gradient_accumulation_steps: auto"
        )
    if r.max_tokens_per_device != "auto":  # auto's number is checked when the run is planned, by the same rule
        check_length_fits(r.max_tokens_per_device, r.max_length)
    if r.average_last > 1 and 0 < r.keep_last < r.average_last:
        raise RecipeError(
            f"average_last={r.average_last} needs keep_last >= {r.average_last} (or 0: keep all); got "
            f"keep_last={r.keep_last}"
        )
    if r.eval_steps > 0 and r.valid_data is None:
        raise RecipeError("eval_steps > 0 needs valid_data (a dev set); set eval_steps 0 or give valid_data")
    if r.bf16 is True and r.fp16:  # bf16: auto with fp16: true is fp16 (vaswani_hf.training.plan)
        raise RecipeError("choose at most one of bf16 and fp16")
    if r.data_format == "hub" and not r.hub_dataset:
        raise RecipeError("data_format hub needs hub_dataset (e.g. wmt14) and usually hub_config (e.g. de-en)")
    check_report_to(r.report_to)
    try:
        r.model_config(vocab_size=r.vocab_size)
    except (ValueError, TypeError) as error:
        raise RecipeError(f"model settings: {one_line(error)}") from None
    return recipe


def check_length_fits(max_tokens: int, max_length: int | None, *, auto: bool = False) -> None:
    """The one rule between the two: a training pair of `max_length` tokens must fit one micro-batch of `max_tokens`
    padded tokens, or no batch could hold it. RecipeError naming the keys otherwise (a number in the recipe is
    refused when the recipe is loaded; `auto`'s number, `budget.tokens_per_device`, when the run is planned)."""
    if max_length is None or max_tokens >= max_length:
        return
    if auto:
        raise RecipeError(
            f"max_tokens_per_device: auto gives {max_tokens} tokens per micro-batch here, below "
            f"max_length {max_length}; lower max_length or give max_tokens_per_device"
        )
    raise RecipeError(
        f"max_tokens_per_device {max_tokens} is below max_length {max_length}: a training pair of "
        "max_length tokens would not fit one micro-batch; raise max_tokens_per_device or lower "
        "max_length"
    )


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
            raise RecipeError(
                f"report_to: unknown integration {shown(name)}; known: none, all, "
                f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}"
            )
        if name not in available:
            raise RecipeError(
                f"report_to {name}: the integration is not installed (`pip install {name}`), or use report_to none"
            )


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
        raise RecipeError(
            f"unknown recipe {shown(str(name_or_path))}; bundled recipes: {', '.join(list_recipes())} "
            "(or pass a path to a .yaml file)"
        )
    return candidate


def read_recipe_file(path: Path) -> dict[str, Any]:
    """The checked key/value pairs of a recipe file (not yet merged with the defaults)."""
    data = read_yaml_mapping(path, RecipeError)
    unknown = [k for k in data if k not in SETTINGS]
    if unknown:
        raise unknown_keys([str(k) for k in unknown], str(path))
    return {k: check_value(k, v, str(path)) for k, v in data.items()}


def load_recipe(name_or_path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None) -> Recipe:
    """The one way to build a recipe: a bundled name or a YAML file (None: `default`, or when `overrides` resume a run,
    the run's own OUTPUT_DIR/recipe.yaml, so that it goes on as planned), then `overrides` (typed values, or text as
    on the command line), every value and rule checked. Paths are not looked at here: `vaswani_hf.training.plan`
    resolves them. Raises RecipeError naming the file or key."""
    path, given = recipe_path(name_or_path or "default"), {}
    for name, value in (overrides or {}).items():
        if name not in SETTINGS:
            raise unknown_keys([name], "overrides")
        if isinstance(value, str) and SETTINGS[name].type is not str:
            value = value_from_text(name, value)
        given[name] = check_value(name, value, f"--{name}")
    values = {**defaults(), **read_recipe_file(path), **given}
    saved = Path(values["output_dir"]) / "recipe.yaml"
    if name_or_path is None and values["resume"] and saved.is_file():  # no file: the run rewrites its recipe.yaml
        own = {**defaults(), **read_recipe_file(saved), **given, "output_dir": values["output_dir"], "resume": True}
        return check_rules(Recipe(own, str(saved)))
    return check_rules(Recipe(values, path.stem, str(path)))
