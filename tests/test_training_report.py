"""What a training run leaves for people to read (vaswani_hf.training.report): the card's inputs (only real test
scores, named by how they were computed, and the facts of the run as the plan has them), the plots, the hypotheses."""

from __future__ import annotations

import math

import pytest
from conftest import tiny_recipe

from vaswani_hf.training.plan import World, plan_run
from vaswani_hf.training.recipe import load_recipe
from vaswani_hf.training.report import card_inputs, distributed_strategy, plot_history, write_hypotheses

METRICS = {
    "test/bleu": 31.5,
    "test/chrf": 55.0,
    "global_step": 800,
    "tokens_per_update": 1024,
    "averaged_checkpoints": ["checkpoint-600", "checkpoint-800"],
    "train_seconds": 120.0,
    "world_size": 2,
    "distributed_type": "MULTI_CPU",
}


def test_the_card_states_real_test_scores_and_where_they_come_from(tmp_path):
    plan = plan_run(tiny_recipe(tmp_path, test_data="train", bleu_tokenize="none"), world=World())
    scores, info = card_inputs(plan, METRICS, {"bleu": "nrefs:1|tok:none", "chrf": "chrF2"})
    assert scores == {
        "bleu_tok_none": {"score": 31.5, "signature": "nrefs:1|tok:none"},
        "chrf": {"score": 55.0, "signature": "chrF2"},
    }
    assert info["eval_dataset"] == plan.sources["test"].describe()
    assert (info["source_lang"], info["target_lang"], info["steps"], info["tokens_per_batch"]) == (
        "en",
        "de",
        800,
        1024,
    )
    assert info["checkpoint_averaging"] == "last 2 checkpoints" and info["label_smoothing"] == 0.1
    assert info["distributed"] == "DDP over gloo (CPU), 2 process(es)"
    assert info["training_time"] == "2.0 min on 2 process(es)"


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, "31.5"])
def test_no_score_is_invented(tmp_path, bad):
    plan = plan_run(load_recipe("default", {"output_dir": str(tmp_path / "run")}), world=World())
    scores, info = card_inputs(plan, {"test/bleu": bad})
    assert scores == {} and "eval_dataset" not in info  # no score: no evaluation data claimed
    sacre, _ = card_inputs(plan, {"test/bleu": 12.0})
    assert list(sacre) == ["sacrebleu"]  # detokenized BLEU with sacreBLEU's 13a by default


def test_distributed_strategy_as_the_card_names_it():
    assert distributed_strategy({}) is None
    assert distributed_strategy({"distributed_type": "NO", "world_size": 1}) == "one process, 1 process(es)"
    assert distributed_strategy({"distributed_type": "FSDP", "world_size": 8}) == "FSDP, 8 process(es)"


def test_plots_are_written_for_what_the_history_holds(tmp_path):
    history = [
        {"step": 1, "loss": 5.0, "learning_rate": 1e-4},
        {"step": 2, "loss": 4.0, "learning_rate": 2e-4},
        {"step": 2, "eval_loss": 4.5, "eval_nll": 4.2, "eval_bleu": 3.0, "time_s": 60.0},
    ]
    written = plot_history(history, tmp_path / "plots")
    assert set(written) == {"loss", "learning_rate", "bleu"}
    for path in written.values():
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert plot_history([{"step": 1, "loss": 1.0}], tmp_path / "few") == {"loss": str(tmp_path / "few" / "loss.png")}


def test_hypotheses_are_one_stripped_line_each(tmp_path, tok):
    ids = tok([" ein Haus ", "zwei"], add_special_tokens=True)["input_ids"]
    padded = [row + [tok.pad_token_id] * (8 - len(row)) for row in ids]
    write_hypotheses(tmp_path / "valid_hypotheses.txt", tok, padded)
    assert (tmp_path / "valid_hypotheses.txt").read_text().splitlines() == ["ein Haus", "zwei"]
