"""What the three metric modules share: their input schema and sacreBLEU's layout of references.

Imported by absolute name (`vaswani_hf.metrics.common`): `evaluate.load(path)` copies each metric script into its own
module folder, where a relative import would not resolve; the installed package does.
"""

import datasets

# One reference per segment (a string) or several (a list of strings), as evaluate's translation metrics accept.
TRANSLATION_FEATURES = [
    datasets.Features({"predictions": datasets.Value("string", id="sequence"),
                       "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references")}),
    datasets.Features({"predictions": datasets.Value("string", id="sequence"),
                       "references": datasets.Value("string", id="sequence")}),
]


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


class NumericOnlyOption:
    """The load-time option `numeric_only` of the three metric modules (a mixin before `evaluate.Metric`).

    evaluate's evaluators with `strategy="bootstrap"` resample every field the metric returns and fail on a string
    ("unsupported operand type(s) for /: 'numpy.str_' and 'int'"); they pass no arguments to `compute`, so the
    choice is made when the metric is loaded: `evaluate.load(path, numeric_only=True)` (or
    `vaswani_hf.evaluation.load_metric(name, numeric_only=True)`) returns only the numeric fields (score, counts,
    totals, ...). The string fields (sacreBLEU's signature, versions) are not dropped: after every `compute` they
    are in `metric.string_fields`, e.g. `metric.string_fields["signature"]`, to be reported with the score. The
    default keeps every field in the result, as before.
    """

    def __init__(self, *args, numeric_only: bool = False, **kwargs):
        self.numeric_only = bool(numeric_only)
        self.string_fields: dict = {}
        super().__init__(*args, **kwargs)

    def _fields(self, result: dict) -> dict:
        """`result`, or its numeric fields only (`numeric_only`); the other fields are kept in `string_fields`."""
        self.string_fields = {key: value for key, value in result.items() if not _is_number(value)}
        if not self.numeric_only:
            return result
        return {key: value for key, value in result.items() if key not in self.string_fields}
