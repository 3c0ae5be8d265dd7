"""`evaluate` metric modules loaded by path (offline) with `vaswani_hf.evaluation.load_metric`; each sub-folder holds
one script named like it (`evaluate.load`'s rule). What they share: `vaswani_hf.metrics.common`.
"""

# The sacreBLEU tokenizers `bleu_tokenize` / `--tokenize` accept, checked before anything is translated
SACREBLEU_TOKENIZERS = ("13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200")
