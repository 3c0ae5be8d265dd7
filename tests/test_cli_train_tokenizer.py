"""The command-line contract of `vaswani-train-tokenizer` (vaswani_hf.cli.train_tokenizer), for every input class that
applies to it: missing, empty or undecodable --files, broken Moses, TSV and JSONL corpora, byte-order marks and line
ends (never learned as tokens), an existing --out_dir, a bad --vocab_size, Ctrl-C. What each case asserts, and the
shared assets: cli_contract.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_contract import (
    BOM,
    GERMAN,
    LATIN1,
    LINES,
    PAGE,
    Call,
    Cases,
    PathCase,
    Reads,
    Writer,
    copy,
    earlier_output,
    write,
)

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

case = Cases(
    "train_tokenizer",
    refused=lambda t: ["--files", t / "absent.txt", "--out_dir", t / "tok"],
    run=lambda a, t: ["--files", a.plain, "--vocab_size", "300", "--out_dir", t / "tok"],
    paths=[
        PathCase(
            "train_tokenizer",
            lambda f, a: {
                "--files (1)": copy(a.plain, f / "a.txt"),
                "--files (2)": copy(a.corpus / "train.de", f / "b.txt"),
            },
            lambda i, o, w: [
                "--files",
                i["--files (1)"],
                i["--files (2)"],
                "--vocab_size",
                "300",
                "--out_dir",
                o,
                *["--overwrite"][:w],
            ],
            "--out_dir",
            roles=("--files (1)", "--files (2)"),
        )
    ],
    writers=[
        Writer(
            "train_tokenizer",
            lambda a, t, d: ["--files", a.plain, a.corpus / "train.de", "--vocab_size", "300", "--out_dir", d / "tok"],
            "--out_dir",
            2 * PAGE,
        )
    ],
    reads=[
        Reads(
            "train_tokenizer",
            lambda a, t, s: ["--files", s, "--vocab_size", "300", "--out_dir", t / "tok"],
            lambda a: TOKENIZER_TEXT,
            outputs=lambda t: [t / "tok" / "tokenizer.json"],
        )
    ],
)


TOKENIZER_TEXT = [line for pair in zip(LINES, GERMAN) for line in pair] * 4


def tokenizer_argv(t, *source, extra=()):
    return [*source, "--vocab_size", "300", "--min_frequency", "2", "--out_dir", t / "tok", *extra]


def same_vocabulary_as_plain(t: Path, files: list[Path]):
    """The tokenizer learned from `files` equals the one learned from the same text with LF line ends and no BOM,
    and no learned token holds a piece of a BOM ("ï»¿") or a CR ("č") in GPT-2's byte-level alphabet."""

    def check(stdout, stderr):
        from vaswani_hf.tokenization import train_bpe_tokenizer

        vocab = json.loads((t / "tok" / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
        plain = train_bpe_tokenizer(
            [line for f in files for line in TOKENIZER_TEXT], vocab_size=300, show_progress=False
        )
        assert vocab == plain.get_vocab() or sorted(vocab) == sorted(plain.get_vocab())
        learned = [token for token in vocab if len(token) > 1 and not token.startswith("<")]
        assert not [token for token in learned if "ï»¿" in token or "»¿" in token or "ï»" in token]
        assert not [token for token in learned if "č" in token]

    return check


@case("files-missing")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", t / "absent.txt"), 2, ("--files not found", str(t / "absent.txt")))


@case("files-is-a-folder")
def _(t, a):
    (t / "texts").mkdir()
    return Call(tokenizer_argv(t, "--files", t / "texts"), 2, ("--files", str(t / "texts"), "is a folder"))


@case("files-0-byte")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", write(t / "a.txt", b"")), 2, (str(t / "a.txt"), "no text"))


@case("files-blank-lines-only")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", write(t / "a.txt", ["", " ", ""])), 2, (str(t / "a.txt"), "no text"))


@case("files-stdin")
def _(t, a):
    return Call(
        tokenizer_argv(t, "--files", "-"),
        0,
        may_change=(t / "tok",),
        stdin="\n".join(TOKENIZER_TEXT).encode(),
        check=lambda out, err: json.loads(out)["vocab_size"] > 0,
    )


@case("files-stdin-twice")
def _(t, a):
    return Call(
        tokenizer_argv(t, "--files", "-", "-"), 2, ("--files (1) and --files (2)", "standard input"), stdin=b"a b\n"
    )


@case("files-stdin-closed")
def _(t, a):
    return Call(tokenizer_argv(t, "--files", "-"), 2, ("standard input is closed",), patch={"sys.stdin": None})


@case("files-dev-null")  # the null device is an empty input, as an empty file is
def _(t, a):
    return Call(tokenizer_argv(t, "--files", "/dev/null"), 2, ("/dev/null", "no text"))


@case("files-dev-zero")  # any other device is refused: reading it would never end
def _(t, a):
    return Call(tokenizer_argv(t, "--files", "/dev/zero"), 2, ("/dev/zero", "character device"))


@case("bom-never-learned")
def _(t, a):
    files = [write(t / f"{i}.txt", BOM + "\n".join(TOKENIZER_TEXT) + "\n") for i in range(4)]
    return Call(
        tokenizer_argv(t, "--files", *files), 0, may_change=(t / "tok",), check=same_vocabulary_as_plain(t, files)
    )


@case("crlf-and-lone-cr")
def _(t, a):
    files = [
        write(t / "crlf.txt", "\r\n".join(TOKENIZER_TEXT) + "\r\n"),
        write(t / "cr.txt", "\r".join(TOKENIZER_TEXT)),
    ]
    files += [write(t / "crlf2.txt", "\r\n".join(TOKENIZER_TEXT)), write(t / "cr2.txt", "\r".join(TOKENIZER_TEXT))]
    return Call(
        tokenizer_argv(t, "--files", *files), 0, may_change=(t / "tok",), check=same_vocabulary_as_plain(t, files)
    )


@case("latin1")
def _(t, a):
    source = write(t / "latin1.txt", LATIN1)
    return Call(tokenizer_argv(t, "--files", a.plain, source), 2, (f"{source}:2:", "not valid UTF-8"))


@case("corpus-moses-line-count-mismatch")
def _(t, a):
    write(t / "c.en", LINES)
    write(t / "c.de", GERMAN[:2])
    return Call(tokenizer_argv(t, "--corpus", t / "c"), 2, (f"{t / 'c.en'} has 3 lines", f"{t / 'c.de'} has 2 lines"))


@case("corpus-moses-latin1")
def _(t, a):
    write(t / "c.en", LATIN1)
    write(t / "c.de", GERMAN[:2])
    return Call(tokenizer_argv(t, "--corpus", t / "c"), 2, (f"{t / 'c.en'}:2:", "UTF-8"))


@case("corpus-moses-missing")
def _(t, a):
    return Call(tokenizer_argv(t, "--corpus", t / "absent"), 2, (str(t / "absent"),))


@case("corpus-tsv-wrong-field-count")
def _(t, a):
    tsv = write(t / "c.tsv", ["en\tde", f"{LINES[0]}\t{GERMAN[0]}", f"{LINES[1]}\t{GERMAN[1]}\textra"])
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (f"{tsv}:3:", "expected 2 tab-separated fields, found 3"))


@case("corpus-tsv-missing-header")
def _(t, a):
    tsv = write(t / "c.tsv", [f"{e}\t{d}" for e, d in zip(LINES, GERMAN)])
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (f"{tsv}:1:", "header"))


@case("corpus-tsv-0-byte")
def _(t, a):
    tsv = write(t / "c.tsv", b"")
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (f"{tsv}:1:",))


@case("corpus-tsv-blank-pairs-only")
def _(t, a):
    tsv = write(t / "c.tsv", ["en\tde", "\t", " \t "])
    return Call(tokenizer_argv(t, "--corpus", tsv), 2, (str(tsv), "no text"))


@case("corpus-jsonl-bad-json")
def _(t, a):
    jsonl = write(t / "c.jsonl", [json.dumps({"en": LINES[0], "de": GERMAN[0]}), '{"en": "a", "de": '])
    return Call(tokenizer_argv(t, "--corpus", jsonl), 2, (f"{jsonl}:2:", "invalid JSON"))


@case("corpus-jsonl-missing-language")
def _(t, a):
    jsonl = write(t / "c.jsonl", [json.dumps({"en": LINES[0], "de": GERMAN[0]}), json.dumps({"en": LINES[1]})])
    return Call(tokenizer_argv(t, "--corpus", jsonl), 2, (f"{jsonl}:2:", "'de'"))


@case("corpus-jsonl-0-byte")
def _(t, a):
    jsonl = write(t / "c.jsonl", b"")
    return Call(tokenizer_argv(t, "--corpus", jsonl), 2, (str(jsonl), "no text"))


@case("out-dir-exists")
def _(t, a):
    write(t / "tok" / "mine.txt", "keep")
    return Call(tokenizer_argv(t, "--files", a.plain), 2, ("--out_dir", str(t / "tok"), "not empty", "--overwrite"))


@case("out-dir-exists-overwrite")
def _(t, a):
    from vaswani_hf.io import MARKER
    from vaswani_hf.tokenization import TOKENIZER_FOLDER

    earlier_output(t / "tok", TOKENIZER_FOLDER)

    def check(stdout, stderr):
        assert sorted(p.name for p in (t / "tok").iterdir()) == [MARKER, "tokenizer.json", "tokenizer_config.json"]

    return Call(tokenizer_argv(t, "--files", a.plain, extra=["--overwrite"]), 0, may_change=(t / "tok",), check=check)


@case("out-dir-foreign-overwrite")
def _(t, a):
    write(t / "tok" / "mine.txt", "keep")
    return Call(
        tokenizer_argv(t, "--files", a.plain, extra=["--overwrite"]),
        2,
        ("--out_dir", "not an earlier tokenizer folder", "mine.txt"),
    )


@case("out-dir-holds-the-corpus-overwrite")
def _(t, a):
    corpus = write(t / "tok" / "corpus.en", LINES)
    return Call(
        tokenizer_argv(t, "--files", corpus, extra=["--overwrite"]),
        2,
        ("--out_dir", "contains --files (1)", "whatever --overwrite says"),
    )


@case("out-dir-is-a-file")
def _(t, a):
    write(t / "tok", "x")
    return Call(tokenizer_argv(t, "--files", a.plain), 2, ("--out_dir", str(t / "tok"), "is a file"))


@case("out-dir-in-use-by-another-training")
def _(t, a):
    """Two trainings into one --out_dir at once: the second is refused in one line (the first holds the folder's
    lock while it writes), not left to replace the other's tokenizer silently."""
    from vaswani_hf.io import FolderLock

    (t / "tok").mkdir()
    lock = FolderLock(t / "tok").acquire()
    return Call(
        tokenizer_argv(t, "--files", a.plain),
        2,
        ("output folder", str(t / "tok"), "in use by another run"),
        check=lambda stdout, stderr: lock.release(),
    )


@case("out-dir-written-by-another-training-meanwhile")
def _(t, a):
    """Another training finished into --out_dir after this one's checks: its tokenizer is not replaced."""
    import vaswani_hf.cli.train_tokenizer as tool

    corpus = tool._corpus

    def other_run_finishes(args):
        write(t / "tok" / "tokenizer.json", "the other run's")
        return corpus(args)

    def check(stdout, stderr):
        assert sorted(p.name for p in (t / "tok").iterdir()) == ["tokenizer.json"]
        assert (t / "tok" / "tokenizer.json").read_text() == "the other run's"

    return Call(
        tokenizer_argv(t, "--files", a.plain),
        2,
        ("output folder", str(t / "tok"), "written by another run"),
        may_change=(t / "tok",),
        patch={"vaswani_hf.cli.train_tokenizer._corpus": other_run_finishes},
        check=check,
    )


@case("negative-vocab-size")
def _(t, a):
    return Call(["--files", a.plain, "--vocab_size", "-5", "--out_dir", t / "tok"], 2, ("--vocab_size", "-5"))


@case("ctrl-c")
def _(t, a):
    return Call(
        tokenizer_argv(t, "--files", a.plain),
        130,
        ("interrupted",),
        interrupt="vaswani_hf.cli.train_tokenizer.train_bpe_tokenizer",
    )


test_cli_contract = case.contract_test()  # every case above
