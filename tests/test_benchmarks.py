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


def test_multi30k_quality_score_only_names_a_missing_export(capsys, tmp_path):
    """--score_only on a run folder whose recorded export is gone (moved or deleted) fails naming both places looked."""
    if not MULTI30K.is_dir():
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    import json

    (tmp_path / "metrics.json").write_text(json.dumps({"export_dir": "/moved/away/r/hub", "train_seconds": 1}))
    bench = load_benchmark("multi30k_quality")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--score_only", "--output_dir", str(tmp_path), "--results_dir", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "/moved/away/r/hub" in err and str(tmp_path / "hub") in err


def test_multi30k_runs_table_lists_what_differs_from_the_recipe():
    from vaswani_hf.training import load_recipe

    runs = load_benchmark("multi30k_runs")
    current = load_recipe("multi30k-en-de", check_paths=False)
    trained = dict(current, d_ff=1024, output_dir="/elsewhere", max_train_minutes=120.0)  # path, budget: not listed
    assert runs.differences(trained, current) == "d_ff 1024"
    assert runs.differences(current, current) == "-"
    assert runs.run_name("multi30k_quality") == "run 1"
    assert runs.run_name("multi30k_quality_run4_paper_decoding") == "run 4 (paper decoding)"
    assert runs.run_name("multi30k_quality_smoke") == "smoke"
    result = {"name": "run 9", "file": "multi30k_quality_run9.json", "recipe": trained, "params": 7.6e6,
              "budget_minutes": 120.0, "global_step": 6000, "epochs": 46.5, "train_tgt_tokens_per_second": 3000.0,
              "padding_share_tgt": 0.124, "averaged_checkpoints": ["a", "b", "c"], "num_beams": 6,
              "length_penalty_alpha": 1.2, "decoding_tuned_on_valid": [{"valid_bleu": 40.0}, {"valid_bleu": 41.5}],
              "test_bleu_tok_none": 40.5, "test_bleu_bootstrap_ci95": 1.6}
    row = runs.table([result], current).splitlines()[-1]
    assert row == ("| [run 9](multi30k_quality_run9.json) | d_ff 1024 | 7.6M | 120 | 6,000 | 46 | 3,000 | 12.4% | last 3 "
                   "| 6 / 1.2 | 41.50 | **40.50** ± 1.60 |")
