"""A training run end to end, as the paper's recipe has it: data and shared BPE (5.1), model (Table 3), training with
token batches, Adam and the warm-up schedule (5.1-5.4), checkpoint averaging (6.1), validation and test scores of
the averaged model, and a Hub-ready folder.

Every step is a short function; `run_training` calls them in order. Multi-process runs (Accelerate/DDP) run the same
steps on every process; what writes files runs on the main process while the others wait.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from .callbacks import BatchStatsCollator, HistoryCallback, RunClock, SamplerEpochCallback, read_history
from .checkpoints import (
    STAGING_DIR,
    WallClockCallback,
    last_checkpoints,
    load_averaged_weights,
    save_averaged_checkpoint,
)
from .preflight import check_output_dir, clear_previous_run, resolve_dir, resolve_path
from .recipe import Recipe, RecipeError
from .report import export_hub_folder, plot_history, recipe_yaml, write_hypotheses, write_json
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


def use_cpu(recipe: Recipe) -> bool:
    """CPU training if the recipe asks, if `ACCELERATE_USE_CPU` is set, or if several processes were launched on a
    machine without CUDA. Accelerate's `PartialState(cpu=False)` would otherwise give every process of
    `accelerate launch --multi_gpu --num_processes 2` on a CPU-only machine its own world of size 1 (independent
    rank-0 runs); with cpu=True they form one MULTI_CPU (gloo) group. Also on a machine with no accelerator at all:
    `TrainingArguments` refuses `bf16=True` there unless `use_cpu` is set, although bf16 autocast on CPU is supported."""
    import os

    from accelerate.utils import parse_flag_from_env

    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    has_accelerator = torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    return bool(recipe.use_cpu or parse_flag_from_env("ACCELERATE_USE_CPU")
                or (launched and not torch.cuda.is_available()) or not has_accelerator)


def local_processes(world_size: int) -> int:
    """Processes on this machine (they share its memory on a CPU)."""
    import os

    return int(os.environ.get("LOCAL_WORLD_SIZE", world_size))


def build_training_arguments(recipe: Recipe, world_size: int | None = None):
    """The `Seq2SeqTrainingArguments` of a recipe. Batch sizes are token budgets (the trainer's own); saving is
    decided by `WallClockCallback`; the learning rate is the Section 5.3 formula's constant factor."""
    from accelerate import PartialState
    from transformers import Seq2SeqTrainingArguments

    cpu = use_cpu(recipe)
    state = PartialState(cpu=cpu)
    if world_size is None:
        world_size = state.num_processes
    _, accumulation = recipe.tokens_per_device(world_size, state.device, local_processes(world_size))
    return Seq2SeqTrainingArguments(
        output_dir=recipe.output_dir, max_steps=recipe.max_steps if recipe.max_steps > 0 else -1,
        num_train_epochs=recipe.num_train_epochs, learning_rate=paper_base_lr(recipe.d_model, recipe.lr_multiplier),
        weight_decay=recipe.weight_decay, adam_beta1=recipe.adam_beta1, adam_beta2=recipe.adam_beta2,
        adam_epsilon=recipe.adam_epsilon, max_grad_norm=recipe.max_grad_norm,
        gradient_accumulation_steps=accumulation,
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


def _load_split(recipe: Recipe, name: str):
    from ..data.corpora import load_parallel, load_sample_corpus

    value = recipe[name]
    if value is None:
        return None
    if recipe.data_format == "sample":
        return load_sample_corpus(value, recipe.src_lang, recipe.tgt_lang)
    if recipe.data_format == "hub":
        return load_parallel(recipe.hub_dataset, recipe.src_lang, recipe.tgt_lang, format="hub",
                             config=recipe.hub_config, split=value)
    return load_parallel(str(resolve_path(value, recipe.data_dir)), recipe.src_lang, recipe.tgt_lang,
                         format=recipe.data_format)


def load_corpora(recipe: Recipe) -> dict[str, Any]:
    """The raw splits (every line decoded and parsed: a bad file is refused here, before anything is written)."""
    from ..data.corpora import usable_pairs

    splits = {name: _load_split(recipe, f"{name}_data") for name in ("train", "valid", "test")}
    for name, split in splits.items():
        if split is not None and usable_pairs(split, recipe.src_lang, recipe.tgt_lang) == 0:
            where = recipe[f"{name}_data"] if recipe.data_format in ("sample", "hub") else \
                resolve_path(recipe[f"{name}_data"], recipe.data_dir)
            raise RecipeError(f"{name}_data: {where} has no sentence pair with both sides non-empty ({len(split)} "
                              f"pairs); nothing to {'train on' if name == 'train' else 'score'}")
    if recipe.max_train_samples > 0:
        splits["train"] = splits["train"].select(range(min(recipe.max_train_samples, len(splits["train"]))))
    if splits["valid"] is not None and recipe.max_eval_samples > 0:
        splits["valid"] = splits["valid"].select(range(min(recipe.max_eval_samples, len(splits["valid"]))))
    return splits


def prepare_data(recipe: Recipe, splits: dict[str, Any], state, clock: RunClock) -> RunData:
    """Shared BPE (trained on the training pairs, or loaded) and the tokenized, filtered splits. A training split with
    no usable pair after filtering is refused (nothing would be learned)."""
    from ..data.preprocessing import prepare_dataset

    started = time.time()
    with clock.stage("tokenizer"), state.main_process_first():
        tokenizer = shared_bpe(recipe, splits["train"])
    prep = dict(num_proc=recipe.preprocessing_num_workers)
    with clock.stage("tokenize and filter"), state.main_process_first():  # the others read the main one's cache
        train, report = prepare_dataset(splits["train"], tokenizer, recipe.src_lang, recipe.tgt_lang,
                                        max_length=recipe.max_length, max_ratio=recipe.max_length_ratio, **prep)
        held_out = {name: prepare_dataset(splits[name], tokenizer, recipe.src_lang, recipe.tgt_lang, max_length=None,
                                          max_ratio=None, **prep)[0] if splits[name] is not None else None
                    for name in ("valid", "test")}
    logger.info("training pairs: %s", report)
    if report.kept == 0:
        raise RecipeError(f"train_data: no usable training pair ({report}); check the corpus, max_length and "
                          "max_length_ratio")
    return RunData(tokenizer, train, held_out["valid"], held_out["test"], report, time.time() - started)


def shared_bpe(recipe: Recipe, train_split):
    """Section 5.1's one BPE vocabulary for source and target: OUTPUT_DIR/tokenizer (or `tokenizer_path`) if it
    exists; else the one trained earlier on the same corpus with the same settings (kept in the datasets cache, see
    vaswani_hf.data.cache); else trained on the training pairs now, and kept."""
    import shutil

    from ..data import cache
    from ..tokenization import load_tokenizer, train_bpe_tokenizer

    folder = resolve_dir(recipe.tokenizer_path) if recipe.tokenizer_path else Path(recipe.output_dir) / "tokenizer"
    name = None
    if train_split.cache_files and cache.enabled():  # a file-backed corpus has a stable fingerprint
        name = "bpe-" + cache.key(train_split._fingerprint, recipe.vocab_size, recipe.bpe_min_frequency,
                                  recipe.lowercase, recipe.src_lang, recipe.tgt_lang)
    if not folder.is_dir() and name and cache.cached_tokenizer(name):
        shutil.copytree(cache.cached_tokenizer(name), folder)
        logger.info("joint BPE of this corpus and these settings taken from the cache: %s", cache.cached_tokenizer(name))
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


def build_model(recipe: Recipe, tokenizer):
    from transformers import set_seed

    from ..modeling_vaswani import VaswaniForConditionalGeneration

    config = recipe.model_config(vocab_size=len(tokenizer))
    set_seed(recipe.seed)  # the same initial weights on every run and rank
    model = VaswaniForConditionalGeneration(config)
    logger.info("model: d_model=%d d_ff=%d heads=%d layers=%d/%d vocab=%d params=%.2fM", config.d_model, config.d_ff,
                config.num_heads, config.num_encoder_layers, config.num_decoder_layers, config.vocab_size,
                sum(p.numel() for p in model.parameters()) / 1e6)
    return model


def build_trainer(recipe: Recipe, model, data: RunData, state, callbacks: Sequence[TrainerCallback]) -> VaswaniTrainer:
    from ..data.batching import Seq2SeqCollator
    from ..evaluation import make_compute_metrics

    out = Path(recipe.output_dir)
    args = build_training_arguments(recipe, state.num_processes)
    max_tokens, _ = recipe.tokens_per_device(state.num_processes, state.device, local_processes(state.num_processes))
    logger.info("batching: %d tokens/device x %d processes x %d accumulation = %d tokens per update (target)%s",
                max_tokens, state.num_processes, args.gradient_accumulation_steps,
                max_tokens * state.num_processes * args.gradient_accumulation_steps,
                " (max_tokens_per_device: auto)" if recipe.max_tokens_per_device == "auto" else "")
    batch_log = out / f"batches_rank{state.process_index}.jsonl" if recipe.debug_log_batches else None
    if batch_log is not None and batch_log.exists() and not recipe.resume:
        batch_log.unlink()
    has_scores = data.valid is not None or data.test is not None
    return VaswaniTrainer(
        model=model, args=args, train_dataset=data.train, eval_dataset=data.valid, processing_class=data.tokenizer,
        data_collator=BatchStatsCollator(Seq2SeqCollator(), log_path=batch_log),
        compute_metrics=make_compute_metrics(data.tokenizer, tokenize=recipe.bleu_tokenize) if has_scores else None,
        callbacks=[WallClockCallback(recipe.save_every_minutes, recipe.max_train_minutes, recipe.save_steps),
                   SamplerEpochCallback(), HistoryCallback(out / "history.jsonl"), *callbacks],
        optimizer_cls_and_kwargs=paper_optimizer_cls_and_kwargs(recipe), max_tokens=max_tokens,
        eval_max_tokens=recipe.eval_max_tokens or max_tokens,
        max_sentences=recipe.max_sentences or None, paper_warmup_steps=recipe.warmup_steps,
        label_smoothing=recipe.label_smoothing)


def train(trainer: VaswaniTrainer, resume_from: Path | None, data: RunData) -> dict[str, Any]:
    """Train; the metrics of training: losses, speed (target tokens/s summed over processes), padding."""
    started = time.time()
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    seconds = time.time() - started
    metrics: dict[str, Any] = {f"train/{k}": v for k, v in result.metrics.items()}
    metrics.update(world_size=trainer.args.world_size, global_step=trainer.state.global_step,
                   gradient_accumulation_steps=trainer.args.gradient_accumulation_steps,
                   max_tokens_per_device=trainer.max_tokens,
                   tokens_per_update=trainer.max_tokens * trainer.args.world_size
                   * trainer.args.gradient_accumulation_steps,
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


def average(trainer: VaswaniTrainer, recipe: Recipe, state) -> list[str]:
    """Section 6.1: the average of the last N checkpoints, written by the main process to OUTPUT/averaged and loaded
    into the model on every process. Returns the checkpoints averaged (none: the final weights are kept)."""
    trainer.accelerator.wait_for_everyone()
    if recipe.average_last <= 1:
        return []
    found = last_checkpoints(recipe.output_dir, recipe.average_last)
    if len(found) < 2:
        logger.warning("average_last=%d but only %d checkpoint(s) exist: using the final weights", recipe.average_last,
                       len(found))
        return []
    averaged = Path(recipe.output_dir) / "averaged"
    if state.is_main_process:
        save_averaged_checkpoint(found, averaged, overwrite=True)  # this run's own folder
    trainer.accelerator.wait_for_everyone()
    from safetensors.torch import load_file

    load_averaged_weights(trainer.accelerator.unwrap_model(trainer.model), load_file(str(averaged / "model.safetensors")))
    logger.info("averaged %d checkpoints: %s", len(found), ", ".join(f.name for f in found))
    return [f.name for f in found]


def final_scores(trainer: VaswaniTrainer, recipe: Recipe, data: RunData, state) -> dict[str, Any]:
    """Validation and test scores of the final (averaged) model, every process taking part; each split's hypotheses
    written in corpus order. Beam size: the model's generation config unless `test_num_beams`."""
    num_beams = recipe.test_num_beams or trainer.accelerator.unwrap_model(trainer.model).generation_config.num_beams
    metrics: dict[str, Any] = {"final_num_beams": num_beams}
    for split, dataset in (("valid", data.valid), ("test", data.test)):
        if dataset is None:
            continue
        prediction = trainer.predict(dataset, metric_key_prefix=split, num_beams=num_beams)
        metrics.update({k.replace(f"{split}_", f"{split}/", 1): v for k, v in prediction.metrics.items()})
        if state.is_main_process and prediction.predictions is not None:
            write_hypotheses(Path(recipe.output_dir) / f"{split}_hypotheses.txt", data.tokenizer,
                             prediction.predictions)
    return metrics


def finish(trainer: VaswaniTrainer, recipe: Recipe, data: RunData, metrics: dict[str, Any]) -> None:
    """Main process: example translations, plots, metrics.json and the Hub-ready folder."""
    out = Path(recipe.output_dir)
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
    export_dir = Path(recipe.export_dir) if recipe.export_dir else out / "hub"
    signatures = getattr(trainer.compute_metrics, "signatures", None)
    export_hub_folder(model, data.tokenizer, export_dir, metrics, recipe=recipe, history=history,
                      signatures=signatures, overwrite=True)  # checked by preflight: this run's own folder
    metrics["export_dir"] = str(export_dir)
    write_json(out / "metrics.json", metrics)
    summary = {k: metrics[k] for k in ("first_logged_loss", "last_logged_loss", "valid/loss", "valid/nll",
                                       "valid/bleu", "test/loss", "test/bleu", "train_tgt_tokens_per_second",
                                       "padding_share_tgt") if k in metrics}
    logger.info("done: %s", json.dumps(summary, default=str))
    logger.info("model folder: %s | metrics: %s", export_dir, out / "metrics.json")


def start(recipe: Recipe, overwrite: bool):
    """Checks before any write (every process), then the main process prepares the output folder."""
    from accelerate import PartialState

    setup_logging()
    if recipe.torch_threads > 0:
        torch.set_num_threads(recipe.torch_threads)
    state = PartialState(cpu=use_cpu(recipe))
    resume_from = check_output_dir(recipe, overwrite=overwrite)
    splits = load_corpora(recipe)
    state.wait_for_everyone()  # every process has checked the folder before the main process writes into it
    out = Path(recipe.output_dir)
    if state.is_main_process:
        if overwrite and not recipe.resume and out.is_dir():
            removed = clear_previous_run(out)
            if removed:
                logger.warning("--overwrite: removed the previous run's %s", ", ".join(removed))
        out.mkdir(parents=True, exist_ok=True)
        if (out / STAGING_DIR).exists():  # leftovers of a save interrupted by a crash
            shutil.rmtree(out / STAGING_DIR)
        (out / "recipe.yaml").write_text(recipe_yaml(recipe), encoding="utf-8")
    state.wait_for_everyone()
    logger.info("recipe %s | world size %d (%s) | process %d", recipe.name, state.num_processes,
                state.distributed_type, state.process_index)
    write_json(out / f"run_info_rank{state.process_index}.json",
               {"world_size": state.num_processes, "process_index": state.process_index,
                "distributed_type": str(state.distributed_type), "device": str(state.device),
                "torch_threads": torch.get_num_threads()})
    return state, resume_from, splits


def run_training(recipe: Recipe, callbacks: Sequence[TrainerCallback] = (), *, overwrite: bool = False) -> dict:
    """Run a validated recipe end to end: data, tokenizer, model, training, averaging, evaluation, export.
    `callbacks` are added to the Trainer's (e.g. to observe the run in tests). `overwrite`: replace a previous run in
    output_dir (without it, and without `recipe.resume`, a folder holding a run is refused). Returns the final
    metrics (also written to OUTPUT_DIR/metrics.json by the main process), with the time and memory of each stage
    (`run_clock`)."""
    clock = RunClock()
    with clock.stage("checks and corpora"):
        state, resume_from, splits = start(recipe, overwrite)
    data = prepare_data(recipe, splits, state, clock)
    with clock.stage("model"):
        model = build_model(recipe, data.tokenizer)
    trainer = build_trainer(recipe, model, data, state, [clock, *callbacks])
    if resume_from is not None:
        logger.info("resuming from %s", resume_from)
    with clock.stage("training"):
        metrics = train(trainer, resume_from, data)
    logger.info("first update: started %.1f s after launch, took %.1f s", clock.first_update.get("started_s", -1),
                clock.first_update.get("seconds", -1))
    with clock.stage("averaging"):
        metrics["averaged_checkpoints"] = average(trainer, recipe, state)
    with clock.stage("final scores"):
        metrics.update(final_scores(trainer, recipe, data, state))
    if state.is_main_process:
        metrics["run_clock"] = clock.report()
        finish(trainer, recipe, data, metrics)
    trainer.accelerator.wait_for_everyone()
    return metrics
