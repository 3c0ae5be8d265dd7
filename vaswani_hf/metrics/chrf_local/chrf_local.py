"""chrF (and chrF++) via sacreBLEU as an `evaluate` metric module that loads from a local path (no Hub access).

Wraps ``sacrebleu.metrics.CHRF`` and returns the corpus score with sacreBLEU's signature string, so that
``evaluate.load("<path>/chrf_local")`` works offline. chrF is a character n-gram F-score (beta=2 by default);
``word_order=2`` gives chrF++.
"""

import evaluate
import sacrebleu
from sacrebleu.metrics import CHRF

from vaswani_hf.metrics.common import NumericOnlyOption, metric_info, transpose_references

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
}
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus-level chrF (character n-gram F-score) computed by sacreBLEU on detokenized text, with its signature.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): one hypothesis per segment (detokenized).
    references (`list` of `str`, or `list` of `list` of `str`): per segment, one reference or a list of
        references; every segment must have the same number of references.
    char_order (`int`): character n-gram order. Default 6.
    word_order (`int`): word n-gram order; 0 is chrF (default), 2 is chrF++.
    beta (`int`): recall weight of the F-score. Default 2.
    lowercase (`bool`): case-insensitive scoring. Default False.
    whitespace (`bool`): include whitespace in character n-grams. Default False.
    eps_smoothing (`bool`): chrF++.py / NLTK / Moses-style epsilon smoothing instead of sacreBLEU's default.
Returns:
    score (`float`): chrF in [0, 100].
    signature (`str`): sacreBLEU signature, e.g. "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0".
    char_order, word_order, beta (`int`): the settings used.
    sacrebleu_version (`str`).
    Loaded with `numeric_only=True` (for evaluate's bootstrap strategy): `score` only, as a float; the string
    fields are then in `metric.string_fields` and the settings (char_order, word_order, beta) in
    `metric.settings`.
"""



@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ChrfLocal(NumericOnlyOption, evaluate.Metric):
    SETTINGS = ("char_order", "word_order", "beta")  # with numeric_only=True: in `metric.settings`, not the result

    def _info(self):
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, "https://github.com/mjpost/sacrebleu",
                           ["https://github.com/mjpost/sacrebleu"], ["https://github.com/m-popovic/chrF"])

    def _compute(self, predictions, references, char_order=CHRF.CHAR_ORDER, word_order=CHRF.WORD_ORDER,
                 beta=CHRF.BETA, lowercase=False, whitespace=False, eps_smoothing=False):
        chrf = CHRF(char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase,
                    whitespace=whitespace, eps_smoothing=eps_smoothing)
        result = chrf.corpus_score(list(predictions), transpose_references(references))
        return self._fields({
            "score": result.score,
            "signature": str(chrf.get_signature()),
            "char_order": result.char_order,
            "word_order": result.word_order,
            "beta": result.beta,
            "sacrebleu_version": sacrebleu.__version__,
        })
