"""`evaluate` metric modules shipped inside the package, loaded by path (works offline).

Each sub-folder holds one script named like the folder (`evaluate.load`'s rule for local modules):

- ``sacrebleu_local``: sacreBLEU corpus BLEU with its signature.
- ``chrf_local``: chrF / chrF++ via sacreBLEU, with its signature.
- ``tok_bleu``: the paper's tokenized BLEU for EN-DE as tensor2tensor's ``get_ende_bleu.sh`` computed it
  (Moses tokenization, ``##AT##`` compound splitting, multi-bleu-style BLEU).

Load them with :func:`vaswani_hf.evaluation.load_metric` (``evaluate.load(<folder path>)``); the sub-folders are
also regular Python packages so their helpers can be imported directly. Loaded with ``numeric_only=True``
(``load_metric(name, numeric_only=True)``), a module returns only the statistics that vary with the data, as floats,
which evaluate's ``strategy="bootstrap"`` needs, and keeps the signature in ``metric.string_fields`` and the fixed
settings (chrF's ``char_order``, ...) in ``metric.settings`` (:class:`vaswani_hf.metrics.common.NumericOnlyOption`).
"""

# The sacreBLEU tokenizers the recipe key `bleu_tokenize` and `vaswani-evaluate --tokenize` accept, checked before
# anything is translated (sacreBLEU itself reports an unknown name only when it scores). The mecab ones need their
# extra packages and flores101/200 download a SentencePiece model on first use.
SACREBLEU_TOKENIZERS = ("13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200")
