"""A run's plan (vaswani_hf.training.plan, .preflight, .sources): what a recipe means on this machine, resolved once
before any work. Every refusal here happens before anything is written; every decision is the one the run then
follows."""

from __future__ import annotations

import pytest
from conftest import tiny_recipe

from vaswani_hf.training import RecipeError, World, plan_run
from vaswani_hf.training.sources import FileSource


def test_the_plan_holds_sources_budget_and_output(tmp_path):
    plan = plan_run(tiny_recipe(tmp_path, max_steps=4), world=World(processes=2, local_processes=2))
    assert isinstance(plan.sources["train"], FileSource) and plan.sources["valid"] is None
    assert plan.sources["train"].files() == {"train_data (en)": tmp_path / "corpus" / "train.en",
                                             "train_data (de)": tmp_path / "corpus" / "train.de"}
    assert (plan.max_tokens, plan.accumulation, plan.tokens_per_update) == (4096, 1, 8192)
    assert plan.output.start == "new" and plan.export_dir == tmp_path / "run" / "hub"
    assert plan.tokenizer_dir == tmp_path / "run" / "tokenizer" and plan.label_smoothing == 0.1
    assert not (tmp_path / "run").exists()  # planning writes nothing


@pytest.mark.parametrize("where", ["output_dir", "export_dir"])
def test_an_output_folder_never_holds_or_replaces_the_corpus(tmp_path, where):
    recipe = tiny_recipe(tmp_path, **{where: str(tmp_path / "corpus")})
    with pytest.raises(RecipeError, match=rf"{where} .*corpus contains train_data \(en\)"):
        plan_run(recipe)
    recipe = tiny_recipe(tmp_path, **{where: str(tmp_path)})
    with pytest.raises(RecipeError, match=rf"{where} .* contains train_data"):
        plan_run(recipe)


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


