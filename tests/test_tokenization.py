"""Tests for vaswani_hf.tokenization: the shared BPE vocabulary (paper, Section 5.1).

The Multi30k tests read the corpus from ../shared/data/multi30k/raw (or $VASWANI_MULTI30K_DIR) and are skipped
if it is absent; no Multi30k text is ever copied into the repository.
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import pytest

from vaswani_hf.io import UsageError
from vaswani_hf.tokenization import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    load_tokenizer,
    train_bpe_tokenizer,
)

MULTI30K = Path(
    os.environ.get(
        "VASWANI_MULTI30K_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k" / "raw"
    )
)


def synthetic_pairs(n: int = 300, seed: int = 0) -> tuple[list[str], list[str]]:
    """Small EN-DE corpus written for these tests (template sentences, not taken from any corpus)."""
    subj = [
        ("The old man", "Der alte Mann"),
        ("A young woman", "Eine junge Frau"),
        ("My brother", "Mein Bruder"),
        ("The little girl", "Das kleine Mädchen"),
        ("Our neighbour", "Unser Nachbar"),
        ("The doctor", "Die Ärztin"),
    ]
    verb = [
        ("is reading", "liest"),
        ("buys", "kauft"),
        ("is looking for", "sucht"),
        ("likes", "mag"),
        ("forgot", "vergaß"),
    ]
    obj = [
        ("a book", "ein Buch"),
        ("the red bicycle", "das rote Fahrrad"),
        ("fresh bread", "frisches Brot"),
        ("her keys", "ihre Schlüssel"),
        ("a warm coat", "einen warmen Mantel"),
        ("the newspaper", "die Zeitung"),
    ]
    tail = [
        (".", "."),
        ("!", "!"),
        (" today.", " heute."),
        (" in the park.", " im Park."),
        ("?", "?"),
        (" at 7:30 a.m.", " um 7:30 Uhr."),
        (" for €12.50.", " für 12,50 €."),
    ]
    rng = random.Random(seed)
    combos = list(itertools.product(subj, verb, obj, tail))
    rng.shuffle(combos)
    en, de = [], []
    for s, v, o, t in combos[:n]:
        en.append(f"{s[0]} {v[0]} {o[0]}{t[0]}")
        de.append(f"{s[1]} {v[1]} {o[1]}{t[1]}")
    return en, de


def multi30k_lines(split: str, lang: str) -> list[str]:
    path = MULTI30K / f"{split}.{lang}"
    if not path.is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K} (set VASWANI_MULTI30K_DIR to run this test)")
    text = path.read_text(encoding="utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def round_trip_failures(tok, lines: list[str]) -> list[tuple[int, str, str]]:
    ids = tok(lines, add_special_tokens=True)["input_ids"]
    decoded = tok.batch_decode(ids, skip_special_tokens=True)
    return [(i, a, b) for i, (a, b) in enumerate(zip(lines, decoded)) if a != b]


def assert_round_trip(tok, lines: list[str], name: str) -> None:
    bad = round_trip_failures(tok, lines)
    rate = 1 - len(bad) / len(lines)
    # Report the exceptions by line number and length only (never echo corpus text into logs).
    detail = "; ".join(f"line {i + 1} (len {len(a)} -> {len(b)})" for i, a, b in bad[:10])
    print(f"{name}: round trip {len(lines) - len(bad)}/{len(lines)} = {rate:.5f}; exceptions: {detail or 'none'}")
    assert rate >= 0.999, f"{name}: round trip rate {rate:.5f} < 0.999; exceptions: {detail}"


@pytest.fixture(scope="module")
def small_tok():
    en, de = synthetic_pairs()
    return train_bpe_tokenizer(en + de, vocab_size=400, min_frequency=1, show_progress=False)


@pytest.fixture(scope="module")
def multi30k_tok():
    en, de = multi30k_lines("train", "en"), multi30k_lines("train", "de")
    return train_bpe_tokenizer(en + de, vocab_size=8000, show_progress=False)


def test_special_tokens_fixed(small_tok):
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert [small_tok.convert_ids_to_tokens(i) for i in range(4)] == list(SPECIAL_TOKENS)
    assert (small_tok.pad_token_id, small_tok.bos_token_id, small_tok.eos_token_id, small_tok.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    assert small_tok.padding_side == "right"
    assert small_tok.model_max_length == 1024


def test_eos_appended_and_text_target_gives_labels(small_tok):
    enc = small_tok(["The old man buys a book."], text_target=["Der alte Mann kauft ein Buch."])
    assert set(enc) >= {"input_ids", "labels"}
    assert enc["input_ids"][0][-1] == EOS_ID and enc["labels"][0][-1] == EOS_ID
    assert BOS_ID not in enc["input_ids"][0] and EOS_ID not in enc["input_ids"][0][:-1]
    assert small_tok.decode(enc["labels"][0], skip_special_tokens=True) == "Der alte Mann kauft ein Buch."


def test_first_word_tokenised_like_inner_word(small_tok):
    # the Prepend(" ") normaliser: "The" at the start and after a space give the same token sequence
    first = small_tok("book", add_special_tokens=False)["input_ids"]
    inner = small_tok("a book", add_special_tokens=False)["input_ids"]
    assert inner[-len(first) :] == first


@pytest.mark.parametrize(
    "text",
    [
        " leading space",
        "trailing space ",
        "two  spaces",
        "tab\there",
        "emoji 🙂 and 漢字 unseen",
        "Ünïcödé ß ẞ",
        "",
        "€12.50",
        "no-break\u00a0space",
        "x",
    ],
)
def test_round_trip_edge_cases_and_no_unk(small_tok, text):
    ids = small_tok(text)["input_ids"]
    assert UNK_ID not in ids  # byte-level: every input is representable
    assert small_tok.decode(ids, skip_special_tokens=True) == text


def test_round_trip_sample_corpus(tmp_path):
    from vaswani_hf.data.corpora import sample_corpus_path

    folder = sample_corpus_path()
    if (folder / "train.en").is_file():
        lines = {
            f"{s}.{lang}": (folder / f"{s}.{lang}").read_text(encoding="utf-8").splitlines()
            for s in ("train", "valid", "test")
            for lang in ("en", "de")
            if (folder / f"{s}.{lang}").is_file()
        }
        train = lines["train.en"] + lines["train.de"]
    else:  # the bundled corpus is not there yet: use the synthetic one
        en, de = synthetic_pairs(400, seed=1)
        lines, train = {"synthetic.en": en[300:], "synthetic.de": de[300:]}, en[:300] + de[:300]
    tok = train_bpe_tokenizer(train, vocab_size=2000, show_progress=False)
    for name, ls in lines.items():
        assert_round_trip(tok, ls, name)


def test_round_trip_multi30k(multi30k_tok):
    # Trained on train.{en,de}; checked on every raw file, French (unseen language) included.
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de", "fr"):
            assert_round_trip(multi30k_tok, multi30k_lines(split, lang), f"multi30k {split}.{lang}")


def test_save_reload_identical_ids(multi30k_tok, tmp_path):
    from transformers import AutoTokenizer

    multi30k_tok.save_pretrained(tmp_path / "tok")
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    also = load_tokenizer(tmp_path / "tok")
    src, tgt = multi30k_lines("val", "en"), multi30k_lines("val", "de")
    a = multi30k_tok(src, text_target=tgt)
    b = reloaded(src, text_target=tgt)
    assert a["input_ids"] == b["input_ids"] and a["labels"] == b["labels"]
    assert also(src)["input_ids"] == a["input_ids"]
    ids = (reloaded.pad_token_id, reloaded.bos_token_id, reloaded.eos_token_id, reloaded.unk_token_id)
    assert ids == (0, 1, 2, 3)
    assert len(reloaded) == len(multi30k_tok) == 8000


def test_input_kinds_give_same_vocab(tmp_path):
    import datasets

    en, de = synthetic_pairs()
    (tmp_path / "c.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (tmp_path / "c.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    kw = dict(vocab_size=400, min_frequency=1, show_progress=False)
    from_list = train_bpe_tokenizer(en + de, **kw)
    from_files = train_bpe_tokenizer([tmp_path / "c.en", str(tmp_path / "c.de")], **kw)
    ds = datasets.Dataset.from_dict({"translation": [{"en": e, "de": d} for e, d in zip(en, de)]})
    from_ds = train_bpe_tokenizer(ds, languages=["en", "de"], **kw)
    assert from_list.get_vocab() == from_files.get_vocab()
    # Same sentences, different order (interleaved) -> same counts -> same vocabulary.
    assert from_ds.get_vocab() == from_list.get_vocab()


def test_lowercase_and_normalization_options():
    en, de = synthetic_pairs()
    low = train_bpe_tokenizer(en + de, vocab_size=400, min_frequency=1, lowercase=True, show_progress=False)
    assert low.decode(low("The Old MAN")["input_ids"], skip_special_tokens=True) == "the old man"
    nfkc = train_bpe_tokenizer(en + de, vocab_size=400, min_frequency=1, normalization="NFKC", show_progress=False)
    assert nfkc.decode(nfkc("a\u00a0b ﬁ")["input_ids"], skip_special_tokens=True) == "a b fi"
    nfc = train_bpe_tokenizer(en + de, vocab_size=400, min_frequency=1, show_progress=False)
    assert nfc.decode(nfc("a\u00a0b ﬁ")["input_ids"], skip_special_tokens=True) == "a\u00a0b ﬁ"
    # NFC composes a + combining diaeresis into one character
    assert nfc.decode(nfc("a\u0308")["input_ids"], skip_special_tokens=True) == "\u00e4"


def test_bad_arguments_raise_clearly(tmp_path):
    # files are read by vaswani_hf.io, whose errors are UsageErrors naming the file (and line)
    with pytest.raises(UsageError, match=r"tokenizer training file not found: .*missing\.en"):
        train_bpe_tokenizer([tmp_path / "missing.en"], vocab_size=400, show_progress=False)
    with pytest.raises(ValueError, match=r"vocab_size must be in \[261, .*got 100"):
        train_bpe_tokenizer(["a b"], vocab_size=100, show_progress=False)
    with pytest.raises(ValueError, match="normalization must be one of 'NFC'.*got 'NFX'"):
        train_bpe_tokenizer(["a b"], vocab_size=400, normalization="NFX", show_progress=False)
    bad = tmp_path / "bad.en"
    bad.write_bytes(b"fine\nlatin1 \xe9t\xe9\n")
    with pytest.raises(UsageError, match=r"bad\.en:2: not valid UTF-8 \(byte 0xe9 at byte 8 of the line\)"):
        train_bpe_tokenizer([bad], vocab_size=400, show_progress=False)
    with pytest.raises(UsageError, match=r"bad\.en:2: not valid UTF-8"):
        train_bpe_tokenizer(bad, vocab_size=400, show_progress=False)  # one path, not in a list


def test_training_files_are_read_as_io_reads_them(tmp_path):
    """A byte-order mark and CRLF / lone-CR line ends are not text: the vocabulary is the plain file's."""
    en, de = synthetic_pairs()
    (tmp_path / "plain.en").write_text("\n".join(en + de) + "\n", encoding="utf-8")
    (tmp_path / "crlf.en").write_bytes(("\ufeff" + "\r\n".join(en) + "\r\n" + "\r".join(de)).encode("utf-8"))
    kw = dict(vocab_size=400, min_frequency=1, show_progress=False)
    plain = train_bpe_tokenizer([tmp_path / "plain.en"], **kw)
    windows = train_bpe_tokenizer([tmp_path / "crlf.en"], **kw)
    assert windows.get_vocab() == plain.get_vocab()
    assert not any("\r" in token or "\ufeff" in token for token in windows.get_vocab())


def test_load_tokenizer_errors_name_the_folder(tmp_path, small_tok):
    # a broken tokenizer folder is a UsageError naming the folder or file
    small_tok.save_pretrained(tmp_path / "tok")
    assert load_tokenizer(tmp_path / "tok")("a book")["input_ids"] == small_tok("a book")["input_ids"]
    with pytest.raises(UsageError, match=r"tokenizer .*tokenizer\.json is a file; give the folder"):
        load_tokenizer(tmp_path / "tok" / "tokenizer.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match=r"tokenizer\.json of tokenizer folder .*empty not found"):
        load_tokenizer(empty)
    text = (tmp_path / "tok" / "tokenizer.json").read_text(encoding="utf-8")
    (tmp_path / "tok" / "tokenizer.json").write_text(text[: len(text) // 2], encoding="utf-8")  # a cut copy
    with pytest.raises(UsageError, match=r"tok/tokenizer\.json:\d+: invalid JSON"):
        load_tokenizer(tmp_path / "tok")
    from transformers import PreTrainedTokenizerFast

    other = PreTrainedTokenizerFast(
        tokenizer_object=small_tok.backend_tokenizer,
        pad_token="</s>",
        eos_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
    )
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(UsageError, match=r"special ids pad/bos/eos/unk=\(2, 1, 0, 3\), expected \(0, 1, 2, 3\)"):
        load_tokenizer(tmp_path / "other")


def test_cli(tmp_path):
    import importlib.util

    en, de = synthetic_pairs()
    (tmp_path / "c.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (tmp_path / "c.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    script = Path(__file__).resolve().parents[1] / "scripts" / "train_tokenizer.py"
    spec = importlib.util.spec_from_file_location("train_tokenizer", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    files = ["--files", str(tmp_path / "c.en"), str(tmp_path / "c.de"), "--vocab_size", "400", "--min_frequency", "1"]
    assert mod.main(files + ["--out_dir", str(tmp_path / "tok")]) == 0
    tok = load_tokenizer(tmp_path / "tok")
    assert tok("The old man.")["input_ids"][-1] == EOS_ID
    assert (
        mod.main(
            [
                "--corpus",
                str(tmp_path / "c"),
                "--src_lang",
                "en",
                "--tgt_lang",
                "de",
                "--vocab_size",
                "400",
                "--min_frequency",
                "1",
                "--lowercase",
                "--out_dir",
                str(tmp_path / "tok2"),
            ]
        )
        == 0
    )
    assert (
        load_tokenizer(tmp_path / "tok2").decode(
            load_tokenizer(tmp_path / "tok2")("ABC")["input_ids"], skip_special_tokens=True
        )
        == "abc"
    )


def test_cli_errors_and_out_dir_guard(tmp_path, capsys):
    """Errors are one stderr line with exit status 2, and a non-empty --out_dir is replaced only with --overwrite
    (and then whole, atomically)."""
    from vaswani_hf.cli import train_tokenizer as cli

    en, de = synthetic_pairs()
    (tmp_path / "c.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    out = tmp_path / "tok"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    args = ["--files", str(tmp_path / "c.en"), "--vocab_size", "400", "--min_frequency", "1", "--out_dir", str(out)]

    def one_error_line():
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ": error: " in err and "Traceback" not in err, err
        return err

    assert cli.main(args) == 2
    assert f"--out_dir {out} exists and is not empty; pass --overwrite" in one_error_line()
    assert cli.main(args + ["--overwrite"]) == 2  # not a folder this tool wrote: kept whatever --overwrite says
    assert f"--out_dir {out} is not an earlier tokenizer folder" in one_error_line()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (out / "notes.txt").unlink()
    assert cli.main(args) == 0
    assert cli.main(args + ["--overwrite"]) == 0  # its own earlier output: replaced whole
    assert (out / "tokenizer.json").is_file()
    capsys.readouterr()
    assert cli.main(["--files", str(tmp_path / "nope.en"), "--out_dir", str(tmp_path / "t2")]) == 2
    assert f"--files not found: {tmp_path / 'nope.en'}" in one_error_line()
    assert cli.main(["--files", str(tmp_path / "c.en"), "--vocab_size", "100", "--out_dir", str(tmp_path / "t3")]) == 2
    assert "argument --vocab_size: must be in [261, 16,777,216], got 100" in one_error_line()
    (tmp_path / "blank.en").write_text("\n\n", encoding="utf-8")
    assert (
        cli.main(["--files", str(tmp_path / "blank.en"), "--vocab_size", "400", "--out_dir", str(tmp_path / "t4")])
        == 2
    )
    assert "no text to learn from (2 lines, all empty)" in one_error_line()
    assert not (tmp_path / "t2").exists() and not (tmp_path / "t3").exists() and not (tmp_path / "t4").exists()
