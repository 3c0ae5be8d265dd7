"""Section 6.1 checkpoints: time-interval saves, atomic writes, resume, averaging."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import losses_by_step, tiny_recipe

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.training import WallClockCallback, average_checkpoints, last_checkpoints, run_training

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_time_interval_checkpoint_callback(monkeypatch):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    clock = [1000.0]
    monkeypatch.setattr("vaswani_hf.training.checkpoints.time.monotonic", lambda: clock[0])
    cb = WallClockCallback(save_every_minutes=10, max_train_minutes=25)
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[])
    state, control = TrainerState(), TrainerControl()
    state.max_steps = 10 ** 6
    cb.on_train_begin(args, state, control)
    decisions = []
    for minute in range(1, 31):
        clock[0] = 1000.0 + 60 * minute
        state.global_step = minute
        control = TrainerControl()
        cb.on_step_end(args, state, control)
        if control.should_save:
            cb.on_save(args, state, control)
        decisions.append((minute, control.should_save, control.should_training_stop))
        if control.should_training_stop:
            break
    saves = [m for m, s, _ in decisions if s]
    assert saves == [10, 20, 25] and decisions[-1] == (25, True, True)


@pytest.mark.slow
def test_resume_reproduces_uninterrupted_run(tmp_path):
    """12 updates straight vs 10 updates + resume (mid-epoch 1: 8 batches per epoch): identical losses, with dropout
    on (RNG states restored) and a shuffled batch order (sampler epoch and position restored). An interrupted,
    incomplete save in `.staging` is ignored."""
    common = dict(dropout=0.1, save_steps=5, keep_last=2)
    full = tiny_recipe(tmp_path, max_steps=12, output_dir=str(tmp_path / "full"), **common)
    run_training(full)
    part = tiny_recipe(tmp_path, max_steps=10, output_dir=str(tmp_path / "part"), **common)
    run_training(part)
    out = Path(part["output_dir"])
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-5"]
    assert not (out / ".staging").exists()
    staged = out / ".staging" / "checkpoint-11"  # what a crash during a save leaves behind
    staged.mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(b"truncated")
    resumed = tiny_recipe(tmp_path, max_steps=12, output_dir=str(out), resume=True, **common)
    run_training(resumed)
    a, b = losses_by_step(tmp_path / "full"), losses_by_step(out)
    assert sorted(a) == list(range(1, 13)) and sorted(b) == list(range(1, 13))
    for step in range(1, 13):
        assert b[step] == pytest.approx(a[step], rel=1e-6, abs=1e-7), (step, a[step], b[step])
    # keep-last-K rotation
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-12"]


def _save_random_model(folder: Path, seed: int):
    torch.manual_seed(seed)
    config = VaswaniConfig(vocab_size=50, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1)
    model = VaswaniForConditionalGeneration(config)
    model.save_pretrained(folder)
    return model


def test_checkpoint_averaging_equals_mean_of_weights(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForSeq2SeqLM

    models = [_save_random_model(tmp_path / f"checkpoint-{s}", s) for s in (100, 200, 300)]
    folders = last_checkpoints(tmp_path, 3)
    assert [f.name for f in folders] == ["checkpoint-100", "checkpoint-200", "checkpoint-300"]
    averaged = average_checkpoints(folders)
    for name, value in averaged.items():
        stack = torch.stack([load_file(str(f / "model.safetensors"))[name].double() for f in folders])
        torch.testing.assert_close(value.double(), stack.mean(0), rtol=0, atol=1e-7)
    # the written folder loads with from_pretrained and holds the mean of every parameter (tied ones included)
    from vaswani_hf.cli import average_checkpoints as cli

    assert cli.main(["--run_dir", str(tmp_path), "--last", "3", "--out", str(tmp_path / "avg")]) == 0
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "avg")
    params = [dict(m.named_parameters()) for m in models]
    for name, p in loaded.named_parameters():
        mean = torch.stack([q[name].detach().double() for q in params]).mean(0)
        torch.testing.assert_close(p.detach().double(), mean, rtol=0, atol=1e-6, msg=name)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.shared.weight.data_ptr()  # still tied
