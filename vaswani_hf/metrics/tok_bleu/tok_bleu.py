"""The paper's tokenized BLEU for EN-DE, as an `evaluate` metric module that loads from a local path.

"Attention Is All You Need" (Vaswani et al., 2017), section 6.1 / Table 2, reports BLEU on newstest2014
as computed by tensor2tensor's ``utils/get_ende_bleu.sh``, which does, on the decoded file::

    perl replace-unicode-punctuation.perl -l de < decodes > decodes.n
    perl tokenizer.perl -l de < decodes.n > decodes.tok                 # Moses tokenizer
    perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g' < decodes.tok > decodes.tok.atat
    perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g' < newstest.tok.de > newstest.tok.de.atat
    perl multi-bleu.perl newstest.tok.de.atat < decodes.tok.atat

("Put compounds in ATAT format (comparable to papers like GNMT, ConvS2S)", following the Stanford NMT
preprocessing: "rich-text format" -> "rich ##AT##-##AT## text format"). The reference there was already
Moses-tokenized; here raw references go through the same normalisation and tokenization as the hypotheses
(``tokenize_references=False`` for references that are already tokenized).

This module reproduces that recipe in Python:

1. ``sacremoses.MosesPunctNormalizer.replace_unicode_punct`` (port of replace-unicode-punctuation.perl);
2. ``sacremoses.MosesTokenizer(lang).tokenize(..., escape=True)`` (port of tokenizer.perl with its defaults:
   no aggressive hyphen splitting, XML escaping of ``& < > " ' [ ] |``);
3. compound splitting with the very regex of the script (matches do not overlap, so ``a-b-c`` becomes
   ``a ##AT##-##AT## b-c``, exactly as perl/sed do);
4. multi-bleu.perl-style corpus BLEU: sacreBLEU with ``tokenize="none"`` (whitespace split),
   case-sensitive unless ``lowercase=True`` (multi-bleu's ``-lc``), and ``smooth_method="none"``
   (multi-bleu gives 0 when an n-gram order has no match).

Compound splitting inflates BLEU (every hyphenated compound becomes three tokens, mostly matched), so this
number is only comparable with papers that used the same script; report sacreBLEU as well.
"""

import re

import evaluate
import sacremoses
from sacrebleu.metrics import BLEU
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from vaswani_hf.metrics.common import NumericOnlyOption, bleu_fields, metric_info, transpose_references

_CITATION = """\
@inproceedings{vaswani2017attention,
    title = {Attention Is All You Need},
    author = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
              Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia},
    booktitle = {Advances in Neural Information Processing Systems},
    year = {2017},
}
"""

_DESCRIPTION = """\
Paper-style tokenized BLEU (Vaswani et al. 2017, section 6.1, as tensor2tensor's get_ende_bleu.sh computed it):
Moses tokenization (sacremoses) of hypotheses and references, ##AT## compound splitting, multi-bleu-style BLEU.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): one detokenized hypothesis per segment.
    references (`list` of `str`, or `list` of `list` of `str`): per segment, one reference or a list of
        references; every segment must have the same number of references.
    lang (`str`): language of the Moses tokenizer (the target language). Default "de".
    split_compounds (`bool`): apply the ##AT## compound splitting. Default True.
    tokenize_references (`bool`): normalise and Moses-tokenize the references too. Set False when they are
        already Moses-tokenized (like t2t's newstest2014.tok.de); compound splitting still applies. Default True.
    lowercase (`bool`): case-insensitive BLEU (multi-bleu's -lc). Default False, as in the paper.
Returns (loaded with `numeric_only=True`, for evaluate's bootstrap strategy: the statistics only, all as floats,
i.e. score, counts, totals, precisions, bp, sys_len, ref_len; the string fields are then in `metric.string_fields`):
    score (`float`): BLEU in [0, 100].
    signature (`str`): the preprocessing followed by sacreBLEU's signature of the final scoring.
    counts, totals, precisions, bp, sys_len, ref_len: as in sacreBLEU.
"""

_COMPOUND = re.compile(r"(\S)-(\S)", flags=re.ASCII)  # ASCII \S = perl's byte semantics in the t2t script


def split_compounds(text):
    """tensor2tensor's ``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`` (non-overlapping, left to right)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def moses_tokenize(lines, lang="de"):
    """replace-unicode-punctuation.perl then tokenizer.perl -l LANG (sacremoses ports, default options)."""
    normalizer = MosesPunctNormalizer(lang=lang)
    tokenizer = MosesTokenizer(lang=lang)
    return [
        tokenizer.tokenize(normalizer.replace_unicode_punct(line), return_str=True, escape=True) for line in lines
    ]


def preprocess(lines, lang="de", tokenize=True, compounds=True):
    """The text transformation of get_ende_bleu.sh before multi-bleu.perl."""
    lines = moses_tokenize(lines, lang) if tokenize else list(lines)
    return [split_compounds(line) for line in lines] if compounds else lines



@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TokBleu(NumericOnlyOption, evaluate.Metric):
    def _info(self):
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION,
                           "https://github.com/tensorflow/tensor2tensor/blob/master/tensor2tensor/utils/get_ende_bleu.sh",
                           ["https://github.com/hplt-project/sacremoses", "https://github.com/mjpost/sacrebleu"],
                           ["https://arxiv.org/abs/1706.03762"])

    def _compute(self, predictions, references, lang="de", split_compounds=True, tokenize_references=True,
                 lowercase=False):
        hypotheses = preprocess(predictions, lang, tokenize=True, compounds=split_compounds)
        streams = [
            preprocess(stream, lang, tokenize=tokenize_references, compounds=split_compounds)
            for stream in transpose_references(references)
        ]
        bleu = BLEU(lowercase=lowercase, tokenize="none", smooth_method="none", force=True)
        result = bleu.corpus_score(hypotheses, streams)
        steps = [f"moses-tok({lang},sacremoses-{sacremoses.__version__})"]
        if not tokenize_references:
            steps[0] += "[hyp-only]"
        if split_compounds:
            steps.append("atat-compound-split")
        return self._fields(bleu_fields(result, f"pretok:{'+'.join(steps)}|{bleu.get_signature()}"))
