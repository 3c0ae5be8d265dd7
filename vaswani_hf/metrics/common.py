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
