"""Run a training run end to end, as the paper's recipe has it: the data and shared BPE (5.1), the model (Table 3),
training with token batches, Adam and the warm-up schedule (5.1-5.4), checkpoint averaging (6.1), validation and test
scores of the averaged model, and a Hub-ready folder. Each step reads only the run's plan (`vaswani_hf.training.plan`);
every process runs every step, and what writes files runs on the main process while the others wait.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import torch
import transformers
from accelerate import PartialState
from accelerate.utils import broadcast_object_list
from safetensors.torch import load_file
from transformers import Seq2SeqTrainingArguments, TrainerCallback, TrainerState, set_seed

from .. import io
from ..data import cache
from ..data.batching import Seq2SeqCollator
from ..data.preprocessing import prepare_dataset
from ..io.progress import library_bars
from ..metrics.scores import make_compute_metrics
from ..modeling_vaswani import VaswaniForConditionalGeneration
from ..tokenization import load_tokenizer, train_bpe_tokenizer
from ..translation.inference import translate
from .callbacks import BatchStatsCollator, HistoryCallback, RunClock, SamplerEpochCallback, read_history
from .checkpoints import (
    STAGING_DIR,
    WallClockCallback,
    last_checkpoints,
    load_averaged_weights,
    save_averaged_checkpoint,
)
from .data_path import choose_data_path
from .plan import RunPlan
from .preflight import clear_previous_run
from .recipe import RecipeError
from .report import export_hub_folder, plot_history, write_hypotheses
from .schedule import paper_optimizer_cls_and_kwargs
from .trainer import VaswaniTrainer

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


def build_training_arguments(plan: RunPlan):
    """Return the `Seq2SeqTrainingArguments` of a plan. The batch sizes are the trainer's token budgets, saving is
    left to `WallClockCallback`, and Adam's settings are stated here once, for the optimizer to be built from them."""
    process, schedule, optimizer, evaluation = plan.process, plan.schedule, plan.optimizer, plan.evaluation
    keep, b = plan.checkpoints.keep_last, plan.batching
    data_path = choose_data_path(
        plan.world.device,
        b.num_workers,
        processes=plan.world.local_processes,
        pin_memory=b.pin_memory,
        prefetch_factor=b.prefetch_factor,
    )
    return Seq2SeqTrainingArguments(
        output_dir=str(plan.output_dir),
        max_steps=schedule.max_steps,
        num_train_epochs=schedule.num_train_epochs,
        learning_rate=optimizer.learning_rate,
        weight_decay=optimizer.weight_decay,
        adam_beta1=optimizer.betas[0],
        adam_beta2=optimizer.betas[1],
        adam_epsilon=optimizer.eps,
        max_grad_norm=optimizer.max_grad_norm,
        gradient_accumulation_steps=plan.batching.accumulation,
        logging_steps=schedule.logging_steps,
        logging_first_step=True,
        eval_strategy="steps" if evaluation.eval_steps > 0 else "no",
        eval_steps=evaluation.eval_steps if evaluation.eval_steps > 0 else None,
        eval_on_start=evaluation.eval_on_start,
        save_strategy="no",  # WallClockCallback decides saves (time, steps, the end).
        save_total_limit=keep if keep > 0 else None,
        predict_with_generate=True,
        generation_num_beams=evaluation.eval_num_beams,
        seed=process.seed,
        report_to=list(process.report_to),
        disable_tqdm=not process.show_progress,
        use_cpu=plan.world.cpu,
        bf16=process.bf16,
        fp16=process.fp16,
        ddp_find_unused_parameters=False,
        **data_path.training_arguments(),
        torch_compile=process.torch_compile,
        remove_unused_columns=True,
        per_device_train_batch_size=1,
        per_device_eval_batch_size=1,
    )


@dataclass
class RunData:
    tokenizer: Any
    train: Any
    valid: Any
    test: Any
    filter_report: Any
    seconds: float


def load_corpora(plan: RunPlan) -> dict[str, Any]:
    """Load the raw splits, decoding and parsing every line, so that a bad file is refused before anything is
    written."""
    limits = {"train": plan.data.train_limit, "valid": plan.data.valid_limit, "test": 0}
    return {
        name: source.load(limits[name]) if source is not None else None for name, source in plan.data.sources.items()
    }


def prepare_data(plan: RunPlan, splits: dict[str, Any], state, clock: RunClock) -> RunData:
    """Return the shared BPE and the tokenized splits. Over-long training pairs are dropped and counted, and a corpus
    with none left is refused; held-out pairs are all kept."""
    data, started = plan.data, time.time()
    with clock.stage("tokenizer"), state.main_process_first():
        tokenizer = shared_bpe(plan, splits["train"])
    prep = dict(num_proc=data.workers)
    with clock.stage("tokenize and filter"), state.main_process_first():  # The others read the main process's cache.
        train, report = prepare_dataset(
            splits["train"],
            tokenizer,
            data.src_lang,
            data.tgt_lang,
            max_length=data.max_length,
            max_ratio=data.max_length_ratio,
            **prep,
        )
        held_out = {
            name: prepare_dataset(
                splits[name], tokenizer, data.src_lang, data.tgt_lang, max_length=None, max_ratio=None, **prep
            )[0]
            if splits[name] is not None
            else None
            for name in ("valid", "test")
        }
    logger.info("training pairs: %s", report)
    if report.kept == 0:
        raise RecipeError(
            f"train_data: no usable training pair ({report}); check the corpus, max_length and max_length_ratio"
        )
    return RunData(tokenizer, train, held_out["valid"], held_out["test"], report, time.time() - started)


def shared_bpe(plan: RunPlan, train_split):
    """Return Section 5.1's one BPE vocabulary for source and target: the plan's tokenizer folder if it exists, else
    the one cached for this corpus and settings (vaswani_hf.data.cache), else one trained now and cached."""
    data, folder, name = plan.data, plan.data.tokenizer_dir, None
    if train_split.cache_files and cache.enabled():  # A file-backed corpus has a stable fingerprint.
        name = "bpe-" + cache.key(
            train_split._fingerprint,
            data.vocab_size,
            data.bpe_min_frequency,
            data.lowercase,
            data.src_lang,
            data.tgt_lang,
        )
    if not folder.is_dir() and name and cache.cached_tokenizer(name):
        shutil.copytree(cache.cached_tokenizer(name), folder)
        logger.info(
            "joint BPE of this corpus and these settings taken from the cache: %s", cache.cached_tokenizer(name)
        )
    if folder.is_dir():
        tokenizer = load_tokenizer(folder)
        logger.info("tokenizer loaded from %s (%d tokens)", folder, len(tokenizer))
        return tokenizer
    tokenizer = train_bpe_tokenizer(
        train_split,
        vocab_size=data.vocab_size,
        min_frequency=data.bpe_min_frequency,
        lowercase=data.lowercase,
        save_dir=folder,
        show_progress=plan.process.show_progress and library_bars(),
    )
    logger.info("trained joint BPE: %d tokens -> %s", len(tokenizer), folder)
    if name:
        cache.keep_tokenizer(name, folder)
    return tokenizer


def build_model(plan: RunPlan, tokenizer):
    config = plan.model.config_for(len(tokenizer))
    set_seed(plan.process.seed)  # Every run and rank starts from the same weights.
    model = VaswaniForConditionalGeneration(config)
    logger.info(
        "model: d_model=%d d_ff=%d heads=%d layers=%d/%d vocab=%d params=%.2fM",
        config.d_model,
        config.d_ff,
        config.num_heads,
        config.num_encoder_layers,
        config.num_decoder_layers,
        config.vocab_size,
        sum(p.numel() for p in model.parameters()) / 1e6,
    )
    return model


def build_trainer(plan: RunPlan, model, data: RunData, callbacks: Sequence[TrainerCallback]) -> VaswaniTrainer:
    batching, out = plan.batching, plan.output_dir
    logger.info(
        "batching: %d tokens/device x %d processes x %d accumulation = %d tokens per update (target)%s",
        batching.max_tokens,
        plan.world.processes,
        batching.accumulation,
        batching.tokens_per_update,
        " (max_tokens_per_device: auto)" if batching.chosen else "",
    )
    batch_log = out / f"batches_rank{plan.world.index}.jsonl" if batching.log_batches else None
    if batch_log is not None and batch_log.exists() and plan.output.start != "resume":
        batch_log.unlink()
    has_scores = data.valid is not None or data.test is not None
    args = build_training_arguments(plan)
    wall_clock = WallClockCallback(
        plan.checkpoints.save_every_minutes, plan.schedule.max_train_minutes, plan.checkpoints.save_steps
    )
    return VaswaniTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.valid,
        processing_class=data.tokenizer,
        data_collator=BatchStatsCollator(
            Seq2SeqCollator(pad_to_multiple_of=batching.pad_to_multiple_of), log_path=batch_log
        ),
        compute_metrics=make_compute_metrics(data.tokenizer, tokenize=plan.evaluation.bleu_tokenize)
        if has_scores
        else None,
        callbacks=[wall_clock, SamplerEpochCallback(), HistoryCallback(out / "history.jsonl"), *callbacks],
        optimizer_cls_and_kwargs=paper_optimizer_cls_and_kwargs(args, fused=plan.optimizer.fused),
        max_tokens=batching.max_tokens,
        eval_max_tokens=batching.eval_max_tokens,
        max_sentences=batching.max_sentences,
        paper_warmup_steps=plan.schedule.warmup_steps,
        label_smoothing=plan.model.label_smoothing,
        loss_chunk_tokens=plan.model.loss_chunk_tokens,
    )


def train(trainer: VaswaniTrainer, plan: RunPlan, data: RunData, state) -> dict[str, Any]:
    """Train, and return the losses, the speed (target tokens/s over all processes) and the padding. A run stopped
    before its final scores ("score") loads its last state and weights instead (transformers would take one more
    update)."""
    started = time.time()
    if plan.output.start == "score":
        checkpoint = plan.output.resume_from
        trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
        load_averaged_weights(trainer.model, load_file(str(checkpoint / "model.safetensors")))
        metrics: dict[str, Any] = {}
    else:
        resume_from = plan.output.resume_from  # It is None for a new run or an overwrite.
        result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        metrics = {f"train/{k}": v for k, v in result.metrics.items()}
    seconds = time.time() - started
    metrics.update(
        world_size=plan.world.processes,
        distributed_type=distributed_type(state),
        global_step=trainer.state.global_step,
        gradient_accumulation_steps=plan.batching.accumulation,
        max_tokens_per_device=plan.batching.max_tokens,
        tokens_per_update=plan.batching.tokens_per_update,
        params=sum(p.numel() for p in trainer.model.parameters()),
        data_prep_seconds=data.seconds,
        train_seconds=seconds,
        filter_report=data.filter_report.as_dict(),
    )
    stats = trainer.data_collator.stats()
    tokens = torch.tensor(
        [stats["train_src_tokens"], stats["train_tgt_tokens"]], dtype=torch.float64, device=trainer.args.device
    )
    stats["train_src_tokens"], stats["train_tgt_tokens"] = (int(x) for x in trainer.accelerator.reduce(tokens, "sum"))
    stats["train_tgt_tokens_per_second"] = stats["train_tgt_tokens"] / max(seconds, 1e-9)
    metrics.update(stats)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    if losses:
        metrics["first_logged_loss"], metrics["last_logged_loss"] = losses[0], losses[-1]
    return metrics


def average(trainer: VaswaniTrainer, plan: RunPlan, state) -> list[str]:
    """Average the last N checkpoints into OUTPUT/averaged (Section 6.1), load them on every process and return their
    names; with none returned, the final weights are kept."""
    trainer.accelerator.wait_for_everyone()
    average_last = plan.checkpoints.average_last
    if average_last <= 1:
        return []
    found = last_checkpoints(plan.output_dir, average_last)
    if len(found) < 2:
        logger.warning(
            "average_last=%d but only %d checkpoint(s) exist: using the final weights", average_last, len(found)
        )
        return []
    averaged = plan.output_dir / "averaged"
    if state.is_main_process:
        save_averaged_checkpoint(found, averaged, overwrite=True, own=True)  # It is this run's own folder.
    trainer.accelerator.wait_for_everyone()
    model = trainer.accelerator.unwrap_model(trainer.model)
    load_averaged_weights(model, load_file(str(averaged / "model.safetensors")))
    logger.info("averaged %d checkpoints: %s", len(found), ", ".join(f.name for f in found))
    return [f.name for f in found]


def final_scores(trainer: VaswaniTrainer, plan: RunPlan, data: RunData, state) -> dict[str, Any]:
    """Return the validation and test scores of the final model with the final beam size, and write its hypotheses
    in corpus order."""
    num_beams = plan.evaluation.final_num_beams
    metrics: dict[str, Any] = {"final_num_beams": num_beams}
    for split, dataset in (("valid", data.valid), ("test", data.test)):
        if dataset is None:
            continue
        prediction = trainer.predict(dataset, metric_key_prefix=split, num_beams=num_beams)
        metrics.update({k.replace(f"{split}_", f"{split}/", 1): v for k, v in prediction.metrics.items()})
        if state.is_main_process and prediction.predictions is not None:
            write_hypotheses(plan.output_dir / f"{split}_hypotheses.txt", data.tokenizer, prediction.predictions)
    return metrics


def finish(trainer: VaswaniTrainer, plan: RunPlan, data: RunData, metrics: dict[str, Any]) -> None:
    """Write, on the main process, the example translations, plots, metrics.json and the Hub-ready folder."""
    examples, out = list(plan.evaluation.translate_examples), plan.output_dir
    model = trainer.accelerator.unwrap_model(trainer.model)
    if examples:
        outputs = translate(
            model,
            data.tokenizer,
            examples,
            num_beams=plan.evaluation.final_num_beams,
            device=trainer.args.device,
            progress=False,
        )
        metrics["examples"] = [{"source": s, "translation": t} for s, t in zip(examples, outputs)]
        print("\nTranslations:")
        for s, t in zip(examples, outputs):
            print(f"  {s}\n    -> {t}")
    history = read_history(out / "history.jsonl") or trainer.state.log_history
    metrics["plots"] = plot_history(history, out)
    signatures = getattr(trainer.compute_metrics, "signatures", None)
    export_hub_folder(model, data.tokenizer, plan, metrics, history=history, signatures=signatures)
    metrics["export_dir"] = str(plan.export.export_dir)
    io.write_json(out / "metrics.json", metrics)
    summary = {
        k: metrics[k]
        for k in (
            "first_logged_loss",
            "last_logged_loss",
            "valid/loss",
            "valid/nll",
            "valid/bleu",
            "test/loss",
            "test/bleu",
            "train_tgt_tokens_per_second",
            "padding_share_tgt",
        )
        if k in metrics
    }
    logger.info("done: %s", json.dumps(summary, default=str))
    logger.info("model folder: %s | metrics: %s", plan.export.export_dir, out / "metrics.json")


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
            temporary.write_text(plan.export.recipe_text, encoding="utf-8")
    state.wait_for_everyone()
    io.write_json(
        out / f"run_info_rank{state.process_index}.json",
        {
            "world_size": plan.world.processes,
            "process_index": plan.world.index,
            "distributed_type": distributed_type(state),
            "device": plan.world.device,
            "torch_threads": torch.get_num_threads(),
        },
    )
    logger.info(
        "recipe %s | world size %d (%s) | process %d",
        plan.export.recipe_name,
        plan.world.processes,
        distributed_type(state),
        plan.world.index,
    )


def distributed_type(state) -> str:
    """Return how Accelerate spread the run (NO, MULTI_CPU, MULTI_GPU, FSDP, ...), as it did it, not as planned."""
    return str(state.distributed_type).split(".")[-1]


def start_processes(plan: RunPlan):
    """Set up logging, threads and the distributed state of the plan's world, check that it is that world, and
    return the state."""
    setup_logging()
    if plan.process.torch_threads > 0:
        torch.set_num_threads(plan.process.torch_threads)
    state = PartialState(cpu=plan.world.cpu)
    plan.world.check_state(state)
    return state


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
        metrics = train(trainer, plan, data, state)
    logger.info(
        "first update: started %.1f s after launch, took %.1f s",
        clock.first_update.get("started_s", -1),
        clock.first_update.get("seconds", -1),
    )
    with clock.stage("averaging"):
        metrics["averaged_checkpoints"] = average(trainer, plan, state)
    with clock.stage("final scores"):
        metrics.update(final_scores(trainer, plan, data, state))
    if state.is_main_process:
        metrics["run_clock"] = clock.report()
        finish(trainer, plan, data, metrics)
    trainer.accelerator.wait_for_everyone()
    return metrics
