"""Parallel data: loading, tokenisation, filtering, token-based batching, collation and a Seq2SeqTrainer that uses them.

Vaswani et al. (2017), Section 5.1 "Training Data and Batching": "Sentence pairs were batched together by approximate
sequence length. Each training batch contained a set of sentence pairs containing approximately 25000 source tokens
and 25000 target tokens."  transformers has no token-budget batching (its `train_sampling_strategy="group_by_length"`
groups by length but keeps a fixed number of *sentences* per batch), so `TokenBatchSampler` is written here; the rest
(storage, tokenisation, caching, multi-processing, the training loop, distributed placement) is delegated to
`datasets`, `tokenizers`, `transformers.Seq2SeqTrainer` and Accelerate.

One schema for every source: a `datasets.Dataset` with a single column
`translation: Translation(languages=[src_lang, tgt_lang])`, i.e. rows `{"translation": {src_lang: str, tgt_lang: str}}`,
the schema of the Hub's WMT datasets.

Empty lines.  An empty line in one file of a parallel pair (or a pair with an empty side in TSV/JSONL/Hub data) is
a data problem but not a fatal one: the loaders keep the pair (so row i is still line i, useful when debugging) and log
how many such pairs there are and where; `filter_pairs` removes them and reports the count.  Nothing is dropped
silently.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch.utils.data import DataLoader, Sampler
from transformers import PreTrainedTokenizerBase, Seq2SeqTrainer

from .tokenization import PAD_ID

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 25000  # paper, Section 5.1: ~25000 source and ~25000 target tokens per batch
LABEL_PAD_ID = -100  # ignored by torch.nn.CrossEntropyLoss (ignore_index default) and by transformers' losses
EXAMPLE_INDEX = "example_index"  # row of an evaluation example in its dataset, carried through the collator

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "CorpusError",
    "read_lines",
    "make_parallel_dataset",
    "load_moses",
    "load_tsv",
    "load_jsonl",
    "load_hub",
    "load_parallel",
    "sample_corpus_path",
    "load_sample_corpus",
    "tokenize_pairs",
    "FilterReport",
    "filter_pairs",
    "prepare_dataset",
    "sequence_lengths",
    "TokenBatchSampler",
    "Seq2SeqCollator",
    "unshard_prepared_loader",
    "TokenBatchingSeq2SeqTrainer",
]


class CorpusError(ValueError):
    """Bad parallel-corpus input; the message names the file, line and/or argument at fault."""


# ---------------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------------
# The readers below are hand-written rather than `load_dataset("text"/"csv"/"json")` because the required errors
# (file + line of a bad UTF-8 byte, both files and both counts on a length mismatch, the line of a malformed TSV/JSON
# record) are not what those builders report, and because `csv` would interpret quote characters that are plain text
# in MT data.  The result is handed to `datasets` immediately.


def read_lines(path: str | os.PathLike, *, strip: bool = True) -> list[str]:
    """Read a one-sentence-per-line UTF-8 file.

    Lines are split on "\\n" only (not on the other Unicode line separators `str.splitlines` honours, which do
    occur inside sentences); a final newline does not make an extra empty line; a UTF-8 BOM is dropped.
    `strip=True` removes surrounding whitespace ("\\r" of CRLF files included): leading/trailing blanks carry no
    content in sentence-per-line corpora, and a trailing space would otherwise become a token the model must learn to
    emit.  With `strip=False` only the line terminator ("\\n" or "\\r\\n") is removed.

    Raises:
        FileNotFoundError: the file does not exist.
        CorpusError: the file is not valid UTF-8 (message names file, line and byte offset).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise CorpusError(
            f"{path}: line {line}: invalid UTF-8 byte(s) {raw[e.start:e.end]!r} at byte offset {e.start} ({e.reason}); "
            "re-encode the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if strip:
        return [s.strip() for s in lines]
    return [s[:-1] if s.endswith("\r") else s for s in lines]


def _features(src_lang: str, tgt_lang: str) -> datasets.Features:
    return datasets.Features({"translation": datasets.Translation(languages=[src_lang, tgt_lang])})


def _log_empty(src: Sequence[str], tgt: Sequence[str], where: str) -> int:
    empty = [i for i, (s, t) in enumerate(zip(src, tgt)) if not s or not t]
    if empty:
        first = ", ".join(str(i + 1) for i in empty[:10]) + (", ..." if len(empty) > 10 else "")
        logger.warning(
            "%s: %d of %d pairs have an empty side (line/row %s); kept for now, removed by filter_pairs",
            where, len(empty), len(src), first,
        )
    return len(empty)


def make_parallel_dataset(
    src: Sequence[str], tgt: Sequence[str], src_lang: str, tgt_lang: str, *, where: str = "pairs"
) -> datasets.Dataset:
    """Build the common schema from two aligned lists of sentences."""
    if src_lang == tgt_lang:
        raise CorpusError(f"src_lang and tgt_lang are both {src_lang!r}")
    if len(src) != len(tgt):
        raise CorpusError(f"{where}: {len(src)} source sentences but {len(tgt)} target sentences")
    _log_empty(src, tgt, where)
    # Translation stores a struct with the languages in sorted order; build that struct directly in Arrow
    # (no Python dict per row, which matters for the 4.5M pairs of WMT14).
    cols = {src_lang: pa.array(src, type=pa.string()), tgt_lang: pa.array(tgt, type=pa.string())}
    names = sorted(cols)
    struct = pa.StructArray.from_arrays([cols[n] for n in names], names=names)
    return datasets.Dataset(
        pa.table({"translation": struct}), info=datasets.DatasetInfo(features=_features(src_lang, tgt_lang))
    )


def load_moses(prefix: str | os.PathLike, src_lang: str, tgt_lang: str, *, strip: bool = True) -> datasets.Dataset:
    """Load Moses-style parallel files `{prefix}.{src_lang}` and `{prefix}.{tgt_lang}` (e.g. `train.en`, `train.de`).

    Raises:
        CorpusError: a language has no `{prefix}.{lang}` file (lists the languages that do exist), the files have
            different line counts (names both files and both counts), or a file is not UTF-8 (file and line).
        FileNotFoundError: no file at all starts with `prefix`.
    """
    prefix = Path(prefix)
    paths = {lang: Path(f"{prefix}.{lang}") for lang in (src_lang, tgt_lang)}
    for lang, p in paths.items():
        if not p.is_file():
            found = sorted(
                q.name[len(prefix.name) + 1 :] for q in prefix.parent.glob(f"{prefix.name}.*") if q.is_file()
            )
            if not found:
                raise FileNotFoundError(f"corpus file not found: {p} (no file matches {prefix}.*)")
            raise CorpusError(
                f"unknown language code {lang!r} for prefix {prefix}: {p} not found; languages available: {found}"
            )
    src = read_lines(paths[src_lang], strip=strip)
    tgt = read_lines(paths[tgt_lang], strip=strip)
    if len(src) != len(tgt):
        raise CorpusError(
            f"line count mismatch: {paths[src_lang]} has {len(src)} lines but {paths[tgt_lang]} has {len(tgt)} lines"
        )
    return make_parallel_dataset(src, tgt, src_lang, tgt_lang, where=f"{prefix}.{{{src_lang},{tgt_lang}}}")


def load_tsv(
    path: str | os.PathLike, src_lang: str, tgt_lang: str, *, header: bool = True, strip: bool = True
) -> datasets.Dataset:
    """Load a tab-separated file of sentence pairs.

    With `header=True` (default) the first line names the language of each column (e.g. `en<TAB>de`, more
    columns allowed) and columns are picked by language code; with `header=False` there must be exactly two
    columns, source then target.  No quoting is interpreted: quotes are text.
    """
    lines = read_lines(path, strip=False)
    first = 0
    if header:
        if not lines:
            raise CorpusError(f"{path}: empty file, expected a header line naming the languages")
        cols = [c.strip() for c in lines[0].split("\t")]
        for lang in (src_lang, tgt_lang):
            if lang not in cols:
                raise CorpusError(f"unknown language code {lang!r}: {path} header has columns {cols}")
        idx_src, idx_tgt, ncols, first = cols.index(src_lang), cols.index(tgt_lang), len(cols), 1
    else:
        idx_src, idx_tgt, ncols = 0, 1, 2
    src, tgt = [], []
    for lineno, line in enumerate(lines[first:], first + 1):
        fields = line.split("\t")
        if len(fields) != ncols:
            raise CorpusError(f"{path}: line {lineno}: expected {ncols} tab-separated fields, found {len(fields)}")
        s, t = fields[idx_src], fields[idx_tgt]
        src.append(s.strip() if strip else s)
        tgt.append(t.strip() if strip else t)
    return make_parallel_dataset(src, tgt, src_lang, tgt_lang, where=str(path))


def load_jsonl(path: str | os.PathLike, src_lang: str, tgt_lang: str, *, strip: bool = True) -> datasets.Dataset:
    """Load JSON lines, one object per line: `{"translation": {"en": ..., "de": ...}}` (the Hub schema, as written by
    `Dataset.to_json`) or flat `{"en": ..., "de": ...}`.  Blank lines are not allowed (they would shift rows)."""
    src, tgt = [], []
    for lineno, line in enumerate(read_lines(path, strip=False), 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}: line {lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        pair = obj.get("translation", obj) if isinstance(obj, dict) else None
        if not isinstance(pair, dict):
            raise CorpusError(f"{path}: line {lineno}: expected a JSON object with language keys, got {line[:80]!r}")
        for lang in (src_lang, tgt_lang):
            if lang not in pair:
                raise CorpusError(f"unknown language code {lang!r}: {path} line {lineno} has keys {sorted(pair)}")
            if not isinstance(pair[lang], str):
                raise CorpusError(f"{path}: line {lineno}: value for {lang!r} is not a string")
        src.append(pair[src_lang].strip() if strip else pair[src_lang])
        tgt.append(pair[tgt_lang].strip() if strip else pair[tgt_lang])
    return make_parallel_dataset(src, tgt, src_lang, tgt_lang, where=str(path))


def load_hub(
    name: str | os.PathLike,
    src_lang: str,
    tgt_lang: str,
    *,
    config: str | None = None,
    split: str = "train",
    **load_kwargs: Any,
) -> datasets.Dataset:
    """Load a Hub dataset with a `translation` column through `datasets.load_dataset(name, config, split=split)`,
    e.g. `load_hub("wmt14", "en", "de", config="de-en")`.  A local folder written by `Dataset.save_to_disk` is read
    with `datasets.load_from_disk`.  Texts are kept as they are (no stripping); empty sides are reported.
    """
    p = Path(name)
    if p.is_dir() and ((p / "dataset_info.json").is_file() or (p / "dataset_dict.json").is_file()):
        ds = datasets.load_from_disk(str(p))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise CorpusError(f"split {split!r} not in {p} (splits: {list(ds)})")
            ds = ds[split]
    else:
        ds = datasets.load_dataset(str(name), config, split=split, **load_kwargs)
    if not isinstance(ds, datasets.Dataset):
        raise CorpusError(f"load_dataset({name!r}, {config!r}, split={split!r}) returned {type(ds).__name__}")
    if "translation" not in ds.column_names:
        raise CorpusError(f"dataset {name!r} has no 'translation' column (columns: {ds.column_names})")
    feat = ds.features["translation"]
    langs = list(feat.languages) if isinstance(feat, datasets.Translation) else list(feat)
    for lang in (src_lang, tgt_lang):
        if lang not in langs:
            raise CorpusError(f"unknown language code {lang!r}: dataset {name!r} ({config}) has languages {langs}")
    ds = ds.select_columns(["translation"])
    if sorted(langs) != sorted([src_lang, tgt_lang]):  # multilingual data: keep the two requested sides
        ds = ds.map(
            lambda b: {"translation": [{src_lang: x[src_lang], tgt_lang: x[tgt_lang]} for x in b["translation"]]},
            batched=True,
            features=_features(src_lang, tgt_lang),
            desc="selecting languages",
        )
    ds = ds.cast(_features(src_lang, tgt_lang))
    tbl = ds.with_format("arrow")[:]["translation"]
    n_empty = pc.sum(
        pc.or_(pc.equal(pc.utf8_length(pc.struct_field(tbl, src_lang)), 0),
               pc.equal(pc.utf8_length(pc.struct_field(tbl, tgt_lang)), 0))
    ).as_py() or 0
    if n_empty:
        logger.warning("%s: %d of %d pairs have an empty side; kept for now, removed by filter_pairs",
                       name, n_empty, len(ds))
    return ds


_SUFFIX_FORMATS = {".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


def load_parallel(
    source: str | os.PathLike,
    src_lang: str,
    tgt_lang: str,
    *,
    format: str = "auto",
    config: str | None = None,
    split: str = "train",
    **kwargs: Any,
) -> datasets.Dataset:
    """Load parallel data from any supported source into the common schema.

    `format`: "moses" (`source` is a prefix), "tsv", "jsonl", "hub" (a Hub name or a `save_to_disk` folder), or
    "auto": `.tsv` -> tsv, `.jsonl`/`.json` -> jsonl, an existing folder -> hub (load_from_disk), an existing
    `{source}.{src_lang}` file -> moses, anything else -> hub (`datasets.load_dataset(source, config)`).
    """
    fmt = format
    if fmt == "auto":
        s = Path(source)
        if s.suffix in _SUFFIX_FORMATS and s.is_file():
            fmt = _SUFFIX_FORMATS[s.suffix]
        elif s.is_dir():
            fmt = "hub"
        elif Path(f"{source}.{src_lang}").is_file() or Path(f"{source}.{tgt_lang}").is_file():
            fmt = "moses"
        elif s.suffix in _SUFFIX_FORMATS or any(s.parent.glob(f"{s.name}.*")):
            raise FileNotFoundError(f"corpus not found: {source} (format=auto)")
        else:
            fmt = "hub"
    if fmt == "moses":
        return load_moses(source, src_lang, tgt_lang, **kwargs)
    if fmt == "tsv":
        return load_tsv(source, src_lang, tgt_lang, **kwargs)
    if fmt == "jsonl":
        return load_jsonl(source, src_lang, tgt_lang, **kwargs)
    if fmt == "hub":
        return load_hub(source, src_lang, tgt_lang, config=config, split=split, **kwargs)
    raise ValueError(f"format={format!r}: expected 'auto', 'moses', 'tsv', 'jsonl' or 'hub'")


def sample_corpus_path() -> Path:
    """Folder of the bundled EN-DE sample corpus (`{train,valid,test}.{en,de}`, package data of `vaswani_hf`)."""
    return Path(str(resources.files("vaswani_hf") / "sample_data"))


def load_sample_corpus(split: str = "train", src_lang: str = "en", tgt_lang: str = "de") -> datasets.Dataset:
    """The bundled sample corpus split ("train", "valid" or "test") in the common schema."""
    folder = sample_corpus_path()
    if not Path(f"{folder / split}.{src_lang}").is_file():
        raise FileNotFoundError(f"sample corpus split {split!r} not found in {folder} (expected {split}.{src_lang})")
    return load_moses(folder / split, src_lang, tgt_lang)


# ---------------------------------------------------------------------------------------------------------------------
# Tokenisation and filtering
# ---------------------------------------------------------------------------------------------------------------------


def _tokenize_batch(batch: dict, *, tokenizer: PreTrainedTokenizerBase, src_lang: str, tgt_lang: str) -> dict:
    pairs = batch["translation"]
    enc = tokenizer(
        [p[src_lang] for p in pairs],
        text_target=[p[tgt_lang] for p in pairs],
        truncation=False,  # over-long pairs are filtered (and counted) by filter_pairs, never cut silently
        return_attention_mask=False,  # the collator derives it from the lengths
        verbose=False,  # no "longer than model_max_length" warnings: filter_pairs reports lengths
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
    """Tokenize with `Dataset.map` (batched, optionally multi-process).

    Adds `input_ids` (source, `</s>` appended) and `labels` (target, `</s>` appended), stored as int32 lists;
    drops `translation` unless `keep_text`.  Caching: datasets loaded from the Hub or disk are cached by `datasets`
    itself (fingerprint of data + function + tokenizer); the in-memory datasets built from text files are cached
    only if `cache_dir` is given (file name = hash of data fingerprint, tokenizer and arguments).
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
    cache_file_name = None
    if cache_dir is not None:
        key = datasets.fingerprint.Hasher.hash(
            [dataset._fingerprint, tokenizer.backend_tokenizer.to_str(), src_lang, tgt_lang, keep_text]
        )
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        cache_file_name = str(Path(cache_dir) / f"tokenized-{key}.arrow")
    return dataset.map(
        partial(_tokenize_batch, tokenizer=tokenizer, src_lang=src_lang, tgt_lang=tgt_lang),
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=remove,
        features=features,
        cache_file_name=cache_file_name,
        load_from_cache_file=load_from_cache_file,
        desc=f"tokenizing {src_lang}-{tgt_lang}",
    )


def sequence_lengths(dataset: datasets.Dataset, column: str) -> np.ndarray:
    """Token count of every row of a list column, shape [len(dataset)], int64; computed in Arrow (no Python loop)."""
    if column not in dataset.column_names:
        raise ValueError(f"dataset has no {column!r} column (columns: {dataset.column_names}); tokenize it first")
    col = dataset.select_columns([column]).with_format("arrow")[:][column]
    return pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)


@dataclass
class FilterReport:
    """What `filter_pairs` removed; every pair is counted under the first rule it fails (in this order)."""

    total: int
    kept: int
    empty: int  # a side with no token besides </s>
    too_long: int  # a side longer than max_length tokens (</s> included)
    bad_ratio: int  # longer side / shorter side > max_ratio (tokens, </s> excluded)
    removed_examples: dict[str, list[int]] = field(default_factory=dict)  # first row indices per rule

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
    """Remove empty and over-long pairs from a tokenized dataset and report the counts (logged and returned).

    Defaults: `max_length=256` tokens per side (tensor2tensor's training cap for WMT; the paper gives none) and
    `max_ratio=9` (Moses `clean-corpus-n.perl`'s default), both measured in BPE tokens.  Pass None to disable a rule.
    Empty sides are always removed: the model cannot learn anything from them.
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
        total=len(dataset),
        kept=int(keep.sum()),
        empty=int(empty.sum()),
        too_long=int(too_long.sum()),
        bad_ratio=int(bad_ratio.sum()),
        removed_examples={k: np.flatnonzero(m)[:10].tolist() for k, m in
                          (("empty", empty), ("too_long", too_long), ("bad_ratio", bad_ratio)) if m.any()},
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
    """`tokenize_pairs` then `filter_pairs`: the usual path from a loaded corpus to training examples."""
    tokenized = tokenize_pairs(dataset, tokenizer, src_lang, tgt_lang, **tokenize_kwargs)
    return filter_pairs(tokenized, max_length=max_length, max_ratio=max_ratio)


# ---------------------------------------------------------------------------------------------------------------------
# Token-based batching (paper, Section 5.1)
# ---------------------------------------------------------------------------------------------------------------------


class TokenBatchSampler(Sampler[list[int]]):
    """Batch sampler that packs sentence pairs of similar length into batches of at most `max_tokens` padded source
    tokens and at most `max_tokens` padded target tokens (paper, Section 5.1: ~25000 + ~25000 per batch).

    Padded tokens of a batch = (number of pairs) x (longest sequence in the batch), `</s>` included: exactly the
    size of the [batch, seq] tensors the collator builds, so the budget bounds memory.

    Algorithm (fairseq's `batch_by_size`, written here because neither transformers nor Accelerate has one):
    order the pairs by source length, then target length, ties broken randomly with `seed`; cut that order
    greedily into batches as large as the budget allows.  Batches are built ONCE, so `__len__` is stable (the
    Trainer sizes its schedule from it); each epoch shuffles the *order* of the batches with `(seed, epoch)`.
    Call `set_epoch(epoch)` before each epoch (the Trainer subclass below does).

    Distributed: every rank builds the same global batch list and takes every `num_replicas`-th batch of the epoch's
    order starting at `rank`, so ranks get disjoint batches that together cover every example exactly once.  For
    equal batch counts per rank the list is made a multiple of `num_replicas` at construction by splitting the
    batches holding the most pairs in two (a half still fits the budget) -- neither repeating batches (which would
    double-count examples, wrong for evaluation metrics) nor dropping them (which loses data).  This needs at least
    as many batches' worth of pairs as ranks; otherwise a ValueError is raised.

    Args:
        src_lengths, tgt_lengths: tokens per example, shape [N] (see `sequence_lengths`).
        max_tokens: budget for padded source tokens and, separately, for padded target tokens per batch.
        max_sentences: optional cap on pairs per batch.
        shuffle: shuffle batch order per epoch (training); False keeps length order (evaluation).
        seed: base seed; the same seed gives the same batches and the same order on every run.
        num_replicas, rank: data-parallel world size and this process's index.
        pad_to_multiple_of: if the collator rounds lengths up, pass the same value so the budget accounts for it.

    Raises:
        ValueError: an example alone exceeds `max_tokens` (names it; filter with `filter_pairs` or raise the budget).
    """

    def __init__(
        self,
        src_lengths: Sequence[int] | np.ndarray,
        tgt_lengths: Sequence[int] | np.ndarray,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        *,
        max_sentences: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        pad_to_multiple_of: int | None = None,
    ):
        src = np.asarray(src_lengths, dtype=np.int64)
        tgt = np.asarray(tgt_lengths, dtype=np.int64)
        if src.shape != tgt.shape or src.ndim != 1:
            raise ValueError(f"src_lengths and tgt_lengths must be 1-D of equal size, got {src.shape} and {tgt.shape}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens={max_tokens} must be positive")
        if pad_to_multiple_of:
            src = -(-src // pad_to_multiple_of) * pad_to_multiple_of
            tgt = -(-tgt // pad_to_multiple_of) * pad_to_multiple_of
        too_big = np.flatnonzero((src > max_tokens) | (tgt > max_tokens))
        if too_big.size:
            i = int(too_big[0])
            raise ValueError(
                f"{too_big.size} example(s) exceed max_tokens={max_tokens} on their own, e.g. example {i} "
                f"({src[i]} source / {tgt[i]} target tokens); remove them with filter_pairs(max_length=...) "
                "or raise max_tokens"
            )
        self.max_tokens, self.max_sentences = int(max_tokens), max_sentences
        self.shuffle, self.seed, self.epoch = shuffle, int(seed), 0
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.batches = self._make_batches(src, tgt)  # global list, same on every rank
        self.num_examples = int(src.size)

    @classmethod
    def from_dataset(
        cls, dataset: datasets.Dataset, max_tokens: int = DEFAULT_MAX_TOKENS, **kwargs: Any
    ) -> TokenBatchSampler:
        """Lengths from the `input_ids` and `labels` columns of a tokenized dataset."""
        return cls(sequence_lengths(dataset, "input_ids"), sequence_lengths(dataset, "labels"), max_tokens, **kwargs)

    def _make_batches(self, src: np.ndarray, tgt: np.ndarray) -> list[list[int]]:
        n = src.size
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(n)  # random tie-breaking among equal lengths
        order = order[np.argsort(tgt[order], kind="stable")]
        order = order[np.argsort(src[order], kind="stable")]  # by source length, then target length
        batches: list[list[int]] = []
        cur: list[int] = []
        max_s = max_t = 0
        for i in order.tolist():  # greedy packing; O(N) Python, ~1 s per million pairs
            s, t = int(src[i]), int(tgt[i])
            ms, mt = max(max_s, s), max(max_t, t)
            k = len(cur) + 1
            if cur and (k * ms > self.max_tokens or k * mt > self.max_tokens or
                        (self.max_sentences is not None and k > self.max_sentences)):
                batches.append(cur)
                cur, ms, mt = [], s, t
            cur.append(i)
            max_s, max_t = ms, mt
        if cur:
            batches.append(cur)
        return self._balance(batches, n)

    def _balance(self, batches: list[list[int]], n: int) -> list[list[int]]:
        """Split the most populous batches until the count is a multiple of num_replicas (see class docstring)."""
        r = self.num_replicas
        if n == 0:
            return []
        target = max(r, -(-len(batches) // r) * r)
        if target > n:
            raise ValueError(
                f"cannot give {r} ranks the same number of distinct non-empty batches from {n} examples "
                f"({len(batches)} batches); use fewer processes or more data"
            )
        while len(batches) < target:
            j = max(range(len(batches)), key=lambda b: len(batches[b]))
            big = batches[j]
            half = len(big) // 2
            batches[j : j + 1] = [big[:half], big[half:]]  # keep length order: halves stay adjacent
        return batches

    def set_epoch(self, epoch: int) -> None:
        """Select the batch order of `epoch` (same as torch's DistributedSampler.set_epoch)."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.batches))
        else:
            order = np.arange(len(self.batches))
        for j in order[self.rank :: self.num_replicas].tolist():
            yield list(self.batches[j])

    def __len__(self) -> int:
        """Batches per rank per epoch."""
        return len(self.batches) // self.num_replicas


# ---------------------------------------------------------------------------------------------------------------------
# Collation
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Seq2SeqCollator:
    """Pad a list of tokenized pairs into tensors for the encoder-decoder.

    Returns (shapes: B pairs, S = longest source, T = longest target, all int64):
      input_ids [B, S] padded with `pad_token_id`; attention_mask [B, S] (1 = real token);
      labels [B, T] padded with -100 (ignored by the loss); decoder_input_ids [B, T] = labels shifted right by one,
      starting with `decoder_start_token_id` (= `<pad>` = 0, the model's tensor2tensor-style zero start), with -100
      replaced by pad.  Rows without `labels` (inference) give only input_ids and attention_mask.

    Hand-written rather than `transformers.DataCollatorForSeq2Seq`: that one builds `decoder_input_ids` only through
    a model's `prepare_decoder_input_ids_from_labels` and pads through `tokenizer.pad`, which is slower per batch;
    here it is three tensor fills.
    """

    pad_token_id: int = PAD_ID
    decoder_start_token_id: int = PAD_ID
    label_pad_token_id: int = LABEL_PAD_ID
    pad_to_multiple_of: int | None = None

    def _round(self, n: int) -> int:
        m = self.pad_to_multiple_of
        return n if not m else -(-n // m) * m

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        bsz = len(features)
        src = [list(f["input_ids"]) for f in features]
        s_len = self._round(max(len(x) for x in src))
        input_ids = torch.full((bsz, s_len), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((bsz, s_len), dtype=torch.long)
        for i, x in enumerate(src):
            input_ids[i, : len(x)] = torch.as_tensor(x, dtype=torch.long)
            attention_mask[i, : len(x)] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "labels" in features[0] and features[0]["labels"] is not None:
            tgt = [list(f["labels"]) for f in features]
            t_len = self._round(max(len(y) for y in tgt))
            labels = torch.full((bsz, t_len), self.label_pad_token_id, dtype=torch.long)
            for i, y in enumerate(tgt):
                labels[i, : len(y)] = torch.as_tensor(y, dtype=torch.long)
            dec = torch.full((bsz, t_len), self.pad_token_id, dtype=torch.long)
            dec[:, 0] = self.decoder_start_token_id
            dec[:, 1:] = labels[:, :-1]
            dec[dec == self.label_pad_token_id] = self.pad_token_id
            batch["labels"] = labels
            batch["decoder_input_ids"] = dec
        if EXAMPLE_INDEX in features[0]:  # evaluation: which dataset row each batch row is
            batch[EXAMPLE_INDEX] = torch.tensor([int(f[EXAMPLE_INDEX]) for f in features], dtype=torch.long)
        return batch


# ---------------------------------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------------------------------


def _per_sentence(rows: list[int], predictions: torch.Tensor, labels: torch.Tensor | None,
                  pad_id: int) -> list[tuple[int, list[int], list[int]]]:
    """One (row, prediction ids, label ids) per sentence of a batch, padding removed: (B, T) tensors -> lists."""
    items = []
    for b, row in enumerate(rows):
        prediction = predictions[b].tolist()
        while prediction and prediction[-1] in (pad_id, LABEL_PAD_ID):
            prediction.pop()
        label = [] if labels is None else [t for t in labels[b].tolist() if t != LABEL_PAD_ID]
        items.append((int(row), prediction, label))
    return items


def _stack_sentences(sentences: list[tuple[int, list[int], list[int]]], pad_id: int):
    """(predictions (N, T_max) padded with `pad_id`, labels (N, L_max) padded with -100) as numpy, or (None, None)."""
    if not sentences:
        return None, None
    longest = max(1, max(len(p) for _, p, _ in sentences))
    predictions = np.full((len(sentences), longest), pad_id, dtype=np.int64)
    longest = max(1, max(len(lab) for _, _, lab in sentences))
    labels = np.full((len(sentences), longest), LABEL_PAD_ID, dtype=np.int64)
    for i, (_, prediction, label) in enumerate(sentences):
        predictions[i, : len(prediction)] = prediction
        labels[i, : len(label)] = label
    return predictions, labels


def unshard_prepared_loader(prepared: DataLoader, sampler: TokenBatchSampler) -> DataLoader:
    """Make the `BatchSamplerShard` that `accelerate.prepare_data_loader` wraps around a batch sampler in
    multi-process runs a pass-through, because `sampler` is already rank-aware: batches are split across ranks once.
    In single-process runs Accelerate does not wrap the sampler and this is a no-op."""
    shard = getattr(prepared, "batch_sampler", None)
    if shard is sampler:
        return prepared
    if getattr(shard, "batch_sampler", None) is not sampler:
        raise RuntimeError(f"unexpected batch sampler after accelerator.prepare: {type(shard).__name__}")
    shard.num_processes, shard.process_index = 1, 0
    return prepared


class TokenBatchingSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` whose train and eval DataLoaders use `TokenBatchSampler` (paper, Section 5.1).

    `per_device_train_batch_size` / `per_device_eval_batch_size` and `train_sampling_strategy` are ignored:
    each device's batch holds up to `max_tokens` padded source and `max_tokens` padded target tokens.  The paper's
    ~25000 + 25000 tokens are per training step over its 8 GPUs, so to match it choose
    `max_tokens x world_size x gradient_accumulation_steps ~= 25000`.  If `data_collator` is not given,
    `Seq2SeqCollator()` is used.

    Sharding happens exactly once: the sampler is rank-aware (`num_replicas=args.world_size`,
    `rank=args.process_index`), and the `BatchSamplerShard` that `accelerator.prepare` wraps around any batch
    sampler in multi-process runs is turned into a pass-through -- the same thing transformers does for its own
    rank-aware `BatchRebalanceSampler` (`Trainer._get_dataloader`).  Accelerate's `split_batches` and
    `dispatch_batches` modes would re-cut batches by sentence count and are rejected.
    """

    def __init__(
        self,
        *args: Any,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        eval_max_tokens: int | None = None,
        max_sentences: int | None = None,
        **kwargs: Any,
    ):
        if kwargs.get("data_collator") is None:
            kwargs["data_collator"] = Seq2SeqCollator()
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens
        self.eval_max_tokens = eval_max_tokens or max_tokens
        self.max_sentences = max_sentences
        self._eval_batches = {}

    # Evaluation, written here rather than inherited: transformers' `evaluation_loop` gathers every batch across
    # processes with `all_gather`, which needs the same tensor shapes on every rank in the same number of calls, and
    # pads only the length dimension. A token batch holds a different number of sentences on each rank, so two
    # processes died at their first evaluation (gloo: "Received data size doesn't match expected size"; NCCL hangs).
    # It also weights every batch's mean loss by the FIRST batch's sentence count, so with token batches the loss
    # depended on the budget (Multi30k, one model: 2.88 at 2,048 tokens, 3.07 at 4,096, 2.82 per target token).
    # Here each process evaluates its own shard with no collective inside the loop, keeps each sentence's prediction
    # under its row index in the dataset, and then every process makes the same two calls whatever its number of
    # batches: one all-reduce of (loss x tokens, tokens) and one all_gather_object of the sentences. Metrics are
    # computed on the union in dataset order, each sentence exactly once (the sampler gives every row to one rank).

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):
        from transformers.trainer_utils import EvalLoopOutput, EvalPrediction, denumpify_detensorize

        prediction_loss_only = self.args.prediction_loss_only if prediction_loss_only is None else prediction_loss_only
        model = self._prepare_model_for_evaluation()
        self._eval_batches[metric_key_prefix] = len(dataloader)
        self.callback_handler.eval_dataloader = dataloader
        totals = torch.zeros(2, dtype=torch.float64, device=self.args.device)  # loss x target tokens, target tokens
        sentences: list[tuple[int, list[int], list[int]]] = []  # (row index, prediction ids, label ids)
        for inputs in dataloader:
            rows = inputs.pop(EXAMPLE_INDEX).tolist()
            loss, predictions, labels = self.prediction_step(model, inputs, prediction_loss_only,
                                                             ignore_keys=ignore_keys)
            labels = inputs.get("labels") if labels is None else labels
            if loss is not None and labels is not None:
                tokens = (labels != LABEL_PAD_ID).sum().to(totals)
                totals += torch.stack([loss.detach().to(totals) * tokens, tokens])
            if not prediction_loss_only and predictions is not None:
                if predictions.dim() == 3:  # logits (predict_with_generate off): their argmax ids
                    predictions = predictions.argmax(-1)
                sentences.extend(_per_sentence(rows, predictions, labels, self._pad_id()))
            self.control = self.callback_handler.on_prediction_step(self.args, self.state, self.control)
        loss_sum, tokens = self.accelerator.reduce(totals, reduction="sum").tolist()
        if self.args.world_size > 1 and not prediction_loss_only:
            from accelerate.utils import gather_object

            sentences = gather_object(sentences)
        sentences.sort(key=lambda item: item[0])
        predictions, label_ids = _stack_sentences(sentences, self._pad_id())
        metrics = {}
        if self.compute_metrics is not None and predictions is not None and len(sentences):
            metrics = denumpify_detensorize(self.compute_metrics(EvalPrediction(predictions, label_ids)))
        if tokens > 0:
            metrics["loss"] = loss_sum / tokens
        metrics = {(k if k.startswith(f"{metric_key_prefix}_") else f"{metric_key_prefix}_{k}"): v
                   for k, v in metrics.items()}
        num_samples = len(sentences) if sentences else len(getattr(dataloader, "dataset", []) or [])
        self.last_eval_rows = [row for row, _, _ in sentences]
        return EvalLoopOutput(predictions=predictions, label_ids=label_ids, metrics=metrics, num_samples=num_samples)

    def _prepare_model_for_evaluation(self):
        """The model `evaluation_loop` runs: transformers' own preparation (unwrapped under DDP, where evaluation
        needs no gradient synchronisation; prepared once under FSDP/DeepSpeed when evaluating without training)."""
        model = self._wrap_model(self.model, training=False)
        if len(self.accelerator._models) == 0 and model is self.model:
            if self.is_deepspeed_enabled or self.is_fsdp_enabled:
                model = self.accelerator.prepare(model)
                if self.is_fsdp_enabled:
                    self.model = model
                if model is not self.model:
                    self.model_wrapped = model
            else:
                model = self.accelerator.prepare_model(model, evaluation_mode=True)
        model.eval()
        return model

    def _pad_id(self) -> int:
        pad = getattr(self.processing_class, "pad_token_id", None)
        return PAD_ID if pad is None else int(pad)

    # Speed metrics.  transformers counts samples as batches x per_device_*_batch_size (1 here), so with token batches
    # `train_samples_per_second` repeated the steps' rate, and `evaluate` / `predict` reported the sentences' rate as
    # `{prefix}_steps_per_second`.  The hooks below put in the sentences trained (summed over processes) and this
    # process's evaluation batches: `train` and `evaluate` log their metrics through `log`, `predict` returns them.
    _eval_batches: dict[str, int]
    _train_sentences: int = 0

    def training_step(self, model, inputs, *args: Any, **kwargs: Any):
        self._train_sentences += int(inputs["labels"].shape[0])
        return super().training_step(model, inputs, *args, **kwargs)

    def _fix_steps_per_second(self, metrics: dict[str, float]) -> None:
        for prefix in [p for p in self._eval_batches if f"{p}_steps_per_second" in metrics]:
            batches, runtime = self._eval_batches.pop(prefix), metrics.get(f"{prefix}_runtime")
            if runtime:
                metrics[f"{prefix}_steps_per_second"] = round(batches / runtime, 3)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        self._fix_steps_per_second(logs)
        if "train_samples_per_second" in logs and logs.get("train_runtime"):  # the end of `train` (all processes)
            sentences = torch.tensor([self._train_sentences], device=self.args.device)
            self._train_sentences = 0
            sentences = int(self.accelerator.reduce(sentences, reduction="sum").item())
            logs["train_samples_per_second"] = round(sentences / logs["train_runtime"], 3)
        super().log(logs, *args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any):
        output = super().predict(*args, **kwargs)
        self._fix_steps_per_second(output.metrics)
        return output

    def _token_dataloader(self, dataset: datasets.Dataset, *, training: bool, description: str) -> DataLoader:
        from transformers.trainer_utils import seed_worker

        cfg = getattr(self.accelerator, "dataloader_config", None)
        if cfg is not None and (cfg.split_batches or cfg.dispatch_batches):
            raise ValueError(
                "TokenBatchingSeq2SeqTrainer does not support accelerator_config split_batches/dispatch_batches: "
                "they re-cut token batches by sentence count"
            )
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(f"token batching needs a tokenized datasets.Dataset, got {type(dataset).__name__}")
        dataset = self._remove_unused_columns(dataset, description=description)
        if not training:  # evaluation_loop keys every sentence's result by its row
            dataset = dataset.add_column(EXAMPLE_INDEX, np.arange(len(dataset), dtype=np.int64))
        world, rank = max(1, self.args.world_size), (self.args.process_index if self.args.world_size > 1 else 0)
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        sampler = TokenBatchSampler.from_dataset(
            dataset,
            self.max_tokens if training else self.eval_max_tokens,
            max_sentences=self.max_sentences,
            shuffle=training,
            seed=seed,
            num_replicas=world,
            rank=rank,
            pad_to_multiple_of=getattr(self.data_collator, "pad_to_multiple_of", None),
        )
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and self.args.dataloader_num_workers > 0,
            worker_init_fn=partial(seed_worker, num_workers=self.args.dataloader_num_workers, rank=rank)
            if training else None,
        )
        return unshard_prepared_loader(self.accelerator.prepare(loader), sampler)

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        return self._token_dataloader(self.train_dataset, training=True, description="Training")

    def get_eval_dataloader(self, eval_dataset: str | datasets.Dataset | None = None) -> DataLoader:
        if eval_dataset is None and self.eval_dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        if isinstance(eval_dataset, str):
            eval_dataset = self.eval_dataset[eval_dataset]
        elif eval_dataset is None:
            eval_dataset = self.eval_dataset
        return self._token_dataloader(eval_dataset, training=False, description="Evaluation")

    def get_test_dataloader(self, test_dataset: datasets.Dataset) -> DataLoader:
        return self._token_dataloader(test_dataset, training=False, description="test")
