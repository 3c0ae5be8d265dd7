"""What the three metric modules share: their input schema and sacreBLEU's layout of references.

Imported by absolute name (`vaswani_hf.metrics.common`): `evaluate.load(path)` copies each metric script into its own
module folder, where a relative import would not resolve; the installed package does.
"""

import datasets
import evaluate
import sacrebleu

# One reference per segment (a string) or several (a list of strings), as evaluate's translation metrics accept.
TRANSLATION_FEATURES = [
    datasets.Features({"predictions": datasets.Value("string", id="sequence"),
                       "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references")}),
    datasets.Features({"predictions": datasets.Value("string", id="sequence"),
                       "references": datasets.Value("string", id="sequence")}),
]


def metric_info(description, citation, inputs_description, homepage, codebase_urls, reference_urls):
    """The `evaluate.MetricInfo` of one of the three metrics (their shared input schema)."""
    return evaluate.MetricInfo(description=description, citation=citation, homepage=homepage,
                               inputs_description=inputs_description, features=TRANSLATION_FEATURES,
                               codebase_urls=codebase_urls, reference_urls=reference_urls)


def bleu_fields(result, signature: str) -> dict:
    """What sacrebleu_local and tok_bleu return of a sacreBLEU BLEU score."""
    return {"score": result.score, "signature": signature, "counts": result.counts, "totals": result.totals,
            "precisions": result.precisions, "bp": result.bp, "sys_len": result.sys_len, "ref_len": result.ref_len,
            "sacrebleu_version": sacrebleu.__version__}


def transpose_references(references):
    """Per-segment references (a str or a list of str per segment) -> sacreBLEU's reference streams."""
    if references and isinstance(references[0], str):
        references = [[ref] for ref in references]
    references_per_prediction = len(references[0]) if references else 0
    if any(len(refs) != references_per_prediction for refs in references):
        raise ValueError("BLEU and chrF need the same number of references for every prediction")
    return [[refs[i] for refs in references] for i in range(references_per_prediction)]


def _is_number(value) -> bool:
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_is_number(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_float(value):
    """A statistic as float(s): scipy's bootstrap (BCa) gives NaN intervals for integer-valued statistics."""
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)


class NumericOnlyOption:
    """The load-time option `numeric_only` of the three metric modules (a mixin before `evaluate.Metric`).

    evaluate's evaluators with `strategy="bootstrap"` resample every field the metric returns: they fail on a string
    ("unsupported operand type(s) for /: 'numpy.str_' and 'int'") and scipy's bootstrap gives NaN intervals, with
    DegenerateDataWarning / RuntimeWarning, for a field that never changes (a setting such as chrF's `char_order`)
    and for integer-valued ones (n-gram counts, lengths). They pass no arguments to `compute`, so the choice is made
    when the metric is loaded: `evaluate.load(path, numeric_only=True)` (or
    `vaswani_hf.evaluation.load_metric(name, numeric_only=True)`) returns only the statistics that vary with the
    data, all as floats (score, counts, totals, ...). Nothing is lost: after every `compute` the string fields
    (sacreBLEU's signature, versions) are in `metric.string_fields`, e.g. `metric.string_fields["signature"]`, to be
    reported with the score, and the fixed settings a module returns (`SETTINGS`, e.g. chrF's `char_order`,
    `word_order`, `beta`) in `metric.settings`. The default (False) keeps every field in the result, as it is.

    `numeric_only` must be a bool: `numeric_only="false"` would otherwise turn the option on (`bool("false")`).
    """

    SETTINGS: tuple = ()  # result fields that restate the call's settings: fixed, never resampled

    def __init__(self, *args, numeric_only: bool = False, **kwargs):
        if not isinstance(numeric_only, bool):
            raise ValueError(f"numeric_only must be True or False, got {numeric_only!r} "
                             f"({type(numeric_only).__name__}); e.g. load_metric(name, numeric_only=True)")
        self.numeric_only = numeric_only
        self.string_fields: dict = {}
        self.settings: dict = {}
        super().__init__(*args, **kwargs)

    def _fields(self, result: dict) -> dict:
        """`result`, or (`numeric_only`) its statistics as floats; the string fields are kept in `string_fields`
        and the fixed settings in `settings` either way."""
        self.string_fields = {key: value for key, value in result.items() if not _is_number(value)}
        self.settings = {key: result[key] for key in self.SETTINGS if key in result}
        if not self.numeric_only:
            return result
        return {key: _as_float(value) for key, value in result.items()
                if key not in self.string_fields and key not in self.settings}
