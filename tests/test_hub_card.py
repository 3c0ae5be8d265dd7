"""The model card (vaswani_hf.hub.card): valid Hub metadata carrying the real metrics, nothing invented, placeholder
scores refused."""

import dataclasses
import json
import math

import pytest
from hub_helpers import METRICS, REPO_ID, SIGNATURE, TRAINING_INFO
from huggingface_hub import ModelCard, ModelCardData

from vaswani_hf import hub
from vaswani_hf.hub import card as card_module


def test_card_metadata_is_valid_and_carries_the_real_metrics(tiny, hub_server, monkeypatch):
    text = (tiny["folder"] / "README.md").read_text(encoding="utf-8")
    card = ModelCard(text)  # parses the YAML header into ModelCardData (raises on invalid metadata)
    # huggingface_hub's validation posts the card to {ENDPOINT}/api/validate-yaml: here the test double, which only
    # parses it again; the Hub's own, stricter validation runs on push (only the real Hub can confirm it).
    monkeypatch.setattr("huggingface_hub.repocard.constants.ENDPOINT", hub_server.endpoint)
    card.validate()
    assert ("POST", "/api/validate-yaml") in hub_server.requests
    data = card.data
    assert isinstance(data, ModelCardData)
    assert data.language == ["en", "de"] and data.license == "apache-2.0"
    assert data.library_name == "transformers" and data.pipeline_tag == "translation"
    assert data.datasets == ["bentrevett/multi30k"] and set(data.metrics) == {"sacrebleu", "chrf"}
    assert "custom_code" in data.tags
    assert [w["text"] for w in data.widget] and all(isinstance(w["text"], str) for w in data.widget)
    # model-index round trip: the given numbers, rounded to 2 decimals, with the test set and signature
    assert data.model_name == "vaswani-base"
    results = {r.metric_type: r for r in data.eval_results}
    assert results["sacrebleu"].metric_value == 12.35 and results["chrf"].metric_value == 40.1
    assert results["sacrebleu"].metric_config == SIGNATURE
    assert all(
        r.task_type == "translation" and r.dataset_name == "Multi30k test2016" and r.dataset_split == "test"
        for r in data.eval_results
    )
    assert ModelCardData(**data.to_dict()).to_dict() == data.to_dict()
    # body: architecture from the model, scores with signature, both loading ways, citation
    params = hub.count_parameters(tiny["model"])
    assert params == hub.count_parameters_in_folder(tiny["folder"])
    assert f"| Parameters | {params:,} |" in text
    assert "| d_model | 32 |" in text and "| Attention heads, h | 4 |" in text
    assert "| sacreBLEU | 12.35 |" in text and SIGNATURE.replace("|", "\\|") in text
    assert f'AutoModelForSeq2SeqLM.from_pretrained("{REPO_ID}", trust_remote_code=True)' in text
    assert "import vaswani_hf" in text and "@inproceedings{vaswani2017attention" in text
    assert json.loads((tiny["folder"] / "metrics.json").read_text())["metrics"]["sacrebleu"]["score"] == 12.3456


def test_card_without_metrics_has_no_results_and_invents_none(tiny):
    card = hub.render_model_card(tiny["folder"], None, {"source_lang": "en", "target_lang": "de"})
    assert card.data.eval_results is None and card.data.metrics is None
    assert "model-index" not in str(card)
    assert "No evaluation results were recorded" in str(card)
    assert "No training details were recorded" in str(card)


@pytest.mark.parametrize(
    "bad", [{"bleu": float("nan")}, {"bleu": "TBD"}, {"bleu": None}, {"bleu": {"signature": "x"}}]
)
def test_card_refuses_placeholder_metrics(tiny, bad):
    with pytest.raises(ValueError):
        hub.render_model_card(tiny["folder"], bad, TRAINING_INFO)


def test_card_refuses_metrics_without_test_set_or_languages(tiny):
    with pytest.raises(ValueError, match="eval_dataset"):
        hub.render_model_card(tiny["folder"], {"bleu": 20.0}, {"source_lang": "en", "target_lang": "de"})
    with pytest.raises(ValueError, match="source_lang"):
        hub.render_model_card(tiny["folder"], None, {})


def test_trainer_style_metrics_are_normalized():
    scores = hub.normalize_metrics({"eval_bleu": 20.5, "eval_loss": 2.0, "eval_gen_len": 9.0, "eval_runtime": 3.0})
    assert scores == {"bleu": {"score": 20.5, "signature": None, "description": None}}
    assert math.isfinite(scores["bleu"]["score"])


def test_training_facts_in_order_and_cells_escaped(tiny):
    """Known training facts in TRAINING_FIELDS order, then other keys as given; '|' never breaks a table row."""
    info = {**TRAINING_INFO, "custom|key": [1, 2.5, "x|y"], "learning_rate": 0.0007, "optimizer": {"beta2": 0.98}}
    text = str(hub.render_model_card(tiny["folder"], METRICS, info))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    labels = [row.split(" | ")[0][2:] for row in rows]
    known = [label for _, label in card_module.TRAINING_FIELDS if label in labels]
    assert known == [
        "Training data",
        "Training data (Hub id)",
        "Training steps",
        "Optimizer",
        "Learning rate",
        "Hardware",
    ]
    assert "| custom\\|key | 1, 2.5, x\\|y |" in text and "| Learning rate | 0.0007 |" in text
    assert "| Optimizer | beta2=0.98 |" in text


def test_card_inputs_round_trip_and_broken_metrics_file_is_named(tiny, tmp_path):
    record = hub.read_card_inputs(tiny["folder"])
    assert record["training_info"] == TRAINING_INFO and set(record["metrics"]) == {"sacrebleu", "chrf"}
    assert hub.read_card_inputs(tmp_path) == {}
    (tmp_path / "metrics.json").write_text('{"metrics": ', encoding="utf-8")
    with pytest.raises(ValueError, match="metrics.json:1: invalid JSON"):
        hub.read_card_inputs(tmp_path)


def test_a_card_variant_describes_another_kind_of_repository(tiny):
    """What differs between kinds of repository (an export's, e.g. export.marian.MARIAN_CARD) is given by a
    CardVariant: tags, architecture table, and whether the scores were measured with the repository's own decoding
    (if not: the scores stay in the body, out of the model-index, with the variant's notes)."""
    variant = hub.CardVariant(
        name="other",
        tags=("other-architecture",),
        architecture=lambda config: dataclasses.replace(
            card_module.vaswani_architecture(config), name="Other (converted)"
        ),
        count_parameters=lambda model: 7,
        decodes_as_measured=lambda generation: False,
        decoding_note="DECODING NOTE",
        results_note="RESULTS NOTE",
    )
    card = hub.render_model_card(tiny["model"], METRICS, TRAINING_INFO, variant=variant)
    text = str(card)
    assert "other-architecture" in card.data.tags and "custom_code" not in card.data.tags
    assert card.data.eval_results is None and "| sacreBLEU | 12.35 |" in text
    assert "DECODING NOTE" in text and "RESULTS NOTE" in text
    assert "| Architecture | Other (converted) |" in text and "| Parameters | 7 |" in text
    default = str(hub.render_model_card(tiny["model"], METRICS, TRAINING_INFO))
    assert "NOTE" not in default and "model-index" in default
    with pytest.raises(ValueError, match="CardVariant"):
        hub.render_model_card(tiny["folder"], None, TRAINING_INFO, variant="marian")


def test_the_hub_package_imports_no_export():
    """Exports build on the card (export.marian -> hub.card); the hub never imports an export back."""
    import ast
    from pathlib import Path

    for path in Path(card_module.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert "export" not in (node.module or "").split("."), (path.name, node.module)
            elif isinstance(node, ast.Import):
                assert not any("export" in alias.name.split(".") for alias in node.names), path.name


@pytest.mark.parametrize("code", [5, ["en"], None.__class__, "de; rm -rf /", ""])
def test_a_language_code_is_a_short_string_only(code):
    from vaswani_hf.errors import UsageError
    from vaswani_hf.hub.ids import check_card_identity

    with pytest.raises(UsageError, match="is not a language code"):
        check_card_identity(target_lang=code)
