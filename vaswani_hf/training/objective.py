"""The training objective (Section 5.4): label-smoothed cross-entropy, "label smoothing of value eps_ls = 0.1".

Not transformers' `LabelSmoother`, which spreads eps over all V classes: here the target keeps 1 - eps and the other
V - 1 share eps (t2t v1, fairseq); the smoothed distribution's entropy is not subtracted, so eps = 0 is the model's own
`forward(labels=...)` loss. No host read-back (no device sync, no graph break under `torch.compile`).
`chunked_label_smoothed_nll` computes the same loss `chunk` tokens at a time from the hidden states and the
projection's weight: the logits of a 25k-token micro-batch at V = 37k are 3.7 GB in fp32, plus their gradient.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..modeling_vaswani import IGNORE_INDEX, per_target_token

PAPER_LABEL_SMOOTHING = 0.1  # eps_ls, Section 5.4


def label_smoothed_nll(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, ignore_index: int = IGNORE_INDEX
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed label-smoothed cross-entropy of the non-ignored targets, their count) of logits (B, T, V) and labels
    (B, T), from fp32 logits. torch's `cross_entropy(label_smoothing=e)` gives the others e/V: e = eps * V / (V - 1)
    makes that eps/(V-1), without materialising the log-probabilities."""
    vocab = logits.shape[-1]
    loss = nn.functional.cross_entropy(
        logits.reshape(-1, vocab).float(),
        labels.reshape(-1),
        ignore_index=ignore_index,
        reduction="sum",
        label_smoothing=epsilon * vocab / (vocab - 1),
    )
    return loss, (labels != ignore_index).sum()


class _ChunkedProjectionLoss(torch.autograd.Function):
    """sum over tokens of label_smoothed_nll(hidden @ weight.T), `chunk` rows at a time, gradients computed in forward
    (the plain path's three matmuls, not four with recomputation); backward only scales them."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, epsilon, chunk, ignore_index):  # noqa: D102 (see the class docstring)
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        weight_leaf = weight.detach().requires_grad_(want_weight)  # its .grad accumulates over the chunks
        for start in range(0, hidden.shape[0], chunk):
            rows = hidden[start : start + chunk].detach().requires_grad_(want_hidden)
            with torch.enable_grad():
                loss, _ = label_smoothed_nll(
                    nn.functional.linear(rows, weight_leaf), labels[start : start + chunk], epsilon, ignore_index
                )
            if want_hidden or want_weight:
                loss.backward()
                if want_hidden:
                    grad_hidden[start : start + chunk] = rows.grad
            total += loss.detach()
        ctx.save_for_backward(grad_hidden, weight_leaf.grad if want_weight else None)
        return total

    @staticmethod
    def backward(ctx, grad_total):  # noqa: D102
        grad_hidden, grad_weight = ctx.saved_tensors
        return (
            None if grad_hidden is None else grad_hidden * grad_total.to(grad_hidden.dtype),
            None if grad_weight is None else grad_weight * grad_total.to(grad_weight.dtype),
            None,
            None,
            None,
            None,
        )


def chunked_label_smoothed_nll(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    epsilon: float,
    chunk: int = 4096,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`label_smoothed_nll(hidden @ weight.T, labels, epsilon)` with at most `chunk` tokens' logits at once; same value
    and gradients up to summation order (padding computed, contributing zero: static shapes)."""
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    if hidden.shape[-1] != weight.shape[-1] or hidden.shape[:-1] != labels.shape:
        raise ValueError(
            f"chunked loss: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)} and labels "
            f"{tuple(labels.shape)} do not match ((B, T, d), (V, d), (B, T))"
        )
    total = _ChunkedProjectionLoss.apply(
        hidden.reshape(-1, hidden.shape[-1]), weight, labels.reshape(-1), epsilon, int(chunk), ignore_index
    )
    return total, (labels != ignore_index).sum()


def _pass_through(hidden_states: torch.Tensor) -> torch.Tensor:
    return hidden_states


@contextlib.contextmanager
def output_projection_deferred(model: nn.Module) -> Iterator[nn.Linear]:
    """Inside the block the bias-free output projection (`lm_head`, Section 3.4) returns its input, so `.logits` are
    hidden states (the model still called through DDP / `torch.compile` wrappers); yields the projection."""
    head = model.get_output_embeddings()
    biased = getattr(head, "bias", None) is not None or getattr(model, "final_logits_bias", None) is not None
    if not isinstance(head, nn.Linear) or biased:
        raise ValueError(f"the chunked loss needs a bias-free nn.Linear output projection, got {type(head).__name__}")
    head.forward = _pass_through  # one function object: a compiled model guards on it once, not once per call
    try:
        yield head
    finally:
        del head.forward


class LabelSmoothedLoss:
    """The Trainer's `compute_loss_func`: the smoothed sum over the update's target tokens (`num_items_in_batch`); with
    `chunk_tokens` > 0 `outputs.logits` are hidden states (`output_projection_deferred`) and the loss is chunked."""

    def __init__(
        self, epsilon: float = PAPER_LABEL_SMOOTHING, chunk_tokens: int = 0, output_projection: nn.Linear | None = None
    ):
        if chunk_tokens and output_projection is None:
            raise ValueError("a chunked loss (chunk_tokens > 0) needs the model's output_projection")
        self.epsilon, self.chunk_tokens, self.output_projection = epsilon, chunk_tokens, output_projection

    def __call__(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        if self.chunk_tokens:
            loss_sum, _ = chunked_label_smoothed_nll(
                outputs.logits, self.output_projection.weight, labels, self.epsilon, self.chunk_tokens
            )
        else:
            loss_sum, _ = label_smoothed_nll(outputs.logits, labels, self.epsilon)
        return per_target_token(loss_sum, labels, num_items_in_batch)
