"""vaswani_hf.io.models: model folders checked cheaply before loading, and loaded strictly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vaswani_hf import io
from vaswani_hf.io import (
    UsageError,
    check_model_folder,
    check_safetensors,
)

# ---------------------------------------------------------------------------------------------------------------------
# Model folders
# ---------------------------------------------------------------------------------------------------------------------


def _weights(path: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.arange(64, dtype=torch.float32), "b": torch.zeros(3)}, str(path))
    return path


def _model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "vaswani", "d_model": 32}, indent=2))
    _weights(folder / "model.safetensors")
    (folder / "tokenizer.json").write_text(_tokenizer_json())
    return folder


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, models

    return Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")).to_str()


def test_check_safetensors(tmp_path):
    path = _weights(tmp_path / "w.safetensors")
    header = check_safetensors(path)
    assert set(header) >= {"w", "b"} and header["w"]["shape"] == [64]
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) - 200, 100, 9, 4, 0):
        broken = tmp_path / f"cut{cut}.safetensors"
        broken.write_bytes(data[:cut])
        with pytest.raises(UsageError) as error:
            check_safetensors(broken)
        assert str(error.value).startswith(f"{broken}: truncated or corrupt safetensors weights"), cut
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes((20).to_bytes(8, "little") + b"\xff" * 30)
    with pytest.raises(UsageError, match=r"garbage\.safetensors: truncated or corrupt .*unreadable header"):
        check_safetensors(garbage)


def test_check_model_folder(tmp_path):
    folder = _model_folder(tmp_path)
    assert check_model_folder(folder) == folder
    assert check_model_folder(str(folder)) == folder
    assert check_model_folder("some-org/some-model") == "some-org/some-model"  # a Hub id: checked when loaded

    with pytest.raises(UsageError, match=r"^--model not found: .*absent$"):
        check_model_folder(tmp_path / "absent", what="--model")
    with pytest.raises(UsageError, match=r"^model folder .*config\.json is a file; give the folder"):
        check_model_folder(folder / "config.json")

    (folder / "tokenizer.json").unlink()
    with pytest.raises(UsageError, match=r"model: no tokenizer\.json; save the tokenizer into the model folder"):
        check_model_folder(folder)
    assert check_model_folder(folder, tokenizer=False) == folder
    (folder / "tokenizer.json").write_text("{\n")
    with pytest.raises(UsageError, match=r"tokenizer\.json:2: invalid JSON"):
        check_model_folder(folder)
    (folder / "tokenizer.json").write_text("{}")  # valid JSON, but no tokenizer
    with pytest.raises(UsageError, match=r"tokenizer\.json: not a tokenizer file: field model is missing"):
        check_model_folder(folder)
    (folder / "tokenizer.json").write_text(_tokenizer_json())

    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:-10])
    with pytest.raises(UsageError, match=r"model\.safetensors: truncated or corrupt"):
        check_model_folder(folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(UsageError, match=r"no model\.safetensors \(pytorch_model\.bin is not read"):
        check_model_folder(folder)
    _weights(folder / "model.safetensors")

    (folder / "config.json").write_text('{\n  "model_type": "vaswani",\n  "d_model": 32,\n}\n')
    with pytest.raises(UsageError) as error:
        check_model_folder(folder)
    assert str(error.value).startswith(f"{folder / 'config.json'}:4: invalid JSON")
    (folder / "config.json").write_text('{"d_model": 32}')
    with pytest.raises(UsageError, match=r"config\.json: field model_type is missing"):
        check_model_folder(folder)
    (folder / "config.json").unlink()
    with pytest.raises(UsageError, match=r"config\.json of model folder .* not found"):
        check_model_folder(folder)


def test_check_model_folder_sharded_weights(tmp_path):
    folder = _model_folder(tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"w": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        UsageError, match=r"names the weight shard 'model-00002-of-00002\.safetensors', which is no file"
    ):
        check_model_folder(folder)
    _weights(folder / "model-00002-of-00002.safetensors")
    assert check_model_folder(folder) == folder
    index["weight_map"]["b"] = "../model-00002-of-00002.safetensors"  # a shard elsewhere is not this folder's
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(UsageError, match=r"names the weight shard '\.\./model-00002-of-00002\.safetensors'"):
        check_model_folder(folder)


def test_load_model_folder_names_the_folder(tmp_path):
    """A folder that passes the cheap check but does not load is still one UsageError naming it (here weights that
    are not the model's config.json describes); a tokenizer.json that is JSON but no tokenizer is refused by the
    cheap check, naming the file, before transformers reads it."""
    folder = _model_folder(tmp_path)
    with pytest.raises(UsageError, match=r"^--model .*model: config\.json and the weights disagree"):
        io.load_model_folder(folder, what="--model")
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": []}))
    with pytest.raises(UsageError, match=r"tokenizer\.json: not a tokenizer file: field model must be an object"):
        io.load_model_folder(folder, what="--model")


def test_declared_files_take_only_declared_files_and_the_code_config_json_needs(tmp_path, caplog):
    """One declared list for every copy: a code file no config.json entry reaches, and junk, are left out and named in
    one line; a referenced code file and its relative imports are taken. A declared name that is a symbolic link to a
    file (as in a Hub-cache snapshot) stands for that file and is copied as a file; one that links to nothing or to a
    folder is refused, naming what it is (left out, the copy would silently lack the file)."""
    import json
    import logging

    from vaswani_hf.io.models import copy_model_files, declared_files

    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir(), target.mkdir()
    (source / "config.json").write_text(
        json.dumps(
            {
                "model_type": "vaswani",
                "auto_map": {"AutoModelForSeq2SeqLM": "modeling_vaswani.VaswaniForConditionalGeneration"},
            }
        )
    )
    (source / "modeling_vaswani.py").write_text("from .generation_vaswani import X\n")
    (source / "generation_vaswani.py").write_text("X = 1\n")
    (source / "stray.py").write_text("TOKEN = 'hf_x'\n")
    (source / "secret").write_text("do not copy")
    (source / "README.md").write_text("card")
    assert declared_files(source) == (
        ["README.md", "config.json", "generation_vaswani.py", "modeling_vaswani.py"],
        ["secret", "stray.py"],
    )
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.io.models"):
        copied = copy_model_files(source, target)
    assert (
        copied
        == sorted(p.name for p in target.iterdir())
        == ["config.json", "generation_vaswani.py", "modeling_vaswani.py"]
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"{source}: left out 2 file(s) that are not a model folder's declared files: secret, stray.py"
    ]
    (tmp_path / "blob").write_text("{}")
    (source / "generation_config.json").symlink_to(tmp_path / "blob")
    assert "generation_config.json" in declared_files(source)[0]
    copy_model_files(source, target, only=["generation_config.json"])
    assert not (target / "generation_config.json").is_symlink()
    assert (target / "generation_config.json").read_text() == "{}"
    for points_at, kind in (
        (tmp_path / "nothing", "a symbolic link to nothing"),
        (tmp_path, "a symbolic link to a folder"),
    ):
        (source / "tokenizer.json").unlink(missing_ok=True)
        (source / "tokenizer.json").symlink_to(points_at)
        with pytest.raises(UsageError, match=f"tokenizer.json is {kind}, not a file"):
            declared_files(source)
