"""The Marian export's token order: `<pad>` is the LAST id, as in OPUS-MT and Marian C++.

Our `<pad>` is id 0; CTranslate2's Marian converter drops the last vocabulary entry. The export relabels id i ->
(i - pad - 1) mod V, the others keeping their order, in the weights, special ids and tokenizer files together, so the
exported model's logits are ours with the last axis permuted. No library relabels a model with its tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import MarianMTModel

from ..io import UsageError, read_json


def pad_last_order(vocab_size: int, pad_token_id: int) -> list[int]:
    """`new_of_old`: the Marian id of each of our ids, with `<pad>` last and every other token in order."""
    return [(i - pad_token_id - 1) % vocab_size for i in range(vocab_size)]


def _relabel_id(value, new_of_old: list[int]):
    if isinstance(value, int):
        return new_of_old[value]
    if isinstance(value, list):
        return [_relabel_id(v, new_of_old) for v in value]
    return value  # None


@torch.no_grad()
def move_pad_last(marian: MarianMTModel) -> list[int]:
    """Relabel `marian` (from `to_marian`) in place so that `<pad>` is its last id: embeddings, projection,
    `final_logits_bias` and special ids permuted together. Returns `new_of_old`."""
    config = marian.config
    new_of_old = pad_last_order(config.vocab_size, config.pad_token_id)
    old_of_new = torch.empty(config.vocab_size, dtype=torch.long)
    old_of_new[torch.tensor(new_of_old)] = torch.arange(config.vocab_size)
    embeddings = [marian.model.encoder.embed_tokens, marian.model.decoder.embed_tokens, marian.lm_head]
    if getattr(marian.model, "shared", None) is not None:  # untied models (share_encoder_decoder_embeddings=False)
        embeddings.append(marian.model.shared)  # have three separate matrices and no `shared`
    weights = {id(module.weight): module.weight for module in embeddings}
    for weight in weights.values():  # tied weights are one tensor: permute each tensor once
        weight.copy_(weight[old_of_new.to(weight.device)])
    bias = marian.final_logits_bias
    bias.copy_(bias[:, old_of_new.to(bias.device)])
    for settings in (config, marian.generation_config):
        for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            setattr(settings, key, _relabel_id(getattr(settings, key, None), new_of_old))
    return new_of_old


def _relabel_post_processor(processor: dict | None, new_of_old: list[int]) -> None:
    """The ids a post-processor inserts: TemplateProcessing's `special_tokens`, Bert / Roberta's `sep` and `cls`,
    each processor of a Sequence."""
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
    """A `tokenizers` JSON spec with every id relabelled: the model's vocabulary (a token -> id map for BPE,
    WordPiece and WordLevel; a list in id order for Unigram), the added tokens and the post-processor."""
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
    """The relabelled tokenizer maps every token to `new_of_old` of its id and encodes text alike: fail here rather
    than ship a tokenizer that disagrees with the weights."""
    expected = {token: new_of_old[i] for token, i in original.get_vocab().items()}
    sample = "a b ."
    encoded = [new_of_old[i] for i in original(sample)["input_ids"]]
    if relabelled.get_vocab() != expected or relabelled(sample)["input_ids"] != encoded:
        raise UsageError(
            f"{folder}: the tokenizer could not be relabelled to the Marian order (<pad> last); "
            "report this with the model folder's tokenizer.json"
        )
