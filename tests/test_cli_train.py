"""The command-line contract of `vaswani-train` (vaswani_hf.cli.train), for every input class that applies to it: recipe
and flag errors, unreadable or empty corpora in every format, tokenizer_path and output folder errors (each refused by
--check and by a run, before anything is written), a previous run (refused, resumed, replaced), Ctrl-C. What each case
asserts, and the shared assets: cli_contract.py.
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
    Resumable,
    Writer,
    copy,
    run_main,
    stdout_has,
    write,
)
from cli_helpers import truncate

from vaswani_hf.io import check_safetensors, read_lines

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _path_inputs(f: Path, a) -> dict[str, Path]:
    corpus = copy(a.corpus, f / "corpus")
    return {
        "corpus (en)": corpus / "train.en",
        "corpus (de)": corpus / "train.de",
        "tokenizer_path": copy(a.model, f / "tokenizer"),
        "--recipe": copy(a.recipe, f / "recipes" / "recipe.yaml"),
    }  # as a run folder keeps it


def _path_argv(i: dict[str, Path], *outputs) -> list:
    return [
        "--recipe",
        i["--recipe"],
        "--data_dir",
        i["corpus (en)"].parent,
        "--tokenizer_path",
        i["tokenizer_path"],
        *outputs,
    ]


_ROLES = dict(
    roles=("corpus (en)", "corpus (de)", "tokenizer_path", "--recipe"), derived=("corpus (en)", "corpus (de)")
)  # the corpus files are found in --data_dir
case = Cases(
    "train",
    refused=lambda t: ["--recipe", t / "absent.yaml", "--check"],
    run=lambda a, t: ["--recipe", a.recipe, "--data_dir", a.corpus, "--output_dir", t / "run"],
    paths=[
        PathCase(
            "train-output_dir",
            _path_inputs,
            lambda i, o, w: _path_argv(i, "--output_dir", o, *["--overwrite"][:w]),
            "output_dir",
            **_ROLES,
        ),
        PathCase(
            "train-export_dir",
            _path_inputs,
            lambda i, o, w: _path_argv(
                i, "--output_dir", i["tokenizer_path"].parent / "fresh-run", "--export_dir", o, *["--overwrite"][:w]
            ),
            "export_dir",
            **_ROLES,
        ),
    ],
    writers=[
        Writer("train", None, "output_dir", 64 * PAGE, interrupt="vaswani_hf.training.trainer.publish_checkpoint")
    ],
    reads=[
        Reads(
            "train",
            lambda a, t, s: [
                "--recipe",
                a.recipe,
                "--data_dir",
                copy(a.corpus / "train.de", t / "corpus" / "train.de").parent,
                "--output_dir",
                t / "run",
            ],
            lambda a: read_lines(a.corpus / "train.en"),
            outputs=lambda t: [
                t / "run" / "tokenizer" / "tokenizer.json",
                t / "run" / "checkpoint-4" / "model.safetensors",
            ],
            at=lambda t: t / "corpus" / "train.en",
        )
    ],
    resumes=[
        Resumable(
            "train",
            lambda a, t: ["--recipe", a.recipe, "--data_dir", a.corpus, "--output_dir", t / "run"],
            "vaswani_hf.training.run.average_last",  # every checkpoint written, the run not finished
            lambda t: [t / "run" / "checkpoint-4" / "model.safetensors"],
            lambda t: t / "run" / "hub" / "model.safetensors",
        )
    ],
)


def train_argv(t, a, *extra, corpus=None, check=True):
    return ["--recipe", a.recipe, "--data_dir", corpus or a.corpus, "--output_dir", t / "run", *extra] + (
        ["--check"] if check else []
    )


def moses(t: Path, en, de) -> Path:
    write(t / "corpus" / "train.en", en)
    write(t / "corpus" / "train.de", de)
    return t / "corpus"


def tsv(t: Path, lines) -> list:
    write(t / "corpus" / "train.tsv", lines)
    return ["--data_format", "tsv", "--train_data", "train.tsv"]


def jsonl(t: Path, lines) -> list:
    write(t / "corpus" / "train.jsonl", lines)
    return ["--data_format", "jsonl", "--train_data", "train.jsonl"]


@case("check-ok-writes-nothing")
def _(t, a):
    return Call(train_argv(t, a), 0, check=stdout_has("recipe tiny OK"))


@case("check-bad-recipe-value-overridden-by-flag")
def _(t, a):
    write(t / "bad.yaml", "d_model: -1\n")
    return Call(
        ["--recipe", t / "bad.yaml", "--d_model", "32", "--output_dir", t / "run", "--check"],
        2,
        (f"{t / 'bad.yaml'}: d_model must be", "got -1"),
    )


@case("check-output-dir-is-a-file")
def _(t, a):
    write(t / "run", "x")
    return Call(train_argv(t, a), 2, ("output_dir", str(t / "run"), "is a file"))


@case("check-output-dir-below-a-file")
def _(t, a):
    write(t / "file", "x")
    return Call(train_argv(t, a, "--output_dir", t / "file" / "run"), 2, ("output_dir", str(t / "file")))


@case("output-dir-below-a-file")
def _(t, a):
    write(t / "file", "x")
    return Call(train_argv(t, a, "--output_dir", t / "file" / "run", check=False), 2, ("output_dir", str(t / "file")))


@case("check-negative-vocab-size")
def _(t, a):
    return Call(train_argv(t, a, "--vocab_size", "-5"), 2, ("vocab_size", "-5"))


@case("check-latin1-corpus")
def _(t, a):
    corpus = moses(t, LINES[:2], LATIN1)
    return Call(train_argv(t, a, corpus=corpus), 2, (f"{corpus / 'train.de'}:2:", "not valid UTF-8"))


@case("check-line-count-mismatch")
def _(t, a):
    corpus = moses(t, LINES, GERMAN[:2])
    return Call(
        train_argv(t, a, corpus=corpus),
        2,
        (f"{corpus / 'train.en'} has 3 lines", f"{corpus / 'train.de'} has 2 lines"),
    )


@case("check-tsv-wrong-field-count")
def _(t, a):
    extra = tsv(t, ["en\tde", f"{LINES[0]}\t{GERMAN[0]}", LINES[1]])
    return Call(
        train_argv(t, a, *extra, corpus=t / "corpus"),
        2,
        (f"{t / 'corpus' / 'train.tsv'}:3:", "expected 2 tab-separated fields, found 1"),
    )


@case("check-tsv-missing-header")
def _(t, a):
    extra = tsv(t, [f"{e}\t{d}" for e, d in zip(LINES, GERMAN)])
    return Call(train_argv(t, a, *extra, corpus=t / "corpus"), 2, (f"{t / 'corpus' / 'train.tsv'}:1:", "header"))


@case("check-jsonl-bad-json")
def _(t, a):
    extra = jsonl(t, [json.dumps({"en": LINES[0], "de": GERMAN[0]}), "{'en': 'single quotes'}"])
    return Call(
        train_argv(t, a, *extra, corpus=t / "corpus"), 2, (f"{t / 'corpus' / 'train.jsonl'}:2:", "invalid JSON")
    )


@case("check-jsonl-missing-language")
def _(t, a):
    extra = jsonl(t, [json.dumps({"translation": {"en": LINES[0]}})])
    return Call(train_argv(t, a, *extra, corpus=t / "corpus"), 2, (f"{t / 'corpus' / 'train.jsonl'}:1:", "'de'"))


@case("check-0-byte-corpus")
def _(t, a):
    corpus = moses(t, b"", b"")
    return Call(train_argv(t, a, corpus=corpus), 2, ("train_data", str(corpus / "train"), "no sentence pair"))


@case("check-blank-lines-corpus")
def _(t, a):
    corpus = moses(t, ["", ""], [" ", ""])
    return Call(train_argv(t, a, corpus=corpus), 2, ("train_data", str(corpus / "train"), "no sentence pair"))


@case("check-bom-crlf-cr-corpus-handled")
def _(t, a):
    corpus = moses(t, BOM + "\r\n".join(LINES) + "\r\n", "\r".join(GERMAN))
    return Call(train_argv(t, a, corpus=corpus), 0, check=stdout_has("train_data: 3 pairs (3 usable)"))


@case("check-corpus-missing")
def _(t, a):
    (t / "corpus").mkdir()
    return Call(train_argv(t, a, corpus=t / "corpus"), 2, ("train_data", str(t / "corpus" / "train.en"), "not found"))


@case("check-corpus-is-a-folder")
def _(t, a):
    (t / "corpus" / "train.tsv").mkdir(parents=True)
    return Call(
        train_argv(t, a, "--data_format", "tsv", "--train_data", "train.tsv", corpus=t / "corpus"),
        2,
        ("train_data", str(t / "corpus" / "train.tsv"), "is a folder"),
    )


@case("check-data-dir-missing")
def _(t, a):
    return Call(train_argv(t, a, corpus=t / "absent"), 2, ("data_dir not found", str(t / "absent")))


@case("check-tokenizer-path-missing")
def _(t, a):
    return Call(train_argv(t, a, "--tokenizer_path", t / "absent"), 2, ("tokenizer_path", str(t / "absent")))


@case("check-tokenizer-path-without-tokenizer-json")
def _(t, a):
    (t / "tok").mkdir()
    return Call(train_argv(t, a, "--tokenizer_path", t / "tok"), 2, (str(t / "tok"), "tokenizer.json"))


@case("tokenizer-path-without-tokenizer-json-writes-nothing")
def _(t, a):
    (t / "tok").mkdir()
    return Call(train_argv(t, a, "--tokenizer_path", t / "tok", check=False), 2, (str(t / "tok"), "tokenizer.json"))


@case("recipe-missing")
def _(t, a):
    return Call(["--recipe", t / "absent.yaml", "--check"], 2, ("recipe file not found", str(t / "absent.yaml")))


BAD_RECIPES = {  # the recipe file's bytes -> what the one line names besides the file
    "invalid-yaml": ("d_model: [32\n", ("invalid YAML",)),
    "unknown-key": ("d_modle: 32\n", ("'d_modle'", "'d_model'")),
    "empty": ("", ("is empty", "--recipe default")),  # would silently train the code defaults (100k updates)
    "comments-only": ("# my recipe\n\n", ("is empty", "--recipe default")),
    "latin1": (b"description: caf\xe9\n", ()),
}
for _name, (_text, _expected) in BAD_RECIPES.items():
    case(f"recipe-{_name}")(
        lambda t, a, text=_text, expected=_expected: Call(
            ["--recipe", write(t / "r.yaml", text), "--check"], 2, (str(t / "r.yaml"), *expected)
        )
    )


@case("unknown-flag")
def _(t, a):
    return Call(train_argv(t, a, "--d_modle", "32"), 2, ("--d_modle", "--d_model"))


@case("bad-flag-type")
def _(t, a):
    return Call(train_argv(t, a, "--d_model", "wide"), 2, ("--d_model", "wide"))


@case("translate-examples-yaml-list")
def _(t, a):
    return Call(train_argv(t, a, "--translate_examples", '["a b .", "c d ."]'), 0)


@case("latin1-corpus-writes-nothing")
def _(t, a):
    corpus = moses(t, LINES[:2], LATIN1)
    return Call(train_argv(t, a, corpus=corpus, check=False), 2, (f"{corpus / 'train.de'}:2:", "not valid UTF-8"))


@case("line-count-mismatch-writes-nothing")
def _(t, a):
    corpus = moses(t, LINES, GERMAN[:2])
    return Call(
        train_argv(t, a, corpus=corpus, check=False),
        2,
        (f"{corpus / 'train.en'} has 3 lines", f"{corpus / 'train.de'} has 2 lines"),
    )


@case("zero-usable-pairs-blank-lines")
def _(t, a):
    corpus = moses(t, ["", "", ""], ["", "", ""])
    return Call(train_argv(t, a, corpus=corpus, check=False), 2, ("train_data",))


@case("zero-usable-pairs-0-byte")
def _(t, a):
    corpus = moses(t, b"", b"")
    return Call(train_argv(t, a, corpus=corpus, check=False), 2, ("train_data",))


@case("previous-run-refused")
def _(t, a):
    copy(a.run, t / "run")
    return Call(
        train_argv(t, a, check=False), 2, ("output_dir", str(t / "run"), "previous run", "--resume", "--overwrite")
    )


@case("previous-run-refused-by-check")
def _(t, a):
    copy(a.run, t / "run")
    return Call(train_argv(t, a), 2, ("output_dir", str(t / "run"), "previous run", "--resume", "--overwrite"))


@case("output-dir-not-a-run")
def _(t, a):
    write(t / "run" / "mine.txt", "keep")
    return Call(train_argv(t, a, check=False), 2, ("output_dir", str(t / "run"), "not empty"))


@case("overwrite-refuses-a-folder-no-run-wrote")
def _(t, a):
    write(t / "run" / "hub" / "mine.txt", "precious")  # names a run writes, in a folder no run wrote
    write(t / "run" / "tokenizer" / "tokenizer.json", "{}")
    write(t / "run" / "metrics.json", "notes")
    return Call(
        train_argv(t, a, "--overwrite", check=False),
        2,
        ("output_dir", str(t / "run"), "hub, metrics.json, tokenizer", "choose another output_dir"),
    )


@case("overwrite-and-resume-refused")
def _(t, a):
    copy(a.run, t / "run")
    return Call(train_argv(t, a, "--overwrite", "--resume"), 2, ("--overwrite", "--resume", "pick one"))


@case("resume-without-recipe-keeps-the-finished-run")
def _(t, a):
    copy(a.run, t / "run")  # trained to max_steps 4; the default recipe says 800
    return Call(["--output_dir", t / "run", "--resume"], 0, check=stdout_has("finished at update 4: nothing to do"))


@case("export-dir-is-a-file")
def _(t, a):
    write(t / "export", "x")
    return Call(train_argv(t, a, "--export_dir", t / "export"), 2, ("export_dir", str(t / "export"), "is a file"))


@case("resume-changed-architecture")
def _(t, a):
    copy(a.run, t / "run")
    return Call(
        train_argv(t, a, "--resume", "--d_model", "64", "--max_steps", "6", check=False),
        2,
        ("--resume", "d_model=32", "64"),
    )


@case("resume-all-checkpoints-corrupt")
def _(t, a):
    copy(a.run, t / "run")
    for step in (2, 4):
        truncate(t / "run" / f"checkpoint-{step}" / "model.safetensors")
    return Call(
        train_argv(t, a, "--resume", "--max_steps", "6", check=False), 2, ("--resume", "no checkpoint", str(t / "run"))
    )


@case("resume-planted-pickle-refused")
def _(t, a):
    import torch

    run = copy(a.run, t / "run")
    torch.save({"state": {0: Planted()}}, run / "checkpoint-4" / "rng_state.pth")
    return Call(
        train_argv(t, a, "--resume", "--max_steps", "6", check=False),
        2,
        (str(run / "checkpoint-4" / "rng_state.pth"), "safe loader refuses", "it calls print"),
    )


class Planted:
    def __reduce__(self):
        return (print, ("PLANTED CODE RAN",))


@case("resume-newest-checkpoint-corrupt-falls-back", pytest.mark.slow)
def _(t, a):
    run = copy(a.run, t / "run")
    truncate(run / "checkpoint-4" / "model.safetensors")

    def check(stdout, stderr):
        assert "skipping checkpoint-4" in stdout + stderr and "resuming from" in stdout
        state = json.loads((run / "checkpoint-6" / "trainer_state.json").read_text(encoding="utf-8"))
        assert state["global_step"] == 6
        check_safetensors(run / "checkpoint-4" / "model.safetensors")  # written again, whole
        assert json.loads((run / "metrics.json").read_text(encoding="utf-8"))["global_step"] == 6

    return Call(train_argv(t, a, "--resume", "--max_steps", "6", check=False), 0, may_change=(run,), check=check)


@case("overwrite-replaces-previous-run", pytest.mark.slow)
def _(t, a):
    run = copy(a.run, t / "run")
    write(run / "notes.txt", "mine, not the run's")
    write(run / "checkpoint-4" / "stale.txt", "from the previous run")
    (run / "checkpoint-8").mkdir()

    def check(stdout, stderr):
        assert (run / "notes.txt").read_text(encoding="utf-8") == "mine, not the run's"
        assert not (run / "checkpoint-4" / "stale.txt").exists() and not (run / "checkpoint-8").exists()
        assert (run / "hub" / "model.safetensors").is_file() and (run / "checkpoint-4" / "model.safetensors").is_file()

    return Call(train_argv(t, a, "--overwrite", check=False), 0, may_change=(run,), check=check)


@case("ctrl-c")
def _(t, a):
    return Call(train_argv(t, a, check=False), 130, ("interrupted",), interrupt="vaswani_hf.cli.train.run_training")


test_cli_contract = case.contract_test()  # every case above


def test_train_on_zero_usable_pairs_exports_no_model(tmp_path, assets, capfd, monkeypatch):
    """A training split whose pairs are all blank (one side holding a space) ends with exit status 2 and the error,
    naming train_data, as stderr's last line; no model or checkpoint is exported."""
    monkeypatch.chdir(tmp_path)
    corpus = moses(tmp_path, ["", "", ""], ["", " ", ""])
    code, _ = run_main("train", train_argv(tmp_path, assets, corpus=corpus, check=False))
    err = capfd.readouterr().err
    assert code == 2 and "Traceback" not in err and "train_data" in err.splitlines()[-1]
    assert not (tmp_path / "run" / "hub").exists() and not list((tmp_path / "run").glob("checkpoint-*"))
