"""The training objective (Section 5.4): label-smoothed cross-entropy, "label smoothing of value eps_ls = 0.1".

The target keeps probability 1 - eps and the other V - 1 classes share eps equally, as tensor2tensor v1
(`smoothing_cross_entropy`) and fairseq (`criterions/label_smoothed_cross_entropy.py`) do; transformers'
`LabelSmoother` spreads eps over all V classes instead. Like fairseq, and unlike t2t, we do not subtract the smoothed
distribution's entropy, so eps = 0 is the plain cross-entropy (the loss of the model's own `forward(labels=...)`).

The objective is a training setting, not a property of the model: the recipe's `label_smoothing` key reaches
`VaswaniTrainer(label_smoothing=...)` and nothing else. Nothing here reads a tensor back to the host: a training step
on a GPU runs without a device-to-host synchronisation (and `torch.compile` traces it without a graph break).

Chunked loss (`loss_chunk_tokens`): the logits of a micro-batch are (target tokens x V); at the paper's 25k tokens and
V = 37k that is 3.7 GB in fp32, plus as much again for their gradient. `chunked_label_smoothed_nll` computes the same
loss from the decoder's last hidden states and the output projection's weight, `chunk` tokens at a time, so only one
chunk's logits exist at once. It pays where memory binds (a GPU: a larger micro-batch fits); on the CPU it only
costs a Python loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..modeling_vaswani import IGNORE_INDEX, per_target_token

PAPER_LABEL_SMOOTHING = 0.1  # eps_ls, Section 5.4


def label_smoothed_nll(logits: torch.Tensor, labels: torch.Tensor, epsilon: float,
                       ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy over the non-ignored targets, and their count, both as tensors.

    PyTorch's fused `cross_entropy(label_smoothing=e)` gives the target 1 - e + e/V and the others e/V: with
    e = epsilon * V / (V - 1) that is exactly eps/(V-1) on the other classes, without materialising the
    log-probabilities. Computed from fp32 logits whatever the autocast precision.

    logits: (B, T, V); labels: (B, T) with `ignore_index` at padding. Returns (scalar sum, scalar int64 count).
    """
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
    """sum over tokens of label_smoothed_nll(hidden @ weight.T), `chunk` rows at a time; gradients computed in forward.

    Why this form, rather than recomputing each chunk's logits in backward (`torch.utils.checkpoint` per chunk, or a
    Function that re-runs the projection): the gradient of a scalar sum with respect to (hidden, weight) is all
    backward needs, and it is a (tokens x d) tensor and a (V x d) tensor, 19-76 MB for base/big, against the
    (chunk x V) logits. Computing it in forward, chunk by chunk (forward and backward of that chunk, then the chunk's
    logits are freed), costs the plain path's three (tokens x d x V) matmuls; recomputing in backward would cost
    four. Backward only scales the stored gradients by the incoming scalar. The loss of each chunk is the same
    `label_smoothed_nll` as the plain path (one definition of the smoothed target), autocast applies to the
    projection as it does to `lm_head`. When no gradient is needed (evaluation, `torch.no_grad`) nothing is stored.
    """

    @staticmethod
    def forward(ctx, hidden, weight, labels, epsilon, chunk, ignore_index):  # noqa: D102 (see the class docstring)
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        weight_leaf = weight.detach().requires_grad_(want_weight)  # its .grad accumulates over the chunks
        for start in range(0, hidden.shape[0], chunk):
            rows = hidden[start:start + chunk].detach().requires_grad_(want_hidden)
            with torch.enable_grad():
                loss, _ = label_smoothed_nll(nn.functional.linear(rows, weight_leaf), labels[start:start + chunk],
                                             epsilon, ignore_index)
            if want_hidden or want_weight:
                loss.backward()
                if want_hidden:
                    grad_hidden[start:start + chunk] = rows.grad
            total += loss.detach()
        ctx.save_for_backward(grad_hidden, weight_leaf.grad if want_weight else None)
        return total

    @staticmethod
    def backward(ctx, grad_total):  # noqa: D102
        grad_hidden, grad_weight = ctx.saved_tensors
        return (None if grad_hidden is None else grad_hidden * grad_total.to(grad_hidden.dtype),
                None if grad_weight is None else grad_weight * grad_total.to(grad_weight.dtype),
                None, None, None, None)


def chunked_label_smoothed_nll(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, epsilon: float,
                               chunk: int = 4096, ignore_index: int = IGNORE_INDEX
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """`label_smoothed_nll(hidden @ weight.T, labels, epsilon)` without materialising the (tokens x V) logits: at
    most `chunk` tokens' logits exist at once, in forward and backward (`_ChunkedProjectionLoss`). Same value and
    gradients as the plain path up to floating-point summation order.

    hidden: (B, T, d) decoder outputs; weight: (V, d) bias-free output projection; labels: (B, T). Padded positions
    (`ignore_index`) are computed and contribute zero: the shapes stay static, nothing is read back to the host.
    Returns (scalar sum, scalar int64 count)."""
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    if hidden.shape[-1] != weight.shape[-1] or hidden.shape[:-1] != labels.shape:
        raise ValueError(f"chunked loss: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)} and labels "
                         f"{tuple(labels.shape)} do not match ((B, T, d), (V, d), (B, T))")
    total = _ChunkedProjectionLoss.apply(hidden.reshape(-1, hidden.shape[-1]), weight, labels.reshape(-1),
                                         epsilon, int(chunk), ignore_index)
    return total, (labels != ignore_index).sum()


def _pass_through(hidden_states: torch.Tensor) -> torch.Tensor:
    return hidden_states


@contextlib.contextmanager
def output_projection_deferred(model: nn.Module) -> Iterator[nn.Linear]:
    """Inside the block, `model`'s output projection returns its input: `model(...).logits` are the decoder's last
    hidden states (B, T, d), for `chunked_label_smoothed_nll` with the projection's weight. Yields the projection.

    The least invasive way to skip the (tokens x V) matmul of `forward` without a second model entry point: the
    model is still called through whatever wraps it (DDP's gradient hooks, `torch.compile`). The projection must be
    a bias-free `nn.Linear` (ours: `lm_head`, tied to the embeddings, Section 3.4; the sqrt(d_model) scale is on the
    embeddings only, and there is no `final_logits_bias`)."""
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
    """The Trainer's `compute_loss_func`: the label-smoothed sum over the batch's target tokens divided by the tokens
    of the whole update (`num_items_in_batch`, counted by transformers over accumulation steps and processes), so that
    gradient accumulation gives the same update as one large batch (the model's `per_target_token`).

    With `chunk_tokens` > 0 and the model's `output_projection`, `outputs.logits` must be the decoder's hidden states
    (the model called inside `output_projection_deferred`, as `VaswaniTrainer.compute_loss` does) and the loss is
    `chunked_label_smoothed_nll` over chunks of that many tokens."""

    def __init__(self, epsilon: float = PAPER_LABEL_SMOOTHING, chunk_tokens: int = 0,
                 output_projection: nn.Linear | None = None):
        if chunk_tokens and output_projection is None:
            raise ValueError("a chunked loss (chunk_tokens > 0) needs the model's output_projection")
        self.epsilon, self.chunk_tokens, self.output_projection = epsilon, chunk_tokens, output_projection

    def __call__(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        if self.chunk_tokens:
            loss_sum, _ = chunked_label_smoothed_nll(outputs.logits, self.output_projection.weight, labels,
                                                     self.epsilon, self.chunk_tokens)
        else:
            loss_sum, _ = label_smoothed_nll(outputs.logits, labels, self.epsilon)
        return per_target_token(loss_sum, labels, num_items_in_batch)


__all__ = ["PAPER_LABEL_SMOOTHING", "label_smoothed_nll", "chunked_label_smoothed_nll", "output_projection_deferred",
           "LabelSmoothedLoss"]
