"""Relabel the Marian export's token ids so that `<pad>` is the LAST id, as in OPUS-MT and Marian C++.

Our vocabulary puts `<pad>` first (id 0, whose embedding is the decoder's zero start vector). Marian C++ and the
OPUS-MT models converted to transformers put it last, and the tools of that tool chain rely on it: CTranslate2's own
converter (`ct2-transformers-converter`, its Marian loader) drops the last vocabulary entry and the last embedding row,
because it starts the decoder from a zero vector by itself. An export with `<pad>` = 0 fails there ("Source
vocabulary 0 has size V but the model expected a vocabulary of size V - 1").

So the export relabels the vocabulary with the rotation that moves `<pad>` to the end and keeps every other token in
order: id i becomes (i - pad - 1) mod V, so that for `<pad>` = 0 every token moves down by one and `<pad>` becomes
V - 1. The embedding rows, the output projection and its bias, the special ids of the config and generation config,
and the tokenizer (`tokenizer.json` and the files beside it) are relabelled together, so the exported model computes
the same function on the same text: its logits are ours with the last axis permuted. This is written here because no
library relabels a model together with its tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import MarianMTModel

from ..io import UsageError, read_json


def pad_last_order(vocab_size: int, pad_token_id: int) -> list[int]:
    """Return `new_of_old`, the Marian id of each of our ids, with `<pad>` last and every other token in order."""
    return [(i - pad_token_id - 1) % vocab_size for i in range(vocab_size)]


def _relabel_id(value, new_of_old: list[int]):
    if isinstance(value, int):
        return new_of_old[value]
    if isinstance(value, list):
        return [_relabel_id(v, new_of_old) for v in value]
    return value  # Anything else, such as None, is kept.


@torch.no_grad()
def move_pad_last(marian: MarianMTModel) -> list[int]:
    """Relabel `marian` (from `to_marian`) in place so that `<pad>` is its last id, and return `new_of_old`.

    The rows of the embeddings and of the output projection (one shared matrix, or three with
    `tie_word_embeddings=False`), the columns of `final_logits_bias`, and the special ids of the config and
    generation config are permuted together: the relabelled model's logit at Marian id `new_of_old[i]` is the
    original's at id i."""
    config = marian.config
    new_of_old = pad_last_order(config.vocab_size, config.pad_token_id)
    old_of_new = torch.empty(config.vocab_size, dtype=torch.long)
    old_of_new[torch.tensor(new_of_old)] = torch.arange(config.vocab_size)
    embeddings = [marian.model.encoder.embed_tokens, marian.model.decoder.embed_tokens, marian.lm_head]
    # Untied models (share_encoder_decoder_embeddings=False) have three separate matrices and no `shared`.
    if getattr(marian.model, "shared", None) is not None:
        embeddings.append(marian.model.shared)
    weights = {id(module.weight): module.weight for module in embeddings}
    for weight in weights.values():  # Tied weights are one tensor, so each tensor is permuted once.
        weight.copy_(weight[old_of_new.to(weight.device)])
    bias = marian.final_logits_bias
    bias.copy_(bias[:, old_of_new.to(bias.device)])
    for settings in (config, marian.generation_config):
        for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            setattr(settings, key, _relabel_id(getattr(settings, key, None), new_of_old))
    return new_of_old


def _relabel_post_processor(processor: dict | None, new_of_old: list[int]) -> None:
    """Relabel the ids a post-processor inserts: TemplateProcessing's `special_tokens`, the `sep` and `cls` of Bert's
    and Roberta's, and those of each processor of a Sequence."""
    if not processor:
        return
    for inner in processor.get("processors") or []:
        _relabel_post_processor(inner, new_of_old)
    for entry in (processor.get("special_tokens") or {}).values():
        entry["ids"] = [new_of_old[i] for i in entry["ids"]]
    for key in ("sep", "cls"):
        if isinstance(processor.get(key), list):
            processor[key] = [processor[key][0], new_of_old[processor[key][1]]]


def relabel_tokenizer_json(spec: dict, new_of_old: list[int], where: Path) -> dict:
    """Return a `tokenizers` JSON spec with every id relabelled.

    The ids relabelled are those of the model's vocabulary (a map from token to id for BPE, WordPiece and WordLevel,
    or a list in id order for Unigram), of the added tokens and of the post-processor."""
    model = spec["model"]
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        model["vocab"] = {token: new_of_old[i] for token, i in vocab.items()}
    elif isinstance(vocab, list) and model.get("type") == "Unigram":
        reordered = [None] * len(vocab)
        for i, entry in enumerate(vocab):
            reordered[new_of_old[i]] = entry
        model["vocab"] = reordered
        if model.get("unk_id") is not None:
            model["unk_id"] = new_of_old[model["unk_id"]]
    else:
        raise UsageError(
            f"{where}: tokenizer model {model.get('type')!r} has no vocabulary this export can reorder; "
            "export a model whose tokenizer.json is BPE, WordPiece, WordLevel or Unigram"
        )
    for added in spec.get("added_tokens") or []:
        added["id"] = new_of_old[added["id"]]
    _relabel_post_processor(spec.get("post_processor"), new_of_old)
    return spec


def relabel_tokenizer_files(folder: Path, new_of_old: list[int]) -> None:
    """Relabel the tokenizer files copied into `folder` in place (`tokenizer.json`, and the ids that
    `tokenizer_config.json` and `added_tokens.json` may hold)."""

    def write(path: Path, data: dict) -> None:
        path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")

    path = folder / "tokenizer.json"
    write(path, relabel_tokenizer_json(read_json(path), new_of_old, path))
    settings = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    if isinstance(settings.get("added_tokens_decoder"), dict):
        write(
            folder / "tokenizer_config.json",
            {
                **settings,
                "added_tokens_decoder": {
                    str(new_of_old[int(i)]): token for i, token in settings["added_tokens_decoder"].items()
                },
            },
        )
    if (folder / "added_tokens.json").is_file():
        write(
            folder / "added_tokens.json",
            {token: new_of_old[i] for token, i in read_json(folder / "added_tokens.json").items()},
        )


def check_relabelled_tokenizer(original, relabelled, new_of_old: list[int], folder: Path) -> None:
    """Check that the relabelled tokenizer agrees with the relabelled weights, and raise a UsageError if not.

    It must map every token to `new_of_old` of its old id and encode a sample text to the relabelled ids. Failing here
    is better than shipping a tokenizer that disagrees with the weights.
    """
    expected = {token: new_of_old[i] for token, i in original.get_vocab().items()}
    sample = "a b ."
    encoded = [new_of_old[i] for i in original(sample)["input_ids"]]
    if relabelled.get_vocab() != expected or relabelled(sample)["input_ids"] != encoded:
        raise UsageError(
            f"{folder}: the tokenizer could not be relabelled to the Marian order (<pad> last); "
            "report this with the model folder's tokenizer.json"
        )
