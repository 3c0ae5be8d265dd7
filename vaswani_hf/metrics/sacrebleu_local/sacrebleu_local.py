"""Compute sacreBLEU's corpus BLEU as an `evaluate` metric module that loads from a local path, without Hub access.

This is the same computation as the Hub's ``evaluate-metric/sacrebleu`` module, self-contained so that
``evaluate.load("<path>/sacrebleu_local")`` works offline. It wraps ``sacrebleu.metrics.BLEU`` and returns the score
together with sacreBLEU's signature string, which names every setting that changes the number (the number of
references, case, tokenizer, smoothing, sacreBLEU's version). Report the signature with the score.
"""

from sacrebleu.metrics import BLEU

from vaswani_hf.metrics import check_sacrebleu_tokenizer, common


class SacrebleuLocal(common.TranslationMetric):
    DESCRIPTION = (
        "Corpus-level BLEU computed by sacreBLEU on detokenized text (default tokenizer 13a), with its signature.\n"
    )
    KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): one hypothesis per segment (detokenized).
    references (`list` of `str`, or `list` of `list` of `str`): per segment, one reference or a list of
        references; every segment must have the same number of references.
    tokenize (`str`): sacreBLEU tokenizer ("13a" default; "none" scores already tokenized text as is).
    lowercase, smooth_method, smooth_value, use_effective_order, force: as `sacrebleu.metrics.BLEU`.
Returns:
    score (`float`): BLEU in [0, 100]; signature (`str`), e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|...";
    counts, totals, precisions, bp, sys_len, ref_len: sacreBLEU's statistics; sacrebleu_version (`str`).
"""

    def _compute(
        self,
        predictions,
        references,
        tokenize="13a",
        lowercase=False,
        smooth_method="exp",
        smooth_value=None,
        use_effective_order=False,
        force=False,
    ):
        check_sacrebleu_tokenizer(tokenize, "tokenize")
        bleu = BLEU(
            lowercase=lowercase,
            force=force,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=use_effective_order,
        )
        result = bleu.corpus_score(list(predictions), common.transpose_references(references))
        return self._fields(common.bleu_fields(result, str(bleu.get_signature())))
