"""Comparing the outputs of two implementations of the same function (ours, Marian, CTranslate2) without depending on
the CPU: their logits agree to ~1e-5, but they add in different orders (other kernels, instruction sets, thread
counts, a permuted model dimension), so where two candidate tokens are within that rounding of each other, argmax
may pick either. "Same output" is therefore checked as: identical, or the first differing token is such a near tie
under our model."""

from __future__ import annotations

import torch

NEAR_TIE = 1e-4  # nats: the agreement of the implementations' log-probabilities, ~10x their measured difference


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (a prefix differs at its end), None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def assert_same_or_near_tie(model, source_ids: list[int], a: list[int], b: list[int], tol: float = NEAR_TIE) -> None:
    """Two decoded token-id sequences (no start token, each ending with </s> unless cut by a length limit) of the
    same source: equal, or at their first difference our model gives both tokens log-probabilities within `tol`."""
    k = first_difference(a, b)
    if k is None:
        return
    assert k < len(a) and k < len(b), f"one output stops where the other continues without </s>: {a} vs {b}"
    start = model.config.decoder_start_token_id
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([[start] + a[:k]])).logits
    log_probs = logits[0, -1].float().log_softmax(-1)
    gap = abs(float(log_probs[a[k]] - log_probs[b[k]]))
    assert gap < tol, f"outputs differ at token {k} where the model is not at a tie ({gap:.2e} nats): {a} vs {b}"


def assert_same_texts_or_near_ties(model, tokenizer, sources: list[str], ours: list[str], theirs: list[str]) -> None:
    """`assert_same_or_near_tie` for decoded texts (re-tokenized, `</s>` appended by the tokenizer)."""
    assert len(ours) == len(theirs) == len(sources)
    for source, a, b in zip(sources, ours, theirs):
        if a != b:
            ids = [tokenizer(text)["input_ids"] for text in (source, a, b)]
            assert_same_or_near_tie(model, ids[0], ids[1], ids[2])


def generated_rows(generated: torch.Tensor, eos: int) -> list[list[int]]:
    """`generate()` output rows without the decoder start token, cut after the first </s> (padding dropped)."""
    rows = []
    for row in generated.tolist():
        row = row[1:]
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows


def assert_same_generations_or_near_ties(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, ours: torch.Tensor, theirs: torch.Tensor
) -> None:
    """`assert_same_or_near_tie` for two batched `generate()` outputs of the same right-padded sources."""
    eos = model.config.eos_token_id
    for ids, mask, a, b in zip(
        input_ids.tolist(), attention_mask.tolist(), generated_rows(ours, eos), generated_rows(theirs, eos)
    ):
        source = [token for token, keep in zip(ids, mask) if keep]
        assert_same_or_near_tie(model, source, a, b)
