"""A "translation" pipeline for the Transformer (Vaswani et al., 2017), for transformers 5.

transformers 5 removed its `translation`, `translation_xx_to_yy` and `text2text-generation` pipelines. This class
brings those task names back for this model, with transformers' own mechanisms: config.json names the pipeline
(`custom_pipelines()`: the one task "translation", so that `pipeline(model=folder, trust_remote_code=True)` infers it),
and configuration_vaswani.py imports this file, so every `save_pretrained` copies it next to the weights. Loading
this file (with the package, or as remote code when a config is loaded with `trust_remote_code`, before transformers
resolves the task name) runs `register_pipeline_tasks()` once, which registers the class under "translation" and
"text2text-generation" and makes every "translation_{src}_to_{tgt}" an alias of "translation"; building a config
touches nothing outside itself, as any transformers config. Two monkeypatches make
`pipeline("translation", model=model, tokenizer=tokenizer)` work with objects in memory: the names are taken out of
`pipelines.REMOVED_TASKS` (checked before the registry), and the registry's `task_aliases` becomes a
`_PairTaskAliases`. The class then decides: any other model gets transformers' own KeyError for that name, a model
whose config knows another pair (`langs`) a ValueError naming both pairs, one that knows no pair is accepted.

    pipe = transformers.pipeline(model=folder, trust_remote_code=True)   # the task is "translation"
    pipe(["One.", "", "Two."], batch_size=8)  # -> [{"translation_text": ...}, {"translation_text": ""}, ...]
    transformers.pipeline("text2text-generation", model=folder, trust_remote_code=True)  # -> "generated_text"

Decoding follows the model's `generation_config` (Section 6.1: beam 4, alpha 0.6, input length + 50); any
`generate()` argument overrides it, except `return_dict_in_generate=True` (the pipeline returns texts). An empty or
whitespace-only input translates to "" without decoding, as in `vaswani_hf.inference.translate`; others are stripped.
This file imports only torch and transformers (no `vaswani_hf`, no relative imports).
"""

import re

import torch
from transformers import Pipeline

__all__ = [
    "VaswaniTranslationPipeline",
    "TASK",
    "TASKS",
    "custom_pipelines",
    "pipeline_settings",
    "register_pipeline_tasks",
    "pair_task",
]

TASK = "translation"  # the one task config.json names: `pipeline(model=folder)` infers it
# The task names this pipeline answers to: transformers 4's names for what it did (5 removed them); every
# "translation_xx_to_yy" name is an alias of TASK (`_PairTaskAliases`).
TASKS = (TASK, "text2text-generation")
_IMPL = "pipeline_vaswani.VaswaniTranslationPipeline"  # module.Class, as `Pipeline.save_pretrained` writes it
_PAIR_TASK = re.compile(r"^translation_(.+)_to_(.+)$")
_MIGRATION = "https://github.com/huggingface/transformers/blob/main/MIGRATION_GUIDE_V5.md#pipelines"


class _PairTaskAliases(dict):
    """transformers' `PIPELINE_REGISTRY.task_aliases` (the same entries, looked up with `in` and `[]` only) in which
    every "translation_{src}_to_{tgt}" is also an alias of "translation". It keeps what transformers says of the
    names taken out of `REMOVED_TASKS` (`removed_advice`), shared by every copy of this file, so that other models
    still get transformers' own refusal under these names."""

    vaswani_pair_tasks = True  # the mark `register_pipeline_tasks` checks, whichever copy of this file made it

    def __init__(self, aliases=()):
        super().__init__(aliases)
        self.removed_advice: dict = dict(getattr(aliases, "removed_advice", {}))

    def __contains__(self, task) -> bool:
        return dict.__contains__(self, task) or (isinstance(task, str) and _PAIR_TASK.match(task) is not None)

    def __missing__(self, task):
        if isinstance(task, str) and _PAIR_TASK.match(task):
            return TASK
        raise KeyError(task)

    def get(self, task, default=None):
        return self[task] if task in self else default


def pair_task(langs) -> str | None:
    """ "translation_{src}_to_{tgt}" for a config's `langs` ([src, tgt]); None where no pair is known."""
    if not langs or len(langs) != 2 or not all(isinstance(lang, str) and lang for lang in langs):
        return None
    return f"translation_{langs[0]}_to_{langs[1]}"


def custom_pipelines() -> dict:
    """The `custom_pipelines` entry of config.json, in the form `Pipeline.save_pretrained` writes it: the one task
    `TASK`. `pipeline(task, model=folder, trust_remote_code=True)` looks a task up there by its exact name, and
    `pipeline(model=folder, trust_remote_code=True)` takes the only one; the other names come from the registry."""
    return {TASK: {"impl": _IMPL, "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}}


def pipeline_settings(pipelines: dict | None, langs) -> tuple[dict, list | None]:
    """A config's (`custom_pipelines`, `langs`): None -> `custom_pipelines()`; a config.json written before
    `langs` existed (this pipeline under several names, the pair as a "translation_xx_to_yy" key) -> this
    pipeline under `TASK` only, plus other pipelines it names, and the pair moved to `langs`."""
    if pipelines is None:
        return custom_pipelines(), langs
    ours = [
        task
        for task, info in pipelines.items()
        if isinstance(info, dict) and str(info.get("impl", "")).endswith(".VaswaniTranslationPipeline")
    ]
    if not ours:
        return pipelines, langs
    for task in ours:
        match = _PAIR_TASK.match(task)
        if match and not langs:
            langs = [match.group(1), match.group(2)]
    kept = {task: info for task, info in pipelines.items() if task not in ours}
    return {**custom_pipelines(), **kept}, langs


def register_pipeline_tasks(langs=None) -> None:
    """Let `transformers.pipeline` build `VaswaniTranslationPipeline` under every name in `TASKS` and every
    "translation_{src}_to_{tgt}", idempotently (module docstring; `langs` is not needed: the class checks the pair).
    `REMOVED_TASKS` exists from transformers 5.2x (5.17 has none). The class's `_registered_impl`, which
    `Pipeline.save_pretrained` writes into config.json, is `TASK` alone."""
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
    """The KeyError transformers itself gives for `task` (one of `TASKS` or a pair name) where this pipeline is not
    registered: "has been removed" with transformers' advice (>= 5.2x), or "Unknown task" (earlier 5.x)."""
    from transformers import pipelines

    registry = pipelines.PIPELINE_REGISTRY
    removed = TASK if _PAIR_TASK.match(task) else task
    advice = getattr(registry.task_aliases, "removed_advice", {})
    if removed in advice:
        return KeyError(
            f"The task {task} has been removed from transformers. {advice[removed]} See the migration "
            f"guide for more details: {_MIGRATION}"
        )
    others = sorted(
        name for name in registry.get_supported_tasks() if name not in TASKS and not _PAIR_TASK.match(name)
    )
    return KeyError(f"Unknown task {task}, available tasks are {others}")


def _refuse_dict_outputs(generate_kwargs: dict) -> None:
    """A call asking for generate()'s dict outputs (scores, attentions) gets a ValueError saying what to call: they
    are per beam and per step, for the non-empty inputs only, and the pipeline returns texts."""
    if generate_kwargs.get("return_dict_in_generate"):
        raise ValueError(
            "translation pipeline: return_dict_in_generate is not supported: the pipeline returns "
            'texts; call model.generate(**tokenizer(texts, return_tensors="pt", padding=True), '
            "return_dict_in_generate=True, output_scores=True) for scores"
        )


class VaswaniTranslationPipeline(Pipeline):
    """Text -> translated text with `model.generate` (the model's generation config by default).

    Call arguments (constructor or call): truncation (default False: an input of more tokens than the config's
    max_position_embeddings, the translate tool's limit, is a ValueError; True cuts it there); return_text /
    return_tensors (`translation_text`, `translation_token_ids`); clean_up_tokenization_spaces; src_lang / tgt_lang
    (transformers 4's: checked against the config's `langs`, a different pair is a ValueError); any other keyword is a
    `generate()` argument. One list of records per input (one per returned sequence); for a list of strings with one
    sequence each, a flat list, as transformers 4 did. Built as "text2text-generation", the
    keys are `generated_text` / `generated_token_ids`.
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
        asked = dict(kwargs)  # the constructor's generate() arguments, and those of a generation config it was given
        if getattr(kwargs.get("generation_config"), "return_dict_in_generate", False):
            asked["return_dict_in_generate"] = True
        _refuse_dict_outputs(asked)
        match = _PAIR_TASK.match(self.task or "")
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
        """Refuse a language pair other than the model's (config `langs`), naming both; accept any where the
        config knows none (the model translates one pair whatever the arguments say)."""
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
        if isinstance(inputs, list) and not inputs:  # no sentence, no translation (transformers' call fails on [])
            return []
        result = super().__call__(inputs, *args, **kwargs)
        if isinstance(inputs, list) and all(isinstance(x, str) for x in inputs) and all(len(r) == 1 for r in result):
            return [r[0] for r in result]
        return result

    def preprocess(self, text, truncation=False):
        if not isinstance(text, str):
            raise TypeError(f"translation pipeline: expected a string or a list of strings, got {type(text).__name__}")
        stripped = text.strip()
        limit = self.model.config.max_position_embeddings  # the translate tool's limit (1,024 tokens by default)
        model_inputs = self.tokenizer(
            stripped, return_tensors="pt", truncation=truncation, **({"max_length": limit} if truncation else {})
        )
        model_inputs = {"input_ids": model_inputs["input_ids"], "attention_mask": model_inputs["attention_mask"]}
        if (tokens := model_inputs["input_ids"].shape[-1]) > limit:
            raise ValueError(
                f"translation pipeline: an input of {tokens} tokens, but the model takes at most {limit} "
                "(config max_position_embeddings); shorten or split it, or pass truncation=True"
            )
        model_inputs["is_empty"] = torch.tensor([not stripped])  # (1,); batched to (B,) by the collate function
        return model_inputs

    def _forward(self, model_inputs, **generate_kwargs):
        is_empty = model_inputs.pop("is_empty").bool().reshape(-1)  # (B,)
        input_ids = model_inputs["input_ids"]  # (B, S)
        batch = input_ids.shape[0]
        if hasattr(self, "_prepare_generate_kwargs"):  # transformers >= 5.2x: the call's settings over the init's
            generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        elif "generation_config" not in generate_kwargs:  # earlier 5.x (the GPU image's 5.17): the pipeline's own
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
            # a generation config that asks generate() for a dict (return_dict_in_generate): its sequences
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


# Loading this file makes its task names known (idempotent; see the module docstring): registered when the code is
# loaded, as transformers' own classes register themselves, never when a config is built.
register_pipeline_tasks()
