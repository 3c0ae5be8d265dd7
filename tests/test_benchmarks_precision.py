"""The precision benchmarks (issue 53) run every stage on tiny sizes and report what the lead reads: the processor's
units, the ratios against fp32 and CTranslate2, agreement, the validation curves. No assertion on speed (benchmarks
measure it), nor any equality of bf16 or int8 with fp32."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MULTI30K
from test_benchmarks import load_benchmark
from translation_model import LINES


def test_bench_precision_smoke_measures_sizes_and_engines_with_the_cpu_recorded(tmp_path):
    if not MULTI30K.is_dir():
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    bench = load_benchmark("bench_precision")
    argv = ["--smoke", "--stages", "sizes,speed", "--work_dir", str(tmp_path / "work"), "--out", str(tmp_path / "p")]
    report = bench.main(argv)
    assert report["cpu"]["bf16_units"] in ("amx", "avx512_bf16", "none") and "avx2" in report["cpu"]["flags"]
    (size,) = report["stages"]["sizes"].values()
    assert set(size["speed_over_fp32"]) == {"fp32", "bf16", "int8"} and size["speed_over_fp32"]["fp32"] == 1.0
    (speed,) = report["stages"]["speed"].values()
    assert {"ours fp32", "ours bf16", "ours int8"} <= set(speed["engines"])
    assert speed["bf16_over_fp32"] > 0 and speed["best_ours"].startswith("ours")
    assert (speed["best_ct2"] is None) == (not any(name.startswith("ct2") for name in speed["engines"]))
    text = (tmp_path / "p.md").read_text(encoding="utf-8")
    assert report["cpu"]["summary"] in text and "bf16 / fp32" in text


def test_bench_precision_agreement_counts_lines_identical_to_fp32_and_scores_each(saved_folder, tmp_path):
    bench = load_benchmark("bench_precision")
    texts = [line.strip() for line in LINES if line.strip()]
    source, references = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    references.write_text("\n".join(texts) + "\n", encoding="utf-8")
    argv = ["--smoke", "--stages", "agreement", "--model_dir", str(saved_folder), "--out", str(tmp_path / "p")]
    report = bench.main([*argv, "--source_file", str(source), "--reference_file", str(references)])
    for decoding in ("beam 1", "beam 4"):
        rows = report["stages"]["agreement"][decoding]
        assert rows["fp32"]["identical_to_fp32"] == 1.0 and {"bf16", "int8"} <= set(rows)
        (auto,) = [name for name in rows if name.startswith("precision: ")]  # the choice's line names the row
        assert 0 <= rows[auto]["identical_to_fp32"] <= 1 and rows["bf16"]["bleu"] >= 0


def test_bf16_curve_pairs_the_validation_points_and_reads_the_speeds():
    bench = load_benchmark("bench_bf16_curve")
    histories = {
        "fp32": [
            {"step": 1, "loss": 9.0},
            {"step": 4, "eval_loss": 6.0, "eval_bleu": 1.0},
            {"step": 8, "eval_loss": 5.0},
        ],
        "bf16": [
            {"step": 4, "eval_loss": 6.06, "eval_bleu": 1.2},
            {"step": 8, "eval_loss": 4.9},
            {"step": 9, "eval_loss": 1},
        ],
    }
    result = bench.compare(histories, {"fp32": 100.0, "bf16": 150.0})
    assert [row["step"] for row in result["points"]] == [4, 8]  # steps both runs validated at
    assert result["max_relative_difference"] == 0.02 and result["bf16_over_fp32_speed"] == 1.5
    args = bench.parse_args([])
    commands = {p: bench.train_command(args, p) for p in ("fp32", "bf16")}
    assert commands["bf16"][commands["bf16"].index("--bf16") + 1] == "true"
    assert commands["fp32"][commands["fp32"].index("--bf16") + 1] == "false"
    assert commands["fp32"][commands["fp32"].index("--d_model") + 1] == "512"  # a size where bf16 gains


def test_training_step_compares_each_variant_in_both_precisions_and_picks_each_ones_best():
    bench = load_benchmark("bench_training_step")
    args = bench.parse_args(["--precisions", "fp32,bf16", "--variants", "ours,marian"])
    assert bench.label("ours", "bf16", args.precisions) == "ours@bf16"
    assert bench.label("ours", "fp32", ["fp32"]) == "ours"  # the fp32-only report keeps its names

    def run(speed):
        return {"tokens_per_second": speed, "peak_rss_mib": 100.0}

    runs = {
        "ours@fp32": [run(100), run(110)],
        "marian@fp32": [run(100), run(100)],
        "ours@bf16": [run(150), run(165)],
        "marian@bf16": [run(90), run(95)],
    }
    summary = bench.summarise(args, runs, 0.0)
    assert summary["bf16_over_fp32"]["ours"] == pytest.approx(1.5)
    assert summary["best_precision"] == {"ours": "bf16", "marian": "fp32"}
    assert summary["ours_best_over_marian_best"] == pytest.approx(1.575)
    assert summary["setup"]["cpu"]["bf16_units"] in ("amx", "avx512_bf16", "none")


def test_peers_train_every_system_in_the_asked_precision_and_size():
    load_benchmark("bench_peers")
    from peer_data import SharedData
    from peer_systems import eole_config, ours_command, spec_from_recipe

    spec = spec_from_recipe(1024, "base", bf16=True)
    shared = SharedData(
        "d", "d/train", "d/valid", "d/bpe", "d/train.p", "d/valid.p", "d/p.vocab", 8000, 29000, 1014, 15.5
    )
    training, model = eole_config(spec, shared, "m", {})["training"], eole_config(spec, shared, "m", {})["model"]
    assert training["compute_dtype"] == "bf16" and training["use_amp"] is True and model["hidden_size"] == 512
    command = ours_command(shared, Path("o"), Path("o/events.jsonl"), 1.0, 1.0, 2, spec)
    assert command[command.index("--bf16") + 1] == "true" and command[command.index("--d_model") + 1] == "512"
    assert eole_config(spec_from_recipe(1024), shared, "m", {})["training"]["compute_dtype"] == "fp32"
