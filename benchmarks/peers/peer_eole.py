#!/usr/bin/env python
"""eole in the peer benchmark: `eole train -config FILE`, run in eole's own environment, with three things eole does
not have added around its `Trainer` (its code is not changed):
- a wall-clock budget: the batch iterator ends once the training loop has run `--minutes` (eole stops by steps
  only); eole then writes its own final checkpoint, as at the end of any run;
- checkpoints at fixed training times (`--marks`, seconds; eole saves every N steps), through eole's own saver;
- a phase clock (data loading, forward + backward, optimizer step, logging, evaluation, checkpoint writes) and the
  count of real (non-padding) and padded target tokens of every batch (the predicted positions, tgt[:, 1:]).
Events go to `--events` as JSON lines, in the format of `hf_phases` (train_begin, checkpoint, train_end).

    python peer_eole.py --events FILE --minutes M --marks S,S --threads 2 -- -config eole.yaml
"""

import argparse
import os
import sys
import time

from phase_clock import PhaseClock


class Clock(PhaseClock):
    """The shared phase clock, with the wall-clock budget and the checkpoint marks eole lacks."""

    def __init__(self, events_path: str, budget_s: float, marks: list[float]):
        super().__init__(events_path)
        self.budget_s, self.marks = budget_s, sorted(marks)

    def count(self, batch, pad: int) -> None:
        target = batch["tgt"][:, 1:]  # the positions the decoder predicts (after the start token)
        self.add_batch(int(target.ne(pad).sum()), target.numel(), int(batch["srclen"].sum()))


def instrument(clock: Clock) -> None:
    from eole.trainer import Trainer

    original_accum, original_train = Trainer._accum_batches, Trainer.train
    Trainer._train_step = clock.timed("forward + backward + optimizer step", Trainer._train_step)
    Trainer._maybe_report_training = clock.timed("logging", Trainer._maybe_report_training)
    Trainer.validate = clock.timed("evaluation", Trainer.validate)

    def counted(iterator, pad):
        for batch, bucket in iterator:
            clock.count(batch, pad)
            yield batch, bucket

    def accum(self, iterator):
        clock.start = time.perf_counter()
        clock.event(event="train_begin", step=self.optim.training_step - 1)
        _wrap_instance(self)
        batches = original_accum(self, counted(iterator, self.train_loss.padding_idx))
        while True:
            started = time.perf_counter()
            try:
                item = next(batches)
            except StopIteration:
                return
            clock.seconds["data loading"] += time.perf_counter() - started
            elapsed = clock.elapsed()
            if elapsed >= clock.budget_s:
                return  # eole's loop ends and writes its final checkpoint
            if clock.marks and elapsed >= clock.marks[0]:
                clock.marks = [m for m in clock.marks if m > elapsed]
                self.model_saver.save(self.optim.training_step - 1, moving_average=self.moving_average)
            yield item

    def _wrap_instance(trainer) -> None:
        saver = trainer.model_saver
        original_save = saver.save

        def save(step, *args, **kwargs):
            at = clock.elapsed()
            started = time.perf_counter()
            result = original_save(step, *args, **kwargs)
            clock.seconds["checkpoint writes"] += time.perf_counter() - started
            clock.event(event="checkpoint", step=step, train_s=at, path=os.path.join(saver.model_path, f"step_{step}"))
            return result

        saver.save = save
        trainer.optim.step = clock.timed("optimizer step", trainer.optim.step)

    def train(self, *args, **kwargs):
        stats = original_train(self, *args, **kwargs)
        loop = clock.elapsed()
        phases = dict(clock.seconds)
        step_total = phases.pop("forward + backward + optimizer step", 0.0)
        phases["forward + backward"] = max(0.0, step_total - phases.get("optimizer step", 0.0))
        phases["other"] = max(
            0.0,
            loop - step_total - sum(v for k, v in phases.items() if k not in ("forward + backward", "optimizer step")),
        )
        clock.finish(self.optim.training_step - 1, phases)
        return stats

    Trainer._accum_batches, Trainer.train = accum, train


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", required=True)
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--marks", default="")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("eole_args", nargs=argparse.REMAINDER, help="after --: eole train's arguments")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    instrument(Clock(args.events, args.minutes * 60, [float(m) for m in args.marks.split(",") if m]))
    from eole.bin.main import main as eole_main

    sys.argv = ["eole", "train", *[a for a in args.eole_args if a != "--"]]
    eole_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
