"""Hold what the three metric modules share: the input schema, sacreBLEU's layout of references, the `MetricInfo`, the
option `numeric_only` and BLEU's result fields. It is imported as a module (`from vaswani_hf.metrics import common`)
because `evaluate.load(path)` copies each script into a folder of its own (so no relative import works) and takes the
first `evaluate.Metric` subclass in the script's namespace as the metric, so the base class must not be imported by
name.
"""

import datasets
import evaluate
import sacrebleu

# The inputs have one reference per segment (a string) or several (a list of strings), as evaluate's translation
# metrics accept.
TRANSLATION_FEATURES = [
    datasets.Features(
        {
            "predictions": datasets.Value("string", id="sequence"),
            "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references"),
        }
    ),
    datasets.Features(
        {"predictions": datasets.Value("string", id="sequence"), "references": datasets.Value("string", id="sequence")}
    ),
]
SACREBLEU = "https://github.com/mjpost/sacrebleu"
POST_2018 = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""
# Every module's description of its inputs ends with this text.
NUMERIC_ONLY_DOC = """
    Loaded with `numeric_only=True` (for evaluate's bootstrap strategy): only the statistics that vary with the
    data, all as floats; the string fields are then in `metric.string_fields` and fixed settings in `metric.settings`.
"""


def transpose_references(references):
    """Return sacreBLEU's reference streams for per-segment references (a str or a list of str per segment); a
    segment with another number of references than the first raises a ValueError."""
    if references and isinstance(references[0], str):
        references = [[ref] for ref in references]
    references_per_prediction = len(references[0]) if references else 0
    if any(len(refs) != references_per_prediction for refs in references):
        raise ValueError("BLEU and chrF need the same number of references for every prediction")
    return [[refs[i] for refs in references] for i in range(references_per_prediction)]


def bleu_fields(result, signature: str) -> dict:
    """Return the result fields of a module that scores with `sacrebleu.metrics.BLEU`: the score, the signature, and
    sacreBLEU's statistics and version."""
    return {
        "score": result.score,
        "signature": signature,
        "counts": result.counts,
        "totals": result.totals,
        "precisions": result.precisions,
        "bp": result.bp,
        "sys_len": result.sys_len,
        "ref_len": result.ref_len,
        "sacrebleu_version": sacrebleu.__version__,
    }


def _is_number(value) -> bool:
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_is_number(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_float(value):
    """Return a statistic, or each statistic of a list, as a float, because scipy's bootstrap (BCa) gives NaN
    intervals for integer-valued statistics."""
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)


class TranslationMetric(evaluate.Metric):
    """Serve as the base class of the three modules: build their `MetricInfo` from the class attributes, and take the
    load-time option `numeric_only` (a bool). evaluate's `strategy="bootstrap"` fails on string fields and gives NaN
    intervals for fixed ones, so with `numeric_only=True` a module returns only the statistics that vary, as floats;
    the signature is then in `metric.string_fields`, and the `SETTINGS` fields in `metric.settings`."""

    SETTINGS: tuple = ()  # the result fields that restate the call's settings, which are fixed and never resampled
    DESCRIPTION = KWARGS_DESCRIPTION = ""
    CITATION = POST_2018
    HOMEPAGE = SACREBLEU
    CODEBASE_URLS = REFERENCE_URLS = (SACREBLEU,)

    def __init__(self, *args, numeric_only: bool = False, **kwargs):
        if not isinstance(numeric_only, bool):
            raise ValueError(
                f"numeric_only must be True or False, got {numeric_only!r} "
                f"({type(numeric_only).__name__}); e.g. load_metric(name, numeric_only=True)"
            )
        self.numeric_only = numeric_only
        self.string_fields: dict = {}
        self.settings: dict = {}
        super().__init__(*args, **kwargs)

    def _info(self):
        return evaluate.MetricInfo(
            description=self.DESCRIPTION,
            citation=self.CITATION,
            homepage=self.HOMEPAGE,
            inputs_description=self.KWARGS_DESCRIPTION + NUMERIC_ONLY_DOC,
            features=TRANSLATION_FEATURES,
            codebase_urls=list(self.CODEBASE_URLS),
            reference_urls=list(self.REFERENCE_URLS),
        )

    def _fields(self, result: dict) -> dict:
        """Return `result`, or, with `numeric_only`, only its statistics as floats. Either way the string fields are
        kept in `string_fields` and the fixed settings in `settings`."""
        self.string_fields = {key: value for key, value in result.items() if not _is_number(value)}
        self.settings = {key: result[key] for key in self.SETTINGS if key in result}
        if not self.numeric_only:
            return result
        return {
            key: _as_float(value)
            for key, value in result.items()
            if key not in self.string_fields and key not in self.settings
        }
