"""The benchmarks' option checks: bad values fail at once with a clear message, before hours of training."""

import importlib.util

import pytest
from conftest import MULTI30K, REPO


def load_benchmark(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tune_beams", "4,x"], "--tune_beams wants integers"),
        (["--tune_alphas", "0.6,high"], "--tune_alphas numbers"),
        (["--tune_average", "1,five"], "--tune_average wants comma-separated integers"),
        (["--tune_average", "0,5"], "must be >= 1"),
    ],
)
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
        bench.main(
            [
                "--tune_average",
                "5,8",
                "--budget_minutes",
                "0.1",
                "--max_steps",
                "1",  # if the check broke
                "--output_dir",
                str(tmp_path),
                "--results_dir",
                str(tmp_path),
            ]
        )
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
    from vaswani_hf.training.recipe import load_recipe

    runs = load_benchmark("multi30k_runs")
    current = load_recipe("multi30k-en-de")
    trained = dict(current, d_ff=1024, output_dir="/elsewhere", max_train_minutes=120.0)  # path, budget: not listed
    assert runs.differences(trained, current) == "d_ff 1024"
    assert runs.differences(current, current) == "-"
    assert runs.run_name("multi30k_quality") == "run 1"
    assert runs.run_name("multi30k_quality_run4_paper_decoding") == "run 4 (paper decoding)"
    assert runs.run_name("multi30k_quality_smoke") == "smoke"
    result = {
        "name": "run 9",
        "file": "multi30k_quality_run9.json",
        "recipe": trained,
        "params": 7.6e6,
        "budget_minutes": 120.0,
        "global_step": 6000,
        "epochs": 46.5,
        "train_tgt_tokens_per_second": 3000.0,
        "padding_share_tgt": 0.124,
        "averaged_checkpoints": ["a", "b", "c"],
        "num_beams": 6,
        "length_penalty_alpha": 1.2,
        "decoding_tuned_on_valid": [{"valid_bleu": 40.0}, {"valid_bleu": 41.5}],
        "test_bleu_tok_none": 40.5,
        "test_bleu_bootstrap_ci95": 1.6,
    }
    row = runs.table([result], current).splitlines()[-1]
    assert row == (
        "| [run 9](multi30k_quality_run9.json) | d_ff 1024 | 7.6M | 120 | 6,000 | 46 | 3,000 | 12.4% | last 3 "
        "| 6 / 1.2 | 41.50 | **40.50** ± 1.60 |"
    )


# ---------------------------------------------------------------------------------------------------------------------
# bench_peers: ours against eole and the Seq2SeqTrainer + MarianMTModel path
# ---------------------------------------------------------------------------------------------------------------------


def test_bench_peers_refuses_an_unknown_system_before_any_work(tmp_path):
    from vaswani_hf.io import UsageError

    bench = load_benchmark("bench_peers")
    with pytest.raises(UsageError, match="--systems: unknown"):
        bench.main(["--systems", "ours,fairseq", "--work_dir", str(tmp_path / "work")])
    with pytest.raises(UsageError, match="--eole_set wants KEY=VALUE"):
        bench.main(["--smoke", "--eole_set", "num_workers", "--work_dir", str(tmp_path / "work")])
    assert not (tmp_path / "work").exists()


def test_bench_peers_time_to_bleu_interpolates_between_checkpoints():
    load_benchmark("bench_peers")  # puts benchmarks/peers on sys.path
    from peer_report import time_to_bleu

    curve = [{"minutes": 5.0, "greedy": 10.0}, {"minutes": 10.0, "greedy": 20.0}, {"minutes": 15.0, "greedy": 40.0}]
    assert time_to_bleu(curve, 30.0) == 12.5
    assert time_to_bleu(curve, 10.0) == 5.0
    assert time_to_bleu(curve, 41.0) is None


def test_bench_peers_eole_config_has_the_shared_recipe_and_takes_overrides():
    load_benchmark("bench_peers")
    from peer_data import SharedData
    from peer_systems import eole_config, spec_from_recipe

    spec = spec_from_recipe(1024)
    shared = SharedData(
        folder="d",
        train="d/train",
        valid="d/valid",
        bpe_dir="d/bpe",
        train_pieces="d/train.pieces",
        valid_pieces="d/valid.pieces",
        piece_vocab="d/pieces.vocab",
        vocab_size=8000,
        train_pairs=29000,
        valid_pairs=1014,
        mean_target_tokens=15.5,
    )
    config = eole_config(spec, shared, "m", {"training.num_workers": 1, "model.layer_norm": "rms"})
    training, model = config["training"], config["model"]
    assert (model["hidden_size"], model["transformer_ff"], model["heads"]) == (256, 512, 4)
    assert model["encoder"]["layers"] == model["decoder"]["layers"] == 3
    assert (training["batch_type"], training["batch_size"], training["decay_method"]) == ("tokens", 1024, "noam")
    assert training["learning_rate"] == 1.0 and training["warmup_steps"] == spec["warmup_steps"]  # Section 5.3
    assert training["bucket_size"] == 29000 and training["num_workers"] == 1 and model["layer_norm"] == "rms"
    assert eole_config(spec, shared, "m", {})["training"]["use_amp"] is False  # optimi's Adam: eole at its best


@pytest.mark.slow
def test_bench_peers_smoke_trains_ours_scores_it_and_skips_absent_peers(tmp_path, capsys, monkeypatch):
    """The peer benchmark's smoke mode end to end (1-minute budget on the bundled sample corpus): peers whose virtual
    environment is absent are skipped with a message and not created; ours trains through scripts/train.py's code,
    its checkpoints are scored, and the report is written. The benchmark's count of real target tokens is the one our
    own training reports (both see the same batches)."""
    import json

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))  # our training run's Arrow caches
    bench = load_benchmark("bench_peers")
    results = tmp_path / "results"
    assert (
        bench.main(
            [
                "--smoke",
                "--venvs",
                str(tmp_path / "venvs"),
                "--work_dir",
                str(tmp_path / "work"),
                "--results_dir",
                str(results),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "skipping eole" in out and "skipping marian" in out
    assert not (tmp_path / "venvs").exists()
    result = json.loads((results / "peers_smoke.json").read_text())
    (run,) = result["runs"]
    assert run["system"] == "ours" and run["updates"] > 0 and run["real_tgt_tokens_per_s"] > 0
    assert run["own_count"]["global_step"] == run["updates"]
    assert run["own_count"]["train_tgt_tokens"] == run["tgt_tokens"]
    assert 0 <= run["padding_share_tgt"] < 1 and run["peak_rss_gib"] > 0
    assert len(run["curve"]) >= 2 and all(p["greedy"] is not None for p in run["curve"])
    assert any(p["beam4"] is not None for p in run["curve"])
    assert set(run["phases_s"]) >= {"data loading", "forward + backward", "optimizer step", "checkpoint writes"}
    assert "| ours (scripts/train.py --recipe multi30k-en-de) | 1 | " in (results / "peers_smoke.md").read_text()
    assert (results / "peers_smoke_time_to_bleu.png").stat().st_size > 0


def test_bench_peers_marian_target_grouping_batches_sentences_of_like_target_length():
    """`--group_by target` (the system marian-target): group_by_length's mega-batches sorted by the labels' lengths,
    handed to the sampler by peer_marian.py because transformers drops a `length_column_name` column first."""
    import random
    from types import SimpleNamespace

    import datasets
    import torch
    from transformers import Seq2SeqTrainer

    load_benchmark("bench_peers")
    from peer_marian import target_grouped

    rng = random.Random(0)
    sources, targets = rng.sample(range(1, 200), 64), rng.sample(range(1, 200), 64)  # distinct lengths
    dataset = datasets.Dataset.from_dict(
        {"input_ids": [[5] * n for n in sources], "labels": [[5] * n for n in targets]}
    )
    fake = SimpleNamespace(
        args=SimpleNamespace(train_batch_size=4, gradient_accumulation_steps=1), train_dataset=dataset
    )
    sampler = target_grouped(Seq2SeqTrainer)._get_train_sampler(fake, dataset)
    assert list(sampler.lengths) == targets and sampler.batch_size == 4
    torch.manual_seed(0)  # the sampler shuffles with torch's global generator
    order = list(sampler)
    assert sorted(order) == list(range(64))
    assert order[0] == targets.index(max(targets))  # the longest target first (memory shows at once)
    mega = [order[i + 1 : i + 16] for i in range(0, 64, 16)]  # 64 // (4 x 4) = 4 mega-batches of 16, each sorted
    # (the first of each is left out: the longest of all was swapped to the front of the first)
    assert all([targets[i] for i in m] == sorted((targets[i] for i in m), reverse=True) for m in mega)
    assert not all([sources[i] for i in m] == sorted((sources[i] for i in m), reverse=True) for m in mega)


def _peer_run(system, round_index, seconds_per_update):
    load_benchmark("bench_peers")
    from peer_report import summarize

    loop = 100.0
    events = [
        {"event": "train_begin", "wall_time": 1.0},
        {
            "event": "train_end",
            "train_s": loop,
            "step": int(loop / seconds_per_update),
            "tgt_tokens": 90_000,
            "tgt_slots": 100_000 * seconds_per_update,
            "batches": 100,
            "wall_time": 101.0,
            "phases": {"forward + backward": 90.0, "data loading": 5.0},
        },
    ]
    watch = {
        "peak_rss_gib": 1.0,
        "peak_processes": 1,
        "launched_at": 0.0,
        "wall_s": 103.0,
        "load_before": [1, 1, 1],
        "load_during": {"mean": 2.0, "max": 2.2},
        "load_after": [2, 2, 2],
    }
    run = summarize(system, watch, events, [], 1.5, 30.0, {})
    run["real_tgt_tokens_per_s"] = round(run["real_tgt_tokens_per_s"] / seconds_per_update, 1)
    run["padded_tgt_slots_per_s"] = None
    run.update(round=round_index, minutes=1.5, checkpoints=1)
    return run


def test_bench_peers_speed_rounds_report_ratio_spread_per_round_and_no_bleu_columns():
    load_benchmark("bench_peers")
    from peer_report import aggregate, markdown

    runs = [
        _peer_run("ours", 1, 1.0),
        _peer_run("eole", 1, 1.25),
        _peer_run("ours", 2, 1.0),
        _peer_run("eole", 2, 1.1),
        _peer_run("ours", 3, 1.0),
        _peer_run("eole", 3, 1.2),
    ]
    systems = aggregate(runs, 30.0)
    assert systems["ours"]["round_ratios_vs_eole"]["real"] == [1.25, 1.1, 1.2]
    assert systems["ours"]["speed_vs_eole"] == 1.2  # the medians' ratio
    result = {
        "title_note": "",
        "command": "--score none --repeats 3",
        "date": "2026-11-26",
        "minutes": 1.5,
        "checkpoints": 1,
        "threads": 2,
        "target_bleu": 30.0,
        "score": "none",
        "eole_overrides": {},
        "spec": {
            "d_model": 256,
            "d_ff": 512,
            "num_heads": 4,
            "num_encoder_layers": 3,
            "num_decoder_layers": 3,
            "dropout": 0.3,
            "label_smoothing": 0.1,
            "warmup_steps": 4000,
            "max_tokens": 1024,
        },
        "data": {"train_pairs": 29000, "valid_pairs": 1014, "vocab_size": 8000, "source": "m"},
        "machine": {
            "cpus": 2,
            "cpu_model": "X",
            "vector_isa": "AVX2",
            "amx": False,
            "platform": "p",
            "load_at_start": [1, 1, 1],
        },
        "versions": {},
        "systems": systems,
        "runs": runs,
    }
    page = markdown(result)
    assert "1.20x eole (rounds 1.10-1.25)" in page
    table = page.split("| system |")[1].split("\n\n")[0]
    assert "BLEU" not in table and "one checkpoint (s)" not in page
    assert "3 round(s), 2 threads, X, AVX2)" in page and "validation BLEU" not in page.split("README row:")[1]


@pytest.mark.slow
def test_bench_step_profile_caps_the_kernels_and_profiles_both_steps(tmp_path):
    """The operator profile of ours and Marian: both configurations run, the AVX2 cap reaches torch's dispatch, and
    each step's operators include its matrix products."""
    import json
    from pathlib import Path

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file() or " avx2" not in cpuinfo.read_text():
        pytest.skip("an x86 processor with AVX2 is needed to cap the kernels at AVX2")
    bench = load_benchmark("bench_step_profile")
    assert (
        bench.main(
            [
                "--steps",
                "1",
                "--warmup",
                "1",
                "--profiled",
                "1",
                "--batch",
                "4",
                "--length",
                "6",
                "--vocab",
                "64",
                "--results_dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "step_profile.json").read_text())
    assert result["configurations"]["avx2"]["capability"] == "AVX2"
    for config in result["configurations"].values():
        for variant in ("ours", "marian"):
            found = config["variants"][variant]
            assert found["tokens_per_s"] > 0 and 0 < found["target_tokens"] < 24
            assert {"aten::mm", "aten::addmm", "aten::bmm"} & set(found["ops_ms"])
    assert "| all operators |" in (tmp_path / "step_profile.md").read_text()


def test_bench_peers_rounds_rotate_and_the_report_names_the_order_and_the_target_grouped_path():
    bench = load_benchmark("bench_peers")
    from peer_report import aggregate, markdown

    systems = ["ours", "eole", "marian", "marian-target"]
    firsts = [bench.rotated(systems, r)[0] for r in (1, 2, 3, 4, 5)]
    assert firsts == ["ours", "eole", "marian", "marian-target", "ours"]
    runs = [
        _peer_run("marian-target", 1, 1.5),
        _peer_run("ours", 1, 1.0),
        _peer_run("ours", 2, 1.0),
        _peer_run("marian-target", 2, 1.25),
    ]
    runs[0]["started"], runs[1]["started"] = "2026-11-26T10:00:00", "2026-11-26T10:09:00"
    runs[2]["started"], runs[3]["started"] = "2026-11-26T10:18:00", "2026-11-26T10:27:00"
    result = {
        "title_note": "",
        "command": "",
        "date": "2026-11-26",
        "minutes": 1.5,
        "checkpoints": 1,
        "threads": 2,
        "target_bleu": 30.0,
        "score": "none",
        "eole_overrides": {},
        "spec": {
            "d_model": 256,
            "d_ff": 512,
            "num_heads": 4,
            "num_encoder_layers": 3,
            "num_decoder_layers": 3,
            "dropout": 0.3,
            "label_smoothing": 0.1,
            "warmup_steps": 4000,
            "max_tokens": 1024,
        },
        "data": {"train_pairs": 29000, "valid_pairs": 1014, "vocab_size": 8000, "source": "m"},
        "machine": {"cpus": 2, "cpu_model": "X", "platform": "p", "load_at_start": [1, 1, 1]},
        "versions": {},
        "systems": aggregate(runs, 30.0),
        "runs": runs,
    }
    page = markdown(result)
    assert "in the order marian-target, ours; ours, marian-target." in page
    assert "1.36x marian-target (rounds 1.25-1.50)" in page
    assert "grouped by target length" in page.split("**marian-target**")[1]
    assert "the Marian path grouped by target's" in page.split("README row:")[1]


def test_bench_translate_stream_refuses_an_unknown_system_before_any_work(tmp_path, capsys):
    bench = load_benchmark("bench_translate_stream")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--systems", "streaming,fairseq", "--work", str(tmp_path / "w"), "--results_dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "unknown fairseq" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_bench_translate_stream_smoke_measures_the_tool_and_the_two_process_layout(tmp_path):
    """Tiny sizes: each launch exits 0 with a peak RSS, two processes give the bytes of one, the report has a row
    per size and per layout."""
    bench = load_benchmark("bench_translate_stream")
    assert (
        bench.main(
            [
                "--sizes",
                "30",
                "--systems",
                "streaming",
                "--process_lines",
                "25",
                "--process_window",
                "10",
                "--refusal_lines",
                "0",
                "--work",
                str(tmp_path / "w"),
                "--results_dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    import json

    results = json.loads((tmp_path / "translate_stream.json").read_text())
    run = results["sizes"]["30"]["streaming"]
    assert run["exit"] == 0 and run["peak_rss_mib"] > 0
    assert results["processes"]["identical"] is True
    assert results["processes"]["2 processes x 1 thread"]["exit"] == 0
    report = (tmp_path / "translate_stream.md").read_text()
    assert "| 30 |" in report and "| 2 processes x 1 thread |" in report
