"""A run's plan (vaswani_hf.training.plan, .preflight, .data): what a recipe means on this machine, resolved once
before any work. Every refusal here happens before anything is written; every decision is the one the run then
follows."""

from __future__ import annotations

import pytest
from conftest import tiny_recipe

from vaswani_hf.io import UsageError
from vaswani_hf.training.data import FileSource
from vaswani_hf.training.plan import World, plan_run
from vaswani_hf.training.recipe import RecipeError


def test_the_plan_holds_sources_budget_and_output(tmp_path):
    plan = plan_run(tiny_recipe(tmp_path, max_steps=4), world=World(processes=2, local_processes=2))
    assert isinstance(plan.sources["train"], FileSource) and plan.sources["valid"] is None
    assert plan.sources["train"].files() == {
        "train_data (en)": tmp_path / "corpus" / "train.en",
        "train_data (de)": tmp_path / "corpus" / "train.de",
    }
    assert (plan.max_tokens, plan.accumulation, plan.tokens_per_update) == (4096, 1, 8192)
    assert plan.output.start == "new" and plan.export_folder == tmp_path / "run" / "hub"
    assert plan.tokenizer_dir == tmp_path / "run" / "tokenizer" and plan.recipe.optimization.label_smoothing == 0.1
    assert not (tmp_path / "run").exists()  # planning writes nothing


@pytest.mark.parametrize("where", ["output_dir", "export_dir"])
def test_an_output_folder_never_holds_or_replaces_the_corpus(tmp_path, where):
    recipe = tiny_recipe(tmp_path, **{where: str(tmp_path / "corpus")})
    with pytest.raises(UsageError, match=rf"{where} .*corpus contains train_data \(en\)"):
        plan_run(recipe)
    recipe = tiny_recipe(tmp_path, **{where: str(tmp_path)})
    with pytest.raises(UsageError, match=rf"{where} .* contains train_data"):
        plan_run(recipe)


@pytest.mark.parametrize("flag", ["ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"])
def test_sharding_asked_for_on_the_cpu_is_refused(tmp_path, monkeypatch, flag):
    """Accelerate turns FSDP / DeepSpeed on only for GPU back-ends: on the CPU a run would silently be plain DDP."""
    monkeypatch.setenv(flag, "true")
    with pytest.raises(
        RecipeError,
        match=rf"was asked for \(the accelerate launch config sets {flag}\) but this run "
        "is on the CPU",
    ):
        plan_run(tiny_recipe(tmp_path), world=World(device="cpu"))


def test_device_checks(tmp_path):
    with pytest.raises(RecipeError, match="fp16 mixed precision needs a CUDA GPU"):
        plan_run(tiny_recipe(tmp_path, fp16=True), world=World(device="cpu"))
    huge = dict(d_model=16384, d_ff=65536, num_heads=16, num_encoder_layers=24, num_decoder_layers=24)
    with pytest.raises(RecipeError, match=r"needs [\d,.]+ GiB for weights, gradients and Adam, more than"):
        plan_run(tiny_recipe(tmp_path, **huge), world=World(device="cpu"))


# ---------------------------------------------------------------------------------------------------------------------
# Planned once: the plan holds what this machine decides, and refers to the recipe for every key
# ---------------------------------------------------------------------------------------------------------------------


def test_the_plan_holds_what_this_machine_decides_and_refers_to_the_recipe(tmp_path):
    """Both token budgets, the length filter, the precision, the data path, the fused kernel and the folders are the
    plan's own values, resolved from the recipe and the machine; every key stays in the recipe the plan refers to,
    under its one name (no field of the plan is named as a recipe key), and the plan is frozen."""
    import dataclasses

    from vaswani_hf.training.recipe import KEYS

    recipe = tiny_recipe(tmp_path, max_length=None, eval_max_tokens=0, test_num_beams=0)
    plan = plan_run(recipe, world=World(device="cpu"))
    assert plan.recipe is recipe and not {f.name for f in dataclasses.fields(plan)} & set(KEYS)
    assert (plan.max_tokens, plan.eval_tokens, plan.longest_pair) == (4096, 4096, 4096)
    assert plan.fused_adam is True and plan.precision.name == "fp32" and plan.data_path.pin_memory is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.max_tokens = 1

    plan = plan_run(
        tiny_recipe(tmp_path, max_length=100, eval_max_tokens=800, test_num_beams=2, adam_beta2=0.997),
        world=World(device="mps"),
    )
    assert (plan.eval_tokens, plan.longest_pair, plan.fused_adam) == (800, 100, False)  # no fused kernel on mps


def test_every_section_field_says_what_it_means():
    """Each field of the plan's sections carries its one-line meaning beside it (a `#` comment)."""
    import dataclasses
    import inspect

    from vaswani_hf.training import plan as plan_module

    sections = [plan_module.World, plan_module.RunPlan] + [
        f.type for f in dataclasses.fields(plan_module.RunPlan) if f.type.endswith("Plan")
    ]
    for section in sections:
        section = getattr(plan_module, section) if isinstance(section, str) else section
        source = inspect.getsource(section)
        for f in dataclasses.fields(section):
            line = next(x for x in source.splitlines() if x.strip().startswith(f"{f.name}:"))
            assert "#" in line or dataclasses.is_dataclass(getattr(plan_module, f.type, None)), (section, f.name)


def test_the_package_docstring_names_every_station_in_the_order_the_run_calls_them():
    """training/__init__.py tells the run's stations in order, one module each; `run_training` (run.py, the line)
    imports them in that order, and no module of the folder goes untold."""
    import ast
    import inspect
    import re
    from pathlib import Path

    import vaswani_hf.training as training
    from vaswani_hf.training import run as run_module

    told = re.findall(r"`(\w+)`", training.__doc__)
    modules = sorted(p.stem for p in Path(training.__file__).parent.glob("*.py") if p.stem != "__init__")
    assert sorted(set(told) & set(modules)) == modules
    imported = [
        n.module
        for n in ast.walk(ast.parse(inspect.getsource(run_module)))
        if isinstance(n, ast.ImportFrom) and n.level == 1
    ]
    stations = [name for name in dict.fromkeys(told) if name in imported]
    order = ["recipe", "plan", "data", "trainer", "checkpoints", "report"]
    assert [name for name in stations if name in order] == [name for name in order if name in stations]


def test_run_training_takes_a_plan(tmp_path):
    from vaswani_hf.training.run import run_training

    with pytest.raises(TypeError, match=r"plan_run\(recipe\)"):
        run_training(tiny_recipe(tmp_path))


@pytest.mark.usefixtures("one_torch_thread")
def test_a_training_run_is_planned_once_and_reads_no_recipe_key_afterwards(tmp_path, monkeypatch):
    """`scripts/train.py` through the CLI's main, in this process: `--check` and the run each call `plan_run` once
    (and the budget and output-folder decisions inside it once); the trainer gets the plan's two token budgets."""
    from conftest import TINY, write_corpus, write_recipe_yaml

    from vaswani_hf.cli import train as train_cli
    from vaswani_hf.training import plan as plan_module
    from vaswani_hf.training import preflight
    from vaswani_hf.training import trainer as trainer_module

    calls, planned, budgets = [], [], []
    real_plan_run = plan_module.plan_run

    def counting_plan_run(*args, **kwargs):
        calls.append("plan_run")
        plan = real_plan_run(*args, **kwargs)
        planned.append(plan)
        return plan

    def counted(name, real):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        return wrapper

    class SpyTrainer(trainer_module.VaswaniTrainer):
        def __init__(self, *args, **kwargs):
            budgets.append((kwargs["max_tokens"], kwargs["eval_max_tokens"]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(train_cli, "plan_run", counting_plan_run)
    monkeypatch.setattr(plan_module, "tokens_per_device", counted("tokens_per_device", plan_module.tokens_per_device))
    monkeypatch.setattr(preflight, "decide_output_dir", counted("decide_output_dir", preflight.decide_output_dir))
    monkeypatch.setattr(trainer_module, "VaswaniTrainer", SpyTrainer)
    corpus = write_corpus(tmp_path / "corpus", n_train=24, n_valid=4)
    recipe = write_recipe_yaml(
        tmp_path / "tiny.yaml",
        {**TINY, "data_dir": str(corpus), "max_steps": 2, "valid_data": "valid", "eval_max_tokens": 512},
    )
    argv = ["--recipe", str(recipe), "--output_dir", str(tmp_path / "run")]
    assert train_cli.main([*argv, "--check"]) == 0
    assert sorted(calls) == ["decide_output_dir", "plan_run", "tokens_per_device"]
    calls.clear(), planned.clear()
    assert train_cli.main(argv) == 0
    assert sorted(calls) == ["decide_output_dir", "plan_run", "tokens_per_device"]
    assert budgets == [(planned[0].max_tokens, 512)] and planned[0].max_tokens == 4096
    assert (tmp_path / "run" / "metrics.json").is_file()


@pytest.mark.parametrize("flags, chosen", [({"amx_bf16": True}, True), ({"avx2": True}, False)])
def test_bf16_auto_is_resolved_once_for_this_processor_and_the_model(tmp_path, monkeypatch, flags, chosen):
    """`bf16: auto` is true or false in the plan (the processor's capabilities given here, not this machine's: the
    tiny model gains from bf16 only with the threshold set to 0), the budget and the Trainer's arguments follow it,
    and the plan's one line says which and why."""
    from vaswani_hf import precision
    from vaswani_hf.training.trainer import build_training_arguments

    monkeypatch.setattr(precision, "cpu_capabilities", lambda: {"cpu_name": "a test CPU", **flags})
    monkeypatch.setitem(precision.BF16_MIN_PARAMETERS["training"], "amx", 0)
    plan = plan_run(tiny_recipe(tmp_path, bf16="auto"), world=World(device="cpu"))
    assert plan.bf16 is chosen and build_training_arguments(plan).bf16 is chosen
    assert f"precision: {'bf16' if chosen else 'fp32'} (bf16: auto: this CPU (a test CPU) has" in plan.describe()
    monkeypatch.setitem(precision.BF16_MIN_PARAMETERS["training"], "amx", 10**12)
    assert plan_run(tiny_recipe(tmp_path, bf16="auto"), world=World(device="cpu")).bf16 is False
    assert plan_run(tiny_recipe(tmp_path, bf16=True), world=World(device="cpu")).bf16 is True
    with pytest.raises(RecipeError, match=r"bf16 must be a boolean or 'auto', got 'sometimes'"):
        tiny_recipe(tmp_path, bf16="sometimes")
