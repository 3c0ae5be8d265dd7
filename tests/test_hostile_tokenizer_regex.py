"""A tokenizer.json whose regular expression is invalid or backtracks without end is refused in one line naming the
file, exit status 2, by every tool that reads a tokenizer, before any work.

The tokenizers library compiles a pattern when it loads the file, so an invalid one (`((`) fails the load with a plain
Exception. A pattern that backtracks exponentially (`((a+)+)+c`) loads, and the library panics only when a sentence
makes Oniguruma give up (`retry-limit-in-match over`): a `pyo3_runtime.PanicException`, a BaseException that
`except Exception` lets through, after Rust has printed its own report to descriptor 2. `io.check_tokenizer_file`
probes such a file while it is checked (`io.files.probe_regexes`) and keeps Rust's report off the terminal
(`io.panics.rust_call`); the tools check every tokenizer.json they read through it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_contract import LINES, TRANSLATE_OPTIONS, copy, run_main, snapshot
from hub_helpers import REPO_ID

from vaswani_hf.io import UsageError, check_tokenizer_file
from vaswani_hf.io.panics import RustPanic, is_rust_panic, rust_call

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

BACKTRACKS = "((a+)+)+c"  # exponential backtracking on a run of a's not followed by c: it panics on ~40 a's
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""  # a usual pattern, fine


def split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def with_pattern(source: Path, target: Path, where: str, pattern: str) -> Path:
    """A copy of the tokenizer.json `source` whose normalizer or pre-tokenizer first applies `pattern`."""
    data = json.loads(source.read_text(encoding="utf-8"))
    if where == "normalizer":
        replace = {"type": "Replace", "pattern": {"Regex": pattern}, "content": " "}
        data["normalizer"] = {
            "type": "Sequence",
            "normalizers": [replace, *([data["normalizer"]] * bool(data["normalizer"]))],
        }
    else:
        kept = [data["pre_tokenizer"]] if data["pre_tokenizer"] else []
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(pattern), *kept]}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data), encoding="utf-8")
    return target


@pytest.mark.parametrize("where", ["normalizer", "pre_tokenizer"])
def test_a_pattern_that_backtracks_without_end_is_named_in_one_line(where, assets, tmp_path, capfd):
    path = with_pattern(assets.model / "tokenizer.json", tmp_path / "tokenizer.json", where, BACKTRACKS)
    capfd.readouterr()
    with pytest.raises(UsageError) as refused:
        check_tokenizer_file(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: a regular expression of the tokenizer backtracks without end"), message
    field = {"normalizer": "normalizer.normalizers[0]", "pre_tokenizer": "pre_tokenizer.pretokenizers[0]"}[where]
    assert f"({field}.pattern '{BACKTRACKS}')" in message and "\n" not in message, message
    assert "retry-limit-in-match" in message and message.endswith("fix the pattern, or use a tokenizer without it")
    assert capfd.readouterr().err == ""  # Rust's own report of the panic never reaches the terminal


def test_an_invalid_pattern_is_named_in_one_line(assets, tmp_path):
    path = with_pattern(assets.model / "tokenizer.json", tmp_path / "tokenizer.json", "pre_tokenizer", "((")
    with pytest.raises(UsageError, match=r"tokenizer.json: not a tokenizer file \(Oniguruma error: end pattern with"):
        check_tokenizer_file(path)


@pytest.mark.parametrize("pattern", [GPT2, r"\s+", r"(?i:a|b)+c"])
def test_a_usual_pattern_passes_the_probes(pattern, assets, tmp_path, capfd):
    path = with_pattern(assets.model / "tokenizer.json", tmp_path / "tokenizer.json", "pre_tokenizer", pattern)
    assert check_tokenizer_file(path).get_vocab_size() > 0
    assert capfd.readouterr().err == ""


def test_a_panic_is_recognised_by_its_class_and_other_output_is_kept(assets, tmp_path, capfd):
    """`rust_call` turns PyO3's PanicException into RustPanic; what a call that does not panic prints on descriptor 2
    is written there after all."""
    import os

    from tokenizers import Tokenizer

    path = with_pattern(assets.model / "tokenizer.json", tmp_path / "tokenizer.json", "pre_tokenizer", BACKTRACKS)
    tokenizer = Tokenizer.from_file(str(path))
    try:
        tokenizer.encode("a" * 48 + "!")
    except BaseException as error:  # noqa: BLE001 - the panic is what this test looks at
        assert is_rust_panic(error) and not isinstance(error, Exception)
    else:
        raise AssertionError("the tokenizers library no longer panics on this pattern: choose another one")
    with pytest.raises(RustPanic, match="retry-limit-in-match over"):
        rust_call(lambda: tokenizer.encode("a" * 48 + "!"))
    capfd.readouterr()
    assert rust_call(lambda: os.write(2, b"kept\n")) == 5
    assert capfd.readouterr().err == "kept\n"


# Every tool that reads a tokenizer, given a model folder (or a CTranslate2 export, or a tokenizer folder) whose
# tokenizer.json has the pattern: (tool, argv(hostile model, hostile export, case folder, assets)).
TOOLS_THAT_READ_A_TOKENIZER = {
    "translate": lambda m, c, t, a: [a.plain, "--model", m, *TRANSLATE_OPTIONS, "--output", t / "out.txt"],
    "translate-ctranslate2": lambda m, c, t, a: [
        a.plain,
        "--model",
        c,
        "--engine",
        "ctranslate2",
        *TRANSLATE_OPTIONS,
        "--output",
        t / "out.txt",
    ],
    "evaluate": lambda m, c, t, a: ["--model", m, "--source", a.plain, "--references", a.plain, "--out", t / "s.json"],
    "visualize_attention": lambda m, c, t, a: [
        "--model_dir",
        m,
        "--source",
        LINES[0],
        "--device",
        "cpu",
        "--out",
        t / "v",
    ],
    "export_marian": lambda m, c, t, a: ["--model_dir", m, "--out", t / "marian"],
    "export_ctranslate2": lambda m, c, t, a: ["--model_dir", m, "--out_dir", t / "ct2"],
    "push_to_hub": lambda m, c, t, a: ["--model_dir", m, "--repo_id", REPO_ID, "--dry_run"],
    "train": lambda m, c, t, a: [
        "--recipe",
        a.recipe,
        "--data_dir",
        a.corpus,
        "--tokenizer_path",
        m,
        "--output_dir",
        t / "run",
        "--check",
    ],
}


@pytest.mark.parametrize("case", list(TOOLS_THAT_READ_A_TOKENIZER))
def test_every_tool_that_reads_a_tokenizer_refuses_the_pattern(case, assets, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    model, export = copy(assets.model, tmp_path / "model"), copy(assets.ct2, tmp_path / "ct2-export")
    for folder in (model, export):
        if (folder / "tokenizer.json").is_file():
            with_pattern(folder / "tokenizer.json", folder / "tokenizer.json", "pre_tokenizer", BACKTRACKS)
    hostile = (export if case.endswith("ctranslate2") and case.startswith("translate") else model) / "tokenizer.json"
    assert hostile.is_file()
    before = snapshot(tmp_path, assets.root)
    capfd.readouterr()
    code, warned = run_main(case.split("-")[0], TOOLS_THAT_READ_A_TOKENIZER[case](model, export, tmp_path, assets))
    err = capfd.readouterr().err
    assert code == 2 and not warned, (code, err, warned)
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "panicked at" not in err, err
    assert f"{hostile}: a regular expression of the tokenizer backtracks without end" in lines[0], err
    assert snapshot(tmp_path, assets.root) == before
