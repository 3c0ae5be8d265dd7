"""State what training minimises and how: Section 5.4's label-smoothed cross-entropy, and Section 5.3's Adam with its
learning-rate formula.

The objective ("label smoothing of value eps_ls = 0.1") is not transformers' `LabelSmoother`, which spreads eps over all V classes. Here the target keeps 1 - eps and the
other V - 1 classes share eps, as in t2t v1 and fairseq. The smoothed distribution's entropy is not subtracted, so
with eps = 0 the loss equals the model's own `forward(labels=...)` loss. Nothing is read back to the host, so the loss
causes no device sync and no graph break under `torch.compile`.

`chunked_label_smoothed_nll` computes the same loss `chunk` tokens at a time from the hidden states and the output
projection's weight, because whole logits are too large: those of a 25k-token micro-batch at V = 37k take 3.7 GB in
fp32, and their gradient as much again.

The optimizer is Adam(beta1=0.9, beta2=0.98, eps=1e-9), and its learning rate is, exactly:

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5),   warmup_steps = 4000.

It is written here because transformers' `inverse_sqrt` schedule, even with the right peak, runs one step behind this
formula (its first update gets lr 0).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import torch
from torch import nn

from ..modeling_vaswani import IGNORE_INDEX, per_target_token

PAPER_LABEL_SMOOTHING = 0.1  # eps_ls, Section 5.4


def label_smoothed_nll(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, ignore_index: int = IGNORE_INDEX
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the summed label-smoothed cross-entropy of the targets that are not ignored, and their count.

    `logits` is (B, T, V) and `labels` (B, T); the loss is computed from fp32 logits. torch's
    `cross_entropy(label_smoothing=e)` gives each other class e/V, so passing e = eps * V / (V - 1) gives them
    eps/(V-1), as intended, without materialising the log-probabilities."""
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
    """Sum `label_smoothed_nll(hidden @ weight.T)` over the tokens, `chunk` rows at a time.

    Forward also computes the gradients, chunk by chunk, so that the work is the plain path's three matrix products
    rather than four with recomputation; backward only scales the saved gradients by the incoming one."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, epsilon, chunk, ignore_index):  # noqa: D102 (see the class docstring)
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        weight_leaf = weight.detach().requires_grad_(want_weight)  # Its .grad accumulates over the chunks.
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
    """Return what `label_smoothed_nll(hidden @ weight.T, labels, epsilon)` returns, with at most `chunk` tokens'
    logits in memory at once.

    The value and the gradients are the same up to summation order. Padded positions are computed too and contribute
    zero, so that shapes stay static. It raises a ValueError if `chunk` is not positive or if the shapes of `hidden`
    (B, T, d), `weight` (V, d) and `labels` (B, T) do not match."""
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
    """Make the model's output projection (`lm_head`, Section 3.4) return its input inside the block, and yield it.

    Inside the block the model's `.logits` are therefore its hidden states, while the model is still called through
    its DDP or `torch.compile` wrappers. It raises a ValueError unless the projection is a bias-free nn.Linear."""
    head = model.get_output_embeddings()
    biased = getattr(head, "bias", None) is not None or getattr(model, "final_logits_bias", None) is not None
    if not isinstance(head, nn.Linear) or biased:
        raise ValueError(f"the chunked loss needs a bias-free nn.Linear output projection, got {type(head).__name__}")
    head.forward = _pass_through  # One shared function, so that a compiled model guards on it once, not every call.
    try:
        yield head
    finally:
        del head.forward


class LabelSmoothedLoss:
    """Compute the loss as the Trainer's `compute_loss_func`: the label-smoothed sum over the batch's targets, divided
    by the update's number of target tokens (`num_items_in_batch`).

    With `chunk_tokens` > 0, `outputs.logits` are hidden states (see `output_projection_deferred`) and the loss is
    computed in chunks through `output_projection`, which must then be given."""

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


# ---------------------------------------------------------------------------------------------------------------------
# Section 5.3: Adam and the learning-rate formula
# ---------------------------------------------------------------------------------------------------------------------


def paper_learning_rate(step: int, d_model: int, warmup_steps: int = 4000, multiplier: float = 1.0) -> float:
    """Return Section 5.3's lrate of update `step`, times `multiplier`. Steps count from 1; step 0 raises a
    ValueError, since the formula is undefined there."""
    if step < 1:
        raise ValueError(f"step_num starts at 1, got {step}")
    return paper_base_lr(d_model, multiplier) * paper_lr_lambda(step - 1, warmup_steps)


def paper_lr_lambda(scheduler_step: int, warmup_steps: int) -> float:
    """Return `LambdaLR`'s factor of the base lr `multiplier * d_model^-0.5`. The k-th update runs with lambda(k - 1),
    because the scheduler steps after the optimizer, so the formula is evaluated at scheduler_step + 1, as in t2t v1's
    "noam"."""
    step_num = scheduler_step + 1
    return min(step_num**-0.5, step_num * warmup_steps**-1.5)


def get_paper_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int = 4000, last_epoch: int = -1):
    """Return Section 5.3's schedule as a `LambdaLR` for an optimizer whose lr is `multiplier * d_model^-0.5`. Its
    factor is a `partial`, not a lambda, so that it pickles and its state is the step count the Trainer saves and
    resumes."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(paper_lr_lambda, warmup_steps=warmup_steps), last_epoch=last_epoch
    )


def paper_base_lr(d_model: int, multiplier: float = 1.0) -> float:
    return multiplier * d_model**-0.5


def paper_optimizer_cls_and_kwargs(args, fused: bool | None = None) -> tuple[type, dict]:
    """Return what `Trainer(optimizer_cls_and_kwargs=...)` takes: Section 5.3's Adam (not AdamW, since the paper has
    no weight decay) with the `TrainingArguments`' lr, betas and eps. `fused` is the plan's choice for the device;
    None leaves torch's default."""
    kwargs = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
    return torch.optim.Adam, kwargs if fused is None else {**kwargs, "fused": fused}


# The device types given the fused Adam kernel. CPU is tested here; CUDA, where torch ships the same kernel, on a GPU.
FUSED_ADAM_DEVICE_TYPES = ("cpu", "cuda")


def with_fused_adam(optimizer_kwargs: dict, model: torch.nn.Module) -> dict:
    """Return Adam's kwargs with `fused=True` added when every trainable parameter can take torch's fused kernel,
    which gives the same update up to rounding and took 3.1 instead of 16.5 ms per Multi30k update on a CPU.

    The kwargs come back unchanged when they already set `fused` or `foreach`, when a parameter is not a plain tensor
    (as FSDP2's DTensors), when the parameters span several devices or one without the kernel, or when one of them is
    not floating point."""
    if "fused" in optimizer_kwargs or "foreach" in optimizer_kwargs:
        return optimizer_kwargs
    params = [p for p in model.parameters() if p.requires_grad]
    if not params or any(type(p) is not torch.nn.Parameter and type(p) is not torch.Tensor for p in params):
        return optimizer_kwargs
    devices = {p.device.type for p in params}
    if (
        len(devices) != 1
        or devices.pop() not in FUSED_ADAM_DEVICE_TYPES
        or not all(p.is_floating_point() for p in params)
    ):
        return optimizer_kwargs
    return {**optimizer_kwargs, "fused": True}
