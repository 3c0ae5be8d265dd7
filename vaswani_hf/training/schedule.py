"""Section 5.3 "Optimizer": Adam(beta1=0.9, beta2=0.98, eps=1e-9) and the learning rate

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5),   warmup_steps = 4000.

Written here because no `lr_scheduler_type` of transformers gives the exact formula: `inverse_sqrt` with the right
peak is one step behind it and makes the first update with lr 0.
"""

from __future__ import annotations

from functools import partial

import torch


def paper_learning_rate(step: int, d_model: int, warmup_steps: int = 4000, multiplier: float = 1.0) -> float:
    """Section 5.3: lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5), times `multiplier`.

    `step` is the 1-based number of the update being made (step_num >= 1; the formula is undefined at 0).
    """
    if step < 1:
        raise ValueError(f"step_num starts at 1, got {step}")
    return multiplier * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def paper_lr_lambda(scheduler_step: int, warmup_steps: int) -> float:
    """Factor for `LambdaLR` whose base lr is `multiplier * d_model^-0.5`.

    The one-step lag: `LambdaLR` evaluates its lambda at 0 when built and after each `scheduler.step()`; the Trainer
    calls `optimizer.step()` then `scheduler.step()`. So the k-th update (k = 1, 2, ...) runs with lambda(k - 1).
    We evaluate the formula at k = scheduler_step + 1, which makes the k-th update use exactly lrate(step_num = k);
    this is also tensor2tensor v1's choice (its "noam" schedule uses global_step + 1). transformers' built-in
    `inverse_sqrt` instead makes the first update use lr 0 and is one step behind the formula.
    """
    step_num = scheduler_step + 1
    return min(step_num ** -0.5, step_num * warmup_steps ** -1.5)


def get_paper_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int = 4000, last_epoch: int = -1):
    """`LambdaLR` implementing Section 5.3 exactly (see :func:`paper_lr_lambda`). The optimizer's lr must be
    `multiplier * d_model^-0.5` (what :class:`VaswaniTrainer` sets through `learning_rate`).

    A `functools.partial` of a module-level function (not a lambda), so the scheduler pickles and its state dict is
    the plain step count, which `Trainer` saves and restores on resume.
    """
    return torch.optim.lr_scheduler.LambdaLR(optimizer, partial(paper_lr_lambda, warmup_steps=warmup_steps),
                                             last_epoch=last_epoch)


def paper_base_lr(d_model: int, multiplier: float = 1.0) -> float:
    return multiplier * d_model ** -0.5


def paper_optimizer_cls_and_kwargs(args, fused: bool | None = None) -> tuple[type, dict]:
    """`Trainer(optimizer_cls_and_kwargs=...)`: Section 5.3's Adam, built from the `TrainingArguments` `args` (their
    `learning_rate`, `adam_beta1`, `adam_beta2` and `adam_epsilon`, as transformers builds its own optimizers: the
    arguments state them once, and what the Trainer reports is what the optimizer uses). torch's `Adam` (not
    `AdamW`): the paper has no weight decay, and L2 decay (`weight_decay`, which the Trainer puts in the parameter
    groups), if a recipe asks for it, is Adam's coupled kind. `fused`: torch's fused kernel or not (None: decided
    from the parameters, `with_fused_adam`)."""
    kwargs = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
    return torch.optim.Adam, kwargs if fused is None else {**kwargs, "fused": fused}


# Device types given the fused Adam kernel: CPU is tested here; CUDA, where torch ships the same kernel, only on a GPU.
FUSED_ADAM_DEVICE_TYPES = ("cpu", "cuda")


def with_fused_adam(optimizer_kwargs: dict, model: torch.nn.Module) -> dict:
    """Add `fused=True` to Adam's kwargs when every trainable parameter can take torch's fused kernel.

    Same update as the default implementation, to float rounding (`tests/test_training_schedule.py` checks 1e-6), but
    one kernel for all parameters: on CPU torch otherwise takes its per-parameter loop (16.5 ms per update against
    3.1 ms for the 6M-parameter Multi30k model, benchmarks/bench_adam.py). `fused=True` raises on other device types
    and on parameter kinds it does not handle, so anything unusual (DTensors of FSDP2, integer or mixed devices) keeps
    torch's default. A recipe that sets `fused` or `foreach` itself is left alone.
    """
    if "fused" in optimizer_kwargs or "foreach" in optimizer_kwargs:
        return optimizer_kwargs
    params = [p for p in model.parameters() if p.requires_grad]
    if not params or any(type(p) is not torch.nn.Parameter and type(p) is not torch.Tensor for p in params):
        return optimizer_kwargs
    devices = {p.device.type for p in params}
    if len(devices) != 1 or devices.pop() not in FUSED_ADAM_DEVICE_TYPES or not all(
            p.is_floating_point() for p in params):
        return optimizer_kwargs
    return {**optimizer_kwargs, "fused": True}
