"""Other formats of a trained model: transformers' native `MarianMTModel` (`marian`: exact conversion both ways and
a Hub-ready Marian folder) and CTranslate2 (`ctranslate2_spec`: the export; `ctranslate2`: translating with it).

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
