"""A training run end to end, as the paper's recipe has it: data and shared BPE (5.1), model (Table 3), training with
token batches, Adam and the warm-up schedule (5.1-5.4), checkpoint averaging (6.1), validation and test scores of
the averaged model, and a Hub-ready folder.

Every step is a short function that reads the run's plan (`vaswani_hf.training.plan`, resolved once before any
work); `run_training` calls them in order. Multi-process runs (Accelerate/DDP) run the same steps on every process;
what writes files runs on the main process while the others wait.
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

import torch
from transformers import TrainerCallback

from .. import io
from .callbacks import BatchStatsCollator, HistoryCallback, RunClock, SamplerEpochCallback, read_history
from .checkpoints import (
    STAGING_DIR,
    WallClockCallback,
    last_checkpoints,
    load_averaged_weights,
    save_averaged_checkpoint,
)
from .plan import RunPlan, World, plan_run, use_cpu
from .preflight import clear_previous_run
from .recipe import Recipe, RecipeError
from .report import export_hub_folder, plot_history, recipe_yaml, write_hypotheses
from .schedule import paper_base_lr, paper_optimizer_cls_and_kwargs
from .trainer import VaswaniTrainer

logger = logging.getLogger(__name__)


def setup_logging(level=logging.INFO) -> None:
    import datasets
    import transformers

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        level=level, stream=sys.stdout, force=True)
    if level <= logging.DEBUG:
        transformers.utils.logging.set_verbosity_info()
    else:
        transformers.utils.logging.set_verbosity_warning()
    datasets.utils.logging.set_verbosity_warning()


def build_training_arguments(plan: RunPlan):
    """The `Seq2SeqTrainingArguments` of a plan. Batch sizes are token budgets (the trainer's own); saving is decided
    by `WallClockCallback`; the learning rate is the Section 5.3 formula's constant factor."""
    from transformers import Seq2SeqTrainingArguments

    recipe, cpu = plan.recipe, plan.world.device.startswith("cpu")
    return Seq2SeqTrainingArguments(
        output_dir=recipe.output_dir, max_steps=recipe.max_steps if recipe.max_steps > 0 else -1,
        num_train_epochs=recipe.num_train_epochs, learning_rate=paper_base_lr(recipe.d_model, recipe.lr_multiplier),
        weight_decay=recipe.weight_decay, adam_beta1=recipe.adam_beta1, adam_beta2=recipe.adam_beta2,
        adam_epsilon=recipe.adam_epsilon, max_grad_norm=recipe.max_grad_norm,
        gradient_accumulation_steps=plan.accumulation,
        logging_steps=recipe.logging_steps, logging_first_step=True,
        eval_strategy="steps" if recipe.eval_steps > 0 else "no",
        eval_steps=recipe.eval_steps if recipe.eval_steps > 0 else None,
        eval_on_start=recipe.eval_on_start and recipe.valid_data is not None,
        save_strategy="no",  # saves are decided by WallClockCallback (time, steps, end of training)
        save_total_limit=recipe.keep_last if recipe.keep_last > 0 else None,
        predict_with_generate=True, generation_num_beams=recipe.eval_num_beams, seed=recipe.seed,
        report_to=[] if recipe.report_to == "none" else recipe.report_to, disable_tqdm=recipe.disable_tqdm,
        use_cpu=cpu, bf16=recipe.bf16, fp16=recipe.fp16, dataloader_num_workers=recipe.dataloader_num_workers,
        dataloader_pin_memory=torch.cuda.is_available() and not cpu, ddp_find_unused_parameters=False,
        torch_compile=recipe.torch_compile,
        remove_unused_columns=True, per_device_train_batch_size=1, per_device_eval_batch_size=1)


# ---------------------------------------------------------------------------------------------------------------------
# The steps
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class RunData:
    tokenizer: Any
    train: Any
    valid: Any
    test: Any
    filter_report: Any
    seconds: float


def load_corpora(plan: RunPlan) -> dict[str, Any]:
    """The raw splits (every line decoded and parsed: a bad file is refused here, before anything is written)."""
    limits = {"train": plan.recipe.max_train_samples, "valid": plan.recipe.max_eval_samples, "test": 0}
    return {name: source.load(limits[name]) if source is not None else None for name, source in plan.sources.items()}


def prepare_data(plan: RunPlan, splits: dict[str, Any], state, clock: RunClock) -> RunData:
    """Shared BPE (trained on the training pairs, or loaded) and the tokenized, filtered splits. Training pairs longer
    than max_length, or than one micro-batch holds, are dropped and counted; a training split with no usable pair
    left is refused (nothing would be learned). Held-out pairs are all kept."""
    from ..data.preprocessing import prepare_dataset

    recipe, started = plan.recipe, time.time()
    with clock.stage("tokenizer"), state.main_process_first():
        tokenizer = shared_bpe(plan, splits["train"])
    prep = dict(num_proc=recipe.preprocessing_num_workers)
    longest = min(recipe.max_length or plan.max_tokens, plan.max_tokens)
    with clock.stage("tokenize and filter"), state.main_process_first():  # the others read the main one's cache
        train, report = prepare_dataset(splits["train"], tokenizer, recipe.src_lang, recipe.tgt_lang,
                                        max_length=longest, max_ratio=recipe.max_length_ratio, **prep)
        held_out = {name: prepare_dataset(splits[name], tokenizer, recipe.src_lang, recipe.tgt_lang, max_length=None,
                                          max_ratio=None, **prep)[0] if splits[name] is not None else None
                    for name in ("valid", "test")}
    logger.info("training pairs: %s", report)
    if report.kept == 0:
        raise RecipeError(f"train_data: no usable training pair ({report}); check the corpus, max_length and "
                          "max_length_ratio")
    return RunData(tokenizer, train, held_out["valid"], held_out["test"], report, time.time() - started)


def shared_bpe(plan: RunPlan, train_split):
    """Section 5.1's one BPE vocabulary for source and target: the plan's tokenizer folder (`tokenizer_path`, or
    OUTPUT_DIR/tokenizer) if it exists; else the one trained earlier on the same corpus with the same settings (kept
    in the datasets cache, see vaswani_hf.data.cache); else trained on the training pairs now, and kept."""
    from ..data import cache
    from ..tokenization import load_tokenizer, train_bpe_tokenizer

    recipe, folder, name = plan.recipe, plan.tokenizer_dir, None
    if train_split.cache_files and cache.enabled():  # a file-backed corpus has a stable fingerprint
        name = "bpe-" + cache.key(train_split._fingerprint, recipe.vocab_size, recipe.bpe_min_frequency,
                                  recipe.lowercase, recipe.src_lang, recipe.tgt_lang)
    if not folder.is_dir() and name and cache.cached_tokenizer(name):
        shutil.copytree(cache.cached_tokenizer(name), folder)
        logger.info("joint BPE of this corpus and these settings taken from the cache: %s",
                    cache.cached_tokenizer(name))
    if folder.is_dir():
        tokenizer = load_tokenizer(folder)
        logger.info("tokenizer loaded from %s (%d tokens)", folder, len(tokenizer))
        return tokenizer
    tokenizer = train_bpe_tokenizer(train_split, vocab_size=recipe.vocab_size, min_frequency=recipe.bpe_min_frequency,
                                    lowercase=recipe.lowercase, save_dir=folder, show_progress=not recipe.disable_tqdm)
    logger.info("trained joint BPE: %d tokens -> %s", len(tokenizer), folder)
    if name:
        cache.keep_tokenizer(name, folder)
    return tokenizer


def build_model(plan: RunPlan, tokenizer):
    from transformers import set_seed

    from ..modeling_vaswani import VaswaniForConditionalGeneration

    config = plan.model_config(vocab_size=len(tokenizer))
    set_seed(plan.recipe.seed)  # the same initial weights on every run and rank
    model = VaswaniForConditionalGeneration(config)
    logger.info("model: d_model=%d d_ff=%d heads=%d layers=%d/%d vocab=%d params=%.2fM", config.d_model, config.d_ff,
                config.num_heads, config.num_encoder_layers, config.num_decoder_layers, config.vocab_size,
                sum(p.numel() for p in model.parameters()) / 1e6)
    return model


def build_trainer(plan: RunPlan, model, data: RunData, callbacks: Sequence[TrainerCallback]) -> VaswaniTrainer:
    from ..data.batching import Seq2SeqCollator
    from ..evaluation import make_compute_metrics

    recipe, out = plan.recipe, plan.output_dir
    logger.info("batching: %d tokens/device x %d processes x %d accumulation = %d tokens per update (target)%s",
                plan.max_tokens, plan.world.processes, plan.accumulation, plan.tokens_per_update,
                " (max_tokens_per_device: auto)" if recipe.max_tokens_per_device == "auto" else "")
    batch_log = out / f"batches_rank{plan.world.index}.jsonl" if recipe.debug_log_batches else None
    if batch_log is not None and batch_log.exists() and plan.output.start != "resume":
        batch_log.unlink()
    has_scores = data.valid is not None or data.test is not None
    return VaswaniTrainer(
        model=model, args=build_training_arguments(plan), train_dataset=data.train, eval_dataset=data.valid,
        processing_class=data.tokenizer, data_collator=BatchStatsCollator(Seq2SeqCollator(), log_path=batch_log),
        compute_metrics=make_compute_metrics(data.tokenizer, tokenize=recipe.bleu_tokenize) if has_scores else None,
        callbacks=[WallClockCallback(recipe.save_every_minutes, recipe.max_train_minutes, recipe.save_steps),
                   SamplerEpochCallback(), HistoryCallback(out / "history.jsonl"), *callbacks],
        optimizer_cls_and_kwargs=paper_optimizer_cls_and_kwargs(recipe), max_tokens=plan.max_tokens,
        eval_max_tokens=plan.eval_max_tokens, max_sentences=recipe.max_sentences or None,
        paper_warmup_steps=recipe.warmup_steps, label_smoothing=plan.label_smoothing)


def train(trainer: VaswaniTrainer, plan: RunPlan, data: RunData) -> dict[str, Any]:
    """Train; the metrics of training: losses, speed (target tokens/s summed over processes), padding. A run whose
    training is done ("score": stopped before its final scores) is not trained again: transformers would take one
    more update from its last checkpoint; its state and weights are loaded instead."""
    started = time.time()
    if plan.output.start == "score":
        from safetensors.torch import load_file
        from transformers import TrainerState

        checkpoint = plan.output.resume_from
        trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
        load_averaged_weights(trainer.model, load_file(str(checkpoint / "model.safetensors")))
        metrics: dict[str, Any] = {}
    else:
        resume_from = plan.resume_from
        result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        metrics = {f"train/{k}": v for k, v in result.metrics.items()}
    seconds = time.time() - started
    metrics.update(world_size=plan.world.processes, distributed_type=plan.world.distributed_type,
                   global_step=trainer.state.global_step, gradient_accumulation_steps=plan.accumulation,
                   max_tokens_per_device=plan.max_tokens, tokens_per_update=plan.tokens_per_update,
                   params=sum(p.numel() for p in trainer.model.parameters()), data_prep_seconds=data.seconds,
                   train_seconds=seconds, filter_report=data.filter_report.as_dict())
    stats = trainer.data_collator.stats()
    tokens = torch.tensor([stats["train_src_tokens"], stats["train_tgt_tokens"]], dtype=torch.float64,
                          device=trainer.args.device)
    stats["train_src_tokens"], stats["train_tgt_tokens"] = (int(x) for x in trainer.accelerator.reduce(tokens, "sum"))
    stats["train_tgt_tokens_per_second"] = stats["train_tgt_tokens"] / max(seconds, 1e-9)
    metrics.update(stats)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    if losses:
        metrics["first_logged_loss"], metrics["last_logged_loss"] = losses[0], losses[-1]
    return metrics


def average(trainer: VaswaniTrainer, plan: RunPlan, state) -> list[str]:
    """Section 6.1: the average of the last N checkpoints, written by the main process to OUTPUT/averaged and loaded
    into the model on every process. Returns the checkpoints averaged (none: the final weights are kept)."""
    trainer.accelerator.wait_for_everyone()
    average_last = plan.recipe.average_last
    if average_last <= 1:
        return []
    found = last_checkpoints(plan.output_dir, average_last)
    if len(found) < 2:
        logger.warning("average_last=%d but only %d checkpoint(s) exist: using the final weights", average_last,
                       len(found))
        return []
    averaged = plan.output_dir / "averaged"
    if state.is_main_process:
        save_averaged_checkpoint(found, averaged, overwrite=True, own=True)  # this run's own folder
    trainer.accelerator.wait_for_everyone()
    from safetensors.torch import load_file

    model = trainer.accelerator.unwrap_model(trainer.model)
    load_averaged_weights(model, load_file(str(averaged / "model.safetensors")))
    logger.info("averaged %d checkpoints: %s", len(found), ", ".join(f.name for f in found))
    return [f.name for f in found]


def final_scores(trainer: VaswaniTrainer, plan: RunPlan, data: RunData, state) -> dict[str, Any]:
    """Validation and test scores of the final (averaged) model, every process taking part; each split's hypotheses
    written in corpus order. Beam size: the model's generation config unless `test_num_beams`."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    num_beams = plan.recipe.test_num_beams or model.generation_config.num_beams
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
    """Main process: example translations, plots, metrics.json and the Hub-ready folder."""
    recipe, out = plan.recipe, plan.output_dir
    model = trainer.accelerator.unwrap_model(trainer.model)
    if recipe.translate_examples:
        from ..inference import translate

        outputs = translate(model, data.tokenizer, recipe.translate_examples, num_beams=metrics["final_num_beams"],
                            device=trainer.args.device, progress=False)
        metrics["examples"] = [{"source": s, "translation": t} for s, t in zip(recipe.translate_examples, outputs)]
        print("\nTranslations:")
        for s, t in zip(recipe.translate_examples, outputs):
            print(f"  {s}\n    -> {t}")
    history = read_history(out / "history.jsonl") or trainer.state.log_history
    metrics["plots"] = plot_history(history, out)
    signatures = getattr(trainer.compute_metrics, "signatures", None)
    export_hub_folder(model, data.tokenizer, plan, metrics, history=history, signatures=signatures)
    metrics["export_dir"] = str(plan.export_dir)
    io.write_json(out / "metrics.json", metrics)
    summary = {k: metrics[k] for k in ("first_logged_loss", "last_logged_loss", "valid/loss", "valid/nll",
                                       "valid/bleu", "test/loss", "test/bleu", "train_tgt_tokens_per_second",
                                       "padding_share_tgt") if k in metrics}
    logger.info("done: %s", json.dumps(summary, default=str))
    logger.info("model folder: %s | metrics: %s", plan.export_dir, out / "metrics.json")


def take_folder(plan: RunPlan, state) -> io.FolderLock | None:
    """The main process takes the output folder (its lock: one run at a time); every process learns whether it got
    it. Returns the lock the main process holds."""
    from accelerate.utils import broadcast_object_list

    lock, refusal = None, [None]
    state.wait_for_everyone()  # every process has checked the folder (its lock probe) before the main one takes it
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
    """The main process clears a run it replaces and writes the recipe and its run info; then every process."""
    out = plan.output_dir
    if state.is_main_process:
        if plan.output.start == "overwrite":
            removed = clear_previous_run(out)
            if removed:
                logger.warning("--overwrite: removed the previous run's %s", ", ".join(removed))
        if (out / STAGING_DIR).exists():  # leftovers of a save interrupted by a crash
            shutil.rmtree(out / STAGING_DIR)
        io.write_json(out / f"run_info_rank{state.process_index}.json", run_info(plan))
        with io.replace_atomically(out / "recipe.yaml") as temporary:
            temporary.write_text(recipe_yaml(plan.recipe), encoding="utf-8")
    state.wait_for_everyone()
    if not state.is_main_process:
        io.write_json(out / f"run_info_rank{state.process_index}.json", run_info(plan))
    logger.info("recipe %s | world size %d (%s) | process %d", plan.recipe.name, plan.world.processes,
                plan.world.distributed_type, plan.world.index)


def run_info(plan: RunPlan) -> dict[str, Any]:
    return {"world_size": plan.world.processes, "process_index": plan.world.index,
            "distributed_type": plan.world.distributed_type, "device": plan.world.device,
            "torch_threads": torch.get_num_threads()}


def prepare_run(recipe: Recipe, overwrite: bool):
    """Logging, threads, the distributed state and the plan; checks on every process before anything is written."""
    from accelerate import PartialState

    setup_logging()
    if recipe.torch_threads > 0:
        torch.set_num_threads(recipe.torch_threads)
    state = PartialState(cpu=use_cpu(recipe))
    return state, plan_run(recipe, overwrite=overwrite, world=World.from_state(state))


def run_training(recipe: Recipe, callbacks: Sequence[TrainerCallback] = (), *, overwrite: bool = False) -> dict:
    """Run a checked recipe end to end: data, tokenizer, model, training, averaging, evaluation, export.
    `callbacks` are added to the Trainer's (e.g. to observe the run in tests). `overwrite`: replace a previous run in
    output_dir (without it, and without `recipe.resume`, a folder holding a run is refused). A finished run resumed
    does nothing and returns its metrics. Returns the final metrics (also written to OUTPUT_DIR/metrics.json by the
    main process), with the time and memory of each stage (`run_clock`)."""
    clock = RunClock()
    with clock.stage("checks and corpora"):
        state, plan = prepare_run(recipe, overwrite)
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
    logger.info("first update: started %.1f s after launch, took %.1f s", clock.first_update.get("started_s", -1),
                clock.first_update.get("seconds", -1))
    with clock.stage("averaging"):
        metrics["averaged_checkpoints"] = average(trainer, plan, state)
    with clock.stage("final scores"):
        metrics.update(final_scores(trainer, plan, data, state))
    if state.is_main_process:
        metrics["run_clock"] = clock.report()
        finish(trainer, plan, data, metrics)
    trainer.accelerator.wait_for_everyone()
    return metrics
