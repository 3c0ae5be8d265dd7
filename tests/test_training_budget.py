"""Section 5.1's ~25000 tokens per update on any number of processes and any device, without editing a recipe
(`max_tokens_per_device: auto`, planned in vaswani_hf/training/plan.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import vaswani_hf
from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.training.plan import (
    World,
    activation_bytes_per_token,
    approximate_parameters,
    device_capacity,
    plan_run,
    split_update,
    tokens_per_device,
)
from vaswani_hf.training.recipe import load_recipe
from vaswani_hf.training.trainer import build_training_arguments

GB = 10**9


@pytest.mark.parametrize("preset", ["base", "big"])
def test_parameter_count_without_building_the_model(preset):
    config = getattr(VaswaniConfig, preset)(vocab_size=37000)
    assert approximate_parameters(config) == sum(
        p.numel() for p in VaswaniForConditionalGeneration(config).parameters()
    )


@pytest.mark.parametrize("world", [1, 2, 8])
@pytest.mark.parametrize("memory, bf16", [(80 * GB, True), (40 * GB, True), (16 * GB, False), (24 * GB, False)])
def test_every_update_holds_about_25k_tokens(world, memory, bf16):
    """For 1, 2 and 8 processes on devices of 16-80 GB (fp32 and bf16): the micro-batch fits the device's estimated
    capacity, and micro-batch x processes x accumulation is the recipe's 25000 rounded up by at most one token per
    micro-batch."""
    config = VaswaniConfig.base(vocab_size=37000)
    capacity = device_capacity(config, approximate_parameters(config), memory, bf16=bf16)
    tokens, accumulation = split_update(25000, world, capacity)
    assert tokens <= capacity
    assert 25000 <= tokens * world * accumulation < 25000 + world * accumulation
    assert accumulation == -(-(-(-25000 // world)) // capacity)  # the fewest micro-batches that fit


def test_one_large_gpu_takes_the_whole_update_and_eight_share_it():
    config = VaswaniConfig.base(vocab_size=37000)
    capacity = device_capacity(config, approximate_parameters(config), 80 * GB, bf16=True)
    assert split_update(25000, 1, capacity) == (25000, 1)  # one H100: no accumulation of 8 tiny micro-batches
    assert split_update(25000, 8, capacity) == (3125, 1)  # the paper's 8 GPUs
    small = device_capacity(config, approximate_parameters(config), 16 * GB)
    assert split_update(25000, 1, small) == (6250, 4)


def test_memory_estimate_matches_the_measured_base_model():
    """Measured on CPU (module docstring of plan.py): ~1.15 MB per token for the base model in fp32, the big model's
    per-token cost higher, and bf16 lower."""
    base, big = VaswaniConfig.base(vocab_size=37000), VaswaniConfig.big(vocab_size=37000)
    assert 1.0e6 < activation_bytes_per_token(base) < 1.3e6
    assert activation_bytes_per_token(big) > activation_bytes_per_token(base)
    assert activation_bytes_per_token(base, bf16=True) < activation_bytes_per_token(base)


@pytest.mark.parametrize("world", [1, 2, 8])
def test_the_wmt_recipe_on_cpu_processes(world, tmp_path):
    """The recipe as shipped, on `world` CPU processes of this machine (their RAM shared): the run's plan holds the
    per-device budget for the precision it resolved (the recipe's `bf16: auto`: this processor's choice), and the
    Trainer's accumulation with it gives ~25000 tokens per update."""
    recipe = load_recipe("wmt14-en-de-base", {"output_dir": str(tmp_path / "run")})
    assert recipe.optimization.max_tokens_per_device == "auto" and recipe.optimization.tokens_per_step == 25000
    plan = plan_run(recipe, world=World(processes=world, local_processes=world))
    tokens, accumulation = plan.max_tokens, plan.accumulation
    low_precision = plan.bf16
    assert (tokens, accumulation) == tokens_per_device(
        recipe, world, device="cpu", local_processes=world, low_precision=low_precision
    )
    assert tokens <= 4096 and 25000 <= tokens * world * accumulation < 25000 + world * accumulation
    assert plan.tokens_per_update == tokens * world * accumulation
    assert build_training_arguments(plan).gradient_accumulation_steps == accumulation


def test_a_number_in_the_recipe_wins():
    recipe = load_recipe("wmt14-en-de-base", {"max_tokens_per_device": 2000})
    assert [tokens_per_device(recipe, w) for w in (1, 2, 8)] == [(2000, 13), (2000, 7), (2000, 2)]
    assert tokens_per_device(load_recipe("default"), 2) == (1024, 1)


# ---------------------------------------------------------------------------------------------------------------------
# One source: the recipe declares the budget, the plan resolves it, every constructor takes it
# ---------------------------------------------------------------------------------------------------------------------


def test_the_evaluation_budget_and_the_length_filter_each_have_one_rule(tmp_path):
    """The evaluation budget falls back to the training micro-batch's; the length filter is max_length, or with none
    what one micro-batch holds. The plan applies the rules of `plan`, and the trainer the same one."""
    from conftest import tiny_recipe

    from vaswani_hf.training.plan import evaluation_budget, longest_training_pair

    assert [evaluation_budget(4096, e) for e in (0, None, 800)] == [4096, 4096, 800]
    assert [longest_training_pair(4096, m) for m in (None, 100)] == [4096, 100]
    for eval_max_tokens, max_length in ((0, None), (800, 100)):
        plan = plan_run(
            tiny_recipe(tmp_path, max_tokens_per_device=2048, eval_max_tokens=eval_max_tokens, max_length=max_length),
            world=World(),
        )
        assert plan.eval_tokens == evaluation_budget(2048, eval_max_tokens)
        assert plan.longest_pair == longest_training_pair(2048, max_length)


def test_a_budget_below_max_length_is_refused_by_one_rule(tmp_path, monkeypatch):
    """A number in the recipe is refused when it is loaded, `auto`'s number when the run is planned: one rule
    (`recipe.check_length_fits`), and no other module words it."""
    from vaswani_hf.training import plan as budget
    from vaswani_hf.training.recipe import RecipeError

    with pytest.raises(RecipeError, match="max_tokens_per_device 64 is below max_length 128"):
        load_recipe("default", {"max_tokens_per_device": 64, "max_length": 128})
    monkeypatch.setattr(budget, "device_capacity", lambda *args, **kwargs: 200)
    recipe = load_recipe("wmt14-en-de-base", {"output_dir": str(tmp_path / "run"), "max_length": 256})
    with pytest.raises(RecipeError, match="auto gives 200 tokens per micro-batch here, below max_length 256"):
        plan_run(recipe, world=World())
    modules = Path(vaswani_hf.__file__).parent.rglob("*.py")
    wording = [p.name for p in modules if "below max_length" in p.read_text(encoding="utf-8")]
    assert wording == ["recipe.py"]


def test_no_token_budget_default_outside_the_recipe():
    """The paper's 25000 tokens are a recipe's value (tokens_per_step in recipes/*.yaml): no module of the package
    holds the number, and the batcher and the trainer take their budget as a required argument."""
    import ast
    import inspect

    from vaswani_hf.data.batching import TokenBatchSampler
    from vaswani_hf.training.trainer import VaswaniTrainer

    root = Path(vaswani_hf.__file__).parent
    holders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if any(
            isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.value == 25000
            for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        )
    ]
    assert holders == []
    for function in (TokenBatchSampler.__init__, TokenBatchSampler.from_dataset, VaswaniTrainer.__init__):
        assert inspect.signature(function).parameters["max_tokens"].default is inspect.Parameter.empty, function
    shipped = {p.stem: p.read_text(encoding="utf-8") for p in (root / "recipes").glob("wmt14-*.yaml")}
    assert shipped and all("tokens_per_step: 25000" in text for text in shipped.values())
