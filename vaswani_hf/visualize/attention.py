"""Get the attention weights of a seq2seq model: Section 3.2.3's three kinds, with h heads in each of N layers.

The weights come from one teacher-forced forward pass over (source, target) with `output_attentions=True`. The target
is a reference or the model's own greedy or beam translation (`model.generate`); in a forced pass, the decoder's
attention over its own translation is the attention it used while generating it, because the prefix, the weights and
the mode (dropout off) are the same. Only eager attention returns weights (sdpa does not), so `eager_attention(model)`
switches to it and afterwards restores the previous implementation and the train/eval mode. This works on any
`AutoModelForSeq2SeqLM` model (the package's classes or `trust_remote_code`), and the module imports nothing from
vaswani_hf (see the package docstring).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers.convert_slow_tokenizer import bytes_to_unicode

KINDS = ("encoder", "decoder", "cross")
KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention (masked)",
    "cross": "encoder-decoder attention",
}
START_LABEL = "<start>"

# A head's plot has tokens x tokens cells, so longer sentences would make huge figures that nobody can read.
MAX_PLOT_TOKENS = 200


@contextlib.contextmanager
def eager_attention(model) -> Iterator:
    """Run `model` in eval mode with the eager attention of Eq. (1), which returns its weights, and restore the
    previous implementation and mode afterwards.

    transformers 5 switches implementations in place with `PreTrainedModel.set_attn_implementation`, which updates the
    config of every sub-model; sdpa and flex attention compute the same output but return no weights."""
    previous = model.config._attn_implementation
    was_training = model.training
    if previous != "eager":
        model.set_attn_implementation("eager")
        if model.config._attn_implementation != "eager":
            raise RuntimeError(f"{type(model).__name__} could not switch to eager attention, which returns weights.")
    model.eval()
    try:
        yield model
    finally:
        if previous is not None and previous != "eager":
            model.set_attn_implementation(previous)
        model.train(was_training)


def _start_id(model) -> int:
    start = getattr(model.generation_config, "decoder_start_token_id", None)
    return model.config.decoder_start_token_id if start is None else start


def _pad_id(model, tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.pad_token_id


def _eos_id(model, tokenizer) -> int:
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else model.config.eos_token_id
    return eos[0] if isinstance(eos, (list, tuple)) else eos


def _cut_at_eos(ids: Sequence[int], eos: int) -> list[int]:
    ids = [int(i) for i in ids]
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def _pad_rows(rows: Sequence[Sequence[int]], pad: int, extra: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows) + extra
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[b, : len(row)] = 1
    return ids, mask


@torch.no_grad()
def batch_attentions(
    model,
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str] | Sequence[Sequence[int]] | None = None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    extra_padding: int = 0,
) -> dict:
    """Return the attention weights of a right-padded batch, from one teacher-forced forward pass.

    `targets` are reference sentences (tokenised with `text_target=`, with `</s>` appended if the tokenizer does not
    add it), target token ids (label ids, such as a previous translation), or None for the model's own translation by
    `model.generate`: greedy with `num_beams=1`, beam search with `num_beams` > 1, and as the model's
    `generation_config` says with None. `extra_padding` masked <pad> positions are appended to both sides.

    Returns a dict with input_ids and attention_mask (B, S), decoder_input_ids, decoder_attention_mask and labels
    (B, T), label_ids (per sentence, unpadded), and the weights "encoder" (L, B, H, S, S), "decoder" (L, B, H, T, T)
    and "cross" (L, B, H, T, S), as float32 on the CPU."""
    pad, eos, start = _pad_id(model, tokenizer), _eos_id(model, tokenizer), _start_id(model)
    source_rows = tokenizer(list(sources), add_special_tokens=True)["input_ids"]
    input_ids, attention_mask = _pad_rows(source_rows, pad, extra_padding)
    device = next(model.parameters()).device

    with eager_attention(model):
        if targets is None:
            unpadded, unpadded_mask = _pad_rows(source_rows, pad, 0)
            generated = model.generate(
                input_ids=unpadded.to(device),
                attention_mask=unpadded_mask.to(device),
                num_beams=num_beams or model.generation_config.num_beams or 1,
                do_sample=False,
                max_new_tokens=max_new_tokens,
            )
            # seq[0] is the start token, which is not a label.
            label_rows = [_cut_at_eos(seq[1:].tolist(), eos) for seq in generated]
        elif all(isinstance(t, str) for t in targets):
            label_rows = tokenizer(text_target=list(targets), add_special_tokens=True)["input_ids"]
            label_rows = [list(r) if r and r[-1] == eos else list(r) + [eos] for r in label_rows]
        else:
            label_rows = [[int(i) for i in t] for t in targets]
        if len(label_rows) != len(source_rows):
            raise ValueError(f"{len(source_rows)} sources but {len(label_rows)} targets")
        labels, decoder_attention_mask = _pad_rows(label_rows, pad, extra_padding)
        decoder_input_ids, _ = _pad_rows([[start] + r[:-1] for r in label_rows], pad, extra_padding)

        out = model(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            decoder_input_ids=decoder_input_ids.to(device),
            decoder_attention_mask=decoder_attention_mask.to(device),
            output_attentions=True,
            use_cache=False,
            return_dict=True,
        )
    weights = {}
    for kind, name in zip(KINDS, ("encoder_attentions", "decoder_attentions", "cross_attentions")):
        per_layer = getattr(out, name, None)
        if not per_layer or any(w is None for w in per_layer):
            raise RuntimeError(f"The model returned no {name}; it needs eager attention and output_attentions.")
        weights[kind] = torch.stack([w.detach().float().cpu() for w in per_layer])  # (L, B, H, Tq, Tk)
    return dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=decoder_input_ids,
        decoder_attention_mask=decoder_attention_mask,
        labels=labels,
        label_ids=label_rows,
        **weights,
    )


# GPT-2's byte-level alphabet inverted, from printable character to byte, to show the bytes of a partial character.
_BYTE_OF_CHAR = {char: byte for byte, char in bytes_to_unicode().items()}


def _token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Return a readable label for each subword token: its decoded text, with "▁" marking a word-initial token.

    A token is word-initial when it starts with byte-level "Ġ" or sentencepiece "▁". A byte-level token holding part
    of a multi-byte character shows the missing bytes escaped, e.g. "▁f\\xc3" + "\\xa4hr" for "▁fähr"."""
    labels = []
    for i, raw in zip(ids, tokenizer.convert_ids_to_tokens(list(ids))):
        text = tokenizer.decode([int(i)], skip_special_tokens=False, clean_up_tokenization_spaces=False).strip()
        if "\ufffd" in text and all(ch in _BYTE_OF_CHAR for ch in raw):  # Part of a multi-byte character.
            text = bytes(_BYTE_OF_CHAR[ch] for ch in raw).decode("utf-8", errors="backslashreplace").strip()
        if raw.startswith(("Ġ", "▁")):
            text = "▁" + text
        labels.append(text or raw)
    return labels


@dataclass
class Attentions:
    """Hold all the attention weights of one sentence pair, labelled with its tokens.

    The package docstring explains the axes and their labels."""

    source_tokens: list[str]  # The S tokens of the encoder's input, with </s>.
    target_tokens: list[str]  # The T tokens produced at the decoder's steps (y_1 ... </s>).
    decoder_input_tokens: list[str]  # The T tokens fed at the decoder's steps (<start>, y_1, ...).
    encoder: torch.Tensor  # (L_enc, H, S, S)
    decoder: torch.Tensor  # (L_dec, H, T, T)
    cross: torch.Tensor  # (L_dec, H, T, S)
    source_ids: list[int] = field(default_factory=list)
    target_ids: list[int] = field(default_factory=list)
    target_origin: str = "reference"  # Where the target came from: "reference", "greedy" or "beam-<k>".

    def weights(self, kind: str) -> torch.Tensor:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return getattr(self, kind)

    def axis_labels(self, kind: str) -> tuple[list[str], list[str]]:
        """Return the labels of `kind`'s matrices as (row labels, for the queries; column labels, for the keys)."""
        if kind == "encoder":
            return self.source_tokens, self.source_tokens
        if kind == "decoder":
            return self.target_tokens, self.decoder_input_tokens
        return self.target_tokens, self.source_tokens


def collect_attentions(
    model,
    tokenizer,
    source: str,
    target: str | Sequence[int] | None = None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
) -> Attentions:
    """Return the `Attentions` of one source sentence with a target, labelled with the tokens.

    The target is a reference `target` (text or label ids) or, if `target` is None, the model's own translation:
    greedy (`num_beams=1`), beam search, or by default as its `generation_config` says. `target_origin` records
    where the target came from."""
    batch = batch_attentions(
        model,
        tokenizer,
        [source],
        None if target is None else [target],
        num_beams=num_beams,
        max_new_tokens=max_new_tokens,
    )
    source_ids = batch["input_ids"][0].tolist()
    target_ids = batch["label_ids"][0]
    decoder_input_ids = batch["decoder_input_ids"][0].tolist()
    if target is not None:
        origin = "reference"
    else:
        beams = num_beams or model.generation_config.num_beams or 1
        origin = "greedy" if beams == 1 else f"beam-{beams}"
    return Attentions(
        source_tokens=_token_labels(tokenizer, source_ids),
        target_tokens=_token_labels(tokenizer, target_ids),
        decoder_input_tokens=[START_LABEL] + _token_labels(tokenizer, decoder_input_ids[1:]),
        encoder=batch["encoder"][:, 0],
        decoder=batch["decoder"][:, 0],
        cross=batch["cross"][:, 0],
        source_ids=source_ids,
        target_ids=target_ids,
        target_origin=origin,
    )
