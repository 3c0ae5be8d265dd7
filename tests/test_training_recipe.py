"""Recipes: the bundled recipes carry the paper's settings, bad keys and values are refused with the key named, and the
command line parses into the same Recipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, write_recipe_yaml

from vaswani_hf.training.plan import World, plan_run
from vaswani_hf.training.recipe import RECIPES_DIR, RecipeError, load_recipe

TRAIN = REPO / "scripts" / "train.py"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bundled_recipes_load_and_have_the_paper_settings():
    base = load_recipe("wmt14-en-de-base").flat()
    big = load_recipe("wmt14-en-de-big").flat()
    fr = load_recipe("wmt14-en-fr-big").flat()
    for r in (base, big, fr):
        assert (r["adam_beta1"], r["adam_beta2"], r["adam_epsilon"], r["warmup_steps"]) == (0.9, 0.98, 1e-9, 4000)
        assert r["hub_dataset"] == "wmt14" and r["label_smoothing"] == 0.1 and r["weight_decay"] == 0.0
        assert r["tokens_per_step"] == 25000 and r["gradient_accumulation_steps"] == "auto"
        assert r["save_every_minutes"] == 10.0 and r["keep_last"] >= r["average_last"]
    assert (base["max_steps"], base["dropout"], base["average_last"], base["vocab_size"]) == (100000, 0.1, 5, 37000)
    assert (big["max_steps"], big["dropout"], big["average_last"], big["d_model"]) == (300000, 0.3, 20, 1024)
    assert (fr["max_steps"], fr["dropout"], fr["average_last"], fr["vocab_size"]) == (300000, 0.1, 20, 32000)
    assert fr["tgt_lang"] == "fr" and fr["hub_config"] == "fr-en"
    assert base["max_tokens_per_device"] == "auto"  # 25000 tokens per update on any device: test_training_budget.py
    m30k = load_recipe("multi30k-en-de").flat()
    assert m30k["bleu_tokenize"] == "none" and "tok" in m30k["data_dir"]


@pytest.mark.parametrize("path", sorted(RECIPES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_recipe_loads_by_its_name(path):
    """A recipe added to recipes/ is checked without a case written for it: it loads by the name --recipe takes."""
    assert load_recipe(path.stem).data.data_format


def test_the_space_recipe_trains_on_cased_text_and_translates_the_pages_examples():
    """The Space's model (recipes/multi30k-en-de-space.yaml) reads the raw, cased Multi30k text that the page's examples
    are written like, is scored with sacreBLEU's default tokenizer, prints the page's examples, and writes the folder
    the page serves by default."""
    from vaswani_hf.space import logic as space_logic
    from vaswani_hf.space import page as space

    recipe = load_recipe(space.SPACE_RECIPE).flat()
    assert recipe["data_dir"].endswith("multi30k/raw") and not recipe["lowercase"] and recipe["bleu_tokenize"] == "13a"
    assert (recipe["train_data"], recipe["test_data"], recipe["torch_threads"]) == ("train", "test_2016_flickr", 1)
    assert sorted(recipe["translate_examples"]) == sorted(example.text for example in space_logic.EXAMPLES)
    assert f"{recipe['output_dir']}/hub" == space.DEFAULT_MODELS[0]


def test_the_multi30k_recipe_finds_its_data_relative_to_the_repository(tmp_path):
    plan = plan_run(load_recipe("multi30k-en-de", {"output_dir": str(tmp_path / "run")}))
    if not plan.sources["train"].path.parent.is_dir():
        pytest.skip("Multi30k not found")
    assert plan.sources["train"].path.name == "train.lc.norm.tok"


def test_bf16_recipe_builds_cpu_training_arguments_without_an_accelerator(monkeypatch, tmp_path):
    """transformers refuses bf16=True on a machine without an accelerator unless use_cpu is set; CPU bf16 autocast
    works (and is fast on CPUs with AMX / AVX512-BF16), so a bf16 recipe must still build its arguments there."""

    from vaswani_hf.training.trainer import build_training_arguments

    if hasattr(torch, "accelerator"):
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    plan = plan_run(load_recipe("default", {"bf16": True, "output_dir": str(tmp_path / "run")}), world=World())
    args = build_training_arguments(plan)
    assert args.bf16 and args.use_cpu


def test_bad_recipe_input_errors_clearly(tmp_path):
    with pytest.raises(
        RecipeError, match="unknown recipe key 'drpout' \\(did you mean 'dropout'\\?\\).*Valid recipe keys: .*dropout"
    ):
        load_recipe("default", {"drpout": 0.2})
    with pytest.raises(RecipeError, match=r"d_model must be an integer in \[1, 65,536\], got 'wide'"):
        load_recipe("default", {"d_model": "wide"})
    with pytest.raises(RecipeError, match="max_steps must be an integer"):
        load_recipe("default", {"max_steps": 1.5})
    with pytest.raises(RecipeError, match="train_data: corpus file not found: .*missing.en"):
        plan_run(load_recipe("default", {"data_format": "moses", "data_dir": str(tmp_path), "train_data": "missing"}))
    with pytest.raises(RecipeError, match="data_dir not found"):
        plan_run(load_recipe("multi30k-en-de", {"data_dir": str(tmp_path / "nowhere")}))
    bad_yaml = write_recipe_yaml(tmp_path / "bad.yaml", {"d_model": 64, "nonsense": 1})
    with pytest.raises(RecipeError, match="unknown recipe key.*'nonsense'"):
        load_recipe(bad_yaml)
    with pytest.raises(RecipeError, match="keep_last"):
        load_recipe("default", {"keep_last": 2, "average_last": 5})


@pytest.mark.slow
def test_cli_rejects_bad_input_before_training(tmp_path):
    out = tmp_path / "never"
    cases = [
        (["--drpout", "0.3"], "unknown option --drpout (did you mean --dropout?). Valid recipe keys:"),
        (["--max_steps", "many"], "max_steps"),
        (["--recipe", "multi30k-en-de", "--data_dir", str(tmp_path / "nope")], "data_dir not found"),
    ]
    for extra, message in cases:
        proc = subprocess.run(
            [sys.executable, str(TRAIN), "--output_dir", str(out), *extra],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert not out.exists()  # nothing was started


def test_every_key_declares_its_range_and_the_recipe_checks_it():
    """Each numeric key refuses NaN and infinity and a value beyond its declared range, naming the key; the bound is
    shown by --list-keys."""
    from vaswani_hf.cli.train import format_keys
    from vaswani_hf.training.recipe import SETTINGS

    numeric = [name for name, s in SETTINGS.items() if s.type in (int, float)]
    assert len(numeric) > 30
    for name in numeric:
        declared = SETTINGS[name]
        assert declared.min is not None and declared.max is not None, f"{name} declares no range"
        for bad in ([float("nan"), float("inf"), -float("inf")] if declared.type is float else []) + [
            declared.max * 10 + 1
        ]:
            with pytest.raises(RecipeError, match=rf"--{name}: {name} must "):
                load_recipe("default", {name: bad})
    assert "[in [0, 1)]" in format_keys()


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: &x [1, 2]\nb: *x\n", "YAML aliases (*x) are not allowed"),
        (
            "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9 if i else ["lol"] * 9) + "]\n" for i in range(9)),
            "YAML aliases",
        ),  # the "billion laughs": refused before anything expands
        ("d_model: [1, 2\n", "invalid YAML"),
        ("- just\n- a list\n", "a recipe is a mapping of keys to values, got list"),
        ("d_model: 64\n" * 2 + "x" * 2_000_000, "is not a recipe"),
    ],
)
def test_recipe_files_are_read_with_bounded_work(tmp_path, text, message):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)
    assert len(str(error.value)) < 500


def test_keys_that_contradict_each_other_are_refused():
    cases = [
        ({"max_tokens_per_device": 64, "max_length": 128}, "max_tokens_per_device 64 is below max_length 128"),
        ({"src_lang": "en", "tgt_lang": "en"}, "two different language codes"),
        ({"bf16": True, "fp16": True}, "at most one of bf16 and fp16"),
        ({"data_format": "hub"}, "needs hub_dataset"),
        ({"report_to": "nonsense"}, "unknown integration 'nonsense'"),
        ({"max_steps": 0, "num_train_epochs": 0.0}, "set max_steps > 0 or num_train_epochs > 0"),
    ]
    for overrides, message in cases:
        with pytest.raises(RecipeError, match=message):
            load_recipe("default", overrides)


def test_label_smoothing_is_stated_once():
    """eps_ls = 0.1 (Section 5.4) is the objective's constant: the recipe key defaults to it, and no bundled recipe
    states it again (a recipe that changes it still may)."""
    from vaswani_hf.training.objective import PAPER_LABEL_SMOOTHING
    from vaswani_hf.training.recipe import RECIPES_DIR, defaults, read_recipe_file

    assert defaults()["label_smoothing"] == PAPER_LABEL_SMOOTHING
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        assert read_recipe_file(path).get("label_smoothing") != PAPER_LABEL_SMOOTHING, path


def test_a_rule_between_model_keys_names_where_each_came_from_and_its_advice_works(tmp_path):
    """num_heads that does not divide d_model: the refusal names the file of each key it involves, and the way out it
    gives (d_k, d_v: Table 3's rows A and B vary them) is a recipe key."""
    path = write_recipe_yaml(tmp_path / "heads.yaml", {"d_model": 64, "d_ff": 64, "num_heads": 5})
    with pytest.raises(RecipeError, match=rf"d_model from {path}, num_heads from {path}\): .*pass d_k explicitly"):
        load_recipe(str(path))
    config = load_recipe(str(path), {"d_k": 16, "d_v": "16"}).model
    assert (config.num_heads, config.d_k, config.d_v) == (5, 16, 16)


def test_a_recipe_is_its_sections_and_its_model_section_is_the_config_the_run_trains(tmp_path):
    """Each flat key of a recipe file lands in one typed section under its own name (`KEYS`), the model section is
    the VaswaniConfig built (and checked) when the recipe is read, and `flat()` gives back the flat mapping a recipe
    file and a run's recipe.yaml hold: reading it again builds the same recipe."""
    from vaswani_hf import VaswaniConfig
    from vaswani_hf.training.recipe import KEYS, SECTIONS

    recipe = load_recipe("default", {"warmup_steps": 16, "d_model": 64, "d_ff": 64, "num_heads": 4})
    assert recipe.optimization.warmup_steps == 16 and isinstance(recipe.model, VaswaniConfig)
    assert (recipe.model.d_model, recipe.model.d_k, recipe.model.vocab_size) == (64, 16, recipe.tokenizer.vocab_size)
    assert (
        set(KEYS.values()) == set(SECTIONS) and KEYS["warmup_steps"] == "optimization" and KEYS["d_model"] == "model"
    )
    flat = recipe.flat()
    assert list(flat) == list(KEYS) and flat["d_k"] is None and flat["warmup_steps"] == 16
    again = load_recipe(write_recipe_yaml(tmp_path / "again.yaml", flat))
    assert again.flat() == flat and again.model.to_dict() == recipe.model.to_dict()


def test_a_recipe_reads_as_the_mapping_of_its_flat_keys_as_it_did_before_the_sections():
    """Code written when a recipe was a flat mapping (users' scripts, the benchmarks) still works: `recipe["key"]`
    reads the value its section holds, `in`, `len`, iteration and `dict(recipe)` see every flat key in the sections'
    order, `dict(recipe)` is the recipe.yaml a run writes, `recipe.warmup_steps` reads the key as an attribute, and
    the mapping is read-only."""
    from vaswani_hf.training.recipe import KEYS

    recipe = load_recipe("default", {"warmup_steps": 16, "d_model": 64, "d_ff": 64, "num_heads": 4, "seed": 7})
    assert dict(recipe) == recipe.flat() and list(recipe) == list(KEYS) and len(recipe) == len(KEYS)
    assert recipe["warmup_steps"] is recipe.optimization.warmup_steps == 16
    assert recipe["d_model"] is recipe.model.d_model == 64 and recipe["seed"] is recipe.run.seed == 7
    assert recipe["d_k"] is None and recipe.model.d_k == 16  # written as the recipe wrote it, resolved in the config
    assert "d_model" in recipe and "model" not in recipe and recipe.get("no_such_key", "absent") == "absent"
    assert dict(recipe.items())["output_dir"] == recipe.run.output_dir
    with pytest.raises(KeyError):
        recipe["optimization"]
    with pytest.raises(TypeError):
        recipe["seed"] = 1
    assert recipe.warmup_steps == 16 and recipe.d_model == 64  # the attribute form of the flat keys too
    with pytest.raises(AttributeError, match="no_such_key"):
        recipe.no_such_key
    import copy
    import pickle

    assert pickle.loads(pickle.dumps(recipe)).flat() == copy.deepcopy(recipe).flat() == recipe.flat()


@pytest.mark.parametrize(
    "value, shown",
    [(True, "got true (a boolean)"), (None, "got null"), ([1, 2], "got [1, 2] (a list)"), ("wide", "got 'wide'")],
)
def test_a_wrong_value_in_a_recipe_file_is_shown_as_its_yaml_writes_it(tmp_path, value, shown):
    """The one-line refusal names the file and the key, and quotes the value as the recipe's author wrote it in YAML
    (`true`, `null`, `[1, 2]`), not as Python prints it (`True`, `None`)."""
    path = write_recipe_yaml(tmp_path / "r.yaml", {"d_model": value})
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert str(error.value).startswith(f"{path}: d_model must be an integer in [1, 65,536], {shown}")
    assert "True" not in str(error.value) and "None" not in str(error.value)


def test_a_bad_value_in_a_recipe_file_is_refused_even_where_an_override_replaces_it(tmp_path):
    """Each value of a recipe file is checked as the file is read, naming the file and the key, so a file that is
    wrong stays refused whatever a flag (or a Python override) puts over it; the override is checked too."""
    path = write_recipe_yaml(tmp_path / "bad.yaml", {"d_model": -1, "warmup_steps": 8})
    with pytest.raises(RecipeError, match=rf"^{path}: d_model must be in \[1, 65,536\], got -1$"):
        load_recipe(path, {"d_model": 32})
    good = write_recipe_yaml(tmp_path / "good.yaml", {"d_model": 32, "d_ff": 32, "num_heads": 4})
    with pytest.raises(RecipeError, match=r"^--warmup_steps: warmup_steps must be in \[1, "):
        load_recipe(good, {"warmup_steps": "0"})


def test_a_bad_value_in_a_run_folders_recipe_yaml_is_refused_on_resume_naming_that_file(tmp_path):
    """On resume without --recipe, the run's own recipe.yaml is read, and its values are checked as they are read,
    naming that file, even where the command line gives the key again."""
    run = tmp_path / "run"
    run.mkdir()
    saved = write_recipe_yaml(run / "recipe.yaml", {**load_recipe("default").flat(), "label_smoothing": 1.5})
    with pytest.raises(RecipeError, match=rf"^{saved}: label_smoothing must be "):
        load_recipe(None, {"output_dir": str(run), "resume": True, "label_smoothing": 0.1})


def test_a_recipe_built_in_python_holds_the_rules_between_its_keys():
    """`Recipe(...)` and `dataclasses.replace` check what `load_recipe` checks: each section checks its values when
    it is built, the recipe checks the rules between keys and that each section is of its type."""
    import dataclasses

    from vaswani_hf.configuration_vaswani import SettingError

    recipe = load_recipe("default")
    with pytest.raises(RecipeError, match="src_lang and tgt_lang must be two different language codes"):
        dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, tgt_lang="en"))
    with pytest.raises(SettingError, match=r"^recipe: warmup_steps must be in \[1, "):
        dataclasses.replace(recipe.optimization, warmup_steps=0)
    with pytest.raises(TypeError, match="optimization section must be a OptimizationSettings, got a dict"):
        dataclasses.replace(recipe, optimization={"warmup_steps": 8})


def test_a_folder_named_like_a_bundled_recipe_does_not_hide_it(tmp_path, monkeypatch):
    """`--recipe default` run where outputs/default/ exists (cd outputs after the default run) is the bundled recipe;
    a file of that name is still taken as the recipe file, and a folder given as a path is still refused."""
    from vaswani_hf.training.recipe import RECIPES_DIR, RecipeError, recipe_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()
    assert recipe_path("default") == RECIPES_DIR / "default.yaml"
    with pytest.raises(RecipeError, match="is not a file"):
        recipe_path("./default")
    (tmp_path / "multi30k-en-de").write_text("seed: 3\n", encoding="utf-8")
    assert recipe_path("multi30k-en-de") == Path("multi30k-en-de")
