"""Tokenize and filter parallel data, turning a corpus in the common schema into training examples.

`tokenize_pairs` runs the shared BPE tokenizer (Section 5.1) over both sides with `datasets.Dataset.map` (batched,
multi-process, cached); `filter_pairs` removes empty and over-long pairs and reports how many, so that nothing is
dropped silently; `sequence_lengths` gives the token counts that the token-budget batcher packs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

from .corpora import CorpusError

logger = logging.getLogger(__name__)


def _tokenize_batch(batch: dict, *, tokenizer: PreTrainedTokenizerBase, src_lang: str, tgt_lang: str) -> dict:
    pairs = batch["translation"]
    # Over-long pairs are filtered and counted by filter_pairs, never cut here (nor warned of); the collator builds the
    # attention mask.
    enc = tokenizer(
        [p[src_lang] for p in pairs],
        text_target=[p[tgt_lang] for p in pairs],
        truncation=False,
        return_attention_mask=False,
        verbose=False,
    )
    return {"input_ids": enc["input_ids"], "labels": enc["labels"]}


def tokenize_pairs(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    src_lang: str,
    tgt_lang: str,
    *,
    num_proc: int | None = None,
    batch_size: int = 1000,
    keep_text: bool = False,
    cache_dir: str | os.PathLike | None = None,
    load_from_cache_file: bool = True,
) -> datasets.Dataset:
    """Tokenize both sides of `dataset` with `Dataset.map` and return the result. The map is batched, and it runs in
    several processes with `num_proc`: at most one process per CPU, and one process for a dataset too small to be
    worth starting workers.

    It adds `input_ids` (the source, `</s>` appended) and `labels` (the target, `</s>` appended), stored as int32
    lists, and drops `translation` unless `keep_text`. A language code the dataset lacks raises a CorpusError. For
    caching, the result's fingerprint is a hash of the data's fingerprint,
    the tokenizer's content (not the Python object, which differs between a tokenizer just trained and the same one
    loaded from disk) and the arguments. So a file-backed dataset (a cached corpus, a Hub dataset) is tokenized once
    and read from `datasets`' cache on the next launch; an in-memory dataset is cached only if `cache_dir` is given.
    """
    for lang in (src_lang, tgt_lang):
        langs = getattr(dataset.features.get("translation"), "languages", None)
        if langs is not None and lang not in langs:
            raise CorpusError(f"unknown language code {lang!r}: dataset has languages {list(langs)}")
    remove = [] if keep_text else [c for c in dataset.column_names if c == "translation"]
    features = dataset.features.copy()
    for c in remove:
        del features[c]
    features["input_ids"] = datasets.List(datasets.Value("int32"))
    features["labels"] = datasets.List(datasets.Value("int32"))
    key = datasets.fingerprint.Hasher.hash(
        [dataset._fingerprint, tokenizer.backend_tokenizer.to_str(), src_lang, tgt_lang, keep_text]
    )
    cache_file_name = None
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        cache_file_name = str(Path(cache_dir) / f"tokenized-{key}.arrow")
    if num_proc is not None and (num_proc > (os.cpu_count() or 1) or len(dataset) < 10 * batch_size):
        # More workers than CPUs only multiply memory (8 workers on 2 cores held about 11 GB at 0.5M pairs), and a
        # small dataset is tokenized faster than the workers start.
        num_proc = min(num_proc, os.cpu_count() or 1) if len(dataset) >= 10 * batch_size else None
    return dataset.map(
        partial(_tokenize_batch, tokenizer=tokenizer, src_lang=src_lang, tgt_lang=tgt_lang),
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=remove,
        features=features,
        cache_file_name=cache_file_name,
        new_fingerprint=key,
        load_from_cache_file=load_from_cache_file,
        desc=f"tokenizing {src_lang}-{tgt_lang}",
    )


def sequence_lengths(dataset: datasets.Dataset, column: str) -> np.ndarray:
    """Return the token count of every row of a list column, as an int64 array of shape [len(dataset)], computed in
    Arrow without a Python loop."""
    if column not in dataset.column_names:
        raise ValueError(f"dataset has no {column!r} column (columns: {dataset.column_names}); tokenize it first")
    col = dataset.select_columns([column]).with_format("arrow")[:][column]
    return pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)


@dataclass
class FilterReport:
    """Count what `filter_pairs` removed; every pair is counted under the first rule it fails, in the order of the
    fields below."""

    total: int
    kept: int
    empty: int  # a side with no token besides </s>
    too_long: int  # a side longer than max_length tokens (</s> included)
    bad_ratio: int  # the longer side has more than max_ratio times the shorter side's tokens (</s> excluded)
    removed_examples: dict[str, list[int]] = field(default_factory=dict)  # the first 10 rows each rule removed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"kept {self.kept}/{self.total} pairs; removed {self.empty} empty, {self.too_long} too long, "
            f"{self.bad_ratio} with a bad length ratio"
        )


def filter_pairs(
    dataset: datasets.Dataset, *, max_length: int | None = 256, max_ratio: float | None = 9.0
) -> tuple[datasets.Dataset, FilterReport]:
    """Remove empty and over-long pairs from a tokenized dataset, and return (dataset, report); the report's counts are
    also logged.

    The defaults are `max_length=256` tokens per side (tensor2tensor's training cap for WMT; the paper gives none) and
    `max_ratio=9` (the default of Moses' `clean-corpus-n.perl`), both measured in BPE tokens; None turns a rule off.
    Empty sides are always removed, because the model cannot learn anything from them.
    """
    src = sequence_lengths(dataset, "input_ids") - 1  # without </s>
    tgt = sequence_lengths(dataset, "labels") - 1
    empty = (src <= 0) | (tgt <= 0)
    too_long = np.zeros_like(empty) if max_length is None else ((src + 1 > max_length) | (tgt + 1 > max_length))
    too_long &= ~empty
    if max_ratio is None:
        bad_ratio = np.zeros_like(empty)
    else:
        longer, shorter = np.maximum(src, tgt), np.maximum(np.minimum(src, tgt), 1)
        bad_ratio = (longer / shorter > max_ratio) & ~empty & ~too_long
    keep = ~(empty | too_long | bad_ratio)
    report = FilterReport(
        len(dataset),
        int(keep.sum()),
        int(empty.sum()),
        int(too_long.sum()),
        int(bad_ratio.sum()),
        {
            k: np.flatnonzero(m)[:10].tolist()
            for k, m in (("empty", empty), ("too_long", too_long), ("bad_ratio", bad_ratio))
            if m.any()
        },
    )
    (logger.warning if report.kept < report.total else logger.info)("filter_pairs: %s", report)
    if report.kept == report.total:
        return dataset, report
    return dataset.select(np.flatnonzero(keep)), report


def prepare_dataset(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    src_lang: str,
    tgt_lang: str,
    *,
    max_length: int | None = 256,
    max_ratio: float | None = 9.0,
    **tokenize_kwargs: Any,
) -> tuple[datasets.Dataset, FilterReport]:
    """Run `tokenize_pairs` and then `filter_pairs`, the usual path from a loaded corpus to training examples, and
    return (dataset, report)."""
    tokenized = tokenize_pairs(dataset, tokenizer, src_lang, tgt_lang, **tokenize_kwargs)
    return filter_pairs(tokenized, max_length=max_length, max_ratio=max_ratio)
