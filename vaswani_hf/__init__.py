"""Provide the original Transformer (Vaswani et al., 2017) as a native Hugging Face transformers model.

Importing the package registers the model with transformers' Auto classes, so that
`AutoModelForSeq2SeqLM.from_pretrained(folder)` works without `trust_remote_code`, and so does
`AutoModelForCausalLM.from_pretrained(folder)`, which loads the decoder stack alone (`VaswaniForCausalLM`). It also
marks the classes so that `save_pretrained` writes `auto_map` and copies the configuration and modeling files, and,
through their relative imports, the decoding and pipeline files. The same folder then also loads with
`trust_remote_code=True` on a machine without this package, where `pipeline(model=folder, trust_remote_code=True)`
(task "translation") works too. Importing also registers the pipeline's task names ("translation",
"text2text-generation", "translation_xx_to_yy"), which transformers 5 removed, so that
`pipeline("translation", model=model, tokenizer=tokenizer)` works with objects in memory
(`pipeline_vaswani.register_pipeline_tasks`). Importing does nothing else: it leaves the process's descriptors,
signals and working folder to the commands' runner, vaswani_commands.
"""

import importlib
import importlib.abc
import importlib.util
import sys

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from .configuration_vaswani import VaswaniConfig
from .modeling_vaswani import (
    VaswaniForCausalLM,
    VaswaniForConditionalGeneration,
    VaswaniModel,
    VaswaniPreTrainedModel,
)
from .pipeline_vaswani import register_pipeline_tasks
from .translation import (
    load_for_decoding,
    load_for_inference,
    register_pipeline,
    save_pretrained_with_pipeline,
    translate,
    translate_batch_fn,
    translation_pipeline,
)

__version__ = "0.1.0"

AutoConfig.register(VaswaniConfig.model_type, VaswaniConfig, exist_ok=True)
AutoModel.register(VaswaniConfig, VaswaniModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VaswaniConfig, VaswaniForConditionalGeneration, exist_ok=True)
AutoModelForCausalLM.register(VaswaniConfig, VaswaniForCausalLM, exist_ok=True)

VaswaniConfig.register_for_auto_class()
VaswaniModel.register_for_auto_class("AutoModel")
VaswaniForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
VaswaniForCausalLM.register_for_auto_class("AutoModelForCausalLM")
# The tasks "translation", "text2text-generation" and every "translation_xx_to_yy", which transformers 5 removed, map
# to VaswaniTranslationPipeline, so that `pipeline("translation", model=model, tokenizer=tokenizer)` works with
# objects in memory. Importing the package registers them; its Hub files alone register them only where a pipeline
# loads a config (pipeline_vaswani.py says why).
register_pipeline_tasks()

# Where each module of the decoding wing, the Space, the scores and the training line lived before they moved. Users' code, the
# docs of earlier releases and saved scripts import these names; each old name is the new module itself (the same
# object in sys.modules), so that a monkeypatch or an isinstance check through either name sees the same thing.
MOVED_MODULES = {
    "vaswani_hf.inference": "vaswani_hf.translation.inference",
    "vaswani_hf.translation_frontend": "vaswani_hf.translation.frontend",
    "vaswani_hf.translate_stream": "vaswani_hf.translation.stream",
    "vaswani_hf.translate_staging": "vaswani_hf.translation.staging",
    "vaswani_hf.space_logic": "vaswani_hf.space.logic",
    "vaswani_hf.space_facts": "vaswani_hf.space.facts",
    "vaswani_hf.space_payload": "vaswani_hf.space.payload",
    "vaswani_hf.hub.space": "vaswani_hf.space.push",
    "vaswani_hf.evaluation": "vaswani_hf.metrics.scores",
    "vaswani_hf.constraints": "vaswani_hf.settings",
    # The training line's stations, one a file: what a run's smaller modules held now lives in the station using it.
    "vaswani_hf.training.recipe_keys": "vaswani_hf.training.recipe",
    "vaswani_hf.training.recipe_files": "vaswani_hf.training.recipe",
    "vaswani_hf.training.sources": "vaswani_hf.training.data",
    "vaswani_hf.training.budget": "vaswani_hf.training.plan",
    "vaswani_hf.training.data_path": "vaswani_hf.training.plan",
    "vaswani_hf.training.schedule": "vaswani_hf.training.objective",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import an old module name (`MOVED_MODULES`) as the module that now holds its code.

    Written by hand because the standard library has no module alias; a finder is what `importlib` offers for
    names that are not files, and it imports the new module only when the old name is asked for.
    """

    def find_spec(self, name, path=None, target=None):
        if name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return importlib.import_module(MOVED_MODULES[spec.name])

    def exec_module(self, module):
        pass  # The new module has run already: the old name only points at it.


# First in line, so that no other finder (an older copy of the package on sys.path, say) answers for an old name.
if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())

__all__ = [
    "VaswaniConfig",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "VaswaniForCausalLM",
    "VaswaniPreTrainedModel",
    "translate",
    "translate_batch_fn",
    "translation_pipeline",
    "load_for_decoding",
    "load_for_inference",
    "save_pretrained_with_pipeline",
    "register_pipeline",
]
