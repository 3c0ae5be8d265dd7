"""Run a training run end to end: the line that calls each station of `vaswani_hf.training` in turn.

The plan (`plan.plan_run`, made before the run from the recipe) goes through the stations in the order the paper's
recipe has them: the data and shared BPE (`data`, Section 5.1), the model of Table 3 and its training with token
batches, Adam and the warm-up schedule (`trainer`, with `objective`: Sections 5.1-5.4), checkpoint averaging
(`checkpoints`, Section 6.1), then the validation and test scores of the averaged model, metrics.json and a Hub-ready
folder (`report`). Each station reads only the plan and what the station before it made; every process runs every
station, and what writes files runs on the main process while the others wait.
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Sequence

import datasets
import torch
import transformers
from accelerate import PartialState
from accelerate.utils import broadcast_object_list
from transformers import TrainerCallback

from .. import io
from ..io.progress import library_bars
from .callbacks import RunClock
from .checkpoints import STAGING_DIR, average_last
from .data import load_corpora, prepare_data
from .plan import RunPlan
from .preflight import clear_previous_run
from .recipe import RecipeError
from .report import final_scores, finish
from .trainer import build_model, build_trainer, distributed_type, train

logger = logging.getLogger(__name__)


def setup_logging(level=logging.INFO) -> None:
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        level=level,
        stream=sys.stdout,
        force=True,
    )
    if level <= logging.DEBUG:
        transformers.utils.logging.set_verbosity_info()
    else:
        transformers.utils.logging.set_verbosity_warning()
    datasets.utils.logging.set_verbosity_warning()


def start_processes(plan: RunPlan):
    """Set up logging, threads and the distributed state of the plan's world, check that it is that world, and
    return the state."""
    setup_logging()
    if plan.recipe.run.torch_threads > 0:
        torch.set_num_threads(plan.recipe.run.torch_threads)
    state = PartialState(cpu=plan.world.cpu)
    plan.world.check_state(state)
    return state


def take_folder(plan: RunPlan, state) -> io.FolderLock | None:
    """Lock the output folder on the main process (one run at a time), and tell every process whether it got it."""
    lock, refusal = None, [None]
    state.wait_for_everyone()  # All have probed the lock before the main one takes it.
    if state.is_main_process:
        try:
            lock = plan.lock()
        except io.UsageError as error:
            refusal = [str(error)]
    if state.num_processes > 1:
        broadcast_object_list(refusal, from_process=0)
    if refusal[0]:
        raise RecipeError(refusal[0])
    return lock


def start(plan: RunPlan, state) -> None:
    """Clear a run it replaces and write the recipe on the main process; then write every process's run info."""
    out = plan.output_dir
    if state.is_main_process:
        if plan.output.start == "overwrite" and (removed := clear_previous_run(out)):
            logger.warning("--overwrite: removed the previous run's %s", ", ".join(removed))
        if (out / STAGING_DIR).exists():  # A crash left a save's parts here.
            shutil.rmtree(out / STAGING_DIR)
        with io.replace_atomically(out / "recipe.yaml") as temporary:
            temporary.write_text(plan.recipe.to_yaml(), encoding="utf-8")
    state.wait_for_everyone()
    io.write_json(
        out / f"run_info_rank{state.process_index}.json",
        {
            "world_size": plan.world.processes,
            "process_index": plan.world.index,
            "distributed_type": distributed_type(state),
            "device": plan.world.device,
            "precision": plan.precision.name,
            "torch_threads": torch.get_num_threads(),
        },
    )
    logger.info(
        "recipe %s | world size %d (%s) | process %d | %s",
        plan.recipe.name,
        plan.world.processes,
        distributed_type(state),
        plan.world.index,
        plan.precision.line(),
    )


def run_training(plan: RunPlan, callbacks: Sequence[TrainerCallback] = ()) -> dict:
    """Run a plan (`plan_run`) end to end, adding `callbacks` to the Trainer's, and return the final metrics (also
    written to OUTPUT_DIR/metrics.json, with each stage's time and memory). A finished run returns its metrics
    untouched."""
    if not isinstance(plan, RunPlan):
        raise TypeError(f"run_training takes the run's plan (plan_run(recipe)), not a {type(plan).__name__}")
    clock = RunClock()
    library_bars()  # In a log, datasets' own bars are off: no carriage returns.
    with clock.stage("checks and corpora"):
        state = start_processes(plan)
        if plan.output.start == "finished":
            print(f"output_dir {plan.output_dir}: {plan.output.describe()} (raise max_steps to train on)")
            return io.read_json(plan.output_dir / "metrics.json")
        splits = load_corpora(plan)
        lock = take_folder(plan, state)
    try:
        start(plan, state)
        return _run(plan, state, splits, clock, callbacks)
    finally:
        if lock is not None:
            lock.release()


def _run(plan: RunPlan, state, splits, clock: RunClock, callbacks: Sequence[TrainerCallback]) -> dict:
    data = prepare_data(plan, splits, state, clock)
    with clock.stage("model"):
        model = build_model(plan, data.tokenizer)
    trainer = build_trainer(plan, model, data, [clock, *callbacks])
    if plan.output.resume_from is not None:
        logger.info("%s: %s", plan.output_dir, plan.output.describe())
    with clock.stage("training"):
        metrics = train(trainer, plan, data)
    logger.info(
        "first update: started %.1f s after launch, took %.1f s",
        clock.first_update.get("started_s", -1),
        clock.first_update.get("seconds", -1),
    )
    with clock.stage("averaging"):
        metrics["averaged_checkpoints"] = average_last(trainer, plan, state)
    with clock.stage("final scores"):
        metrics |= final_scores(trainer, plan, data, state)
    if state.is_main_process:
        metrics["run_clock"] = clock.report()
        finish(trainer, plan, data, metrics)
    trainer.accelerator.wait_for_everyone()
    return metrics
