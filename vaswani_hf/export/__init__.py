"""Export a trained model to other formats: transformers' native `MarianMTModel` and CTranslate2.

`marian` converts exactly to and from `MarianMTModel` and writes a Hub-ready Marian folder. `ctranslate2_spec` writes
the CTranslate2 export, and `ctranslate2` translates with it.

CTranslate2 is an optional dependency (`pip install 'vaswani_hf[ct2]'`), imported only when used."""

from .ctranslate2 import LENGTH_PENALTY_TYPES, CTranslate2Translator, translate_ctranslate2
from .ctranslate2_spec import to_ctranslate2
from .marian import export_marian, from_marian, marian_config_from, marian_generation_config, to_marian

__all__ = [
    "to_marian",
    "from_marian",
    "marian_config_from",
    "marian_generation_config",
    "export_marian",
    "to_ctranslate2",
    "CTranslate2Translator",
    "translate_ctranslate2",
    "LENGTH_PENALTY_TYPES",
]
