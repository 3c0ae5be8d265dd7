"""Cache corpora and tokenizers, so that a second launch on the same corpus is cheap and memory stays flat as the
corpus grows.

A corpus read from text files is written once as an Arrow file and memory-mapped from then on (`datasets` does the same
for Hub datasets). The main process and the `Dataset.map` workers then read pages of one file instead of each holding
the corpus: at 0.5M pairs the in-memory corpus and its 8 tokenisation workers held about 11 GB, and now they share the
page cache. The tokenized splits are `datasets`' own map caches beside it, and the joint BPE is kept under a key of the
training corpus and the tokenizer settings, so that a new run on the same data does not train it again.

Everything lives under `datasets`' cache folder (HF_DATASETS_CACHE, by default ~/.cache/huggingface/datasets), in
`vaswani_hf/`. A key covers the input files' paths, sizes and modification times, so that an edited corpus is read
again. With `datasets.disable_caching()` nothing is written and corpora stay in memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa

from ..io import apply_umask, fsync_tree, replace_atomically

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1  # raise it when what a cached corpus or tokenizer holds changes: old entries are then missed


def enabled() -> bool:
    """Return whether anything is cached, by `datasets`' own switch (`datasets.disable_caching()`)."""
    return datasets.is_caching_enabled()


def root() -> Path:
    """Return the cache's folder, `vaswani_hf/` under `datasets`' cache folder (HF_DATASETS_CACHE)."""
    return Path(datasets.config.HF_DATASETS_CACHE) / "vaswani_hf"


def key(*parts: Any, files: Sequence[str | os.PathLike] = ()) -> str:
    """Return a short hash of `parts` and of each file's resolved path, size and modification time."""
    identity = [[str(Path(f).resolve()), os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files]
    text = json.dumps([FORMAT_VERSION, identity, *parts], default=str, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def arrow_dataset(
    name: str | Callable[[], str],
    build: Callable[[], Iterable[pa.RecordBatch]],
    features: datasets.Features,
    info: dict | None = None,
) -> tuple[datasets.Dataset, dict]:
    """Return the dataset cached as `root()/corpora/{name}.arrow`, and its `info`. On a miss the file is written whole
    from `build()`'s record batches, and `info` is kept beside it, to be returned again on a hit. `name` may be a
    function, which is called once `build()` has been read to its end. A corpus that can be read only once (a pipe)
    is then always read, and its cache file is named after its content."""
    folder = root() / "corpora"
    if callable(name):
        folder.mkdir(parents=True, exist_ok=True)
        reading = folder / f".reading-{os.getpid()}.arrow"
        try:
            _write_batches(reading, build(), features)
            path = folder / f"{name()}.arrow"
            apply_umask(reading)
            fsync_tree(reading)
            os.replace(reading, path)  # the same content is named the same: a copy read again replaces the first
        finally:
            reading.unlink(missing_ok=True)
    else:
        path = folder / f"{name}.arrow"
        if not (path.is_file() and path.with_suffix(".json").is_file()):
            path.parent.mkdir(parents=True, exist_ok=True)
            with replace_atomically(path) as temporary:
                _write_batches(temporary, build(), features)
    sidecar = path.with_suffix(".json")
    if callable(name) or not sidecar.is_file():
        with replace_atomically(sidecar) as temporary:
            temporary.write_text(json.dumps(info or {}), encoding="utf-8")
        logger.info("cached corpus: %s", path)
    dataset = datasets.Dataset.from_file(str(path), info=datasets.DatasetInfo(features=features))
    return dataset, json.loads(sidecar.read_text(encoding="utf-8"))


def _write_batches(path: Path, batches: Iterable[pa.RecordBatch], features: datasets.Features) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, features.arrow_schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def cached_tokenizer(name: str) -> Path | None:
    """Return the folder of a tokenizer cached under `name`, or None if there is none."""
    folder = root() / "tokenizers" / name
    return folder if (folder / "tokenizer.json").is_file() else None


def keep_tokenizer(name: str, folder: str | os.PathLike) -> None:
    """Copy a trained tokenizer folder into the cache under `name`, whole or not at all; with caching off, do
    nothing."""
    if not enabled():
        return
    target = root() / "tokenizers" / name
    with replace_atomically(target, folder=True) as temporary:
        shutil.copytree(folder, temporary, dirs_exist_ok=True)
