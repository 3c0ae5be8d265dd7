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
import time

from phase_clock import PhaseClock

LABEL_PAD = -100


class Recorder(PhaseClock):
    def __init__(self, events_path: str):
        super().__init__(events_path)
        self.counting = True

    def count(self, batch) -> None:
        if not self.counting or "labels" not in batch:
            return
        labels = batch["labels"]
        source = int(batch["attention_mask"].sum()) if "attention_mask" in batch else 0
        self.add_batch(int((labels != LABEL_PAD).sum()), labels.numel(), source)


def _callback(recorder: Recorder):
    from transformers import TrainerCallback

    class PhaseCallback(TrainerCallback):
        def __init__(self):
            self.optimizer_started = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            recorder.start = time.perf_counter()
            recorder.seconds.clear()
            recorder.event(event="train_begin", step=state.global_step)

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.optimizer_started = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            recorder.seconds["optimizer step"] += time.perf_counter() - self.optimizer_started

        def on_save(self, args, state, control, **kwargs):
            recorder.event(
                event="checkpoint",
                step=state.global_step,
                train_s=recorder.elapsed(),
                path=f"{args.output_dir}/checkpoint-{state.global_step}",
            )

        def on_train_end(self, args, state, control, **kwargs):
            phases = dict(recorder.seconds)
            phases["other"] = max(0.0, recorder.elapsed() - sum(v for k, v in phases.items() if k != "collation"))
            recorder.finish(state.global_step, phases)

    return PhaseCallback()


def install(events_path: str, trainer_cls, collator_cls) -> Recorder:
    """Wrap `trainer_cls` and `collator_cls` (classes, before any instance exists) to time and count training."""
    recorder = Recorder(events_path)
    for name, phase in (
        ("get_batch_samples", "data loading"),
        ("training_step", "forward + backward"),
        ("_get_grad_norm", "gradient norm"),
        ("log", "logging"),
        ("_evaluate", "evaluation"),
        ("_save_checkpoint", "checkpoint writes"),
    ):
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
