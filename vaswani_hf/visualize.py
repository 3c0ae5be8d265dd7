"""Attention visualisation and attention diagnostics for the Transformer (Vaswani et al., 2017).

The model has three kinds of attention (Section 3.2.3), each with h heads in each of N layers:

* "encoder": encoder self-attention, source -> source, (S, S) per head;
* "decoder": masked decoder self-attention, target -> earlier target, (T, T) per head, zero above the diagonal;
* "cross":   encoder-decoder attention, target -> source, (T, S) per head.

Each matrix is the softmax(Q K^T / sqrt(d_k)) of Eq. (1): one row per query, summing to 1 over the keys it may see.
The paper's Figures 3-5 draw rows of encoder self-attention in layer 5 of 6 for one sentence ("It is in this spirit
that a majority of American governments have passed new laws since 2009 making the registration or voting process
more difficult."): long-distance dependencies ("making ... more difficult") and heads that learned different tasks.
This module draws the same matrices as heatmaps labelled with the subword tokens, for any model loaded through
`AutoModelForSeq2SeqLM` (the package classes or `trust_remote_code=True`): it uses only the model's forward pass
with `output_attentions=True` and `generate`, never the package's classes, and imports nothing from `vaswani_hf`.

Weights come from one teacher-forced forward pass over (source, target). The target is either a reference or the
model's own greedy / beam translation (`model.generate`); the decoder's attention over its own translation in a
forced pass is the attention it used while generating it (same prefix, same weights, dropout off).
Labels: rows of "decoder" and "cross" are the tokens *produced* at each step (y_1 ... </s>); the columns of "decoder"
are the tokens *fed* at each step (<start>, y_1, ...), so row i sees columns 0..i. The decoder's start token is
<pad> (id 0, tensor2tensor's zero start vector); it is labelled "<start>" because it is not padding.

Only the eager attention returns weights (sdpa does not); `eager_attention(model)` switches to it and restores the
previous implementation and train/eval mode afterwards.

Diagnostics, computed from the weights (`attention_diagnostics`, `alignment_share`):

* per-head entropy H = -sum_k p_k log p_k of each attention row (nats), averaged over the real query rows; also
  normalised by log(number of keys the row may see), so 1 means uniform attention (a head that learned nothing or
  a broken scaling) and 0 a one-hot row. Rows that see a single key (the decoder's first step) are left out of the
  normalised mean.
* padding mass: for each real (non-padding) query row, the sum of its weights on padding keys (by the attention
  mask, not the token id); the maximum over rows must be exactly 0. The check adds `extra_padding` masked <pad>
  positions to source and target, so a single sentence is tested too, and compares the padded weights with the
  unpadded ones ("padding invariance", must be ~0 up to float rounding).
* alignment share of cross-attention (defined for one sentence, heads averaged, per decoder layer):
  - `mass`: mean over target tokens i of sum_{j in A(i)} a_ij, the share of token i's cross-attention that falls on
    the source tokens aligned to it;
  - `argmax`: fraction of target tokens whose most-attended source token is in A(i);
  - `uniform`: `mass` of uniform attention, mean |A(i)| / S, the chance level to compare with.
  A(i) is a given alignment (pairs of token positions, or a word alignment "i-j" in Pharaoh format converted with
  `token_alignment_from_words`) or, without one, the diagonal heuristic: the source position round(i (S-1)/(T-1))
  +- `window` tokens. Target tokens without an aligned source token are skipped. The diagonal only suits language
  pairs with similar word order (EN-DE verb movement breaks it); use a reference alignment for real measurements.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from collections.abc import Iterator, Sequence

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

KINDS = ("encoder", "decoder", "cross")
KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention (masked)",
    "cross": "encoder-decoder attention",
}
START_LABEL = "<start>"
CMAP = "viridis"

__all__ = [
    "KINDS",
    "Attentions",
    "eager_attention",
    "batch_attentions",
    "collect_attentions",
    "head_entropy",
    "single_sentence_entropy",
    "padding_mass",
    "attention_diagnostics",
    "diagonal_alignment",
    "token_alignment_from_words",
    "alignment_share",
    "format_diagnostics",
    "plot_heatmap",
    "plot_attention_head",
    "plot_layer_heads",
    "plot_cross_alignment",
    "plot_diagnostics",
    "new_figure",
    "save_figure",
    "visualize",
]


# ---------------------------------------------------------------------------------------------------------------------
# Getting the weights
# ---------------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def eager_attention(model) -> Iterator:
    """Run `model` in eval mode with the eager attention of Eq. (1), which returns its weights; restore afterwards.

    transformers 5 switches implementations in place with `PreTrainedModel.set_attn_implementation` (it updates the
    config of every sub-model); sdpa and flex attention compute the same output but return no weights.
    """
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
    """Attention weights of a right-padded batch in one teacher-forced forward pass.

    targets: reference sentences (tokenised with `text_target=`; `</s>` appended if the tokenizer does not), target
    token ids (label ids, e.g. a previous translation), or None for the model's own translation by `model.generate`
    (greedy with `num_beams=1`, beam search with `num_beams` > 1, None: the model's `generation_config`).
    `extra_padding` masked <pad> positions are appended to both sides.

    Returns a dict with input_ids / attention_mask (B, S), decoder_input_ids / decoder_attention_mask / labels (B, T),
    label_ids (per sentence, unpadded) and the weights "encoder" (L, B, H, S, S), "decoder" (L, B, H, T, T),
    "cross" (L, B, H, T, S), as float32 on CPU.
    """
    pad, eos, start = _pad_id(model, tokenizer), _eos_id(model, tokenizer), _start_id(model)
    source_rows = tokenizer(list(sources), add_special_tokens=True)["input_ids"]
    input_ids, attention_mask = _pad_rows(source_rows, pad, extra_padding)
    device = next(model.parameters()).device

    with eager_attention(model):
        if targets is None:
            generated = model.generate(
                input_ids=_pad_rows(source_rows, pad, 0)[0].to(device),
                attention_mask=_pad_rows(source_rows, pad, 0)[1].to(device),
                num_beams=num_beams or model.generation_config.num_beams or 1,
                do_sample=False,
                max_new_tokens=max_new_tokens,
            )
            label_rows = [_cut_at_eos(seq[1:].tolist(), eos) for seq in generated]  # seq[0] is the start token
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


def _byte_of_char() -> dict[str, int]:
    """Inverse of GPT-2's byte-level alphabet (`bytes_to_unicode`): printable character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_OF_CHAR = _byte_of_char()


def _token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Readable subword labels: the decoded text of each token, "▁" marking a word-initial token (byte-level "Ġ" or
    sentencepiece "▁"). A byte-level token holding part of a multi-byte character shows the missing bytes escaped,
    e.g. "▁f\\xc3" + "\\xa4hr" for "▁fähr"."""
    labels = []
    for i, raw in zip(ids, tokenizer.convert_ids_to_tokens(list(ids))):
        text = tokenizer.decode([int(i)], skip_special_tokens=False, clean_up_tokenization_spaces=False).strip()
        if "\ufffd" in text and all(ch in _BYTE_OF_CHAR for ch in raw):  # part of a multi-byte character
            text = bytes(_BYTE_OF_CHAR[ch] for ch in raw).decode("utf-8", errors="backslashreplace").strip()
        if raw.startswith(("Ġ", "▁")):
            text = "▁" + text
        labels.append(text or raw)
    return labels


@dataclass
class Attentions:
    """All attention weights of one sentence pair, labelled with its tokens (see the module docstring for axes)."""

    source_tokens: list[str]  # S, the encoder's input (with </s>)
    target_tokens: list[str]  # T, the token produced at each decoder step (y_1 ... </s>)
    decoder_input_tokens: list[str]  # T, the token fed at each decoder step (<start>, y_1, ...)
    encoder: torch.Tensor  # (L_enc, H, S, S)
    decoder: torch.Tensor  # (L_dec, H, T, T)
    cross: torch.Tensor  # (L_dec, H, T, S)
    source_ids: list[int] = field(default_factory=list)
    target_ids: list[int] = field(default_factory=list)
    target_origin: str = "reference"  # "reference", "greedy" or "beam-<k>"

    def weights(self, kind: str) -> torch.Tensor:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return getattr(self, kind)

    def axis_labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels = queries, column labels = keys)."""
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
    """The attention weights for one source sentence and a reference `target` (text or label ids) or, if None, the
    model's own translation: greedy (`num_beams=1`), beam search, or by default as its `generation_config` says."""
    batch = batch_attentions(
        model, tokenizer, [source], None if target is None else [target],
        num_beams=num_beams, max_new_tokens=max_new_tokens,
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


# ---------------------------------------------------------------------------------------------------------------------
# Diagnostics
# ---------------------------------------------------------------------------------------------------------------------


def _visible_keys(kind: str, query_mask: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """(B, Tq, Tk) bool: the keys each query may attend to (key padding mask, and causal for the decoder)."""
    visible = key_mask.bool()[:, None, :].expand(-1, query_mask.shape[1], -1)
    if kind == "decoder":
        visible = visible & torch.ones(query_mask.shape[1], key_mask.shape[1], dtype=torch.bool).tril()
    return visible


def single_sentence_entropy(attn: Attentions, kind: str) -> torch.Tensor:
    """(L, H) normalised entropy of one sentence's heads (no padding; 1 = uniform attention)."""
    weights = attn.weights(kind).unsqueeze(1)  # (L, 1, H, Tq, Tk)
    query_mask = torch.ones(1, weights.shape[-2], dtype=torch.long)
    key_mask = torch.ones(1, weights.shape[-1], dtype=torch.long)
    return head_entropy(weights, query_mask, key_mask, kind, normalize=True)


def head_entropy(
    weights: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor, kind: str, normalize: bool = False
) -> torch.Tensor:
    """(L, B, H, Tq, Tk) weights -> (L, H) mean row entropy over real query rows, in nats; with `normalize`, each
    row's entropy divided by log(number of keys it may see) (1 = uniform), rows seeing one key left out."""
    p = weights.clamp_min(0)
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)  # (L, B, H, Tq); 0 log 0 = 0
    rows = query_mask.bool()  # (B, Tq)
    if normalize:
        n_visible = _visible_keys(kind, query_mask, key_mask).sum(-1).float()  # (B, Tq)
        rows = rows & (n_visible > 1)
        entropy = entropy / torch.log(n_visible.clamp_min(2))[None, :, None, :]
    rows = rows[None, :, None, :].float()  # (1, B, 1, Tq)
    return (entropy * rows).sum((1, 3)) / rows.sum((1, 3)).clamp_min(1)


def padding_mass(weights: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """(L, B, H, Tq, Tk) weights -> (L, H): the largest attention mass a real query row puts on padding keys.
    Padding is what the attention mask says, not the <pad> id (the decoder's start token has the <pad> id)."""
    on_padding = (weights * (~key_mask.bool())[None, :, None, None, :].float()).sum(-1)  # (L, B, H, Tq)
    on_padding = on_padding * query_mask.bool()[None, :, None, :].float()
    return on_padding.amax(dim=(1, 3))


def _masks(batch: dict, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    source, target = batch["attention_mask"], batch["decoder_attention_mask"]
    return {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}[kind]


def attention_diagnostics(
    model,
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str] | Sequence[Sequence[int]] | None = None,
    *,
    extra_padding: int = 3,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
) -> dict:
    """Per-head entropy and padding mass of every attention kind over a right-padded batch (module docstring).

    Besides the padding the batch already has, `extra_padding` masked positions are appended, and the weights are
    compared with an unpadded pass of each sentence ("padding_invariance": max |difference| on real positions).
    Returns {"entropy": {kind: (L, H)}, "entropy_normalized": {...}, "padding_mass": {kind: (L, H)},
    "padding_invariance": {kind: float}, "num_sentences": B}.
    """
    padded = batch_attentions(
        model, tokenizer, sources, targets, extra_padding=extra_padding, num_beams=num_beams,
        max_new_tokens=max_new_tokens,
    )
    result = {"entropy": {}, "entropy_normalized": {}, "padding_mass": {}, "padding_invariance": {},
              "num_sentences": len(sources)}
    for kind in KINDS:
        query_mask, key_mask = _masks(padded, kind)
        w = padded[kind]
        result["entropy"][kind] = head_entropy(w, query_mask, key_mask, kind)
        result["entropy_normalized"][kind] = head_entropy(w, query_mask, key_mask, kind, normalize=True)
        result["padding_mass"][kind] = padding_mass(w, query_mask, key_mask)
        result["padding_invariance"][kind] = 0.0
    for b, source in enumerate(sources):  # each sentence alone, without any padding, on the same target tokens
        alone = batch_attentions(model, tokenizer, [source], [padded["label_ids"][b]])
        for kind in KINDS:
            q, k = alone[kind].shape[-2:]
            diff = (padded[kind][:, b, :, :q, :k] - alone[kind][:, 0]).abs().max().item()
            result["padding_invariance"][kind] = max(result["padding_invariance"][kind], diff)
    return result


def diagonal_alignment(target_len: int, source_len: int, window: int = 1) -> list[tuple[int, int]]:
    """The heuristic alignment A(i) = {j : |j - round(i (S-1)/(T-1))| <= window} as (target, source) pairs."""
    pairs = []
    for i in range(target_len):
        centre = round(i * (source_len - 1) / (target_len - 1)) if target_len > 1 else 0
        pairs += [(i, j) for j in range(max(0, centre - window), min(source_len, centre + window + 1))]
    return pairs


def _word_of_token(tokenizer, text: str) -> list[int | None]:
    """Whitespace-word index of each token of `text` (None for special tokens), from the fast tokenizer's offsets."""
    char_word, word = [None] * len(text), -1
    for c, ch in enumerate(text):
        if not ch.isspace() and (c == 0 or text[c - 1].isspace()):
            word += 1
        char_word[c] = None if ch.isspace() else word
    words = []
    for start, end in tokenizer(text, return_offsets_mapping=True)["offset_mapping"]:
        inside = [char_word[c] for c in range(start, end) if char_word[c] is not None]
        if not inside and end > start:  # a token of only the space before a word (byte-level "Ġ") joins that word
            inside = [w for w in char_word[end:] if w is not None][:1]
        words.append(inside[0] if inside else None)  # special tokens have empty spans: no word
    return words


def token_alignment_from_words(tokenizer, source: str, target: str, pharaoh: str) -> list[tuple[int, int]]:
    """Convert a word alignment "i-j ..." (Pharaoh format: source word i, target word j, 0-based, whitespace words,
    "p" links such as "i?j" or "ipj" accepted as links) into (target token, source token) position pairs: every
    subword of target word j is aligned to every subword of source word i. Needs a fast tokenizer (offsets)."""
    source_words = _word_of_token(tokenizer, source)
    target_words = _word_of_token(tokenizer, target)
    pairs = set()
    for link in pharaoh.split():
        i, j = (int(x) for x in link.replace("?", "-").replace("p", "-").split("-"))
        pairs.update((t, s) for t, tw in enumerate(target_words) if tw == j
                     for s, sw in enumerate(source_words) if sw == i)
    return sorted(pairs)


def alignment_share(cross: torch.Tensor, alignment: Sequence[tuple[int, int]]) -> dict:
    """Share of cross-attention on aligned source tokens (module docstring). cross: (T, S), rows summing to 1, e.g.
    `attn.cross[layer].mean(0)`; alignment: (target position, source position) pairs.
    Returns {"mass", "argmax", "uniform", "num_aligned_targets"}."""
    target_len, source_len = cross.shape
    aligned: dict[int, set[int]] = {}
    for t, s in alignment:
        if 0 <= t < target_len and 0 <= s < source_len:
            aligned.setdefault(t, set()).add(s)
    if not aligned:
        return {"mass": float("nan"), "argmax": float("nan"), "uniform": float("nan"), "num_aligned_targets": 0}
    best = cross.argmax(-1)
    mass = [cross[t, sorted(js)].sum().item() for t, js in aligned.items()]
    hits = [int(best[t]) in js for t, js in aligned.items()]
    uniform = [len(js) / source_len for js in aligned.values()]
    n = len(aligned)
    return {"mass": sum(mass) / n, "argmax": sum(hits) / n, "uniform": sum(uniform) / n, "num_aligned_targets": n}


def format_diagnostics(diagnostics: dict, alignment: dict | None = None) -> str:
    """Human-readable report of `attention_diagnostics` (and of per-layer `alignment_share` results)."""
    lines = [f"attention diagnostics over {diagnostics['num_sentences']} sentence(s)"]
    for kind in KINDS:
        entropy, normalized = diagnostics["entropy"][kind], diagnostics["entropy_normalized"][kind]
        pad = diagnostics["padding_mass"][kind].max().item()
        status = "OK" if pad == 0.0 else "NONZERO: the padding mask is not applied"
        lines.append(f"{KIND_TITLES[kind]}: max attention mass on padding = {pad:.3g} ({status}); "
                     f"padded vs unpadded max |diff| = {diagnostics['padding_invariance'][kind]:.2g}")
        lines.append("  entropy per head in nats (normalised, 1 = uniform):")
        for layer in range(entropy.shape[0]):
            cells = " ".join(f"{e:5.2f}({n:.2f})" for e, n in zip(entropy[layer].tolist(), normalized[layer].tolist()))
            lines.append(f"    layer {layer + 1}: {cells}")
    if alignment:
        lines.append(f"cross-attention on aligned source tokens ({alignment.get('reference', 'alignment')}):")
        for name, share in alignment.items():
            if isinstance(share, dict):
                lines.append(f"  {name}: mass {share['mass']:.3f}, argmax agreement {share['argmax']:.3f} "
                             f"(uniform attention: {share['uniform']:.3f}; {share['num_aligned_targets']} targets)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# Plots. Every figure has one axes per panel plus one colorbar axes.
# ---------------------------------------------------------------------------------------------------------------------


def _fontsize(n: int) -> float:
    return max(4.0, min(9.0, 200.0 / max(n, 1)))


def plot_heatmap(ax, matrix: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str], title: str,
             show_labels: bool = True):
    """Draw one (Tq, Tk) attention matrix on `ax` (rows = queries, columns = keys, colour scale 0..1)."""
    image = ax.imshow(matrix.numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(len(col_labels)))
    ax.set_yticks(range(len(row_labels)))
    if show_labels:
        ax.set_xticklabels(col_labels, rotation=90, fontsize=_fontsize(len(col_labels)))
        ax.set_yticklabels(row_labels, fontsize=_fontsize(len(row_labels)))
    else:
        ax.set_xticklabels([])
        ax.set_yticklabels([])
    return image


def new_figure(**kwargs) -> Figure:
    """A matplotlib Figure on the Agg canvas, without pyplot: no global figure state to leak, no display needed."""
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike | None, dpi: int = 120) -> Figure:
    """Write `fig` if `path` is given; the format follows the suffix (.png, .svg, .pdf)."""
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=dpi)
    return fig


def plot_attention_head(attn: Attentions, kind: str, layer: int, head: int, path=None) -> Figure:
    """One head's (Tq, Tk) attention matrix of layer `layer` (0-based), rows = queries, columns = keys."""
    rows, cols = attn.axis_labels(kind)
    matrix = attn.weights(kind)[layer, head]
    fig = new_figure(figsize=(2.0 + 0.28 * len(cols), 1.5 + 0.28 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    image = plot_heatmap(ax, matrix, rows, cols, f"{KIND_TITLES[kind]}, layer {layer + 1}, head {head + 1}")
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    fig.colorbar(image, ax=ax, fraction=0.04)
    return save_figure(fig, path)


def _panel_grid(n: int, ncols: int, cell_w: float, cell_h: float) -> tuple[Figure, list]:
    """A figure with n panels in rows of `ncols` (cells of cell_w x cell_h inches); unused grid cells removed."""
    nrows = math.ceil(n / ncols)
    fig = new_figure(figsize=(ncols * cell_w + 1.0, nrows * cell_h + 0.8), layout="constrained")
    axes = [ax for row in fig.subplots(nrows, ncols, squeeze=False) for ax in row]
    for ax in axes[n:]:
        fig.delaxes(ax)
    return fig, axes[:n]


def plot_layer_heads(attn: Attentions, kind: str, layer: int, path=None, ncols: int = 4) -> Figure:
    """All h heads of one layer side by side (h panels + 1 colorbar), token labels on the outer panels."""
    rows, cols = attn.axis_labels(kind)
    weights = attn.weights(kind)[layer]  # (H, Tq, Tk)
    heads = weights.shape[0]
    ncols = min(ncols, heads)
    fig, axes = _panel_grid(heads, ncols, 1.0 + 0.2 * len(cols), 1.0 + 0.2 * len(rows))
    image = None
    for h, ax in enumerate(axes):
        image = plot_heatmap(ax, weights[h], rows, cols, f"head {h + 1}")
        if h % ncols:  # y labels only on the first column
            ax.set_yticklabels([])
        if h + ncols < heads:  # x labels only on the lowest panel of each column
            ax.set_xticklabels([])
    fig.suptitle(f"{KIND_TITLES[kind]}, layer {layer + 1}, {attn.target_origin} target")
    fig.colorbar(image, ax=[ax for ax in fig.axes], fraction=0.02)
    return save_figure(fig, path)


def plot_cross_alignment(attn: Attentions, path=None, alignment: Sequence[tuple[int, int]] | None = None,
                         reference: str | None = None) -> Figure:
    """Encoder-decoder attention averaged over heads, one panel per decoder layer and one averaged over all layers
    (L_dec + 1 panels + 1 colorbar). Red dots: each target token's most-attended source token; white squares: the
    alignment A(i) (given, or the diagonal heuristic when None); panel titles give `alignment_share`."""
    if alignment is None:
        alignment = diagonal_alignment(len(attn.target_tokens), len(attn.source_tokens))
        reference = reference or "diagonal heuristic"
    reference = reference or "given alignment"
    per_layer = attn.cross.mean(1)  # (L, T, S): heads averaged
    panels = [(f"layer {layer + 1}", per_layer[layer]) for layer in range(per_layer.shape[0])]
    panels.append(("all layers", per_layer.mean(0)))
    fig, axes = _panel_grid(len(panels), min(len(panels), 4), 1.2 + 0.22 * len(attn.source_tokens),
                            1.2 + 0.22 * len(attn.target_tokens))
    image = None
    for ax, (name, matrix) in zip(axes, panels):
        share = alignment_share(matrix, alignment)
        image = plot_heatmap(ax, matrix, attn.target_tokens, attn.source_tokens,
                         f"{name}: mass {share['mass']:.2f}, argmax {share['argmax']:.2f}")
        best = matrix.argmax(-1)
        ax.scatter(best.numpy(), range(len(best)), s=8, c="red", marker="o")
        t_idx, s_idx = zip(*alignment) if alignment else ((), ())
        ax.scatter(s_idx, t_idx, s=40, facecolors="none", edgecolors="white", marker="s", linewidths=0.6)
        ax.set_xlim(-0.5, matrix.shape[1] - 0.5)
        ax.set_ylim(matrix.shape[0] - 0.5, -0.5)
    fig.suptitle(f"encoder-decoder attention, heads averaged ({attn.target_origin} target); "
                 f"red: argmax, squares: {reference}")
    fig.colorbar(image, ax=[ax for ax in fig.axes], fraction=0.02)
    return save_figure(fig, path)


def plot_diagnostics(diagnostics: dict, path=None) -> Figure:
    """Normalised per-head entropy (layers x heads, 1 = uniform) of the three attention kinds, and the largest
    attention mass on padding per kind (must be 0): 4 panels + 1 colorbar."""
    fig = new_figure(figsize=(13, 3.6), layout="constrained")
    axes = fig.subplots(1, 4)
    image = None
    for ax, kind in zip(axes[:3], KINDS):
        values = diagnostics["entropy_normalized"][kind]  # (L, H)
        image = ax.imshow(values.numpy(), cmap="magma", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"{KIND_TITLES[kind]}\nentropy / log(#keys)", fontsize=9)
        ax.set_xticks(range(values.shape[1]), [str(h + 1) for h in range(values.shape[1])], fontsize=7)
        ax.set_yticks(range(values.shape[0]), [str(layer + 1) for layer in range(values.shape[0])], fontsize=7)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        for (layer, h), v in _ndenumerate(values):
            ax.text(h, layer, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v < 0.6 else "black")
    masses = [diagnostics["padding_mass"][kind].max().item() for kind in KINDS]
    ax = axes[3]
    ax.bar(range(3), masses, color=["tab:green" if m == 0 else "tab:red" for m in masses])
    ax.set_xticks(range(3), ["enc self", "dec self", "cross"], fontsize=8)
    ax.set_ylim(0, max(1e-3, max(masses) * 1.2))
    ax.set_title("max attention mass on padding\n(must be 0)", fontsize=9)
    for x, m in enumerate(masses):
        ax.text(x, 0, f"{m:.2g}", ha="center", va="bottom", fontsize=8)
    ax.yaxis.tick_right()
    fig.colorbar(image, ax=axes[2], fraction=0.05)
    return save_figure(fig, path)


def _ndenumerate(values: torch.Tensor):
    for layer in range(values.shape[0]):
        for h in range(values.shape[1]):
            yield (layer, h), float(values[layer, h])


# ---------------------------------------------------------------------------------------------------------------------
# Everything for one sentence
# ---------------------------------------------------------------------------------------------------------------------


def visualize(
    model,
    tokenizer,
    source: str,
    target: str | None = None,
    out_dir: str | os.PathLike = "attention",
    *,
    fmt: str = "png",
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    per_head: bool = False,
    word_alignment: str | None = None,
) -> dict:
    """Write all plots for one sentence pair to `out_dir` and return {"attentions", "diagnostics", "alignment",
    "report", "files"}:

    {kind}_layer{l}.{fmt} (all heads of each layer, for the three kinds), cross_alignment.{fmt} (heads averaged,
    per layer), diagnostics.{fmt} and diagnostics.txt; with `per_head`, also {kind}_layer{l}_head{h}.{fmt}.
    `word_alignment` ("i-j" source-target word pairs, Pharaoh format) needs the reference `target`; without it the
    alignment share uses the diagonal heuristic.
    """
    os.makedirs(out_dir, exist_ok=True)
    attn = collect_attentions(model, tokenizer, source, target, num_beams=num_beams, max_new_tokens=max_new_tokens)
    files = []

    def out(name: str) -> str:
        files.append(os.path.join(out_dir, f"{name}.{fmt}"))
        return files[-1]

    for kind in KINDS:
        weights = attn.weights(kind)
        for layer in range(weights.shape[0]):
            plot_layer_heads(attn, kind, layer, out(f"{kind}_layer{layer + 1}"))
            if per_head:
                for head in range(weights.shape[1]):
                    plot_attention_head(attn, kind, layer, head, out(f"{kind}_layer{layer + 1}_head{head + 1}"))

    if word_alignment is not None:
        if target is None:
            raise ValueError("word_alignment refers to the words of a reference target: pass target too.")
        alignment, reference = token_alignment_from_words(tokenizer, source, target, word_alignment), "given alignment"
    else:
        alignment = diagonal_alignment(len(attn.target_tokens), len(attn.source_tokens))
        reference = "diagonal heuristic"
    plot_cross_alignment(attn, out("cross_alignment"), alignment=alignment, reference=reference)
    per_layer = attn.cross.mean(1)
    shares = {"reference": reference}
    shares.update({f"layer {layer + 1}": alignment_share(per_layer[layer], alignment)
                   for layer in range(per_layer.shape[0])})
    shares["all layers"] = alignment_share(per_layer.mean(0), alignment)

    diagnostics = attention_diagnostics(model, tokenizer, [source], [attn.target_ids])
    plot_diagnostics(diagnostics, out("diagnostics"))
    report = "\n".join([
        f"source: {' '.join(attn.source_tokens)}",
        f"target ({attn.target_origin}): {' '.join(attn.target_tokens)}",
        format_diagnostics(diagnostics, shares),
    ])
    with open(os.path.join(out_dir, "diagnostics.txt"), "w", encoding="utf-8") as f:
        f.write(report + "\n")
    files.append(os.path.join(out_dir, "diagnostics.txt"))
    return {"attentions": attn, "diagnostics": diagnostics, "alignment": shares, "report": report, "files": files}
