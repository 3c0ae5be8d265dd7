"""Build the model and train it with `VaswaniTrainer`, transformers' `Seq2SeqTrainer` with the paper's batching,
objective, schedule and checkpoints.

`build_model` builds the recipe's model (`recipe.model`, the `VaswaniConfig` checked when the recipe was read) at the
tokenizer's vocabulary size; `build_trainer` states the run's `Seq2SeqTrainingArguments` once and builds the trainer
around the model, with `vaswani_hf.training.objective`'s loss, Adam and learning rate; `train` trains (or, for a run
whose training is done, loads its last state) and returns what training measured. The trainer departs from
transformers' where the paper asks for it:
- Section 5.1: the DataLoaders use `TokenBatchSampler`, since transformers batches by sentence count only;
- Section 5.4: the label-smoothed loss goes through the `compute_loss_func` hook, optionally chunked, and evaluation
  reports `eval_loss` (smoothed), `eval_nll` and `eval_ppl`;
- Section 5.3: Adam(0.9, 0.98, 1e-9) runs with the exact learning-rate formula;
- evaluation works across processes (`evaluation_loop`), where transformers' `all_gather` needs equal shapes, and
  checkpoints are atomic (`_save_checkpoint`), where transformers writes straight into `checkpoint-N`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import shutil
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import datasets
import numpy as np
import torch
from accelerate.utils import gather_object
from safetensors.torch import load_file
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback, TrainerState, set_seed
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.integrations.fsdp import is_fsdp_managed_module
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import (
    PREFIX_CHECKPOINT_DIR,
    EvalLoopOutput,
    EvalPrediction,
    denumpify_detensorize,
    rotate_checkpoints,
    seed_worker,
)

from ..data.batching import EXAMPLE_INDEX, LABEL_PAD_ID, Seq2SeqCollator, TokenBatchSampler
from ..metrics.scores import make_compute_metrics
from ..modeling_vaswani import VaswaniForConditionalGeneration
from ..settings import MODEL_SETTINGS
from ..tokenization import PAD_ID
from .callbacks import BatchStatsCollator, HistoryCallback, SamplerEpochCallback, TrainingProgress
from .checkpoints import (
    STAGING_DIR,
    WallClockCallback,
    checkpoint_write_errors,
    load_averaged_weights,
    publish_checkpoint,
)
from .objective import (
    PAPER_LABEL_SMOOTHING,
    LabelSmoothedLoss,
    get_paper_schedule,
    label_smoothed_nll,
    output_projection_deferred,
    paper_base_lr,
    paper_optimizer_cls_and_kwargs,
)
from .plan import RunPlan, evaluation_budget
from .recipe import report_integrations

if TYPE_CHECKING:
    from .data import RunData

logger = logging.getLogger(__name__)


def unshard_prepared_loader(prepared: DataLoader, sampler: TokenBatchSampler) -> DataLoader:
    """Make the `BatchSamplerShard` that Accelerate wraps around `sampler` in multi-process runs a pass-through, since
    the sampler is already rank-aware."""
    shard = getattr(prepared, "batch_sampler", None)
    if shard is sampler:
        return prepared
    if getattr(shard, "batch_sampler", None) is not sampler:
        raise RuntimeError(f"unexpected batch sampler after accelerator.prepare: {type(shard).__name__}")
    shard.num_processes, shard.process_index = 1, 0
    return prepared


def _per_sentence(
    rows: list[int], predictions: torch.Tensor, labels: torch.Tensor | None, pad_id: int
) -> list[tuple[int, list[int], list[int]]]:
    """Return one (row, prediction ids, label ids) per sentence of a batch, as lists without padding, from the
    batch's (B, T) tensors."""
    items = []
    for b, row in enumerate(rows):
        prediction = predictions[b].tolist()
        while prediction and prediction[-1] in (pad_id, LABEL_PAD_ID):
            prediction.pop()
        label = [] if labels is None else [t for t in labels[b].tolist() if t != LABEL_PAD_ID]
        items.append((int(row), prediction, label))
    return items


def _stack_sentences(sentences: list[tuple[int, list[int], list[int]]], pad_id: int):
    """Return the sentences' predictions as an (N, T) numpy array padded with `pad_id` and their labels as an
    (N, L) one padded with -100, or (None, None) without sentences."""
    if not sentences:
        return None, None
    predictions = np.full((len(sentences), max(1, max(len(p) for _, p, _ in sentences))), pad_id, dtype=np.int64)
    labels = np.full((len(sentences), max(1, max(len(x) for _, _, x in sentences))), LABEL_PAD_ID, dtype=np.int64)
    for i, (_, prediction, label) in enumerate(sentences):
        predictions[i, : len(prediction)] = prediction
        labels[i, : len(label)] = label
    return predictions, labels


class VaswaniTrainer(Seq2SeqTrainer):
    """Train as `Seq2SeqTrainer` does, with the paper's recipe: a device's batch holds up to `max_tokens` padded source
    and as many target tokens (`per_device_*_batch_size` is ignored), and an evaluation batch `eval_max_tokens`.
    Accelerate's `split_batches` / `dispatch_batches` (which re-cut batches by sentence count) are refused."""

    def __init__(
        self,
        *args: Any,
        max_tokens: int,
        eval_max_tokens: int | None = None,
        max_sentences: int | None = None,
        warmup_steps: int = 4000,
        label_smoothing: float = PAPER_LABEL_SMOOTHING,
        optimizer_cls_and_kwargs=None,
        loss_chunk_tokens: int = 0,
        **kwargs: Any,
    ):
        if kwargs.get("data_collator") is None:
            kwargs["data_collator"] = Seq2SeqCollator()
        if loss_chunk_tokens and kwargs.get("compute_loss_func") is not None:
            raise ValueError("loss_chunk_tokens chunks VaswaniTrainer's own objective: leave compute_loss_func unset")
        if kwargs.get("compute_loss_func") is None:
            kwargs["compute_loss_func"] = LabelSmoothedLoss(label_smoothing)
        super().__init__(*args, **kwargs)
        if not self.args.disable_tqdm:  # Use every tool's progress report, with plain lines in a log.
            self.remove_callback(ProgressCallback)
            self.add_callback(TrainingProgress)
        self.loss_chunk_tokens = loss_chunk_tokens
        if loss_chunk_tokens:
            if self.is_fsdp_enabled or self.is_deepspeed_enabled:
                raise ValueError(
                    "loss_chunk_tokens reads the output projection's weight outside the model's forward, "
                    "where FSDP/DeepSpeed ZeRO keep it sharded: set loss_chunk_tokens 0"
                )
            self.compute_loss_func = LabelSmoothedLoss(
                label_smoothing, loss_chunk_tokens, self.model.get_output_embeddings()
            )
        self.label_smoothing = label_smoothing
        self.max_tokens, self.eval_max_tokens = max_tokens, evaluation_budget(max_tokens, eval_max_tokens)
        self.max_sentences = max_sentences
        self.warmup_steps = warmup_steps
        if optimizer_cls_and_kwargs is not None:  # Seq2SeqTrainer's __init__ does not forward it.
            self.optimizer_cls_and_kwargs = optimizer_cls_and_kwargs
        self._eval_batches: dict[str, int] = {}
        self._eval_sums: torch.Tensor | None = None
        self._train_sentences = 0
        self._staging = False

    # -- Section 5.1: token-budget DataLoaders --------------------------------------------------------------------

    def _token_dataloader(self, dataset: datasets.Dataset, *, training: bool, description: str) -> DataLoader:
        cfg = getattr(self.accelerator, "dataloader_config", None)
        if cfg is not None and (cfg.split_batches or cfg.dispatch_batches):
            raise ValueError(
                "VaswaniTrainer does not support accelerator_config split_batches/dispatch_batches: "
                "they re-cut token batches by sentence count"
            )
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(f"token batching needs a tokenized datasets.Dataset, got {type(dataset).__name__}")
        dataset = self._remove_unused_columns(dataset, description=description)
        if not training:  # evaluation_loop keys each sentence's result by its row.
            dataset = dataset.add_column(EXAMPLE_INDEX, np.arange(len(dataset), dtype=np.int64))
        world, rank = max(1, self.args.world_size), (self.args.process_index if self.args.world_size > 1 else 0)
        sampler = TokenBatchSampler.from_dataset(
            dataset,
            self.max_tokens if training else self.eval_max_tokens,
            max_sentences=self.max_sentences,
            shuffle=training,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            num_replicas=world,
            rank=rank,
            pad_to_multiple_of=getattr(self.data_collator, "pad_to_multiple_of", None),
        )
        workers = self.args.dataloader_num_workers  # The run's data path comes from training.plan.
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=workers,
            pin_memory=self.args.dataloader_pin_memory,
            prefetch_factor=self.args.dataloader_prefetch_factor if workers > 0 else None,
            persistent_workers=self.args.dataloader_persistent_workers and workers > 0,
            worker_init_fn=partial(seed_worker, num_workers=workers, rank=rank) if training else None,
        )
        return unshard_prepared_loader(self.accelerator.prepare(loader), sampler)

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        return self._token_dataloader(self.train_dataset, training=True, description="Training")

    def get_eval_dataloader(self, eval_dataset: str | datasets.Dataset | None = None) -> DataLoader:
        if eval_dataset is None and self.eval_dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        if isinstance(eval_dataset, str):
            eval_dataset = self.eval_dataset[eval_dataset]
        return self._token_dataloader(
            eval_dataset if eval_dataset is not None else self.eval_dataset, training=False, description="Evaluation"
        )

    def get_test_dataloader(self, test_dataset: datasets.Dataset) -> DataLoader:
        return self._token_dataloader(test_dataset, training=False, description="test")

    # -- Section 5.3: optimizer and schedule ---------------------------------------------------------------------

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        if self.lr_scheduler is None:
            self.lr_scheduler = get_paper_schedule(optimizer or self.optimizer, self.warmup_steps)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def _get_grad_norm(self, model, grad_norm=None):
        """Return the gradient norm for transformers' log, or None when gradients are not clipped.

        The paper does not clip (`max_grad_norm` 0), and computing the norm anyway would be a full pass over every
        gradient, 1-2% of a Multi30k CPU step.
        """
        if grad_norm is None and self.args.max_grad_norm <= 0:
            return None
        return super()._get_grad_norm(model, grad_norm=grad_norm)

    def _issue_warnings_after_load(self, load_result) -> None:
        """Re-tie, rather than report, a missing key that is tied to a loaded tensor; report any other key with
        transformers' own warning. safetensors keeps one name of tied tensors (Section 3.4: the embeddings and the
        pre-softmax projection), so otherwise every clean resume would warn "missing keys ... lm_head.weight"."""
        model = self.accelerator.unwrap_model(self.model)
        tied = dict(getattr(model, "all_tied_weights_keys", None) or {})
        missing = list(load_result.missing_keys)
        kept = [key for key in missing if not (key in tied and tied[key] not in missing)]
        if len(kept) < len(missing):
            model.tie_weights()
        super()._issue_warnings_after_load(
            SimpleNamespace(missing_keys=kept, unexpected_keys=list(load_result.unexpected_keys))
        )

    # -- atomic checkpoints (Section 6.1's checkpoints are averaged and resumed from) -----------------------------

    def _get_output_dir(self, trial):
        run_dir = super()._get_output_dir(trial)
        return os.path.join(run_dir, STAGING_DIR) if self._staging else run_dir

    def _save_checkpoint(self, model, trial):
        """Save with transformers' own save (on every rank) into `OUTPUT/.staging/checkpoint-N`; then rank 0 renames it
        into place and rotates the kept checkpoints by step. A failed or interrupted save leaves no staged part."""
        run_dir = super()._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = Path(run_dir, STAGING_DIR)
        staged, final = staging / name, Path(run_dir, name)
        if self.args.should_save and staged.exists():
            shutil.rmtree(staged)
        self.accelerator.wait_for_everyone()
        self._staging = True
        try:
            with checkpoint_write_errors(staged, final):  # A full disk gives one line, not a traceback.
                super()._save_checkpoint(model, trial)
            self._staging = False
            self.accelerator.wait_for_everyone()
            if self.args.should_save:
                publish_checkpoint(staged, final)
        except BaseException:
            if self.args.should_save:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            self._staging = False
        if self.args.should_save:
            rotate_checkpoints(
                run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=False,
            )
            logger.info("checkpoint written atomically: %s", final)
        self.accelerator.wait_for_everyone()

    # -- the training loss, optionally chunked ----------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Compute the loss with transformers' own `compute_loss`. With `loss_chunk_tokens` the output projection is
        deferred, so `logits` are hidden states that the objective projects chunk by chunk (also in
        `return_outputs`)."""
        if not self.loss_chunk_tokens:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        with output_projection_deferred(self.model):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    # -- speed metrics: transformers counts samples as batches x per_device_*_batch_size (1 here) -----------------

    def training_step(self, model, inputs, *args: Any, **kwargs: Any):
        self._train_sentences += int(inputs["labels"].shape[0])
        return super().training_step(model, inputs, *args, **kwargs)

    def _fix_steps_per_second(self, metrics: dict[str, float]) -> None:
        for prefix in [p for p in self._eval_batches if f"{p}_steps_per_second" in metrics]:
            batches, runtime = self._eval_batches.pop(prefix), metrics.get(f"{prefix}_runtime")
            if runtime:
                metrics[f"{prefix}_steps_per_second"] = round(batches / runtime, 3)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Log as transformers does, with two rates counted by what was really done. At the end of `train`,
        `train_samples_per_second` counts the sentences trained, summed over processes. The evaluation's
        `steps_per_second` counts the batches this process evaluated, because transformers derives it from a fixed
        batch size, which token batches do not have."""
        self._fix_steps_per_second(logs)
        if "train_samples_per_second" in logs and logs.get("train_runtime"):
            sentences = torch.tensor([self._train_sentences], device=self.args.device)
            self._train_sentences = 0
            sentences = int(self.accelerator.reduce(sentences, reduction="sum").item())
            logs["train_samples_per_second"] = round(sentences / logs["train_runtime"], 3)
        super().log(logs, *args, **kwargs)

    @contextlib.contextmanager
    def _not_counting(self):
        """Stop the batch statistics (tokens/s, padding) inside the block, so that they count training batches only."""
        collator, old = self.data_collator, getattr(self.data_collator, "active", None)
        if old is not None:
            collator.active = False
        try:
            yield
        finally:
            if old is not None:
                collator.active = old

    def evaluate(self, *args: Any, **kwargs: Any):
        with self._not_counting():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any):
        with self._not_counting():
            output = super().predict(*args, **kwargs)
        self._fix_steps_per_second(output.metrics)
        return output

    # -- evaluation, correct for any number of processes and any token budget ------------------------------------
    # transformers' `evaluation_loop` gathers every batch with `all_gather`, which needs equal shapes on every rank, so
    # token batches hung NCCL; and it weights each batch's mean loss by the FIRST batch's size, so the loss depended on
    # the budget. Here each process evaluates its shard, then all make two calls: an all-reduce of the loss sums, and
    # an all_gather_object of the sentences, which are scored once each in row order.

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        prediction_loss_only = self.args.prediction_loss_only if prediction_loss_only is None else prediction_loss_only
        model = self._prepare_model_for_evaluation()
        self._eval_batches[metric_key_prefix] = len(dataloader)
        self.callback_handler.eval_dataloader = dataloader
        self._eval_sums = torch.zeros(3, dtype=torch.float64, device=self.args.device)  # Loss, NLL, token sums.
        sentences: list[tuple[int, list[int], list[int]]] = []  # (row index, prediction ids, label ids)
        for inputs in dataloader:
            rows = inputs.pop(EXAMPLE_INDEX).tolist()
            _, predictions, labels = self.prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
            if predictions is not None:
                sentences.extend(_per_sentence(rows, predictions, labels, self._pad_id()))
            self.control = self.callback_handler.on_prediction_step(self.args, self.state, self.control)
        smoothed, nll, tokens = self.accelerator.reduce(self._eval_sums, reduction="sum").tolist()
        self._eval_sums = None
        if self.args.world_size > 1 and not prediction_loss_only:
            sentences = gather_object(sentences)
        sentences.sort(key=lambda item: item[0])
        predictions, label_ids = _stack_sentences(sentences, self._pad_id())
        metrics = {}
        if self.compute_metrics is not None and predictions is not None:
            metrics = denumpify_detensorize(self.compute_metrics(EvalPrediction(predictions, label_ids)))
        if tokens > 0:
            metrics.update(loss=smoothed / tokens, nll=nll / tokens, ppl=math.exp(min(nll / tokens, 700.0)))
        metrics = {
            (k if k.startswith(f"{metric_key_prefix}_") else f"{metric_key_prefix}_{k}"): v for k, v in metrics.items()
        }
        num_samples = len(sentences) if sentences else len(getattr(dataloader, "dataset", None) or [])
        return EvalLoopOutput(predictions=predictions, label_ids=label_ids, metrics=metrics, num_samples=num_samples)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        """Return the mean smoothed loss, the generated ids (or None) and the labels of one batch, and add the
        smoothed loss and plain NLL sums of its forward pass to the evaluation's sums."""
        inputs = self._prepare_inputs(inputs)
        labels, loss = inputs.get("labels"), None
        if labels is not None:
            with torch.no_grad(), self.compute_loss_context_manager():
                logits = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
            smoothed, tokens = label_smoothed_nll(logits, labels, self.label_smoothing)
            nll, _ = label_smoothed_nll(logits, labels, 0.0)
            if self._eval_sums is not None:
                self._eval_sums += torch.stack([smoothed.double(), nll.double(), tokens.double()]).to(
                    self._eval_sums.device
                )
            loss = smoothed.detach() / tokens.clamp(min=1)
        if prediction_loss_only or not self.args.predict_with_generate:
            return loss, None, labels
        return loss, self._generate(inputs, gen_kwargs), labels

    def _generate(self, inputs: dict, gen_kwargs: dict) -> torch.Tensor:
        """Call `model.generate` on the source only, as `Seq2SeqTrainer.prediction_step` calls it: with the same
        generation settings, and with synced GPUs under FSDP or ZeRO-3."""
        if not gen_kwargs and hasattr(self, "_gen_kwargs"):
            gen_kwargs = self._gen_kwargs.copy()
        gen_kwargs = {k: v for k, v in gen_kwargs.items() if not (k in ("num_beams", "max_length") and v is None)}
        gen_kwargs.setdefault("synced_gpus", is_deepspeed_zero3_enabled() or is_fsdp_managed_module(self.model))
        source = {
            k: v for k, v in inputs.items() if k not in ("labels", "decoder_input_ids", "decoder_attention_mask")
        }
        summon = contextlib.nullcontext()
        if torch.distributed.is_available():
            from torch.distributed.fsdp import FullyShardedDataParallel  # This import needs torch.distributed.

            if isinstance(self.model, FullyShardedDataParallel):
                summon = FullyShardedDataParallel.summon_full_params(self.model)
        with summon, torch.no_grad():
            return self.model.generate(**source, **gen_kwargs)

    def _prepare_model_for_evaluation(self):
        """Return the model transformers' `evaluation_loop` would run: unwrapped under DDP, and prepared once under
        FSDP/DeepSpeed when evaluating without training."""
        model = self._wrap_model(self.model, training=False)
        if len(self.accelerator._models) == 0 and model is self.model:
            if self.is_deepspeed_enabled or self.is_fsdp_enabled:
                model = self.accelerator.prepare(model)
                if self.is_fsdp_enabled:
                    self.model = model
                if model is not self.model:
                    self.model_wrapped = model
            else:
                model = self.accelerator.prepare_model(model, evaluation_mode=True)
        model.eval()
        return model

    def _pad_id(self) -> int:
        pad = getattr(self.processing_class, "pad_token_id", None)
        return PAD_ID if pad is None else int(pad)


# ---------------------------------------------------------------------------------------------------------------------
# The run's model, trainer and training
# ---------------------------------------------------------------------------------------------------------------------


def build_model(plan: RunPlan, tokenizer) -> VaswaniForConditionalGeneration:
    """Return the recipe's model (Table 3) at the tokenizer's vocabulary size, with the same weights on every run and
    rank of one seed. The config is the recipe's, checked when it was read; what is new here is the tokenizer's size,
    checked against its declared range, with the special token ids checked to lie below it."""
    config = copy.deepcopy(plan.recipe.model)
    vocab_size = config.vocab_size = MODEL_SETTINGS["vocab_size"].check(len(tokenizer), "tokenizer")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        MODEL_SETTINGS[name].check(getattr(config, name), "tokenizer", vocab_size=vocab_size)
    set_seed(plan.recipe.run.seed)  # Every run and rank starts from the same weights.
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


def build_training_arguments(plan: RunPlan) -> Seq2SeqTrainingArguments:
    """Return the `Seq2SeqTrainingArguments` of a plan. The batch sizes are the trainer's token budgets, saving is
    left to `WallClockCallback`, and Adam's settings (Section 5.3: its learning rate is the formula's constant factor,
    lr_multiplier x d_model^-0.5) are stated here once, for the optimizer to be built from them."""
    run, opt, evaluation, keep = plan.recipe.run, plan.recipe.optimization, plan.recipe.evaluation, None
    if plan.recipe.checkpoints.keep_last > 0:
        keep = plan.recipe.checkpoints.keep_last
    return Seq2SeqTrainingArguments(
        output_dir=str(plan.output_dir),
        max_steps=opt.max_steps if opt.max_steps > 0 else -1,
        num_train_epochs=opt.num_train_epochs,
        learning_rate=paper_base_lr(plan.recipe.model.d_model, opt.lr_multiplier),
        weight_decay=opt.weight_decay,
        adam_beta1=opt.adam_beta1,
        adam_beta2=opt.adam_beta2,
        adam_epsilon=opt.adam_epsilon,
        max_grad_norm=opt.max_grad_norm,
        gradient_accumulation_steps=plan.accumulation,
        logging_steps=run.logging_steps,
        logging_first_step=True,
        eval_strategy="steps" if evaluation.eval_steps > 0 else "no",
        eval_steps=evaluation.eval_steps if evaluation.eval_steps > 0 else None,
        eval_on_start=evaluation.eval_on_start and plan.sources["valid"] is not None,
        save_strategy="no",  # WallClockCallback decides saves (time, steps, the end).
        save_total_limit=keep,
        predict_with_generate=True,
        generation_num_beams=evaluation.eval_num_beams,
        seed=run.seed,
        report_to=list(report_integrations(run.report_to)),
        disable_tqdm=run.disable_tqdm,
        use_cpu=plan.world.cpu,
        bf16=plan.bf16,
        fp16=plan.fp16,
        ddp_find_unused_parameters=False,
        **plan.data_path.training_arguments(),
        torch_compile=run.torch_compile,
        remove_unused_columns=True,
        per_device_train_batch_size=1,
        per_device_eval_batch_size=1,
    )


def build_trainer(plan: RunPlan, model, data: RunData, callbacks: Sequence[TrainerCallback] = ()) -> VaswaniTrainer:
    """Return the run's trainer: the plan's token budgets, Section 5.3's Adam and schedule, Section 5.4's objective,
    Section 6.1's checkpoints at time intervals, the run's history and batch statistics, and `callbacks`."""
    recipe, out = plan.recipe, plan.output_dir
    logger.info(
        "batching: %d tokens/device x %d processes x %d accumulation = %d tokens per update (target)%s",
        plan.max_tokens,
        plan.world.processes,
        plan.accumulation,
        plan.tokens_per_update,
        " (max_tokens_per_device: auto)" if recipe.optimization.max_tokens_per_device == "auto" else "",
    )
    batch_log = out / f"batches_rank{plan.world.index}.jsonl" if recipe.run.debug_log_batches else None
    if batch_log is not None and batch_log.exists() and plan.output.start != "resume":
        batch_log.unlink()
    has_scores = data.valid is not None or data.test is not None
    args = build_training_arguments(plan)
    saves = recipe.checkpoints
    wall_clock = WallClockCallback(saves.save_every_minutes, saves.max_train_minutes, saves.save_steps)
    return VaswaniTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.valid,
        processing_class=data.tokenizer,
        data_collator=BatchStatsCollator(
            Seq2SeqCollator(pad_to_multiple_of=recipe.optimization.pad_to_multiple_of or None), log_path=batch_log
        ),
        compute_metrics=make_compute_metrics(data.tokenizer, tokenize=recipe.evaluation.bleu_tokenize)
        if has_scores
        else None,
        callbacks=[wall_clock, SamplerEpochCallback(), HistoryCallback(out / "history.jsonl"), *callbacks],
        optimizer_cls_and_kwargs=paper_optimizer_cls_and_kwargs(args, fused=plan.fused_adam),
        max_tokens=plan.max_tokens,
        eval_max_tokens=plan.eval_tokens,
        max_sentences=recipe.optimization.max_sentences or None,
        warmup_steps=recipe.optimization.warmup_steps,
        label_smoothing=recipe.optimization.label_smoothing,
        loss_chunk_tokens=recipe.optimization.loss_chunk_tokens,
    )


def train(trainer: VaswaniTrainer, plan: RunPlan, data: RunData) -> dict[str, Any]:
    """Train, and return the losses, the precision, the speed (target tokens/s over all processes) and the padding.
    A run stopped before its final scores ("score") loads its last state and weights instead (transformers would
    take one more update)."""
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
        distributed_type=distributed_type(trainer.accelerator.state),
        precision=plan.precision.name,
        precision_reason=plan.precision.line(),
        global_step=trainer.state.global_step,
        gradient_accumulation_steps=plan.accumulation,
        max_tokens_per_device=plan.max_tokens,
        tokens_per_update=plan.tokens_per_update,
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


def distributed_type(state) -> str:
    """Return how Accelerate spread the run (NO, MULTI_CPU, MULTI_GPU, FSDP, ...), as it did it, not as planned."""
    return str(state.distributed_type).split(".")[-1]
