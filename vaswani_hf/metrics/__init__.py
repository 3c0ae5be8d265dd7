"""Ship `evaluate` metric modules inside the package, to be loaded by path so that they work offline.

Each sub-folder holds one script named like the folder, which is `evaluate.load`'s rule for local modules:

- ``sacrebleu_local``: sacreBLEU corpus BLEU with its signature;
- ``chrf_local``: chrF or chrF++ through sacreBLEU, with its signature;
- ``tok_bleu``: the paper's tokenized BLEU for EN-DE as tensor2tensor's ``get_ende_bleu.sh`` computed it (Moses
  tokenization, ``##AT##`` compound splitting, multi-bleu-style BLEU).

Load them with :func:`vaswani_hf.metrics.scores.load_metric` (``evaluate.load(<folder path>)``); the sub-folders are also
regular Python packages, so that their helpers can be imported directly, and what they share is
`vaswani_hf.metrics.common`. Loaded with ``numeric_only=True`` (``load_metric(name, numeric_only=True)``), a module
returns only the statistics that vary with the data, as floats, which evaluate's ``strategy="bootstrap"`` needs; it
keeps the signature in ``metric.string_fields`` and the fixed settings (chrF's ``char_order``, ...) in
``metric.settings`` (`common.TranslationMetric`).
"""

# These are the sacreBLEU tokenizers that the recipe key `bleu_tokenize` and evaluate's `--tokenize` accept; the value
# is checked before anything is translated.
SACREBLEU_TOKENIZERS = ("13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200")
