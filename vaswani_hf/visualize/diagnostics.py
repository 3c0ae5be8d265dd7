"""Compute attention diagnostics from the weights: per-head entropy, attention mass on padding, padding invariance,
and the share of cross-attention on aligned source tokens (the package docstring defines each one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from .attention import KIND_TITLES, KINDS, Attentions, batch_attentions

_LINK = re.compile(r"^(\d+)[-?p](\d+)$")


def word_links(pharaoh: str) -> list[tuple[int, int]]:
    """Return the (source word i, target word j) pairs of a Pharaoh word alignment "i-j ...".

    The words are counted from 0 and separated by whitespace. Possible links ("i?j" or "ipj") count as links. A
    malformed link raises a ValueError naming the first one."""
    matches = [(_LINK.match(link), link) for link in pharaoh.split()]
    for match, link in matches:
        if not match:
            raise ValueError(link)
    return [(int(m[1]), int(m[2])) for m, _ in matches]


def _visible_keys(kind: str, query_mask: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """Return a (B, Tq, Tk) bool tensor of the keys each query may attend to.

    Those are the keys the key padding mask keeps and, for the decoder, only the query's own and earlier positions
    (the causal mask of Section 3.2.3)."""
    visible = key_mask.bool()[:, None, :].expand(-1, query_mask.shape[1], -1)
    if kind == "decoder":
        visible = visible & torch.ones(query_mask.shape[1], key_mask.shape[1], dtype=torch.bool).tril()
    return visible


def single_sentence_entropy(attn: Attentions, kind: str) -> torch.Tensor:
    """Return the (L, H) normalised entropy of one sentence's heads, without padding; 1 means uniform attention."""
    weights = attn.weights(kind).unsqueeze(1)  # (L, 1, H, Tq, Tk)
    query_mask = torch.ones(1, weights.shape[-2], dtype=torch.long)
    key_mask = torch.ones(1, weights.shape[-1], dtype=torch.long)
    return head_entropy(weights, query_mask, key_mask, kind, normalize=True)


def head_entropy(
    weights: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor, kind: str, normalize: bool = False
) -> torch.Tensor:
    """Return the (L, H) mean entropy, in nats, of the real query rows of (L, B, H, Tq, Tk) weights.

    With `normalize`, each row's entropy is divided by log(the number of keys it may see), so that 1 means uniform
    attention, and rows that see only one key are left out, because their entropy is 0 whatever the head learned."""
    p = weights.clamp_min(0)
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)  # (L, B, H, Tq), taking 0 log 0 as 0.
    rows = query_mask.bool()  # (B, Tq)
    if normalize:
        n_visible = _visible_keys(kind, query_mask, key_mask).sum(-1).float()  # (B, Tq)
        rows = rows & (n_visible > 1)
        entropy = entropy / torch.log(n_visible.clamp_min(2))[None, :, None, :]
    rows = rows[None, :, None, :].float()  # (1, B, 1, Tq)
    return (entropy * rows).sum((1, 3)) / rows.sum((1, 3)).clamp_min(1)


def padding_mass(weights: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """Return the (L, H) largest attention mass that a real query row of (L, B, H, Tq, Tk) weights puts on padding.

    Padding is what the attention mask says, not the <pad> id, because the decoder's start token has the <pad> id."""
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
    """Compute the per-head entropy and padding mass of every attention kind over a right-padded batch.

    The package docstring defines both.

    Besides the padding the batch already has, `extra_padding` masked positions are appended, and the weights are
    compared with an unpadded pass of each sentence; "padding_invariance" is the largest |difference| on the real
    positions. Returns {"entropy": {kind: (L, H)}, "entropy_normalized": {kind: (L, H)}, "padding_mass": {kind:
    (L, H)}, "padding_invariance": {kind: float}, "num_sentences": B}."""
    padded = batch_attentions(
        model,
        tokenizer,
        sources,
        targets,
        extra_padding=extra_padding,
        num_beams=num_beams,
        max_new_tokens=max_new_tokens,
    )
    result = {
        "entropy": {},
        "entropy_normalized": {},
        "padding_mass": {},
        "padding_invariance": {},
        "num_sentences": len(sources),
    }
    for kind in KINDS:
        query_mask, key_mask = _masks(padded, kind)
        w = padded[kind]
        result["entropy"][kind] = head_entropy(w, query_mask, key_mask, kind)
        result["entropy_normalized"][kind] = head_entropy(w, query_mask, key_mask, kind, normalize=True)
        result["padding_mass"][kind] = padding_mass(w, query_mask, key_mask)
        result["padding_invariance"][kind] = 0.0
    for b, source in enumerate(sources):  # Each sentence alone, without any padding, on the same target tokens.
        alone = batch_attentions(model, tokenizer, [source], [padded["label_ids"][b]])
        for kind in KINDS:
            q, k = alone[kind].shape[-2:]
            diff = (padded[kind][:, b, :, :q, :k] - alone[kind][:, 0]).abs().max().item()
            result["padding_invariance"][kind] = max(result["padding_invariance"][kind], diff)
    return result


def diagonal_alignment(target_len: int, source_len: int, window: int = 1) -> list[tuple[int, int]]:
    """Return the heuristic alignment A(i) = {j : |j - round(i (S-1)/(T-1))| <= window} as (target, source) pairs."""
    pairs = []
    for i in range(target_len):
        centre = round(i * (source_len - 1) / (target_len - 1)) if target_len > 1 else 0
        pairs += [(i, j) for j in range(max(0, centre - window), min(source_len, centre + window + 1))]
    return pairs


def _word_of_token(tokenizer, text: str) -> list[int | None]:
    """Return the whitespace-word index of each token of `text`, or None for a special token.

    The indices come from the fast tokenizer's offsets."""
    char_word, word = [None] * len(text), -1
    for c, ch in enumerate(text):
        if not ch.isspace() and (c == 0 or text[c - 1].isspace()):
            word += 1
        char_word[c] = None if ch.isspace() else word
    words = []
    for start, end in tokenizer(text, return_offsets_mapping=True)["offset_mapping"]:
        inside = [char_word[c] for c in range(start, end) if char_word[c] is not None]
        if not inside and end > start:  # A token of only the space before a word (byte-level "Ġ") joins that word.
            inside = [w for w in char_word[end:] if w is not None][:1]
        words.append(inside[0] if inside else None)  # A special token has an empty span, so it belongs to no word.
    return words


def token_alignment_from_words(tokenizer, source: str, target: str, pharaoh: str) -> list[tuple[int, int]]:
    """Convert a Pharaoh word alignment "i-j ..." into (target token, source token) position pairs.

    In "i-j", i is a source word and j a target word, both whitespace words counted from 0; possible links such as
    "i?j" or "ipj" are accepted as links (`word_links`). Every subword of target word j is aligned to every subword
    of source word i. It needs a fast tokenizer, whose offsets map tokens to words."""
    source_words = _word_of_token(tokenizer, source)
    target_words = _word_of_token(tokenizer, target)
    pairs = set()
    for i, j in word_links(pharaoh):
        pairs.update(
            (t, s) for t, tw in enumerate(target_words) if tw == j for s, sw in enumerate(source_words) if sw == i
        )
    return sorted(pairs)


def alignment_share(cross: torch.Tensor, alignment: Sequence[tuple[int, int]]) -> dict:
    """Return the share of cross-attention that falls on aligned source tokens, as the package docstring defines it.

    `cross` is a (T, S) matrix whose rows sum to 1, such as `attn.cross[layer].mean(0)`, and `alignment` holds
    (target position, source position) pairs. Returns {"mass", "argmax", "uniform", "num_aligned_targets"}, all NaN
    (and 0 targets) when no pair falls inside the matrix."""
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
    """Return a readable text report of `attention_diagnostics`' result, and of per-layer `alignment_share` results
    when they are given."""
    lines = [f"attention diagnostics over {diagnostics['num_sentences']} sentence(s)"]
    for kind in KINDS:
        entropy, normalized = diagnostics["entropy"][kind], diagnostics["entropy_normalized"][kind]
        pad = diagnostics["padding_mass"][kind].max().item()
        status = "OK" if pad == 0.0 else "NONZERO: the padding mask is not applied"
        lines.append(
            f"{KIND_TITLES[kind]}: max attention mass on padding = {pad:.3g} ({status}); "
            f"padded vs unpadded max |diff| = {diagnostics['padding_invariance'][kind]:.2g}"
        )
        lines.append("  entropy per head in nats (normalised, 1 = uniform):")
        for layer in range(entropy.shape[0]):
            cells = " ".join(f"{e:5.2f}({n:.2f})" for e, n in zip(entropy[layer].tolist(), normalized[layer].tolist()))
            lines.append(f"    layer {layer + 1}: {cells}")
    if alignment:
        lines.append(f"cross-attention on aligned source tokens ({alignment.get('reference', 'alignment')}):")
        for name, share in alignment.items():
            if isinstance(share, dict):
                lines.append(
                    f"  {name}: mass {share['mass']:.3f}, argmax agreement {share['argmax']:.3f} "
                    f"(uniform attention: {share['uniform']:.3f}; {share['num_aligned_targets']} targets)"
                )
    return "\n".join(lines)
