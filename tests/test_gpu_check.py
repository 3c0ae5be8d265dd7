"""The GPU check (benchmarks/gpu/run.py) stays runnable between the rare sessions that have a GPU: its smoke mode runs
every stage on the CPU at tiny sizes and writes the report, and a stage that runs out of time is cut and said so."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

RUN = REPO / "benchmarks" / "gpu" / "run.py"
STAGES = ["environment", "tests", "sync_debug", "training_step", "train_script", "decoding", "ctranslate2"]


def run_check(*args, timeout=600):
    return subprocess.run([sys.executable, str(RUN), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def only_report(folder):
    (json_file,) = folder.glob("gpu_*.json")
    (md_file,) = folder.glob("gpu_*.md")
    return json.loads(json_file.read_text()), md_file.read_text()


@pytest.mark.slow
def test_smoke_mode_runs_every_stage_and_writes_figures_or_a_reason(tmp_path):
    done = run_check("--out", str(tmp_path / "out"), "--smoke", "--work", str(tmp_path / "work"))
    assert done.returncode == 0, done.stdout + done.stderr
    report, md = only_report(tmp_path / "out")
    assert list(report["stages"]) == STAGES
    for name, stage in report["stages"].items():
        assert stage["status"].startswith(("ok", "skipped")), (name, stage)
        assert f"## {name}" in md
    stages = report["stages"]
    assert stages["environment"]["bf16_matmul_tflops"] > 0
    assert stages["tests"]["counts"]["tests"] >= 1 and not stages["tests"]["failed"]
    assert "CUDA" in stages["sync_debug"]["skipped"]  # nothing to watch on a CPU; the step itself ran
    runs = stages["training_step"]["runs"]
    assert [(r["preset"], r["mode"]) for r in runs] == [("base", "eager"), ("base", "compiled")]
    for r in runs:
        assert r["ours"]["target_tokens_per_s"] > 0 and r["marian"]["target_tokens_per_s"] > 0
        assert r["ours"]["mfu"] > 0 and r["ratio_tokens_per_s"] > 0
    assert set(runs[1]["compile_s"]) == {"ours", "marian"}
    train = stages["train_script"]
    for precision in ("bf16", "fp32"):
        assert train[precision]["updates"] == 3 and train[precision]["launch_to_first_update_s"] > 0
        assert [step for step, _loss in train[precision]["loss_curve"]] == [1, 2, 3]
    assert train["bf16_vs_fp32"]["updates_compared"] == 3
    assert train["bf16_vs_fp32"]["max_relative_difference"] < 0.05  # bf16 autocast barely moves a tiny model's loss
    for setting in ("greedy", "beam4_hf"):  # identical weights, forced lengths: the same tokens from both models
        result = stages["decoding"]["batch_4"]["results"][setting]
        assert result["identical_outputs"] == "8/8" and result["ours"]["sentences_per_s"] > 0
    ct2 = stages["ctranslate2"]
    assert "result" in ct2 or ct2["skipped"].startswith("ctranslate2 is not installed")
    assert "| base | eager | 4 x 12 | ours |" in md and "bf16 loss against fp32" in md


def test_a_stage_that_runs_out_of_time_is_cut_and_the_report_says_so(tmp_path):
    """Isolated stages, as on the GPU. The training-step stage (a model built, stepped and compiled: well over 6 s of
    work) is killed at its 6 s budget; scripts/train.py, which the train stage runs with a timeout of what is left,
    is cut by the stage itself. The report is written either way, each stage marked cut."""
    done = run_check(
        "--out",
        str(tmp_path / "out"),
        "--smoke",
        "--isolated",
        "--stages",
        "training_step,train_script",
        "--budget_scale",
        "0.1",
        "--total_budget",
        "30",
        "--work",
        str(tmp_path / "work"),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report, md = only_report(tmp_path / "out")
    assert list(report["stages"]) == ["training_step", "train_script"]
    assert report["stages"]["training_step"]["status"].startswith("cut at its budget of 6 s")
    assert "*cut at its budget of 6 s" in md
    train = report["stages"]["train_script"]
    assert train["status"].startswith("cut: the ")
    assert "scripts/train.py ran out of the stage's budget" in train["status"]


def test_unknown_stage_is_refused_before_any_work(tmp_path):
    done = run_check("--out", str(tmp_path / "out"), "--smoke", "--stages", "environment,warp_drive", timeout=60)
    assert done.returncode != 0 and "--stages: unknown warp_drive" in done.stderr
    assert not (tmp_path / "out").exists()
