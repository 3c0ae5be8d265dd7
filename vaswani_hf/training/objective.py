"""The training objective (Section 5.4): label-smoothed cross-entropy, "label smoothing of value eps_ls = 0.1".

The target keeps probability 1 - eps and the other V - 1 classes share eps equally, as tensor2tensor v1
(`smoothing_cross_entropy`) and fairseq (`criterions/label_smoothed_cross_entropy.py`) do; transformers'
`LabelSmoother` spreads eps over all V classes instead. Like fairseq, and unlike t2t, we do not subtract the smoothed
distribution's entropy, so eps = 0 is the plain cross-entropy (the loss of the model's own `forward(labels=...)`).

The objective is a training setting, not a property of the model: the recipe's `label_smoothing` key reaches
`VaswaniTrainer(label_smoothing=...)` and nothing else. Nothing here reads a tensor back to the host: a training step
on a GPU runs without a device-to-host synchronisation (and `torch.compile` traces it without a graph break).
"""

from __future__ import annotations

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


class LabelSmoothedLoss:
    """The Trainer's `compute_loss_func`: the label-smoothed sum over the batch's target tokens divided by the tokens
    of the whole update (`num_items_in_batch`, counted by transformers over accumulation steps and processes), so that
    gradient accumulation gives the same update as one large batch (the model's `per_target_token`)."""

    def __init__(self, epsilon: float = PAPER_LABEL_SMOOTHING):
        self.epsilon = epsilon

    def __call__(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        loss_sum, _ = label_smoothed_nll(outputs.logits, labels, self.epsilon)
        return per_target_token(loss_sum, labels, num_items_in_batch)


__all__ = ["PAPER_LABEL_SMOOTHING", "label_smoothed_nll", "LabelSmoothedLoss"]
