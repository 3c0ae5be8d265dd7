"""Tests of vaswani_hf.data.corpora: every source into one `datasets` schema, the streaming readers, and their
errors (file and line named; a line-count mismatch names both files and both counts)."""

from __future__ import annotations

import json
import logging

import datasets
import pytest
from data_helpers import write_text

from vaswani_hf.data.corpora import (
    CorpusError,
    iter_jsonl,
    iter_moses,
    iter_tsv,
    load_corpus,
    load_hub,
    load_parallel,
    load_sample_corpus,
    make_parallel_dataset,
    read_lines,
    sample_corpus_path,
    scan_corpus,
)
from vaswani_hf.io import UsageError

# ------------------------------------------------------------------------------------------------------ loading


def test_all_formats_give_the_same_dataset(tmp_path, pairs):
    en, de = pairs
    write_text(tmp_path / "c.en", en)
    write_text(tmp_path / "c.de", de)
    ref = load_corpus("moses", tmp_path / "c", "en", "de")
    assert ref.column_names == ["translation"] and len(ref) == len(en)
    assert ref[0]["translation"] == {"en": en[0], "de": de[0]}
    assert isinstance(ref.features["translation"], datasets.Translation)

    write_text(tmp_path / "h.tsv", ["de\tid\ten"] + [f"{d}\t{i}\t{e}" for i, (e, d) in enumerate(zip(en, de))])
    write_text(tmp_path / "n.tsv", [f"{e}\t{d}" for e, d in zip(en, de)])
    write_text(tmp_path / "nested.jsonl", [json.dumps({"translation": {"en": e, "de": d}}) for e, d in zip(en, de)])
    write_text(tmp_path / "flat.jsonl", [json.dumps({"de": d, "en": e, "x": 1}) for e, d in zip(en, de)])
    ref.save_to_disk(str(tmp_path / "saved"))
    hub_dir = tmp_path / "hubdata"  # a local dataset read through the real datasets.load_dataset code path
    hub_dir.mkdir()
    write_text(
        hub_dir / "train.jsonl",
        [json.dumps({"id": i, "translation": {"de": d, "en": e, "fr": "-"}}) for i, (e, d) in enumerate(zip(en, de))],
    )
    loaded = {
        "tsv header": load_corpus("tsv", tmp_path / "h.tsv", "en", "de"),
        "tsv no header": load_corpus("tsv", tmp_path / "n.tsv", "en", "de", header=False),
        "jsonl nested": load_corpus("jsonl", tmp_path / "nested.jsonl", "en", "de"),
        "jsonl flat": load_corpus("jsonl", tmp_path / "flat.jsonl", "en", "de"),
        "save_to_disk": load_hub(tmp_path / "saved", "en", "de"),
        "load_dataset": load_hub(str(hub_dir), "en", "de", split="train"),
        "auto moses": load_parallel(tmp_path / "c", "en", "de"),
        "auto tsv": load_parallel(tmp_path / "h.tsv", "en", "de"),
        "auto jsonl": load_parallel(tmp_path / "nested.jsonl", "en", "de"),
        "auto hub": load_parallel(str(hub_dir), "en", "de"),
        "lists": make_parallel_dataset(en, de, "en", "de"),
    }
    for name, ds in loaded.items():
        assert ds.features == ref.features, name
        assert ds.column_names == ["translation"], name
        assert ds.to_list() == ref.to_list(), name


def test_large_corpus_is_built_in_arrow_chunks(tmp_path, pairs, monkeypatch):
    """The Arrow table is built a chunk at a time; rows and order are the same as in one chunk."""
    from vaswani_hf.data import corpora

    en, de = pairs
    write_text(tmp_path / "c.en", en)
    write_text(tmp_path / "c.de", de)
    whole = load_corpus("moses", tmp_path / "c", "en", "de").to_list()
    original = corpora._pair_batches
    monkeypatch.setattr(corpora, "_pair_batches", lambda *a, **k: original(*a, **{**k, "chunk": 7}))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "other-cache"))
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", tmp_path / "other-cache")
    assert load_corpus("moses", tmp_path / "c", "en", "de").to_list() == whole
    assert (
        load_corpus(
            "tsv", write_text(tmp_path / "c.tsv", ["en\tde"] + [f"{e}\t{d}" for e, d in zip(en, de)]), "en", "de"
        ).to_list()
        == whole
    )


def test_a_corpus_file_is_read_once_then_memory_mapped(tmp_path, pairs, monkeypatch, caplog):
    """The first load writes the corpus as an Arrow file in the datasets cache; the next one maps that file without
    reading the text again (a second launch on WMT-sized data), keeps reporting empty pairs, and an edited file is
    read again."""
    import datasets

    from vaswani_hf.data import corpora

    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", tmp_path / "cache")
    en, de = pairs
    write_text(tmp_path / "c.en", en[:-1] + [""])
    write_text(tmp_path / "c.de", de)
    first = load_corpus("moses", tmp_path / "c", "en", "de")
    assert first.cache_files and str(tmp_path / "cache") in first.cache_files[0]["filename"]

    def unread(*args, **kwargs):  # a generator: fails only if the text is read
        raise AssertionError("read again")
        yield

    monkeypatch.setattr(corpora, "iter_moses", unread)
    caplog.clear()
    second = load_corpus("moses", tmp_path / "c", "en", "de")
    assert second.to_list() == first.to_list() and second._fingerprint == first._fingerprint
    assert f"1 of {len(en)} pairs have an empty side" in caplog.text
    monkeypatch.undo()
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", tmp_path / "cache")
    write_text(tmp_path / "c.en", en)  # edited: another size or time, another key
    assert load_corpus("moses", tmp_path / "c", "en", "de")["translation"][-1]["en"] == en[-1]
    datasets.disable_caching()
    try:
        assert not load_corpus("moses", tmp_path / "c", "en", "de").cache_files  # caching off: in memory, as before
    finally:
        datasets.enable_caching()


def test_hub_load_dataset_call(monkeypatch, tmp_path, pairs):
    """`load_hub("wmt14", config="de-en")` calls datasets.load_dataset(name, config, split=...) (no download here)."""
    en, de = pairs
    calls = []
    fake = datasets.Dataset.from_dict(
        {"translation": [{"de": d, "en": e} for e, d in zip(en, de)]},
        features=datasets.Features({"translation": datasets.Translation(languages=["de", "en"])}),
    )

    def fake_load_dataset(name, config=None, split=None, **kw):
        calls.append((name, config, split))
        return fake

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_parallel("wmt14", "en", "de", config="de-en", split="validation")
    assert calls == [("wmt14", "de-en", "validation")]
    assert ds.features["translation"] == datasets.Translation(languages=["en", "de"])
    assert ds[0]["translation"] == {"en": en[0], "de": de[0]}
    with pytest.raises(CorpusError, match=r"unknown language code 'fr'.*wmt14.*\['de', 'en'\]"):
        load_parallel("wmt14", "en", "fr", config="de-en")


def test_missing_file(tmp_path, corpus_dir):
    """A missing corpus file is a UsageError naming it (exit status 2 in the tools): CorpusError (a UsageError) from
    the Moses and format=auto paths, vaswani_hf.io's reader's UsageError from load_corpus."""
    with pytest.raises(CorpusError, match=r"corpus file not found: .*nothere\.en \(no file matches .*nothere\.\*\)"):
        load_corpus("moses", tmp_path / "nothere", "en", "de")
    with pytest.raises(UsageError, match=r"corpus file not found: .*missing\.tsv"):
        load_corpus("tsv", tmp_path / "missing.tsv", "en", "de")
    with pytest.raises(UsageError, match=r"corpus file not found: .*missing\.jsonl"):
        load_corpus("jsonl", tmp_path / "missing.jsonl", "en", "de")
    with pytest.raises(CorpusError, match=r"corpus not found: .*missing\.jsonl"):
        load_parallel(tmp_path / "missing.jsonl", "en", "de")
    (tmp_path / "folder.en").mkdir()
    write_text(tmp_path / "folder.de", ["x"])
    with pytest.raises(CorpusError, match=r"corpus file .*folder\.en is a folder"):
        load_corpus("moses", tmp_path / "folder", "en", "de")


def test_mismatched_line_counts_names_both_files(tmp_path, pairs):
    en, de = pairs
    write_text(tmp_path / "m.en", en)
    write_text(tmp_path / "m.de", de[:-3])
    with pytest.raises(CorpusError) as e:
        load_corpus("moses", tmp_path / "m", "en", "de")
    msg = str(e.value)
    assert f"m.en has {len(en)} lines" in msg and f"m.de has {len(de) - 3} lines" in msg


def test_non_utf8_names_file_and_line(tmp_path, pairs):
    """A byte that is not UTF-8 is reported by vaswani_hf.io's reader as "file:line" in a UsageError (the base of
    CorpusError), with the byte and its position in the line."""
    en, de = pairs
    write_text(tmp_path / "u.en", en)
    raw = "".join(f"{x}\n" for x in de).encode("utf-8").split(b"\n")
    raw[6] = raw[6] + b" Stra\xdfe"  # latin-1 "ß" on line 7
    (tmp_path / "u.de").write_bytes(b"\n".join(raw))
    position = len(de[6].encode("utf-8")) + len(" Stra") + 1
    with pytest.raises(UsageError, match=rf"u\.de:7: not valid UTF-8 \(byte 0xdf at byte {position} of the line\)"):
        load_corpus("moses", tmp_path / "u", "en", "de")


def test_unknown_language_code(tmp_path, corpus_dir, pairs):
    with pytest.raises(CorpusError, match=r"unknown language code 'fr'.*languages available: \['de', 'en'\]"):
        load_corpus("moses", corpus_dir / "train", "en", "fr")
    en, de = pairs
    write_text(tmp_path / "h.tsv", ["en\tde"] + [f"{e}\t{d}" for e, d in zip(en, de)])
    with pytest.raises(
        CorpusError,
        match=r"h\.tsv:1: unknown language code 'fr': the header line names the columns "
        r"\['en', 'de'\]",
    ):
        load_corpus("tsv", tmp_path / "h.tsv", "fr", "de")
    write_text(tmp_path / "j.jsonl", [json.dumps({"en": e, "de": d}) for e, d in zip(en, de)])
    with pytest.raises(
        CorpusError,
        match=r"j\.jsonl:1: unknown language code 'fr': the line has keys "
        r"\['de', 'en'\]",
    ):
        load_corpus("jsonl", tmp_path / "j.jsonl", "en", "fr")
    with pytest.raises(CorpusError, match="both 'en'"):
        load_corpus("moses", corpus_dir / "train", "en", "en")


def test_malformed_tsv_and_jsonl_lines(tmp_path):
    write_text(tmp_path / "bad.tsv", ["en\tde", "a\tb", "only one field"])
    with pytest.raises(CorpusError, match=r"bad\.tsv:3: expected 2 tab-separated fields, found 1"):
        load_corpus("tsv", tmp_path / "bad.tsv", "en", "de")
    write_text(tmp_path / "bad.jsonl", ['{"en": "a", "de": "b"}', '{"en": "a", "de": '])
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: invalid JSON"):
        load_corpus("jsonl", tmp_path / "bad.jsonl", "en", "de")
    write_text(tmp_path / "list.jsonl", ['["a", "b"]'])
    with pytest.raises(CorpusError, match=r"list\.jsonl:1: expected a JSON object with language keys"):
        load_corpus("jsonl", tmp_path / "list.jsonl", "en", "de")
    write_text(tmp_path / "num.jsonl", ['{"en": "a", "de": 3}'])
    with pytest.raises(CorpusError, match=r"num\.jsonl:1: value for 'de' is not a string"):
        load_corpus("jsonl", tmp_path / "num.jsonl", "en", "de")
    (tmp_path / "empty.tsv").write_bytes(b"")
    with pytest.raises(CorpusError, match=r"empty\.tsv:1: empty, expected a header line"):
        load_corpus("tsv", tmp_path / "empty.tsv", "en", "de")


def test_empty_lines_are_kept_and_reported(tmp_path, pairs, caplog):
    """Rows stay aligned with lines (row i is line i+1); the pairs with an empty side are counted and located
    (filter_pairs removes them: tests/test_data_preprocessing.py)."""
    en, de = list(pairs[0][:50]), list(pairs[1][:50])
    en[3], de[10], en[20], de[20] = "", "   ", "", ""
    write_text(tmp_path / "e.en", en)
    write_text(tmp_path / "e.de", de)
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.data"):
        ds = load_corpus("moses", tmp_path / "e", "en", "de")
    assert len(ds) == 50  # kept at load time: row i is line i+1
    assert "3 of 50 pairs have an empty side (line/row 4, 11, 21)" in caplog.text
    assert ds[10]["translation"]["de"] == "" and ds[11]["translation"] == {"en": en[11], "de": de[11]}


def test_crlf_bom_and_strip(tmp_path):
    (tmp_path / "w.en").write_bytes("\ufeffHello  there \r\nSecond\r\n".encode("utf-8"))
    (tmp_path / "w.de").write_bytes(b"Hallo\nZweite")  # no final newline
    ds = load_corpus("moses", tmp_path / "w", "en", "de")
    assert ds["translation"] == [{"en": "Hello  there", "de": "Hallo"}, {"en": "Second", "de": "Zweite"}]
    raw = load_corpus("moses", tmp_path / "w", "en", "de", strip=False)
    assert raw[0]["translation"]["en"] == "Hello  there "
    assert raw[1]["translation"]["en"] == "Second"  # the line end is not part of the line, stripped or not


def test_read_lines_is_the_io_reader_plus_strip(tmp_path):
    path = tmp_path / "r.en"
    path.write_bytes("\ufeff  a \r\nb\u2028c\rd\n\n".encode("utf-8"))
    assert read_lines(path) == ["a", "b\u2028c", "d", ""]
    assert read_lines(path, strip=False) == ["  a ", "b\u2028c", "d", ""]


def test_sample_corpus_helpers():
    folder = sample_corpus_path()
    assert folder.name == "sample_data" and folder.parent.name == "vaswani_hf"
    if not (folder / "train.en").is_file():
        with pytest.raises(CorpusError, match="sample corpus split 'train' not found"):  # a UsageError: exit 2
            load_sample_corpus("train")
        pytest.skip("bundled sample corpus not written yet (vaswani_hf/sample_data)")
    for split in ("train", "valid", "test"):
        ds = load_sample_corpus(split)
        assert len(ds) > 0 and set(ds[0]["translation"]) == {"en", "de"}
    with pytest.raises(CorpusError, match="sample corpus split 'dev' not found"):
        load_sample_corpus("dev")


# ------------------------------------------------------------------------------------------------ streaming readers


def test_iter_moses_streams_then_names_both_files_and_counts(tmp_path):
    write_text(tmp_path / "s.en", ["a", "b", "c", "d", "e"])
    write_text(tmp_path / "s.de", ["A", "B", "C"])
    pairs = iter_moses(tmp_path / "s", "en", "de")
    assert [next(pairs) for _ in range(3)] == [("a", "A"), ("b", "B"), ("c", "C")]  # lazily, pair by pair
    with pytest.raises(CorpusError) as error:
        next(pairs)
    message = str(error.value)
    assert message.startswith(
        f"line count mismatch: {tmp_path / 's.en'} has 5 lines but {tmp_path / 's.de'} has 3 lines"
    )
    # the other way round: the target is the longer file
    with pytest.raises(CorpusError, match=r"s\.de has 3 lines but .*s\.en has 5 lines"):
        list(iter_moses(tmp_path / "s", "de", "en"))
    with pytest.raises(CorpusError, match=r"s\.en has 5 lines but .*s\.de has 3 lines"):
        scan_corpus(tmp_path / "s", "en", "de", "moses")


def test_line_count_mismatch_counts_the_io_lines(tmp_path):
    """Counts are lines as io reads them: a CRLF file, a lone-CR file, a file without final newline and one with a
    BOM count the same; only a real extra line makes a mismatch."""
    (tmp_path / "a.en").write_bytes("\ufeffone\r\ntwo\r\nthree\r\n".encode())
    (tmp_path / "a.de").write_bytes(b"eins\rzwei\rdrei")
    assert list(iter_moses(tmp_path / "a", "en", "de")) == [("one", "eins"), ("two", "zwei"), ("three", "drei")]
    (tmp_path / "a.de").write_bytes(b"eins\rzwei\rdrei\r\r")  # a fourth, empty line
    with pytest.raises(CorpusError, match=r"a\.en has 3 lines but .*a\.de has 4 lines"):
        list(iter_moses(tmp_path / "a", "en", "de"))


@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_streaming_readers_bom_and_line_ends(tmp_path, line_end, bom):
    """Every format reads the same pairs whatever the line ends and a leading byte-order mark (a BOM before the
    TSV header or the first JSON object would otherwise break them); U+2028 inside a sentence is text."""
    en, de = ["A cat\u2028sleeps.", "", " Two  dogs "], ["Eine Katze schläft.", "Nichts", "Zwei Hunde"]
    expected = [(e.strip(), d.strip()) for e, d in zip(en, de)]

    def put(name, lines):
        (tmp_path / name).write_bytes((bom + line_end.join(lines) + line_end).encode("utf-8"))

    put("c.en", en)
    put("c.de", de)
    put("c.tsv", ["en\tde"] + [f"{e}\t{d}" for e, d in zip(en, de)])
    put("c.jsonl", [json.dumps({"en": e, "de": d}, ensure_ascii=False) for e, d in zip(en, de)])
    assert list(iter_moses(tmp_path / "c", "en", "de")) == expected
    assert list(iter_tsv(tmp_path / "c.tsv", "en", "de")) == expected
    assert list(iter_jsonl(tmp_path / "c.jsonl", "en", "de")) == expected
    assert list(iter_moses(tmp_path / "c", "en", "de", strip=False)) == list(zip(en, de))
    assert list(iter_tsv(tmp_path / "c.tsv", "en", "de", strip=False)) == list(zip(en, de))
    for fmt, source in (("moses", tmp_path / "c"), ("tsv", tmp_path / "c.tsv"), ("jsonl", tmp_path / "c.jsonl")):
        assert scan_corpus(source, "en", "de", fmt) == (3, 2), fmt  # one pair has an empty side
    assert load_parallel(tmp_path / "c.tsv", "en", "de")["translation"] == [{"en": e, "de": d} for e, d in expected]


def test_streaming_readers_error_lines_count_every_line_end(tmp_path):
    """The line named in an error is the file's line, with CRLF and CR line ends and a BOM counted as io counts."""
    (tmp_path / "b.tsv").write_bytes("\ufeffen\tde\r\na\tb\rc\td\r\nbroken\r\n".encode())
    with pytest.raises(CorpusError, match=r"b\.tsv:4: expected 2 tab-separated fields, found 1"):
        list(iter_tsv(tmp_path / "b.tsv", "en", "de"))
    (tmp_path / "b.jsonl").write_bytes(b'{"en": "a", "de": "b"}\r{"en": "c", "de": "d"}\r\n{"en": \r\n')
    with pytest.raises(CorpusError, match=r"b\.jsonl:3: invalid JSON"):
        list(iter_jsonl(tmp_path / "b.jsonl", "en", "de"))
    (tmp_path / "b.en").write_bytes(b"ok\r\nok\rbad \xe4\n")
    write_text(tmp_path / "b.de", ["x", "y", "z"])
    with pytest.raises(UsageError, match=r"b\.en:3: not valid UTF-8 \(byte 0xe4 at byte 5 of the line\)"):
        scan_corpus(tmp_path / "b", "en", "de", "moses")


def test_scan_corpus_counts_and_checks(tmp_path, pairs):
    en, de = pairs
    en = list(en[:20])
    en[5] = "  "
    write_text(tmp_path / "k.en", en)
    write_text(tmp_path / "k.de", de[:20])
    assert scan_corpus(tmp_path / "k", "en", "de", "moses") == (20, 19)
    with pytest.raises(CorpusError, match="unknown language code 'fr'"):
        scan_corpus(tmp_path / "k", "en", "fr", "moses")
    write_text(tmp_path / "no_header.tsv", [f"{e}\t{d}" for e, d in zip(en, de)])
    with pytest.raises(CorpusError, match=r"no_header\.tsv:1: unknown language code 'en'"):
        scan_corpus(tmp_path / "no_header.tsv", "en", "de", "tsv")
