"""Translate with the Transformer (Vaswani et al., 2017) through a "translation" pipeline, in transformers 5.

transformers 5 removed its `translation`, `translation_xx_to_yy` and `text2text-generation` pipelines. This class
brings those task names back for this model, through two of transformers' own mechanisms:

- config.json names the pipeline in `custom_pipelines` (written by `configuration_vaswani.custom_pipelines`) under
  the one task "translation", the form `Pipeline.save_pretrained` writes. `pipeline(model=folder,
  trust_remote_code=True)` and `pipeline("translation", model=folder, trust_remote_code=True)` then load this class
  from the folder through transformers' own dynamic pipelines, with nothing registered; transformers infers a task
  from a config only when it names exactly one, so that the first call needs no task name. configuration_vaswani.py
  imports this file where a pipeline loads the config, and transformers copies a saved class's relative imports next
  to the weights, so every `save_pretrained` of the model or its config (`Trainer.save_model`, PEFT's merged model,
  `Pipeline.save_pretrained`, ...) copies it too.
- `register_pipeline_tasks()` registers the class in transformers' `PIPELINE_REGISTRY` under "translation" and
  "text2text-generation", and makes every "translation_{src}_to_{tgt}" name an alias of "translation", whatever the
  pair. It runs where a pipeline is asked for or where vaswani_hf is imported, never on loading this file: `import
  vaswani_hf` runs it, and so does `VaswaniConfig.from_pretrained` where `transformers.pipeline` loads the config of a
  folder or Hub id (before transformers resolves the task name). Building or loading a config for anything else, or
  loading this file, changes nothing in transformers, as with any of transformers' own models.

The registration needs two monkeypatches, both in `register_pipeline_tasks`, because no public mechanism of
transformers 5 lets a removed task name back in. transformers refuses those names in `_resolve_deprecated_task`
(from `pipelines.REMOVED_TASKS`) before it looks at the registry, so they are taken out of that dict; and the
registry's `task_aliases` dict knows exact names only, so it is replaced by a copy, `_PairTaskAliases`, that also maps
any "translation_{src}_to_{tgt}" to "translation". Without them, `pipeline("translation", model=model,
tokenizer=tokenizer)` with objects in memory (no config.json to read) cannot work. The class then decides, with the
task name as given: any other model gets the KeyError transformers itself gives for that name; a model of this type
whose config knows another pair (`langs`) gets a ValueError naming both pairs; and one whose config knows no pair is
accepted, since it translates its one pair whatever the name says.

On a machine without `vaswani_hf`:

    pipe = transformers.pipeline(model=folder, trust_remote_code=True)   # the task is "translation"
    pipe("A man is riding a bike.")          # -> [{"translation_text": "..."}]
    pipe(["One.", "", "Two."], batch_size=8)  # -> [{"translation_text": ...}, {"translation_text": ""}, ...]
    transformers.pipeline("text2text-generation", model=folder, trust_remote_code=True)  # -> "generated_text"
    transformers.pipeline("translation", model=model, tokenizer=tokenizer)  # objects in memory, once a pipeline
    # of a folder has registered the task names (with vaswani_hf, importing it has); before that, transformers
    # answers as for any model whose task it removed

Names such as `translation_en_to_de` and transformers 4's `src_lang=` / `tgt_lang=` call arguments are checked against
the pair the config knows (`langs`; the Hub folder of a training run has it). A call may not ask for generate()'s
extra outputs (`return_dict_in_generate=True`), because the pipeline returns texts; call `model.generate` for scores.

The decoding settings come from the model's `generation_config`, which for this model holds the paper's Section 6.1
settings (beam size 4, length penalty alpha = 0.6, a maximum output length of the input length + 50, early
termination). Any `generate()` argument (`num_beams=1`, `length_penalty=...`, `max_new_tokens=...`) can be passed to
the pipeline's constructor or to a call, and it overrides them.

Empty inputs follow the same rule as `vaswani_hf.translation.inference.translate`: an input that is empty or only whitespace
translates to "" and is not decoded, because a model fed nothing but `</s>` would still emit some sentence. Other
inputs are stripped of leading and trailing whitespace before tokenization.

This file imports only torch, transformers and configuration_vaswani.py (the task names a config holds; no
`vaswani_hf`): it runs under `trust_remote_code` where the package is not installed.
"""

import torch
from transformers import Pipeline

from .configuration_vaswani import PAIR_TASK, TASK, custom_pipelines, pair_task, pipeline_settings

__all__ = [
    "VaswaniTranslationPipeline",
    "TASK",
    "TASKS",
    "custom_pipelines",
    "pipeline_settings",
    "register_pipeline_tasks",
    "pair_task",
]

# The task names this pipeline answers to: transformers 4's names for what it does, which transformers 5 removed.
# TASK is the one that config.json names (configuration_vaswani.custom_pipelines); every "translation_xx_to_yy" name
# is an alias of TASK as well (`_PairTaskAliases`).
TASKS = (TASK, "text2text-generation")
_MIGRATION = "https://github.com/huggingface/transformers/blob/main/MIGRATION_GUIDE_V5.md#pipelines"


class _PairTaskAliases(dict):
    """Replace transformers' `PIPELINE_REGISTRY.task_aliases` with a dict of the same entries in which every
    "translation_{src}_to_{tgt}" name is also an alias of "translation", so that `pipeline()` hands any such name,
    unchanged, to the class that "translation" names. The registry looks names up with `in` and `[]` only
    (`PipelineRegistry.check_task`), so those are what this dict answers.

    It also keeps what transformers says of the names this file takes out of `REMOVED_TASKS` (`removed_advice`).
    Every copy of this file that runs (the package's, `trust_remote_code` copies) shares this one dict, so other
    models still get transformers' own refusal under these names.
    """

    # The mark `register_pipeline_tasks` looks for, so that the aliases are replaced once whichever copy of this file
    # made them (a class check would miss another copy's class).
    vaswani_pair_tasks = True

    def __init__(self, aliases=()):
        super().__init__(aliases)
        self.removed_advice: dict = dict(getattr(aliases, "removed_advice", {}))

    def __contains__(self, task) -> bool:
        return dict.__contains__(self, task) or (isinstance(task, str) and PAIR_TASK.match(task) is not None)

    def __missing__(self, task):
        if isinstance(task, str) and PAIR_TASK.match(task):
            return TASK
        raise KeyError(task)

    def get(self, task, default=None):
        return self[task] if task in self else default


def register_pipeline_tasks(langs=None) -> None:
    """Let `transformers.pipeline` build `VaswaniTranslationPipeline` under every name in `TASKS` and every
    "translation_{src}_to_{tgt}" name. Running it again changes nothing. `langs` is accepted from older callers but
    not needed: every pair name resolves, and the class checks the pair.

    The class is registered with transformers' `PIPELINE_REGISTRY.register_pipeline` where no copy of it (the
    package's, or a `trust_remote_code` copy) holds the name yet. Then come the two monkeypatches the module
    docstring explains: the names are taken out of `transformers.pipelines.REMOVED_TASKS` (a dict that exists from
    transformers 5.2x; 5.17 has none), which `pipeline()` checks before the registry, and the registry's
    `task_aliases` becomes a `_PairTaskAliases` with the same entries. The class's `_registered_impl`, which
    `Pipeline.save_pretrained` writes into config.json, is `TASK` alone, the one task a config names.
    """
    from transformers import AutoModelForSeq2SeqLM, pipelines

    registry = pipelines.PIPELINE_REGISTRY
    if not getattr(registry.task_aliases, "vaswani_pair_tasks", False):
        registry.task_aliases = _PairTaskAliases(registry.task_aliases)
    removed = getattr(pipelines, "REMOVED_TASKS", {})
    for task in TASKS:
        if task in removed:
            registry.task_aliases.removed_advice.setdefault(task, removed.pop(task))
        impl = registry.supported_tasks.get(task, {}).get("impl")
        if getattr(impl, "__name__", None) != VaswaniTranslationPipeline.__name__:
            registry.register_pipeline(
                task, pipeline_class=VaswaniTranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
            )
    VaswaniTranslationPipeline._registered_impl = {
        TASK: {"impl": VaswaniTranslationPipeline, "pt": (AutoModelForSeq2SeqLM,), "type": "text"}
    }


def _transformers_refusal(task: str) -> KeyError:
    """Return the KeyError transformers itself gives for `task` (one of `TASKS` or a pair name) where this pipeline is
    not registered: "has been removed" with transformers' advice (from 5.2x), or "Unknown task" (earlier 5.x), so that
    another model sees exactly what it would see without this file."""
    from transformers import pipelines

    registry = pipelines.PIPELINE_REGISTRY
    removed = TASK if PAIR_TASK.match(task) else task
    advice = getattr(registry.task_aliases, "removed_advice", {})
    if removed in advice:
        return KeyError(
            f"The task {task} has been removed from transformers. {advice[removed]} See the migration "
            f"guide for more details: {_MIGRATION}"
        )
    others = sorted(name for name in registry.get_supported_tasks() if name not in TASKS and not PAIR_TASK.match(name))
    return KeyError(f"Unknown task {task}, available tasks are {others}")


def _refuse_dict_outputs(generate_kwargs: dict) -> None:
    """Refuse a call that asks for generate()'s dict outputs (scores, attentions), with a ValueError saying what to
    call instead. Those outputs are per beam and per step and cover the non-empty inputs only, so they would not line
    up with the pipeline's inputs, and the pipeline returns texts."""
    if generate_kwargs.get("return_dict_in_generate"):
        raise ValueError(
            "translation pipeline: return_dict_in_generate is not supported: the pipeline returns "
            'texts; call model.generate(**tokenizer(texts, return_tensors="pt", padding=True), '
            "return_dict_in_generate=True, output_scores=True) for scores"
        )


class VaswaniTranslationPipeline(Pipeline):
    """Translate text with `model.generate`, by default with the model's generation config (beam search with the
    paper's settings).

    Arguments, to the constructor or to a call:
        truncation: what happens to an input of more tokens than the config's `max_position_embeddings` (the
            translate tool's limit too). By default (False) such an input is a ValueError naming both numbers; True
            cuts it to that length.
        return_text / return_tensors: return `translation_text` (the default) and/or `translation_token_ids`.
        clean_up_tokenization_spaces: passed to `tokenizer.decode`.
        src_lang / tgt_lang: transformers 4's translation arguments. The model translates one fixed pair, so they
            select nothing: they are checked against the pair the model's config knows (`langs`; a task name
            "translation_xx_to_yy" is checked the same way), and a different pair is a ValueError naming both.
            Where the config knows no pair they are accepted and ignored.
        any other keyword: a `generate()` argument (`num_beams`, `length_penalty`, `num_return_sequences`, ...),
            except `return_dict_in_generate=True`, which is a ValueError because the pipeline returns texts (call
            `model.generate` for scores). Where the model's own generation config sets it, the pipeline uses the
            returned sequences.

    Returns one list of records per input, one record per returned sequence. For a list of strings with one sequence
    each it returns a flat list of records, as the transformers 4 translation pipeline did. The records are keyed
    `translation_text` / `translation_token_ids`, or `generated_text` / `generated_token_ids` when the pipeline was
    built as "text2text-generation" (transformers 4's keys for each task).
    """

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if getattr(self.model.config, "model_type", None) != "vaswani":
            # The names are back for this model only: any other model gets transformers' own refusal, unchanged.
            raise _transformers_refusal(self.task or TASK)
        if self.tokenizer is None:
            raise ValueError(
                "translation pipeline: no tokenizer; pass `tokenizer=` (the model's, e.g. "
                "`AutoTokenizer.from_pretrained(FOLDER)`) to `pipeline(...)`"
            )
        # The constructor's generate() arguments, and those of a generation config it was given.
        asked = dict(kwargs)
        if getattr(kwargs.get("generation_config"), "return_dict_in_generate", False):
            asked["return_dict_in_generate"] = True
        _refuse_dict_outputs(asked)
        match = PAIR_TASK.match(self.task or "")
        if match:
            self._check_languages(
                match.group(1),
                match.group(2),
                f"the task {self.task!r}",
                f'use the task "{TASK}" or a model for that pair',
            )

    @property
    def return_name(self) -> str:
        return "generated" if self.task == "text2text-generation" else "translation"

    def _check_languages(
        self,
        src_lang,
        tgt_lang,
        asked_by="src_lang/tgt_lang",
        remedy="drop src_lang/tgt_lang or use a model for that pair",
    ) -> None:
        """Refuse a language pair other than the model's (config `langs`) with a ValueError naming both. Where the
        config knows no pair, any is accepted: the model translates its one pair whatever the arguments say."""
        langs = getattr(self.model.config, "langs", None)
        if pair_task(langs) is None or (src_lang is None and tgt_lang is None):
            return
        asked = (src_lang or langs[0], tgt_lang or langs[1])
        if asked != tuple(langs):
            raise ValueError(
                f"translation pipeline: this model translates {langs[0]} -> {langs[1]} (config `langs`), but "
                f"{asked_by} asks for {asked[0]} -> {asked[1]}; {remedy}"
            )

    def _sanitize_parameters(
        self,
        truncation=None,
        return_text=None,
        return_tensors=None,
        clean_up_tokenization_spaces=None,
        src_lang=None,
        tgt_lang=None,
        **generate_kwargs,
    ):
        self._check_languages(src_lang, tgt_lang)
        _refuse_dict_outputs(generate_kwargs)
        postprocess = dict(
            return_tensors=return_tensors,
            return_text=return_text,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
        )
        return (
            {} if truncation is None else {"truncation": truncation},
            dict(generate_kwargs),
            {key: value for key, value in postprocess.items() if value is not None},
        )

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, str):
            return super().__call__(inputs, *args, **kwargs)
        inputs = list(inputs) if isinstance(inputs, tuple) else inputs
        if isinstance(inputs, list) and not inputs:  # Nothing to translate; transformers' own call fails on [].
            return []
        result = super().__call__(inputs, *args, **kwargs)
        if isinstance(inputs, list) and all(isinstance(x, str) for x in inputs) and all(len(r) == 1 for r in result):
            return [r[0] for r in result]
        return result

    def preprocess(self, text, truncation=False):
        if not isinstance(text, str):
            raise TypeError(f"translation pipeline: expected a string or a list of strings, got {type(text).__name__}")
        stripped = text.strip()
        limit = self.model.config.max_position_embeddings  # The translate tool's limit too (1,024 by default).
        model_inputs = self.tokenizer(
            stripped, return_tensors="pt", truncation=truncation, **({"max_length": limit} if truncation else {})
        )
        model_inputs = {"input_ids": model_inputs["input_ids"], "attention_mask": model_inputs["attention_mask"]}
        if (tokens := model_inputs["input_ids"].shape[-1]) > limit:
            raise ValueError(
                f"translation pipeline: an input of {tokens} tokens, but the model takes at most {limit} "
                "(config max_position_embeddings); shorten or split it, or pass truncation=True"
            )
        # A (1,) flag; the pipeline's collate function batches it to (B,), so that _forward knows which rows to skip.
        model_inputs["is_empty"] = torch.tensor([not stripped])
        return model_inputs

    def _forward(self, model_inputs, **generate_kwargs):
        is_empty = model_inputs.pop("is_empty").bool().reshape(-1)  # (B,)
        input_ids = model_inputs["input_ids"]  # (B, S)
        batch = input_ids.shape[0]
        if hasattr(self, "_prepare_generate_kwargs"):
            # transformers from 5.2x merges the call's settings over the constructor's itself.
            generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        elif "generation_config" not in generate_kwargs:
            # Earlier 5.x (the GPU image's 5.17) does not: the pipeline's own generation config is passed explicitly.
            generate_kwargs = {"generation_config": self.generation_config, **generate_kwargs}
        num_return = (
            generate_kwargs.get("num_return_sequences")
            or getattr(generate_kwargs.get("generation_config"), "num_return_sequences", None)
            or self.model.generation_config.num_return_sequences
            or 1
        )
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        output_ids = torch.full((batch, num_return, 1), pad, dtype=torch.long, device=input_ids.device)
        keep = (~is_empty).nonzero().reshape(-1).to(input_ids.device)
        if keep.numel():
            inputs = {key: value[keep] for key, value in model_inputs.items()}
            generated = self.model.generate(**inputs, **generate_kwargs)  # (b * n, T)
            # A generation config that asks generate() for a dict (return_dict_in_generate): take its sequences.
            generated = getattr(generated, "sequences", generated)
            generated = generated.reshape(keep.numel(), -1, generated.shape[-1])  # (b, n, T)
            full = torch.full(
                (batch, generated.shape[1], generated.shape[2]), pad, dtype=generated.dtype, device=generated.device
            )
            full[keep] = generated
            output_ids = full
        return {"output_ids": output_ids, "is_empty": is_empty}

    def postprocess(self, model_outputs, return_text=True, return_tensors=False, clean_up_tokenization_spaces=None):
        empty = bool(model_outputs["is_empty"].reshape(-1)[0])
        records = []
        for output_ids in model_outputs["output_ids"][0]:  # (n, T)
            record = {}
            if return_tensors:
                record[f"{self.return_name}_token_ids"] = output_ids.new_zeros(0) if empty else output_ids
            if return_text:
                text = (
                    ""
                    if empty
                    else self.tokenizer.decode(
                        output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                    ).strip()
                )
                record[f"{self.return_name}_text"] = text
            records.append(record)
        return records
