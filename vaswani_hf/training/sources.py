"""Say where a run's data comes from (Section 5.1's training data, a dev set, a test set), with one `Source` per split.

`split_sources(recipe)` makes the sources, and is the only place that branches on `data_format`. A source names its
local `files` (so that `io.check_paths` can refuse an output that overlaps them), `check`s them cheaply, `scan`s every line (`--check`), `load`s the split and
`describe`s itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.corpora import (
    load_parallel,
    load_sample_corpus,
    moses_paths,
    sample_corpus_path,
    scan_corpus,
    usable_pairs,
)
from ..io import UNUSABLE_WORKING_FOLDER, UsageError, check_input_file, reads_once
from .recipe import REPO_ROOT, Recipe, RecipeError

SPLITS = ("train", "valid", "test")


def _look_up(p: Path, found) -> Path:
    """Return `p` if it is absolute. Otherwise return it under the first of the current folder and the repository
    where `found` holds, or else under the current folder. A deleted working folder holds nothing, so then only the
    repository is searched (`io.UNUSABLE_WORKING_FOLDER`)."""
    if p.is_absolute():
        return p
    bases = (REPO_ROOT,) if UNUSABLE_WORKING_FOLDER.get() else (Path.cwd(), REPO_ROOT)
    return (next((b for b in bases if found(b / p)), bases[0]) / p).resolve()


def resolve_dir(path: str | os.PathLike) -> Path:
    """Return a folder path: an absolute one as given, a relative one looked up in the current folder, then in the
    repository."""
    return _look_up(Path(os.path.expanduser(str(path))), Path.is_dir)


def resolve_path(path: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> Path:
    """Return a corpus path (a file or a Moses prefix) joined to `data_dir` and looked up as `resolve_dir` does."""
    p = Path(os.path.expanduser(str(path)))
    if not p.is_absolute() and data_dir is not None:
        p = resolve_dir(data_dir) / p
    return _look_up(p, lambda q: q.exists() or any(q.parent.glob(q.name + ".*")))


@dataclass
class Source:
    """Describe one split of a run's data; `key` is its recipe key (train_data, ...)."""

    key: str
    src_lang: str
    tgt_lang: str

    def files(self) -> dict[str, Path]:
        return {}

    def check(self) -> None:
        """Check cheaply, before any work, that what the split needs exists."""

    def scan(self) -> tuple[int, int] | None:
        """Count the pairs, and those with both sides non-empty, streaming every line; None where only loading can
        tell."""
        return None

    def _load(self):
        raise NotImplementedError

    def load(self, limit: int = 0):
        """Return the split's first `limit` pairs (0 for all), and refuse a split without one usable pair."""
        dataset = self._load()
        require_usable(self, len(dataset), usable_pairs(dataset, self.src_lang, self.tgt_lang))
        return dataset.select(range(min(limit, len(dataset)))) if limit > 0 else dataset

    def describe(self) -> dict[str, Any]:
        """Return the split as a model card names its evaluation data."""
        return {"name": str(self)}


def require_usable(source: Source, pairs: int, usable: int) -> None:
    if usable == 0:
        purpose = "train on" if source.key == "train_data" else "score"
        raise RecipeError(
            f"{source.key}: {source} has no sentence pair with both sides non-empty ({pairs} pairs); "
            f"nothing to {purpose}"
        )


@dataclass
class SampleSource(Source):
    """Read a split of the bundled sample corpus."""

    split: str = "train"

    def __str__(self) -> str:
        return f"the bundled sample corpus, split {self.split}"

    def check(self) -> None:
        for lang in (self.src_lang, self.tgt_lang):
            path = sample_corpus_path() / f"{self.split}.{lang}"
            if not path.is_file():
                raise RecipeError(f"{self.key}: sample corpus file missing: {path} (splits: train, valid, test)")

    def _load(self):
        return load_sample_corpus(self.split, self.src_lang, self.tgt_lang)

    def describe(self) -> dict[str, Any]:
        return {"name": f"vaswani_hf bundled sample corpus, {self.split} split"}


@dataclass
class FileSource(Source):
    """Read local files: a Moses prefix (PREFIX.SRC + PREFIX.TGT), a TSV or a JSONL file."""

    format: str = "moses"
    path: Path = Path()

    def __str__(self) -> str:
        return str(self.path)

    def files(self) -> dict[str, Path]:
        if self.format == "moses":
            return {f"{self.key} ({lang})": Path(f"{self.path}.{lang}") for lang in (self.src_lang, self.tgt_lang)}
        return {self.key: self.path}

    def check(self) -> None:
        if self.format != "moses" and self.path.is_dir():
            raise RecipeError(f"{self.key}: {self.path} is a folder; data_format {self.format} expects a file")
        try:
            paths = moses_paths(self.path, self.src_lang, self.tgt_lang) if self.format == "moses" else (self.path,)
            for path in paths:
                check_input_file(path, "corpus file")
        except UsageError as error:
            raise RecipeError(f"{self.key}: {error}") from None

    def scan(self) -> tuple[int, int]:
        counts = scan_corpus(self.path, self.src_lang, self.tgt_lang, self.format)
        require_usable(self, *counts)
        return counts

    def _load(self):
        return load_parallel(str(self.path), self.src_lang, self.tgt_lang, format=self.format)

    def describe(self) -> dict[str, Any]:
        parts = self.path.parts
        return {"name": "/".join(parts[-3:-1] + (parts[-1],)) if len(parts) >= 3 else str(self.path)}


@dataclass
class HubSource(Source):
    """Read a split of a `datasets` dataset, from the Hub or, offline, its cache."""

    dataset: str = ""
    config: str | None = None
    split: str = "train"

    def __str__(self) -> str:
        return (
            f"{self.dataset} ({self.config}) split {self.split}"
            if self.config
            else f"{self.dataset} split {self.split}"
        )

    def _load(self):
        return load_parallel(
            self.dataset, self.src_lang, self.tgt_lang, format="hub", config=self.config, split=self.split
        )

    def describe(self) -> dict[str, Any]:
        return {"name": f"{self.dataset} {self.split}", "id": self.dataset, "config": self.config, "split": self.split}


def split_sources(recipe: Recipe) -> dict[str, Source | None]:
    """Return the Source of each split ("train", "valid", "test"), or None for a split the recipe leaves out (null)."""
    found: dict[str, Source | None] = {}
    for split in SPLITS:
        key = f"{split}_data"
        value = recipe[key]
        common = dict(key=key, src_lang=recipe.src_lang, tgt_lang=recipe.tgt_lang)
        if value is None:
            found[split] = None
        elif recipe.data_format == "sample":
            found[split] = SampleSource(**common, split=value)
        elif recipe.data_format == "hub":
            found[split] = HubSource(**common, dataset=recipe.hub_dataset, config=recipe.hub_config, split=value)
        else:
            found[split] = FileSource(**common, format=recipe.data_format, path=resolve_path(value, recipe.data_dir))
    return found


def check_read_once(sources: dict[str, Source | None], processes: int) -> None:
    """Refuse a corpus file that can be read only once (a named pipe) when several processes run, since each process
    loads the corpus."""
    if processes == 1:
        return
    for source in sources.values():
        for name, path in (source.files() if source is not None else {}).items():
            if reads_once(path):
                raise RecipeError(
                    f"{name}: {path} is a pipe, which can be read only once, but each of the {processes} processes "
                    "reads the corpus; give a regular file"
                )


def check_data_dir(recipe: Recipe) -> None:
    if (
        recipe.data_dir is not None
        and recipe.data_format not in ("sample", "hub")
        and not resolve_dir(recipe.data_dir).is_dir()
    ):
        raise RecipeError(f"data_dir not found: {recipe.data_dir} (looked in {Path.cwd()} and {REPO_ROOT})")
