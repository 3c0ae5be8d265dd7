"""Prepare a run's data (Section 5.1): where each split comes from, the one BPE vocabulary shared by source and
target, and the tokenized splits, with over-long training pairs dropped.

Each split (the training data, a dev set, a test set) has one `Source`. `split_sources(recipe)` makes them when the
run is planned, and is the only place that branches on `data_format`. A source names its local `files` (so that
`io.check_paths` can refuse an output that overlaps them), `check`s them cheaply, `scan`s every line (`--check`),
`load`s the split and `describe`s itself. When the run starts, `load_corpora` reads every split, so that a bad file is
refused before anything is written, and `prepare_data` gives the shared BPE (`shared_bpe`: the plan's tokenizer
folder, the one cached for this corpus, or one trained now) and the tokenized splits.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data import cache
from ..data.corpora import (
    load_parallel,
    load_sample_corpus,
    moses_paths,
    sample_corpus_path,
    scan_corpus,
    usable_pairs,
)
from ..data.preprocessing import prepare_dataset
from ..io import UNUSABLE_WORKING_FOLDER, UsageError, check_input_file, reads_once
from ..io.progress import library_bars
from ..tokenization import load_tokenizer, train_bpe_tokenizer
from .recipe import REPO_ROOT, Recipe, RecipeError

if TYPE_CHECKING:  # The plan holds the sources made here, so this module does not import it.
    from .plan import RunPlan

logger = logging.getLogger(__name__)

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
    data = recipe.data
    for split in SPLITS:
        key = f"{split}_data"
        value = getattr(data, key)
        common = dict(key=key, src_lang=data.src_lang, tgt_lang=data.tgt_lang)
        if value is None:
            found[split] = None
        elif data.data_format == "sample":
            found[split] = SampleSource(**common, split=value)
        elif data.data_format == "hub":
            found[split] = HubSource(**common, dataset=data.hub_dataset, config=data.hub_config, split=value)
        else:
            found[split] = FileSource(**common, format=data.data_format, path=resolve_path(value, data.data_dir))
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
    """Check that the recipe's data_dir, where its files are looked up, is a folder."""
    data = recipe.data
    if (
        data.data_dir is not None
        and data.data_format not in ("sample", "hub")
        and not resolve_dir(data.data_dir).is_dir()
    ):
        raise RecipeError(f"data_dir not found: {data.data_dir} (looked in {Path.cwd()} and {REPO_ROOT})")


# ---------------------------------------------------------------------------------------------------------------------
# When the run starts: the corpora, the shared BPE and the tokenized splits
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class RunData:
    """Hold what the data station gives the trainer: the shared BPE, the tokenized splits (valid and test may be
    None), the length filter's report and the seconds the preparation took."""

    tokenizer: Any
    train: Any
    valid: Any
    test: Any
    filter_report: Any
    seconds: float


def load_corpora(plan: RunPlan) -> dict[str, Any]:
    """Load the raw splits, decoding and parsing every line, so that a bad file is refused before anything is
    written."""
    data = plan.recipe.data
    limits = {"train": data.max_train_samples, "valid": data.max_eval_samples, "test": 0}
    return {name: source.load(limits[name]) if source is not None else None for name, source in plan.sources.items()}


def prepare_data(plan: RunPlan, splits: dict[str, Any], state, clock) -> RunData:
    """Return the shared BPE and the tokenized splits. Over-long training pairs are dropped and counted, and a corpus
    with none left is refused; held-out pairs are all kept."""
    data, started = plan.recipe.data, time.time()
    with clock.stage("tokenizer"), state.main_process_first():
        tokenizer = shared_bpe(plan, splits["train"])
    prep = dict(num_proc=data.preprocessing_num_workers)
    with clock.stage("tokenize and filter"), state.main_process_first():  # The others read the main process's cache.
        train, report = prepare_dataset(
            splits["train"],
            tokenizer,
            data.src_lang,
            data.tgt_lang,
            max_length=plan.longest_pair,
            max_ratio=data.max_length_ratio,
            **prep,
        )
        held_out = {
            name: prepare_dataset(
                splits[name], tokenizer, data.src_lang, data.tgt_lang, max_length=None, max_ratio=None, **prep
            )[0]
            if splits[name] is not None
            else None
            for name in ("valid", "test")
        }
    logger.info("training pairs: %s", report)
    if report.kept == 0:
        raise RecipeError(
            f"train_data: no usable training pair ({report}); check the corpus, max_length and max_length_ratio"
        )
    return RunData(tokenizer, train, held_out["valid"], held_out["test"], report, time.time() - started)


def shared_bpe(plan: RunPlan, train_split):
    """Return Section 5.1's one BPE vocabulary for source and target: the plan's tokenizer folder if it exists, else
    the one cached for this corpus and settings (vaswani_hf.data.cache), else one trained now and cached."""
    bpe, data, folder, name = plan.recipe.tokenizer, plan.recipe.data, plan.tokenizer_dir, None
    if train_split.cache_files and cache.enabled():  # A file-backed corpus has a stable fingerprint.
        name = "bpe-" + cache.key(
            train_split._fingerprint,
            bpe.vocab_size,
            bpe.bpe_min_frequency,
            bpe.lowercase,
            data.src_lang,
            data.tgt_lang,
        )
    if not folder.is_dir() and name and cache.cached_tokenizer(name):
        shutil.copytree(cache.cached_tokenizer(name), folder)
        logger.info(
            "joint BPE of this corpus and these settings taken from the cache: %s", cache.cached_tokenizer(name)
        )
    if folder.is_dir():
        tokenizer = load_tokenizer(folder)
        logger.info("tokenizer loaded from %s (%d tokens)", folder, len(tokenizer))
        return tokenizer
    tokenizer = train_bpe_tokenizer(
        train_split,
        vocab_size=bpe.vocab_size,
        min_frequency=bpe.bpe_min_frequency,
        lowercase=bpe.lowercase,
        save_dir=folder,
        show_progress=not plan.recipe.run.disable_tqdm and library_bars(),
    )
    logger.info("trained joint BPE: %d tokens -> %s", len(tokenizer), folder)
    if name:
        cache.keep_tokenizer(name, folder)
    return tokenizer
