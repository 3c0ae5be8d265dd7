"""Compute chrF (and chrF++) through sacreBLEU, as an `evaluate` metric module that loads from a local path, without
Hub access.

It wraps ``sacrebleu.metrics.CHRF`` and returns the corpus score with sacreBLEU's signature string, so that
``evaluate.load("<path>/chrf_local")`` works offline. chrF is a character n-gram F-score (beta=2 by default);
``word_order=2`` gives chrF++.
"""

import sacrebleu
from sacrebleu.metrics import CHRF

from vaswani_hf.metrics import common


class ChrfLocal(common.TranslationMetric):
    SETTINGS = ("char_order", "word_order", "beta")  # with numeric_only=True these go to `metric.settings`
    DESCRIPTION = "Corpus-level chrF (character n-gram F-score) computed by sacreBLEU, with its signature.\n"
    CITATION = (
        """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
}
"""
        + common.POST_2018
    )
    REFERENCE_URLS = ("https://github.com/m-popovic/chrF",)
    KWARGS_DESCRIPTION = """
Args:
    predictions, references: as sacrebleu_local.
    char_order (`int`, default 6), word_order (`int`: 0 chrF, 2 chrF++), beta (`int`, default 2),
    lowercase, whitespace, eps_smoothing (`bool`): as `sacrebleu.metrics.CHRF`.
Returns:
    score (`float`): chrF in [0, 100]; signature (`str`); char_order, word_order, beta: the settings used;
    sacrebleu_version (`str`).
"""

    def _compute(
        self,
        predictions,
        references,
        char_order=CHRF.CHAR_ORDER,
        word_order=CHRF.WORD_ORDER,
        beta=CHRF.BETA,
        lowercase=False,
        whitespace=False,
        eps_smoothing=False,
    ):
        chrf = CHRF(
            char_order=char_order,
            word_order=word_order,
            beta=beta,
            lowercase=lowercase,
            whitespace=whitespace,
            eps_smoothing=eps_smoothing,
        )
        result = chrf.corpus_score(list(predictions), common.transpose_references(references))
        return self._fields(
            {
                "score": result.score,
                "signature": str(chrf.get_signature()),
                "char_order": result.char_order,
                "word_order": result.word_order,
                "beta": result.beta,
                "sacrebleu_version": sacrebleu.__version__,
            }
        )
