"""The phase clock both instrumented trainers of the peer benchmark share: where a training loop's wall-clock time
goes, how many target tokens it trains on, and the events (JSON lines) the benchmark reads back.

Standard library only: it is imported in three environments (ours, eole's and the Marian path's), by `hf_phases`
(the transformers `Trainer`s) and by `peer_eole` (eole's `Trainer`).
Events: `train_begin`, `checkpoint` (with its training-loop time `train_s`) and `train_end` (`finish`).
"""

import functools
import json
import time
from collections import defaultdict


class PhaseClock:
    def __init__(self, events_path: str):
        self.events_path = events_path
        self.seconds: dict[str, float] = defaultdict(float)
        self.start: float | None = None  # when the training loop began (perf_counter)
        self.tgt_tokens = self.tgt_slots = self.src_tokens = self.batches = 0

    def elapsed(self) -> float:
        """Seconds of training loop so far (0 before it starts)."""
        return 0.0 if self.start is None else time.perf_counter() - self.start

    def event(self, **record) -> None:
        record["wall_time"] = time.time()
        with open(self.events_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def timed(self, phase: str, function):
        """`function` wrapped so that its wall time is added to `phase`."""
        clock = self

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                clock.seconds[phase] += time.perf_counter() - started

        return wrapper

    def add_batch(self, tgt_tokens: int, tgt_slots: int, src_tokens: int) -> None:
        """One training batch: its real target tokens, its target slots (padding included), its source tokens."""
        self.batches += 1
        self.tgt_tokens += tgt_tokens
        self.tgt_slots += tgt_slots
        self.src_tokens += src_tokens

    def finish(self, step: int, phases: dict[str, float]) -> None:
        """The `train_end` event: the loop's time, its phases and the token counts."""
        self.event(
            event="train_end",
            step=step,
            train_s=self.elapsed(),
            phases=phases,
            tgt_tokens=self.tgt_tokens,
            tgt_slots=self.tgt_slots,
            src_tokens=self.src_tokens,
            batches=self.batches,
        )
