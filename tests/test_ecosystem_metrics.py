"""evaluate's `TranslationEvaluator` on this model with the package's metric modules (docs/ecosystem.md): the call that
works (a model instance and its tokenizer), confidence intervals with `strategy="bootstrap"` (metrics loaded with
`numeric_only=True`, the signature kept in `metric.string_fields`), and the calls that fail in evaluate 0.4 with
transformers 5 for every model, pinned so that the documentation changes when they start to work."""

import numpy as np
import pytest
from hub_helpers import SOURCES
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vaswani_hf import translation_pipeline
from vaswani_hf.metrics.scores import METRIC_NAMES, load_metric

pytestmark = pytest.mark.usefixtures("one_torch_thread")
pytest.importorskip("scipy", reason="evaluate's evaluators need scipy (pip install evaluate[evaluator])")
evaluate = pytest.importorskip("evaluate")
datasets = pytest.importorskip("datasets")

TEXTS = SOURCES + ["a woman reads a book in the park .", "the dog runs .", "two men talk ."]


@pytest.fixture(scope="module")
def model_and_data(tiny):  # noqa: F811
    """The tiny folder's model and tokenizer, and a data set whose references are its own translations for three
    sentences and other, longer text for the rest: scores between 0 and 100 and a brevity penalty below 1 that
    resampling moves."""
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny["folder"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny["folder"])
    ours = [record["translation_text"] for record in translation_pipeline(model, tokenizer)(TEXTS)]
    long_reference = " ".join(["ein ganz anderer satz mit vielen wörtern ."] * 12)
    references = ours[:3] + [long_reference] * (len(TEXTS) - 3)
    data = datasets.Dataset.from_dict({"text": TEXTS, "label": references})
    return model, tokenizer, data, ours


def evaluate_model(model, tokenizer, data, metric, **options):
    """The documented call: evaluate's `TranslationEvaluator` class (evaluate.evaluator("translation") raises in
    transformers 5) with the model instance and its tokenizer."""
    return evaluate.TranslationEvaluator().compute(
        model_or_pipeline=model, tokenizer=tokenizer, data=data, metric=metric, **options
    )


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
    settings = {"char_order", "word_order", "beta"}  # chrF's fixed settings: in metric.settings
    numeric = {key for key, value in expected.items() if not isinstance(value, str)} - settings
    assert numeric <= set(result) and not ({"signature", "sacrebleu_version"} | settings) & set(result)
    assert metric.string_fields["signature"] == expected["signature"]  # reported with the score


def test_without_numeric_only_the_result_is_unchanged_and_bootstrap_fails_in_evaluate(model_and_data):
    """The default keeps every field (vaswani-evaluate and the model card read the signature from the result);
    evaluate's bootstrap then resamples the signature too and fails, which is why the option exists."""
    model, tokenizer, data, ours = model_and_data
    simple = evaluate_model(model, tokenizer, data, load_metric("sacrebleu_local"))
    assert isinstance(simple["signature"], str) and simple["score"] > 0
    with pytest.raises(TypeError, match="numpy.str_"):
        evaluate_model(
            model, tokenizer, data, load_metric("sacrebleu_local"), strategy="bootstrap", n_resamples=5, random_state=0
        )


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


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_bootstrap_intervals_are_finite_for_every_returned_field_without_warnings(model_and_data, name):
    """scipy's bootstrap gives NaN intervals (and DegenerateDataWarning / RuntimeWarning) for a constant field and
    for an integer-valued one: with `numeric_only=True` a module returns only statistics that vary with the data, as
    floats, and keeps its fixed settings in `metric.settings`. The data make every statistic vary (the brevity
    penalty too)."""
    import math
    import warnings

    from scipy.stats import DegenerateDataWarning

    model, tokenizer, data, ours = model_and_data
    metric = load_metric(name, numeric_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", DegenerateDataWarning)
        result = evaluate_model(model, tokenizer, data, metric, strategy="bootstrap", n_resamples=30, random_state=0)
    fields = {key: value for key, value in result.items() if isinstance(value, dict)}  # the time fields are not
    expected = (
        {"score"} if name == "chrf_local" else {"score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len"}
    )
    assert set(fields) == expected
    for key, value in fields.items():
        bounds = [float(x) for bound in value["confidence_interval"] for x in np.atleast_1d(bound)]
        assert all(math.isfinite(x) for x in bounds), (key, value)
    plain = load_metric(name).compute(predictions=ours, references=list(data["label"]))
    settings = {"char_order": 6, "word_order": 0, "beta": 2} if name == "chrf_local" else {}
    assert metric.settings == settings and all(plain[key] == value for key, value in settings.items())
    assert metric.string_fields["signature"] == plain["signature"]


@pytest.mark.parametrize("value", ["false", "True", 1, 0, None])
def test_numeric_only_takes_a_bool_only(value):
    """`numeric_only="false"` once turned the option on (`bool("false")`)."""
    with pytest.raises(ValueError, match=r"numeric_only must be True or False, got "):
        load_metric("sacrebleu_local", numeric_only=value)
