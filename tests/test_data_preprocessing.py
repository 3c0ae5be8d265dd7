"""Tests of vaswani_hf.data.preprocessing: tokenisation with the shared BPE (`Dataset.map`), filtering of empty and
over-long pairs with a report (nothing dropped silently), token counts."""

from __future__ import annotations

import logging

import datasets
import numpy as np
import pytest

from vaswani_hf.data.corpora import CorpusError, load_corpus, make_parallel_dataset
from vaswani_hf.data.preprocessing import FilterReport, filter_pairs, prepare_dataset, sequence_lengths, tokenize_pairs
from vaswani_hf.tokenization import EOS_ID


def test_empty_pairs_are_filtered_and_counted(pairs, tok, caplog):
    """Pairs with an empty side (kept and reported at load time: tests/test_data_corpora.py) are removed by
    filter_pairs, counted and located."""
    en, de = list(pairs[0][:50]), list(pairs[1][:50])
    en[3], de[10], en[20], de[20] = "", "", "", ""
    ds = make_parallel_dataset(en, de, "en", "de")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.data"):
        out, report = prepare_dataset(ds, tok, "en", "de")
    assert (report.total, report.kept, report.empty) == (50, 47, 3)
    assert report.removed_examples["empty"] == [3, 10, 20]
    assert len(out) == 47 and "removed 3 empty" in caplog.text


def test_tokenize_and_filter(tmp_path, corpus_dir, tok):
    ds = load_corpus("moses", corpus_dir / "train", "en", "de")
    out = tokenize_pairs(ds, tok, "en", "de")
    assert out.column_names == ["input_ids", "labels"]
    assert out.features["input_ids"] == datasets.List(datasets.Value("int32"))
    row = out[0]
    assert row["input_ids"][-1] == EOS_ID and row["labels"][-1] == EOS_ID
    assert tok.decode(row["labels"], skip_special_tokens=True) == ds[0]["translation"]["de"]
    # multi-process map gives the same result; a cache_dir makes the in-memory dataset cacheable
    par = tokenize_pairs(ds, tok, "en", "de", num_proc=2, cache_dir=tmp_path / "cache")
    assert par["input_ids"] == out["input_ids"] and par["labels"] == out["labels"]
    assert list((tmp_path / "cache").glob("tokenized-*.arrow"))
    again = tokenize_pairs(ds, tok, "en", "de", cache_dir=tmp_path / "cache2", keep_text=True)
    assert again.column_names == ["translation", "input_ids", "labels"]

    lengths_src = sequence_lengths(out, "input_ids")
    cap = int(np.median(lengths_src))
    filtered, report = filter_pairs(out, max_length=cap, max_ratio=None)
    assert report.too_long == int(((lengths_src > cap) | (sequence_lengths(out, "labels") > cap)).sum()) > 0
    assert report.kept == len(filtered) == report.total - report.too_long
    assert all(len(x) <= cap for x in list(filtered["input_ids"]) + list(filtered["labels"]))
    _, r2 = filter_pairs(out, max_length=None, max_ratio=1.0)
    assert r2.bad_ratio > 0 and r2.kept + r2.bad_ratio == r2.total
    assert "bad_ratio" in r2.as_dict()


def test_filter_rules_by_hand():
    """Each pair counted under the first rule it fails (empty, too long, bad ratio), lengths with </s>."""
    rows = {
        "input_ids": [[5, 2], [2], [5] * 9 + [2], [5, 2], [5, 5, 2], [5] * 4 + [2]],
        "labels": [[6, 2], [6, 2], [6, 2], [6] * 10 + [2], [2], [6, 2]],
    }
    ds = datasets.Dataset.from_dict(rows)
    out, report = filter_pairs(ds, max_length=10, max_ratio=3.0)
    # row 0 kept; 1 empty source; 2 ratio 9/1; 3 target 11 tokens > 10; 4 empty target; 5 ratio 4/1
    assert report == FilterReport(
        total=6,
        kept=1,
        empty=2,
        too_long=1,
        bad_ratio=2,
        removed_examples={"empty": [1, 4], "too_long": [3], "bad_ratio": [2, 5]},
    )
    assert out["input_ids"] == [[5, 2]]
    assert str(report) == "kept 1/6 pairs; removed 2 empty, 1 too long, 2 with a bad length ratio"
    same, nothing = filter_pairs(out)
    assert same is out and nothing.kept == nothing.total == 1  # nothing removed: the dataset itself comes back
    _, off = filter_pairs(ds, max_length=None, max_ratio=None)
    assert (off.kept, off.empty, off.too_long, off.bad_ratio) == (4, 2, 0, 0)  # empty sides always go


def test_sequence_lengths_and_errors(tok):
    ds = tokenize_pairs(make_parallel_dataset(["a b", "c"], ["x", "y z w"], "en", "de"), tok, "en", "de")
    assert sequence_lengths(ds, "input_ids").tolist() == [len(r) for r in ds["input_ids"]]
    assert sequence_lengths(ds, "labels").dtype == np.int64
    with pytest.raises(ValueError, match=r"no 'input_ids' column .*tokenize it first"):
        sequence_lengths(make_parallel_dataset(["a"], ["b"], "en", "de"), "input_ids")
    with pytest.raises(CorpusError, match=r"unknown language code 'fr': dataset has languages"):
        tokenize_pairs(make_parallel_dataset(["a"], ["b"], "en", "de"), tok, "en", "fr")
