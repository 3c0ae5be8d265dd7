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
from vaswani_hf.training.plan import World, plan_run
from vaswani_hf.training.preflight import TRAINING_RUN
from vaswani_hf.training.recipe import RecipeError, load_recipe


def fake_checkpoint(run: Path, step: int, processes: int = 1, *, rng: bool = True) -> Path:
    """A checkpoint folder as the Trainer writes it (complete, small), in a folder a run took (its marker)."""
    folder = run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    io.mark(run, TRAINING_RUN)
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "vaswani",
                "d_model": 32,
                "d_ff": 64,
                "num_heads": 2,
                "num_encoder_layers": 1,
                "num_decoder_layers": 1,
            }
        )
    )
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    for name in ("optimizer.pt", "scheduler.pt"):
        torch.save({"state": 1}, folder / name)
    if rng:
        for name in ["rng_state.pth"] if processes == 1 else [f"rng_state_{i}.pth" for i in range(processes)]:
            torch.save({"cpu": torch.zeros(2)}, folder / name)
    io.proofs.write_manifest(folder)  # as publish_checkpoint writes it
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
        with pytest.raises(io.UsageError, match=r"export_dir .*my_models is not an earlier Hub model folder"):
            plan_run(tiny_recipe(tmp_path, export_dir=str(foreign), **flags), overwrite=not flags)
    assert (foreign / "config.json").read_text() == "{}"


def test_resuming_a_finished_run_does_nothing(tmp_path):
    finished_run(tmp_path, steps=4)
    plan = plan_run(tiny_recipe(tmp_path, max_steps=4, resume=True))
    assert plan.output.start == "finished" and plan.output.finished_at == 4
    assert "nothing to do" in plan.describe()
    more = plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True))
    assert more.output.start == "resume" and more.output.resume_from == tmp_path / "run" / "checkpoint-4"
    (tmp_path / "run" / "metrics.json").unlink()  # stopped after the last checkpoint, before its final scores
    for processes in (1, 2):  # nothing left to train: no RNG state needed, whatever the process count
        score = plan_run(
            tiny_recipe(tmp_path, max_steps=4, resume=True),
            world=World(processes=processes, local_processes=processes),
        )
        assert score.output.start == "score" and score.output.resume_from.name == "checkpoint-4"  # loaded, not trained


def test_overwrite_and_resume_take_only_a_run_of_ours(tmp_path):
    """--overwrite removed a user's hub/, tokenizer/ and metrics.json from a folder no run ever wrote (their names
    are RUN_FILES): a non-empty folder without a run's marker is refused, untouched, whatever the flags; a run from
    before the marker (recipe.yaml beside checkpoints with their trainer_state.json) is still ours."""
    run = tmp_path / "run"
    (run / "hub").mkdir(parents=True)
    (run / "hub" / "mine.txt").write_text("precious")
    (run / "metrics.json").write_text("notes")
    for flags, overwrite in (({}, True), ({"resume": True}, False), ({}, False)):
        with pytest.raises(
            RecipeError,
            match=r"^output_dir .*run is not empty \(hub, metrics\.json\) and holds no "
            r"run of this tool: .*choose another output_dir$",
        ):
            plan_run(tiny_recipe(tmp_path, **flags), overwrite=overwrite)
    assert (run / "hub" / "mine.txt").read_text() == "precious" and sorted(p.name for p in run.iterdir()) == [
        "hub",
        "metrics.json",
    ]
    (run / "hub" / "mine.txt").unlink()
    fake_checkpoint(run, 4)
    (run / io.MARKER).unlink()
    (run / "recipe.yaml").write_text(tiny_recipe(tmp_path).to_yaml())
    assert plan_run(tiny_recipe(tmp_path), overwrite=True).output.start == "overwrite"
    assert plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True)).output.start == "resume"
    plan_run(tiny_recipe(tmp_path), overwrite=True).lock().release()  # a run takes the folder: marked
    (run / "recipe.yaml").unlink()
    assert io.written_by(run) == TRAINING_RUN and plan_run(tiny_recipe(tmp_path), overwrite=True).output.previous


def test_overwrite_and_resume_together_are_refused(tmp_path):
    with pytest.raises(RecipeError, match=r"^--overwrite .* --resume .*: pick one$"):
        plan_run(tiny_recipe(tmp_path, resume=True), overwrite=True)


def test_resume_without_a_recipe_continues_the_run_as_saved(tmp_path, caplog):
    """`vaswani-train --output_dir run --resume` trained a finished 4-update run on to the default recipe's 800
    updates, rewriting its recipe.yaml: without a recipe, a resumed run is its own recipe.yaml (command-line keys
    over it); a key that differs from it, with or without a recipe, is named in one line."""
    import logging

    run = finished_run(tmp_path, steps=4)
    saved = tiny_recipe(tmp_path, max_steps=4).to_yaml()
    (run / "recipe.yaml").write_text(saved)
    own = load_recipe(overrides={"output_dir": str(run), "resume": True})
    assert (
        own.optimization.max_steps == 4 and own.file is None and (own.model.d_model, own.model.vocab_size) == (32, 300)
    )
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.training.preflight"):
        assert plan_run(own).output.start == "finished"
        assert not caplog.records
        more = plan_run(load_recipe(None, {"output_dir": str(run), "resume": "true", "max_steps": 8}))
        assert more.output.start == "resume" and more.recipe.optimization.max_steps == 8
        plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True, warmup_steps=3, disable_tqdm=True))
    changed = [r.getMessage() for r in caplog.records]
    assert len(changed) == 2 and changed[0].endswith("recipe.yaml: max_steps 4 -> 8"), changed
    assert changed[1].endswith("max_steps 4 -> 8; warmup_steps 4 -> 3"), changed
    assert (run / "recipe.yaml").read_text() == saved
    assert (
        load_recipe(overrides={"output_dir": str(run)}).optimization.max_steps == 800
    )  # not resuming: the default recipe


def test_a_checkpoint_without_its_rng_state_is_not_resumed_silently(tmp_path):
    fake_checkpoint(tmp_path / "run", 2)
    fake_checkpoint(tmp_path / "run", 4, rng=False)
    plan = plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True))
    assert plan.output.resume_from.name == "checkpoint-2"  # the newest checkpoint that resumes exactly
    with pytest.raises(
        RecipeError,
        match=r"no checkpoint .* can be resumed .*no rng_state_0\.pth: it was saved by 1 "
        r"process\(es\) \(rng_state\.pth\), this run has 2",
    ):
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
    with pytest.raises(io.UsageError, match=r"output_dir .*run contains tokenizer_path"):
        plan_run(tiny_recipe(tmp_path, tokenizer_path=str(tokenizer)), overwrite=True)
    assert (tokenizer / "tokenizer.json").read_text() == "{}"


# ---------------------------------------------------------------------------------------------------------------------
# --resume: a damaged state file makes a checkpoint incomplete, like a missing one
# ---------------------------------------------------------------------------------------------------------------------


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _random_bytes(path: Path) -> None:
    path.write_bytes(
        bytes(
            torch.randint(
                0, 256, (path.stat().st_size,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8
            ).tolist()
        )
    )


def _flip_stored_byte(path: Path) -> None:
    """One byte of a stored tensor changed (the zip structure intact, the member's CRC no longer matches)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        member = next(i for i in archive.infolist() if "/data/" in i.filename)
    data = bytearray(path.read_bytes())
    start = data.index(b"\0" * 4, member.header_offset + 30)  # inside the member's zero-filled tensor bytes
    data[start] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "name, damage",
    [
        ("optimizer.pt", _truncate),  # a copy or a save cut short
        ("rng_state.pth", lambda p: p.write_bytes(p.read_bytes()[:100])),
        ("scheduler.pt", _random_bytes),
        ("scheduler.pt", lambda p: p.write_text("{}")),  # not a torch archive at all
        ("rng_state.pth", _flip_stored_byte),
        ("scaler.pt", lambda p: p.write_bytes(b"\0" * 64)),  # optional, but read when present
    ],
)
def test_a_damaged_state_file_makes_the_checkpoint_incomplete(tmp_path, caplog, name, damage):
    """transformers reads optimizer, scheduler, scaler and RNG states only after training started: a damaged one
    ended the run with a traceback. It is passed over like a missing file, with one warning naming it."""
    import logging

    older = fake_checkpoint(tmp_path / "run", 2)
    newest = fake_checkpoint(tmp_path / "run", 4)
    if name == "scaler.pt":
        torch.save({"scale": 1.0}, newest / name)
    damage(newest / name)
    with caplog.at_level(logging.WARNING, logger="vaswani_hf.training.preflight"):
        plan = plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True))
    assert plan.output.resume_from == older
    warned = [r.getMessage() for r in caplog.records if r.name == "vaswani_hf.training.preflight"]
    assert len(warned) == 1 and f"skipping checkpoint-4 ({name} is damaged (" in warned[0], warned
    assert "resume from checkpoint-2" in plan.describe()
    damage(older / name) if name != "scaler.pt" else (older / name).write_bytes(b"\0")
    refused = (
        rf"--resume: no checkpoint in .* (is complete|can be resumed exactly) \(checkpoint-4 \({name} is "
        rf"damaged .*checkpoint-2 \({name} is damaged .*\); remove (them|the damaged checkpoints), or train "
        r"into another output_dir$"
    )
    with pytest.raises(RecipeError, match=refused):
        plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True))


def test_intact_state_files_are_not_passed_over(tmp_path):
    from vaswani_hf.training.checkpoints import torch_archive_problem

    newest = fake_checkpoint(tmp_path / "run", 4)
    torch.save({"exp_avg": torch.randn(1000), "step": 3}, newest / "optimizer.pt")
    io.proofs.write_manifest(newest)  # the checkpoint as written
    assert all(torch_archive_problem(newest / n) is None for n in ("optimizer.pt", "scheduler.pt", "rng_state.pth"))
    assert plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True)).output.resume_from == newest


# ---------------------------------------------------------------------------------------------------------------------
# --resume keeps the run's tokenizer: another vocab_size or tokenizer is refused, not recorded
# ---------------------------------------------------------------------------------------------------------------------


def _tokenizer_run(tmp_path: Path, tok) -> tuple[Path, dict]:
    """A run that trained `tok` (OUTPUT/tokenizer, and the checkpoint's copy) with the recipe it recorded."""
    recipe = tiny_recipe(tmp_path, max_steps=8, vocab_size=500)
    run = tmp_path / "run"
    checkpoint = fake_checkpoint(run, 4)
    tok.save_pretrained(str(run / "tokenizer"))
    tok.save_pretrained(str(checkpoint))
    (run / "recipe.yaml").write_text(recipe.to_yaml())
    return run, recipe


def _other_tokenizer(tok, folder: Path) -> Path:
    """`tok` with two token ids exchanged: the same size, other ids for the same text."""
    tok.save_pretrained(str(folder))
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    "key, value, was", [("vocab_size", 3000, 500), ("bpe_min_frequency", 5, None), ("lowercase", True, False)]
)
def test_resume_refuses_other_tokenizer_keys(tmp_path, tok, key, value, was):
    run, recipe = _tokenizer_run(tmp_path, tok)
    was = recipe.flat()[key] if was is None else was
    plan = plan_run(tiny_recipe(tmp_path, max_steps=8, vocab_size=500, resume=True))
    assert plan.output.resume_from.name == "checkpoint-4"
    with pytest.raises(RecipeError) as error:
        plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True, **{"vocab_size": 500, key: value}))
    message = str(error.value)
    assert message.startswith(f"--resume: {key} is {value!r} in the recipe, {was!r} in the run's "), message
    assert str(run / "recipe.yaml") in message and "\n" not in message


def test_resume_refuses_another_tokenizer_of_the_same_size(tmp_path, tok):
    run, _ = _tokenizer_run(tmp_path, tok)
    other = _other_tokenizer(tok, tmp_path / "other_tok")
    same = tmp_path / "same_tok"
    tok.save_pretrained(str(same))
    plan = plan_run(tiny_recipe(tmp_path, max_steps=8, vocab_size=500, resume=True, tokenizer_path=str(same)))
    assert plan.output.resume_from.name == "checkpoint-4"  # a copy of the run's tokenizer elsewhere is the same one
    with pytest.raises(
        RecipeError,
        match=r"^--resume: tokenizer_path .*other_tok holds another tokenizer than "
        r"checkpoint-4 was trained with \(.*other tokens or merges; the run's "
        r"tokenizer_path: None\)",
    ):
        plan_run(tiny_recipe(tmp_path, max_steps=8, vocab_size=500, resume=True, tokenizer_path=str(other)))
    _other_tokenizer(tok, run / "tokenizer")  # the run's own folder replaced behind its back
    with pytest.raises(RecipeError, match=r"^--resume: the run's tokenizer folder .*run/tokenizer holds another"):
        plan_run(tiny_recipe(tmp_path, max_steps=8, vocab_size=500, resume=True))


class _Planted:
    def __reduce__(self):
        return (print, ("PLANTED CODE RAN",))


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth", "scaler.pt"])
def test_a_state_file_the_safe_loader_refuses_is_refused_before_any_work(tmp_path, capsys, name):
    """A pickle that torch's safe loader (weights_only=True) refuses passed the structural check and ended the
    resume in a traceback from the Trainer: refused in one line naming the file, the planted code never run, the
    checkpoint not silently passed over for an older one."""
    from vaswani_hf.training.checkpoints import InconsistentCheckpoint

    fake_checkpoint(tmp_path / "run", 2)
    newest = fake_checkpoint(tmp_path / "run", 4)
    torch.save({"state": {0: _Planted()}}, newest / name)
    with pytest.raises(InconsistentCheckpoint) as refused:
        plan_run(tiny_recipe(tmp_path, max_steps=8, resume=True))
    message = str(refused.value)
    assert message.startswith(f"{newest / name}: holds a pickle that torch's safe loader refuses (it calls ")
    assert "\n" not in message and "PLANTED" not in capsys.readouterr().out


@pytest.mark.usefixtures("one_torch_thread")
def test_a_run_folder_written_before_the_recipe_had_sections_resumes_with_its_recipe_yaml(tmp_path, capfd):
    """A run folder whose recipe.yaml is the flat mapping the package wrote before recipes had sections (the file
    kept in tests/data, written by that version for the tiny recipe at 2 updates) goes on with `vaswani-train
    --output_dir RUN --resume --max_steps 4`, as a user resumes it: its recipe.yaml is read as the run's recipe, no
    key is reported as changed but max_steps, and the recipe.yaml written back is the same flat mapping."""
    import functools

    from conftest import REPO

    from vaswani_hf.cli.train import main
    from vaswani_hf.training.run import run_training

    first = tiny_recipe(tmp_path, max_steps=2)
    assert run_training(plan_run(first))["global_step"] == 2
    run = Path(first.run.output_dir)
    before = (REPO / "tests" / "data" / "run_recipe_flat_v1.yaml").read_text(encoding="utf-8")
    assert "warmup_steps: 4" in before and "d_model: 32" in before and "max_steps: 2" in before
    corpus = first.data.data_dir
    (run / "recipe.yaml").write_text(before.replace("/RUN", str(run)).replace("/CORPUS", corpus), encoding="utf-8")
    assert load_recipe(run / "recipe.yaml").flat() == first.flat()  # the same recipe, read from the old file
    capfd.readouterr()
    assert main(["--output_dir", str(run), "--resume", "--max_steps", "4"]) == 0
    out, err = capfd.readouterr()
    assert "resume from checkpoint-2" in out + err and "max_steps 2 -> 4" in out + err, (out + err)[-3000:]
    assert io.read_json(run / "metrics.json")["global_step"] == 4
    written = (run / "recipe.yaml").read_text(encoding="utf-8")
    resumed = {"max_steps: 2": "max_steps: 4", "resume: false": "resume: true"}
    expected = before.replace("/RUN", str(run)).replace("/CORPUS", corpus)
    assert written == functools.reduce(lambda text, pair: text.replace(*pair), resumed.items(), expected)
