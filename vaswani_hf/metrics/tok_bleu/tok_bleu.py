r"""Compute the paper's tokenized BLEU for EN-DE, as an `evaluate` metric module that loads from a local path.

"Attention Is All You Need" (Vaswani et al., 2017), Section 6.1 and Table 2, reports BLEU on newstest2014 as computed
by tensor2tensor's ``utils/get_ende_bleu.sh``, which does, on the decoded file::

    perl replace-unicode-punctuation.perl -l de < decodes > decodes.n
    perl tokenizer.perl -l de < decodes.n > decodes.tok                 # Moses tokenizer
    perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' < decodes.tok > decodes.tok.atat
    perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' < newstest.tok.de > newstest.tok.de.atat
    perl multi-bleu.perl newstest.tok.de.atat < decodes.tok.atat

The script's comment says why: "Put compounds in ATAT format (comparable to papers like GNMT, ConvS2S)", following the
Stanford NMT preprocessing, so that "rich-text format" becomes "rich ##AT##-##AT## text format". The reference there
was already Moses-tokenized; here raw references go through the same normalisation and tokenization as the hypotheses
(``tokenize_references=False`` for references that are already tokenized).

This module reproduces that recipe in Python:

1. ``sacremoses.MosesPunctNormalizer.replace_unicode_punct``, the port of replace-unicode-punctuation.perl;
2. ``sacremoses.MosesTokenizer(lang).tokenize(..., escape=True)``, the port of tokenizer.perl with its defaults (no
   aggressive hyphen splitting, XML escaping of ``& < > " ' [ ] |``);
3. compound splitting with the very regex of the script, whose matches do not overlap, so that ``a-b-c`` becomes ``a
   ##AT##-##AT## b-c``, exactly as perl does;
4. multi-bleu.perl-style corpus BLEU: sacreBLEU with ``tokenize="none"`` (a whitespace split), case-sensitive unless
   ``lowercase=True`` (multi-bleu's ``-lc``), and ``smooth_method="none"``, because multi-bleu gives 0 when an n-gram
   order has no match.

Compound splitting inflates BLEU (every hyphenated compound becomes three tokens, mostly matched), so this number is
comparable only with papers that used the same script; report sacreBLEU as well.
"""

import re

import sacremoses
from sacrebleu.metrics import BLEU
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from vaswani_hf.metrics import common

_COMPOUND = re.compile(r"(\S)-(\S)", flags=re.ASCII)  # an ASCII \S matches as perl's byte semantics in the t2t script


def split_compounds(text):
    """Split hyphenated compounds as tensor2tensor's ``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`` does:
    with non-overlapping matches, from left to right."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def moses_tokenize(lines, lang="de"):
    """Return `lines` normalised as by replace-unicode-punctuation.perl and then tokenised as by tokenizer.perl -l
    LANG, through their sacremoses ports with the default options."""
    normalizer = MosesPunctNormalizer(lang=lang)
    tokenizer = MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(normalizer.replace_unicode_punct(line), return_str=True, escape=True) for line in lines]


def preprocess(lines, lang="de", tokenize=True, compounds=True):
    """Return `lines` transformed as get_ende_bleu.sh transforms text before multi-bleu.perl: Moses-tokenised when
    `tokenize` is true, then with compounds split when `compounds` is true."""
    lines = moses_tokenize(lines, lang) if tokenize else list(lines)
    return [split_compounds(line) for line in lines] if compounds else lines


class TokBleu(common.TranslationMetric):
    DESCRIPTION = (
        "Paper-style tokenized BLEU (Vaswani et al. 2017, section 6.1, as tensor2tensor's get_ende_bleu.sh "
        "computed it): Moses tokenization, ##AT## compound splitting, multi-bleu-style BLEU.\n"
    )
    CITATION = """\
@inproceedings{vaswani2017attention,
    title = {Attention Is All You Need},
    author = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
              Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia},
    booktitle = {Advances in Neural Information Processing Systems},
    year = {2017},
}
"""
    HOMEPAGE = "https://github.com/tensorflow/tensor2tensor/blob/master/tensor2tensor/utils/get_ende_bleu.sh"
    CODEBASE_URLS = ("https://github.com/hplt-project/sacremoses", common.SACREBLEU)
    REFERENCE_URLS = ("https://arxiv.org/abs/1706.03762",)
    KWARGS_DESCRIPTION = """
Args:
    predictions, references: as sacrebleu_local.
    lang (`str`): language of the Moses tokenizer (the target language). Default "de".
    split_compounds (`bool`): apply the ##AT## compound splitting. Default True.
    tokenize_references (`bool`): normalise and Moses-tokenize the references too (False for references already
        Moses-tokenized, like t2t's newstest2014.tok.de; compound splitting still applies). Default True.
    lowercase (`bool`): case-insensitive BLEU (multi-bleu's -lc). Default False, as in the paper.
Returns:
    score, counts, totals, precisions, bp, sys_len, ref_len, sacrebleu_version: as sacrebleu_local;
    signature (`str`): the preprocessing followed by sacreBLEU's signature of the final scoring.
"""

    def _compute(
        self, predictions, references, lang="de", split_compounds=True, tokenize_references=True, lowercase=False
    ):
        hypotheses = preprocess(predictions, lang, tokenize=True, compounds=split_compounds)
        streams = [
            preprocess(stream, lang, tokenize=tokenize_references, compounds=split_compounds)
            for stream in common.transpose_references(references)
        ]
        bleu = BLEU(lowercase=lowercase, tokenize="none", smooth_method="none", force=True)
        result = bleu.corpus_score(hypotheses, streams)
        steps = [f"moses-tok({lang},sacremoses-{sacremoses.__version__})"]
        if not tokenize_references:
            steps[0] += "[hyp-only]"
        if split_compounds:
            steps.append("atat-compound-split")
        return self._fields(common.bleu_fields(result, f"pretok:{'+'.join(steps)}|{bleu.get_signature()}"))
