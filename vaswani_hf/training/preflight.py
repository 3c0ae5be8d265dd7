"""Decide what a training run may do with its output, export and tokenizer folders, before any data is read, any
model is built or any file is written.

A new run needs an absent or empty `output_dir`. A previous run there (a folder that a run marked `TRAINING_RUN` when
it took it) is continued with `--resume`, from the newest checkpoint that loads, with the RNG state for this number of
processes and the same architecture; a key changed since the run's recipe.yaml is named. With `--overwrite` it is
replaced instead, its `RUN_FILES` only. A folder another run holds, or anything else, is refused in one line. The
export folder is replaced only when it is this run's own or a Hub folder this package wrote.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import io
from ..hub.folder import HUB_FOLDER
from ..io.files import vocabulary_fingerprint
from ..settings import MODEL_SETTINGS
from .checkpoints import STAGING_DIR, checkpoints, resumable_checkpoint
from .recipe import MODEL_KEYS, Recipe, RecipeError, read_yaml_mapping

logger = logging.getLogger(__name__)

# What a training run writes into its output_dir (names and glob patterns); `--overwrite` removes exactly these.
RUN_FILES = (
    "checkpoint-*",
    STAGING_DIR,
    "averaged",
    "hub",
    "tokenizer",
    "metrics.json",
    "history.jsonl",
    "recipe.yaml",
    "loss.png",
    "learning_rate.png",
    "bleu.png",
    "run_info_rank*.json",
    "batches_rank*.jsonl",
    "*_hypotheses.txt",
)
# The model keys that must agree between a checkpoint and the recipe that resumes it: the recipe's model keys whose
# VaswaniConfig declaration says the weights' meaning depends on them (dropout may change on resume).
ARCHITECTURE_KEYS = tuple(name for name in MODEL_KEYS if MODEL_SETTINGS[name].architecture)
# The keys that decide the run's tokenizer (Section 5.1's shared BPE) when it trains one: a resumed run keeps the
# tokenizer its checkpoint was trained with, so a change of one of them would only be recorded, not done. (A
# tokenizer_path is compared by content: the checkpoint's tokenizer.json.)
TOKENIZER_KEYS = ("vocab_size", "bpe_min_frequency", "lowercase")
# The keys that do not change what a resumed run computes: a change of any other is named when the run resumes.
NOT_THE_RUN = ("output_dir", "resume", "description", "disable_tqdm", "report_to")
TRAINING_RUN = "training run"  # A run marks its output_dir with this; --overwrite replaces only such folders.


@dataclass
class OutputDecision:
    """Say what the run does with its output folder: "new", "resume" (from `resume_from`), "overwrite" (removing
    `previous`), "score" (the run trained to `finished_at`, and only averages and scores) or "finished" (nothing to
    do)."""

    start: str
    resume_from: Path | None = None
    previous: list[Path] = field(default_factory=list)
    finished_at: int | None = None

    def describe(self) -> str:
        return {
            "new": "start from scratch",
            "overwrite": f"replace the previous run ({len(self.previous)} entries)",
            "resume": f"resume from {self.resume_from.name if self.resume_from else ''}",
            "score": f"training finished at update {self.finished_at}: average its checkpoints and score them",
            "finished": f"the run finished at update {self.finished_at}: nothing to do",
        }[self.start]


def previous_run_files(output_dir: Path) -> list[Path]:
    """Return the files and folders of a previous training run in `output_dir` (see RUN_FILES)."""
    return sorted({p for pattern in RUN_FILES for p in output_dir.glob(pattern)})


def decide_output_dir(
    recipe: Recipe, out: Path, *, overwrite: bool, processes: int = 1, tokenizer_dir: Path | None = None
) -> OutputDecision:
    """Return the decision on the output folder (see the module docstring), or raise UsageError. `tokenizer_dir` is
    the tokenizer folder the run would use (tokenizer_path, or OUTPUT_DIR/tokenizer); a resumed checkpoint's must
    equal it."""
    if overwrite and recipe.run.resume:
        raise RecipeError("--overwrite replaces the run in output_dir and --resume continues it: pick one")
    io.check_output_dir(out, overwrite=True, what="output_dir", replaced=False)  # It is a folder, or nothing yet.
    if io.folder_in_use(out):
        raise RecipeError(
            f"output_dir {out} is in use by another run (it holds the folder's lock); wait for it to "
            "finish, or choose another output_dir"
        )
    if not out.is_dir() or not io.first_entries(out):
        if recipe.run.resume:
            logger.warning("--resume: %s holds no run yet, starting from scratch", out)
        return OutputDecision("new")
    if not (
        io.written_by(out) == TRAINING_RUN
        or (out / "recipe.yaml").is_file()
        and any(out.glob("checkpoint-*/trainer_state.json"))
    ):  # A run older than the marker is known by its recipe and checkpoints.
        raise RecipeError(
            f"output_dir {out} is not empty ({io.first_entries(out)}) and holds no run of this tool: "
            "--resume and --overwrite only continue or replace a run it wrote; choose another "
            "output_dir"
        )
    if recipe.run.resume:
        return _resume_decision(recipe, out, processes, tokenizer_dir)
    if overwrite:
        return OutputDecision("overwrite", previous=previous_run_files(out))
    raise RecipeError(
        f"output_dir {out} holds a previous run ({io.first_entries(out)}); pass --resume to continue "
        "it, --overwrite to replace it, or choose another output_dir"
    )


def _resume_decision(recipe: Recipe, out: Path, processes: int, tokenizer_dir: Path | None) -> OutputDecision:
    """Decide what `--resume` does, and return that decision.

    Training goes on from the newest complete checkpoint, with its RNG state for this number of processes, because
    otherwise the dropout masks and batch orders would differ. A run whose training is done is "finished" or
    "score"."""
    checkpoint, skipped = resumable_checkpoint(out, processes, rng=False)
    if checkpoint is None and checkpoints(out):
        raise RecipeError(
            f"--resume: no checkpoint in {out} is complete ({'; '.join(skipped)}); remove them, or train "
            "into another output_dir"
        )
    if checkpoint is None:
        return OutputDecision("new")
    check_same_architecture(recipe, checkpoint)
    previous = _previous_recipe(out)
    check_same_tokenizer(recipe, out, checkpoint, tokenizer_dir, previous)
    now = recipe.flat()
    changed = [
        f"{k} {previous[k]!r} -> {now[k]!r}"
        for k in now
        if k not in NOT_THE_RUN and k in previous and previous[k] != now[k]
    ]
    if changed:  # Say so when the run resumed is not the run saved (e.g. a raised max_steps).
        logger.warning("--resume: the recipe differs from the run's %s: %s", out / "recipe.yaml", "; ".join(changed))
    step = io.read_json(checkpoint / "trainer_state.json").get("global_step")  # resumable_checkpoint checked it.
    max_steps = recipe.optimization.max_steps
    if max_steps > 0 and step >= max_steps:  # Training is done; scoring too if metrics.json says so.
        start = "finished" if _recorded_end(out) == step else "score"
        return OutputDecision(start, resume_from=checkpoint, finished_at=step)
    exact, skipped = resumable_checkpoint(out, processes)
    if exact is None:
        advice = (
            "resume with the process count the run was saved with"
            if any("process(es)" in reason for reason in skipped)
            else "remove the damaged checkpoints"
        )
        raise RecipeError(
            f"--resume: no checkpoint in {out} can be resumed exactly ({'; '.join(skipped)}); {advice}, "
            "or train into another output_dir"
        )
    for reason in skipped:
        logger.warning("--resume: skipping %s; resuming from %s", reason, exact.name)
    return OutputDecision("resume", resume_from=exact)


def _recorded_end(out: Path) -> int | None:
    """Return the update at which the run's metrics.json records the end of training, or None if the file is absent
    or unreadable."""
    try:
        metrics = io.read_json(out / "metrics.json")
    except io.UsageError:
        return None
    return metrics.get("global_step") if isinstance(metrics, dict) else None


def check_export_dir(export: Path, out: Path, *, overwrite: bool) -> None:
    """Check that export_dir is this run's own folder (inside output_dir, beside the run's other files) or a folder
    that may be written: absent, empty, or (with --overwrite or --resume) a Hub folder this package wrote."""
    export_r, out_r = export.resolve(), out.resolve()
    if export_r == out_r or export_r in out_r.parents:
        raise RecipeError(
            f"export_dir {export} {'is' if export_r == out_r else 'contains'} output_dir {out}: "
            "exporting would replace the run's checkpoints; choose another export_dir"
        )
    if out_r in export_r.parents:
        first = export_r.relative_to(out_r).parts[0]
        if first != "hub" and any(Path(first).match(pattern) for pattern in RUN_FILES):
            raise RecipeError(
                f"export_dir {export} lies inside {first}, which the run writes itself; choose another export_dir"
            )
        if first == "hub" or not export.exists():
            return
    io.check_output_dir(export, overwrite=overwrite, what="export_dir", kind=HUB_FOLDER)


def check_same_architecture(recipe: Recipe, checkpoint: Path) -> None:
    """Refuse on --resume, before writing anything, a recipe whose model differs from the checkpoint's."""
    config = io.read_json(checkpoint / "config.json")
    # The recipe's config holds the values the model is built with: d_k's None there is d_model // num_heads.
    built = {k: getattr(recipe.model, k) for k in ARCHITECTURE_KEYS}
    different = [
        f"{k}={config.get(k)!r} in {checkpoint.name}, {built[k]!r} in the recipe"
        for k in ARCHITECTURE_KEYS
        if k in config and config[k] != built[k]
    ]
    if different:
        raise RecipeError(
            f"--resume: the recipe's model differs from the checkpoint's ({'; '.join(different)}); "
            "resume with the same architecture, or train into another output_dir"
        )


def _previous_recipe(out: Path) -> dict:
    """Return the recipe the run in `out` was started with (OUTPUT_DIR/recipe.yaml), or {} when it is absent or
    unreadable."""
    try:
        return read_yaml_mapping(out / "recipe.yaml", io.UsageError) if (out / "recipe.yaml").is_file() else {}
    except io.UsageError:
        return {}


def check_same_tokenizer(
    recipe: Recipe, out: Path, checkpoint: Path, tokenizer_dir: Path | None, previous: dict
) -> None:
    """Refuse on --resume a recipe whose TOKENIZER_KEYS differ from the run's recipe.yaml, and a tokenizer folder whose
    tokenizer.json gives other ids than the checkpoint's (the same size is not enough): the run would record one
    tokenizer and use another, or train on other ids than the weights learned. `previous` is the run's recipe.yaml."""
    for key in TOKENIZER_KEYS:
        if key in previous and previous[key] != getattr(recipe.tokenizer, key):
            raise RecipeError(
                f"--resume: {key} is {getattr(recipe.tokenizer, key)!r} in the recipe, {previous[key]!r} in the run's "
                f"{out / 'recipe.yaml'}; a resumed run keeps its tokenizer: resume with {key}: "
                f"{previous[key]!r}, or train into another output_dir"
            )
    if tokenizer_dir is None or not (tokenizer_dir / "tokenizer.json").is_file():
        return
    theirs, ours = vocabulary_fingerprint(checkpoint), vocabulary_fingerprint(tokenizer_dir)
    if theirs is not None and theirs != ours:
        key = "tokenizer_path" if recipe.tokenizer.tokenizer_path else "the run's tokenizer folder"
        was = previous.get("tokenizer_path")
        raise RecipeError(
            f"--resume: {key} {tokenizer_dir} holds another tokenizer than {checkpoint.name} was trained "
            f"with ({tokenizer_dir / 'tokenizer.json'} against {checkpoint / 'tokenizer.json'}: other "
            f"tokens or merges; the run's tokenizer_path: {was!r}); resume with the run's tokenizer, or "
            "train into another output_dir"
        )


def check_tokenizer_path(folder: Path, given: str) -> None:
    """Check that tokenizer_path names a folder with a readable tokenizer.json (written by vaswani-train-tokenizer)."""
    if not folder.is_dir():
        raise RecipeError(
            f"tokenizer_path {given}: folder not found ({folder}); give a folder written by "
            "vaswani-train-tokenizer, or null to train one"
        )
    io.check_tokenizer_file(folder / "tokenizer.json", what=f"tokenizer.json of tokenizer_path {folder}")


def clear_previous_run(output_dir: Path) -> list[str]:
    """Remove the previous run's files for `--overwrite` (RUN_FILES only; anything else stays) and return their
    names."""
    removed = []
    for path in previous_run_files(output_dir):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        removed.append(path.name)
    return removed
