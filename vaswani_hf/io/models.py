"""Model folders: checked cheaply before anything is loaded, then loaded strictly.

A folder written by `save_pretrained`: config.json, safetensors weights, tokenizer. A missing, truncated or broken
file is named in one line before anything is loaded. Loading is strict: every tensor the config's model needs is in
the weights, every tensor of the weights is used, and their shapes agree (transformers only logs a report and
initialises missing layers at random, which would translate with a dropped or random layer); the tokenizer's
vocabulary fits the model's; a config.json whose fields have the wrong type is named as such.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UsageError, one_line
from .text import read_json

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


def check_safetensors(path: str | os.PathLike) -> dict:
    """The header of a safetensors file, after checking that the file is as long as the header says (a truncated
    download or an interrupted copy is named here, not deep inside a loader). Raises UsageError."""
    p = Path(path)
    size = p.stat().st_size
    broken = f"{p}: truncated or corrupt safetensors weights"
    with open(p, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise UsageError(f"{broken} ({size} bytes); copy or save the model again")
        length = int.from_bytes(head, "little")
        if length <= 0 or 8 + length > size:
            raise UsageError(f"{broken} (header of {length} bytes in a file of {size}); copy or save the model again")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise UsageError(f"{broken} (unreadable header); copy or save the model again") from None
    end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    if 8 + length + end > size:
        raise UsageError(f"{broken} ({size} of {8 + length + end} bytes); copy or save the model again")
    return header


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return (len(parts) == 2 and all(parts) and not text.startswith((".", "/", "~"))
            and not Path(text).exists())


def check_model_folder(path: str | os.PathLike, *, what: str = "model folder", tokenizer: bool = True) -> Path | str:
    """A saved model folder, checked cheaply (nothing is loaded): config.json is valid JSON with a model_type, the
    safetensors weights are complete, and (with `tokenizer`) tokenizer.json is valid JSON. Returns the folder, or the
    text itself for a Hub id (`org/name`) that is not a local path: loading checks that one. Raises UsageError
    naming the missing or broken file."""
    if isinstance(path, str) and _looks_like_hub_id(path):
        return path
    folder = Path(path)
    if not folder.exists():
        raise UsageError(f"{what} not found: {folder}")
    if not folder.is_dir():
        raise UsageError(f"{what} {folder} is a file; give the folder that holds config.json")
    config = read_json(folder / "config.json", what=f"config.json of {what} {folder} (written by save_pretrained)")
    if not isinstance(config, dict) or "model_type" not in config:
        raise UsageError(f"{folder / 'config.json'}: no model_type; it is not a transformers model config")
    if (folder / WEIGHTS_INDEX).is_file():
        index = read_json(folder / WEIGHTS_INDEX)
        shards = sorted(set(index.get("weight_map", {}).values())) if isinstance(index, dict) else []
        for shard in shards:
            if not (folder / shard).is_file():
                raise UsageError(f"{folder / shard}: weight shard named by {WEIGHTS_INDEX} is missing")
            check_safetensors(folder / shard)
    elif (folder / WEIGHTS).is_file():
        check_safetensors(folder / WEIGHTS)
    else:
        pickled = " (pytorch_model.bin is not read: save with safetensors)" if \
            (folder / "pytorch_model.bin").exists() else ""
        raise UsageError(f"{folder}: no {WEIGHTS}{pickled}; give a folder written by save_pretrained")
    if tokenizer:
        if not (folder / "tokenizer.json").is_file():
            raise UsageError(f"{folder}: no tokenizer.json; save the tokenizer into the model folder "
                             "(tokenizer.save_pretrained(folder))")
        read_json(folder / "tokenizer.json", what="tokenizer.json")
    return folder


def load_model_folder(path: str | os.PathLike, *, device=None, dtype=None, trust_remote_code: bool = False,
                      what: str = "model folder", **model_kwargs):
    """(model in eval mode on `device`, tokenizer) from a checked model folder or a Hub id, through transformers'
    Auto classes (this package registers its classes when imported; `trust_remote_code` is for folders of models
    whose code is not installed), loaded strictly (see the module docstring). `dtype`: the weights' dtype
    (torch.dtype or None for float32)."""
    import torch
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    source = check_model_folder(path, what=what)
    where = f"{what} {source}" if isinstance(source, Path) else f"{what} {source} (not a local folder)"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source), trust_remote_code=trust_remote_code)
        model, report = AutoModelForSeq2SeqLM.from_pretrained(
            str(source), dtype=dtype or torch.float32, trust_remote_code=trust_remote_code, output_loading_info=True,
            **model_kwargs)
    except StrictDataclassError as error:  # a config.json field of the wrong type
        raise UsageError(f"{where}: config.json does not describe a model ({one_line(error)}); fix the file or "
                         "save the model again") from error
    except RuntimeError as error:  # transformers refuses tensors whose shapes differ from the config's
        if "mismatched" not in str(error) and "size" not in str(error):
            raise
        raise UsageError(f"{where}: the weights do not fit config.json (tensor shapes differ); the config and "
                         "model.safetensors come from different models: save the model again") from error
    except (OSError, ValueError, KeyError) as error:  # KeyError: a JSON file without the keys transformers needs
        raise UsageError(f"{where}: cannot be loaded ({one_line(error)})") from error
    check_loading_report(report, where)
    check_same_vocabulary(model, tokenizer)
    if device is not None:
        model = model.to(device)
    return model.eval(), tokenizer


def check_loading_report(report: dict, where: str) -> None:
    """Refuse a load that left tensors of the model uninitialised or tensors of the weights unused (a config.json
    with one layer fewer or more than the weights)."""
    for key, meaning in (("missing_keys", "missing from the weights (they would be random)"),
                         ("unexpected_keys", "in the weights but not in the model config.json describes"),
                         ("mismatched_keys", "of another shape than config.json says")):
        names = sorted(report.get(key) or [])
        if names:
            shown = ", ".join(str(n) for n in names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
            raise UsageError(f"{where}: config.json and the weights disagree: tensors {meaning}: {shown}; the config "
                             "and model.safetensors come from different models: save the model again")


# ---------------------------------------------------------------------------------------------------------------------
# One vocabulary for tokenizer and weights
# ---------------------------------------------------------------------------------------------------------------------
# The model has one embedding matrix shared by source, target and the pre-softmax projection (Section 3.4), indexed by
# the tokenizer's ids; training sizes it to the tokenizer (`vocab_size = len(tokenizer)`). A tokenizer of another size
# belongs to another model: its ids would select the wrong rows, or rows that do not exist, and the pair would
# translate garbage without an error. Every place that pairs a tokenizer with weights (loading, the exports, the
# upload) checks here, before any work. Sizes are read from the files; nothing is loaded for a folder with a
# tokenizer.json.


def tokenizer_size(tokenizer) -> int:
    """Number of tokens of a tokenizer object, or of the tokenizer saved in a folder (added tokens included, as
    `len(tokenizer)` counts them)."""
    if not isinstance(tokenizer, (str, os.PathLike)):
        return len(tokenizer)
    folder = Path(tokenizer)
    path = folder / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
        except Exception as error:  # noqa: BLE001 - the tokenizers library raises a plain Exception
            raise UsageError(f"{path}: not a tokenizer file ({' '.join(str(error).split())})") from error
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(folder)))


def model_vocab_size(model) -> int:
    """`vocab_size` of a model object (its config), or of the `config.json` in a model folder."""
    if not isinstance(model, (str, os.PathLike)):
        return int(model.config.vocab_size)
    path = Path(model) / "config.json"
    config = read_json(path, what="config.json")
    if not isinstance(config, dict) or not isinstance(config.get("vocab_size"), int):
        raise UsageError(f"{path}: no integer vocab_size")
    return config["vocab_size"]


def _label(source, what: str) -> str:
    return f"the {what} in {source}" if isinstance(source, (str, os.PathLike)) else f"the given {what}"


def check_same_vocabulary(model, tokenizer) -> None:
    """UsageError, in one line naming both (folders or "the given ...") and both sizes, unless the tokenizer has
    exactly as many tokens as the model's vocabulary. `model`: a model object or folder; `tokenizer`: a tokenizer
    object or folder."""
    tokens, rows = tokenizer_size(tokenizer), model_vocab_size(model)
    if tokens != rows:
        raise UsageError(f"{_label(tokenizer, 'tokenizer')} has {tokens} tokens but {_label(model, 'model')} has "
                         f"vocab_size {rows}: they are not one vocabulary; pair the model with the tokenizer it was "
                         "trained with")
