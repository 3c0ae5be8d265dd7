"""Read parallel corpora from any source into one `datasets.Dataset` schema, as Section 5.1's training data.

Every source gives the same schema: a `datasets.Dataset` with a single column `translation:
Translation(languages=[src_lang, tgt_lang])`, that is rows `{"translation": {src_lang: str, tgt_lang: str}}`, the
schema of the Hub's WMT datasets. The sources are Moses-style file pairs (`train.en`, `train.de`), TSV with a header
line naming the languages, JSON lines, a Hub dataset or a `save_to_disk` folder, and the bundled sample corpus. A
corpus read from files is cached as a memory-mapped Arrow file (`vaswani_hf.data.cache`).

An empty line in one file of a parallel pair (or a pair with an empty side in TSV, JSONL or Hub data) is a problem of
the data, but not a fatal one. The loaders keep the pair, so that row i is still line i when debugging, and log how
many such pairs there are and where. `filter_pairs` removes them and reports the count, so nothing is dropped silently.

Text files are read by `vaswani_hf.io`, the package's one reader. The formats' own errors (a line-count mismatch naming
both files, a malformed TSV or JSON line) are `CorpusError`s naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import resources
from itertools import zip_longest
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from .. import io
from ..io import UsageError
from . import cache

logger = logging.getLogger(__name__)


class CorpusError(UsageError):
    """Raised for bad parallel-corpus input; the message names the file, the line or the argument at fault."""


# The file formats are read here rather than by `load_dataset("text"/"csv"/"json")`: those builders do not name the
# file and line of a bad byte or record, nor both counts of a length mismatch, and `csv` interprets quotes that are
# plain text in MT data.


def read_lines(path: str | os.PathLike, *, strip: bool = True) -> list[str]:
    """Return the lines of a one-sentence-per-line corpus file, read by `vaswani_hf.io.read_lines`. That reader
    requires strict UTF-8 and names file:line on an error, drops the byte-order mark, treats CRLF and CR as line ends,
    and keeps the line count. `strip=True` also
    removes surrounding whitespace: leading and trailing blanks carry no content in a sentence-per-line corpus, and a
    trailing space would otherwise become a token the model must learn to emit."""
    lines = io.read_lines(path, what="corpus file")
    return [line.strip() for line in lines] if strip else lines


def _features(src_lang: str, tgt_lang: str) -> datasets.Features:
    return datasets.Features({"translation": datasets.Translation(languages=[src_lang, tgt_lang])})


def _pair_batches(
    pairs: Iterable[tuple[str, str]], src_lang: str, tgt_lang: str, stats: dict, chunk: int = 500_000
) -> Iterator[pa.RecordBatch]:
    """Yield record batches of the common schema from a stream of pairs, `chunk` pairs at a time, so that no Python
    dict is built per row and no list of all sentences is held. The pairs, and the pairs with an empty side, are
    counted into `stats`."""
    names = sorted((src_lang, tgt_lang))  # Translation stores a struct with the languages in sorted order
    src, tgt = [], []
    for s, t in pairs:
        if not s or not t:
            stats["empty"] += 1
            if len(stats["first_empty"]) < 10:
                stats["first_empty"].append(stats["pairs"] + 1)
        src.append(s)
        tgt.append(t)
        stats["pairs"] += 1
        if len(src) == chunk:
            yield _batch(src, tgt, src_lang, tgt_lang, names)
            src, tgt = [], []
    if src or stats["pairs"] == 0:
        yield _batch(src, tgt, src_lang, tgt_lang, names)


def _batch(src: list[str], tgt: list[str], src_lang: str, tgt_lang: str, names: list[str]) -> pa.RecordBatch:
    columns = {src_lang: pa.array(src, type=pa.string()), tgt_lang: pa.array(tgt, type=pa.string())}
    struct = pa.StructArray.from_arrays([columns[n] for n in names], names=names)
    return pa.RecordBatch.from_arrays([struct], names=["translation"])


def _pair_dataset(
    pairs: Iterable[tuple[str, str]],
    src_lang: str,
    tgt_lang: str,
    where: str,
    cache_name: str | Callable[[], str] | None = None,
) -> datasets.Dataset:
    """Return a dataset of the common schema built from a stream of pairs, cached as a memory-mapped Arrow file under
    `cache_name` (see `vaswani_hf.data.cache`) or held in memory. Pairs with an empty side are kept and reported (see
    the module docstring)."""
    if src_lang == tgt_lang:
        raise CorpusError(f"src_lang and tgt_lang are both {src_lang!r}")
    features = _features(src_lang, tgt_lang)
    stats = {"pairs": 0, "empty": 0, "first_empty": []}
    if cache_name is not None and cache.enabled():
        dataset, stats = cache.arrow_dataset(
            cache_name, lambda: _pair_batches(pairs, src_lang, tgt_lang, stats), features, stats
        )
    else:
        table = pa.Table.from_batches(list(_pair_batches(pairs, src_lang, tgt_lang, stats)))
        dataset = datasets.Dataset(table, info=datasets.DatasetInfo(features=features))
    if stats["empty"]:
        first = ", ".join(map(str, stats["first_empty"])) + (", ..." if stats["empty"] > 10 else "")
        logger.warning(
            "%s: %d of %d pairs have an empty side (line/row %s); kept for now, removed by filter_pairs",
            where,
            stats["empty"],
            stats["pairs"],
            first,
        )
    return dataset


def make_parallel_dataset(
    src: Sequence[str], tgt: Sequence[str], src_lang: str, tgt_lang: str, *, where: str = "pairs"
) -> datasets.Dataset:
    """Build the common schema from two aligned lists of sentences."""
    if len(src) != len(tgt):
        raise CorpusError(f"{where}: {len(src)} source sentences but {len(tgt)} target sentences")
    return _pair_dataset(zip(src, tgt), src_lang, tgt_lang, where)


def moses_paths(prefix: str | os.PathLike, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    """Return the paths `{prefix}.{src_lang}` and `{prefix}.{tgt_lang}`, or raise a CorpusError naming the missing
    file and the languages found."""
    prefix = Path(prefix)
    paths = (Path(f"{prefix}.{src_lang}"), Path(f"{prefix}.{tgt_lang}"))
    for lang, p in zip((src_lang, tgt_lang), paths):
        if p.is_dir():
            raise CorpusError(f"corpus file {p} is a folder; data_format moses expects PREFIX.{lang} files")
        if os.path.lexists(p) and not p.is_file():  # a named pipe is read as a file; a device or broken link is named
            io.check_input_file(p, "corpus file")
            continue
        if not p.is_file():
            found = sorted(
                q.name[len(prefix.name) + 1 :] for q in prefix.parent.glob(f"{prefix.name}.*") if q.is_file()
            )
            if not found:
                raise CorpusError(f"corpus file not found: {p} (no file matches {prefix}.*)")
            raise CorpusError(
                f"unknown language code {lang!r} for prefix {prefix}: {p} not found; languages available: {found}"
            )
    return paths


def iter_moses(
    prefix: str | os.PathLike, src_lang: str, tgt_lang: str, *, strip: bool = True
) -> Iterator[tuple[str, str]]:
    """Yield the pairs of the Moses-style files `{prefix}.{src_lang}` and `{prefix}.{tgt_lang}`, streamed. Files with
    different line counts raise a CorpusError naming both counts."""
    src_path, tgt_path = moses_paths(prefix, src_lang, tgt_lang)
    pairs = zip_longest(io.iter_lines(src_path, "corpus file"), io.iter_lines(tgt_path, "corpus file"))
    for n, (s, t) in enumerate(pairs):
        if s is None or t is None:
            longer = n + 1 + sum(1 for _ in pairs)
            counts = (n, longer) if s is None else (longer, n)
            raise CorpusError(
                f"line count mismatch: {src_path} has {counts[0]} lines but {tgt_path} has "
                f"{counts[1]} lines; line i of each file must be the same sentence pair"
            )
        yield (s.strip(), t.strip()) if strip else (s, t)


def iter_tsv(
    path: str | os.PathLike, src_lang: str, tgt_lang: str, *, header: bool = True, strip: bool = True
) -> Iterator[tuple[str, str]]:
    """Yield the pairs of a tab-separated file. With `header=True` (the default) the first line names the language of
    each column (e.g. `en<TAB>de`; more columns are allowed), and the columns are picked by language code; with
    `header=False` there must be exactly two columns, source then target. No quoting is interpreted: quotes are text,
    as they are in MT data."""
    lines = io.iter_lines(path, "corpus file")
    index_src, index_tgt, width, first = 0, 1, 2, 1
    if header:
        columns = [c.strip() for c in next(lines, "").split("\t")]
        if columns == [""]:
            raise CorpusError(
                f"{path}:1: empty, expected a header line naming the languages (e.g. {src_lang}<TAB>{tgt_lang})"
            )
        for lang in (src_lang, tgt_lang):
            if lang not in columns:
                raise CorpusError(
                    f"{path}:1: unknown language code {lang!r}: the header line names the columns "
                    f"{columns}; a TSV corpus starts with a header such as {src_lang}<TAB>{tgt_lang}"
                )
        index_src, index_tgt, width, first = columns.index(src_lang), columns.index(tgt_lang), len(columns), 2
    for number, line in enumerate(lines, first):
        fields = line.split("\t")
        if len(fields) != width:
            raise CorpusError(f"{path}:{number}: expected {width} tab-separated fields, found {len(fields)}")
        s, t = fields[index_src], fields[index_tgt]
        yield (s.strip(), t.strip()) if strip else (s, t)


def iter_jsonl(
    path: str | os.PathLike, src_lang: str, tgt_lang: str, *, strip: bool = True
) -> Iterator[tuple[str, str]]:
    """Yield the pairs of a JSON-lines file, whose lines are each `{"translation": {"en": ..., "de": ...}}` (the Hub
    schema) or `{"en": ..., "de": ...}`. A blank line is an error, since skipping it would shift the rows."""
    for number, line in enumerate(io.iter_lines(path, "corpus file"), 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{number}: invalid JSON ({e.msg} at column {e.colno})") from None
        pair = obj.get("translation", obj) if isinstance(obj, dict) else None
        if not isinstance(pair, dict):
            raise CorpusError(f"{path}:{number}: expected a JSON object with language keys, got {line[:80]!r}")
        for lang in (src_lang, tgt_lang):
            if lang not in pair:
                raise CorpusError(f"{path}:{number}: unknown language code {lang!r}: the line has keys {sorted(pair)}")
            if not isinstance(pair[lang], str):
                raise CorpusError(f"{path}:{number}: value for {lang!r} is not a string")
        s, t = pair[src_lang], pair[tgt_lang]
        yield (s.strip(), t.strip()) if strip else (s, t)


def load_corpus(
    format: str, path: str | os.PathLike, src_lang: str, tgt_lang: str, *, header: bool = True, strip: bool = True
) -> datasets.Dataset:
    """Load a corpus of `format` "moses" (`path` is the prefix of `train.en`, `train.de`), "tsv" or "jsonl" into the
    common schema (see `iter_moses`, `iter_tsv`, `iter_jsonl`), cached under its files' identity, and return it."""
    if format == "moses":
        files, where = moses_paths(path, src_lang, tgt_lang), f"{path}.{{{src_lang},{tgt_lang}}}"
    else:
        files, where = [io.check_input_file(path, "corpus file")], str(path)
    options = dict(header=header, strip=strip) if format == "tsv" else dict(strip=strip)
    pairs = FILE_FORMATS[format](path, src_lang, tgt_lang, **options)
    if any(io.reads_once(f) for f in files):  # a pipe is read once, and its cache entry is named after its content
        digest = hashlib.sha256()
        pairs = _hashed(pairs, digest)

        def name() -> str:
            return f"{format}-{cache.key(format, src_lang, tgt_lang, *options.values(), digest.hexdigest())}"

    else:
        name = f"{format}-{cache.key(format, src_lang, tgt_lang, *options.values(), files=files)}"
    return _pair_dataset(pairs, src_lang, tgt_lang, where, cache_name=name)


def _hashed(pairs: Iterable[tuple[str, str]], digest) -> Iterator[tuple[str, str]]:
    """Yield `pairs` unchanged, adding each to `digest` as it passes."""
    for s, t in pairs:
        digest.update(json.dumps([s, t]).encode("utf-8", "surrogatepass") + b"\n")
        yield s, t


FILE_FORMATS = {"moses": iter_moses, "tsv": iter_tsv, "jsonl": iter_jsonl}


def usable_pairs(dataset: datasets.Dataset, src_lang: str, tgt_lang: str) -> int:
    """Return the number of pairs of a dataset in the common schema whose sides are both non-empty, computed in
    Arrow."""
    if len(dataset) == 0:
        return 0
    pairs = dataset.select_columns(["translation"]).with_format("arrow")[:]["translation"]
    empty = pc.or_(
        pc.equal(pc.utf8_length(pc.struct_field(pairs, src_lang)), 0),
        pc.equal(pc.utf8_length(pc.struct_field(pairs, tgt_lang)), 0),
    )
    return len(dataset) - int(pc.sum(empty).as_py() or 0)


def scan_corpus(source: str | os.PathLike, src_lang: str, tgt_lang: str, format: str) -> tuple[int, int]:
    """Count the pairs of a corpus file (or Moses prefix), streamed, and return (pairs, pairs with both sides
    non-empty). It raises every error that loading would, for `--check`."""
    total = usable = 0
    for s, t in FILE_FORMATS[format](source, src_lang, tgt_lang):
        total += 1
        usable += bool(s and t)
    return total, usable


def load_hub(
    name: str | os.PathLike,
    src_lang: str,
    tgt_lang: str,
    *,
    config: str | None = None,
    split: str = "train",
    **load_kwargs: Any,
) -> datasets.Dataset:
    """Load a Hub dataset with a `translation` column through `datasets.load_dataset(name, config, split=split)`, e.g.
    `load_hub("wmt14", "en", "de", config="de-en")`. A local folder written by `Dataset.save_to_disk` is read with
    `datasets.load_from_disk`. Texts are kept as they are (no stripping); pairs with an empty side are reported."""
    p = Path(name)
    if p.is_dir() and ((p / "dataset_info.json").is_file() or (p / "dataset_dict.json").is_file()):
        ds = datasets.load_from_disk(str(p))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise CorpusError(f"split {split!r} not in {p} (splits: {list(ds)})")
            ds = ds[split]
    else:
        try:
            ds = datasets.load_dataset(str(name), config, split=split, **load_kwargs)
        except FileNotFoundError as error:  # no such local path, and no such dataset on the Hub
            raise CorpusError(
                f"corpus not found: {name} is no local corpus (PREFIX.{src_lang} + PREFIX.{tgt_lang}, "
                f".tsv, .jsonl, a save_to_disk folder) and no dataset datasets.load_dataset finds "
                f"({' '.join(str(error).split())})"
            ) from None
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
    if sorted(langs) != sorted([src_lang, tgt_lang]):  # for multilingual data, keep the two requested sides
        ds = ds.map(
            lambda b: {"translation": [{src_lang: x[src_lang], tgt_lang: x[tgt_lang]} for x in b["translation"]]},
            batched=True,
            features=_features(src_lang, tgt_lang),
            desc="selecting languages",
        )
    ds = ds.cast(_features(src_lang, tgt_lang))
    n_empty = len(ds) - usable_pairs(ds, src_lang, tgt_lang)
    if n_empty:
        logger.warning(
            "%s: %d of %d pairs have an empty side; kept for now, removed by filter_pairs", name, n_empty, len(ds)
        )
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

    `format` is "moses" (`source` is a prefix), "tsv", "jsonl", "hub" (a Hub name or a `save_to_disk` folder), or
    "auto", which chooses by what `source` is: an existing `.tsv` file is tsv, an existing `.jsonl` or `.json` file is
    jsonl, an existing folder is hub (`load_from_disk`), an existing `{source}.{src_lang}` file is moses, and anything
    else is a Hub name (`datasets.load_dataset(source, config)`), unless it looks like a local file that is missing.
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
            raise CorpusError(f"corpus not found: {source} (format=auto)")
        else:
            fmt = "hub"
    if fmt in FILE_FORMATS:
        return load_corpus(fmt, source, src_lang, tgt_lang, **kwargs)
    if fmt == "hub":
        return load_hub(source, src_lang, tgt_lang, config=config, split=split, **kwargs)
    raise ValueError(f"format={format!r}: expected 'auto', 'moses', 'tsv', 'jsonl' or 'hub'")


def sample_corpus_path() -> Path:
    """Return the folder of the bundled EN-DE sample corpus (`{train,valid,test}.{en,de}`, package data of
    `vaswani_hf`)."""
    return Path(str(resources.files("vaswani_hf") / "sample_data"))


def load_sample_corpus(split: str = "train", src_lang: str = "en", tgt_lang: str = "de") -> datasets.Dataset:
    """Load a split ("train", "valid" or "test") of the bundled sample corpus in the common schema, and return it."""
    folder = sample_corpus_path()
    if not Path(f"{folder / split}.{src_lang}").is_file():
        raise CorpusError(f"sample corpus split {split!r} not found in {folder} (expected {split}.{src_lang})")
    return load_corpus("moses", folder / split, src_lang, tgt_lang)
