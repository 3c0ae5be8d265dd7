"""vaswani_hf.io.files: every file the package reads has a declared shape, checked when it is read. Structure-aware
mutations of valid files (a wrong JSON type at every level, missing and extra fields, truncation, a header that lies
about its data) are refused in one line naming the file and the field, or accepted when the declaration allows them;
nothing reaches a library as a traceback."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from vaswani_hf.io import UsageError, binary_files, files
from vaswani_hf.io.binary_files import check_ctranslate2_folder, check_safetensors
from vaswani_hf.io.files import (
    CONFIG,
    TOKENIZER,
    TRAINER_STATE,
    check_tokenizer_file,
    read_json,
)

# one value of each JSON kind; a mutation puts each where another kind was
KINDS = {"null": None, "boolean": True, "integer": 7, "number": 0.5, "string": "x", "list": [], "object": {}}


def _kind(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"  # an integer is a number; a number is an integer only if it is one (checked separately)
    return {type(None): "null", str: "string", list: "list", dict: "object"}[type(value)]


def _paths(value, prefix=()):
    """Every (path, value) of a JSON document, the root included."""
    yield prefix, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, (*prefix, key))


def _set(document, path, value):
    if not path:
        return value
    copy = json.loads(json.dumps(document))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


def _dotted(path) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text


def _write(path: Path, document) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _one_line_naming(error: UsageError, path: Path, field: str) -> None:
    message = str(error)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    if field:
        assert f"field {field} " in message, message


TRAINER_STATE_SAMPLE = {
    "global_step": 4,
    "epoch": 1.0,
    "max_steps": 4,
    "log_history": [{"loss": 1.5, "step": 2}],
    "best_metric": None,
    "stateful_callbacks": {"TrainerControl": {"args": {}}},
    "train_batch_size": 8,
    "is_world_process_zero": True,
}
# fields whose declared kind is fixed (not nullable), so any other kind must be refused, naming them
TRAINER_STATE_TYPED = {"global_step", "epoch", "max_steps", "log_history", "log_history[0]", "is_world_process_zero"}


def _vaswani_config() -> dict:
    from vaswani_hf import VaswaniConfig

    return VaswaniConfig(
        vocab_size=50, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1
    ).to_dict()


CONFIG_TYPED = {
    "vocab_size",
    "d_model",
    "d_ff",
    "num_heads",
    "num_encoder_layers",
    "num_decoder_layers",
    "position_encoding",
    "sinusoid_layout",
    "attention_bias",
    "layer_norm_eps",
    "scale_embedding",
    "tie_word_embeddings",
    "max_position_embeddings",
    "dropout",
    "model_type",
}


@pytest.mark.parametrize(
    "shape, sample, typed",
    [
        (TRAINER_STATE, TRAINER_STATE_SAMPLE, TRAINER_STATE_TYPED),
        (CONFIG, "vaswani", CONFIG_TYPED),
    ],
    ids=["trainer_state", "config"],
)
def test_a_wrong_json_kind_at_every_level_is_named(shape, sample, typed, tmp_path):
    sample = json.loads(json.dumps(_vaswani_config() if sample == "vaswani" else sample))  # keys as in the file
    path = tmp_path / "file.json"
    read_json(_write(path, sample), shape)  # the valid file passes
    refused = 0
    for where, original in list(_paths(sample)):
        for value in KINDS.values():
            if _kind(value) == _kind(original):
                continue
            mutated = _set(sample, where, value)
            field = _dotted(where)
            try:
                read_json(_write(path, mutated), shape)
            except UsageError as error:
                refused += 1
                if not where:
                    assert "the file must be an object" in str(error)
                else:  # the field named is the mutated one or the one holding it
                    assert any(f"field {_dotted(where[:n])} " in str(error) for n in range(1, len(where) + 1)), (
                        field,
                        str(error),
                    )
                _one_line_naming(error, path, "")
                continue
            assert field not in typed, f"{field} = {value!r} accepted"
    assert refused > len(typed)


@pytest.mark.parametrize(
    "shape, sample, field",
    [
        (TRAINER_STATE, {"epoch": 1.0}, "global_step"),
        (CONFIG, {"d_model": 16}, "model_type"),
        (TOKENIZER, {"version": "1.0"}, "model"),
    ],
)
def test_a_missing_required_field_is_named(shape, sample, field, tmp_path):
    path = _write(tmp_path / "file.json", sample)
    with pytest.raises(UsageError, match=rf"file\.json: (not a tokenizer file: )?field {field} is missing; ") as error:
        read_json(path, shape)
    _one_line_naming(error.value, path, field)


def test_extra_fields_follow_the_declaration(tmp_path):
    """transformers' TrainerState refuses an unknown field when resuming: it is named here instead; a config.json may
    carry any extra field (transformers keeps them as attributes)."""
    path = _write(tmp_path / "trainer_state.json", {**TRAINER_STATE_SAMPLE, "surprise": 1})
    with pytest.raises(UsageError, match=r"field surprise is not a known field"):
        read_json(path, TRAINER_STATE)
    read_json(_write(tmp_path / "config.json", {**_vaswani_config(), "surprise": [1]}), CONFIG)


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("layer_norm_eps", float("nan"), "must be a finite number"),
        ("d_model", 16.5, "must be an integer"),
        ("d_model", True, "must be an integer"),
        ("eos_token_id", [2, "x"], "must be a token id"),
        ("d_model", -4, r"d_model must be an integer in \[1, 65,536\], got an integer -4"),
        ("custom_pipelines", [], "must be an object"),
    ],
)
def test_config_fields_have_vaswani_configs_declarations(field, value, problem, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**_vaswani_config(), field: value}), encoding="utf-8")  # json writes NaN as NaN
    expected = problem if "[" in problem else f"{field} {problem}"
    with pytest.raises(UsageError, match=rf"config\.json: field {expected}"):
        read_json(path, CONFIG)


# ---------------------------------------------------------------------------------------------------------------------
# tokenizer.json: valid JSON is not yet a tokenizer
# ---------------------------------------------------------------------------------------------------------------------


def _tokenizer(tmp_path) -> Path:
    from tokenizers import Tokenizer, models

    path = tmp_path / "tokenizer.json"
    path.write_text(Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")).to_str(), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "document, expected",
    [
        ({}, "field model is missing"),
        ([], "not a tokenizer file: the file must be an object"),
        ("tokenizer", "not a tokenizer file: the file must be an object"),
        ({"model": []}, "field model must be an object"),
        ({"model": {"type": 3}}, "field model.type must be a string"),
        ({"model": {"type": "WordLevel", "vocab": {"a": "zero"}}}, "field model.vocab.a must be an integer"),
        (
            {"model": {"type": "WordLevel", "vocab": {}}, "added_tokens": [{"id": -1, "content": "x"}]},
            r"field added_tokens\[0\].id must be an integer >= 0",
        ),
        ({"model": {"type": "NoSuchModel"}}, "not a tokenizer file"),  # the right shape, refused by the library
    ],
)
def test_a_tokenizer_json_that_is_no_tokenizer_is_named(document, expected, tmp_path):
    from vaswani_hf.tokenization import load_tokenizer

    check_tokenizer_file(_tokenizer(tmp_path))
    path = _write(tmp_path / "tokenizer.json", document)
    with pytest.raises(UsageError, match=expected) as error:
        check_tokenizer_file(path)
    _one_line_naming(error.value, path, "")
    with pytest.raises(UsageError, match=r"tokenizer\.json"):  # also where a training run loads its tokenizer
        load_tokenizer(tmp_path)


# ---------------------------------------------------------------------------------------------------------------------
# safetensors: the header against the bytes
# ---------------------------------------------------------------------------------------------------------------------


def _safetensors(tmp_path) -> Path:
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file(
        {
            "f": torch.ones(3, 4),
            "h": torch.zeros(5, dtype=torch.float16),
            "b": torch.ones(2, dtype=torch.bool),
            "i": torch.arange(3),
            "bf": torch.zeros(2, 2, dtype=torch.bfloat16),
            "empty": torch.zeros(0, 3),
            "scalar": torch.tensor(1.0),
        },
        str(path),
        metadata={"format": "pt"},
    )
    return path


def _rewrite_header(path: Path, change) -> Path:
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    changed = change(header)
    header = header if changed is None else changed
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + length :])
    return path


def _first_tensor(header) -> dict:
    return header[sorted(k for k in header if k != "__metadata__")[0]]


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda h: [], "not a safetensors header: the file must be an object"),
        (lambda h: "weights", "the file must be an object"),
        (lambda h: _first_tensor(h).pop("dtype") and None, "dtype is missing"),
        (lambda h: _first_tensor(h).update(dtype="F128"), "dtype must be one of"),
        (lambda h: _first_tensor(h).update(shape=[-1, 4]), r"shape\[0\] must be an integer >= 0"),
        (lambda h: _first_tensor(h).update(shape="3x4"), "shape must be a list"),
        (lambda h: _first_tensor(h).update(data_offsets=[0]), "data_offsets must be a list of 2 items"),
        (lambda h: _first_tensor(h).update(extra=1), "is not a known field"),
        (lambda h: h.update(__metadata__={"format": 1}), r"field __metadata__.format must be a string"),
        # the header lies about its data
        (lambda h: h["f"].update(shape=[4, 4]), "tensor f: data_offsets .* disagree with its shape"),
        (lambda h: h["f"].update(dtype="F64"), "tensor f: data_offsets .* disagree with its shape"),
        (lambda h: h["h"].update(dtype="F32", shape=[5]), "disagree with its shape"),
        (
            lambda h: h["i"].update(data_offsets=[h["i"]["data_offsets"][0] + 8, h["i"]["data_offsets"][1] + 8]),
            "tensor i starts at byte .* (gap|overlap)|tensors overlap|leave a gap",
        ),
        (
            lambda h: h["f"].update(data_offsets=[h["f"]["data_offsets"][1], h["f"]["data_offsets"][0]]),
            "disagree with its shape",
        ),
    ],
)
def test_a_safetensors_header_of_the_wrong_shape_or_lying_is_named(change, expected, tmp_path):
    path = _safetensors(tmp_path)
    assert set(check_safetensors(path)) >= {"f", "h", "b", "i", "bf", "empty", "scalar"}
    _rewrite_header(path, change)
    with pytest.raises(UsageError, match=expected) as error:
        check_safetensors(path)
    _one_line_naming(error.value, path, "")


def test_a_safetensors_file_cut_anywhere_or_grown_is_named(tmp_path):
    path = _safetensors(tmp_path)
    data = path.read_bytes()
    for cut in sorted({0, 3, 7, 8, 9, 20, len(data) // 2, len(data) - 9, len(data) - 1}):
        path.write_bytes(data[:cut])
        with pytest.raises(UsageError, match="truncated or corrupt safetensors weights") as error:
            check_safetensors(path)
        _one_line_naming(error.value, path, "")
    path.write_bytes(data + b"\0" * 4)  # bytes no tensor describes
    with pytest.raises(UsageError, match="the header describes"):
        check_safetensors(path)
    path.write_bytes((len(data) * 2).to_bytes(8, "little") + data[8:])  # a header length larger than the file
    with pytest.raises(UsageError, match="header of .* bytes in a file of"):
        check_safetensors(path)


# ---------------------------------------------------------------------------------------------------------------------
# CTranslate2 folders
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ct2_export(tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from hub_helpers import make_tiny_model

    from vaswani_hf.export.ctranslate2_spec import to_ctranslate2

    torch.set_num_threads(1)
    model, tokenizer = make_tiny_model()
    return to_ctranslate2(model, tmp_path_factory.mktemp("ct2") / "export", tokenizer=tokenizer)


def test_a_real_export_passes_and_a_cut_model_bin_is_named(ct2_export, tmp_path):
    import shutil

    assert check_ctranslate2_folder(ct2_export) == ct2_export
    folder = Path(shutil.copytree(ct2_export, tmp_path / "ct2"))
    data = (folder / "model.bin").read_bytes()
    for cut in (0, 2, 4, 12, 40, len(data) // 3, len(data) // 2, len(data) - 5, len(data) - 1):
        (folder / "model.bin").write_bytes(data[:cut])
        with pytest.raises(
            UsageError, match=r"model\.bin: (truncated or corrupt|not a CTranslate2 model file)"
        ) as error:
            check_ctranslate2_folder(folder)
        _one_line_naming(error.value, folder / "model.bin", "")


def _tiny_model_bin(path: Path, num_bytes: int | None = None) -> Path:
    """CTranslate2's binary layout (version 6) with one float32 variable of shape [2, 3]."""

    def string(text: str) -> bytes:
        return struct.pack("<H", len(text) + 1) + text.encode() + b"\0"

    body = struct.pack("<I", 6) + string("TransformerSpec") + struct.pack("<II", 1, 1)
    body += string("w") + struct.pack("<B", 2) + struct.pack("<II", 2, 3) + struct.pack("<B", 0)
    body += struct.pack("<I", 24 if num_bytes is None else num_bytes) + b"\0" * 24 + struct.pack("<I", 0)
    path.write_bytes(body)
    return path


@pytest.mark.parametrize(
    "breakage, expected",
    [
        (lambda f: _tiny_model_bin(f / "model.bin", num_bytes=20), "variable w: 20 bytes disagree with its shape"),
        (lambda f: (f / "model.bin").unlink(), "is not a CTranslate2 model folder"),
        (lambda f: (f / "config.json").unlink(), "config.json of CTranslate2 model folder .* not found"),
        (lambda f: _write(f / "config.json", []), r"config\.json: not a CTranslate2 config\.json"),
        (lambda f: _write(f / "config.json", {"add_source_eos": "no"}), "field add_source_eos must be a boolean"),
        (lambda f: (f / "shared_vocabulary.json").unlink(), "vocabulary of CTranslate2 model folder .* not found"),
        (lambda f: _write(f / "shared_vocabulary.json", {"a": 0}), "not a CTranslate2 vocabulary"),
        (lambda f: _write(f / "shared_vocabulary.json", ["a", 1]), r"field \[1\] must be a string"),
        (lambda f: _write(f / "shared_vocabulary.json", []), "an empty vocabulary"),
        (lambda f: _write(f / "vaswani_ctranslate2.json", {"max_positions": "24"}), "field max_positions must be"),
    ],
)
def test_a_broken_ctranslate2_folder_is_named(breakage, expected, tmp_path):
    folder = tmp_path / "ct2"
    folder.mkdir()
    _tiny_model_bin(folder / "model.bin")
    _write(folder / "config.json", {"add_source_eos": False, "unk_token": "<unk>"})
    _write(folder / "shared_vocabulary.json", ["<unk>", "a"])
    check_ctranslate2_folder(folder)
    breakage(folder)
    with pytest.raises(UsageError, match=expected) as error:
        check_ctranslate2_folder(folder)
    assert "\n" not in str(error.value)


def test_the_translator_checks_its_folder_first(tmp_path):
    pytest.importorskip("ctranslate2")
    from vaswani_hf.export.ctranslate2 import CTranslate2Translator

    folder = tmp_path / "ct2"
    folder.mkdir()
    _tiny_model_bin(folder / "model.bin", num_bytes=20)
    with pytest.raises(UsageError, match=r"model\.bin: truncated or corrupt \(variable w"):
        CTranslate2Translator(folder)


def test_every_declared_file_shape_is_exported():
    declared = [
        name
        for module in (files, binary_files)
        for name in module.__all__
        if isinstance(getattr(module, name), files.FileShape)
    ]
    assert {
        "CONFIG",
        "TRAINER_STATE",
        "TOKENIZER",
        "SAFETENSORS_HEADER",
        "CT2_CONFIG",
        "CT2_METADATA",
        "GENERATION_CONFIG",
    } <= set(declared)
