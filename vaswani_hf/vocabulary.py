"""One vocabulary for tokenizer and weights: every place that pairs a tokenizer with a model's weights (the
CTranslate2 export, the Marian export, the upload) checks here, before any work, that they describe the same
vocabulary.

The model has one embedding matrix shared by source, target and the pre-softmax projection (Section 3.4), indexed by
the tokenizer's ids; training sizes it to the tokenizer (`vocab_size = len(tokenizer)`). A tokenizer of another size
belongs to another model: its ids would select the wrong rows, or rows that do not exist, and the pair would
translate garbage without an error. Sizes are read from the files (`config.json`, `tokenizer.json`); nothing is
loaded for a folder that has a `tokenizer.json`.
"""

from __future__ import annotations

import os
from pathlib import Path

from .io import UsageError, read_json

__all__ = ["tokenizer_size", "model_vocab_size", "check_same_vocabulary"]


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
