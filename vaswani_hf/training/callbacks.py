"""Follow a training run with Trainer callbacks and a statistics collator: they set the batch order per epoch, keep
the history of every logged value with wall-clock time, and count the tokens and padding of the training batches."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import psutil
from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import has_length

from ..data.batching import LABEL_PAD_ID, TokenBatchSampler
from ..io.progress import progress_bar


def _find_token_batch_sampler(loader) -> Any:
    obj, seen = loader, 0
    while obj is not None and seen < 8:
        if isinstance(obj, TokenBatchSampler):
            return obj
        obj = getattr(obj, "batch_sampler", None) or getattr(obj, "base_dataloader", None)
        seen += 1
    return None


class TrainingProgress(ProgressCallback):
    """Show transformers' progress of training and evaluation through the package's one progress report
    (`io.progress`): tqdm's bar on a terminal, as before, and in a log a plain line every few percent or every
    minute."""

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar = progress_bar(total=state.max_steps, desc="training", unit="update")
        self.current_step = 0

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        if state.is_world_process_zero and has_length(eval_dataloader):
            if self.prediction_bar is None:
                self.prediction_bar = progress_bar(
                    total=len(eval_dataloader), desc="evaluating", unit="batch", leave=self.training_bar is None
                )
            self.prediction_bar.update(1)


class SamplerEpochCallback(TrainerCallback):
    """Set the token batch sampler's epoch from `state.epoch` at each epoch start. After `skip_first_batches` (on
    resume) the wrapper chain is one level deeper, and transformers' `set_epoch` can miss the sampler, which would then
    repeat epoch 0's order."""

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs):
        sampler = _find_token_batch_sampler(train_dataloader)
        if sampler is not None:
            sampler.set_epoch(int(math.floor((state.epoch or 0.0) + 1e-6)))


class HistoryCallback(TrainerCallback):
    """Append every log, with wall-clock seconds, to `history.jsonl`, since `state.log_history` has no times. A
    resumed run keeps its history up to its checkpoint and continues its clock."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.offset = 0.0
        self.t0 = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = time.monotonic()
        if not state.is_world_process_zero or not self.path.is_file():
            return
        # A fresh run in an old folder starts a new history; a resumed one drops what came after its checkpoint.
        records = [rec for rec in read_history(self.path) if rec.get("step", 0) <= state.global_step]
        if state.global_step == 0:
            records = []
        self.offset = max((rec.get("time_s", 0.0) for rec in records), default=0.0)
        self.path.write_text("".join(json.dumps(rec) + "\n" for rec in records), encoding="utf-8")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        rec = {"step": state.global_step, "time_s": round(self.offset + time.monotonic() - self.t0, 3), **logs}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")


def read_history(path: str | os.PathLike) -> list[dict]:
    p = Path(path)
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.is_file() else []


class BatchStatsCollator:
    """Collate batches with `inner`, counting the training batches' tokens and padding; `VaswaniTrainer` turns the
    count off during evaluation. With `log_path` (`debug_log_batches`) it also logs a hash of every example per
    process, which shows that no batch is seen twice across ranks."""

    def __init__(self, inner, log_path: str | os.PathLike | None = None):
        self.inner = inner
        self.pad_to_multiple_of = getattr(inner, "pad_to_multiple_of", None)
        self.log_path = Path(log_path) if log_path else None
        self.active = True
        self.batches = 0
        self.src_tokens = self.src_slots = self.tgt_tokens = self.tgt_slots = 0

    def __call__(self, features):
        batch = self.inner(features)
        if self.active:
            self.batches += 1
            mask = batch["attention_mask"]
            self.src_tokens += int(mask.sum())
            self.src_slots += mask.numel()
            if "labels" in batch:
                labels = batch["labels"]
                self.tgt_tokens += int((labels != LABEL_PAD_ID).sum())
                self.tgt_slots += labels.numel()
            if self.log_path is not None:
                rows = [
                    hashlib.sha1(
                        json.dumps([list(map(int, f["input_ids"])), list(map(int, f["labels"]))]).encode()
                    ).hexdigest()[:16]
                    for f in features
                ]
                with open(self.log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"batch": self.batches, "examples": rows}) + "\n")
        return batch

    def stats(self) -> dict:
        return {
            "train_batches": self.batches,
            "train_src_tokens": self.src_tokens,
            "train_tgt_tokens": self.tgt_tokens,
            "padding_share_src": 1 - self.src_tokens / self.src_slots if self.src_slots else 0.0,
            "padding_share_tgt": 1 - self.tgt_tokens / self.tgt_slots if self.tgt_slots else 0.0,
        }


class RunClock(TrainerCallback):
    """Measure the wall seconds and peak resident memory (of this process and its largest child) of each named stage,
    and the time from launch to the first update, for metrics.json: what a launch costs before the GPU hours start."""

    def __init__(self):
        self.launched = psutil.Process().create_time()
        self.stages: dict[str, dict[str, float]] = {}
        self.first_update: dict[str, float] = {}
        self._update_started = None

    @staticmethod
    def peak_memory_mb() -> tuple[float, float]:
        """Return the peak RSS of this process and of its largest finished child, in MiB (Linux reports KiB)."""
        own, child = (resource.getrusage(w).ru_maxrss / 1024 for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        return own, child

    def since_launch(self) -> float:
        return time.time() - self.launched

    @contextlib.contextmanager
    def stage(self, name: str):
        """Time one stage of the run and record its peak memory."""
        started = time.perf_counter()
        yield
        own, child = self.peak_memory_mb()
        self.stages[name] = {
            "seconds": round(time.perf_counter() - started, 3),
            "peak_rss_mb": round(own, 1),
            "peak_child_rss_mb": round(child, 1),
            "at_s": round(self.since_launch(), 3),
        }

    def on_step_begin(self, args, state, control, **kwargs):
        if self._update_started is None:
            self._update_started = time.perf_counter()
            self.first_update["started_s"] = round(self.since_launch(), 3)

    def on_step_end(self, args, state, control, **kwargs):
        if "done_s" not in self.first_update:
            self.first_update["done_s"] = round(self.since_launch(), 3)
            self.first_update["seconds"] = round(time.perf_counter() - self._update_started, 3)

    def report(self) -> dict[str, Any]:
        own, child = self.peak_memory_mb()
        return {
            "stages": self.stages,
            "first_update": self.first_update,
            "peak_rss_mb": round(own, 1),
            "peak_child_rss_mb": round(child, 1),
        }
