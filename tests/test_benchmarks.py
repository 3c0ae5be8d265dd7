"""The benchmarks' option checks: bad values fail at once with a clear message, before hours of training."""

import importlib.util

import pytest
from conftest import MULTI30K, REPO


def load_benchmark(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, message", [
    (["--tune_beams", "4,x"], "--tune_beams wants integers"),
    (["--tune_alphas", "0.6,high"], "--tune_alphas numbers"),
    (["--tune_average", "1,five"], "--tune_average wants comma-separated integers"),
    (["--tune_average", "0,5"], "must be >= 1"),
])
def test_multi30k_quality_rejects_bad_tuning_values(argv, message, capsys):
    bench = load_benchmark("multi30k_quality")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_multi30k_quality_needs_enough_kept_checkpoints_for_the_averaging_window(capsys, tmp_path):
    if not MULTI30K.is_dir():
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    bench = load_benchmark("multi30k_quality")
    with pytest.raises(SystemExit) as exit_info:  # the recipe keeps 5 checkpoints; 8 cannot be averaged
        bench.main(["--tune_average", "5,8", "--budget_minutes", "0.1", "--max_steps", "1",  # if the check broke
                    "--output_dir", str(tmp_path), "--results_dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "needs --keep_last >= 8" in capsys.readouterr().err


def test_decoding_benchmark_counts_rows_of_the_output_projection():
    """bench_decoding's row-step counter: rows x positions of every call (the lean loops pass (rows, D), transformers'
    loops (rows, 1, D)), only while hooked to that module."""
    import torch

    bench = load_benchmark("bench_decoding")
    head, other = torch.nn.Linear(8, 5), torch.nn.Linear(8, 5)
    counter = bench.RowStepCounter(head)
    head(torch.zeros(3, 8))
    head(torch.zeros(4, 1, 8))
    head(torch.zeros(2, 6, 8))
    other(torch.zeros(7, 8))
    assert counter.count == 3 + 4 + 12
