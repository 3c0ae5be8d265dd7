"""Section 6.1 checkpoints: time-interval saves, atomic writes, resume, averaging."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import losses_by_step, tiny_recipe

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.io.averaging import average_checkpoints
from vaswani_hf.training.checkpoints import WallClockCallback, last_checkpoints
from vaswani_hf.training.plan import plan_run
from vaswani_hf.training.run import run_training

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_time_interval_checkpoint_callback(monkeypatch):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    clock = [1000.0]
    monkeypatch.setattr("vaswani_hf.training.checkpoints.time.monotonic", lambda: clock[0])
    cb = WallClockCallback(save_every_minutes=10, max_train_minutes=25)
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[])
    state, control = TrainerState(), TrainerControl()
    state.max_steps = 10**6
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
    run_training(plan_run(full))
    part = tiny_recipe(tmp_path, max_steps=10, output_dir=str(tmp_path / "part"), **common)
    run_training(plan_run(part))
    out = Path(part["output_dir"])
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-5"]
    assert not (out / ".staging").exists()
    staged = out / ".staging" / "checkpoint-11"  # what a crash during a save leaves behind
    staged.mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(b"truncated")
    resumed = tiny_recipe(tmp_path, max_steps=12, output_dir=str(out), resume=True, **common)
    run_training(plan_run(resumed))
    a, b = losses_by_step(tmp_path / "full"), losses_by_step(out)
    assert sorted(a) == list(range(1, 13)) and sorted(b) == list(range(1, 13))
    for step in range(1, 13):
        assert b[step] == pytest.approx(a[step], rel=1e-6, abs=1e-7), (step, a[step], b[step])
    # keep-last-K rotation
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-12"]


def _save_random_model(folder: Path, seed: int):
    torch.manual_seed(seed)
    config = VaswaniConfig(vocab_size=50, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1)
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


# ---------------------------------------------------------------------------------------------------------------------
# A checkpoint and its state must agree; a trainer_state.json of the wrong shape is named
# ---------------------------------------------------------------------------------------------------------------------


def _checkpoint(folder: Path, step: int) -> Path:
    """A complete checkpoint-N as the trainer leaves it (the state files' content does not matter here)."""
    _save_random_model(folder, step)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 1.5, "log_history": []}))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.save({"state": torch.zeros(3)}, folder / name)
    return folder


def test_a_checkpoint_whose_state_belongs_to_another_step_is_refused(tmp_path):
    from vaswani_hf.io import UsageError
    from vaswani_hf.training.checkpoints import InconsistentCheckpoint, resumable_checkpoint

    _checkpoint(tmp_path / "checkpoint-10", 10)
    newest = _checkpoint(tmp_path / "checkpoint-20", 20)
    assert resumable_checkpoint(tmp_path) == (newest, [])
    shutil.copy(tmp_path / "checkpoint-10" / "trainer_state.json", newest / "trainer_state.json")
    with pytest.raises(
        InconsistentCheckpoint,
        match=r"checkpoint-20/trainer_state\.json: field global_step is 10, "
        r"but the folder is checkpoint-20",
    ) as error:
        resumable_checkpoint(tmp_path)
    assert isinstance(error.value, UsageError) and "\n" not in str(error.value)


def test_resume_refuses_a_checkpoint_whose_state_belongs_to_another_step(tmp_path):
    """Through the one planning step of `vaswani-train --resume`: one line naming the file, before any work."""
    from conftest import tiny_recipe

    from vaswani_hf.io import UsageError, mark
    from vaswani_hf.training.plan import plan_run
    from vaswani_hf.training.preflight import TRAINING_RUN

    run = tmp_path / "run"
    _checkpoint(run / "checkpoint-2", 2)
    mark(run, TRAINING_RUN)  # a folder a run took
    newest = _checkpoint(run / "checkpoint-4", 4)
    (newest / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": []}))
    with pytest.raises(
        UsageError,
        match=r"checkpoint-4/trainer_state\.json: field global_step is 2, but the folder "
        r"is checkpoint-4",
    ):
        plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True, output_dir=str(run)))


@pytest.mark.parametrize(
    "state, field",
    [
        ([], "not a trainer_state.json: the file must be an object"),
        ({"epoch": 1.0}, "field global_step is missing"),
        ({"global_step": "20"}, "field global_step must be an integer"),
        ({"global_step": -1}, "field global_step must be an integer >= 0"),
        ({"global_step": 20, "log_history": {}}, "field log_history must be a list"),
        ({"global_step": 20, "log_history": [[]]}, r"field log_history\[0\] must be an object"),
        ({"global_step": 20, "epoch": "one"}, "field epoch must be a number"),
        ({"global_step": 20, "surprise": 1}, "field surprise is not a known field"),  # TrainerState refuses it
    ],
)
def test_a_trainer_state_of_the_wrong_shape_is_named_and_passed_over(state, field, tmp_path):
    """Broken like a truncated file: the newer checkpoint is passed over with a reason naming file and field."""
    from vaswani_hf.training.checkpoints import resumable_checkpoint

    older = _checkpoint(tmp_path / "checkpoint-10", 10)
    newest = _checkpoint(tmp_path / "checkpoint-20", 20)
    (newest / "trainer_state.json").write_text(json.dumps(state))
    found, skipped = resumable_checkpoint(tmp_path)
    assert found == older and len(skipped) == 1
    assert re.search(rf"checkpoint-20 \(.*checkpoint-20/trainer_state\.json: {field}", skipped[0]), skipped[0]


# ---------------------------------------------------------------------------------------------------------------------
# A full disk while the optimizer state is written
# ---------------------------------------------------------------------------------------------------------------------


def test_a_full_disk_in_torch_save_is_the_os_error_it_is(tmp_path):
    """torch.save reports a failed write as RuntimeError("... unexpected pos ...") without errno: inside
    `checkpoint_write_errors` it is OSError(ENOSPC) naming the file, which the command line reports in one line."""
    from vaswani_hf.cli.contract import expected_os_failure
    from vaswani_hf.training.checkpoints import checkpoint_write_errors

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        staged, final = disk / ".staging" / "checkpoint-7", tmp_path / "run" / "checkpoint-7"
        staged.mkdir(parents=True)
        with pytest.raises(OSError) as error:
            with checkpoint_write_errors(staged, final):
                torch.save({"exp_avg": torch.zeros(100_000)}, staged / "optimizer.pt")
        assert error.value.errno == errno.ENOSPC and error.value.filename == str(final / "optimizer.pt")
        code, line = expected_os_failure(error.value)
        assert code == 1 and line.endswith(
            "checkpoint-7/optimizer.pt: no space left on device; free some space or write elsewhere"
        )
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], capture_output=True, check=False)
    with pytest.raises(RuntimeError, match="a bug"):  # anything else passes unchanged (with plenty of space)
        with checkpoint_write_errors(tmp_path, tmp_path / "checkpoint-1"):
            raise RuntimeError("a bug: unexpected pos")


# ---------------------------------------------------------------------------------------------------------------------
# A checkpoint proves its files (io.proofs): what a resume or an average reuses is what was written
# ---------------------------------------------------------------------------------------------------------------------


def test_a_checkpoint_changed_since_it_was_written_is_never_trusted(tmp_path, caplog):
    """publish_checkpoint writes checksums.json (each file's size and SHA-256). A byte of a tensor changed since (the
    safetensors header intact: no structural check sees it) passes the checkpoint over for --resume, named, and
    averaging refuses it; a checkpoint without checksums (an earlier version's) is checked by structure only, said."""
    import logging

    from test_cli_resume import one_byte_changed

    from vaswani_hf.io import UsageError, proofs
    from vaswani_hf.training.checkpoints import publish_checkpoint, resumable_checkpoint

    for step in (10, 20):
        publish_checkpoint(
            _checkpoint(tmp_path / ".staging" / f"checkpoint-{step}", step), tmp_path / f"checkpoint-{step}"
        )
    older, newest = tmp_path / "checkpoint-10", tmp_path / "checkpoint-20"
    listed = json.loads((newest / proofs.MANIFEST).read_text())["files"]
    assert sorted(listed) == sorted(p.name for p in newest.iterdir() if p.name != proofs.MANIFEST)
    assert resumable_checkpoint(tmp_path) == (newest, []) and not (tmp_path / ".staging").exists()
    one_byte_changed(newest / "model.safetensors")
    found, skipped = resumable_checkpoint(tmp_path)
    assert found == older and skipped == [
        "checkpoint-20 (model.safetensors differs from its SHA-256 in checksums.json (changed or damaged since it "
        "was written))"
    ]
    with pytest.raises(
        UsageError, match=r"checkpoint-20: model\.safetensors differs from its SHA-256 .* not averaged"
    ):
        average_checkpoints([older, newest])
    (older / proofs.MANIFEST).unlink()
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.training.checkpoints"):
        assert resumable_checkpoint(tmp_path)[0] == older
    assert [r.getMessage() for r in caplog.records] == [
        f"{older} has no checksums.json (written by an earlier version): its files are checked by structure only"
    ]
