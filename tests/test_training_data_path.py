"""The data path of a run (vaswani_hf.training.plan's DataPath): pinned memory, non-blocking copies, workers and prefetch
chosen for CUDA runs, CPU runs unchanged, and the recipe's keys override; checked without a GPU (the choice reads
the device's name, and the training arguments are built for a plan whose world says cuda)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import tiny_recipe

from vaswani_hf.training.plan import DataPath, World, choose_data_path, plan_run
from vaswani_hf.training.recipe import load_recipe


def test_cpu_runs_keep_the_plain_data_path():
    """The CPU: nothing pinned, no prefetch, no persistent workers, blocking copies; the recipe's workers kept, and
    auto (-1) means none."""
    assert choose_data_path("cpu") == DataPath()
    assert choose_data_path("cpu", -1, cpu_count=64) == DataPath()
    assert choose_data_path("cpu", 3) == DataPath(num_workers=3)
    assert choose_data_path("mps", -1, cpu_count=8) == DataPath()


def test_cuda_runs_pin_memory_copy_without_blocking_and_prefetch_with_workers():
    assert choose_data_path("cuda:0") == DataPath(pin_memory=True, non_blocking=True)  # the bundled recipes' 0
    auto = choose_data_path("cuda:1", -1, processes=8, cpu_count=32)
    assert auto == DataPath(
        num_workers=2, pin_memory=True, prefetch_factor=4, persistent_workers=True, non_blocking=True
    )
    assert choose_data_path("cuda", -1, processes=8, cpu_count=16).num_workers == 1  # 2 cores a GPU: one spare
    assert choose_data_path("cuda", -1, processes=8, cpu_count=8).num_workers == 0  # no spare core: none
    # the recipe overrides every choice; without pinned memory a copy cannot be non-blocking
    manual = choose_data_path("cuda", 4, pin_memory=False, prefetch_factor=2)
    assert manual == DataPath(
        num_workers=4, pin_memory=False, prefetch_factor=2, persistent_workers=True, non_blocking=False
    )
    with pytest.raises(ValueError, match="num_workers"):  # refused where it enters: the recipe (its declaration)
        load_recipe(overrides={"dataloader_num_workers": -2})


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_the_training_arguments_carry_the_choice(tmp_path, device):
    """The plan chooses the data path for its device once, and `build_training_arguments` of a plan on `device`
    carries it: the DataLoader settings and Accelerate's non-blocking placement are the chooser's (on CPU exactly as
    before: workers 0, no pinning)."""
    from vaswani_hf.training.trainer import build_training_arguments

    plan = plan_run(tiny_recipe(tmp_path, max_steps=1, dataloader_num_workers=-1), world=World(device="cpu"))
    assert plan.data_path == choose_data_path("cpu", -1)
    plan = dataclasses.replace(plan, world=World(device=device), data_path=choose_data_path(device, -1))
    args = build_training_arguments(plan)
    want = choose_data_path(device, -1)
    assert (
        args.dataloader_num_workers,
        args.dataloader_pin_memory,
        args.dataloader_prefetch_factor,
        args.dataloader_persistent_workers,
    ) == (want.num_workers, want.pin_memory, want.prefetch_factor, want.persistent_workers)
    assert args.accelerator_config.non_blocking is (device != "cpu")
    if device == "cpu":
        assert want == DataPath()
