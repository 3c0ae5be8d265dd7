"""`evaluate` metric modules shipped inside the package, loaded by path (works offline).

Each sub-folder holds one script named like the folder (`evaluate.load`'s rule for local modules):

- ``sacrebleu_local``: sacreBLEU corpus BLEU with its signature.
- ``chrf_local``: chrF / chrF++ via sacreBLEU, with its signature.
- ``tok_bleu``: the paper's tokenized BLEU for EN-DE as tensor2tensor's ``get_ende_bleu.sh`` computed it
  (Moses tokenization, ``##AT##`` compound splitting, multi-bleu-style BLEU).

Load them with :func:`vaswani_hf.evaluation.load_metric`; what they share (and the load-time option
``numeric_only`` for evaluate's bootstrap) is :class:`vaswani_hf.metrics.common.TranslationMetric`.
"""

# The sacreBLEU tokenizers the recipe key `bleu_tokenize` and `vaswani-evaluate --tokenize` accept, checked before
# anything is translated (sacreBLEU itself reports an unknown name only when it scores). The mecab ones need their
# extra packages and flores101/200 download a SentencePiece model on first use.
SACREBLEU_TOKENIZERS = ("13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200")
