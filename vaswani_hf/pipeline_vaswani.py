"""A "translation" pipeline for the Transformer (Vaswani et al., 2017), for transformers 5.

transformers 5 removed its `translation`, `translation_xx_to_yy` and `text2text-generation` pipelines. This class
brings those task names back for this model: `VaswaniConfig` names them in `config.json` (`custom_pipelines`, from
`custom_pipelines()` here), and configuration_vaswani.py imports this file, so every `save_pretrained` of the model
or its config (`Trainer.save_model`, PEFT's merged model, `Pipeline.save_pretrained`, ...) copies it next to the
weights, as transformers copies a registered class's relative imports. On a machine without `vaswani_hf`

    pipe = transformers.pipeline("translation", model=folder, trust_remote_code=True)
    pipe("A man is riding a bike.")          # -> [{"translation_text": "..."}]
    pipe(["One.", "", "Two."], batch_size=8)  # -> [{"translation_text": ...}, {"translation_text": ""}, ...]
    transformers.pipeline("text2text-generation", model=folder, trust_remote_code=True)  # -> "generated_text"

works; `translation_en_to_de`-style names work where config.json names the pair (`custom_pipelines("en", "de")`;
the Hub folder of a training run does). This file imports only torch and transformers (no `vaswani_hf`, no
relative imports).

Decoding settings come from the model's `generation_config`, which for this model holds the paper's Section 6.1
settings (beam size 4, length penalty alpha = 0.6, maximum output length = input length + 50, early termination);
any `generate()` argument (`num_beams=1`, `length_penalty=...`, `max_new_tokens=...`) can be passed to the pipeline's
constructor or to a call and overrides them.

Empty-input rule (the same as `vaswani_hf.inference.translate`): an input that is empty or only whitespace
translates to "" and is not decoded (a model fed nothing but `</s>` would still emit some sentence). Other inputs are
stripped of leading/trailing whitespace before tokenization.
"""

import torch
from transformers import Pipeline

__all__ = ["VaswaniTranslationPipeline", "TASKS", "custom_pipelines", "register_pipeline_tasks"]

# The task names this pipeline answers to: transformers 4's names for what it did (5 removed them). A
# "translation_xx_to_yy" name is added per language pair (`custom_pipelines(source_lang, target_lang)`).
TASKS = ("translation", "text2text-generation")
_IMPL = "pipeline_vaswani.VaswaniTranslationPipeline"  # module.Class, as `Pipeline.save_pretrained` writes it


def custom_pipelines(source_lang: str | None = None, target_lang: str | None = None) -> dict:
    """The `custom_pipelines` entry of config.json, in the form `Pipeline.save_pretrained` writes it: every name in
    `TASKS`, plus `translation_{source_lang}_to_{target_lang}` when both languages are given. `pipeline(task,
    model=folder, trust_remote_code=True)` looks a task up there by its exact name."""
    tasks = list(TASKS)
    if source_lang and target_lang:
        tasks.append(f"translation_{source_lang}_to_{target_lang}")
    return {task: {"impl": _IMPL, "pt": ["AutoModelForSeq2SeqLM"], "type": "text"} for task in tasks}


def register_pipeline_tasks(source_lang: str | None = None, target_lang: str | None = None) -> None:
    """Register `VaswaniTranslationPipeline` under every task name of `custom_pipelines(...)` in transformers'
    `PIPELINE_REGISTRY` (idempotent), so that `Pipeline.save_pretrained` writes all of them into config.json:
    `register_pipeline` keeps only the last task per class, so the class's `_registered_impl` is set to all."""
    from transformers import AutoModelForSeq2SeqLM
    from transformers.pipelines import PIPELINE_REGISTRY

    tasks = list(custom_pipelines(source_lang, target_lang))
    for task in tasks:
        if PIPELINE_REGISTRY.supported_tasks.get(task, {}).get("impl") is not VaswaniTranslationPipeline:
            PIPELINE_REGISTRY.register_pipeline(task, pipeline_class=VaswaniTranslationPipeline,
                                                pt_model=AutoModelForSeq2SeqLM, type="text")
    registered = {task: info for task, info in PIPELINE_REGISTRY.supported_tasks.items()
                  if info.get("impl") is VaswaniTranslationPipeline}
    VaswaniTranslationPipeline._registered_impl = registered


class VaswaniTranslationPipeline(Pipeline):
    """Text -> translated text with `model.generate` (beam search with the model's generation config by default).

    Call arguments (constructor or call):
        truncation: truncate inputs longer than the tokenizer's `model_max_length` (default False: the model's
            sinusoidal positions extrapolate, Section 3.5).
        return_text / return_tensors: return `translation_text` (default) and/or `translation_token_ids`.
        clean_up_tokenization_spaces: passed to `tokenizer.decode`.
        any other keyword: a `generate()` argument (`num_beams`, `length_penalty`, `num_return_sequences`, ...).

    Returns one list of records per input (one record per returned sequence); for a list of strings with one
    sequence each, a flat list of records, as the transformers 4 translation pipeline did. Records are keyed
    `translation_text` / `translation_token_ids`, or `generated_text` / `generated_token_ids` when the pipeline was
    built as "text2text-generation" (transformers 4's keys for each task).
    """

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    @property
    def return_name(self) -> str:
        return "generated" if self.task == "text2text-generation" else "translation"

    def _sanitize_parameters(
        self,
        truncation=None,
        return_text=None,
        return_tensors=None,
        clean_up_tokenization_spaces=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        postprocess_params = {}
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if return_text is not None:
            postprocess_params["return_text"] = return_text
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, dict(generate_kwargs), postprocess_params

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, str):
            return super().__call__(inputs, *args, **kwargs)
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        result = super().__call__(inputs, *args, **kwargs)
        if isinstance(inputs, list) and all(isinstance(x, str) for x in inputs) and all(len(r) == 1 for r in result):
            return [r[0] for r in result]
        return result

    def preprocess(self, text, truncation=False):
        if not isinstance(text, str):
            raise TypeError(f"translation pipeline: expected a string or a list of strings, got {type(text).__name__}")
        stripped = text.strip()
        model_inputs = self.tokenizer(stripped, return_tensors="pt", truncation=truncation)
        model_inputs = {"input_ids": model_inputs["input_ids"], "attention_mask": model_inputs["attention_mask"]}
        model_inputs["is_empty"] = torch.tensor([not stripped])  # (1,); batched to (B,) by the collate function
        return model_inputs

    def _forward(self, model_inputs, **generate_kwargs):
        is_empty = model_inputs.pop("is_empty").bool().reshape(-1)  # (B,)
        input_ids = model_inputs["input_ids"]  # (B, S)
        batch = input_ids.shape[0]
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        num_return = generate_kwargs.get("num_return_sequences")
        if num_return is None and generate_kwargs.get("generation_config") is not None:
            num_return = generate_kwargs["generation_config"].num_return_sequences
        if num_return is None:
            num_return = self.model.generation_config.num_return_sequences or 1
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        output_ids = torch.full((batch, num_return, 1), pad, dtype=torch.long, device=input_ids.device)
        keep = (~is_empty).nonzero().reshape(-1).to(input_ids.device)
        if keep.numel():
            inputs = {key: value[keep] for key, value in model_inputs.items()}
            generated = self.model.generate(**inputs, **generate_kwargs)  # (b * n, T)
            generated = generated.reshape(keep.numel(), -1, generated.shape[-1])  # (b, n, T)
            full = torch.full((batch, generated.shape[1], generated.shape[2]), pad, dtype=generated.dtype,
                              device=generated.device)
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
                text = "" if empty else self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                ).strip()
                record[f"{self.return_name}_text"] = text
            records.append(record)
        return records
