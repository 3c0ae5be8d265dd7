"""Where a transformers `Trainer` spends the wall-clock time of its training loop, and what it trains on.

Imported by the two systems built on transformers' Trainer (ours: `peer_ours.py`; the run_translation-style
Seq2SeqTrainer + MarianMTModel: `peer_marian.py`), each in its own environment, so it needs only the standard library
and transformers. `install(events, trainer_cls, collator_cls)` wraps, on the given classes:
- `get_batch_samples`: data loading (the DataLoader, the sampler and the collator), with the collator's own share;
- `training_step`: forward + loss + backward;
- the optimizer step (between the `on_pre_optimizer_step` and `on_optimizer_step` callbacks);
- `_get_grad_norm`: transformers 5 computes the gradient norm at every update for its logs, also when nothing is
  clipped (`max_grad_norm` 0: `clip_grad_norm_(params, inf)`, a pass over every gradient);
- `log`, `_evaluate`, `_save_checkpoint`: logging, evaluation with generation, checkpoint writes.
"other" is the loop's wall time minus all of these (callbacks, the learning-rate scheduler, zeroing gradients).
The collator wrapper also counts the target tokens of every training batch: real ones (labels != -100) and slots.
Every checkpoint and the end of training are appended to `events` (JSON lines) with their training-loop time, for
the benchmark to pick the checkpoints and compute tokens per second.
"""

from __future__ import annotations

import functools
import json
import time
from collections import defaultdict

LABEL_PAD = -100


class Recorder:
    def __init__(self, events_path: str):
        self.events_path = events_path
        self.seconds: dict[str, float] = defaultdict(float)
        self.loop_start: float | None = None
        self.tgt_tokens = self.tgt_slots = self.src_tokens = self.batches = 0
        self.counting = True

    def elapsed(self) -> float:
        return 0.0 if self.loop_start is None else time.perf_counter() - self.loop_start

    def event(self, **record) -> None:
        record["wall_time"] = time.time()
        with open(self.events_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def timed(self, phase: str, function):
        recorder = self

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                recorder.seconds[phase] += time.perf_counter() - started

        return wrapper

    def count(self, batch) -> None:
        if not self.counting or "labels" not in batch:
            return
        labels = batch["labels"]
        self.batches += 1
        self.tgt_tokens += int((labels != LABEL_PAD).sum())
        self.tgt_slots += labels.numel()
        if "attention_mask" in batch:
            self.src_tokens += int(batch["attention_mask"].sum())


def _callback(recorder: Recorder):
    from transformers import TrainerCallback

    class PhaseCallback(TrainerCallback):
        def __init__(self):
            self.optimizer_started = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            recorder.loop_start = time.perf_counter()
            recorder.seconds.clear()
            recorder.event(event="train_begin", step=state.global_step)

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.optimizer_started = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            recorder.seconds["optimizer step"] += time.perf_counter() - self.optimizer_started

        def on_save(self, args, state, control, **kwargs):
            recorder.event(event="checkpoint", step=state.global_step, train_s=recorder.elapsed(),
                           path=f"{args.output_dir}/checkpoint-{state.global_step}")

        def on_train_end(self, args, state, control, **kwargs):
            loop = recorder.elapsed()
            phases = dict(recorder.seconds)
            phases["other"] = max(0.0, loop - sum(v for k, v in phases.items() if k != "collation"))
            recorder.event(event="train_end", step=state.global_step, train_s=loop, phases=phases,
                           tgt_tokens=recorder.tgt_tokens, tgt_slots=recorder.tgt_slots,
                           src_tokens=recorder.src_tokens, batches=recorder.batches)

    return PhaseCallback()


def install(events_path: str, trainer_cls, collator_cls) -> Recorder:
    """Wrap `trainer_cls` and `collator_cls` (classes, before any instance exists) to time and count training."""
    recorder = Recorder(events_path)
    for name, phase in (("get_batch_samples", "data loading"), ("training_step", "forward + backward"),
                        ("_get_grad_norm", "gradient norm"), ("log", "logging"), ("_evaluate", "evaluation"),
                        ("_save_checkpoint", "checkpoint writes")):
        setattr(trainer_cls, name, recorder.timed(phase, getattr(trainer_cls, name)))

    original_evaluate = trainer_cls._evaluate

    @functools.wraps(original_evaluate)
    def evaluate_without_counting(self, *args, **kwargs):
        recorder.counting = False  # evaluation batches are not training tokens
        try:
            return original_evaluate(self, *args, **kwargs)
        finally:
            recorder.counting = True

    trainer_cls._evaluate = evaluate_without_counting
    original_call = collator_cls.__call__

    @functools.wraps(original_call)
    def collate(self, *args, **kwargs):
        started = time.perf_counter()
        batch = original_call(self, *args, **kwargs)
        recorder.seconds["collation"] += time.perf_counter() - started
        recorder.count(batch)
        return batch

    collator_cls.__call__ = collate
    original_init = trainer_cls.__init__

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.add_callback(_callback(recorder))

    trainer_cls.__init__ = init
    return recorder
