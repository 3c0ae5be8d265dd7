"""sacreBLEU corpus BLEU as an `evaluate` metric module that loads from a local path (no Hub access).

This is the same computation as the Hub's ``evaluate-metric/sacrebleu`` module, self-contained so that
``evaluate.load("<path>/sacrebleu_local")`` works offline. It wraps ``sacrebleu.metrics.BLEU`` and returns the
score together with sacreBLEU's signature string, which names every setting that changes the number
(number of references, case, tokenizer, smoothing, sacreBLEU version). Report the signature with the score.
"""

import evaluate
from sacrebleu.metrics import BLEU

from vaswani_hf.metrics.common import NumericOnlyOption, bleu_fields, metric_info, transpose_references

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus-level BLEU computed by sacreBLEU on detokenized text with sacreBLEU's own tokenization (default 13a).
Returns the score and the signature string that makes it reproducible.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): one hypothesis per segment (detokenized).
    references (`list` of `str`, or `list` of `list` of `str`): per segment, one reference or a list of
        references; every segment must have the same number of references.
    tokenize (`str`): sacreBLEU tokenizer: "13a" (default, mteval-v13a), "intl", "none", "char", "zh", "ja-mecab",
        "ko-mecab", "flores101", "flores200". "none" scores already tokenized text as is.
    lowercase (`bool`): lowercase hypotheses and references first (case-insensitive BLEU). Default False.
    smooth_method (`str`): "exp" (default), "floor", "add-k" or "none".
    smooth_value (`float`): value for "floor"/"add-k" smoothing.
    use_effective_order (`bool`): only use n-gram orders that have matches (sentence-level use). Default False.
    force (`bool`): silence sacreBLEU's warning about input that looks tokenized. Default False.
Returns (loaded with `numeric_only=True`, for evaluate's bootstrap strategy: the statistics only, all as floats,
i.e. score, counts, totals, precisions, bp, sys_len, ref_len; the string fields are then in `metric.string_fields`):
    score (`float`): BLEU in [0, 100].
    signature (`str`): sacreBLEU signature, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0".
    counts, totals (`list` of `int`): matched and total n-grams for n = 1..4.
    precisions (`list` of `float`): n-gram precisions in percent.
    bp (`float`): brevity penalty. sys_len, ref_len (`int`): hypothesis and effective reference lengths.
Example:
    >>> metric = evaluate.load("path/to/vaswani_hf/metrics/sacrebleu_local")
    >>> metric.compute(predictions=["The cat sat on the mat."], references=[["The cat sat on the mat."]])["score"]
    100.00000000000004
"""



@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SacrebleuLocal(NumericOnlyOption, evaluate.Metric):
    def _info(self):
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, "https://github.com/mjpost/sacrebleu",
                           ["https://github.com/mjpost/sacrebleu"], ["https://github.com/mjpost/sacrebleu"])

    def _compute(self, predictions, references, tokenize="13a", lowercase=False, smooth_method="exp",
                 smooth_value=None, use_effective_order=False, force=False):
        bleu = BLEU(lowercase=lowercase, force=force, tokenize=tokenize, smooth_method=smooth_method,
                    smooth_value=smooth_value, effective_order=use_effective_order)
        result = bleu.corpus_score(list(predictions), transpose_references(references))
        return self._fields(bleu_fields(result, str(bleu.get_signature())))
