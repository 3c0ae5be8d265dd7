"""Build Section 5.3's optimizer, Adam(beta1=0.9, beta2=0.98, eps=1e-9), and its learning rate, exactly:

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5),   warmup_steps = 4000.

It is written here because transformers' `inverse_sqrt` schedule, even with the right peak, runs one step behind this
formula (its first update gets lr 0).
"""

from __future__ import annotations

from functools import partial

import torch


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
