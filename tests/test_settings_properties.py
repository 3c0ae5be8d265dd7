"""Property tests generated from the declarations of the model's and decoding's settings
(`vaswani_hf.settings.MODEL_SETTINGS`, `GENERATION_SETTINGS`: `VaswaniConfig`'s and `DecodingSettings`' fields): for every declared setting, every
entry a value can arrive by -- `VaswaniConfig(...)`, a config.json read by `from_pretrained`, a generation_config.json
read by `from_pretrained` and by the command line, `generate()`'s arguments and the generation config it runs with,
the recipe key, the command-line flag -- refuses a value that breaks the declaration (NaN, infinities, beyond either
end, huge, the wrong type, a token id outside the vocabulary, an unknown choice) with one line naming the setting, and
accepts the values the declaration allows. The tables are read by introspection, so a setting declared later is
covered without a new test.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vaswani_hf import VaswaniConfig
from vaswani_hf.configuration_vaswani import SettingError
from vaswani_hf.generation_config_vaswani import check_generation_settings
from vaswani_hf.settings import GENERATION_SETTINGS, MODEL_SETTINGS, Setting
from vaswani_hf.training.recipe import MODEL_KEYS, SETTINGS

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FEW = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MODEL = list(MODEL_SETTINGS)
DECODING = list(GENERATION_SETTINGS)
CONFIG_VOCAB = MODEL_SETTINGS["vocab_size"].default  # token ids of a default config are checked against it
# Settings that hold for any value of the one under test: explicit head widths, no sinusoid-parity rule, token ids
# inside every vocabulary.
NEUTRAL = dict(
    d_k=8, d_v=8, position_encoding="learned", pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0
)


# ---------------------------------------------------------------------------------------------------------------------
# Values from a declaration (an oracle written from the declaration's fields, not from Setting.problem)
# ---------------------------------------------------------------------------------------------------------------------


def wrong_types(s: Setting) -> list:
    values = [b"1", [1] if s.type is list and not s.token_id else ["x"]] + ([] if s.type is dict else [{"x": 1}])
    if s.type is not str:
        values.append("1")
    if s.type is not bool and True not in s.choices:
        values.append(True)
    if s.type is int:
        values.append(4.0)
    if s.type is bool:
        values += [1, "true"]
    if not s.nullable:
        values.append(None)
    return values


def out_of_bound(s: Setting, vocab_size: int) -> st.SearchStrategy:
    """Numbers that break the bound of a numeric setting (or a token id outside [0, vocab_size))."""
    if s.token_id:
        return st.sampled_from([-1, vocab_size, vocab_size + 7, 10**12])
    b = s
    options = [st.sampled_from([10**30, -(10**30)] + ([math.nan, math.inf, -math.inf] if s.type is float else []))]
    if b.min is not None:
        low = b.min if b.min_exclusive else b.min - (1 if s.type is int else 1e-6)
        options.append(
            st.integers(max_value=math.floor(low))
            if s.type is int
            else st.floats(max_value=float(low), allow_nan=False)
        )
    if b.max is not None:
        high = b.max if b.max_exclusive else b.max + (1 if s.type is int else 1e-6)
        options.append(
            st.integers(min_value=math.ceil(high))
            if s.type is int
            else st.floats(min_value=float(high), allow_nan=False)
        )
    return st.one_of(options)


def breaking(s: Setting, vocab_size: int) -> st.SearchStrategy:
    if s.choices:
        wrong = st.sampled_from(["unknown", "", 0, 2.5, ["x"]])
    elif s.type in (int, float):
        wrong = st.one_of(st.sampled_from(wrong_types(s)), out_of_bound(s, vocab_size))
    else:
        wrong = st.sampled_from(wrong_types(s))
    return wrong


def within(s: Setting, vocab_size: int, small: bool = False) -> st.SearchStrategy:
    """Values the declaration allows (`small`: integers near the low end, for settings that cost work)."""
    if s.choices:
        values = st.sampled_from(s.choices)
    elif s.token_id and s.type is list:  # a list of ids (bad_words_ids: of non-empty lists of ids)
        ids = st.lists(st.integers(0, vocab_size - 1), min_size=int(getattr(s, "nested", False)), max_size=3)
        values = st.lists(ids, min_size=1, max_size=2) if getattr(s, "nested", False) else ids
    elif s.token_id:
        values = st.integers(0, vocab_size - 1)
    elif s.type is bool:
        values = st.booleans()
    elif s.type is str:
        values = st.text(max_size=8)
    elif s.type is list:
        values = st.lists(st.text(max_size=3), max_size=2)
    elif s.type is dict:
        values = st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
    else:
        b = s
        low = b.min if b.min is not None else -1e6
        high = b.max if b.max is not None else 1e6
        if s.type is int:
            low, high = math.floor(low) + b.min_exclusive, math.ceil(high) - b.max_exclusive
            values = st.integers(low, min(high, low + 4) if small else high)
        else:
            values = st.floats(low, high, exclude_min=b.min_exclusive, exclude_max=b.max_exclusive)
    return st.one_of(st.none(), values) if s.nullable else values


def json_value(value) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def assert_names(error: BaseException, *names: str) -> None:
    message = str(error)
    assert "\n" not in message, message
    for name in names:
        assert name in message, f"{name!r} not in {message!r}"


# ---------------------------------------------------------------------------------------------------------------------
# The model's settings: VaswaniConfig(...) and config.json
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODEL)
@FEW
@given(data=st.data())
def test_a_model_setting_that_breaks_its_declaration_is_refused_by_the_config(name, data):
    value = data.draw(breaking(MODEL_SETTINGS[name], CONFIG_VOCAB), label=name)
    with pytest.raises(SettingError) as error:
        VaswaniConfig(**{name: value})
    assert isinstance(error.value, ValueError)
    assert_names(error.value, "VaswaniConfig", f"{name} must")


@pytest.mark.parametrize("name", MODEL)
@FEW
@given(data=st.data())
def test_a_model_setting_inside_its_declaration_is_accepted(name, data):
    value = data.draw(within(MODEL_SETTINGS[name], CONFIG_VOCAB), label=name)
    config = VaswaniConfig(**{**NEUTRAL, name: value})
    if value is not None:
        assert getattr(config, name) == value


def test_a_generic_name_is_checked_as_the_setting_it_maps_to():
    with pytest.raises(SettingError, match=r"VaswaniConfig: d_model must be in \[1, 65,536\], got -4"):
        VaswaniConfig(hidden_size=-4)
    with pytest.raises(SettingError, match="relu_dropout must be a number in"):
        VaswaniConfig(activation_dropout="0.1")


def test_an_attribute_edited_after_construction_is_checked_before_saving(tmp_path):
    config = VaswaniConfig()
    config.layer_norm_eps = math.nan
    with pytest.raises(Exception, match="layer_norm_eps must be a finite number"):
        config.save_pretrained(tmp_path)


@pytest.mark.parametrize("name", MODEL)
@FEW
@given(data=st.data())
def test_a_config_json_that_breaks_a_declaration_is_refused_when_loaded(name, data, tmp_path):
    from transformers import AutoConfig

    value = data.draw(breaking(MODEL_SETTINGS[name], CONFIG_VOCAB).filter(json_value), label=name)
    folder = tmp_path / "config"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**VaswaniConfig().to_dict(), name: value}), encoding="utf-8")
    with pytest.raises(SettingError) as error:
        AutoConfig.from_pretrained(folder)
    assert_names(error.value, f"{name} must")


def test_token_ids_lie_in_the_vocabulary():
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        with pytest.raises(SettingError, match=rf"{name} must be a token id of the vocabulary, in \[0, 7\], got 8"):
            VaswaniConfig(vocab_size=8, **{name: 8})
    assert VaswaniConfig(vocab_size=8, eos_token_id=[2, 7]).eos_token_id == [2, 7]


# ---------------------------------------------------------------------------------------------------------------------
# The decoding settings: generate(), the generation config it runs with, generation_config.json
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model():
    from hub_helpers import make_tiny_model

    model, tokenizer = make_tiny_model()
    model.generation_config.max_length_b = 3  # short outputs: the cases that decode stay fast
    return model, tokenizer


@pytest.fixture(scope="module")
def model_folder(tiny_model, tmp_path_factory):
    model, tokenizer = tiny_model
    folder = tmp_path_factory.mktemp("settings") / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sources(tokenizer) -> dict:
    return dict(tokenizer(["a man runs", "a dog"], return_tensors="pt", padding=True))


@pytest.mark.parametrize("given_as", ["generate()", "generation_config"])
@pytest.mark.parametrize("name", DECODING)
@FEW
@given(data=st.data())
def test_a_decoding_setting_that_breaks_its_declaration_is_refused_by_generate(name, given_as, data, tiny_model):
    """As generate()'s argument, or in the generation config generate() runs with."""
    model, tokenizer = tiny_model
    value = data.draw(breaking(GENERATION_SETTINGS[name], model.config.vocab_size), label=name)
    arguments = {name: value}
    if given_as == "generation_config":
        config = model.generation_config.__class__.from_dict(model.generation_config.to_dict())
        setattr(config, name, value)
        arguments = {"generation_config": config}
    with pytest.raises(SettingError) as error:
        model.generate(**sources(tokenizer), **arguments)
    assert_names(error.value, given_as, f"{name} must")


@pytest.mark.parametrize("name", DECODING)
@FEW
@given(data=st.data())
def test_a_decoding_setting_inside_its_declaration_is_accepted(name, data, tiny_model):
    """Every value the declaration allows passes the check; small ones decode (the check is not tighter than the
    declaration)."""
    model, tokenizer = tiny_model
    declared = GENERATION_SETTINGS[name]
    value = data.draw(within(declared, model.config.vocab_size, small=True), label=name)
    check_generation_settings({name: value}, model.config.vocab_size, "generate()")
    extra = {"num_beams": value} if name == "num_return_sequences" and value else {}
    if name in ("max_length", "max_new_tokens", "min_length", "min_new_tokens") and value is not None:
        extra = {"max_length_b": None} if name in ("max_length", "max_new_tokens") else {"max_length_b": value + 1}
    if name == "max_length_b" and value is None:
        extra = {"max_new_tokens": 2}  # no limit at all would decode up to transformers' max_length 20
    with torch.no_grad():
        out = model.generate(**sources(tokenizer), **{name: value}, **extra)
    assert getattr(out, "sequences", out).shape[0] >= 2


@pytest.mark.parametrize("name", DECODING)
@FEW
@given(data=st.data())
def test_a_generation_config_json_that_breaks_a_declaration_is_refused_when_loaded(name, data, model_folder, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    from vaswani_hf.io import load_model_folder

    vocab = json.loads((model_folder / "config.json").read_text())["vocab_size"]
    value = data.draw(breaking(GENERATION_SETTINGS[name], vocab).filter(json_value), label=name)
    folder = tmp_path / "model"
    if not folder.exists():
        shutil.copytree(model_folder, folder)
    saved = json.loads((model_folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**saved, name: value}), encoding="utf-8")
    with pytest.raises(SettingError) as error:
        AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert_names(error.value, str(folder / "generation_config.json"), f"{name} must")
    with pytest.raises(ValueError) as error:  # the package's loader: a UsageError naming the folder and the file
        load_model_folder(folder)
    assert_names(error.value, "generation_config.json", f"{name} must")


def test_a_generation_config_json_that_is_not_json_is_refused_not_ignored(model_folder, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    folder = tmp_path / "model"
    shutil.copytree(model_folder, folder)
    for text, message in (
        ("{num_beams: 4", "not a valid JSON file"),
        ("[1, 2]", "JSON object of settings, got list"),
        ("\xff\xfe", "not a valid JSON file"),
    ):
        (folder / "generation_config.json").write_text(text, encoding="latin-1")
        with pytest.raises(SettingError) as error:
            AutoModelForSeq2SeqLM.from_pretrained(folder)
        assert_names(error.value, str(folder / "generation_config.json"), message)


def test_empty_inputs_are_refused_by_generate_and_give_nothing_through_the_pipeline(tiny_model):
    from vaswani_hf import translation_pipeline

    model, tokenizer = tiny_model
    for shape in ((0, 3), (2, 0)):
        with pytest.raises(
            SettingError,
            match=rf"generate\(\): input_ids of shape \({shape[0]}, {shape[1]}\) hold "
            "no token",
        ):
            model.generate(input_ids=torch.zeros(shape, dtype=torch.long))
    assert translation_pipeline(model, tokenizer)([]) == []


def test_the_paper_defaults_are_the_declared_ones(tiny_model):
    model, _ = tiny_model
    from vaswani_hf.generation_vaswani import default_generation_config

    config = default_generation_config(model.config)
    for name, declared in GENERATION_SETTINGS.items():
        if declared.default is not None:
            assert getattr(config, name) == declared.default, name


# ---------------------------------------------------------------------------------------------------------------------
# Derived entries: the recipe's model keys, the resume check, the command-line flags
# ---------------------------------------------------------------------------------------------------------------------


def test_the_recipe_model_keys_are_the_config_declarations():
    """A model setting declared with recipe=True is a recipe key: the same declaration, no list of names."""
    from vaswani_hf.cli.train import help_text
    from vaswani_hf.training.preflight import ARCHITECTURE_KEYS
    from vaswani_hf.training.recipe import defaults

    assert set(MODEL_KEYS) == {name for name, s in MODEL_SETTINGS.items() if s.recipe} and "d_model" in MODEL_KEYS
    for name in MODEL_KEYS:
        declared = MODEL_SETTINGS[name]
        assert SETTINGS[name] is declared and defaults()[name] == declared.default
        assert help_text(name).startswith(declared.help)
    assert set(ARCHITECTURE_KEYS) == {n for n in MODEL_KEYS if MODEL_SETTINGS[n].architecture}
    assert "dropout" not in ARCHITECTURE_KEYS and "d_model" in ARCHITECTURE_KEYS


@pytest.mark.parametrize("name", MODEL_KEYS)
@FEW
@given(data=st.data())
def test_a_recipe_model_key_that_breaks_its_declaration_is_refused(name, data, tmp_path):
    import yaml

    from vaswani_hf.training.recipe import RecipeError, load_recipe

    value = data.draw(
        breaking(MODEL_SETTINGS[name], CONFIG_VOCAB).filter(lambda v: not isinstance(v, bytes)), label=name
    )
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({name: value}), encoding="utf-8")
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert_names(error.value, str(path), name)


def test_the_translate_flags_are_the_decoding_declarations():
    from vaswani_hf.cli.translate import build_parser

    flags = {a.dest: a for a in build_parser()._actions if a.dest in GENERATION_SETTINGS}
    assert {
        "num_beams",
        "length_penalty",
        "length_penalty_type",
        "max_length_a",
        "max_length_b",
        "max_new_tokens",
    } <= set(flags)
    for name, action in flags.items():
        declared = GENERATION_SETTINGS[name]
        if declared.choices:
            assert tuple(action.choices) == declared.choices
        else:
            assert action.type.setting is declared and action.type.__name__ == declared.type.__name__


@pytest.mark.parametrize(
    "content, names",
    [
        ({"max_length_b": -5}, ("generation_config.json", "max_length_b must be in [0, 65,536], got -5")),
        ({"num_beams": 0}, ("generation_config.json", "num_beams must be in [1, 1024], got 0")),
        ({"eos_token_id": 10**6}, ("generation_config.json", "eos_token_id must be a token id of the vocabulary")),
        ({"length_penalty_type": "wu"}, ("generation_config.json", "length_penalty_type must be one of 'gnmt', 'hf'")),
        ("{num_beams: 4", ("generation_config.json",)),
    ],
)
def test_translate_refuses_a_bad_generation_config_json_in_one_line(content, names, model_folder, tmp_path, capfd):
    from cli_contract import run_main

    folder = tmp_path / "model"
    shutil.copytree(model_folder, folder)
    saved = json.loads((model_folder / "generation_config.json").read_text())
    text = content if isinstance(content, str) else json.dumps({**saved, **content})
    (folder / "generation_config.json").write_text(text, encoding="utf-8")
    (tmp_path / "in.txt").write_text("a man runs\n", encoding="utf-8")
    capfd.readouterr()
    code, warned = run_main("translate", [tmp_path / "in.txt", "--model", folder, "--no_progress"])
    out, err = capfd.readouterr()
    assert code == 2 and out == "" and not warned, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, err
