"""Tests of vaswani_hf.data.cache: the key of a corpus (its files' paths, sizes and modification times), a corpus
written once as an Arrow file and memory-mapped from then on (whole or not at all, with its info beside it), and the
joint BPE kept per corpus. The datasets cache is pointed at each test's tmp_path, so nothing is written outside it."""

from __future__ import annotations

import json
import os

import datasets
import pyarrow as pa
import pytest
from data_helpers import write_text

from vaswani_hf.data import cache
from vaswani_hf.tokenization import load_tokenizer

FEATURES = datasets.Features({"en": datasets.Value("string"), "n": datasets.Value("int64")})
ROWS = [{"en": f"sentence {i}", "n": i} for i in range(7)]


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    """The datasets cache under tmp_path (the environment variable and the value datasets read at import), with
    caching on."""
    home = tmp_path / "hf-datasets"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(home))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home)
    was_enabled = datasets.is_caching_enabled()
    datasets.enable_caching()
    yield home
    if not was_enabled:
        datasets.disable_caching()


@pytest.fixture
def caching_off(cache_home):
    datasets.disable_caching()
    yield cache_home
    datasets.enable_caching()


class Builder:
    """`build` for arrow_dataset: yields ROWS in record batches of 3 and counts its calls; `fail_after` raises after
    that many batches (a crash or an unreadable corpus mid-way)."""

    def __init__(self, fail_after: int | None = None):
        self.calls = 0
        self.fail_after = fail_after

    def __call__(self):
        self.calls += 1
        for start in range(0, len(ROWS), 3):
            if self.fail_after is not None and start // 3 == self.fail_after:
                raise RuntimeError("corpus unreadable")
            chunk = ROWS[start : start + 3]
            yield pa.RecordBatch.from_pylist(chunk, schema=FEATURES.arrow_schema)


def files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# ------------------------------------------------------------------------------------------------ root, enabled, key


def test_root_is_inside_the_datasets_cache_and_follows_caching(cache_home):
    assert cache.root() == cache_home / "vaswani_hf"
    assert cache.enabled()
    datasets.disable_caching()
    try:
        assert not cache.enabled()
    finally:
        datasets.enable_caching()


def test_key_is_stable_for_the_same_files_and_parts(tmp_path, monkeypatch):
    """Same parts, same files (named relatively or absolutely): the same key, a short hex string."""
    a = write_text(tmp_path / "train.en", ["one", "two"])
    first = cache.key("moses", "en", "de", files=[a])
    assert first == cache.key("moses", "en", "de", files=[a])
    monkeypatch.chdir(tmp_path)
    assert cache.key("moses", "en", "de", files=["train.en"]) == first
    assert len(first) == 20 and int(first, 16) >= 0


def test_key_changes_with_the_parts_and_the_files(tmp_path):
    """Another setting, another file, or another file order is another key."""
    a = write_text(tmp_path / "train.en", ["one", "two"])
    b = write_text(tmp_path / "train.de", ["eins", "zwei"])
    base = cache.key("moses", "en", "de", files=[a, b])
    others = [
        cache.key("moses", "de", "en", files=[a, b]),
        cache.key("tsv", "en", "de", files=[a, b]),
        cache.key("moses", "en", "de", files=[a]),
        cache.key("moses", "en", "de", files=[b, a]),
        cache.key("moses", "en", "de"),
    ]
    assert len({base, *others}) == 1 + len(others)


def test_key_changes_when_a_file_is_edited(tmp_path):
    """Another size at the same modification time, or another modification time at the same size and content:
    either makes another key (an edited corpus is read again); restoring both restores the key."""
    path = write_text(tmp_path / "train.en", ["one", "two"])
    stamp = 1_700_000_000_000_000_000
    os.utime(path, ns=(stamp, stamp))
    base = cache.key("moses", files=[path])
    write_text(path, ["one", "two", "three"])
    os.utime(path, ns=(stamp, stamp))
    resized = cache.key("moses", files=[path])
    write_text(path, ["one", "two"])
    os.utime(path, ns=(stamp, stamp))
    assert cache.key("moses", files=[path]) == base
    os.utime(path, ns=(stamp + 1, stamp + 1))
    touched = cache.key("moses", files=[path])
    assert len({base, resized, touched}) == 3


# ------------------------------------------------------------------------------------------------ arrow_dataset


def test_a_corpus_is_built_once_then_read_from_its_file(cache_home):
    """The first call builds the Arrow file (rows in order across record batches) and keeps `info` beside it; the
    second maps the same file and returns the same rows and info without calling build."""
    build = Builder()
    info = {"empty_pairs": 2, "sides": {"en": 1, "de": 1}}
    dataset, got = cache.arrow_dataset("moses-abc", build, FEATURES, info=info)
    path = cache.root() / "corpora" / "moses-abc.arrow"
    assert build.calls == 1 and got == info
    assert dataset.to_list() == ROWS and dataset.features == FEATURES
    assert [f["filename"] for f in dataset.cache_files] == [str(path)]
    assert json.loads(path.with_suffix(".json").read_text()) == info
    assert files_under(cache_home) == ["vaswani_hf/corpora/moses-abc.arrow", "vaswani_hf/corpora/moses-abc.json"]

    never = Builder(fail_after=0)
    again, got_again = cache.arrow_dataset("moses-abc", never, FEATURES, info={"ignored": True})
    assert never.calls == 0
    assert again.to_list() == ROWS and got_again == info
    assert [f["filename"] for f in again.cache_files] == [str(path)]


def test_info_defaults_to_empty_and_names_are_kept_apart(cache_home):
    """No info is kept as {}; another name is another file, built on its own."""
    build = Builder()
    _, info = cache.arrow_dataset("a", build, FEATURES)
    assert info == {}
    assert cache.arrow_dataset("a", build, FEATURES)[1] == {}
    other, _ = cache.arrow_dataset("b", build, FEATURES, info={"k": 1})
    assert build.calls == 2 and other.to_list() == ROWS
    assert cache.arrow_dataset("b", build, FEATURES)[1] == {"k": 1}


def test_a_build_that_fails_leaves_nothing_behind(cache_home):
    """A build raising after its first record batch: the error reaches the caller, and neither a cache file, nor a
    sidecar, nor a temporary file is left, so the next call builds again and succeeds."""
    broken = Builder(fail_after=1)
    with pytest.raises(RuntimeError, match="corpus unreadable"):
        cache.arrow_dataset("moses-broken", broken, FEATURES, info={"n": 1})
    assert broken.calls == 1
    assert files_under(cache_home) == []
    build = Builder()
    dataset, info = cache.arrow_dataset("moses-broken", build, FEATURES, info={"n": 1})
    assert build.calls == 1 and dataset.to_list() == ROWS and info == {"n": 1}


def test_a_corpus_without_its_sidecar_is_built_again(cache_home):
    """A run stopped between the Arrow file and its info: the pair is incomplete, so the corpus is built again
    (and the info is not lost)."""
    build = Builder()
    cache.arrow_dataset("moses-x", build, FEATURES, info={"empty_pairs": 3})
    (cache.root() / "corpora" / "moses-x.json").unlink()
    dataset, info = cache.arrow_dataset("moses-x", build, FEATURES, info={"empty_pairs": 3})
    assert build.calls == 2 and info == {"empty_pairs": 3} and dataset.to_list() == ROWS
    assert len(files_under(cache_home)) == 2


def test_an_empty_corpus_is_cached_too(cache_home):
    """A build with no record batches gives an empty dataset with the features, read back from the cache."""
    calls = []

    def nothing():
        calls.append(1)
        return iter(())

    dataset, _ = cache.arrow_dataset("empty", nothing, FEATURES)
    again, _ = cache.arrow_dataset("empty", nothing, FEATURES)
    assert len(calls) == 1
    assert len(dataset) == len(again) == 0 and again.features == FEATURES


# ------------------------------------------------------------------------------------------------ tokenizers


@pytest.fixture
def tokenizer_folder(tmp_path, tok):
    folder = tmp_path / "trained" / "tokenizer"
    tok.save_pretrained(str(folder))
    return folder


def test_a_kept_tokenizer_comes_back_whole(cache_home, tokenizer_folder):
    """keep_tokenizer copies the folder under its name; cached_tokenizer finds it, file for file, and it loads as the
    same tokenizer. An unknown name is None."""
    assert cache.cached_tokenizer("bpe-1") is None
    source = files_under(tokenizer_folder)
    cache.keep_tokenizer("bpe-1", tokenizer_folder)
    found = cache.cached_tokenizer("bpe-1")
    assert files_under(tokenizer_folder) == source and "tokenizer.json" in source  # copied, not moved
    assert found == cache.root() / "tokenizers" / "bpe-1"
    assert files_under(found) == files_under(tokenizer_folder)
    for name in files_under(tokenizer_folder):
        assert (found / name).read_bytes() == (tokenizer_folder / name).read_bytes()
    original, cached = load_tokenizer(tokenizer_folder), load_tokenizer(found)
    sentence = "The cat paints the blue door again."
    assert cached(sentence)["input_ids"] == original(sentence)["input_ids"]
    assert cache.cached_tokenizer("bpe-2") is None


def test_keeping_again_replaces_the_folder_whole(cache_home, tokenizer_folder, tmp_path):
    """A second keep under the same name replaces the folder: no file of the first copy survives."""
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "tokenizer.json").write_text("{}")
    (stale / "left-over.txt").write_text("old")
    cache.keep_tokenizer("bpe-1", stale)
    assert files_under(cache.cached_tokenizer("bpe-1")) == ["left-over.txt", "tokenizer.json"]
    cache.keep_tokenizer("bpe-1", tokenizer_folder)
    found = cache.cached_tokenizer("bpe-1")
    assert files_under(found) == files_under(tokenizer_folder)
    assert files_under(cache.root() / "tokenizers") == [f"bpe-1/{n}" for n in files_under(tokenizer_folder)]


def test_a_folder_without_tokenizer_json_is_not_a_cached_tokenizer(cache_home):
    """Only a folder holding tokenizer.json counts (e.g. not an empty or foreign folder under the name)."""
    partial = cache.root() / "tokenizers" / "bpe-partial"
    partial.mkdir(parents=True)
    assert cache.cached_tokenizer("bpe-partial") is None
    (partial / "tokenizer_config.json").write_text("{}")
    assert cache.cached_tokenizer("bpe-partial") is None
    (partial / "tokenizer.json").write_text("{}")
    assert cache.cached_tokenizer("bpe-partial") == partial


def test_a_failed_copy_keeps_nothing(cache_home, tmp_path):
    """Keeping a folder that is not there raises, and leaves neither the name nor a temporary folder in the cache."""
    with pytest.raises(OSError):
        cache.keep_tokenizer("bpe-missing", tmp_path / "no-such-folder")
    assert cache.cached_tokenizer("bpe-missing") is None
    tokenizers = cache.root() / "tokenizers"
    assert not tokenizers.exists() or list(tokenizers.iterdir()) == []


def test_with_caching_disabled_no_tokenizer_is_kept(caching_off, tokenizer_folder):
    """datasets.disable_caching(): keep_tokenizer writes nothing at all, so nothing is found afterwards."""
    assert not cache.enabled()
    cache.keep_tokenizer("bpe-1", tokenizer_folder)
    assert files_under(caching_off) == []
    assert cache.cached_tokenizer("bpe-1") is None
