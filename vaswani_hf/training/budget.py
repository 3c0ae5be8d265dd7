"""Decide how many tokens one micro-batch holds, so that an update holds Section 5.1's ~25000 source + 25000 target
tokens on any number of processes and any device, without editing the recipe:

    tokens per update = max_tokens_per_device x processes x gradient_accumulation_steps   (~ tokens_per_step)

With `max_tokens_per_device: auto` (the WMT recipes) each process must contribute ceil(tokens_per_step / processes)
tokens per update. If that exceeds what one micro-batch may hold on its device (`device_capacity`), it is split into
the fewest equal micro-batches that fit, and those are accumulated. One 80 GB GPU trains the base model with one
25k-token micro-batch per update, eight GPUs with 3,125 tokens each, and one 16 GiB GPU in fp32 accumulates three
micro-batches of 8,334 tokens on its own. The capacity is an estimate (below); a number in the recipe overrides it.

The memory model was measured on a CPU for the base model with fused Adam: peak resident memory was 1.86, 3.05 and
5.33 GB at 1,000, 2,000 and 4,000 tokens, i.e. about 0.7 GB + 1.15 MB per token. The model state takes 16 bytes per
parameter (fp32 weights, gradients and Adam's two moments). The activations per token are dominated by the output
layer over the vocabulary (logits, log-softmax and their gradients, which the loss keeps in fp32), plus the layers'
saved inputs, which bf16 halves. The estimate is conservative for the big model (1.8 MB per token against ~1.3 MB
measured).
"""

from __future__ import annotations

import math

import torch

from .recipe import check_length_fits  # noqa: F401 - plan.py uses this rule between budget and max_length.

MODEL_STATE_BYTES_PER_PARAMETER = 16
USABLE_FRACTION = 0.6  # Use this share of what the model state leaves; the rest is fragmentation, temporaries, CUDA.
CPU_TOKENS_CAP = 4096  # On a CPU larger micro-batches run no faster per token, and memory is shared.


def activation_bytes_per_token(config, bf16: bool = False) -> float:
    """Return the estimated training memory, in bytes, per padded token of a micro-batch (see the module docstring)."""
    layers = 16 * config.d_model * (config.num_encoder_layers + 1.5 * config.num_decoder_layers)
    layers += 2 * config.d_ff * (config.num_encoder_layers + config.num_decoder_layers)
    output = 3 * config.vocab_size * 4  # The loss keeps these in fp32 whatever the precision.
    return output + layers * (2 if bf16 else 4)


def device_memory_bytes(device: torch.device | str, local_processes: int = 1) -> int:
    """Return the memory in bytes that one process may use: its GPU's, or on a CPU its share of the machine's RAM."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    import psutil

    return psutil.virtual_memory().total // max(1, local_processes)


def device_capacity(config, num_parameters: int, memory_bytes: int, *, bf16: bool = False, cpu: bool = False) -> int:
    """Return how many tokens one micro-batch may hold: the memory the model state leaves, times USABLE_FRACTION,
    divided by the activations per token. The result is at most CPU_TOKENS_CAP on a CPU, and at least 256."""
    free = memory_bytes - MODEL_STATE_BYTES_PER_PARAMETER * num_parameters
    tokens = int(USABLE_FRACTION * max(free, 0) / activation_bytes_per_token(config, bf16))
    if cpu:
        tokens = min(tokens, CPU_TOKENS_CAP)
    return max(tokens, 256)


def split_update(tokens_per_step: int, world_size: int, capacity: int) -> tuple[int, int]:
    """Return one process's tokens per micro-batch and micro-batches per update: its share of the update,
    ceil(tokens_per_step / world_size), split into the fewest equal micro-batches of at most `capacity` tokens."""
    share = math.ceil(tokens_per_step / world_size)
    micro_batches = math.ceil(share / capacity)
    return math.ceil(share / micro_batches), micro_batches


def tokens_per_device(
    recipe,
    world_size: int,
    config=None,
    num_parameters: int | None = None,
    device: torch.device | str = "cpu",
    local_processes: int = 1,
    low_precision: bool | None = None,
) -> tuple[int, int]:
    """Return a recipe's max_tokens_per_device and gradient_accumulation_steps on `world_size` processes of
    `device`.

    A number in the recipe is kept, and its accumulation is the recipe's (or, with "auto", enough micro-batches for
    `tokens_per_step`). `auto` derives both from `tokens_per_step`, the process count and the device's capacity for
    the model (`config`, `num_parameters`). `low_precision` says whether the run trains in bf16 or fp16, as its plan
    resolved `bf16: auto`; None reads the recipe's explicit bf16 or fp16 instead."""

    if recipe.max_tokens_per_device != "auto":
        budget = int(recipe.max_tokens_per_device)
        if recipe.gradient_accumulation_steps == "auto":
            return budget, max(1, math.ceil(recipe.tokens_per_step / (budget * world_size)))
        return budget, int(recipe.gradient_accumulation_steps)
    if config is None:
        config = recipe.config
    if num_parameters is None:
        num_parameters = approximate_parameters(config)
    device = torch.device(device)
    capacity = device_capacity(
        config,
        num_parameters,
        device_memory_bytes(device, local_processes),
        bf16=bool(recipe.bf16 is True or recipe.fp16) if low_precision is None else low_precision,
        cpu=device.type == "cpu",
    )
    return split_update(recipe.tokens_per_step, world_size, capacity)


def longest_training_pair(max_tokens: int, max_length: int | None) -> int:
    """Return the longest training pair the length filter keeps: `max_length`, which `recipe.check_length_fits` has
    checked to fit a micro-batch, or without one, what one micro-batch of `max_tokens` holds."""
    return max_tokens if max_length is None else max_length


def evaluation_budget(max_tokens: int, eval_max_tokens: int | None) -> int:
    """Return the padded tokens of an evaluation batch: `eval_max_tokens` where given (> 0), else the training
    micro-batch's `max_tokens`, which fits because evaluation keeps no gradients."""
    return eval_max_tokens if eval_max_tokens else max_tokens


def approximate_parameters(config) -> int:
    """Count the parameters of a VaswaniConfig without building the model (Table 3 counts 65M base, 213M big)."""
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * d * d
    feed_forward = 2 * d * f + d + f
    norm = 2 * d  # A LayerNorm has a gain and a bias.
    encoder = config.num_encoder_layers * (attention + feed_forward + 2 * norm)
    decoder = config.num_decoder_layers * (2 * attention + feed_forward + 3 * norm)
    embeddings = v * d * (1 if config.tie_word_embeddings else 3)
    return encoder + decoder + embeddings
