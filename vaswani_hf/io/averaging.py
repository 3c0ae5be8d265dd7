"""Read the checkpoints that Section 6.1 averages ("we used a single model obtained by averaging the last 5
checkpoints") and return their average: `average_checkpoints` checks that the folders agree (`check_checkpoints_agree`:
distinct, of one architecture, one tokenizer and, by default, one run), then loads each one's weights checked
(`load_checked_weights`) and sums them in float64.

This is reading model folders, as `io.models` does for one folder, so it lives beside it: the training run
(`training.checkpoints.average_last`) and `vaswani-average-checkpoints` both average through it, and what they write
from the average is theirs. transformers has no averaging; fairseq's averages its own format only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import safetensors.torch
import torch

from ..errors import UsageError
from ..settings import MODEL_SETTINGS
from . import proofs
from .binary_files import check_safetensors
from .files import CONFIG, TRAINER_STATE, read_json, vocabulary_fingerprint
from .models import (
    WEIGHTS,
    WEIGHTS_INDEX,
    check_finite_weights,
    check_weight_dtypes,
    weight_files,
)


def load_checked_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Return the tensors of a checkpoint's weights (model.safetensors, or a sharded save's shards), after checking
    that each file matches its checksum from when the checkpoint was written and that every tensor is floating point
    and finite: a NaN of a diverged run would average into every tensor it meets."""
    files = weight_files(folder)
    names = {path.name for path in files} | {WEIGHTS_INDEX}
    proof = proofs.manifest_problem(folder, lambda name: name in names)
    if proof is not None and proof != f"no {proofs.MANIFEST}":  # The checkpoint changed since it was written.
        raise UsageError(f"{folder}: {proof}; it is not averaged: remove it, or average other checkpoints")
    weights = {}
    for path in files:
        check_weight_dtypes(check_safetensors(path), path)
        shard = safetensors.torch.load_file(str(path))
        check_finite_weights(shard, path)
        weights.update(shard)
    return weights


# These config.json fields decide the function the weights compute (dropout does not); averaged checkpoints agree.
ARCHITECTURE_FIELDS = frozenset(name for name, s in MODEL_SETTINGS.items() if s.architecture)


def _digest(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


def _check_distinct(folders: Sequence[Path]) -> None:
    """Check that each checkpoint is given once: not the same folder under a second name (a `..` path, a symbolic
    link), nor the same weights (a hard link, a copy), which would weight one checkpoint twice. Only weights of equal
    size are hashed; a sharded checkpoint and a single-file one never compare equal here (their tensors are compared by
    value)."""
    files = {folder: weight_files(folder) for folder in folders}
    sizes = {folder: [path.stat().st_size for path in paths] for folder, paths in files.items()}
    for i, folder in enumerate(folders):
        ours = files[folder]
        for earlier in (f for f in folders[:i] if sizes[f] == sizes[folder]):
            theirs = files[earlier]
            if all(os.path.samefile(a, b) for a, b in zip(theirs, ours)) or _digest(theirs) == _digest(ours):
                same = (
                    f"{ours[0]} is the same file as, or holds exactly the weights of, {theirs[0]}"
                    if len(ours) == 1
                    else f"the weight shards of {folder} are the same files as, or hold exactly the weights of, "
                    f"those of {earlier}"
                )
                raise UsageError(
                    f"{same}: one checkpoint given twice (a second name, a link or a copy); give each checkpoint once"
                )


def _check_one_run(folders: Sequence[Path]) -> None:
    """Check that the checkpoints are of one run: an earlier one's trainer_state.json log history begins the later
    one's, while independent runs (another seed) differ from the first logged step. Those without the file pass."""
    states = sorted(
        ((read_json(f / TRAINER_STATE.name, TRAINER_STATE), f) for f in folders if (f / TRAINER_STATE.name).is_file()),
        key=lambda pair: pair[0]["global_step"],
    )
    for (early, early_folder), (late, late_folder) in zip(states, states[1:]):
        ours, theirs = early.get("log_history") or [], late.get("log_history") or []
        for mine, other in zip(ours, theirs):
            if mine != other:
                raise UsageError(
                    f"{late_folder} and {early_folder} are checkpoints of different runs (their trainer_state.json "
                    f"log histories differ at step {mine.get('step', '?')}); Section 6.1 averages the last "
                    "checkpoints of one run: give those, or pass --allow_other_runs to average them anyway"
                )


def check_checkpoints_agree(folders: Sequence[str | os.PathLike], one_run: bool = True) -> None:
    """Check that checkpoints averaged together (Section 6.1: the last of one run) are distinct, of one architecture
    (ARCHITECTURE_FIELDS; other sinusoid layouts give tensors of the same shapes but another function), of one
    tokenizer and, with `one_run`, of one run. Otherwise raise UsageError naming both and the first difference."""
    folders = [Path(f) for f in folders]
    _check_distinct(folders)
    first = folders[0]
    config = read_json(first / "config.json", CONFIG)
    vocabulary = vocabulary_fingerprint(first)
    for folder in folders[1:]:
        other = read_json(folder / "config.json", CONFIG)
        for key in sorted((set(config) | set(other)) & ARCHITECTURE_FIELDS):
            if config.get(key) != other.get(key):
                raise UsageError(
                    f"{folder} and {first} are of different architectures (config.json field {key}: "
                    f"{json.dumps(other.get(key))} against {json.dumps(config.get(key))}); average "
                    "checkpoints of one run"
                )
        theirs = vocabulary_fingerprint(folder)
        if theirs != vocabulary:
            detail = (
                f"has no tokenizer.json, {first} has one"
                if theirs is None
                else f"has a tokenizer.json, {first} has none"
                if vocabulary is None
                else f"and {first} have different tokenizers (tokenizer.json: other tokens or merges)"
            )
            raise UsageError(
                f"{folder} {detail}: they may give other ids to the same text; average checkpoints of one run"
            )
    if one_run:
        _check_one_run(folders)


def average_checkpoints(folders: Sequence[str | os.PathLike], one_run: bool = True) -> dict[str, torch.Tensor]:
    """Return the element-wise mean of the weights of agreeing checkpoints (Section 6.1), accumulated in float64 and
    returned in each tensor's dtype."""
    if not folders:
        raise UsageError("no checkpoints to average")
    for folder in folders:
        if not weight_files(folder):
            raise UsageError(f"{folder}: no {WEIGHTS} (nor {WEIGHTS_INDEX}); averaging needs safetensors checkpoints")
    check_checkpoints_agree(folders, one_run)
    weights = load_checked_weights(Path(folders[0]))  # Every tensor is floating point.
    dtypes = {k: v.dtype for k, v in weights.items()}
    total = {k: v.to(torch.float64) for k, v in weights.items()}
    for folder in folders[1:]:
        weights = load_checked_weights(Path(folder))
        if set(weights) != set(total):
            diff = sorted(set(weights) ^ set(total))[:5]
            raise UsageError(
                f"{folder} has other tensors than {folders[0]} (e.g. {diff}); average checkpoints of one run"
            )
        for k, v in weights.items():
            if v.shape != total[k].shape:
                raise UsageError(
                    f"{folder}: {k} has shape {tuple(v.shape)}, expected {tuple(total[k].shape)} as in "
                    f"{folders[0]}; average checkpoints of one architecture"
                )
            total[k] += v.to(torch.float64)
    return {k: (v / len(folders)).to(dtypes[k]) for k, v in total.items()}
