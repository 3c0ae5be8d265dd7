"""What a run may do with the file system (vaswani_hf.training.preflight), decided before any write: the output
folder (new, resume, overwrite, a finished run, a run in progress), the export folder, the tokenizer folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import tiny_recipe
from safetensors.torch import save_file

from vaswani_hf import io
from vaswani_hf.training import RecipeError, World, plan_run


def fake_checkpoint(run: Path, step: int, processes: int = 1, *, rng: bool = True) -> Path:
    """A checkpoint folder as the Trainer writes it (complete, small)."""
    folder = run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "vaswani", "d_model": 32, "d_ff": 64,
                                                    "num_heads": 2, "num_encoder_layers": 1,
                                                    "num_decoder_layers": 1}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    for name in ("optimizer.pt", "scheduler.pt"):
        (folder / name).write_bytes(b"state")
    if rng:
        for name in (["rng_state.pth"] if processes == 1 else [f"rng_state_{i}.pth" for i in range(processes)]):
            (folder / name).write_bytes(b"rng")
    return folder


def finished_run(tmp_path: Path, steps: int = 4) -> Path:
    run = tmp_path / "run"
    fake_checkpoint(run, steps)
    (run / "metrics.json").write_text(json.dumps({"global_step": steps}))
    return run


def test_resume_and_overwrite_never_replace_a_foreign_export_dir(tmp_path):
    foreign = tmp_path / "my_models"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    finished_run(tmp_path)
    for flags in ({"resume": True, "max_steps": 8}, {}):
        with pytest.raises(RecipeError, match=r"export_dir .*my_models is not an earlier Hub model folder"):
            plan_run(tiny_recipe(tmp_path, export_dir=str(foreign), **flags), overwrite=not flags)
    assert (foreign / "config.json").read_text() == "{}"


def test_resuming_a_finished_run_does_nothing(tmp_path):
    finished_run(tmp_path, steps=4)
    plan = plan_run(tiny_recipe(tmp_path, max_steps=4, resume=True))
    assert plan.output.start == "finished" and plan.output.finished_at == 4 and plan.resume_from is None
    assert "nothing to do" in plan.describe()
    more = plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True))
    assert more.output.start == "resume" and more.resume_from == tmp_path / "run" / "checkpoint-4"
    (tmp_path / "run" / "metrics.json").unlink()  # stopped after the last checkpoint, before its final scores
    for processes in (1, 2):  # nothing left to train: no RNG state needed, whatever the process count
        score = plan_run(tiny_recipe(tmp_path, max_steps=4, resume=True),
                         world=World(processes=processes, local_processes=processes))
        assert score.output.start == "score" and score.output.resume_from.name == "checkpoint-4"
        assert score.resume_from is None  # the Trainer does not train from it


def test_a_checkpoint_without_its_rng_state_is_not_resumed_silently(tmp_path):
    fake_checkpoint(tmp_path / "run", 2)
    fake_checkpoint(tmp_path / "run", 4, rng=False)
    plan = plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True))
    assert plan.resume_from.name == "checkpoint-2"  # the newest checkpoint that resumes exactly
    with pytest.raises(RecipeError, match=r"no checkpoint .* can be resumed .*no rng_state_0\.pth: it was saved by 1 "
                                          r"process\(es\) \(rng_state\.pth\), this run has 2"):
        plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True), world=World(processes=2, local_processes=2))


def test_a_folder_in_use_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    with io.FolderLock(tmp_path / "run"):
        for overwrite in (False, True):
            with pytest.raises(RecipeError, match=r"output_dir .*run is in use by another run"):
                plan_run(tiny_recipe(tmp_path), overwrite=overwrite)
    plan = plan_run(tiny_recipe(tmp_path))
    lock = plan.lock()
    try:
        with pytest.raises(io.UsageError, match="in use"):
            plan_run(tiny_recipe(tmp_path)).lock()
    finally:
        lock.release()


def test_export_dir_may_not_replace_the_run(tmp_path):
    with pytest.raises(RecipeError, match="export_dir .* is output_dir"):
        plan_run(tiny_recipe(tmp_path, export_dir=str(tmp_path / "run")))
    with pytest.raises(RecipeError, match="export_dir .* contains output_dir"):
        plan_run(tiny_recipe(tmp_path, output_dir=str(tmp_path / "x" / "run"), export_dir=str(tmp_path / "x")))
    with pytest.raises(RecipeError, match="export_dir .* lies inside checkpoint-4"):
        plan_run(tiny_recipe(tmp_path, export_dir=str(tmp_path / "run" / "checkpoint-4" / "hub")))


def test_a_tokenizer_path_inside_output_dir_is_refused(tmp_path):
    """--overwrite clears OUTPUT/tokenizer: a tokenizer_path there would be deleted and silently trained anew."""
    tokenizer = tmp_path / "run" / "tokenizer"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text("{}")
    with pytest.raises(RecipeError, match=r"output_dir .*run contains tokenizer_path"):
        plan_run(tiny_recipe(tmp_path, tokenizer_path=str(tokenizer)), overwrite=True)
    assert (tokenizer / "tokenizer.json").read_text() == "{}"
