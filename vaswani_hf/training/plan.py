"""A run's plan: what a recipe means on this machine, resolved once, before any work.

`plan_run(recipe)` reads the recipe (already checked: `vaswani_hf.training.recipe`) together with the world it runs
in (processes, device, memory) and the file system, and returns a `RunPlan` that every later step only reads:
- the data sources of each split (`sources`), and what files the run reads and writes, checked by the one output
  guard (`vaswani_hf.io.check_paths`: output_dir and export_dir never are, contain or lie inside an input);
- what happens to the output folder (new, resume, overwrite, or nothing for a finished run: `preflight`);
- the token budget: tokens per micro-batch and micro-batches per update (Section 5.1, `budget`);
- the model's settings (`model_config`) and the objective's epsilon (Section 5.4);
- the device checks: the precision and the distributed strategy asked for exist here, and the model fits.
`RunPlan.lock()` then takes the output folder for this run alone.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import io
from . import preflight
from .recipe import Recipe, RecipeError
from .sources import Source, check_data_dir, resolve_dir, split_sources

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    """The processes a run is launched on, as seen by one of them."""

    processes: int = 1
    index: int = 0
    local_processes: int = 1
    device: str = "cpu"
    distributed_type: str = "NO"

    @classmethod
    def from_state(cls, state) -> World:
        """From Accelerate's `PartialState` (the run itself)."""
        return cls(state.num_processes, state.process_index, int(os.environ.get("LOCAL_WORLD_SIZE",
                                                                                 state.num_processes)),
                   str(state.device), str(state.distributed_type).split(".")[-1])

    @classmethod
    def from_environment(cls, recipe: Recipe) -> World:
        """From the launcher's environment, without starting a process group (`--check`)."""
        processes = int(os.environ.get("WORLD_SIZE", "1"))
        device = "cpu" if use_cpu(recipe) else f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        return cls(processes, int(os.environ.get("RANK", "0")),
                   int(os.environ.get("LOCAL_WORLD_SIZE", processes)), device)

    @property
    def is_main(self) -> bool:
        return self.index == 0


def use_cpu(recipe: Recipe) -> bool:
    """CPU training if the recipe asks, if `ACCELERATE_USE_CPU` is set, or if several processes were launched on a
    machine without CUDA. Accelerate's `PartialState(cpu=False)` would otherwise give every process of
    `accelerate launch --multi_gpu --num_processes 2` on a CPU-only machine its own world of size 1 (independent
    rank-0 runs); with cpu=True they form one MULTI_CPU (gloo) group. Also on a machine with no accelerator at all:
    `TrainingArguments` refuses `bf16=True` there unless `use_cpu` is set, although bf16 autocast on CPU is
    supported."""
    from accelerate.utils import parse_flag_from_env

    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    has_accelerator = torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    return bool(recipe.use_cpu or parse_flag_from_env("ACCELERATE_USE_CPU")
                or (launched and not torch.cuda.is_available()) or not has_accelerator)


@dataclass
class RunPlan:
    """Everything a run needs to know, resolved once (see the module docstring)."""

    recipe: Recipe
    world: World
    sources: dict[str, Source | None]
    output_dir: Path
    export_dir: Path
    tokenizer_dir: Path
    output: preflight.OutputDecision
    max_tokens: int
    accumulation: int
    eval_max_tokens: int

    @property
    def label_smoothing(self) -> float:
        return self.recipe.label_smoothing

    @property
    def tokens_per_update(self) -> int:
        return self.max_tokens * self.world.processes * self.accumulation

    @property
    def resume_from(self) -> Path | None:
        return self.output.resume_from if self.output.start == "resume" else None

    def model_config(self, vocab_size: int):
        return self.recipe.model_config(vocab_size)

    def lock(self) -> io.FolderLock:
        """This run's hold on its output folder (created if needed), for as long as the run writes into it."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        return io.FolderLock(self.output_dir, "output_dir").acquire()

    def describe(self) -> str:
        budget = f"{self.max_tokens} tokens/device x {self.world.processes} processes x {self.accumulation} " \
                 f"accumulation = {self.tokens_per_update} tokens per update"
        return f"output_dir {self.recipe.output_dir}: {self.output.describe()}; {budget}"


def plan_run(recipe: Recipe, *, overwrite: bool = False, world: World | None = None) -> RunPlan:
    """Resolve `recipe` on this machine and file system (see the module docstring). RecipeError (one line naming
    the key or path) for anything that would fail later."""
    from .budget import tokens_per_device

    world = world or World.from_environment(recipe)
    check_devices(recipe, world)
    check_data_dir(recipe)
    sources = split_sources(recipe)
    for source in sources.values():
        if source is not None:
            source.check()
    out = Path(recipe.output_dir)
    export = Path(recipe.export_dir) if recipe.export_dir else out / "hub"
    tokenizer_dir = resolve_dir(recipe.tokenizer_path) if recipe.tokenizer_path else out / "tokenizer"
    if recipe.tokenizer_path:
        preflight.check_tokenizer_path(tokenizer_dir, recipe.tokenizer_path)
    inputs = {name: path for source in sources.values() if source is not None
              for name, path in source.files().items()}
    if recipe.tokenizer_path:
        inputs["tokenizer_path"] = tokenizer_dir
    if recipe.file:  # a recipe kept in the run's folder would be replaced (recipe.yaml) or left among a new run's files
        inputs["--recipe"] = Path(recipe.file)
    _guard(inputs, {"output_dir": out, "export_dir": export})
    output = preflight.decide_output_dir(recipe, out, overwrite=overwrite, processes=world.processes)
    preflight.check_export_dir(export, out, overwrite=overwrite or recipe.resume)
    max_tokens, accumulation = tokens_per_device(recipe, world.processes, device=world.device,
                                                 local_processes=world.local_processes)
    if recipe.max_length is not None and max_tokens < recipe.max_length:
        raise RecipeError(f"max_tokens_per_device: auto gives {max_tokens} tokens per micro-batch here, below "
                          f"max_length {recipe.max_length}; lower max_length or give max_tokens_per_device")
    return RunPlan(recipe, world, sources, out, export, tokenizer_dir, output, max_tokens, accumulation,
                   recipe.eval_max_tokens or max_tokens)


def _guard(inputs: dict, outputs: dict) -> None:
    """The one output guard, each output against the inputs (export_dir may lie inside output_dir: `preflight`)."""
    for name, path in outputs.items():
        with preflight.recipe_errors():
            io.check_paths(inputs, {name: path})


def check_devices(recipe: Recipe, world: World) -> None:
    """The precision and distributed strategy the recipe and the launcher ask for exist on this device, and the
    model's training state fits its memory."""
    from accelerate.utils import parse_flag_from_env

    on_cpu = world.device.startswith("cpu")
    if recipe.fp16 and on_cpu:
        raise RecipeError("fp16: fp16 mixed precision needs a CUDA GPU and this run is on the CPU; use bf16 (CPU "
                          "autocast) or fp32")
    for strategy, flag in (("FSDP", "ACCELERATE_USE_FSDP"), ("DeepSpeed", "ACCELERATE_USE_DEEPSPEED")):
        if on_cpu and parse_flag_from_env(flag):
            raise RecipeError(f"{strategy} was asked for (the accelerate launch config sets {flag}) but this run is on "
                              f"the CPU, where Accelerate runs plain DDP instead: launch on GPUs, or without the "
                              f"{strategy} config (accelerate_configs/README.md)")
    check_model_fits(recipe, world)


def check_model_fits(recipe: Recipe, world: World) -> None:
    """Refuse a model whose weights, gradients and Adam moments (16 bytes a parameter) alone exceed the memory of
    this process's device: it would be killed for memory after minutes of data preparation."""
    from .budget import MODEL_STATE_BYTES_PER_PARAMETER, approximate_parameters, device_memory_bytes

    parameters = approximate_parameters(recipe.model_config(recipe.vocab_size))
    needed = MODEL_STATE_BYTES_PER_PARAMETER * parameters
    available = device_memory_bytes(world.device, world.local_processes)
    if needed > available:
        raise RecipeError(f"the model ({parameters / 1e6:,.0f}M parameters: d_model {recipe.d_model}, d_ff "
                          f"{recipe.d_ff}, {recipe.num_encoder_layers}+{recipe.num_decoder_layers} layers, vocabulary "
                          f"{recipe.vocab_size:,}) needs {needed / 2**30:,.1f} GiB for weights, gradients and Adam, "
                          f"more than the {available / 2**30:,.1f} GiB of {world.device}; choose a smaller model")
