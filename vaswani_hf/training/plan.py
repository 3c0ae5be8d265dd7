"""Plan a run: resolve what a recipe means on this machine once, before any work.

`plan_run(recipe)` reads the recipe (already checked: `vaswani_hf.training.recipe`) together with the world it runs
in (processes, device, memory) and the file system, and returns a frozen `RunPlan` that every later step only reads
(`vaswani_hf.training.run` never sees the recipe). The plan holds:

- the process layout (`World`: processes, rank, device), read from the launcher's variables as Accelerate reads them;
- the data sources of each split, and the files the run reads and writes, checked by `vaswani_hf.io.check_paths`,
  which refuses an output_dir or export_dir that is, contains or lies inside an input;
- what happens to the output folder: new, resume, overwrite, score, or nothing for a finished run (`preflight`);
- both token budgets (the training micro-batch and the evaluation batch), the micro-batches per update and the
  length filter (Section 5.1), each rule written once in `budget`;
- the model's settings, the objective (Section 5.4), Adam and its learning rate (Section 5.3), meaning the formula's
  constant factor, the betas, epsilon and whether the fused kernel is used, the beam sizes, the checkpoints
  (Section 6.1) and the export;
- the training precision (the recipe's `bf16`, with `auto` resolved for this device and model);
- the result of the device checks, which confirm that the precision and the distributed strategy asked for exist
  here and that the model fits.

`RunPlan.lock()` then takes the output folder for this run alone. The CLI plans once (`--check` and the run alike)
and hands the plan to `run_training`.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import torch
import yaml
from accelerate.utils import get_int_from_env, parse_flag_from_env

from .. import io, precision
from ..configuration_vaswani import VaswaniConfig
from ..metrics import check_sacrebleu_tokenizer
from ..settings import GENERATION_SETTINGS, MODEL_SETTINGS
from . import preflight
from .budget import (
    MODEL_STATE_BYTES_PER_PARAMETER,
    approximate_parameters,
    check_length_fits,
    device_memory_bytes,
    evaluation_budget,
    longest_training_pair,
    tokens_per_device,
)
from .recipe import Recipe, RecipeError
from .schedule import FUSED_ADAM_DEVICE_TYPES, paper_base_lr
from .sources import check_data_dir, check_read_once, resolve_dir, split_sources

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
        recipe.use_cpu
        or parse_flag_from_env("ACCELERATE_USE_CPU")
        or (processes > 1 and not torch.cuda.is_available())
        or not has_accelerator
    )


@dataclass(frozen=True)
class DataPlan:
    """Hold Section 5.1's data: where each split comes from, which training pairs are kept, and the shared BPE."""

    sources: MappingProxyType  # Each split's Source by name (train, valid, test), or None.
    src_lang: str  # source language code (a column of every split)
    tgt_lang: str  # target language code
    max_length: int  # Drop training pairs with a side of more BPE tokens than this.
    max_length_ratio: float | None  # Drop training pairs of a greater length ratio (None keeps them).
    train_limit: int  # Use the first N training pairs (0 for all).
    valid_limit: int  # Score the first N dev pairs (0 for all).
    workers: int | None  # Processes of the tokenisation's Dataset.map (None for one).
    tokenizer_dir: Path  # the shared BPE's folder: tokenizer_path, or OUTPUT_DIR/tokenizer (trained when missing)
    vocab_size: int  # size of a BPE trained here
    bpe_min_frequency: int  # minimum pair frequency of a BPE merge trained here
    lowercase: bool  # a BPE trained here lowercases


@dataclass(frozen=True)
class BatchingPlan:
    """Hold Section 5.1's token batches and how they reach the device."""

    max_tokens: int  # padded source (and target) tokens of a training micro-batch, per process
    accumulation: int  # micro-batches per optimizer update
    tokens_per_update: int  # max_tokens x processes x accumulation (the paper's ~25,000 source + target tokens)
    eval_max_tokens: int  # padded tokens of an evaluation batch
    max_sentences: int | None  # At most this many pairs a micro-batch (None for no cap).
    pad_to_multiple_of: int | None  # Pad batch lengths to a multiple of this (None: to the longest).
    chosen: bool  # True if `auto` derived max_tokens and accumulation here.
    num_workers: int  # DataLoader workers asked for; -1 lets `data_path` choose.
    pin_memory: bool | None  # Pinned host memory asked for; None chooses by device.
    prefetch_factor: int | None  # Batches each worker loads ahead; None chooses by device.
    log_batches: bool  # write a hash of every training example seen, per process


@dataclass(frozen=True)
class ModelPlan:
    """Hold Table 3's model and Section 5.4's objective."""

    config: VaswaniConfig  # the recipe's model (`Recipe.config`), its values checked when the recipe was built
    label_smoothing: float  # eps_ls of the training objective
    loss_chunk_tokens: int  # Compute the loss this many target tokens at a time (0: at once).

    def config_for(self, vocab_size: int) -> VaswaniConfig:
        """Return a copy of `config` whose vocab_size is the tokenizer's `vocab_size`; nothing else changes.

        The new vocab_size is checked against its declared range, and the pad, bos, eos and decoder-start token ids
        are checked to lie below it."""
        config = copy.deepcopy(self.config)
        config.vocab_size = MODEL_SETTINGS["vocab_size"].check(vocab_size, "tokenizer")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            MODEL_SETTINGS[name].check(getattr(config, name), "tokenizer", vocab_size=vocab_size)
        return config


@dataclass(frozen=True)
class OptimizerPlan:
    """Hold Section 5.3's Adam, stated here once and handed to `TrainingArguments`, which builds the optimizer."""

    # The schedule multiplies learning_rate by min(step^-0.5, step x warmup^-1.5) at every update.
    learning_rate: float  # Adam's lr is lr_multiplier x d_model^-0.5, the formula's constant factor.
    betas: tuple[float, float]  # Adam's beta1, beta2
    eps: float  # Adam's epsilon
    weight_decay: float  # Coupled L2 decay; the paper has none.
    max_grad_norm: float  # Gradient clipping (0 for none).
    fused: bool  # Use torch's fused Adam kernel, one for all parameters (plain tensors on CPU or CUDA only).


@dataclass(frozen=True)
class SchedulePlan:
    """Hold how long the run trains, and Section 5.3's learning-rate formula."""

    max_steps: int  # Optimizer updates; with -1, num_train_epochs decides.
    num_train_epochs: float  # epochs, when max_steps is -1
    warmup_steps: int  # warmup_steps of the formula
    lr_multiplier: float  # the factor in front of the formula (the card states it)
    max_train_minutes: float  # Stop after this wall-clock budget (0 for none).
    logging_steps: int  # log loss and learning rate every N updates


@dataclass(frozen=True)
class EvaluationPlan:
    """Hold the validation during training and the final scores (Section 6)."""

    eval_steps: int  # Validate every N updates (0: only at the end).
    eval_on_start: bool  # validate before the first update (only with a dev set)
    eval_num_beams: int  # beam size of validation BLEU during training
    final_num_beams: int  # beam size of the final scores and example translations (test_num_beams, or the paper's)
    bleu_tokenize: str  # sacreBLEU's tokenizer; "none" for pre-tokenized references.
    translate_examples: tuple[str, ...]  # sentences translated and printed at the end


@dataclass(frozen=True)
class CheckpointPlan:
    """Hold Section 6.1's checkpoints and their average."""

    save_every_minutes: float  # Save every N minutes of training (0 turns it off).
    save_steps: int  # Save also every N updates (0 turns it off).
    keep_last: int  # Keep the last K checkpoints (0 keeps all).
    average_last: int  # Average the last N at the end (0 or 1: the final weights).


@dataclass(frozen=True)
class ExportPlan:
    """Hold the Hub-ready folder and what the run records of itself."""

    export_dir: Path  # the Hub-ready folder (export_dir, or OUTPUT_DIR/hub)
    recipe_name: str  # the recipe's name (its file's stem)
    recipe_text: str  # the full recipe as YAML, written as recipe.yaml beside the run and into the export
    dataset_name: str  # the training data as the model card names it


@dataclass(frozen=True)
class ProcessPlan:
    """Hold how each process runs: its seed, threads, precision, compilation and reporting."""

    seed: int  # It seeds the initialisation, dropout and batch order.
    torch_threads: int  # torch.set_num_threads per process (0: torch's default).
    bf16: bool  # bf16 mixed precision (the recipe's bf16, `auto` resolved for this device and model)
    fp16: bool  # fp16 mixed precision
    precision: str  # the precision and why, one line ("precision: bf16 (bf16: auto: this CPU ...)")
    torch_compile: bool  # the training step compiled with torch.compile
    report_to: tuple[str, ...]  # Trainer integrations; ("all",) is every one installed, () none.
    show_progress: bool  # progress bars


@dataclass(frozen=True)
class RunPlan:
    """Hold everything a run needs to know, resolved once (see the module docstring)."""

    world: World  # the process layout
    output_dir: Path  # checkpoints, logs, metrics and plots
    output: preflight.OutputDecision  # new, resume, overwrite, score or finished
    process: ProcessPlan
    data: DataPlan
    batching: BatchingPlan
    model: ModelPlan
    optimizer: OptimizerPlan
    schedule: SchedulePlan
    evaluation: EvaluationPlan
    checkpoints: CheckpointPlan
    export: ExportPlan

    def lock(self) -> io.FolderLock:
        """Take this run's hold on its output folder, creating it if needed and marking it as a run's, while the run
        writes."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        io.mark(self.output_dir, preflight.TRAINING_RUN)  # Marked first: a full disk leaves no descriptor open.
        return io.FolderLock(self.output_dir, "output_dir").acquire()

    def describe(self) -> str:
        b = self.batching
        budget = (
            f"{b.max_tokens} tokens/device x {self.world.processes} processes x {b.accumulation} "
            f"accumulation = {b.tokens_per_update} tokens per update"
        )
        return f"output_dir {self.output_dir}: {self.output.describe()}; {budget}; {self.process.precision}"


def plan_run(recipe: Recipe, *, overwrite: bool = False, world: World | None = None) -> RunPlan:
    """Resolve `recipe` on this machine and file system and return its plan (see the module docstring). Anything that
    would fail later raises a UsageError now, one line naming the key or path. `world` is the process layout (by
    default, the launcher's)."""
    world = world or World.from_environment(recipe)
    check_devices(recipe, world)
    check_data_dir(recipe)
    sources = split_sources(recipe)
    for source in sources.values():
        if source is not None:
            source.check()
    check_read_once(sources, world.processes)
    out = Path(recipe.output_dir)
    export = Path(recipe.export_dir) if recipe.export_dir else out / "hub"
    tokenizer_dir = resolve_dir(recipe.tokenizer_path) if recipe.tokenizer_path else out / "tokenizer"
    inputs = {name: path for source in sources.values() if source is not None for name, path in source.files().items()}
    if recipe.tokenizer_path:
        inputs["tokenizer_path"] = tokenizer_dir
    # The recipe file is an input: one kept in the run's folder would be replaced (recipe.yaml) or left among a new
    # run's files.
    if recipe.file:
        inputs["--recipe"] = Path(recipe.file)
    # The one output guard checks each output against the inputs before anything looks at the outputs' contents.
    # Each is checked alone, since export_dir may lie inside output_dir (preflight decides whether it may).
    for name, path in {"output_dir": out, "export_dir": export}.items():
        io.check_paths(inputs, {name: path})
    if recipe.tokenizer_path:
        preflight.check_tokenizer_path(tokenizer_dir, recipe.tokenizer_path)
    output = preflight.decide_output_dir(
        recipe, out, overwrite=overwrite, processes=world.processes, tokenizer_dir=tokenizer_dir
    )
    preflight.check_export_dir(export, out, overwrite=overwrite or recipe.resume)
    process = _process(recipe, world)
    max_tokens, accumulation = tokens_per_device(
        recipe,
        world.processes,
        device=world.device,
        local_processes=world.local_processes,
        low_precision=process.bf16 or process.fp16,
    )
    check_length_fits(max_tokens, recipe.max_length, auto=recipe.max_tokens_per_device == "auto")
    return RunPlan(
        world=world,
        output_dir=out,
        output=output,
        process=process,
        data=_data(recipe, sources, tokenizer_dir, max_tokens),
        batching=_batching(recipe, max_tokens, accumulation, world.processes),
        model=ModelPlan(recipe.config, recipe.label_smoothing, recipe.loss_chunk_tokens),
        optimizer=_optimizer(recipe, world),
        schedule=SchedulePlan(
            recipe.max_steps if recipe.max_steps > 0 else -1,
            recipe.num_train_epochs,
            recipe.warmup_steps,
            recipe.lr_multiplier,
            recipe.max_train_minutes,
            recipe.logging_steps,
        ),
        evaluation=_evaluation(recipe),
        checkpoints=CheckpointPlan(
            recipe.save_every_minutes, recipe.save_steps, recipe.keep_last, recipe.average_last
        ),
        export=_export(recipe, export),
    )


def _process(recipe: Recipe, world: World) -> ProcessPlan:
    names = tuple(name.strip() for name in recipe.report_to.split(",") if name.strip())
    report_to = () if names == ("none",) else names
    choice = training_precision(recipe, world)
    return ProcessPlan(
        recipe.seed,
        recipe.torch_threads,
        choice.name == "bf16",
        recipe.fp16,
        choice.line() if not recipe.fp16 else "precision: fp16 (fp16: true)",
        recipe.torch_compile,
        report_to,
        not recipe.disable_tqdm,
    )


def training_precision(recipe: Recipe, world: World) -> precision.Choice:
    """Return the recipe's `bf16` resolved for this run. true and false are kept as given. `auto`
    (`precision.choose_training_bf16`) means bf16 on a CUDA GPU with bf16, or on a CPU with bf16 matrix units for a
    model that reaches that kind's size threshold (`precision.BF16_MIN_PARAMETERS`), and fp32 otherwise. With
    `fp16: true` the answer is never bf16."""
    asked = False if recipe.fp16 else recipe.bf16
    parameters = approximate_parameters(recipe.config)
    return precision.choose_training_bf16(asked, precision.hardware_of(world.device), parameters)


def _data(recipe: Recipe, sources: dict, tokenizer_dir: Path, max_tokens: int) -> DataPlan:
    return DataPlan(
        sources=MappingProxyType(dict(sources)),
        src_lang=recipe.src_lang,
        tgt_lang=recipe.tgt_lang,
        max_length=longest_training_pair(max_tokens, recipe.max_length),
        max_length_ratio=recipe.max_length_ratio,
        train_limit=recipe.max_train_samples,
        valid_limit=recipe.max_eval_samples,
        workers=recipe.preprocessing_num_workers,
        tokenizer_dir=tokenizer_dir,
        vocab_size=recipe.vocab_size,
        bpe_min_frequency=recipe.bpe_min_frequency,
        lowercase=recipe.lowercase,
    )


def _batching(recipe: Recipe, max_tokens: int, accumulation: int, processes: int) -> BatchingPlan:
    return BatchingPlan(
        max_tokens=max_tokens,
        accumulation=accumulation,
        tokens_per_update=max_tokens * processes * accumulation,
        eval_max_tokens=evaluation_budget(max_tokens, recipe.eval_max_tokens),
        max_sentences=recipe.max_sentences or None,
        pad_to_multiple_of=recipe.pad_to_multiple_of or None,
        chosen=recipe.max_tokens_per_device == "auto",
        num_workers=recipe.dataloader_num_workers,
        pin_memory=recipe.dataloader_pin_memory,
        prefetch_factor=recipe.dataloader_prefetch_factor,
        log_batches=recipe.debug_log_batches,
    )


def _optimizer(recipe: Recipe, world: World) -> OptimizerPlan:
    """Return Section 5.3's Adam for this run. It uses torch's fused kernel where torch has it for this device and the
    parameters stay plain tensors (not sharded by FSDP or DeepSpeed): the same update up to float rounding, in one
    kernel for all parameters."""
    fused = torch.device(world.device).type in FUSED_ADAM_DEVICE_TYPES and not any(
        parse_flag_from_env(flag) for flag in _SHARDING.values()
    )
    return OptimizerPlan(
        paper_base_lr(recipe.d_model, recipe.lr_multiplier),
        (recipe.adam_beta1, recipe.adam_beta2),
        recipe.adam_epsilon,
        recipe.weight_decay,
        recipe.max_grad_norm,
        fused,
    )


def _evaluation(recipe: Recipe) -> EvaluationPlan:
    # The BLEU tokenizer's packages are checked here, before the data is read: sacreBLEU would first import them at
    # the first validation, or when the test set is scored after training.
    check_sacrebleu_tokenizer(recipe.bleu_tokenize, "bleu_tokenize")
    paper_beams = GENERATION_SETTINGS["num_beams"].default  # The exported generation_config.json's beam size.
    return EvaluationPlan(
        recipe.eval_steps,
        recipe.eval_on_start and recipe.valid_data is not None,
        recipe.eval_num_beams,
        recipe.test_num_beams or paper_beams,
        recipe.bleu_tokenize,
        tuple(recipe.translate_examples),
    )


def recipe_yaml(recipe: Recipe) -> str:
    """Return the full recipe as YAML, every key and default included, for recipe.yaml beside the run and in its
    export."""
    return yaml.safe_dump(dict(recipe), sort_keys=False)


def _export(recipe: Recipe, export: Path) -> ExportPlan:
    return ExportPlan(
        export, recipe.name, recipe_yaml(recipe), str(recipe.hub_dataset or recipe.data_dir or recipe.data_format)
    )


def check_devices(recipe: Recipe, world: World) -> None:
    """Check that the precision and the distributed strategy asked for exist on this device, and that the model
    fits."""

    if recipe.fp16 and world.cpu:
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

    parameters = approximate_parameters(recipe.config)
    needed = MODEL_STATE_BYTES_PER_PARAMETER * parameters
    available = device_memory_bytes(world.device, world.local_processes)
    if needed > available:
        raise RecipeError(
            f"the model ({parameters / 1e6:,.0f}M parameters: d_model {recipe.d_model}, d_ff "
            f"{recipe.d_ff}, {recipe.num_encoder_layers}+{recipe.num_decoder_layers} layers, vocabulary "
            f"{recipe.vocab_size:,}) needs {needed / 2**30:,.1f} GiB for weights, gradients and Adam, "
            f"more than the {available / 2**30:,.1f} GiB of {world.device}; choose a smaller model"
        )
