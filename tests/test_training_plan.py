"""A run's plan (vaswani_hf.training.plan, .preflight, .sources): what a recipe means on this machine, resolved once
before any work. Every refusal here happens before anything is written; every decision is the one the run then
follows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import tiny_recipe
from safetensors.torch import save_file

from vaswani_hf import io
from vaswani_hf.training import RecipeError, World, load_recipe, plan_run
from vaswani_hf.training.sources import FileSource, HubSource, SampleSource


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


def test_the_plan_holds_sources_budget_and_output(tmp_path):
    plan = plan_run(tiny_recipe(tmp_path, max_steps=4), world=World(processes=2, local_processes=2))
    assert isinstance(plan.sources["train"], FileSource) and plan.sources["valid"] is None
    assert plan.sources["train"].files() == {"train_data (en)": tmp_path / "corpus" / "train.en",
                                             "train_data (de)": tmp_path / "corpus" / "train.de"}
    assert (plan.max_tokens, plan.accumulation, plan.tokens_per_update) == (4096, 1, 8192)
    assert plan.output.start == "new" and plan.export_dir == tmp_path / "run" / "hub"
    assert plan.tokenizer_dir == tmp_path / "run" / "tokenizer" and plan.label_smoothing == 0.1
    assert not (tmp_path / "run").exists()  # planning writes nothing


def test_sources_of_every_format(tmp_path):
    sample = plan_run(load_recipe("default", {"output_dir": str(tmp_path / "a")})).sources
    assert isinstance(sample["test"], SampleSource) and sample["test"].describe()["name"].endswith("test split")
    hub = plan_run(load_recipe("wmt14-en-de-base", {"output_dir": str(tmp_path / "b")})).sources
    assert isinstance(hub["valid"], HubSource)
    assert hub["test"].describe() == {"name": "wmt14 test", "id": "wmt14", "config": "de-en", "split": "test"}


@pytest.mark.parametrize("where", ["output_dir", "export_dir"])
def test_an_output_folder_never_holds_or_replaces_the_corpus(tmp_path, where):
    recipe = tiny_recipe(tmp_path, **{where: str(tmp_path / "corpus")})
    with pytest.raises(RecipeError, match=rf"{where} .*corpus contains train_data \(en\)"):
        plan_run(recipe)
    recipe = tiny_recipe(tmp_path, **{where: str(tmp_path)})
    with pytest.raises(RecipeError, match=rf"{where} .* contains train_data"):
        plan_run(recipe)


def test_a_tokenizer_path_inside_output_dir_is_refused(tmp_path):
    """--overwrite clears OUTPUT/tokenizer: a tokenizer_path there would be deleted and silently trained anew."""
    tokenizer = tmp_path / "run" / "tokenizer"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text("{}")
    with pytest.raises(RecipeError, match=r"output_dir .*run contains tokenizer_path"):
        plan_run(tiny_recipe(tmp_path, tokenizer_path=str(tokenizer)), overwrite=True)
    assert (tokenizer / "tokenizer.json").read_text() == "{}"


def test_export_dir_may_not_replace_the_run(tmp_path):
    with pytest.raises(RecipeError, match="export_dir .* is output_dir"):
        plan_run(tiny_recipe(tmp_path, export_dir=str(tmp_path / "run")))
    with pytest.raises(RecipeError, match="export_dir .* contains output_dir"):
        plan_run(tiny_recipe(tmp_path, output_dir=str(tmp_path / "x" / "run"), export_dir=str(tmp_path / "x")))
    with pytest.raises(RecipeError, match="export_dir .* lies inside checkpoint-4"):
        plan_run(tiny_recipe(tmp_path, export_dir=str(tmp_path / "run" / "checkpoint-4" / "hub")))


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


@pytest.mark.parametrize("flag", ["ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"])
def test_sharding_asked_for_on_the_cpu_is_refused(tmp_path, monkeypatch, flag):
    """Accelerate turns FSDP / DeepSpeed on only for GPU back-ends: on the CPU a run would silently be plain DDP."""
    monkeypatch.setenv(flag, "true")
    with pytest.raises(RecipeError, match=rf"was asked for \(the accelerate launch config sets {flag}\) but this run "
                                          "is on the CPU"):
        plan_run(tiny_recipe(tmp_path), world=World(device="cpu"))


def test_device_checks(tmp_path):
    with pytest.raises(RecipeError, match="fp16 mixed precision needs a CUDA GPU"):
        plan_run(tiny_recipe(tmp_path, fp16=True), world=World(device="cpu"))
    huge = dict(d_model=16384, d_ff=65536, num_heads=16, num_encoder_layers=24, num_decoder_layers=24)
    with pytest.raises(RecipeError, match=r"needs [\d,.]+ GiB for weights, gradients and Adam, more than"):
        plan_run(tiny_recipe(tmp_path, **huge), world=World(device="cpu"))


def test_plan_errors_name_the_split(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.en").write_text("a\n")
    with pytest.raises(RecipeError, match=r"train_data: unknown language code 'de'"):
        plan_run(tiny_recipe(tmp_path))
