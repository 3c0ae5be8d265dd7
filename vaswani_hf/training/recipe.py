"""Read a recipe: every setting of a training run, as one `Recipe` whose sections are typed fields, built and
checked once when the recipe is read.

A recipe file (`recipes/*.yaml`, or any path) is a flat YAML mapping of keys to values that override the declared
defaults (the paper's base model, Section 5 and Table 3); any key can be overridden again on the command line
(`--dropout 0.2`). The recipe nests those keys in sections, as fairseq's `TransformerConfig` nests its groups:
`recipe.run`, `recipe.data`, `recipe.tokenizer`, `recipe.model`, `recipe.optimization`, `recipe.checkpoints` and
`recipe.evaluation`. The model section *is* the `VaswaniConfig` the run trains: its keys are the config's settings
declared with `recipe: True`, with no second copy. Every other key is a field of its section below, declared as
transformers' `TrainingArguments` declares its own (`field(default=0.1, metadata={"help": ..., "min": 0})`;
validation_vaswani.py lists the metadata's keys). `KEYS` maps each flat key to its section, derived from those
declarations, and `Recipe.flat()` gives the flat mapping back, which is what a run's recipe.yaml holds.

`load_recipe` is the one way a recipe is built. It refuses unknown keys, wrong types, values out of range and
contradictory keys, naming the file (or the `--key`) each value came from, before anything is loaded. Every value is
checked where it enters: each value of a recipe file (or of a run's recipe.yaml, on `--resume`) as the file is read,
so that a bad value in a file is refused even where a flag overrides it, and each override as it is given. Each section
checks its values when it is built, as `VaswaniConfig` does, with the same check (`check_setting`); a key keeps its
name from the file to where it is used. What the recipe means on this machine is decided once, by
`vaswani_hf.training.plan`.

Recipe files are read safely: PyYAML's safe loader builds plain data only, but it still expands aliases (a 1 KB file of
nested aliases, a "billion laughs", describes billions of nodes), and it keeps the last of a key given twice
(YAML 1.2 forbids duplicate keys). A recipe is a flat mapping of scalars and short lists, so the loader here refuses
any alias, any key given twice and files larger than any real recipe, with one line naming the file. A value shown in
an error is shown as YAML writes it (`true`, `null`, `[1, 2]`), since that is how the recipe's author wrote it.

Where the paper is silent, defaults follow tensor2tensor's first release (t2t v1) and say so.
"""

import difflib
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..configuration_vaswani import MAX_POSITIONS, PROBABILITY, SettingError, VaswaniConfig, shown
from ..errors import UsageError, one_line
from ..metrics import SACREBLEU_TOKENIZERS
from ..precision import BF16_AUTO
from ..settings import GENERATION_SETTINGS, MAX_SEED, MAX_SENTENCES, MAX_TOKENS, MODEL_SETTINGS, Setting, settings_of
from ..tokenization import BPE_SETTINGS as _BPE
from .objective import PAPER_LABEL_SMOOTHING

# `vaswani_hf/recipes` is a link to the repository's `recipes/`, so that a built wheel carries the recipes as package
# data (pyproject.toml) and `--recipe NAME` works from an installed package too.
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
REPO_ROOT = Path(__file__).resolve().parents[2]
NULLS = ("null", "none", "~")  # These command-line words mean None, in any case.
BIG = 10**12  # The ceiling of counts that only cost time, such as steps and samples.
MAX_RECIPE_BYTES = 1 << 20  # A real recipe is a few kilobytes.


class RecipeError(UsageError):
    """Report an invalid recipe (a YAML file or a command-line override), before any data is read or model built."""


# ---------------------------------------------------------------------------------------------------------------------
# The sections: each key declared once, with its default, meaning and range
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """Check a section's values when it is built, each against its declaration, with the one check of a value
    (`check_setting`, as `VaswaniConfig` runs it), and take an integer as a float where a float is declared.

    huggingface_hub's `@strict` dataclasses validate fields too, but their errors span several lines and are no
    `ValueError`; a recipe's error is one line naming the key and the file it came from (`Recipe.build`)."""

    def __post_init__(self):
        for name, setting in settings_of(type(self)).items():
            value = setting.check(getattr(self, name), "recipe")
            if setting.type is float and type(value) is int:
                object.__setattr__(self, name, float(value))


@dataclass(frozen=True)
class RunSettings(Section):
    """The run itself: where it writes, its seed, its processes' precision and threads, and what it logs."""

    _argument_group_name = "run"
    description: str | None = field(default=None, metadata={"help": "free text describing the recipe"})
    output_dir: str = field(
        default="outputs/run", metadata={"help": "checkpoints, logs, metrics, plots and the exported model go here"}
    )
    seed: int = field(
        default=42, metadata={"help": "seed of model init, dropout and batch order", "min": 0, "max": MAX_SEED}
    )
    torch_threads: int = field(
        default=0,
        metadata={"help": "torch.set_num_threads per process (0: leave torch's default)", "min": 0, "max": 1024},
    )
    resume: bool = field(default=False, metadata={"help": "continue from the latest checkpoint in output_dir"})
    logging_steps: int = field(
        default=50, metadata={"help": "log loss and learning rate every N updates", "min": 1, "max": BIG}
    )
    report_to: str = field(
        default="none",
        metadata={
            "help": "Trainer integrations, comma-separated: none, all, tensorboard, ... (each must be installed)"
        },
    )
    disable_tqdm: bool = field(default=False, metadata={"help": "hide progress bars"})
    use_cpu: bool = field(
        default=False, metadata={"help": "train on CPU even if a GPU is present (multi-process CPU DDP over gloo)"}
    )
    bf16: bool | str = field(
        default=False,
        metadata={
            "help": "bf16 mixed precision (Accelerate; CPU autocast where there is no GPU); auto: on a CUDA GPU with "
            "bf16, or a CPU with bf16 matrix units (AMX, AVX-512 BF16) when the model is large enough to gain "
            "(vaswani_hf.precision), else fp32",
            "words": (BF16_AUTO,),
        },
    )
    fp16: bool = field(default=False, metadata={"help": "fp16 mixed precision (Accelerate; needs a CUDA GPU)"})
    torch_compile: bool = field(
        default=False,
        metadata={
            "help": "compile the training step with torch.compile (transformers' own TrainingArguments.torch_compile)"
        },
    )
    dataloader_num_workers: int = field(
        default=0,
        metadata={
            "help": "DataLoader worker processes (> 0: collation runs in the workers, so "
            "the tokens/s and padding statistics are not counted; -1: auto, 2 per "
            "process on CUDA, 0 on the CPU)",
            "min": -1,
            "max": 256,
        },
    )
    dataloader_pin_memory: bool | None = field(
        default=None,
        metadata={
            "help": "pinned host memory and non-blocking copies to the device "
            "(null: on for CUDA, off otherwise; "
            "vaswani_hf.training.plan)"
        },
    )
    dataloader_prefetch_factor: int | None = field(
        default=None,
        metadata={
            "help": "batches each DataLoader worker loads ahead (null: 4 on CUDA, torch's 2 otherwise; only with workers)",
            "min": 1,
            "max": 1024,
        },
    )
    translate_examples: list[str] = field(
        default_factory=list, metadata={"help": "sentences translated and printed at the end"}
    )
    export_dir: str | None = field(default=None, metadata={"help": "Hub-ready folder (default: OUTPUT_DIR/hub)"})
    debug_log_batches: bool = field(
        default=False, metadata={"help": "write a hash of every training example seen, per process (tests)"}
    )


@dataclass(frozen=True)
class DataSettings(Section):
    """Section 5.1's data: where each split comes from and which training pairs are kept."""

    _argument_group_name = "data (Section 5.1; relative paths: current folder, then the repository)"
    data_format: str = field(
        default="sample",
        metadata={
            "help": "where the corpus comes from: sample (bundled); moses (PREFIX.SRC + PREFIX.TGT, a sentence a line); "
            "tsv (a file whose first line names the columns' languages, e.g. en<TAB>de); jsonl (a file, "
            '{"en": ..., "de": ...} or {"translation": {...}} a line); hub (hub_dataset)',
            "choices": ("sample", "moses", "tsv", "jsonl", "hub"),
        },
    )
    data_dir: str | None = field(
        default=None, metadata={"help": "folder that relative train/valid/test paths are joined to"}
    )
    train_data: str = field(
        default="train",
        metadata={"help": "moses: file prefix (PREFIX.src, PREFIX.tgt); tsv/jsonl: file; hub/sample: split"},
    )
    valid_data: str | None = field(
        default="valid", metadata={"help": "like train_data; the dev set for validation loss/BLEU (null: none)"}
    )
    test_data: str | None = field(
        default="test",
        metadata={"help": "like train_data; scored after training with the averaged model (null: none)"},
    )
    hub_dataset: str | None = field(
        default=None, metadata={"help": "data_format hub: dataset name for datasets.load_dataset (e.g. wmt14)"}
    )
    hub_config: str | None = field(
        default=None, metadata={"help": "data_format hub: dataset configuration (e.g. de-en)"}
    )
    src_lang: str = field(default="en", metadata={"help": "source language code"})
    tgt_lang: str = field(default="de", metadata={"help": "target language code"})
    max_length: int | None = field(
        default=256,
        metadata={
            "help": "drop training pairs with a side longer than this many BPE tokens (null: "
            "keep what fits max_tokens_per_device)",
            "min": 1,
            "max": MAX_POSITIONS,
        },
    )
    max_length_ratio: float | None = field(
        default=9.0,
        metadata={
            "help": "drop training pairs whose length ratio exceeds this (null: keep)",
            "min": 1.0,
            "max": 10**6,
        },
    )
    max_train_samples: int = field(
        default=0, metadata={"help": "use only the first N training pairs (0: all)", "min": 0, "max": BIG}
    )
    max_eval_samples: int = field(
        default=0, metadata={"help": "validate on the first N dev pairs (0: all)", "min": 0, "max": BIG}
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "processes for Dataset.map tokenisation", "min": 1, "max": 256}
    )


@dataclass(frozen=True)
class TokenizerSettings(Section):
    """Section 5.1's one BPE vocabulary shared by source and target: a folder, or the BPE trained here."""

    _argument_group_name = "tokenizer (Section 5.1: one BPE vocabulary shared by source and target)"
    tokenizer_path: str | None = field(
        default=None, metadata={"help": "existing tokenizer folder; null: train a joint BPE on the training data"}
    )
    # The BPE's own declarations (vaswani_hf.tokenization.BpeSettings), as the model keys are VaswaniConfig's own.
    vocab_size: int = field(default=_BPE["vocab_size"].default, metadata=_BPE["vocab_size"].metadata)
    bpe_min_frequency: int = field(default=_BPE["min_frequency"].default, metadata=_BPE["min_frequency"].metadata)
    lowercase: bool = field(default=_BPE["lowercase"].default, metadata=_BPE["lowercase"].metadata)


@dataclass(frozen=True)
class OptimizationSettings(Section):
    """Sections 5.2-5.4: how long and on how many tokens per update the model trains, Adam, the
    learning-rate formula and the label-smoothed objective."""

    _argument_group_name = "optimisation and objective (Sections 5.2-5.4)"
    max_steps: int = field(
        default=100000,
        metadata={
            "help": "optimizer updates (paper: 100k base, 300k big); 0 or -1: use num_train_epochs",
            "min": -1,
            "max": BIG,
        },
    )
    num_train_epochs: float = field(
        default=1.0, metadata={"help": "epochs, only if max_steps <= 0", "min": 0, "max": 10**6}
    )
    warmup_steps: int = field(
        default=4000,
        metadata={"help": "warmup_steps of the learning-rate formula (Section 5.3)", "min": 1, "max": BIG},
    )
    lr_multiplier: float = field(
        default=1.0,
        metadata={
            "help": "constant factor in front of the Section 5.3 formula (paper: 1)",
            "min": 0,
            "min_exclusive": True,
            "max": 1000,
        },
    )
    label_smoothing: float = field(
        default=PAPER_LABEL_SMOOTHING,
        metadata={
            "help": "eps_ls of the training objective (Section 5.4; the model's own loss stays plain cross-entropy)",
            **PROBABILITY,
        },
    )
    adam_beta1: float = field(default=0.9, metadata={"help": "Adam beta1 (Section 5.3)", **PROBABILITY})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (Section 5.3)", **PROBABILITY})
    adam_epsilon: float = field(
        default=1e-9, metadata={"help": "Adam epsilon (Section 5.3)", "min": 0, "min_exclusive": True, "max": 1}
    )
    weight_decay: float = field(
        default=0.0, metadata={"help": "L2 weight decay (the paper uses none)", "min": 0, "max": 1}
    )
    max_grad_norm: float = field(
        default=0.0, metadata={"help": "gradient clipping (0: none, as the paper and t2t v1)", "min": 0, "max": 10**6}
    )
    max_tokens_per_device: int | str = field(
        default=4096,
        metadata={
            "help": "padded source (and target) tokens per micro-batch per process; auto: from tokens_per_step, the "
            "process count and the device's memory (vaswani_hf.training.plan)",
            "min": 1,
            "max": MAX_TOKENS,
            "words": ("auto",),
        },
    )
    tokens_per_step: int = field(
        default=0,
        metadata={
            "help": "target tokens per optimizer update for gradient_accumulation_steps: auto",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )
    gradient_accumulation_steps: int | str = field(
        default=1,
        metadata={
            "help": "micro-batches per update; auto: ceil(tokens_per_step / (max_tokens_per_device x processes))",
            "min": 1,
            "max": 10**6,
            "words": ("auto",),
        },
    )
    max_sentences: int = field(
        default=0, metadata={"help": "cap on pairs per micro-batch (0: none)", "min": 0, "max": MAX_SENTENCES}
    )
    eval_max_tokens: int = field(
        default=0,
        metadata={
            "help": "token budget of evaluation batches (0: max_tokens_per_device)",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )
    pad_to_multiple_of: int = field(
        default=0,
        metadata={
            "help": "pad batch lengths up to a multiple of this (8: tensor-core friendly, 64: "
            "few shapes for torch_compile; 0: to the longest sentence)",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )
    loss_chunk_tokens: int = field(
        default=0,
        metadata={
            "help": "compute the training loss this many target tokens at a time, never the "
            "whole (tokens x vocabulary) logits (GPU memory: e.g. 4096; 0: in one piece)",
            "min": 0,
            "max": MAX_TOKENS,
        },
    )


@dataclass(frozen=True)
class CheckpointSettings(Section):
    """Section 6.1's checkpoints, written at time intervals, and their average."""

    _argument_group_name = "checkpoints (Section 6.1)"
    save_every_minutes: float = field(
        default=10.0,
        metadata={"help": "checkpoint every N minutes of training (paper: 10; 0: off)", "min": 0, "max": 10**8},
    )
    save_steps: int = field(
        default=0, metadata={"help": "also checkpoint every N updates (0: off)", "min": 0, "max": BIG}
    )
    keep_last: int = field(
        default=5, metadata={"help": "keep the last K checkpoints (0: keep all)", "min": 0, "max": 10**6}
    )
    average_last: int = field(
        default=5,
        metadata={
            "help": "average the last N checkpoints at the end (paper: 5 base, 20 big; 0/1: off)",
            "min": 0,
            "max": 10**6,
        },
    )
    max_train_minutes: float = field(
        default=0.0, metadata={"help": "stop training after this wall-clock budget (0: none)", "min": 0, "max": 10**8}
    )


@dataclass(frozen=True)
class EvaluationSettings(Section):
    """The validation during training and the final scores (Section 6)."""

    _argument_group_name = "evaluation"
    eval_steps: int = field(
        default=0,
        metadata={"help": "validation loss + BLEU every N updates (0: only at the end)", "min": 0, "max": BIG},
    )
    eval_num_beams: int = field(
        default=4,
        metadata={
            "help": "beam size for validation BLEU during training (paper decoding: 4)",
            "min": 1,
            "max": GENERATION_SETTINGS["num_beams"].max,
        },
    )
    test_num_beams: int = field(
        default=0,
        metadata={
            "help": "beam size for the final scores (0: the model's generation_config)",
            "min": 0,
            "max": GENERATION_SETTINGS["num_beams"].max,
        },
    )
    bleu_tokenize: str = field(
        default="13a",
        metadata={
            "help": "sacreBLEU tokenizer; 'none' for pre-tokenized references (Multi30k tok)",
            "choices": SACREBLEU_TOKENIZERS,
        },
    )
    eval_on_start: bool = field(default=False, metadata={"help": "validate before the first update"})


# The model section is the VaswaniConfig the run trains; its keys are the settings it declares with `recipe: True`.
MODEL_SECTION = "model (Table 3; defaults: base)"
MODEL_KEYS = tuple(name for name, s in MODEL_SETTINGS.items() if s.recipe)
# The sections in the order a recipe lists them, by the name of the Recipe's field that holds each.
SECTIONS = {
    "run": RunSettings,
    "data": DataSettings,
    "tokenizer": TokenizerSettings,
    "model": VaswaniConfig,
    "optimization": OptimizationSettings,
    "checkpoints": CheckpointSettings,
    "evaluation": EvaluationSettings,
}


def section_keys(section: str) -> dict[str, Setting]:
    """Return the declarations of a section's keys, by name, in order; the model's are VaswaniConfig's own."""
    if SECTIONS[section] is VaswaniConfig:
        return {name: MODEL_SETTINGS[name] for name in MODEL_KEYS}
    return settings_of(SECTIONS[section])


def section_title(section: str) -> str:
    """Return a section's title, as `vaswani-train --help` and `--list-keys` group the keys."""
    return MODEL_SECTION if SECTIONS[section] is VaswaniConfig else SECTIONS[section]._argument_group_name


# Every flat key (a recipe file's, a flag's) by name: the section that holds it, and its declaration.
KEYS = {name: section for section in SECTIONS for name in section_keys(section)}
SETTINGS = {name: setting for section in SECTIONS for name, setting in section_keys(section).items()}


@dataclass(frozen=True)
class Recipe(Mapping):
    """Hold a checked recipe: its sections, each key read as `recipe.optimization.warmup_steps`, and its `name` and
    `file`. `model` is the `VaswaniConfig` the run trains, whose vocab_size is the BPE's (`tokenizer.vocab_size`).
    Build one with `load_recipe`.

    A recipe is also a read-only mapping of its flat keys, as a recipe file and the command line name them, so
    `recipe["warmup_steps"]` is `recipe.optimization.warmup_steps`, `"d_model" in recipe` holds, and `dict(recipe)`
    (or `flat()`) is the recipe.yaml a run writes. The mapping reads through `KEYS`, the one table of which section
    holds each key, so the two forms cannot disagree."""

    run: RunSettings
    data: DataSettings
    tokenizer: TokenizerSettings
    model: VaswaniConfig
    optimization: OptimizationSettings
    checkpoints: CheckpointSettings
    evaluation: EvaluationSettings
    name: str = "custom"
    file: str | None = None

    @classmethod
    def build(cls, values: Mapping[str, Any], origins: Mapping[str, str], name: str = "custom", file=None) -> "Recipe":
        """Return the recipe of flat `values` (every key), building each section, which checks its values, and then
        checking the rules between keys. A refusal raises RecipeError naming the file or flag each value it involves
        came from (`origins`)."""
        built = {}
        for section, declared in SECTIONS.items():
            given = {key: values[key] for key in section_keys(section)}
            try:
                if declared is VaswaniConfig:  # Its vocab_size is the BPE's, checked by the tokenizer section.
                    built[section] = VaswaniConfig(vocab_size=built["tokenizer"].vocab_size, **given)
                else:
                    built[section] = declared(**given)
            except SettingError as error:
                raise refusal(error, values, origins) from None
            except (ValueError, TypeError) as error:  # transformers' own checks of a config
                raise RecipeError(f"{section} settings: {one_line(error)}") from None
        return cls(**built, name=name, file=file)

    def __post_init__(self):
        """Check a recipe however it is built (`load_recipe`, or `Recipe(...)` from sections in Python): each section
        is of its declared type, which checked its own values when it was built, and the rules between keys hold."""
        for section, declared in SECTIONS.items():
            if not isinstance(getattr(self, section), declared):
                got = type(getattr(self, section)).__name__
                raise TypeError(f"Recipe's {section} section must be a {declared.__name__}, got a {got}")
        check_rules(self)

    def __getitem__(self, name: str) -> Any:
        """Return the value of flat key `name` as a recipe file writes it, from the section that holds it (`KEYS`).
        The config resolves d_k and d_v of None to d_model // num_heads; that value reads as null, as a recipe writes
        it, and a tuple reads as a list."""
        if name not in KEYS:
            raise KeyError(name)
        value = getattr(getattr(self, KEYS[name]), name)
        if name in ("d_k", "d_v") and value == self.model.d_model // self.model.num_heads:
            return None
        return list(value) if isinstance(value, tuple) else value

    def __getattr__(self, name: str) -> Any:
        """Return flat key `name` read as an attribute (`recipe.warmup_steps`), as a recipe was read before it had
        sections, so that users' scripts keep working; only names that are not the recipe's own attributes come
        here."""
        if name in KEYS:
            return self[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __iter__(self) -> Iterator[str]:
        return iter(KEYS)

    def __len__(self) -> int:
        return len(KEYS)

    def flat(self) -> dict[str, Any]:
        """Return every key by name with its value, in the sections' order: the recipe.yaml a run writes."""
        return dict(self)

    def to_yaml(self) -> str:
        """Return the full recipe as YAML, every key and default included, for recipe.yaml beside the run and in its
        export."""
        return yaml.safe_dump(self.flat(), sort_keys=False)


def defaults() -> dict[str, Any]:
    """Return every key with its default."""
    return {name: list(s.default) if isinstance(s.default, list) else s.default for name, s in SETTINGS.items()}


# ---------------------------------------------------------------------------------------------------------------------
# Refusals: one line naming the key, where its value came from, and the value as YAML writes it
# ---------------------------------------------------------------------------------------------------------------------


def yaml_shown(value: Any, limit: int = 60) -> str:
    """Return `value` as a recipe's YAML writes it (`true`, `null`, `[1, 2]`, `'text'`), cut to `limit` characters;
    a string is quoted, so that `'1.5'` is told from `1.5`."""
    if isinstance(value, str):
        text = "'" + value.replace("'", "''") + "'"
    elif (
        isinstance(value, float) and not math.isfinite(value) or isinstance(value, (bool, list, dict)) or value is None
    ):
        try:
            text = yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n...\n").strip()
        except yaml.YAMLError:
            text = repr(value)
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


_YAML_KINDS = {
    bool: "a boolean",
    str: "a string",
    list: "a list",
    dict: "a mapping",
    int: "an integer",
    float: "a number",
}


def refusal(error: SettingError, values: Mapping[str, Any], origins: Mapping[str, str]) -> RecipeError:
    """Return the RecipeError of a value that its declaration refused: one line naming where it came from, the key,
    what it may be and the value as YAML writes it. A rule between model settings names where each of its keys came
    from."""
    name = error.name
    if name in SETTINGS:
        value, declared = values[name], SETTINGS[name]
        problem = declared.problem(value, values.get("vocab_size") if declared.token_id else None)
        if problem is None:  # A rule that is no one value's (a token id beyond the vocabulary, say).
            return RecipeError(f"{origins.get(name, 'recipe')}: {name} {error.phrase}")
        kind = "" if value is None or declared.of_kind(value) else f" ({_YAML_KINDS.get(type(value), 'a value')})"
        return RecipeError(f"{origins.get(name, 'recipe')}: {name} must {problem}, got {yaml_shown(value)}{kind}")
    named = [key for key in MODEL_KEYS if values[key] is not None and re.search(rf"\b{key}\b", str(error))]
    where = ", ".join(f"{key} from {origins.get(key, 'recipe')}" for key in named)
    return RecipeError(f"model settings ({where}): {one_line(error)}" if where else one_line(error))


def unknown_keys(names: Sequence[str], where: str) -> RecipeError:
    """Return the RecipeError of unknown keys (or, on the command line, options), each with the nearest key."""
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


def value_from_text(name: str, text: str) -> Any:
    """Return the Python value of a command-line value (text), parsed as the key's declaration parses it
    (`Setting.read`). The text `null` gives None, true and false give booleans, and lists are written in YAML syntax.
    Text that spells no value of the key's type raises RecipeError. The range is checked once, when the recipe is
    built (`load_recipe`)."""
    if name not in SETTINGS:
        raise unknown_keys([name], "command line")
    where, declared = f"--{name}", SETTINGS[name]
    if declared.type is list:
        return read_yaml_text(text, where, RecipeError) if text.lstrip().startswith("[") else [text]
    try:
        return declared.read(text, where, none=NULLS if declared.nullable else ())
    except SettingError as error:
        raise RecipeError(str(error)) from None


# ---------------------------------------------------------------------------------------------------------------------
# Rules between keys
# ---------------------------------------------------------------------------------------------------------------------


def check_rules(recipe: Recipe) -> Recipe:
    """Check the rules that involve several run keys, and raise a RecipeError naming the keys of a broken one. The
    rules between model keys are the model's config's own (`VaswaniConfig.validate`)."""
    run, data, opt = recipe.run, recipe.data, recipe.optimization
    if opt.max_steps <= 0 and opt.num_train_epochs <= 0:
        raise RecipeError("set max_steps > 0 or num_train_epochs > 0")
    if data.src_lang == data.tgt_lang or not data.src_lang.strip() or not data.tgt_lang.strip():
        raise RecipeError(
            f"src_lang and tgt_lang must be two different language codes, got {yaml_shown(data.src_lang)} and "
            f"{yaml_shown(data.tgt_lang)}"
        )
    for name in ("gradient_accumulation_steps", "max_tokens_per_device"):
        if getattr(opt, name) == "auto" and opt.tokens_per_step <= 0:
            raise RecipeError(f"{name}: auto needs tokens_per_step > 0 (paper: 25000)")
    if opt.max_tokens_per_device == "auto" and opt.gradient_accumulation_steps != "auto":
        raise RecipeError(
            "max_tokens_per_device: auto chooses the accumulation too: set gradient_accumulation_steps: auto"
        )
    if opt.max_tokens_per_device != "auto":  # auto's number is checked by the same rule when the run is planned.
        check_length_fits(opt.max_tokens_per_device, data.max_length)
    average_last, keep_last = recipe.checkpoints.average_last, recipe.checkpoints.keep_last
    if average_last > 1 and 0 < keep_last < average_last:
        raise RecipeError(
            f"average_last={average_last} needs keep_last >= {average_last} (or 0: keep all); got keep_last={keep_last}"
        )
    if recipe.evaluation.eval_steps > 0 and data.valid_data is None:
        raise RecipeError("eval_steps > 0 needs valid_data (a dev set); set eval_steps 0 or give valid_data")
    if run.bf16 is True and run.fp16:  # bf16: auto with fp16: true means fp16 (training.plan).
        raise RecipeError("choose at most one of bf16 and fp16")
    if data.data_format == "hub" and not data.hub_dataset:
        raise RecipeError("data_format hub needs hub_dataset (e.g. wmt14) and usually hub_config (e.g. de-en)")
    check_report_to(run.report_to)
    return recipe


def check_length_fits(max_tokens: int, max_length: int | None, *, auto: bool = False) -> None:
    """Check that a training pair of `max_length` tokens fits one micro-batch of `max_tokens` padded tokens, since
    otherwise no batch could hold it. Otherwise raise RecipeError naming the keys; a number in the recipe is refused
    when the recipe is loaded, and `auto`'s number (`plan.tokens_per_device`) when the run is planned."""
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
    """Check that report_to names Trainer integrations that are installed ("none", "all", or a comma-separated
    list), and raise RecipeError otherwise."""
    names = report_integrations(value)
    if names in ((), ("all",)):
        return
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    available = set(get_available_reporting_integrations())
    for name in names or [""]:
        if name not in INTEGRATION_TO_CALLBACK:
            raise RecipeError(
                f"report_to: unknown integration {yaml_shown(name)}; known: none, all, "
                f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}"
            )
        if name not in available:
            raise RecipeError(
                f"report_to {name}: the integration is not installed (`pip install {name}`), or use report_to none"
            )


def report_integrations(value: str) -> tuple[str, ...]:
    """Return the Trainer integrations that report_to names: () for "none", ("all",) for every one installed."""
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    return () if names == ("none",) else names


# ---------------------------------------------------------------------------------------------------------------------
# Recipe files: YAML read safely, with bounded work on any input and one value per key
# ---------------------------------------------------------------------------------------------------------------------


class _NoAliasLoader(yaml.SafeLoader):
    """Load YAML as yaml.SafeLoader does, but refuse aliases (`*name`), which a recipe never needs and which let a
    tiny file expand into an enormous value, and refuse a key given twice, naming both lines."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed in "
                "a recipe; write the value out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        """Build a mapping whose keys are given once; the second of two equal keys is refused, naming both lines."""
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    hash(key)
                except TypeError:  # For an unhashable key, PyYAML's own error follows.
                    continue
                if key in seen:
                    raise yaml.YAMLError(
                        f"line {line}: key {key!r} is given twice (first on line {seen[key]}); keep one"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml_text(text: str, where: str, error: type[Exception] = ValueError) -> Any:
    """Parse YAML `text` (a recipe or a command-line value) without aliases; on failure, raise `error` at `where`."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - it is a SafeLoader subclass
    except yaml.YAMLError as problem:
        raise error(f"{where}: invalid YAML: {' '.join(str(problem).split())[:300]}") from None
    except RecursionError:
        raise error(f"{where}: YAML nested too deeply") from None


def read_yaml_mapping(path: Path, error: type[Exception] = RecipeError) -> dict[str, Any]:
    """Return the mapping a recipe file holds, or raise `error` naming the file if it is not found, too large, not
    UTF-8, invalid YAML (aliases included), not a mapping, or empty. An empty file is refused because it would
    silently train with the code defaults: the base model's 100k updates into outputs/run, which no one asks for by
    writing nothing."""
    try:
        size = path.stat().st_size
        if size > MAX_RECIPE_BYTES:
            raise error(f"{path}: {size:,} bytes is not a recipe (a recipe is a short YAML mapping of keys to values)")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text; save the recipe as UTF-8") from None
    except OSError as problem:
        raise error(f"recipe {path}: {problem.strerror or problem}") from None
    data = read_yaml_text(text, str(path), error)
    if data is None or data == {}:  # Nothing, blanks, comments, `---`, `null` and `{}` hold no keys.
        raise error(
            f"{path} is empty (no keys); a recipe needs at least one key (output_dir, data and model keys: "
            "see --list-keys); to start from the bundled defaults pass --recipe default"
        )
    if not isinstance(data, dict):
        raise error(f"{path}: a recipe is a mapping of keys to values, got {type(data).__name__}")
    return data


def list_recipes() -> list[str]:
    """Return the names of the recipes bundled in `recipes/`."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | os.PathLike) -> Path:
    """Return the path of a recipe's file, from a bundled recipe's name (`default`, `wmt14-en-de-base`, ...) or a path
    to a YAML file. A bundled recipe's name means that recipe unless a file of that name is here: a folder of that
    name (outputs/default after the default run, say) does not hide it."""
    p = Path(name_or_path)
    bundled = RECIPES_DIR / f"{p.name}.yaml"
    if str(name_or_path) == p.name and p.suffix not in (".yaml", ".yml") and not p.is_file() and bundled.is_file():
        return bundled
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
    """Return the key/value pairs of a recipe file, not yet merged with the defaults, refusing an unknown key. Each
    value is checked once: where the recipe is built (`Recipe.build`), or, for a value a flag replaces, by `load_recipe`
    as the file is merged (the file is wrong whatever the flag says)."""
    data = read_yaml_mapping(path, RecipeError)
    unknown = [k for k in data if k not in SETTINGS]
    if unknown:
        raise unknown_keys([str(k) for k in unknown], str(path))
    return dict(data)


def check_values(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Return `values` (recipe keys), each checked alone against its declaration (`Setting.check`, the check its
    section runs again when it is built), or raise the RecipeError of the first bad one, naming `where` (a file,
    `--key`) and the key. A rule between keys, such as a token id below the vocabulary size, is checked once the
    values are merged (`Recipe.build`), since another source may give the other key."""
    for name, value in values.items():
        try:
            SETTINGS[name].check(value, where)
        except SettingError as error:
            raise refusal(error, {name: value}, {name: where}) from None
    return dict(values)


# ---------------------------------------------------------------------------------------------------------------------
# Building a recipe: YAML file + overrides -> Recipe (the one way)
# ---------------------------------------------------------------------------------------------------------------------


def file_values(path: Path, given: Mapping[str, Any]) -> dict[str, Any]:
    """Return a recipe file's values (`read_recipe_file`), checking those that the flags `given` replace: the build
    never sees them, and a bad value in the file is refused naming the file even where a flag overrides it."""
    values = read_recipe_file(path)
    check_values({key: value for key, value in values.items() if key in given}, str(path))
    return values


def load_recipe(name_or_path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None) -> Recipe:
    """Build a recipe, the one way: from a bundled name or a YAML file, then `overrides` (typed values, or text as on
    the command line), checking every value once and every rule (`Recipe.build`). Without a name, the recipe is
    `default`, or, when `overrides` resume a run, the run's own OUTPUT_DIR/recipe.yaml, so that it goes on as
    planned. Paths are not looked at here: `vaswani_hf.training.plan` resolves them. Raises RecipeError naming the
    file or key."""
    path, given = recipe_path(name_or_path or "default"), {}
    for name, value in (overrides or {}).items():
        if name not in SETTINGS:
            raise unknown_keys([name], "overrides")
        value = value_from_text(name, value) if isinstance(value, str) and SETTINGS[name].type is not str else value
        given[name] = value  # Checked where the recipe is built, which names the flag.
    values = {**defaults(), **file_values(path, given), **given}
    name, file, out = path.stem, str(path), values["output_dir"]
    saved = Path(out) / "recipe.yaml" if isinstance(out, str) else None  # Else the build refuses it in one line.
    if name_or_path is None and values["resume"] is True and saved and saved.is_file():  # Else the run rewrites it.
        own = {**defaults(), **file_values(saved, given), **given, "output_dir": out, "resume": True}
        values, name, file = own, str(saved), None
    origins = {**dict.fromkeys(values, file or name), **{key: f"--{key}" for key in given}}
    return Recipe.build(values, origins, name, file)
