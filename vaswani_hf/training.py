"""Training the Transformer with the paper's recipe on `Seq2SeqTrainer` + Accelerate.

What the paper prescribes, and where it lives here:

* Section 5.3 "Optimizer": Adam(beta1=0.9, beta2=0.98, eps=1e-9) and
  ``lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)`` with warmup_steps = 4000
  -> :func:`paper_learning_rate`, :func:`get_paper_schedule`, :class:`VaswaniTrainer` (no weight decay: the paper
  has none).
* Section 5.4 "Regularization": residual dropout and label smoothing eps_ls = 0.1 live in the model
  (``VaswaniConfig.dropout`` / ``label_smoothing``); recipes set them.
* Section 5.2 "Hardware and Schedule": 100k steps (base) / 300k (big) on 8 GPUs; Section 5.1: batches of ~25000
  source + ~25000 target tokens -> recipes reach that as ``max_tokens_per_device x processes x
  gradient_accumulation_steps`` (``gradient_accumulation_steps: auto``).
* Section 6.1: "a single model obtained by averaging the last 5 checkpoints, which were written at 10-minute
  intervals" (20 for big) -> :class:`WallClockCallback` (time-interval checkpoints), keep-last-K rotation,
  :func:`average_checkpoints`.

Built from the ecosystem: `Seq2SeqTrainer` (loop, DDP/FSDP via Accelerate, resume with RNG states and dataloader
fast-forward, rotation of checkpoints, safetensors), `TrainerCallback`, the token-batching trainer of
:mod:`vaswani_hf.data` and the metrics of :mod:`vaswani_hf.evaluation`. Written by hand, each for a reason given in
its docstring: the exact (un-lagged) schedule, the atomic checkpoint rename, the time-interval save decision
broadcast across ranks, checkpoint averaging, recipe validation, plots and the Hub folder export.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint, rotate_checkpoints, sort_checkpoints

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
# `vaswani_hf/recipes` is a link to the repository's `recipes/`, so that a built wheel carries the recipes as package
# data (pyproject.toml) and `--recipe NAME` works from an installed package too.
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"

__all__ = [
    "RecipeError",
    "RECIPE_KEYS",
    "load_recipe",
    "recipe_path",
    "list_recipes",
    "paper_learning_rate",
    "paper_lr_lambda",
    "get_paper_schedule",
    "PaperScheduleMixin",
    "AtomicCheckpointMixin",
    "VaswaniTrainer",
    "WallClockCallback",
    "SamplerEpochCallback",
    "HistoryCallback",
    "BatchStatsCollator",
    "average_checkpoints",
    "last_checkpoints",
    "load_averaged_weights",
    "save_averaged_checkpoint",
    "plot_history",
    "export_hub_folder",
    "run_training",
]


# =====================================================================================================================
# Recipes
# =====================================================================================================================


class RecipeError(ValueError):
    """A recipe (YAML file or command-line override) is invalid; raised before any data is read or model built."""


@dataclasses.dataclass(frozen=True)
class Key:
    type: str  # "int", "float", "bool", "str", "list[str]", "int|auto"; a trailing "?" allows null
    default: Any
    help: str
    choices: tuple | None = None


# Every key a recipe may set. A recipe file sets a subset; the rest take these defaults (the paper's base model).
RECIPE_KEYS: dict[str, Key] = {
    # --- general
    "description": Key("str?", None, "free text describing the recipe"),
    "output_dir": Key("str", "outputs/run", "checkpoints, logs, metrics, plots and the exported model go here"),
    "seed": Key("int", 42, "seed of model init, dropout and batch order"),
    "torch_threads": Key("int", 0, "torch.set_num_threads per process (0: leave torch's default)"),
    # --- data (paths: relative ones are looked up in the current directory, then in the repository root)
    "data_format": Key("str", "sample", "where the corpus comes from", ("sample", "moses", "tsv", "jsonl", "hub")),
    "data_dir": Key("str?", None, "folder that relative train/valid/test paths are joined to"),
    "train_data": Key("str", "train",
                      "moses: file prefix (PREFIX.src, PREFIX.tgt); tsv/jsonl: file; hub/sample: split name"),
    "valid_data": Key("str?", "valid", "like train_data; the dev set for validation loss/BLEU (null: none)"),
    "test_data": Key("str?", "test", "like train_data; scored after training with the averaged model (null: none)"),
    "hub_dataset": Key("str?", None, "data_format hub: dataset name for datasets.load_dataset (e.g. wmt14)"),
    "hub_config": Key("str?", None, "data_format hub: dataset configuration (e.g. de-en)"),
    "src_lang": Key("str", "en", "source language code"),
    "tgt_lang": Key("str", "de", "target language code"),
    "max_length": Key("int?", 256, "drop training pairs with a side longer than this many BPE tokens (null: keep)"),
    "max_length_ratio": Key("float?", 9.0, "drop training pairs whose length ratio exceeds this (null: keep)"),
    "max_train_samples": Key("int", 0, "use only the first N training pairs (0: all)"),
    "max_eval_samples": Key("int", 0, "validate on the first N dev pairs (0: all)"),
    "preprocessing_num_workers": Key("int?", None, "processes for Dataset.map tokenisation"),
    # --- tokenizer (Section 5.1: shared source-target BPE)
    "tokenizer_path": Key("str?", None, "existing tokenizer folder; null: train a joint BPE on the training data"),
    "vocab_size": Key("int", 37000, "joint BPE vocabulary size (paper: ~37000 EN-DE, 32000 EN-FR)"),
    "bpe_min_frequency": Key("int", 2, "minimum pair frequency for a BPE merge"),
    "lowercase": Key("bool", False, "lowercase in the tokenizer (the paper's BLEU is cased)"),
    # --- model (Table 3; defaults = base)
    "d_model": Key("int", 512, "model width"),
    "d_ff": Key("int", 2048, "feed-forward inner width"),
    "num_heads": Key("int", 8, "attention heads"),
    "num_encoder_layers": Key("int", 6, "encoder layers N"),
    "num_decoder_layers": Key("int", 6, "decoder layers N"),
    "dropout": Key("float", 0.1, "residual dropout P_drop (Section 5.4; 0.3 for big EN-DE)"),
    "attention_dropout": Key("float", 0.0, "dropout on attention weights (not in the paper)"),
    "relu_dropout": Key("float", 0.0, "dropout after the FFN ReLU (not in the paper)"),
    "label_smoothing": Key("float", 0.1, "eps_ls (Section 5.4)"),
    "position_encoding": Key("str", "sinusoidal", "positional encoding (Section 3.5 / Table 3 E)",
                             ("sinusoidal", "learned")),
    "sinusoid_layout": Key("str", "interleaved", "sin/cos layout", ("interleaved", "concatenated")),
    "tie_word_embeddings": Key("bool", True, "share source/target embeddings and output projection (Section 3.4)"),
    # --- optimisation (Sections 5.2, 5.3)
    "max_steps": Key("int", 100000, "optimizer updates (paper: 100k base, 300k big); <= 0: use num_train_epochs"),
    "num_train_epochs": Key("float", 1.0, "epochs, only if max_steps <= 0"),
    "warmup_steps": Key("int", 4000, "warmup_steps of the learning-rate formula (Section 5.3)"),
    "lr_multiplier": Key("float", 1.0, "constant factor in front of the Section 5.3 formula (paper: 1)"),
    "adam_beta1": Key("float", 0.9, "Adam beta1 (Section 5.3)"),
    "adam_beta2": Key("float", 0.98, "Adam beta2 (Section 5.3)"),
    "adam_epsilon": Key("float", 1e-9, "Adam epsilon (Section 5.3)"),
    "weight_decay": Key("float", 0.0, "L2 weight decay (the paper uses none)"),
    "max_grad_norm": Key("float", 0.0, "gradient clipping (0: none, as the paper and t2t v1)"),
    "max_tokens_per_device": Key("int", 4096, "padded source (and target) tokens per micro-batch per process"),
    "tokens_per_step": Key("int", 0, "target tokens per optimizer update for gradient_accumulation_steps: auto"),
    "gradient_accumulation_steps": Key("int|auto", 1,
                                       "micro-batches per update; auto: ceil(tokens_per_step / "
                                       "(max_tokens_per_device x processes))"),
    "max_sentences": Key("int", 0, "cap on pairs per micro-batch (0: none)"),
    "eval_max_tokens": Key("int", 0, "token budget of evaluation batches (0: max_tokens_per_device)"),
    # --- checkpoints (Section 6.1)
    "save_every_minutes": Key("float", 10.0, "checkpoint every N minutes of training (paper: 10; 0: off)"),
    "save_steps": Key("int", 0, "also checkpoint every N updates (0: off)"),
    "keep_last": Key("int", 5, "keep the last K checkpoints (0: keep all)"),
    "average_last": Key("int", 5, "average the last N checkpoints at the end (paper: 5 base, 20 big; 0/1: off)"),
    "resume": Key("bool", False, "continue from the latest checkpoint in output_dir"),
    "max_train_minutes": Key("float", 0.0, "stop training after this wall-clock budget (0: none)"),
    # --- evaluation
    "eval_steps": Key("int", 0, "validation loss + BLEU every N updates (0: only at the end)"),
    "eval_num_beams": Key("int", 4, "beam size for validation BLEU during training (paper decoding: 4)"),
    "test_num_beams": Key("int", 0, "beam size for the final scores (0: the model's generation_config)"),
    "bleu_tokenize": Key("str", "13a", "sacreBLEU tokenizer; 'none' for pre-tokenized references (Multi30k tok)",
                         ("13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200")),
    "eval_on_start": Key("bool", False, "validate before the first update"),
    # --- logging / hardware
    "logging_steps": Key("int", 50, "log loss and learning rate every N updates"),
    "report_to": Key("str", "none", "Trainer integrations: none, tensorboard, ..."),
    "disable_tqdm": Key("bool", False, "hide progress bars"),
    "use_cpu": Key("bool", False, "train on CPU even if a GPU is present (multi-process CPU DDP over gloo)"),
    "bf16": Key("bool", False, "bf16 mixed precision (Accelerate)"),
    "fp16": Key("bool", False, "fp16 mixed precision (Accelerate)"),
    "dataloader_num_workers": Key("int", 0, "DataLoader worker processes (> 0: collation runs in the workers, so "
                                            "the tokens/s and padding statistics are not counted)"),
    # --- end of training
    "translate_examples": Key("list[str]", [], "sentences translated and printed at the end"),
    "export_dir": Key("str?", None, "Hub-ready folder (default: OUTPUT_DIR/hub)"),
    "debug_log_batches": Key("bool", False, "write a hash of every training example seen, per process (tests)"),
}


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


def _unknown_key_error(keys: Sequence[str], where: str) -> RecipeError:
    valid = ", ".join(sorted(RECIPE_KEYS))
    return RecipeError(f"unknown recipe key(s) {', '.join(repr(k) for k in keys)} in {where}. Valid keys: {valid}")


def _check_type(name: str, value: Any, where: str) -> Any:
    """Check (and minimally coerce: int -> float) one value against its declared type."""
    spec = RECIPE_KEYS[name]
    typ, optional = spec.type.rstrip("?"), spec.type.endswith("?")
    if value is None:
        if optional:
            return None
        raise RecipeError(f"{where}: {name} must not be null (expected {typ})")
    ok = False
    if typ == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif typ == "int|auto":
        ok = (isinstance(value, int) and not isinstance(value, bool)) or value == "auto"
    elif typ == "float":
        if isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = isinstance(value, float)
    elif typ == "bool":
        ok = isinstance(value, bool)
    elif typ == "str":
        ok = isinstance(value, str)
    elif typ == "list[str]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not ok:
        raise RecipeError(f"{where}: {name} must be {spec.type.replace('?', ' or null')}, "
                          f"got {value!r} ({type(value).__name__})")
    if spec.choices is not None and value not in spec.choices:
        raise RecipeError(f"{where}: {name}={value!r} is not one of {', '.join(map(str, spec.choices))}")
    return value


def parse_override(name: str, text: str) -> Any:
    """A command-line value -> Python, by the key's declared type (YAML syntax for lists, `null` for None)."""
    if name not in RECIPE_KEYS:
        raise _unknown_key_error([name], "command line")
    typ = RECIPE_KEYS[name].type.rstrip("?")
    if text in ("null", "None", "~") and RECIPE_KEYS[name].type.endswith("?"):
        return None
    if typ == "str":
        return text  # keep strings verbatim ("1e-3" as a path name stays a string)
    if typ == "list[str]":
        value = yaml.safe_load(text) if text.lstrip().startswith("[") else [text]
        return value
    if typ == "bool":
        low = text.lower()
        if low in ("true", "yes", "1", "on"):
            return True
        if low in ("false", "no", "0", "off"):
            return False
        raise RecipeError(f"command line: --{name} expects true/false, got {text!r}")
    try:
        return yaml.safe_load(text) if typ != "float" else float(text)
    except (ValueError, yaml.YAMLError):
        raise RecipeError(f"command line: --{name} expects {typ}, got {text!r}") from None


def resolve_path(path: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> Path:
    """Join relative paths to `data_dir`; a relative result is looked up in the cwd first, then the repo root."""
    p = Path(os.path.expanduser(str(path)))
    if not p.is_absolute() and data_dir is not None:
        p = Path(resolve_dir(data_dir)) / p
    if not p.is_absolute():
        for base in (Path.cwd(), REPO_ROOT):
            if (base / p).exists() or any((base / p).parent.glob((base / p).name + ".*")):
                return (base / p).resolve()
        return (Path.cwd() / p).resolve()
    return p


def resolve_dir(path: str | os.PathLike) -> Path:
    p = Path(os.path.expanduser(str(path)))
    if p.is_absolute():
        return p
    for base in (Path.cwd(), REPO_ROOT):
        if (base / p).is_dir():
            return (base / p).resolve()
    return (Path.cwd() / p).resolve()


def _check_data_paths(r: dict) -> None:
    """Missing corpus files are an error before anything else happens (not after minutes of tokenisation)."""
    fmt = r["data_format"]
    if fmt == "hub":
        if not r["hub_dataset"]:
            raise RecipeError("data_format hub needs hub_dataset (e.g. wmt14) and usually hub_config (e.g. de-en)")
        return  # splits are checked by datasets.load_dataset (network/cache)
    if fmt == "sample":
        from .data import sample_corpus_path

        folder = sample_corpus_path()
        for split in (r["train_data"], r["valid_data"], r["test_data"]):
            if split is None:
                continue
            for lang in (r["src_lang"], r["tgt_lang"]):
                if not (folder / f"{split}.{lang}").is_file():
                    raise RecipeError(f"sample corpus file missing: {folder / f'{split}.{lang}'}")
        return
    if r["data_dir"] is not None and not resolve_dir(r["data_dir"]).is_dir():
        raise RecipeError(f"data_dir not found: {r['data_dir']} (looked in {Path.cwd()} and {REPO_ROOT})")
    for key in ("train_data", "valid_data", "test_data"):
        if r[key] is None:
            continue
        p = resolve_path(r[key], r["data_dir"])
        if fmt == "moses":
            for lang in (r["src_lang"], r["tgt_lang"]):
                f = Path(f"{p}.{lang}")
                if not f.is_file():
                    raise RecipeError(f"{key}: corpus file not found: {f} (data_format moses expects "
                                      f"PREFIX.{r['src_lang']} and PREFIX.{r['tgt_lang']})")
        elif not p.is_file():
            raise RecipeError(f"{key}: corpus file not found: {p}")


def validate_recipe(r: dict) -> dict:
    """Cross-key checks. Raises RecipeError with the key names at fault."""
    if r["max_steps"] <= 0 and r["num_train_epochs"] <= 0:
        raise RecipeError("set max_steps > 0 or num_train_epochs > 0")
    if r["max_tokens_per_device"] <= 0:
        raise RecipeError("max_tokens_per_device must be positive")
    if r["gradient_accumulation_steps"] == "auto" and r["tokens_per_step"] <= 0:
        raise RecipeError("gradient_accumulation_steps: auto needs tokens_per_step > 0 (paper: 25000)")
    if isinstance(r["gradient_accumulation_steps"], int) and r["gradient_accumulation_steps"] < 1:
        raise RecipeError("gradient_accumulation_steps must be >= 1 or 'auto'")
    if r["warmup_steps"] < 1:
        raise RecipeError("warmup_steps must be >= 1 (the Section 5.3 formula divides by it)")
    if r["average_last"] > 1 and 0 < r["keep_last"] < r["average_last"]:
        raise RecipeError(f"average_last={r['average_last']} needs keep_last >= {r['average_last']} (or 0: keep all); "
                          f"got keep_last={r['keep_last']}")
    if r["eval_steps"] > 0 and r["valid_data"] is None:
        raise RecipeError("eval_steps > 0 needs valid_data (a dev set); set eval_steps 0 or give valid_data")
    if r["bf16"] and r["fp16"]:
        raise RecipeError("choose at most one of bf16 and fp16")
    for key in ("save_every_minutes", "max_train_minutes"):
        if r[key] < 0:
            raise RecipeError(f"{key} must be >= 0")
    if r["report_to"] == "tensorboard":
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise RecipeError("report_to tensorboard needs `pip install tensorboard`") from None
    if r["tokenizer_path"] is not None and not resolve_dir(r["tokenizer_path"]).is_dir():
        raise RecipeError(f"tokenizer_path not found: {r['tokenizer_path']}")
    try:
        model_config_from_recipe(r, vocab_size=max(r["vocab_size"], 8))
    except (ValueError, TypeError) as e:
        raise RecipeError(f"model settings: {e}") from None
    _check_data_paths(r)
    return r


def load_recipe(name_or_path: str | os.PathLike = "default", overrides: Mapping[str, Any] | None = None,
                check_paths: bool = True) -> dict:
    """Load a recipe, apply overrides (already-typed values, or strings from the command line), validate it.

    Unknown keys, wrong types and missing data paths raise :class:`RecipeError` naming the key.
    """
    path = recipe_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise RecipeError(f"{path}: invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of keys to values, got {type(data).__name__}")
    unknown = [k for k in data if k not in RECIPE_KEYS]
    if unknown:
        raise _unknown_key_error(unknown, str(path))
    recipe = {k: spec.default for k, spec in RECIPE_KEYS.items()}
    for k, v in data.items():
        recipe[k] = _check_type(k, v, str(path))
    for k, v in (overrides or {}).items():
        if k not in RECIPE_KEYS:
            raise _unknown_key_error([k], "overrides")
        if isinstance(v, str) and RECIPE_KEYS[k].type.rstrip("?") not in ("str",):
            v = parse_override(k, v)
        recipe[k] = _check_type(k, v, f"--{k}")
    recipe["_recipe_name"] = path.stem
    recipe["_recipe_file"] = str(path)
    if check_paths:
        validate_recipe(recipe)
    return recipe


def model_config_from_recipe(r: dict, vocab_size: int):
    from .configuration_vaswani import VaswaniConfig

    return VaswaniConfig(
        vocab_size=vocab_size,
        d_model=r["d_model"],
        d_ff=r["d_ff"],
        num_heads=r["num_heads"],
        num_encoder_layers=r["num_encoder_layers"],
        num_decoder_layers=r["num_decoder_layers"],
        dropout=r["dropout"],
        attention_dropout=r["attention_dropout"],
        relu_dropout=r["relu_dropout"],
        label_smoothing=r["label_smoothing"],
        position_encoding=r["position_encoding"],
        sinusoid_layout=r["sinusoid_layout"],
        tie_word_embeddings=r["tie_word_embeddings"],
    )


# =====================================================================================================================
# Section 5.3: optimizer and learning-rate schedule
# =====================================================================================================================


def paper_learning_rate(step: int, d_model: int, warmup_steps: int = 4000, multiplier: float = 1.0) -> float:
    """Section 5.3: lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5), times `multiplier`.

    `step` is the 1-based number of the update being made (step_num >= 1; the formula is undefined at 0).
    """
    if step < 1:
        raise ValueError(f"step_num starts at 1, got {step}")
    return multiplier * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def paper_lr_lambda(scheduler_step: int, warmup_steps: int) -> float:
    """Factor for `LambdaLR` whose base lr is `multiplier * d_model^-0.5`.

    The one-step lag: `LambdaLR` evaluates its lambda at 0 when built and after each `scheduler.step()`; the Trainer
    calls `optimizer.step()` then `scheduler.step()`. So the k-th update (k = 1, 2, ...) runs with lambda(k - 1).
    We evaluate the formula at k = scheduler_step + 1, which makes the k-th update use exactly lrate(step_num = k);
    this is also tensor2tensor v1's choice (its "noam" schedule uses global_step + 1). transformers' built-in
    `inverse_sqrt` instead makes the first update use lr 0 and is one step behind the formula.
    """
    step_num = scheduler_step + 1
    return min(step_num ** -0.5, step_num * warmup_steps ** -1.5)


def get_paper_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int = 4000, last_epoch: int = -1):
    """`LambdaLR` implementing Section 5.3 exactly (see :func:`paper_lr_lambda`). The optimizer's lr must be
    `multiplier * d_model^-0.5` (what :class:`VaswaniTrainer` sets through `learning_rate`).

    A `functools.partial` of a module-level function (not a lambda), so the scheduler pickles and its state dict is
    the plain step count, which `Trainer` saves and restores on resume.
    """
    from functools import partial

    return torch.optim.lr_scheduler.LambdaLR(optimizer, partial(paper_lr_lambda, warmup_steps=warmup_steps),
                                             last_epoch=last_epoch)


def paper_base_lr(d_model: int, multiplier: float = 1.0) -> float:
    return multiplier * d_model ** -0.5


def paper_optimizer_cls_and_kwargs(r: dict) -> tuple[type, dict]:
    """`Trainer(optimizer_cls_and_kwargs=...)`: Section 5.3's Adam. torch's `Adam` (not `AdamW`): the paper has no
    weight decay, and L2 decay, if a recipe asks for it, is Adam's coupled kind."""
    return torch.optim.Adam, {"lr": paper_base_lr(r["d_model"], r["lr_multiplier"]),
                              "betas": (r["adam_beta1"], r["adam_beta2"]), "eps": r["adam_epsilon"]}


# Device types given the fused Adam kernel: CPU is tested here; CUDA, where torch ships the same kernel, only on a GPU.
FUSED_ADAM_DEVICE_TYPES = ("cpu", "cuda")


def with_fused_adam(optimizer_kwargs: dict, model: torch.nn.Module) -> dict:
    """Add `fused=True` to Adam's kwargs when every trainable parameter can take torch's fused kernel.

    Same update as the default implementation, to float rounding (`tests/test_training.py` checks 1e-6), but one
    kernel for all parameters: on CPU torch otherwise takes its per-parameter loop (16.5 ms per update against
    3.1 ms for the 6M-parameter Multi30k model, benchmarks/bench_adam.py). `fused=True` raises on other device types
    and on parameter kinds it does not handle, so anything unusual (DTensors of FSDP2, integer or mixed devices) keeps
    torch's default. A recipe that sets `fused` or `foreach` itself is left alone.
    """
    if "fused" in optimizer_kwargs or "foreach" in optimizer_kwargs:
        return optimizer_kwargs
    params = [p for p in model.parameters() if p.requires_grad]
    if not params or any(type(p) is not torch.nn.Parameter and type(p) is not torch.Tensor for p in params):
        return optimizer_kwargs
    devices = {p.device.type for p in params}
    if len(devices) != 1 or devices.pop() not in FUSED_ADAM_DEVICE_TYPES or not all(
            p.is_floating_point() for p in params):
        return optimizer_kwargs
    return {**optimizer_kwargs, "fused": True}


class PaperScheduleMixin:
    """Trainer mixin: `create_scheduler` builds :func:`get_paper_schedule` with `self.paper_warmup_steps`.

    Overrides `create_scheduler` (the documented extension point) because no `lr_scheduler_type` gives the exact
    formula: `inverse_sqrt` lags one step and starts at 0.
    """

    paper_warmup_steps: int = 4000

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        if self.lr_scheduler is None:
            self.lr_scheduler = get_paper_schedule(optimizer or self.optimizer, self.paper_warmup_steps)
            self._created_lr_scheduler = True
        return self.lr_scheduler


# =====================================================================================================================
# Checkpoints: atomic writes, time intervals (Section 6.1), averaging
# =====================================================================================================================


STAGING_DIR = ".staging"


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError:
                pass
    _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # not supported everywhere (e.g. some network file systems)
        pass


class AtomicCheckpointMixin:
    """Trainer mixin: every `checkpoint-N` appears complete or not at all.

    `Trainer._save_checkpoint` writes model.safetensors, optimizer, scheduler, RNG states and trainer_state.json
    straight into `checkpoint-N`; a kill in the middle leaves a folder that `get_last_checkpoint` would pick up for
    `--resume` and fail on. transformers has no atomic option, so we let the Trainer write everything (all ranks,
    its own code) into `OUTPUT/.staging/checkpoint-N`, wait for all ranks, fsync, and rename the folder into place
    (a rename within one file system is atomic). Rotation (keep the last `save_total_limit`) then runs on the real
    folder, ordered by step number.
    """

    _staging_active = False

    def _get_output_dir(self, trial):
        run_dir = super()._get_output_dir(trial)
        return os.path.join(run_dir, STAGING_DIR) if self._staging_active else run_dir

    def _save_checkpoint(self, model, trial):
        run_dir = super()._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staged, final = Path(run_dir, STAGING_DIR, name), Path(run_dir, name)
        if self.args.should_save and staged.exists():
            shutil.rmtree(staged)
        self.accelerator.wait_for_everyone()
        self._staging_active = True
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_active = False
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            _fsync_tree(staged)
            if final.exists():  # the same step saved twice (e.g. a time-interval save at the final step)
                shutil.rmtree(final)
            os.rename(staged, final)
            try:
                staged.parent.rmdir()  # remove the empty staging folder
            except OSError:
                pass
            _fsync_dir(Path(run_dir))
            rotate_checkpoints(run_dir, save_total_limit=self.args.save_total_limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=False)
            logger.info("checkpoint written atomically: %s", final)
        self.accelerator.wait_for_everyone()


def _broadcast_code(code: int, device: torch.device | str = "cpu") -> int:
    """Rank 0's decision for every rank (clocks differ; all ranks must save the same step together)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return code
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([code], dtype=torch.int32, device=device)
    dist.broadcast(t, src=0)
    return int(t.item())


class WallClockCallback(TrainerCallback):
    """Time-interval checkpoints (the paper wrote one every 10 minutes, Section 6.1) and a wall-clock budget.

    `TrainingArguments` only saves by steps or epochs. Rank 0 measures the time and broadcasts the decision, so all
    processes save the same step. A save is also forced at the last step and when the budget stops training, so the
    final state is always a checkpoint (needed for averaging and `--resume`).
    """

    def __init__(self, save_every_minutes: float = 10.0, max_train_minutes: float = 0.0, save_steps: int = 0):
        self.save_every = save_every_minutes * 60.0
        self.budget = max_train_minutes * 60.0
        self.save_steps = save_steps
        self.start = self.last_save = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.last_save = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self.budget > 0 or self.save_every > 0:
            now = time.monotonic()
            over_budget = self.budget > 0 and now - self.start >= self.budget
            time_to_save = self.save_every > 0 and now - self.last_save >= self.save_every
            code = _broadcast_code(2 * int(over_budget) + int(time_to_save), args.device)
            over_budget, time_to_save = bool(code & 2), bool(code & 1)
            if time_to_save:
                control.should_save = True
            if over_budget:
                logger.info("wall-clock budget of %.1f min reached at step %d: stopping", self.budget / 60,
                            state.global_step)
                control.should_training_stop = True
                control.should_save = True
                control.should_evaluate = False
        if self.save_steps > 0 and state.global_step % self.save_steps == 0:
            control.should_save = True
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        self.last_save = time.monotonic()


def _find_token_batch_sampler(loader) -> Any:
    from .data import TokenBatchSampler

    obj, seen = loader, 0
    while obj is not None and seen < 8:
        if isinstance(obj, TokenBatchSampler):
            return obj
        obj = getattr(obj, "batch_sampler", None) or getattr(obj, "base_dataloader", None)
        seen += 1
    return None


class SamplerEpochCallback(TrainerCallback):
    """Make sure the token batch sampler knows the epoch, also when resuming mid-epoch.

    `Trainer` reaches a sampler wrapped in Accelerate's `BatchSamplerShard`, but after `skip_first_batches`
    (resume) the wrapper chain is one level deeper and `set_epoch` can miss it, which would replay epoch 0's batch
    order. Setting it from `state.epoch` at each epoch start is idempotent when the Trainer got it right.
    """

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs):
        sampler = _find_token_batch_sampler(train_dataloader)
        if sampler is not None:
            sampler.set_epoch(int(math.floor((state.epoch or 0.0) + 1e-6)))


class HistoryCallback(TrainerCallback):
    """Append every log (loss, learning rate, eval loss/BLEU) with wall-clock seconds to `history.jsonl`.

    `trainer.state.log_history` has the values but no times; the time-to-BLEU curve needs them. Appending keeps the
    history of an interrupted run when it is resumed (the time offset continues from the last record).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.offset = 0.0
        self.t0 = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = time.monotonic()
        if not state.is_world_process_zero or not self.path.is_file():
            return
        # a fresh run in an old folder starts a new history; a resumed one drops what came after its checkpoint
        records = [rec for rec in read_history(self.path) if rec.get("step", 0) <= state.global_step]
        if state.global_step == 0:
            records = []
        self.offset = max((rec.get("time_s", 0.0) for rec in records), default=0.0)
        self.path.write_text("".join(json.dumps(rec) + "\n" for rec in records), encoding="utf-8")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        rec = {"step": state.global_step, "time_s": round(self.offset + time.monotonic() - self.t0, 3), **logs}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")


def read_history(path: str | os.PathLike) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        return []
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


class BatchStatsCollator:
    """Wraps a collator to count target tokens and padding of the training batches (for tokens/s and padding share),
    and optionally to log a hash of every example per process (`debug_log_batches`, used by the tests to show that
    no batch is seen twice across ranks). Counting is switched off during evaluation by :class:`VaswaniTrainer`.
    """

    def __init__(self, inner, log_path: str | os.PathLike | None = None):
        self.inner = inner
        self.pad_to_multiple_of = getattr(inner, "pad_to_multiple_of", None)
        self.log_path = Path(log_path) if log_path else None
        self.active = True
        self.batches = 0
        self.src_tokens = self.src_slots = self.tgt_tokens = self.tgt_slots = 0

    def __call__(self, features):
        batch = self.inner(features)
        if self.active:
            self.batches += 1
            mask = batch["attention_mask"]
            self.src_tokens += int(mask.sum())
            self.src_slots += mask.numel()
            if "labels" in batch:
                labels = batch["labels"]
                self.tgt_tokens += int((labels != -100).sum())
                self.tgt_slots += labels.numel()
            if self.log_path is not None:
                rows = [hashlib.sha1(json.dumps([list(map(int, f["input_ids"])), list(map(int, f["labels"]))])
                                     .encode()).hexdigest()[:16] for f in features]
                with open(self.log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"batch": self.batches, "examples": rows}) + "\n")
        return batch

    def stats(self) -> dict:
        return {
            "train_batches": self.batches,
            "train_src_tokens": self.src_tokens,
            "train_tgt_tokens": self.tgt_tokens,
            "padding_share_src": 1 - self.src_tokens / self.src_slots if self.src_slots else 0.0,
            "padding_share_tgt": 1 - self.tgt_tokens / self.tgt_slots if self.tgt_slots else 0.0,
        }


@functools.lru_cache(maxsize=None)
def _make_trainer_class():
    from .data import TokenBatchingSeq2SeqTrainer

    class VaswaniTrainer(AtomicCheckpointMixin, PaperScheduleMixin, TokenBatchingSeq2SeqTrainer):
        """`TokenBatchingSeq2SeqTrainer` (Section 5.1 batching) + the Section 5.3 schedule + atomic checkpoints.

        Pass `optimizer_cls_and_kwargs=paper_optimizer_cls_and_kwargs(recipe)` for Adam(0.9, 0.98, 1e-9) and
        `learning_rate = multiplier * d_model^-0.5`.
        """

        def __init__(self, *args, paper_warmup_steps: int = 4000, optimizer_cls_and_kwargs=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.paper_warmup_steps = paper_warmup_steps
            # Trainer's own hook for the optimizer class; Seq2SeqTrainer's __init__ does not forward the argument.
            if optimizer_cls_and_kwargs is not None:
                self.optimizer_cls_and_kwargs = optimizer_cls_and_kwargs

        def create_optimizer(self, model=None):
            # Decided here, not in paper_optimizer_cls_and_kwargs, because only now are the parameters on their
            # device (and wrapped, under FSDP).
            cls_kwargs = getattr(self, "optimizer_cls_and_kwargs", None)
            if self.optimizer is None and cls_kwargs is not None and cls_kwargs[0] is torch.optim.Adam:
                self.optimizer_cls_and_kwargs = (cls_kwargs[0],
                                                 with_fused_adam(cls_kwargs[1], self.model if model is None else model))
            return super().create_optimizer(model)

        def _set_counting(self, on: bool) -> bool:
            collator = self.data_collator
            old = getattr(collator, "active", None)
            if old is not None:
                collator.active = on
            return old

        def evaluate(self, *args, **kwargs):
            old = self._set_counting(False)
            try:
                return super().evaluate(*args, **kwargs)
            finally:
                if old is not None:
                    self.data_collator.active = old

        def predict(self, *args, **kwargs):
            old = self._set_counting(False)
            try:
                return super().predict(*args, **kwargs)
            finally:
                if old is not None:
                    self.data_collator.active = old

    return VaswaniTrainer


def __getattr__(name):  # lazy: importing vaswani_hf.training must not require the data module to be complete
    if name == "VaswaniTrainer":
        return _make_trainer_class()
    raise AttributeError(name)


# ---------------------------------------------------------------------------------------------------------------------
# Section 6.1: checkpoint averaging
# ---------------------------------------------------------------------------------------------------------------------

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
NON_MODEL_FILES = {"optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin"}


def last_checkpoints(output_dir: str | os.PathLike, n: int) -> list[Path]:
    """The `n` newest `checkpoint-N` folders of `output_dir` by step number, oldest first."""
    ckpts = [Path(p) for p in sort_checkpoints(str(output_dir), PREFIX_CHECKPOINT_DIR, use_mtime=False)]
    return ckpts[-n:] if n > 0 else ckpts


def _load_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        return load_file(str(single))
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        out = {}
        for shard in shards:
            out.update(load_file(str(folder / shard)))
        return out
    raise FileNotFoundError(f"{folder}: no model.safetensors (or index) - averaging needs safetensors checkpoints")


def average_checkpoints(folders: Sequence[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights of several checkpoints (Section 6.1), accumulated in float64 and returned in
    each tensor's original dtype. All checkpoints must have the same tensor names and shapes.

    Hand-written: neither transformers nor Accelerate average checkpoints (fairseq's `average_checkpoints.py` does
    the same for its own format).
    """
    if not folders:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for i, folder in enumerate(folders):
        weights = _load_weights(Path(folder))
        if i == 0:
            dtypes = {k: v.dtype for k, v in weights.items()}
            total = {k: v.to(torch.float64).clone() for k, v in weights.items()}
            continue
        if set(weights) != set(total):
            diff = sorted(set(weights) ^ set(total))[:5]
            raise ValueError(f"{folder} has other tensors than {folders[0]} (e.g. {diff})")
        for k, v in weights.items():
            if v.shape != total[k].shape:
                raise ValueError(f"{folder}: {k} has shape {tuple(v.shape)}, expected {tuple(total[k].shape)}")
            total[k] += v.to(torch.float64)
    n = len(folders)
    out = {}
    for k, v in total.items():
        if dtypes[k].is_floating_point:
            out[k] = (v / n).to(dtypes[k])
        else:  # integer buffers (none in this model): keep the newest checkpoint's value
            out[k] = _load_weights(Path(folders[-1]))[k]
    return out


def load_averaged_weights(model, weights: Mapping[str, torch.Tensor]) -> None:
    """Put averaged `weights` (from `average_checkpoints` or an averaged `model.safetensors`) into `model` in place and
    re-tie the shared embedding / output projection. A tensor the model does not have is an error (another
    architecture); tied copies the checkpoint left out are fine."""
    _, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected:
        raise RuntimeError(f"averaged weights have unexpected keys: {unexpected[:5]}")
    model.tie_weights()


def save_averaged_checkpoint(folders: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Average `folders` and write a loadable model folder: averaged `model.safetensors` plus the newest checkpoint's
    config, generation config, tokenizer and code files (no optimizer/scheduler/RNG state). Written atomically."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    averaged = average_checkpoints(folders)
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    newest = Path(folders[-1])
    for f in newest.iterdir():
        if f.is_file() and f.name not in NON_MODEL_FILES and not f.name.startswith("rng_state") \
                and not f.name.startswith("model") and f.suffix != ".pth":
            shutil.copy2(f, tmp / f.name)
    save_file({k: v.contiguous() for k, v in averaged.items()}, str(tmp / "model.safetensors"),
              metadata={"format": "pt"})
    (tmp / "averaged_from.json").write_text(json.dumps([str(Path(f).name) for f in folders], indent=1))
    _fsync_tree(tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.rename(tmp, out_dir)
    return out_dir


# =====================================================================================================================
# Plots, metrics, Hub folder
# =====================================================================================================================


def plot_history(history: Sequence[dict], out_dir: str | os.PathLike) -> dict[str, str]:
    """PNG plots of the training loss (and validation loss), the learning rate and validation BLEU (by step and by
    wall-clock time). Returns {name: path} of the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train = [h for h in history if "loss" in h]
    evals = [h for h in history if "eval_loss" in h]
    bleu = [h for h in history if "eval_bleu" in h]
    written = {}

    if train or evals:
        fig, ax = plt.subplots(figsize=(6, 4))
        if train:
            ax.plot([h["step"] for h in train], [h["loss"] for h in train], label="train (label-smoothed)")
        if evals:
            ax.plot([h["step"] for h in evals], [h["eval_loss"] for h in evals], "o-", label="validation")
        ax.set_xlabel("update")
        ax.set_ylabel("loss per target token")
        ax.set_title("Loss")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "loss.png", dpi=100)
        plt.close(fig)
        written["loss"] = str(out_dir / "loss.png")
    lr = [h for h in history if "learning_rate" in h]
    if lr:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([h["step"] for h in lr], [h["learning_rate"] for h in lr])
        ax.set_xlabel("update")
        ax.set_ylabel("learning rate")
        ax.set_title("Learning rate (Section 5.3)")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / "learning_rate.png", dpi=100)
        plt.close(fig)
        written["learning_rate"] = str(out_dir / "learning_rate.png")
    if bleu:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        axes[0].plot([h["step"] for h in bleu], [h["eval_bleu"] for h in bleu], "o-")
        axes[0].set_xlabel("update")
        axes[1].plot([h.get("time_s", 0) / 60 for h in bleu], [h["eval_bleu"] for h in bleu], "o-")
        axes[1].set_xlabel("wall-clock minutes")
        for ax in axes:
            ax.set_ylabel("validation BLEU")
            ax.grid(alpha=0.3)
        fig.suptitle("Validation BLEU")
        fig.tight_layout()
        fig.savefig(out_dir / "bleu.png", dpi=100)
        plt.close(fig)
        written["bleu"] = str(out_dir / "bleu.png")
    return written


def _json_default(o):
    if isinstance(o, (Path,)):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def write_json(path: str | os.PathLike, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default), encoding="utf-8")
    os.replace(tmp, path)


def write_hypotheses(path: str | os.PathLike, tokenizer, predictions) -> None:
    """The decoded translations of an evaluation, one line per evaluated sentence in corpus order (as
    `TokenBatchingSeq2SeqTrainer.evaluation_loop` returns them, whatever the number of processes)."""
    texts = tokenizer.batch_decode(predictions, skip_special_tokens=True)
    Path(path).write_text("".join(" ".join(t.splitlines()).strip() + "\n" for t in texts), encoding="utf-8")


def _minimal_model_card(metrics: Mapping, recipe: Mapping | None) -> str:
    r = recipe or {}
    lines = [
        "---",
        "library_name: transformers",
        "tags: [translation, transformer, vaswani2017]",
        f"language: [{r.get('src_lang', 'en')}, {r.get('tgt_lang', 'de')}]",
        "---",
        "",
        f"# Transformer ({r.get('_recipe_name', 'custom recipe')})",
        "",
        "The original Transformer (Vaswani et al., 2017, \"Attention Is All You Need\") trained with `vaswani_hf`.",
        "Load with `AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)`.",
        "",
        "## Metrics",
        "",
    ]
    for k, v in sorted(metrics.items()):
        if isinstance(v, (int, float)):
            lines.append(f"- {k}: {v:.4g}" if isinstance(v, float) else f"- {k}: {v}")
    lines += ["", "Plots: `loss.png`, `learning_rate.png`, `bleu.png`; all numbers in `training_metrics.json`.", ""]
    return "\n".join(lines)


def _sacrebleu_signatures(tokenize: str) -> dict[str, str]:
    """The sacreBLEU signatures of the scores `make_compute_metrics` computes (one reference, `tokenize`, defaults
    otherwise), taken from sacrebleu itself on a one-sentence corpus so that they name the installed version."""
    import sacrebleu

    bleu, chrf = sacrebleu.metrics.BLEU(tokenize=tokenize), sacrebleu.metrics.CHRF()
    bleu.corpus_score(["a"], [["a"]])
    chrf.corpus_score(["a"], [["a"]])
    return {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())}


def card_inputs_from_recipe(metrics: Mapping[str, Any], recipe: Mapping[str, Any] | None) -> tuple[dict, dict]:
    """(scores, training_info) for `vaswani_hf.hub.write_model_card`: only real test scores, named by what they are
    (`bleu_tok_none` for pre-tokenized references, else sacreBLEU), and the facts of the run."""
    r = dict(recipe or {})
    scores = {}
    bleu_name = "bleu_tok_none" if r.get("bleu_tokenize") == "none" else "sacrebleu"
    signatures = _sacrebleu_signatures(r.get("bleu_tokenize") or "13a")
    for key, name, metric in (("test/bleu", bleu_name, "bleu"), ("test/chrf", "chrf", "chrf")):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            scores[name] = {"score": float(v), "signature": signatures[metric]}
    info: dict[str, Any] = {"source_lang": r.get("src_lang", "en"), "target_lang": r.get("tgt_lang", "de")}
    if scores:
        if r.get("data_format") == "hub":
            info["eval_dataset"] = {"name": f"{r.get('hub_dataset')} {r.get('test_data')}",
                                    "id": r.get("hub_dataset"), "config": r.get("hub_config"),
                                    "split": r.get("test_data")}
        elif r.get("data_format") == "sample":
            info["eval_dataset"] = {"name": f"vaswani_hf bundled sample corpus, {r.get('test_data')} split"}
        else:
            where = "/".join(Path(str(r.get("data_dir") or "")).parts[-2:])  # e.g. multi30k/tok
            info["eval_dataset"] = {"name": f"{where + '/' if where else ''}{r.get('test_data')}"}
    facts = {
        "dataset_name": r.get("hub_dataset") or r.get("data_dir") or r.get("data_format"),
        "steps": metrics.get("global_step"),
        "tokens_per_batch": (r.get("max_tokens_per_device", 0) * metrics.get("world_size", 1)
                             * metrics.get("gradient_accumulation_steps", 1)) or None,
        "optimizer": f"Adam(beta1={r.get('adam_beta1')}, beta2={r.get('adam_beta2')}, eps={r.get('adam_epsilon')})",
        "lr_schedule": "d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (Section 5.3)"
                       + (f" x {r.get('lr_multiplier')}" if r.get("lr_multiplier", 1.0) != 1.0 else ""),
        "warmup_steps": r.get("warmup_steps"),
        "dropout": r.get("dropout"),
        "label_smoothing": r.get("label_smoothing"),
        "checkpoint_averaging": (f"last {len(metrics['averaged_checkpoints'])} checkpoints"
                                 if metrics.get("averaged_checkpoints") else "none"),
        "training_time": (f"{metrics['train_seconds'] / 60:.1f} min on {metrics.get('world_size', 1)} process(es)"
                          if metrics.get("train_seconds") else None),
        "seed": r.get("seed"),
    }
    info.update({k: v for k, v in facts.items() if v is not None})
    return scores, info


def export_hub_folder(model, tokenizer, out_dir: str | os.PathLike, metrics: Mapping[str, Any] | None = None, *,
                      recipe: Mapping[str, Any] | None = None, history: Sequence[dict] | None = None,
                      extra_files: Sequence[str | os.PathLike] = ()) -> Path:
    """Write a Hub-ready folder: model weights (safetensors) + config + generation config + modeling code (auto_map,
    via `save_pretrained` of the registered classes), tokenizer, `training_metrics.json` (everything measured),
    `recipe.yaml`, PNG plots and a model card.

    The card comes from `vaswani_hf.hub.write_model_card(folder, scores, training_info)` (which also writes the
    card's `metrics.json`) when that module is importable; if it is missing or refuses the inputs, a minimal
    README.md is written here instead (with a warning). `model` may be a `Trainer` (its unwrapped model is taken).
    Everything is written to a temporary folder that is renamed into place.
    """
    if hasattr(model, "model") and hasattr(model, "args") and hasattr(model, "accelerator"):  # a Trainer
        model = model.accelerator.unwrap_model(model.model)
    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    metrics = dict(metrics or {})
    from .generation import save_pretrained_with_pipeline
    from .hub import add_handler
    from .modeling_vaswani import default_generation_config

    # Seq2SeqTrainer writes transformers' defaults (max_length=20, ...) into the generation config while it
    # evaluates: ship the paper's decoding settings (Section 6.1) instead.
    model.generation_config = default_generation_config(model.config)
    if tokenizer is not None:  # + the translation pipeline (custom_pipelines), so pipeline("translation", ...) works
        save_pretrained_with_pipeline(model, tokenizer, tmp)
    else:
        model.save_pretrained(tmp)
    add_handler(tmp)  # Inference Endpoints handler.py + requirements.txt
    write_json(tmp / "training_metrics.json", metrics)
    if recipe is not None:
        (tmp / "recipe.yaml").write_text(
            yaml.safe_dump({k: v for k, v in recipe.items() if not k.startswith("_")}, sort_keys=False))
    if history:
        plot_history(history, tmp)
    for f in extra_files:
        if Path(f).is_file():
            shutil.copy2(f, tmp / Path(f).name)
    card_written = False
    try:
        from .hub import write_model_card
    except ImportError:
        write_model_card = None
    if write_model_card is not None:
        scores, info = card_inputs_from_recipe(metrics, recipe)
        try:
            write_model_card(tmp, scores, info)
            card_written = (tmp / "README.md").is_file()
        except Exception as e:  # a card problem must not lose the trained model
            logger.warning("vaswani_hf.hub.write_model_card failed (%s: %s); writing a minimal README.md",
                           type(e).__name__, e)
    if not card_written:
        (tmp / "README.md").write_text(_minimal_model_card(metrics, recipe), encoding="utf-8")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.rename(tmp, out_dir)
    return out_dir


# =====================================================================================================================
# The training run
# =====================================================================================================================


def setup_logging(level=logging.INFO) -> None:
    import datasets
    import transformers

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        level=level, stream=sys.stdout, force=True)
    transformers.utils.logging.set_verbosity_info() if level <= logging.DEBUG else \
        transformers.utils.logging.set_verbosity_warning()
    datasets.utils.logging.set_verbosity_warning()


def _load_split(r: dict, key: str, split_name: str):
    from .data import load_parallel, load_sample_corpus

    value = r[key]
    if value is None:
        return None
    fmt = r["data_format"]
    if fmt == "sample":
        return load_sample_corpus(value, r["src_lang"], r["tgt_lang"])
    if fmt == "hub":
        return load_parallel(r["hub_dataset"], r["src_lang"], r["tgt_lang"], format="hub", config=r["hub_config"],
                             split=value)
    return load_parallel(str(resolve_path(value, r["data_dir"])), r["src_lang"], r["tgt_lang"], format=fmt)


def _gradient_accumulation(r: dict, world_size: int) -> int:
    if r["gradient_accumulation_steps"] == "auto":
        return max(1, math.ceil(r["tokens_per_step"] / (r["max_tokens_per_device"] * world_size)))
    return int(r["gradient_accumulation_steps"])


def _use_cpu(r: dict) -> bool:
    """CPU training if the recipe asks, if `ACCELERATE_USE_CPU` is set, or if several processes were launched on a
    machine without CUDA. Accelerate's `PartialState(cpu=False)` would otherwise give every process of
    `accelerate launch --multi_gpu --num_processes 2` on a CPU-only machine its own world of size 1 (independent
    rank-0 runs); with cpu=True they form one MULTI_CPU (gloo) group. Also on a machine with no accelerator at all:
    `TrainingArguments` refuses `bf16=True` there unless `use_cpu` is set, although bf16 autocast on CPU is supported
    (and fast on CPUs with AMX/AVX512-BF16)."""
    from accelerate.utils import parse_flag_from_env

    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    has_accelerator = torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    return bool(r["use_cpu"] or parse_flag_from_env("ACCELERATE_USE_CPU")
                or (launched and not torch.cuda.is_available()) or not has_accelerator)


def build_training_arguments(r: dict, world_size: int | None = None):
    from accelerate import PartialState
    from transformers import Seq2SeqTrainingArguments

    if world_size is None:
        world_size = PartialState(cpu=_use_cpu(r)).num_processes
    ga = _gradient_accumulation(r, world_size)
    eval_steps = r["eval_steps"]
    return Seq2SeqTrainingArguments(
        output_dir=r["output_dir"],
        max_steps=r["max_steps"] if r["max_steps"] > 0 else -1,
        num_train_epochs=r["num_train_epochs"],
        learning_rate=paper_base_lr(r["d_model"], r["lr_multiplier"]),
        weight_decay=r["weight_decay"],
        adam_beta1=r["adam_beta1"],
        adam_beta2=r["adam_beta2"],
        adam_epsilon=r["adam_epsilon"],
        max_grad_norm=r["max_grad_norm"],
        gradient_accumulation_steps=ga,
        logging_steps=r["logging_steps"],
        logging_first_step=True,
        eval_strategy="steps" if eval_steps > 0 else "no",
        eval_steps=eval_steps if eval_steps > 0 else None,
        eval_on_start=r["eval_on_start"] and r["valid_data"] is not None,
        save_strategy="no",  # saves are decided by WallClockCallback (time, steps, end of training)
        save_total_limit=r["keep_last"] if r["keep_last"] > 0 else None,
        predict_with_generate=True,
        generation_num_beams=r["eval_num_beams"],
        seed=r["seed"],
        report_to=[] if r["report_to"] == "none" else r["report_to"],
        disable_tqdm=r["disable_tqdm"],
        use_cpu=_use_cpu(r),
        bf16=r["bf16"],
        fp16=r["fp16"],
        dataloader_num_workers=r["dataloader_num_workers"],
        dataloader_pin_memory=torch.cuda.is_available() and not _use_cpu(r),
        ddp_find_unused_parameters=False,
        remove_unused_columns=True,
        per_device_train_batch_size=1,  # ignored: token batching
        per_device_eval_batch_size=1,
    )


def run_training(r: dict, callbacks: Sequence[TrainerCallback] = ()) -> dict:
    """Run a validated recipe end to end: data, tokenizer, model, training, averaging, evaluation, export.
    `callbacks` are added to the Trainer's (e.g. to observe the run in tests).

    Returns the final metrics (also written to OUTPUT_DIR/metrics.json on the main process).
    """
    from accelerate import PartialState
    from transformers import set_seed

    from .data import Seq2SeqCollator, prepare_dataset
    from .evaluation import make_compute_metrics
    from .modeling_vaswani import VaswaniForConditionalGeneration
    from .tokenization import load_tokenizer, train_bpe_tokenizer

    setup_logging()
    if r["torch_threads"] > 0:
        torch.set_num_threads(r["torch_threads"])
    state = PartialState(cpu=_use_cpu(r))
    out = Path(r["output_dir"])
    world = state.num_processes
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        if (out / STAGING_DIR).exists():  # leftovers of a save interrupted by a crash
            shutil.rmtree(out / STAGING_DIR)
        (out / "recipe.yaml").write_text(
            yaml.safe_dump({k: v for k, v in r.items() if not k.startswith("_")}, sort_keys=False))
    state.wait_for_everyone()
    logger.info("recipe %s | world size %d (%s) | process %d", r["_recipe_name"], world, state.distributed_type,
                state.process_index)
    write_json(out / f"run_info_rank{state.process_index}.json",
               {"world_size": world, "process_index": state.process_index,
                "distributed_type": str(state.distributed_type), "device": str(state.device),
                "torch_threads": torch.get_num_threads()})

    # --- data and tokenizer (Section 5.1: one BPE vocabulary shared by source and target)
    t_data = time.time()
    train_raw = _load_split(r, "train_data", "train")
    if r["max_train_samples"] > 0:
        train_raw = train_raw.select(range(min(r["max_train_samples"], len(train_raw))))
    valid_raw = _load_split(r, "valid_data", "validation")
    if valid_raw is not None and r["max_eval_samples"] > 0:
        valid_raw = valid_raw.select(range(min(r["max_eval_samples"], len(valid_raw))))
    test_raw = _load_split(r, "test_data", "test")
    tok_dir = Path(r["tokenizer_path"]) if r["tokenizer_path"] else out / "tokenizer"
    with state.main_process_first():
        if tok_dir.is_dir():
            tokenizer = load_tokenizer(tok_dir)
            logger.info("tokenizer loaded from %s (%d tokens)", tok_dir, len(tokenizer))
        else:
            tokenizer = train_bpe_tokenizer(train_raw, vocab_size=r["vocab_size"],
                                            min_frequency=r["bpe_min_frequency"], lowercase=r["lowercase"],
                                            save_dir=tok_dir, show_progress=not r["disable_tqdm"])
            logger.info("trained joint BPE: %d tokens -> %s", len(tokenizer), tok_dir)
    prep = dict(num_proc=r["preprocessing_num_workers"])
    train_ds, train_report = prepare_dataset(train_raw, tokenizer, r["src_lang"], r["tgt_lang"],
                                             max_length=r["max_length"], max_ratio=r["max_length_ratio"], **prep)
    logger.info("training pairs: %s", train_report)
    valid_ds = prepare_dataset(valid_raw, tokenizer, r["src_lang"], r["tgt_lang"], max_length=None,
                               max_ratio=None, **prep)[0] if valid_raw is not None else None
    test_ds = prepare_dataset(test_raw, tokenizer, r["src_lang"], r["tgt_lang"], max_length=None, max_ratio=None,
                              **prep)[0] if test_raw is not None else None
    data_seconds = time.time() - t_data

    # --- model (Table 3 settings from the recipe)
    config = model_config_from_recipe(r, vocab_size=len(tokenizer))
    set_seed(r["seed"])  # the same initial weights on every run and rank
    model = VaswaniForConditionalGeneration(config)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("model: d_model=%d d_ff=%d heads=%d layers=%d/%d vocab=%d params=%.2fM", config.d_model,
                config.d_ff, config.num_heads, config.num_encoder_layers, config.num_decoder_layers,
                config.vocab_size, n_params / 1e6)

    args = build_training_arguments(r, world)
    logger.info("batching: %d tokens/device x %d processes x %d accumulation = %d tokens per update (target)",
                r["max_tokens_per_device"], world, args.gradient_accumulation_steps,
                r["max_tokens_per_device"] * world * args.gradient_accumulation_steps)
    batch_log = out / f"batches_rank{state.process_index}.jsonl" if r["debug_log_batches"] else None
    if batch_log is not None and batch_log.exists() and not r["resume"]:
        batch_log.unlink()
    collator = BatchStatsCollator(Seq2SeqCollator(), log_path=batch_log)
    history_path = out / "history.jsonl"
    callbacks = [WallClockCallback(r["save_every_minutes"], r["max_train_minutes"], r["save_steps"]),
                 SamplerEpochCallback(), HistoryCallback(history_path), *callbacks]
    trainer_cls = _make_trainer_class()
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=valid_ds,
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=make_compute_metrics(tokenizer, tokenize=r["bleu_tokenize"]) if valid_ds is not None else None,
        callbacks=callbacks,
        optimizer_cls_and_kwargs=paper_optimizer_cls_and_kwargs(r),
        max_tokens=r["max_tokens_per_device"],
        eval_max_tokens=r["eval_max_tokens"] or r["max_tokens_per_device"],
        max_sentences=r["max_sentences"] or None,
        paper_warmup_steps=r["warmup_steps"],
    )

    resume = None
    if r["resume"]:
        resume = get_last_checkpoint(str(out)) if out.is_dir() else None
        if resume is None:
            logger.warning("--resume: no checkpoint in %s, starting from scratch", out)
        else:
            logger.info("resuming from %s", resume)
    t_train = time.time()
    train_result = trainer.train(resume_from_checkpoint=resume)
    train_seconds = time.time() - t_train
    metrics: dict[str, Any] = {f"train/{k}": v for k, v in train_result.metrics.items()}
    metrics.update({"world_size": world, "global_step": trainer.state.global_step,
                    "gradient_accumulation_steps": args.gradient_accumulation_steps,
                    "params": n_params, "data_prep_seconds": data_seconds, "train_seconds": train_seconds,
                    "filter_report": train_report.as_dict()})
    stats = collator.stats()
    if world > 1:
        import torch.distributed as dist

        t = torch.tensor([stats["train_src_tokens"], stats["train_tgt_tokens"]], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t)
        stats["train_src_tokens"], stats["train_tgt_tokens"] = int(t[0]), int(t[1])
    stats["train_tgt_tokens_per_second"] = stats["train_tgt_tokens"] / max(train_seconds, 1e-9)
    metrics.update(stats)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    if losses:
        metrics["first_logged_loss"], metrics["last_logged_loss"] = losses[0], losses[-1]

    # --- Section 6.1: average the last N checkpoints
    trainer.accelerator.wait_for_everyone()
    averaged_from: list[str] = []
    if r["average_last"] > 1:
        ckpts = last_checkpoints(out, r["average_last"])
        if len(ckpts) >= 2:
            avg_dir = out / "averaged"
            if state.is_main_process:
                save_averaged_checkpoint(ckpts, avg_dir)
            trainer.accelerator.wait_for_everyone()
            from safetensors.torch import load_file

            load_averaged_weights(trainer.accelerator.unwrap_model(trainer.model),
                                  load_file(str(avg_dir / "model.safetensors")))
            averaged_from = [c.name for c in ckpts]
            logger.info("averaged %d checkpoints: %s", len(ckpts), ", ".join(averaged_from))
        else:
            logger.warning("average_last=%d but only %d checkpoint(s) exist: using the final weights",
                           r["average_last"], len(ckpts))
    metrics["averaged_checkpoints"] = averaged_from

    # --- validation and test with the final (averaged) model; beam from generation_config unless overridden
    num_beams = r["test_num_beams"] or trainer.accelerator.unwrap_model(trainer.model).generation_config.num_beams
    if test_ds is not None and valid_ds is None:
        trainer.compute_metrics = make_compute_metrics(tokenizer, tokenize=r["bleu_tokenize"])
    for split, dataset in (("valid", valid_ds), ("test", test_ds)):
        if dataset is None:
            continue
        pred = trainer.predict(dataset, metric_key_prefix=split, num_beams=num_beams)
        metrics.update({k.replace(f"{split}_", f"{split}/", 1): v for k, v in pred.metrics.items()})
        if state.is_main_process and pred.predictions is not None:  # every sentence once, in corpus order
            write_hypotheses(out / f"{split}_hypotheses.txt", tokenizer, pred.predictions)
    metrics["final_num_beams"] = num_beams

    if state.is_main_process:
        final_model = trainer.accelerator.unwrap_model(trainer.model)
        if r["translate_examples"]:
            from .evaluation import translate_lines

            outs = translate_lines(final_model, tokenizer, r["translate_examples"], num_beams=num_beams,
                                   device=trainer.args.device)
            metrics["examples"] = [{"source": s, "translation": t} for s, t in zip(r["translate_examples"], outs)]
            print("\nTranslations:")
            for s, t in zip(r["translate_examples"], outs):
                print(f"  {s}\n    -> {t}")
        history = read_history(history_path) or trainer.state.log_history
        plots = plot_history(history, out)
        metrics["plots"] = plots
        write_json(out / "metrics.json", metrics)
        export_dir = Path(r["export_dir"]) if r["export_dir"] else out / "hub"
        export_hub_folder(final_model, tokenizer, export_dir, metrics, recipe=r, history=history)
        metrics["export_dir"] = str(export_dir)
        write_json(out / "metrics.json", metrics)
        summary = {k: metrics[k] for k in ("first_logged_loss", "last_logged_loss", "valid/loss", "valid/bleu",
                                           "test/loss", "test/bleu", "train_tgt_tokens_per_second",
                                           "padding_share_tgt") if k in metrics}
        logger.info("done: %s", json.dumps(summary, default=_json_default))
        logger.info("model folder: %s | metrics: %s", export_dir, out / "metrics.json")
    trainer.accelerator.wait_for_everyone()
    return metrics
