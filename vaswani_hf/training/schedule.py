"""Section 5.3 "Optimizer": Adam(beta1=0.9, beta2=0.98, eps=1e-9) and the learning rate

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5),   warmup_steps = 4000,

exactly: transformers' `inverse_sqrt` with the right peak is one step behind it (the first update gets lr 0).
"""

from __future__ import annotations

from functools import partial

import torch


def paper_learning_rate(step: int, d_model: int, warmup_steps: int = 4000, multiplier: float = 1.0) -> float:
    """Section 5.3's lrate of update `step` (1-based: undefined at 0), times `multiplier`."""
    if step < 1:
        raise ValueError(f"step_num starts at 1, got {step}")
    return paper_base_lr(d_model, multiplier) * paper_lr_lambda(step - 1, warmup_steps)


def paper_lr_lambda(scheduler_step: int, warmup_steps: int) -> float:
    """`LambdaLR`'s factor (base lr `multiplier * d_model^-0.5`). The k-th update runs with lambda(k - 1) (the
    scheduler steps after the optimizer), so the formula is evaluated at scheduler_step + 1, as t2t v1's "noam"."""
    step_num = scheduler_step + 1
    return min(step_num**-0.5, step_num * warmup_steps**-1.5)


def get_paper_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int = 4000, last_epoch: int = -1):
    """`LambdaLR` of Section 5.3 for an optimizer whose lr is `multiplier * d_model^-0.5`; a `partial` (not a lambda)
    so that it pickles and its state is the step count the Trainer saves and resumes."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(paper_lr_lambda, warmup_steps=warmup_steps), last_epoch=last_epoch
    )


def paper_base_lr(d_model: int, multiplier: float = 1.0) -> float:
    return multiplier * d_model**-0.5


def paper_optimizer_cls_and_kwargs(args, fused: bool | None = None) -> tuple[type, dict]:
    """`Trainer(optimizer_cls_and_kwargs=...)`: Section 5.3's Adam (not AdamW: the paper has no decay) from the
    `TrainingArguments`' lr, betas, eps; `fused`: the plan's choice for the device (None: torch's default)."""
    kwargs = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
    return torch.optim.Adam, kwargs if fused is None else {**kwargs, "fused": fused}


# Device types given the fused Adam kernel: CPU is tested here; CUDA, where torch ships the same kernel, only on a GPU.
FUSED_ADAM_DEVICE_TYPES = ("cpu", "cuda")


def with_fused_adam(optimizer_kwargs: dict, model: torch.nn.Module) -> dict:
    """`fused=True` added to Adam's kwargs when every trainable parameter can take torch's fused kernel (same update to
    rounding, CPU 3.1 vs 16.5 ms per Multi30k update); FSDP2 DTensors, mixed devices, given `fused`/`foreach`: as is."""
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
