"""Provide the original Transformer (Vaswani et al., 2017) as a native Hugging Face transformers model.

Importing the package registers the model with transformers' Auto classes, so that
`AutoModelForSeq2SeqLM.from_pretrained(folder)` works without `trust_remote_code`. It also marks the classes so that
`save_pretrained` writes `auto_map` and copies the configuration and modeling files, and, through their relative
imports, the decoding and pipeline files. The same folder then also loads with `trust_remote_code=True` on a machine
without this package, where `pipeline(model=folder, trust_remote_code=True)` (task "translation") works too. Importing
also registers the pipeline's task names ("translation", "text2text-generation", "translation_xx_to_yy"), which
transformers 5 removed, so that `pipeline("translation", model=model, tokenizer=tokenizer)` works with objects in
memory (`pipeline_vaswani.register_pipeline_tasks`). Importing does nothing else: it leaves the process's descriptors, signals and working folder to the commands' runner,
vaswani_commands.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_vaswani import VaswaniConfig
from .inference import (
    load_for_inference,
    register_pipeline,
    save_pretrained_with_pipeline,
    translate,
    translation_pipeline,
)
from .modeling_vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniModel,
    VaswaniPreTrainedModel,
)
from .pipeline_vaswani import register_pipeline_tasks

__version__ = "0.1.0"

AutoConfig.register(VaswaniConfig.model_type, VaswaniConfig, exist_ok=True)
AutoModel.register(VaswaniConfig, VaswaniModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VaswaniConfig, VaswaniForConditionalGeneration, exist_ok=True)

VaswaniConfig.register_for_auto_class()
VaswaniModel.register_for_auto_class("AutoModel")
VaswaniForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
# The tasks "translation", "text2text-generation" and every "translation_xx_to_yy", which transformers 5 removed, map
# to VaswaniTranslationPipeline, so that `pipeline("translation", model=model, tokenizer=tokenizer)` works with
# objects in memory. Importing the package registers them; its Hub files alone register them only where a pipeline
# loads a config (pipeline_vaswani.py says why).
register_pipeline_tasks()

__all__ = [
    "VaswaniConfig",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "VaswaniPreTrainedModel",
    "translate",
    "translation_pipeline",
    "load_for_inference",
    "save_pretrained_with_pipeline",
    "register_pipeline",
]
