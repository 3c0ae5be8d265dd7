"""Plan a run: decide once, before any work, what the recipe means on this machine.

`plan_run(recipe)` reads the recipe (already checked: `vaswani_hf.training.recipe`) together with the world it runs
in (processes, device, memory) and the file system, and returns a frozen `RunPlan` that every later station only
reads. The plan refers to the recipe and copies none of its keys: a station reads a key where the recipe holds it
(`plan.recipe.optimization.warmup_steps`), and the plan holds only what this machine decides:

- the process layout (`World`: processes, rank, device), read from the launcher's variables as Accelerate reads them;
- the training precision (the recipe's `bf16`, with `auto` resolved for this device and model);
- the tokens of a training micro-batch and the micro-batches per update, the evaluation batch's budget and the longest
  training pair kept (Section 5.1), below;
- how batches travel to the device (`DataPath`), below, and whether Adam runs torch's fused kernel;
- the files: each split's source (`vaswani_hf.training.data`), the tokenizer and export folders, checked by
  `vaswani_hf.io.check_paths`, which refuses an output_dir or export_dir that is, contains or lies inside an input,
  and what happens to the output folder: new, resume, overwrite, score, or nothing for a finished run (`preflight`);
- the result of the device checks, which confirm that the precision and the distributed strategy asked for exist
  here and that the model fits.

`RunPlan.lock()` then takes the output folder for this run alone. The CLI plans once (`--check` and the run alike)
and hands the plan to `run_training`.

Token budgets. An update holds Section 5.1's ~25000 source + 25000 target tokens on any number of processes and any
device, without editing the recipe:

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

The data path. On CUDA the step runs asynchronously, so collating with 0 workers is free; what matters is the copy,
which overlaps the step when it comes from pinned memory with `non_blocking=True`. The number of workers is the
recipe's: 0 in the bundled recipes, because batch statistics are counted in the process that collates. A value of -1
chooses 2 persistent workers per process on CUDA where the CPUs allow, each prefetching 4 batches. On the CPU nothing
changes.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType

import torch
from accelerate.utils import get_int_from_env, parse_flag_from_env

from .. import io, precision
from ..metrics import check_sacrebleu_tokenizer
from . import preflight
from .data import check_data_dir, check_read_once, resolve_dir, split_sources
from .objective import FUSED_ADAM_DEVICE_TYPES
from .recipe import Recipe, RecipeError, check_length_fits

logger = logging.getLogger(__name__)

# The launchers' variables as Accelerate reads them: torchrun's and accelerate launch's, then MPI's for multi-CPU runs.
_PROCESSES = ["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"]
_RANK = ["RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"]
_LOCAL_PROCESSES = ["LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"]
_LOCAL_RANK = ["LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"]
# The sharding strategies an Accelerate launch config may ask for; with them, parameters are not plain tensors.
_SHARDING = {"FSDP": "ACCELERATE_USE_FSDP", "DeepSpeed": "ACCELERATE_USE_DEEPSPEED"}


@dataclass(frozen=True)
class World:
    """Describe the processes a run is launched on, as one of them sees them."""

    processes: int = 1  # The run's processes on all machines.
    index: int = 0  # this process's rank
    local_processes: int = 1  # The processes on this machine, which share its RAM on a CPU.
    device: str = "cpu"  # this process's device: "cpu" or "cuda:N"

    @classmethod
    def from_environment(cls, recipe: Recipe) -> World:
        """Read the world from the launcher's environment without starting a process group; `run_training` later
        checks that Accelerate's world agrees (`check_state`)."""
        processes = get_int_from_env(_PROCESSES, 1)
        device = "cpu" if use_cpu(recipe, processes) else f"cuda:{get_int_from_env(_LOCAL_RANK, 0)}"
        return cls(processes, get_int_from_env(_RANK, 0), get_int_from_env(_LOCAL_PROCESSES, processes), device)

    @property
    def cpu(self) -> bool:
        return self.device.startswith("cpu")

    def check_state(self, state) -> None:
        """Check that Accelerate's `PartialState`, started by the run, is the world this plan was made for, and raise
        RecipeError otherwise."""
        seen = (state.num_processes, state.process_index, torch.device(state.device).type)
        if seen != (self.processes, self.index, torch.device(self.device).type):
            raise RecipeError(
                f"the launched processes ({seen[0]} processes, this one {seen[1]}, on {seen[2]}) are not "
                f"the ones the run was planned for ({self.processes}, {self.index}, {self.device}): "
                "launch with torchrun or accelerate launch, with consistent distributed variables"
            )


def use_cpu(recipe: Recipe, processes: int = 1) -> bool:
    """Return whether the run trains on the CPU: it does when the recipe asks, when `ACCELERATE_USE_CPU` is set, when
    several processes were launched on a machine without CUDA, or when there is no accelerator at all.

    Accelerate's `PartialState(cpu=False)` would otherwise give every process of `accelerate launch --multi_gpu
    --num_processes 2` on a CPU-only machine its own world of size 1 (independent rank-0 runs); with cpu=True they
    form one MULTI_CPU (gloo) group. On a machine with no accelerator, `TrainingArguments` refuses `bf16=True` unless
    `use_cpu` is set, although bf16 autocast on the CPU is supported."""
    has_accelerator = torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    return bool(
        recipe.run.use_cpu
        or parse_flag_from_env("ACCELERATE_USE_CPU")
        or (processes > 1 and not torch.cuda.is_available())
        or not has_accelerator
    )


# ---------------------------------------------------------------------------------------------------------------------
# Token budgets (see the module docstring)
# ---------------------------------------------------------------------------------------------------------------------


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
    recipe: Recipe,
    world_size: int,
    device: torch.device | str = "cpu",
    local_processes: int = 1,
    low_precision: bool = False,
) -> tuple[int, int]:
    """Return a recipe's max_tokens_per_device and gradient_accumulation_steps on `world_size` processes of
    `device`.

    A number in the recipe is kept, and its accumulation is the recipe's (or, with "auto", enough micro-batches for
    `tokens_per_step`). `auto` derives both from `tokens_per_step`, the process count and the device's capacity for
    the recipe's model. `low_precision` says whether the run trains in bf16 or fp16, as its plan resolved
    `bf16: auto`."""
    opt = recipe.optimization
    if opt.max_tokens_per_device != "auto":
        budget = int(opt.max_tokens_per_device)
        if opt.gradient_accumulation_steps == "auto":
            return budget, max(1, math.ceil(opt.tokens_per_step / (budget * world_size)))
        return budget, int(opt.gradient_accumulation_steps)
    device = torch.device(device)
    capacity = device_capacity(
        recipe.model,
        approximate_parameters(recipe.model),
        device_memory_bytes(device, local_processes),
        bf16=low_precision,
        cpu=device.type == "cpu",
    )
    return split_update(opt.tokens_per_step, world_size, capacity)


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


# ---------------------------------------------------------------------------------------------------------------------
# The data path (see the module docstring)
# ---------------------------------------------------------------------------------------------------------------------


AUTO = -1  # This dataloader_num_workers value chooses by device.
CUDA_WORKERS = 2  # Workers per process: collation is light, and two keep a batch ready while another is pinned.
CUDA_PREFETCH = 4  # Batches queued per worker (torch's default is 2).


@dataclass(frozen=True)
class DataPath:
    """Hold the DataLoader settings of a run; `training_arguments` names them as `Seq2SeqTrainingArguments` does."""

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    non_blocking: bool = False

    def training_arguments(self) -> dict:
        values = asdict(self)
        non_blocking = values.pop("non_blocking")
        args = {f"dataloader_{k}": v for k, v in values.items()}
        if non_blocking:
            args["accelerator_config"] = {"non_blocking": True}
        return args


def choose_data_path(
    device: str,
    num_workers: int = 0,
    *,
    processes: int = 1,
    cpu_count: int | None = None,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
) -> DataPath:
    """Return the data path for `device` ("cpu", "cuda:0", ...) and `processes` on this machine. A value of -1 or None
    is chosen here; other values are kept. Only the device's name is read, not the hardware. The values are the
    recipe's, checked where the recipe is built (`dataloader_num_workers` and its neighbours)."""
    cuda = device.split(":")[0] == "cuda"
    if num_workers == AUTO:
        spare = (cpu_count or os.cpu_count() or 1) // max(1, processes) - 1  # One core per process runs the step.
        num_workers = min(CUDA_WORKERS, max(0, spare)) if cuda else 0
    if prefetch_factor is None and cuda and num_workers > 0:
        prefetch_factor = CUDA_PREFETCH
    return DataPath(
        num_workers=num_workers,
        pin_memory=cuda if pin_memory is None else pin_memory,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,  # torch refuses it without workers.
        persistent_workers=cuda and num_workers > 0,
        non_blocking=cuda and (cuda if pin_memory is None else pin_memory),  # A non-blocking copy needs pinned memory.
    )


# ---------------------------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    """Hold the recipe and what this machine decides for it, resolved once (see the module docstring)."""

    recipe: Recipe  # every key of the run, as read and checked
    world: World  # the process layout
    output: preflight.OutputDecision  # new, resume, overwrite, score or finished
    sources: MappingProxyType  # each split's Source by name (train, valid, test), or None
    tokenizer_dir: Path  # the shared BPE's folder: tokenizer_path, or OUTPUT_DIR/tokenizer (trained when missing)
    export_folder: Path  # the Hub-ready folder (export_dir, or OUTPUT_DIR/hub)
    precision: precision.Choice  # the training precision and why (bf16: auto resolved for this device and model)
    max_tokens: int  # padded source (and target) tokens of a training micro-batch, per process
    accumulation: int  # micro-batches per optimizer update
    eval_tokens: int  # padded tokens of an evaluation batch (eval_max_tokens, or else max_tokens)
    longest_pair: int  # Drop training pairs with a side of more BPE tokens than this (max_length, or max_tokens).
    data_path: DataPath  # how batches travel to the device
    fused_adam: bool  # Adam runs torch's fused kernel, one for all parameters

    @property
    def output_dir(self) -> Path:
        return Path(self.recipe.run.output_dir)

    @property
    def tokens_per_update(self) -> int:
        """Return max_tokens x processes x accumulation (the paper's ~25,000 source + target tokens)."""
        return self.max_tokens * self.world.processes * self.accumulation

    @property
    def bf16(self) -> bool:
        return self.precision.name == "bf16"

    @property
    def fp16(self) -> bool:
        return self.precision.name == "fp16"

    def lock(self) -> io.FolderLock:
        """Take this run's hold on its output folder, creating it if needed and marking it as a run's, while the run
        writes."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        io.mark(self.output_dir, preflight.TRAINING_RUN)  # Marked first: a full disk leaves no descriptor open.
        return io.FolderLock(self.output_dir, "output_dir").acquire()

    def describe(self) -> str:
        budget = (
            f"{self.max_tokens} tokens/device x {self.world.processes} processes x {self.accumulation} "
            f"accumulation = {self.tokens_per_update} tokens per update"
        )
        return f"output_dir {self.output_dir}: {self.output.describe()}; {budget}; {self.precision.line()}"


def plan_run(recipe: Recipe, *, overwrite: bool = False, world: World | None = None) -> RunPlan:
    """Resolve `recipe` on this machine and file system and return its plan (see the module docstring). Anything that
    would fail later raises a UsageError now, one line naming the key or path. `world` is the process layout (by
    default, the launcher's)."""
    world = world or World.from_environment(recipe)
    check_devices(recipe, world)
    # The BLEU tokenizer's packages are checked here, before the data is read: sacreBLEU would first import them at
    # the first validation, or when the test set is scored after training.
    check_sacrebleu_tokenizer(recipe.evaluation.bleu_tokenize, "bleu_tokenize")
    check_data_dir(recipe)
    sources = split_sources(recipe)
    for source in sources.values():
        if source is not None:
            source.check()
    check_read_once(sources, world.processes)
    run, data, opt = recipe.run, recipe.data, recipe.optimization
    out = Path(run.output_dir)
    export = Path(run.export_dir) if run.export_dir else out / "hub"
    tokenizer_path = recipe.tokenizer.tokenizer_path
    tokenizer_dir = resolve_dir(tokenizer_path) if tokenizer_path else out / "tokenizer"
    inputs = {name: path for source in sources.values() if source is not None for name, path in source.files().items()}
    if tokenizer_path:
        inputs["tokenizer_path"] = tokenizer_dir
    # The recipe file is an input: one kept in the run's folder would be replaced (recipe.yaml) or left among a new
    # run's files.
    if recipe.file:
        inputs["--recipe"] = Path(recipe.file)
    # The one output guard checks each output against the inputs before anything looks at the outputs' contents.
    # Each is checked alone, since export_dir may lie inside output_dir (preflight decides whether it may).
    for name, path in {"output_dir": out, "export_dir": export}.items():
        io.check_paths(inputs, {name: path})
    if tokenizer_path:
        preflight.check_tokenizer_path(tokenizer_dir, tokenizer_path)
    output = preflight.decide_output_dir(
        recipe, out, overwrite=overwrite, processes=world.processes, tokenizer_dir=tokenizer_dir
    )
    preflight.check_export_dir(export, out, overwrite=overwrite or run.resume)
    choice = training_precision(recipe, world)
    max_tokens, accumulation = tokens_per_device(
        recipe,
        world.processes,
        device=world.device,
        local_processes=world.local_processes,
        low_precision=choice.name != "fp32",
    )
    check_length_fits(max_tokens, data.max_length, auto=opt.max_tokens_per_device == "auto")
    return RunPlan(
        recipe=recipe,
        world=world,
        output=output,
        sources=MappingProxyType(dict(sources)),
        tokenizer_dir=tokenizer_dir,
        export_folder=export,
        precision=choice,
        max_tokens=max_tokens,
        accumulation=accumulation,
        eval_tokens=evaluation_budget(max_tokens, opt.eval_max_tokens),
        longest_pair=longest_training_pair(max_tokens, data.max_length),
        data_path=choose_data_path(
            world.device,
            run.dataloader_num_workers,
            processes=world.local_processes,
            pin_memory=run.dataloader_pin_memory,
            prefetch_factor=run.dataloader_prefetch_factor,
        ),
        fused_adam=fused_adam(world),
    )


def training_precision(recipe: Recipe, world: World) -> precision.Choice:
    """Return the recipe's `bf16` resolved for this run. true and false are kept as given. `auto`
    (`precision.choose_training_bf16`) means bf16 on a CUDA GPU with bf16, or on a CPU with bf16 matrix units for a
    model that reaches that kind's size threshold (`precision.BF16_MIN_PARAMETERS`), and fp32 otherwise. With
    `fp16: true` the answer is fp16."""
    if recipe.run.fp16:
        return precision.Choice("fp16", "fp16", "fp16: true")
    parameters = approximate_parameters(recipe.model)
    return precision.choose_training_bf16(recipe.run.bf16, precision.hardware_of(world.device), parameters)


def fused_adam(world: World) -> bool:
    """Return whether Section 5.3's Adam uses torch's fused kernel: where torch has it for this device and the
    parameters stay plain tensors (not sharded by FSDP or DeepSpeed). It is the same update up to float rounding, in
    one kernel for all parameters."""
    return torch.device(world.device).type in FUSED_ADAM_DEVICE_TYPES and not any(
        parse_flag_from_env(flag) for flag in _SHARDING.values()
    )


def check_devices(recipe: Recipe, world: World) -> None:
    """Check that the precision and the distributed strategy asked for exist on this device, and that the model
    fits."""

    if recipe.run.fp16 and world.cpu:
        raise RecipeError(
            "fp16: fp16 mixed precision needs a CUDA GPU and this run is on the CPU; use bf16 (CPU autocast) or fp32"
        )
    for strategy, flag in _SHARDING.items():
        if world.cpu and parse_flag_from_env(flag):
            raise RecipeError(
                f"{strategy} was asked for (the accelerate launch config sets {flag}) but this run is on "
                f"the CPU, where Accelerate runs plain DDP instead: launch on GPUs, or without the "
                f"{strategy} config (accelerate_configs/README.md)"
            )
    check_model_fits(recipe, world)


def check_model_fits(recipe: Recipe, world: World) -> None:
    """Refuse a model whose weights, gradients and Adam moments alone (16 bytes a parameter) exceed the memory of this
    process's device: it would otherwise be killed for memory after minutes of data preparation."""
    model = recipe.model
    parameters = approximate_parameters(model)
    needed = MODEL_STATE_BYTES_PER_PARAMETER * parameters
    available = device_memory_bytes(world.device, world.local_processes)
    if needed > available:
        raise RecipeError(
            f"the model ({parameters / 1e6:,.0f}M parameters: d_model {model.d_model}, d_ff "
            f"{model.d_ff}, {model.num_encoder_layers}+{model.num_decoder_layers} layers, vocabulary "
            f"{model.vocab_size:,}) needs {needed / 2**30:,.1f} GiB for weights, gradients and Adam, "
            f"more than the {available / 2**30:,.1f} GiB of {world.device}; choose a smaller model"
        )
