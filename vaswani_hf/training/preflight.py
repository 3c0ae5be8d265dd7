"""Everything about a training run that can be checked cheaply is checked before any data is read, any model is
built or any file is written: the recipe's values, its data paths, the output folder, and with `--check` every line
of the corpus files (streamed).

The output folder rule: a new run needs an absent or empty `output_dir`; a folder that holds a previous run is
continued with `--resume` (the newest checkpoint that loads, and only with the same architecture) or replaced with
`--overwrite` (the previous run's files only); anything else is refused with one line that says which.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from .. import io
from ..io import read_json
from .checkpoints import STAGING_DIR, checkpoints, resumable_checkpoint
from .recipe import REPO_ROOT, Recipe, RecipeError

logger = logging.getLogger(__name__)

# What a training run writes into its output_dir (names and glob patterns); `--overwrite` removes exactly these.
RUN_FILES = ("checkpoint-*", STAGING_DIR, "averaged", "hub", "tokenizer", "metrics.json", "history.jsonl",
             "recipe.yaml", "loss.png", "learning_rate.png", "bleu.png", "run_info_rank*.json",
             "batches_rank*.jsonl", "*_hypotheses.txt")
# The model keys that must agree between a checkpoint and the recipe that resumes it (VaswaniConfig field names).
ARCHITECTURE_KEYS = ("d_model", "d_ff", "num_heads", "num_encoder_layers", "num_decoder_layers", "position_encoding",
                     "sinusoid_layout", "tie_word_embeddings")


def resolve_dir(path: str | os.PathLike) -> Path:
    """A folder path: absolute as given; relative, looked up in the current folder, then in the repository."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_absolute():
        return p
    for base in (Path.cwd(), REPO_ROOT):
        if (base / p).is_dir():
            return (base / p).resolve()
    return (Path.cwd() / p).resolve()


def resolve_path(path: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> Path:
    """A corpus path (a file or a Moses prefix) joined to `data_dir`; a relative result is looked up in the current
    folder first, then in the repository."""
    p = Path(os.path.expanduser(str(path)))
    if not p.is_absolute() and data_dir is not None:
        p = resolve_dir(data_dir) / p
    if not p.is_absolute():
        for base in (Path.cwd(), REPO_ROOT):
            if (base / p).exists() or any((base / p).parent.glob((base / p).name + ".*")):
                return (base / p).resolve()
        return (Path.cwd() / p).resolve()
    return p


# ---------------------------------------------------------------------------------------------------------------------
# The recipe's values
# ---------------------------------------------------------------------------------------------------------------------

_POSITIVE = ("vocab_size", "d_model", "d_ff", "num_heads", "num_encoder_layers", "num_decoder_layers",
             "warmup_steps", "logging_steps", "eval_num_beams")
_NOT_NEGATIVE = ("torch_threads", "max_train_samples", "max_eval_samples", "tokens_per_step", "max_sentences",
                 "eval_max_tokens", "save_every_minutes", "save_steps", "keep_last", "average_last",
                 "max_train_minutes", "eval_steps", "test_num_beams", "dataloader_num_workers", "weight_decay",
                 "max_grad_norm", "bpe_min_frequency")


def validate_recipe(recipe: Recipe, check_paths: bool = True) -> Recipe:
    """Value ranges and cross-key rules, then (with `check_paths`) the data paths. Raises RecipeError naming the key."""
    for name in _POSITIVE:
        if recipe[name] <= 0:
            raise RecipeError(f"{name} must be positive, got {recipe[name]!r}")
    for name in _NOT_NEGATIVE:
        if recipe[name] < 0:
            raise RecipeError(f"{name} must be >= 0, got {recipe[name]!r}")
    if recipe.vocab_size <= 260:
        raise RecipeError(f"vocab_size must exceed the 4 special tokens + 256 byte symbols, got {recipe.vocab_size}")
    if recipe.max_steps <= 0 and recipe.num_train_epochs <= 0:
        raise RecipeError("set max_steps > 0 or num_train_epochs > 0")
    if recipe.max_tokens_per_device != "auto" and recipe.max_tokens_per_device <= 0:
        raise RecipeError(f"max_tokens_per_device must be positive or auto, got {recipe.max_tokens_per_device!r}")
    for name in ("gradient_accumulation_steps", "max_tokens_per_device"):
        if recipe[name] == "auto" and recipe.tokens_per_step <= 0:
            raise RecipeError(f"{name}: auto needs tokens_per_step > 0 (paper: 25000)")
    if recipe.max_tokens_per_device == "auto" and recipe.gradient_accumulation_steps != "auto":
        raise RecipeError("max_tokens_per_device: auto chooses the accumulation too: set gradient_accumulation_steps: "
                          "auto")
    if isinstance(recipe.gradient_accumulation_steps, int) and recipe.gradient_accumulation_steps < 1:
        raise RecipeError("gradient_accumulation_steps must be >= 1 or 'auto'")
    if recipe.average_last > 1 and 0 < recipe.keep_last < recipe.average_last:
        raise RecipeError(f"average_last={recipe.average_last} needs keep_last >= {recipe.average_last} (or 0: keep "
                          f"all); got keep_last={recipe.keep_last}")
    if recipe.eval_steps > 0 and recipe.valid_data is None:
        raise RecipeError("eval_steps > 0 needs valid_data (a dev set); set eval_steps 0 or give valid_data")
    if recipe.bf16 and recipe.fp16:
        raise RecipeError("choose at most one of bf16 and fp16")
    for name in ("max_length", "max_length_ratio", "preprocessing_num_workers"):
        if recipe[name] is not None and recipe[name] <= 0:
            raise RecipeError(f"{name} must be positive or null, got {recipe[name]!r}")
    if recipe.report_to == "tensorboard":
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise RecipeError("report_to tensorboard needs `pip install tensorboard`") from None
    if check_paths and recipe.tokenizer_path is not None:
        folder = resolve_dir(recipe.tokenizer_path)
        if not folder.is_dir():
            raise RecipeError(f"tokenizer_path {recipe.tokenizer_path}: folder not found (looked in {Path.cwd()} and "
                              f"{REPO_ROOT}); give a folder written by vaswani-train-tokenizer, or null to train one")
        read_json(folder / "tokenizer.json", what=f"tokenizer.json of tokenizer_path {folder}")
    try:
        recipe.model_config(vocab_size=recipe.vocab_size)
    except (ValueError, TypeError) as e:
        raise RecipeError(f"model settings: {' '.join(str(e).split())}") from None
    if check_paths:
        check_data_paths(recipe)
    return recipe


def corpus_sources(recipe: Recipe) -> list[tuple[str, Path]]:
    """(recipe key, file or Moses prefix) of each split of a file-based recipe."""
    return [(name, resolve_path(recipe[name], recipe.data_dir)) for name in ("train_data", "valid_data", "test_data")
            if recipe[name] is not None]


def check_data_paths(recipe: Recipe) -> None:
    """Missing corpus files are an error before anything else happens (not after minutes of tokenisation)."""
    from ..data.corpora import CorpusError, moses_paths, sample_corpus_path

    fmt = recipe.data_format
    if fmt == "hub":
        if not recipe.hub_dataset:
            raise RecipeError("data_format hub needs hub_dataset (e.g. wmt14) and usually hub_config (e.g. de-en)")
        return  # splits are checked by datasets.load_dataset (network/cache)
    if fmt == "sample":
        for split in (recipe.train_data, recipe.valid_data, recipe.test_data):
            for lang in (recipe.src_lang, recipe.tgt_lang):
                if split is not None and not (sample_corpus_path() / f"{split}.{lang}").is_file():
                    raise RecipeError(f"sample corpus file missing: {sample_corpus_path() / f'{split}.{lang}'}")
        return
    if recipe.data_dir is not None and not resolve_dir(recipe.data_dir).is_dir():
        raise RecipeError(f"data_dir not found: {recipe.data_dir} (looked in {Path.cwd()} and {REPO_ROOT})")
    for name, path in corpus_sources(recipe):
        if fmt == "moses":
            try:
                moses_paths(path, recipe.src_lang, recipe.tgt_lang)
            except CorpusError as error:
                raise RecipeError(f"{name}: {error}") from None
        elif path.is_dir():
            raise RecipeError(f"{name}: {path} is a folder; data_format {fmt} expects a file")
        elif not path.is_file():
            raise RecipeError(f"{name}: corpus file not found: {path}")


def check_corpora(recipe: Recipe) -> dict[str, tuple[int, int]]:
    """`--check`: every line of every corpus file decoded and parsed, streamed (encoding, line counts, TSV fields,
    JSON); a training split without one usable pair is refused. Returns {key: (pairs, usable pairs)}."""
    from ..data.corpora import scan_corpus

    if recipe.data_format in ("hub", "sample"):
        return {}
    counts = {}
    for name, path in corpus_sources(recipe):
        counts[name] = scan_corpus(path, recipe.src_lang, recipe.tgt_lang, recipe.data_format)
        if counts[name][1] == 0:
            raise RecipeError(f"{name}: {path} has no sentence pair with both sides non-empty "
                              f"({counts[name][0]} pairs); nothing to {'train on' if name == 'train_data' else 'score'}")
    return counts


# ---------------------------------------------------------------------------------------------------------------------
# The output folder
# ---------------------------------------------------------------------------------------------------------------------


def previous_run_files(output_dir: Path) -> list[Path]:
    """The files and folders of a previous training run in `output_dir` (see RUN_FILES)."""
    return sorted({p for pattern in RUN_FILES for p in output_dir.glob(pattern)})


def check_output_dir(recipe: Recipe, *, overwrite: bool = False) -> Path | None:
    """Decide what this run may do with `output_dir`, before anything is written. Returns the checkpoint to resume
    from (None: start from scratch). Refuses: output_dir is a file; it holds a previous run and neither --resume nor
    --overwrite was given; it holds other files only; --resume with a checkpoint of another architecture."""
    out = io.check_output_dir(recipe.output_dir, overwrite=True, what="output_dir")  # a folder (or none yet)
    export = Path(recipe.export_dir) if recipe.export_dir else None
    if export is not None and out not in export.parents:
        io.check_output_dir(export, overwrite=overwrite or recipe.resume, what="export_dir")
    if not out.is_dir() or not any(out.iterdir()):
        if recipe.resume:
            logger.warning("--resume: %s holds no run yet, starting from scratch", out)
        return None
    previous = previous_run_files(out)
    if recipe.resume:
        checkpoint, skipped = resumable_checkpoint(out)
        if checkpoint is None and checkpoints(out):
            raise RecipeError(f"--resume: no checkpoint in {out} loads ({'; '.join(skipped)}); remove them or train "
                              "into another output_dir")
        if checkpoint is not None:
            check_same_architecture(recipe, checkpoint)
            for reason in skipped:
                logger.warning("--resume: skipping %s; resuming from %s", reason, checkpoint.name)
        return checkpoint
    if overwrite:
        return None
    if previous:
        raise RecipeError(f"output_dir {out} holds a previous run ({previous[0].name}, ...); pass --resume to continue "
                          "it, --overwrite to replace it, or choose another output_dir")
    raise RecipeError(f"output_dir {out} is not empty and holds no training run; choose an empty or new folder")


def check_same_architecture(recipe: Recipe, checkpoint: Path) -> None:
    """--resume refuses, before writing anything, a recipe whose model differs from the checkpoint's."""
    config = read_json(checkpoint / "config.json")
    different = [f"{k}={config.get(k)!r} in {checkpoint.name}, {recipe[k]!r} in the recipe" for k in ARCHITECTURE_KEYS
                 if k in config and config[k] != recipe[k]]
    if different:
        raise RecipeError(f"--resume: the recipe's model differs from the checkpoint's ({'; '.join(different)}); "
                          "resume with the same architecture, or train into another output_dir")


def clear_previous_run(output_dir: Path) -> list[str]:
    """`--overwrite`: remove the previous run's files (RUN_FILES only; anything else stays). Returns their names."""
    removed = []
    for path in previous_run_files(output_dir):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        removed.append(path.name)
    return removed
