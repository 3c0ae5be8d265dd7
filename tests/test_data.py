"""Tests for vaswani_hf.data: loading, filtering, token-based batching (paper, Section 5.1), collation, Trainer.

Only synthetic sentences written for these tests are used; Multi30k is read from ../shared (or
$VASWANI_MULTI30K_DIR) when present and never copied into the repository.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vaswani_hf.data import (
    CorpusError,
    Seq2SeqCollator,
    TokenBatchSampler,
    TokenBatchingSeq2SeqTrainer,
    filter_pairs,
    load_hub,
    load_jsonl,
    load_moses,
    load_parallel,
    load_sample_corpus,
    load_tsv,
    prepare_dataset,
    sample_corpus_path,
    sequence_lengths,
    tokenize_pairs,
    unshard_prepared_loader,
)
from vaswani_hf.tokenization import EOS_ID, PAD_ID, train_bpe_tokenizer

MULTI30K = Path(os.environ.get("VASWANI_MULTI30K_DIR",
                               Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k" / "raw"))


def synthetic_pairs(n: int = 200, seed: int = 0) -> tuple[list[str], list[str]]:
    """Template EN-DE sentences written for these tests (not from any corpus)."""
    subj = [("The cat", "Die Katze"), ("A tall man", "Ein großer Mann"), ("My sister", "Meine Schwester"),
            ("The children", "Die Kinder"), ("Nobody", "Niemand")]
    verb = [("sees", "sieht"), ("paints", "malt"), ("carries", "trägt"), ("wants", "will")]
    obj = [("a ball", "einen Ball"), ("the blue door", "die blaue Tür"), ("two apples", "zwei Äpfel"),
           ("an umbrella", "einen Regenschirm"), ("the heavy box on the stairs", "die schwere Kiste auf der Treppe")]
    tail = [(".", "."), ("!", "!"), (" again.", " schon wieder."), (" \"now\".", " \u201ejetzt\u201c.")]
    combos = list(itertools.product(subj, verb, obj, tail))
    random.Random(seed).shuffle(combos)
    combos = (combos * (n // len(combos) + 1))[:n]
    return [f"{s[0]} {v[0]} {o[0]}{t[0]}" for s, v, o, t in combos], \
           [f"{s[1]} {v[1]} {o[1]}{t[1]}" for s, v, o, t in combos]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def pairs():
    return synthetic_pairs()


@pytest.fixture(scope="module")
def tok(pairs):
    en, de = pairs
    return train_bpe_tokenizer(en + de, vocab_size=500, min_frequency=1, show_progress=False)


@pytest.fixture
def corpus_dir(tmp_path, pairs):
    en, de = pairs
    write_lines(tmp_path / "train.en", en)
    write_lines(tmp_path / "train.de", de)
    return tmp_path


# ------------------------------------------------------------------------------------------------------ loading


def test_all_formats_give_the_same_dataset(tmp_path, pairs):
    en, de = pairs
    write_lines(tmp_path / "c.en", en)
    write_lines(tmp_path / "c.de", de)
    ref = load_moses(tmp_path / "c", "en", "de")
    assert ref.column_names == ["translation"] and len(ref) == len(en)
    assert ref[0]["translation"] == {"en": en[0], "de": de[0]}
    assert isinstance(ref.features["translation"], datasets.Translation)

    write_lines(tmp_path / "h.tsv", ["de\tid\ten"] + [f"{d}\t{i}\t{e}" for i, (e, d) in enumerate(zip(en, de))])
    write_lines(tmp_path / "n.tsv", [f"{e}\t{d}" for e, d in zip(en, de)])
    write_lines(tmp_path / "nested.jsonl", [json.dumps({"translation": {"en": e, "de": d}}) for e, d in zip(en, de)])
    write_lines(tmp_path / "flat.jsonl", [json.dumps({"de": d, "en": e, "x": 1}) for e, d in zip(en, de)])
    ref.save_to_disk(str(tmp_path / "saved"))
    hub_dir = tmp_path / "hubdata"  # a local dataset read through the real datasets.load_dataset code path
    hub_dir.mkdir()
    write_lines(hub_dir / "train.jsonl",
                [json.dumps({"id": i, "translation": {"de": d, "en": e, "fr": "-"}}) for i, (e, d) in
                 enumerate(zip(en, de))])
    loaded = {
        "tsv header": load_tsv(tmp_path / "h.tsv", "en", "de"),
        "tsv no header": load_tsv(tmp_path / "n.tsv", "en", "de", header=False),
        "jsonl nested": load_jsonl(tmp_path / "nested.jsonl", "en", "de"),
        "jsonl flat": load_jsonl(tmp_path / "flat.jsonl", "en", "de"),
        "save_to_disk": load_hub(tmp_path / "saved", "en", "de"),
        "load_dataset": load_hub(str(hub_dir), "en", "de", split="train"),
        "auto moses": load_parallel(tmp_path / "c", "en", "de"),
        "auto tsv": load_parallel(tmp_path / "h.tsv", "en", "de"),
        "auto jsonl": load_parallel(tmp_path / "nested.jsonl", "en", "de"),
        "auto hub": load_parallel(str(hub_dir), "en", "de"),
    }
    for name, ds in loaded.items():
        assert ds.features == ref.features, name
        assert ds.column_names == ["translation"], name
        assert ds.to_list() == ref.to_list(), name


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
    with pytest.raises(FileNotFoundError, match=r"nothere\.en"):
        load_moses(tmp_path / "nothere", "en", "de")
    with pytest.raises(FileNotFoundError, match=r"missing\.tsv"):
        load_tsv(tmp_path / "missing.tsv", "en", "de")
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl"):
        load_parallel(tmp_path / "missing.jsonl", "en", "de")


def test_mismatched_line_counts_names_both_files(tmp_path, pairs):
    en, de = pairs
    write_lines(tmp_path / "m.en", en)
    write_lines(tmp_path / "m.de", de[:-3])
    with pytest.raises(CorpusError) as e:
        load_moses(tmp_path / "m", "en", "de")
    msg = str(e.value)
    assert f"m.en has {len(en)} lines" in msg and f"m.de has {len(de) - 3} lines" in msg


def test_non_utf8_names_file_and_line(tmp_path, pairs):
    en, de = pairs
    write_lines(tmp_path / "u.en", en)
    raw = "".join(f"{x}\n" for x in de).encode("utf-8").split(b"\n")
    raw[6] = raw[6] + b" Stra\xdfe"  # latin-1 "ß" on line 7
    (tmp_path / "u.de").write_bytes(b"\n".join(raw))
    with pytest.raises(CorpusError, match=r"u\.de: line 7: invalid UTF-8 byte\(s\) b'\\xdf'"):
        load_moses(tmp_path / "u", "en", "de")


def test_unknown_language_code(tmp_path, corpus_dir, pairs):
    with pytest.raises(CorpusError, match=r"unknown language code 'fr'.*languages available: \['de', 'en'\]"):
        load_moses(corpus_dir / "train", "en", "fr")
    en, de = pairs
    write_lines(tmp_path / "h.tsv", ["en\tde"] + [f"{e}\t{d}" for e, d in zip(en, de)])
    with pytest.raises(CorpusError, match=r"unknown language code 'fr'.*h\.tsv header has columns \['en', 'de'\]"):
        load_tsv(tmp_path / "h.tsv", "fr", "de")
    write_lines(tmp_path / "j.jsonl", [json.dumps({"en": e, "de": d}) for e, d in zip(en, de)])
    with pytest.raises(CorpusError, match=r"unknown language code 'fr'.*j\.jsonl line 1 has keys \['de', 'en'\]"):
        load_jsonl(tmp_path / "j.jsonl", "en", "fr")
    with pytest.raises(CorpusError, match="both 'en'"):
        load_moses(corpus_dir / "train", "en", "en")


def test_malformed_tsv_and_jsonl_lines(tmp_path):
    write_lines(tmp_path / "bad.tsv", ["en\tde", "a\tb", "only one field"])
    with pytest.raises(CorpusError, match=r"bad\.tsv: line 3: expected 2 tab-separated fields, found 1"):
        load_tsv(tmp_path / "bad.tsv", "en", "de")
    write_lines(tmp_path / "bad.jsonl", ['{"en": "a", "de": "b"}', '{"en": "a", "de": '])
    with pytest.raises(CorpusError, match=r"bad\.jsonl: line 2: invalid JSON"):
        load_jsonl(tmp_path / "bad.jsonl", "en", "de")


def test_empty_lines_reported_then_filtered(tmp_path, pairs, tok, caplog):
    en, de = list(pairs[0][:50]), list(pairs[1][:50])
    en[3], de[10], en[20], de[20] = "", "   ", "", ""
    write_lines(tmp_path / "e.en", en)
    write_lines(tmp_path / "e.de", de)
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.data"):
        ds = load_moses(tmp_path / "e", "en", "de")
    assert len(ds) == 50  # kept at load time: row i is line i+1
    assert "3 of 50 pairs have an empty side (line/row 4, 11, 21)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.data"):
        out, report = prepare_dataset(ds, tok, "en", "de")
    assert (report.total, report.kept, report.empty) == (50, 47, 3)
    assert report.removed_examples["empty"] == [3, 10, 20]
    assert len(out) == 47 and "removed 3 empty" in caplog.text


def test_crlf_bom_and_strip(tmp_path):
    (tmp_path / "w.en").write_bytes("\ufeffHello  there \r\nSecond\r\n".encode("utf-8"))
    (tmp_path / "w.de").write_bytes(b"Hallo\nZweite")  # no final newline
    ds = load_moses(tmp_path / "w", "en", "de")
    assert ds["translation"] == [{"en": "Hello  there", "de": "Hallo"}, {"en": "Second", "de": "Zweite"}]
    raw = load_moses(tmp_path / "w", "en", "de", strip=False)
    assert raw[0]["translation"]["en"] == "Hello  there "


def test_sample_corpus_helpers():
    folder = sample_corpus_path()
    assert folder.name == "sample_data" and folder.parent.name == "vaswani_hf"
    if not (folder / "train.en").is_file():
        with pytest.raises(FileNotFoundError, match="sample corpus split 'train' not found"):
            load_sample_corpus("train")
        pytest.skip("bundled sample corpus not written yet (vaswani_hf/sample_data)")
    for split in ("train", "valid", "test"):
        ds = load_sample_corpus(split)
        assert len(ds) > 0 and set(ds[0]["translation"]) == {"en", "de"}


# ------------------------------------------------------------------------------------------------ tokenizing


def test_tokenize_and_filter(tmp_path, corpus_dir, tok):
    ds = load_moses(corpus_dir / "train", "en", "de")
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


# ------------------------------------------------------------------------------------------------ sampler


def random_lengths(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 80, size=n)
    tgt = np.clip((src * rng.uniform(0.7, 1.5, size=n)).astype(int), 2, 120)
    return src, tgt


def padded(batch, lengths):
    return len(batch) * max(lengths[i] for i in batch)


@pytest.mark.parametrize("max_tokens", [150, 1000, 25000])
def test_sampler_exactly_once_and_within_budget(max_tokens):
    src, tgt = random_lengths()
    s = TokenBatchSampler(src, tgt, max_tokens, seed=3)
    for epoch in range(2):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(src)))  # every example exactly once
        assert max(padded(b, src) for b in batches) <= max_tokens
        assert max(padded(b, tgt) for b in batches) <= max_tokens
    # batches are reasonably full (greedy packing of length-sorted pairs)
    if max_tokens == 1000:
        fill = np.mean([max(padded(b, src), padded(b, tgt)) for b in batches]) / max_tokens
        assert fill > 0.8


def test_sampler_deterministic_and_shuffled_per_epoch():
    src, tgt = random_lengths()
    a, b = TokenBatchSampler(src, tgt, 1000, seed=7), TokenBatchSampler(src, tgt, 1000, seed=7)
    assert list(a) == list(b)  # same seed -> same order
    a.set_epoch(1)
    b.set_epoch(1)
    e1 = list(a)
    assert e1 == list(b)
    a.set_epoch(0)
    assert list(a) != e1  # another epoch -> another order
    assert list(TokenBatchSampler(src, tgt, 1000, seed=8)) != list(b)
    fixed = TokenBatchSampler(src, tgt, 1000, shuffle=False)
    fixed.set_epoch(5)
    assert list(fixed) == fixed.batches  # evaluation: length order, independent of epoch


@pytest.mark.parametrize("world", [2, 3])
def test_sampler_ranks_disjoint_covering_equal(world):
    src, tgt = random_lengths(n=1001)
    samplers = [TokenBatchSampler(src, tgt, 900, seed=1, num_replicas=world, rank=r) for r in range(world)]
    single = TokenBatchSampler(src, tgt, 900, seed=1)
    for epoch in (0, 1):
        per_rank = []
        for s in samplers:
            s.set_epoch(epoch)
            per_rank.append(list(s))
        assert len({len(x) for x in per_rank}) == 1 and len(per_rank[0]) == len(samplers[0])  # equal counts
        ids = [frozenset(b) for x in per_rank for b in x]
        flat = [i for x in per_rank for b in x for i in b]
        assert sorted(flat) == list(range(len(src)))  # disjoint and covering: each example once over all ranks
        assert len(set(ids)) == len(ids)
        assert max(padded(b, src) for x in per_rank for b in x) <= 900
    assert len(samplers[0]) * world >= len(single)  # at most world-1 batches were split to balance


def test_sampler_errors_on_oversized_example():
    src, tgt = random_lengths(n=100)
    tgt[42] = 5000
    with pytest.raises(ValueError, match=r"exceed max_tokens=1000 .* example 42 \(\d+ source / 5000 target tokens\)"):
        TokenBatchSampler(src, tgt, 1000)
    with pytest.raises(ValueError, match="rank=2"):
        TokenBatchSampler([3], [3], 100, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="cannot give 4 ranks"):
        TokenBatchSampler([3, 3], [3, 3], 100, num_replicas=4, rank=0)


def test_sampler_max_sentences_and_pad_multiple():
    src, tgt = random_lengths(n=500)
    s = TokenBatchSampler(src, tgt, 25000, max_sentences=16, pad_to_multiple_of=8)
    batches = list(s)
    assert max(len(b) for b in batches) <= 16
    coll = Seq2SeqCollator(pad_to_multiple_of=8)
    feats = [{"input_ids": [5] * (int(src[i]) - 1) + [EOS_ID], "labels": [6] * (int(tgt[i]) - 1) + [EOS_ID]}
             for i in range(len(src))]
    for b in batches:
        out = coll([feats[i] for i in b])
        assert out["input_ids"].shape[1] % 8 == 0 and out["input_ids"].numel() <= 25000


def test_sampler_multi30k_real_lengths():
    if not (MULTI30K / "train.en").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K} (set VASWANI_MULTI30K_DIR to run this test)")
    ds = load_moses(MULTI30K / "train", "en", "de")
    tok = train_bpe_tokenizer([MULTI30K / "train.en", MULTI30K / "train.de"], vocab_size=4000, show_progress=False)
    data, report = prepare_dataset(ds, tok, "en", "de")
    assert report.kept == len(data)
    s = TokenBatchSampler.from_dataset(data, 4096, seed=0, num_replicas=2, rank=0)
    s1 = TokenBatchSampler.from_dataset(data, 4096, seed=0, num_replicas=2, rank=1)
    loaders = [DataLoader(data, batch_sampler=x, collate_fn=Seq2SeqCollator()) for x in (s, s1)]
    seen = []
    for dl in loaders:
        for batch in dl:
            assert batch["input_ids"].numel() <= 4096 and batch["labels"].numel() <= 4096
            seen.append(batch["attention_mask"].sum().item())
    assert sum(seen) == int(sequence_lengths(data, "input_ids").sum())  # every source token seen exactly once


# ------------------------------------------------------------------------------------------------ collator


def test_collator_padding_and_shift():
    feats = [{"input_ids": [7, 8, 9, EOS_ID], "labels": [4, 5, EOS_ID]},
             {"input_ids": [7, EOS_ID], "labels": [6, 4, 5, 9, EOS_ID]}]
    out = Seq2SeqCollator()(feats)
    assert out["input_ids"].tolist() == [[7, 8, 9, 2], [7, 2, 0, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert out["labels"].tolist() == [[4, 5, 2, -100, -100], [6, 4, 5, 9, 2]]
    assert out["decoder_input_ids"].tolist() == [[PAD_ID, 4, 5, 2, 0], [PAD_ID, 6, 4, 5, 9]]
    assert all(v.dtype == torch.long for v in out.values())
    assert set(Seq2SeqCollator()([{"input_ids": [3, 2]}])) == {"input_ids", "attention_mask"}


# ------------------------------------------------------------------------------------------------ trainer


class TinySeq2Seq(torch.nn.Module):
    """Stand-in model with the seq2seq forward signature (keeps this test independent of the modeling code)."""

    def __init__(self, vocab=500):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 8)
        self.out = torch.nn.Linear(8, vocab)
        self.seen = []

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, labels=None):
        self.seen.append((tuple(input_ids.shape), tuple(labels.shape)))
        mask = attention_mask[..., None]
        ctx = (self.emb(input_ids) * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
        logits = self.out(self.emb(decoder_input_ids) + ctx)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return {"loss": loss, "logits": logits}


def test_trainer_uses_token_batches(tmp_path, corpus_dir, tok):
    from transformers import Seq2SeqTrainingArguments

    data, _ = prepare_dataset(load_moses(corpus_dir / "train", "en", "de"), tok, "en", "de")
    model = TinySeq2Seq()
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2,
                                    report_to=[], use_cpu=True, save_strategy="no", logging_steps=1, seed=5,
                                    disable_tqdm=True)
    trainer = TokenBatchingSeq2SeqTrainer(model=model, args=args, train_dataset=data, eval_dataset=data,
                                          max_tokens=600, eval_max_tokens=800)
    dl = trainer.get_train_dataloader()
    sampler = TokenBatchSampler.from_dataset(data, 600, seed=5)
    assert len(dl) == len(sampler)
    batches = list(dl)
    assert sum(b["input_ids"].shape[0] for b in batches) == len(data)
    assert all(b["input_ids"].numel() <= 600 and b["labels"].numel() <= 600 for b in batches)
    assert max(b["input_ids"].shape[0] for b in batches) > 2  # not per_device_train_batch_size
    assert set(batches[0]) == {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
    edl = trainer.get_eval_dataloader()
    assert all(b["input_ids"].numel() <= 800 for b in edl)
    metrics = trainer.train().metrics
    assert len(model.seen) == 3 and all(s[0] * s[1] <= 600 and l[0] * l[1] <= 600 for s, l in model.seen)
    # the samples' rate counts sentences, not batches x per_device_train_batch_size
    sentences = sum(s[0] for s, _ in model.seen)
    assert metrics["train_samples_per_second"] * metrics["train_runtime"] == pytest.approx(sentences, rel=1e-2)


def test_eval_loss_is_per_target_token_whatever_the_budget(tmp_path, corpus_dir, tok):
    """transformers' evaluation_loop weights every batch alike (the first batch's size); with token batches that
    made eval_loss depend on eval_max_tokens. Ours is the loss per target token, the same for every budget."""
    from transformers import Seq2SeqTrainingArguments

    data, _ = prepare_dataset(load_moses(corpus_dir / "train", "en", "de"), tok, "en", "de")
    torch.manual_seed(0)
    model = TinySeq2Seq().eval()
    collate = Seq2SeqCollator()
    with torch.no_grad():  # reference: one sentence at a time, summed over tokens
        sums = [(model(**collate([data[i]]))["loss"] * len(data[i]["labels"]), len(data[i]["labels"]))
                for i in range(len(data))]
    per_token = float(sum(s for s, _ in sums) / sum(n for _, n in sums))
    losses = []
    for budget in (200, 800):
        args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / f"out{budget}"), report_to=[], use_cpu=True,
                                        disable_tqdm=True)
        trainer = TokenBatchingSeq2SeqTrainer(model=model, args=args, eval_dataset=data, eval_max_tokens=budget)
        sizes = [b["input_ids"].shape[0] for b in trainer.get_eval_dataloader()]
        assert len(set(sizes)) > 1  # batches of unequal sentence counts: the case the plain Trainer gets wrong
        metrics = trainer.evaluate()
        losses.append(metrics["eval_loss"])
        # the speed metrics count real batches, not sentences / per_device_eval_batch_size
        assert metrics["eval_steps_per_second"] * metrics["eval_runtime"] == pytest.approx(len(sizes), rel=1e-2)
        assert metrics["eval_samples_per_second"] * metrics["eval_runtime"] == pytest.approx(len(data), rel=1e-2)
        predicted = trainer.predict(data).metrics
        assert predicted["test_steps_per_second"] * predicted["test_runtime"] == pytest.approx(len(sizes), rel=1e-2)
    assert losses[0] == pytest.approx(per_token, rel=1e-5) and losses[1] == pytest.approx(per_token, rel=1e-5)


@pytest.mark.parametrize("rank", [0, 1])
def test_accelerate_prepare_shards_once(rank, pairs):
    """What `accelerator.prepare` does with 2 processes (accelerate.data_loader.prepare_data_loader) plus our
    pass-through fix: rank r gets exactly the sampler's rank-r batches, not half of them."""
    from accelerate.data_loader import prepare_data_loader

    src, tgt = random_lengths(n=400)
    ds = datasets.Dataset.from_dict({"input_ids": [[5] * int(n) for n in src], "labels": [[6] * int(n) for n in tgt]})
    sampler = TokenBatchSampler(src, tgt, 700, seed=2, num_replicas=2, rank=rank)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=lambda x: x)
    prepared = prepare_data_loader(loader, num_processes=2, process_index=rank, put_on_device=False)
    assert prepared.batch_sampler.batch_sampler is sampler  # Accelerate wrapped it in BatchSamplerShard ...
    assert len(prepared) == -(-len(sampler) // 2)  # ... which would shard a second time
    prepared = unshard_prepared_loader(prepared, sampler)
    assert len(prepared) == len(sampler)
    assert [len(b) for b in prepared] == [len(b) for b in sampler]
