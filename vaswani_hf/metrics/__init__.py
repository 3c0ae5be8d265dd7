"""`evaluate` metric modules shipped inside the package, loaded by path (works offline) with
:func:`vaswani_hf.evaluation.load_metric`; each sub-folder holds one script named like it (`evaluate.load`'s rule):
``sacrebleu_local`` (sacreBLEU BLEU with its signature), ``chrf_local`` (chrF / chrF++), ``tok_bleu`` (the paper's
tokenized BLEU, as tensor2tensor's ``get_ende_bleu.sh``). What they share: `vaswani_hf.metrics.common`.
"""

# The sacreBLEU tokenizers the recipe key `bleu_tokenize` and `vaswani-evaluate --tokenize` accept, checked before
# anything is translated (sacreBLEU itself reports an unknown name only when it scores). The mecab ones need their
# extra packages and flores101/200 download a SentencePiece model on first use.
SACREBLEU_TOKENIZERS = ("13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200")
