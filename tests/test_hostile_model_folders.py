"""Model folders and generate() inputs that are damaged or foreign, refused in one line naming the file and the field
(or the argument) before anything is loaded or decoded: another model's config.json, generation settings of list-of-id
shape out of the vocabulary or bounding each other impossibly, malformed tokenizer files, integer or non-finite
weights, masks and ids that do not fit the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hub_helpers import make_tiny_model

from vaswani_hf.configuration_vaswani import SettingError
from vaswani_hf.io import UsageError, check_model_folder, load_model_folder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model, tokenizer = make_tiny_model(seed=3)
    folder = tmp_path_factory.mktemp("hostile") / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"folder": folder, "model": model.eval(), "tokenizer": tokenizer}


def copy_of(saved, tmp_path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(saved["folder"], folder)
    return folder


def edit_json(path: Path, **fields) -> None:
    data = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**data, **fields}), encoding="utf-8")


def refused(folder: Path, *names: str) -> str:
    """The one-line refusal of `check_model_folder`, checked to name `names`."""
    with pytest.raises(UsageError) as error:
        check_model_folder(folder)
    message = str(error.value)
    assert "\n" not in message and all(name in message for name in names), message
    return message


# ---------------------------------------------------------------------------------------------------------------------
# config.json of another model
# ---------------------------------------------------------------------------------------------------------------------


# a known translation model's type over our class: named by the class its type needs (a Marian export is taken)
@pytest.mark.parametrize(
    "fields, field",
    [
        ({"model_type": "bart"}, "architectures"),
        ({"model_type": "foo"}, "model_type"),
        ({"architectures": ["MarianMTModel"]}, "architectures"),
        ({"architectures": "VaswaniForConditionalGeneration"}, "architectures"),
    ],
)
def test_a_config_of_another_model_is_refused_before_transformers_loads_it(fields, field, saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    edit_json(folder / "config.json", **fields)
    refused(folder, str(folder / "config.json"), f"field {field}")
    with pytest.raises(UsageError, match=f"config.json: field {field}"):
        load_model_folder(folder)


# keys transformers keeps in every config: a newer version's or another library's setting, an older name transformers
# maps, and a near miss of one of ours (transformers' own model tests write layer_norm_epsilon into every config)
FOREIGN_KEYS = {
    "layer_norm_epsilon": 1.0,
    "a_newer_setting": {"kind": "from the future", "steps": [1, 2]},
    "torch_dtype": "float32",
    "peft_type": None,
}


def test_a_config_json_with_keys_of_newer_versions_and_other_libraries_loads_everywhere(saved, tmp_path):
    """Every entry that reads config.json takes it: the folder check, loading, averaging, the Marian export's check
    and the real translate tool, which translates as with the file without those keys (they configure nothing here:
    layer_norm_eps keeps its value)."""
    from cli_contract import TRANSLATE_OPTIONS
    from cli_helpers import run_script

    from vaswani_hf.export.marian_limits import check_marian_exportable
    from vaswani_hf.io.averaging import average_checkpoints

    folder = copy_of(saved, tmp_path)
    edit_json(folder / "config.json", **FOREIGN_KEYS)
    check_model_folder(folder)
    model, _ = load_model_folder(folder)
    assert (model.config.layer_norm_epsilon, model.config.a_newer_setting["steps"]) == (1.0, [1, 2])
    assert model.config.layer_norm_eps == saved["model"].config.layer_norm_eps
    other = shutil.copytree(folder, tmp_path / "other")  # a second checkpoint: other weights, the same keys
    rewrite_weights(other, lambda t: t + 0.01)
    average_checkpoints([folder, other], one_run=False)
    check_marian_exportable(folder)
    source = tmp_path / "in.txt"
    source.write_text("a man is riding a horse .\ntwo dogs play in the snow .\n", encoding="utf-8")
    outputs = []
    for model_folder in (saved["folder"], folder):
        output = tmp_path / f"{model_folder.name}.txt"
        result = run_script("translate", [source, "--model", model_folder, *TRANSLATE_OPTIONS, "--output", output])
        assert result.returncode == 0, result.stderr[-2000:]
        outputs.append(output.read_text(encoding="utf-8"))
    assert outputs[1] == outputs[0] and outputs[0].count("\n") == 2


# ---------------------------------------------------------------------------------------------------------------------
# generation_config.json
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, name",
    [
        ({"bad_words_ids": [[99999]]}, "bad_words_ids"),
        ({"bad_words_ids": [[]]}, "bad_words_ids"),
        ({"bad_words_ids": [5]}, "bad_words_ids"),
        ({"suppress_tokens": [-1]}, "suppress_tokens"),
        ({"suppress_tokens": ["a"]}, "suppress_tokens"),
        ({"begin_suppress_tokens": [300]}, "begin_suppress_tokens"),
        ({"min_length": 30, "max_length": 10}, "min_length=30 must be at most max_length=10"),
        ({"min_new_tokens": 9, "max_new_tokens": 3}, "min_new_tokens=9 must be at most max_new_tokens=3"),
        ({"num_return_sequences": 8, "num_beams": 4}, "num_return_sequences=8 must be at most num_beams=4"),
    ],
)
def test_generation_settings_out_of_the_vocabulary_or_contradicting_each_other_are_refused(
    fields, name, saved, tmp_path
):
    folder = copy_of(saved, tmp_path)
    edit_json(folder / "generation_config.json", **fields)
    refused(folder, str(folder / "generation_config.json"), name)
    model = saved["model"]
    inputs = saved["tokenizer"](["a man runs"], return_tensors="pt")
    with pytest.raises(SettingError, match=r"generate\(\)"):
        model.generate(**inputs, **fields)


def test_list_of_id_settings_inside_the_vocabulary_are_applied(saved):
    model, tokenizer = saved["model"], saved["tokenizer"]
    inputs = tokenizer(["a man runs", "a dog"], return_tensors="pt", padding=True)
    plain = model.generate(**inputs, num_beams=1, max_new_tokens=6)
    banned = sorted({int(t) for t in plain[:, 1:].flatten()} - {0, 2})[:3]
    out = model.generate(
        **inputs, num_beams=1, max_new_tokens=6, suppress_tokens=banned, bad_words_ids=[[t] for t in banned]
    )
    assert not set(out[:, 1:].flatten().tolist()) & set(banned)


def test_max_length_in_generation_config_json_caps_the_output_as_the_argument_does(saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    edit_json(folder / "generation_config.json", max_length=3)
    model, tokenizer = load_model_folder(folder)
    inputs = tokenizer(["a man runs in the park with a dog"], return_tensors="pt")
    assert model.generate(**inputs).shape[1] <= 3
    assert model.generate(**inputs, max_length=3).shape[1] <= 3


def test_a_min_length_no_output_can_reach_is_refused(saved):
    model, tokenizer = saved["model"], saved["tokenizer"]
    inputs = tokenizer(["a dog"], return_tensors="pt")
    with pytest.raises(SettingError, match="min_length=500 must be at most max_length"):
        model.generate(**inputs, min_length=500)


# ---------------------------------------------------------------------------------------------------------------------
# tokenizer_config.json, special_tokens_map.json
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, text, field",
    [
        ("tokenizer_config.json", "[1, 2]", "must be an object"),
        ("tokenizer_config.json", '{"eos_token": {"content": 5}}', "field eos_token.content"),
        ("tokenizer_config.json", '{"eos_token": ["</s>"]}', "field eos_token"),
        ("tokenizer_config.json", '{"model_max_length": "big"}', "field model_max_length"),
        ("tokenizer_config.json", '{"added_tokens_decoder": {"0": "<pad>"}}', "field added_tokens_decoder.0"),
        ("tokenizer_config.json", '{"tokenizer_class": "BertTokenizer"}', "field tokenizer_class"),
        ("tokenizer_config.json", '{"eos_token": "<nonexistent>"}', "field eos_token"),
        ("tokenizer_config.json", '{"eos_token": ', "invalid JSON"),
        ("tokenizer_config.json", b'{"eos_token": "\xff"}', "not UTF-8"),
        ("special_tokens_map.json", '{"pad_token": [1, 2]}', "field pad_token"),
        ("special_tokens_map.json", '{"additional_special_tokens": [3]}', "field additional_special_tokens[0]"),
    ],
)
def test_malformed_tokenizer_files_are_named_with_their_field(name, text, field, saved, tmp_path):
    from vaswani_hf.tokenization import load_tokenizer

    folder = copy_of(saved, tmp_path)
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    refused(folder, str(path), field)
    with pytest.raises(UsageError, match=field.replace("[", r"\[")):
        load_tokenizer(folder)


def test_a_tokenizer_whose_padding_is_not_the_models_is_refused(saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    edit_json(folder / "tokenizer_config.json", pad_token="<s>")
    with pytest.raises(UsageError, match="pad_token_id is 1 but config.json's is 0"):
        load_model_folder(folder)


# ---------------------------------------------------------------------------------------------------------------------
# Weights: integer or non-finite tensors
# ---------------------------------------------------------------------------------------------------------------------


def rewrite_weights(folder: Path, change) -> str:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    name = sorted(k for k in weights if k.endswith("fc1.weight"))[0]
    weights[name] = change(weights[name])
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return name


def test_integer_weights_are_refused_not_cast(saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    name = rewrite_weights(folder, lambda t: t.to(torch.int32))
    refused(folder, str(folder / "model.safetensors"), f"tensor {name} is int32", "floating point")
    from vaswani_hf.io.averaging import average_checkpoints

    with pytest.raises(UsageError, match=f"tensor {name} is int32"):
        average_checkpoints([saved["folder"], folder])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_when_loaded_and_averaged(bad, saved, tmp_path):
    from vaswani_hf.io.averaging import average_checkpoints

    folder = copy_of(saved, tmp_path)

    def damage(t):
        t = t.clone()
        t[0, 0] = bad
        return t

    name = rewrite_weights(folder, damage)
    with pytest.raises(UsageError, match=f"model.safetensors: tensor {name} holds NaN/inf values"):
        load_model_folder(folder)
    with pytest.raises(UsageError, match=f"tensor {name} holds NaN/inf values"):
        average_checkpoints([saved["folder"], folder])


# ---------------------------------------------------------------------------------------------------------------------
# generate() and forward inputs that do not fit the model
# ---------------------------------------------------------------------------------------------------------------------


def test_masks_of_another_shape_than_their_ids_are_refused(saved):
    model = saved["model"]
    ids = torch.randint(4, 200, (2, 9))
    short = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"attention_mask must be .*\(2, 9\).*got \(2, 3\)"):
        model.generate(input_ids=ids, attention_mask=short)
    with pytest.raises(ValueError, match=r"attention_mask must be .*\(2, 9\).*got \(2, 3\)"):
        model(input_ids=ids, attention_mask=short, decoder_input_ids=ids[:, :4])
    with pytest.raises(ValueError, match=r"decoder_attention_mask must be .*\(2, 4\).*got \(2, 3\)"):
        model(input_ids=ids, decoder_input_ids=ids[:, :4], decoder_attention_mask=short)
    with torch.no_grad():  # the right shapes pass
        model(
            input_ids=ids, attention_mask=torch.ones(2, 9), decoder_input_ids=ids[:, :3], decoder_attention_mask=short
        )


@pytest.mark.parametrize(
    "ids, message",
    [
        (torch.tensor([[5000, 2]]), "token id 5000, outside the vocabulary of 300 tokens"),
        (torch.tensor([[-1, 2]]), "token id -1, outside the vocabulary of 300 tokens"),
        (torch.tensor([[7, 300, 2]]), "token id 300, outside the vocabulary of 300 tokens"),
        (torch.tensor([5, 2]), r"input_ids must be \(batch, length\)"),
    ],
)
def test_generate_refuses_ids_outside_the_vocabulary_and_ids_of_another_rank(ids, message, saved):
    assert saved["model"].config.vocab_size == 300
    with pytest.raises(SettingError, match=message):
        saved["model"].generate(input_ids=ids)
