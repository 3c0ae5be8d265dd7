"""evaluate's `TranslationEvaluator` on this model with the package's metric modules (docs/ecosystem.md): the call that
works (a model instance and its tokenizer), confidence intervals with `strategy="bootstrap"` (metrics loaded with
`numeric_only=True`, the signature kept in `metric.string_fields`), and the calls that fail in evaluate 0.4 with
transformers 5 for every model, pinned so that the documentation changes when they start to work."""

import pytest
from hub_helpers import SOURCES, tiny  # noqa: F401
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vaswani_hf import translation_pipeline
from vaswani_hf.evaluation import METRIC_NAMES, load_metric

pytestmark = pytest.mark.usefixtures("one_torch_thread")
pytest.importorskip("scipy", reason="evaluate's evaluators need scipy (pip install evaluate[evaluator])")
evaluate = pytest.importorskip("evaluate")
datasets = pytest.importorskip("datasets")

TEXTS = SOURCES + ["a woman reads a book in the park .", "the dog runs .", "two men talk ."]


@pytest.fixture(scope="module")
def model_and_data(tiny):  # noqa: F811
    """The tiny folder's model and tokenizer, and a data set whose references are its own translations for three
    sentences and other text for the rest: scores between 0 and 100 that resampling moves."""
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny["folder"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny["folder"])
    ours = [record["translation_text"] for record in translation_pipeline(model, tokenizer)(TEXTS)]
    references = ours[:3] + ["ein ganz anderer satz ."] * (len(TEXTS) - 3)
    data = datasets.Dataset.from_dict({"text": TEXTS, "label": references})
    return model, tokenizer, data, ours


def evaluate_model(model, tokenizer, data, metric, **options):
    """The documented call: evaluate's `TranslationEvaluator` class (evaluate.evaluator("translation") raises in
    transformers 5) with the model instance and its tokenizer."""
    return evaluate.TranslationEvaluator().compute(model_or_pipeline=model, tokenizer=tokenizer, data=data,
                                                   metric=metric, **options)


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_bootstrap_gives_intervals_and_keeps_the_signature(model_and_data, name):
    model, tokenizer, data, ours = model_and_data
    expected = load_metric(name).compute(predictions=ours, references=list(data["label"]))
    assert 0 < expected["score"] < 100 and isinstance(expected["signature"], str)
    metric = load_metric(name, numeric_only=True)
    result = evaluate_model(model, tokenizer, data, metric, strategy="bootstrap", n_resamples=30, random_state=0)
    score = result["score"]
    assert score["score"] == pytest.approx(expected["score"])
    low, high = score["confidence_interval"]
    assert low <= score["score"] <= high and low < high and score["standard_error"] > 0
    numeric = {key for key, value in expected.items() if not isinstance(value, str)}
    assert numeric <= set(result) and not {"signature", "sacrebleu_version"} & set(result)
    assert metric.string_fields["signature"] == expected["signature"]  # reported with the score


def test_without_numeric_only_the_result_is_unchanged_and_bootstrap_fails_in_evaluate(model_and_data):
    """The default keeps every field (vaswani-evaluate and the model card read the signature from the result);
    evaluate's bootstrap then resamples the signature too and fails, which is why the option exists."""
    model, tokenizer, data, ours = model_and_data
    simple = evaluate_model(model, tokenizer, data, load_metric("sacrebleu_local"))
    assert isinstance(simple["signature"], str) and simple["score"] > 0
    with pytest.raises(TypeError, match="numpy.str_"):
        evaluate_model(model, tokenizer, data, load_metric("sacrebleu_local"), strategy="bootstrap", n_resamples=5,
                       random_state=0)


def test_the_calls_that_fail_in_evaluate_with_transformers_5(model_and_data, tiny):  # noqa: F811
    """docs/ecosystem.md names these and the call to use instead (above): a folder (evaluate calls
    `pipeline("translation", model=FOLDER)` and cannot pass `trust_remote_code`), a pipeline object (evaluate 0.4.6
    reads `transformers.TFPreTrainedModel`, removed in transformers 5, so this fails for every model)."""
    model, tokenizer, data, _ = model_and_data
    metric = load_metric("sacrebleu_local")
    evaluator = evaluate.TranslationEvaluator()
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        evaluator.compute(model_or_pipeline=str(tiny["folder"]), data=data, metric=metric)
    with pytest.raises(AttributeError, match="TFPreTrainedModel"):
        evaluator.compute(model_or_pipeline=translation_pipeline(model, tokenizer), data=data, metric=metric)
