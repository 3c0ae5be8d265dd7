"""Tests of vaswani_hf.training.callbacks: the batch order of each epoch (SamplerEpochCallback, also behind the
resume wrapper), the run history with wall-clock times (HistoryCallback, read_history), the token and padding counts
of the training batches (BatchStatsCollator) and where a run's time and memory go (RunClock). Clocks are replaced by
fake ones where times are asserted, so no assertion depends on how fast this machine is."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import psutil
import pytest
import torch
from accelerate.data_loader import skip_first_batches
from torch.utils.data import DataLoader
from transformers import TrainerControl, TrainerState, TrainingArguments

from vaswani_hf.data.batching import Seq2SeqCollator, TokenBatchSampler
from vaswani_hf.training import callbacks
from vaswani_hf.training.callbacks import (
    BatchStatsCollator,
    HistoryCallback,
    RunClock,
    SamplerEpochCallback,
    read_history,
)

N_EXAMPLES = 40


class FakeClock:
    """Stands in for the `time` module of vaswani_hf.training.callbacks: every clock reads `now`, moved by hand."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(callbacks, "time", fake)
    return fake


@pytest.fixture(scope="module")
def args(tmp_path_factory):
    return TrainingArguments(output_dir=str(tmp_path_factory.mktemp("args")), report_to=[], use_cpu=True)


# ------------------------------------------------------------------------------------------------ SamplerEpochCallback


def token_sampler(seed: int = 3) -> TokenBatchSampler:
    """40 examples, at most 4 per batch: 10 batches, so an epoch's order is one of 10! permutations."""
    lengths = np.random.default_rng(0).integers(2, 30, size=N_EXAMPLES)
    return TokenBatchSampler(lengths, lengths + 1, max_tokens=4096, max_sentences=4, seed=seed)


def loader(sampler: TokenBatchSampler) -> DataLoader:
    return DataLoader(list(range(N_EXAMPLES)), batch_sampler=sampler, collate_fn=list)


def epoch_batches(dataloader, epoch: float | None, args) -> list[list[int]]:
    """The batches `dataloader` yields after the callback saw an epoch start at `state.epoch = epoch`."""
    SamplerEpochCallback().on_epoch_begin(
        args, TrainerState(epoch=epoch), TrainerControl(), train_dataloader=dataloader
    )
    return list(dataloader)


def test_each_epoch_has_its_own_batch_order_and_the_same_seed_repeats_it(args):
    """The callback sets the sampler's epoch from `state.epoch`: every epoch yields the same batches (each example
    once) in another order, and the same seed and epoch give the same order again (a rerun or a resume)."""
    dl = loader(token_sampler())
    orders = [epoch_batches(dl, float(e), args) for e in range(3)]
    assert dl.batch_sampler.epoch == 2
    as_sets = [sorted(map(tuple, o)) for o in orders]
    assert as_sets[0] == as_sets[1] == as_sets[2]
    assert sorted(i for b in orders[0] for i in b) == list(range(N_EXAMPLES))
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0] != orders[2]
    again = loader(token_sampler())
    assert epoch_batches(again, 1.0, args) == orders[1]
    assert epoch_batches(again, 0.0, args) == orders[0]
    assert epoch_batches(loader(token_sampler(seed=4)), 1.0, args) != orders[1]


def test_epoch_is_the_whole_part_of_state_epoch(args):
    """A run resumed mid-epoch (state.epoch = 1.5) continues epoch 1's order; an epoch count that float steps left
    just short of 2 is epoch 2; before training (None) it is epoch 0."""
    cases = {1.5: 1, 2.0 - 1e-9: 2, None: 0, 0.0: 0, 3.999: 3}
    for state_epoch, expected in cases.items():
        sampler = token_sampler()
        sampler.set_epoch(7)
        epoch_batches(loader(sampler), state_epoch, args)
        assert sampler.epoch == expected, state_epoch


def test_resumed_loader_gets_the_epoch_through_the_skip_wrapper(args):
    """On resume the Trainer wraps the loader with Accelerate's `skip_first_batches`, one level deeper than usual;
    the callback still reaches the token sampler, so the resumed epoch continues that epoch's order instead of
    replaying epoch 0's."""
    reference = epoch_batches(loader(token_sampler()), 1.0, args)
    sampler = token_sampler()
    resumed = skip_first_batches(loader(sampler), num_batches=3)
    assert resumed.batch_sampler is not sampler  # the wrapper the callback has to look through
    assert epoch_batches(resumed, 1.5, args) == reference[3:]
    assert sampler.epoch == 1


def test_a_loader_without_token_sampler_is_left_alone(args):
    """No train_dataloader, or one with torch's own batch sampler: nothing to set, and no error."""
    SamplerEpochCallback().on_epoch_begin(args, TrainerState(epoch=1.0), TrainerControl(), train_dataloader=None)
    plain = DataLoader(list(range(6)), batch_size=2, collate_fn=list)
    assert epoch_batches(plain, 1.0, args) == [[0, 1], [2, 3], [4, 5]]


# ------------------------------------------------------------------------------------------------ HistoryCallback


def write_history(path, steps):
    path.write_text("".join(json.dumps({"step": s, "time_s": 10.0 * s, "loss": 1.0 / s}) + "\n" for s in steps))


def test_history_appends_every_log_with_its_time(tmp_path, clock, args):
    """Each log becomes one JSON line: the step, wall seconds since training began, and every logged value;
    read_history gives back exactly what was written, in order. An empty log writes nothing."""
    path = tmp_path / "run" / "history.jsonl"
    history = HistoryCallback(path)
    state, control = TrainerState(global_step=0), TrainerControl()
    history.on_train_begin(args, state, control)
    logs = [
        (1, 2.5, {"loss": 4.25, "learning_rate": 1e-4}),
        (2, 4.0, {"loss": 3.5, "learning_rate": 2e-4}),
        (2, 5.25, {"eval_loss": 3.75, "eval_bleu": 1.5}),
    ]
    for step, elapsed, values in logs:
        state.global_step, clock.now = step, 1000.0 + elapsed
        history.on_log(args, state, control, logs=dict(values))
    history.on_log(args, state, control, logs={})
    history.on_log(args, state, control, logs=None)
    expected = [{"step": s, "time_s": t, **v} for s, t, v in logs]
    assert read_history(path) == expected
    assert len(path.read_text().splitlines()) == 3


def test_history_of_a_resumed_run_keeps_what_precedes_the_checkpoint(tmp_path, clock, args):
    """Resuming from the checkpoint of step 4: the records up to step 4 stay, the later ones (steps the resumed run
    does again) go, and the time continues from the last record kept."""
    path = tmp_path / "history.jsonl"
    write_history(path, [1, 2, 3, 4, 5, 6])
    history = HistoryCallback(path)
    state = TrainerState(global_step=4)
    history.on_train_begin(args, state, TrainerControl())
    assert [r["step"] for r in read_history(path)] == [1, 2, 3, 4]
    state.global_step, clock.now = 5, clock.now + 1.5
    history.on_log(args, state, TrainerControl(), logs={"loss": 0.5})
    records = read_history(path)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert records[:4] == [{"step": s, "time_s": 10.0 * s, "loss": 1.0 / s} for s in (1, 2, 3, 4)]
    assert records[4] == {"step": 5, "time_s": 41.5, "loss": 0.5}


def test_a_fresh_run_in_an_old_folder_starts_a_new_history(tmp_path, clock, args):
    """global_step 0 at train begin: the old records go, those of step 0 too (an evaluation before the first
    update), and times start again from 0."""
    path = tmp_path / "history.jsonl"
    write_history(path, [1, 2, 3])
    with open(path, "a") as f:
        f.write(json.dumps({"step": 0, "time_s": 50.0, "eval_loss": 5.0}) + "\n")
    history = HistoryCallback(path)
    state = TrainerState(global_step=0)
    history.on_train_begin(args, state, TrainerControl())
    assert read_history(path) == []
    state.global_step, clock.now = 1, clock.now + 2.0
    history.on_log(args, state, TrainerControl(), logs={"loss": 9.0})
    assert read_history(path) == [{"step": 1, "time_s": 2.0, "loss": 9.0}]


def test_only_the_main_process_writes_the_history(tmp_path, clock, args):
    """Other ranks neither trim the file at train begin nor append their logs."""
    path = tmp_path / "history.jsonl"
    write_history(path, [1, 2, 3])
    before = path.read_text()
    history = HistoryCallback(path)
    state = TrainerState(global_step=0, is_world_process_zero=False)
    history.on_train_begin(args, state, TrainerControl())
    state.global_step = 1
    history.on_log(args, state, TrainerControl(), logs={"loss": 1.0})
    assert path.read_text() == before


def test_read_history_of_a_missing_file_is_empty_and_blank_lines_are_skipped(tmp_path):
    assert read_history(tmp_path / "absent.jsonl") == []
    path = tmp_path / "history.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n\n  \n{"step": 2, "loss": 1.0}\n')
    assert read_history(path) == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]


# ------------------------------------------------------------------------------------------------ BatchStatsCollator

# Hand-built pairs: sources of 3, 2 and 5 tokens, targets of 2, 4 and 1 token.
FEATURES = [
    {"input_ids": [5, 6, 2], "labels": [7, 2]},
    {"input_ids": [8, 2], "labels": [9, 10, 11, 2]},
    {"input_ids": [4, 5, 6, 7, 2], "labels": [2]},
]


def test_counts_real_and_padded_tokens_of_each_batch():
    """Batch 1 (first two pairs): source 5 real of 2 x 3 slots, target 6 of 2 x 4. Batch 2 (all three): source 10 of
    3 x 5, target 7 of 3 x 4. The batch itself is the wrapped collator's, unchanged."""
    collator = BatchStatsCollator(Seq2SeqCollator())
    first = collator(FEATURES[:2])
    reference = Seq2SeqCollator()(FEATURES[:2])
    assert first.keys() == reference.keys()
    assert all(torch.equal(first[k], reference[k]) for k in reference)
    collator(FEATURES)
    stats = collator.stats()
    assert stats["train_batches"] == 2
    assert stats["train_src_tokens"] == 5 + 10 and stats["train_tgt_tokens"] == 6 + 7
    assert stats["padding_share_src"] == pytest.approx(1 - 15 / (6 + 15))
    assert stats["padding_share_tgt"] == pytest.approx(1 - 13 / (8 + 12))


def test_padding_to_a_multiple_counts_the_rounded_slots():
    """With pad_to_multiple_of=8 (taken over from the wrapped collator) the tensors are 8 wide, and so are the slots:
    source 10 real of 3 x 8, target 7 of 3 x 8."""
    collator = BatchStatsCollator(Seq2SeqCollator(pad_to_multiple_of=8))
    assert collator.pad_to_multiple_of == 8
    collator(FEATURES)
    stats = collator.stats()
    assert stats["padding_share_src"] == pytest.approx(1 - 10 / 24)
    assert stats["padding_share_tgt"] == pytest.approx(1 - 7 / 24)


def test_nothing_is_counted_while_inactive_or_before_any_batch(tmp_path):
    """Evaluation switches `active` off: its batches are still collated but neither counted nor logged. Sources
    without labels count source tokens only."""
    log = tmp_path / "batches.jsonl"
    collator = BatchStatsCollator(Seq2SeqCollator(), log_path=log)
    assert collator.stats() == {
        "train_batches": 0,
        "train_src_tokens": 0,
        "train_tgt_tokens": 0,
        "padding_share_src": 0.0,
        "padding_share_tgt": 0.0,
    }
    collator.active = False
    batch = collator(FEATURES)
    assert batch["labels"].shape == (3, 4)
    assert collator.stats()["train_batches"] == 0 and not log.exists()
    collator.active = True
    collator.log_path = None
    collator([{"input_ids": f["input_ids"]} for f in FEATURES[:2]])
    stats = collator.stats()
    assert (stats["train_batches"], stats["train_src_tokens"], stats["train_tgt_tokens"]) == (1, 5, 0)
    assert stats["padding_share_tgt"] == 0.0


def test_example_hashes_are_logged_per_batch(tmp_path):
    """With a log path, one line per counted batch: its number and one hash per example, in the batch's order; the
    same pair gives the same hash wherever it appears, pairs that differ (even only in the target) differ."""
    log = tmp_path / "batches_rank0.jsonl"
    collator = BatchStatsCollator(Seq2SeqCollator(), log_path=log)
    other_target = {"input_ids": [5, 6, 2], "labels": [7, 7, 2]}
    collator(FEATURES[:2])
    collator([FEATURES[2], FEATURES[0], other_target])
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [line["batch"] for line in lines] == [1, 2]
    first, second = lines[0]["examples"], lines[1]["examples"]
    assert len(first) == 2 and len(second) == 3
    assert second[1] == first[0]
    assert len(set(first + second)) == 4
    assert all(len(h) == 16 and int(h, 16) >= 0 for h in first + second)


# ------------------------------------------------------------------------------------------------ RunClock


def test_stages_record_seconds_and_peak_memory(clock):
    """Each named stage records its wall seconds, the time since launch when it ended, and peak resident memory in
    MiB: at least what this process holds at that moment (a wrong unit would be 1024 times off)."""
    run = RunClock()
    run.launched = clock.now - 5.0
    with run.stage("data"):
        clock.now += 2.25
        resident = psutil.Process().memory_info().rss / 2**20
    with run.stage("model"):
        clock.now += 0.5
    assert list(run.stages) == ["data", "model"]
    assert run.stages["data"]["seconds"] == 2.25 and run.stages["data"]["at_s"] == 7.25
    assert run.stages["model"]["seconds"] == 0.5 and run.stages["model"]["at_s"] == 7.75
    assert resident * 0.9 <= run.stages["data"]["peak_rss_mb"] <= run.stages["model"]["peak_rss_mb"]
    report = run.report()
    assert report["stages"] == run.stages and report["peak_rss_mb"] >= run.stages["model"]["peak_rss_mb"]


def test_peak_child_memory_is_the_largest_finished_child():
    """A child that held ~200 MiB (e.g. a Dataset.map worker) shows in peak_child_rss_mb once it has finished."""
    run = RunClock()
    subprocess.run([sys.executable, "-c", "b = b'x' * (200 * 2**20); print(len(b))"], check=True, capture_output=True)
    with run.stage("tokenize"):
        pass
    assert run.stages["tokenize"]["peak_child_rss_mb"] >= 190
    assert run.report()["peak_child_rss_mb"] >= 190


def test_first_update_is_timed_once(clock, args):
    """first_update holds the launch-to-first-update times of the first optimizer step only; later steps do not
    move them."""
    run = RunClock()
    run.launched = clock.now - 30.0
    state, control = TrainerState(), TrainerControl()
    run.on_step_begin(args, state, control)
    clock.now += 4.0
    run.on_step_end(args, state, control)
    first = dict(run.first_update)
    assert first == {"started_s": 30.0, "done_s": 34.0, "seconds": 4.0}
    for _ in range(2):
        clock.now += 1.0
        run.on_step_begin(args, state, control)
        clock.now += 1.0
        run.on_step_end(args, state, control)
    assert run.first_update == first
    assert run.report()["first_update"] == first


def test_since_launch_counts_from_the_process_start(clock):
    """`launched` is this process's start time (psutil), so stages report time since the launch, not since the
    clock was made."""
    run = RunClock()
    assert run.launched == pytest.approx(psutil.Process().create_time())
    clock.now = run.launched + 12.5
    assert run.since_launch() == 12.5
