"""Where each split of a run comes from (vaswani_hf.training.data): one Source per split and data_format."""

from __future__ import annotations

import pytest
from conftest import tiny_recipe

from vaswani_hf.training.data import HubSource, SampleSource
from vaswani_hf.training.plan import plan_run
from vaswani_hf.training.recipe import RecipeError, load_recipe


def test_sources_of_every_format(tmp_path):
    sample = plan_run(load_recipe("default", {"output_dir": str(tmp_path / "a")})).sources
    assert isinstance(sample["test"], SampleSource) and sample["test"].describe()["name"].endswith("test split")
    hub = plan_run(load_recipe("wmt14-en-de-base", {"output_dir": str(tmp_path / "b")})).sources
    assert isinstance(hub["valid"], HubSource)
    assert hub["test"].describe() == {"name": "wmt14 test", "id": "wmt14", "config": "de-en", "split": "test"}


def test_plan_errors_name_the_split(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.en").write_text("a\n")
    with pytest.raises(RecipeError, match=r"train_data: unknown language code 'de'"):
        plan_run(tiny_recipe(tmp_path))


def test_a_split_without_a_usable_pair_is_refused_in_one_place(tmp_path):
    """Scanning (--check) and loading (the run) refuse the same split with the same message."""
    from conftest import write_corpus

    corpus = write_corpus(tmp_path / "corpus", n_valid=0)
    (corpus / "empty.en").write_text("\n \n")
    (corpus / "empty.de").write_text("x\n\n")
    plan = plan_run(tiny_recipe(tmp_path, valid_data="empty"))
    source = plan.sources["valid"]
    assert source.files() == {"valid_data (en)": corpus / "empty.en", "valid_data (de)": corpus / "empty.de"}
    for step in (source.scan, source.load):
        with pytest.raises(
            RecipeError,
            match=r"^valid_data: .*empty has no sentence pair with both sides non-empty "
            r"\(2 pairs\); nothing to score$",
        ):
            step()
    train = plan.sources["train"]
    assert train.scan()[0] == len(train.load()) and len(train.load(limit=3)) == 3
    assert train.describe() == {"name": f"{corpus.parent.name}/corpus/train"}


@pytest.mark.parametrize(
    "fmt, name, text",
    [
        ("tsv", "train.tsv", "en\tde\na b\tc d\n"),
        ("jsonl", "train.jsonl", '{"en": "a b", "de": "c d"}\n'),
    ],
)
def test_file_formats_read_one_file(tmp_path, fmt, name, text):
    (tmp_path / name).write_text(text)
    recipe = load_recipe(
        "default",
        {
            "data_format": fmt,
            "data_dir": str(tmp_path),
            "train_data": name,
            "valid_data": None,
            "test_data": None,
            "eval_steps": 0,
            "output_dir": str(tmp_path / "run"),
        },
    )
    source = plan_run(recipe).sources["train"]
    assert source.files() == {"train_data": tmp_path / name} and source.scan() == (1, 1)
    assert source.load()[0]["translation"] == {"en": "a b", "de": "c d"}
    (tmp_path / "folder.tsv").mkdir()
    with pytest.raises(RecipeError, match=f"train_data: .*folder.tsv is a folder; data_format {fmt} expects a file"):
        plan_run(
            load_recipe("default", {**recipe.flat(), "train_data": "folder.tsv"})
        )  # the one way to build a recipe
