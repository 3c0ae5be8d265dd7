"""Declare the paper's decoding settings once, and check them (Section 6.1: beam size 4, length penalty alpha = 0.6,
a maximum output length of the input length + 50, and "terminate early when possible"). They are checked in
generation_config.json when a model is loaded, in `generate()`'s arguments, and in the generation config `generate()`
runs with. transformers keeps its generation config (`generation/configuration_utils.py`) apart from its generation
loop (`generation/utils.py`); so does this model, whose loop is generation_vaswani.py.

Every setting is a field of `DecodingSettings` whose metadata declares its meaning and range, as
configuration_vaswani.py declares the model's settings, and it is checked by the same `check_setting`
(validation_vaswani.py). The defaults are the paper's (`default_generation_config` writes them into
generation_config.json), and vaswani_hf derives its command-line flags from these fields. A value of None means "not
set", so that transformers' default applies, except for max_length_b, where None turns the per-sentence limit off.

This file is copied next to the weights and runs under `trust_remote_code`, so it imports only torch, transformers
and its sibling files.
"""

import json
import os
from dataclasses import dataclass, field

import torch
from transformers.generation import GenerationConfig
from transformers.utils import GENERATION_CONFIG_NAME, cached_file

from .configuration_vaswani import MAX_POSITIONS, VaswaniConfig
from .validation_vaswani import SettingError, check_setting, declared_fields

LENGTH_PENALTY_TYPES = ("gnmt", "hf")
_IDS = {"token_id": True}


@dataclass
class DecodingSettings:
    """Declare the settings of generation_config.json and `generate()` that this model checks: the paper's first, then
    transformers' other decoding settings, which transformers itself checks late (in the middle of a search) or not at
    all. A value of None means "not set"."""

    # At most 1024 beams: a beam of a million hypotheses would exhaust the memory rather than fail with a message.
    num_beams: int | None = field(
        default=4, metadata={"help": "beam size (Section 6.1: 4; 1: greedy decoding)", "min": 1, "max": 1024}
    )
    num_return_sequences: int | None = field(
        default=None, metadata={"help": "hypotheses returned per sentence (at most num_beams)", "min": 1, "max": 1024}
    )
    length_penalty: float | None = field(
        default=0.6, metadata={"help": "alpha of the length penalty (Section 6.1: 0.6)", "min": -100, "max": 100}
    )
    length_penalty_type: str | None = field(
        default="gnmt",
        metadata={
            "help": "gnmt: ((5 + |Y|) / 6) ** alpha, the paper's (through t2t); hf: transformers' |Y| ** alpha",
            "choices": LENGTH_PENALTY_TYPES,
        },
    )
    early_stopping: bool | str | None = field(
        default="never",
        metadata={
            "help": "never: stop a sentence once no running beam can beat the worst finished one (the paper's "
            '"terminate early when possible", t2t\'s rule); true: once num_beams hypotheses have finished',
            "choices": (True, False, "never"),
        },
    )
    max_length_a: float | None = field(
        default=1.0,
        metadata={
            "help": "per-sentence limit floor(a * source_length + b) generated tokens, </s> included "
            "(Section 6.1: a = 1)",
            "min": 0,
            "max": 100,
        },
    )
    max_length_b: int | None = field(
        default=50,
        metadata={
            "help": "the b of max_length_a (Section 6.1: 50); None ('none' on the command line) turns the "
            "per-sentence limit off",
            "min": 0,
            "max": MAX_POSITIONS,
        },
    )
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "global cap on generated tokens", "min": 1, "max": MAX_POSITIONS}
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "global cap on output tokens, the decoder start included (so at least 2)",
            "min": 2,
            "max": MAX_POSITIONS + 1,
        },
    )
    min_length: int | None = field(
        default=None, metadata={"help": "no </s> before this many output tokens", "min": 0, "max": MAX_POSITIONS}
    )
    min_new_tokens: int | None = field(
        default=None, metadata={"help": "no </s> before this many generated tokens", "min": 0, "max": MAX_POSITIONS}
    )
    eos_token_id: int | list[int] | None = field(default=None, metadata={"help": "</s>: ends a hypothesis", **_IDS})
    pad_token_id: int | None = field(default=None, metadata={"help": "fills finished rows", **_IDS})
    bos_token_id: int | None = field(default=None, metadata={"help": "<s>", **_IDS})
    decoder_start_token_id: int | None = field(default=None, metadata={"help": "the decoder's first input", **_IDS})
    forced_bos_token_id: int | None = field(
        default=None, metadata={"help": "the first generated token, forced", **_IDS}
    )
    forced_eos_token_id: int | list[int] | None = field(
        default=None, metadata={"help": "the token forced at the maximum length", **_IDS}
    )
    # transformers indexes the scores with these ids, so an id outside the vocabulary fails in the middle of a search
    # or silently does nothing; declaring them as token ids checks them against the vocabulary first.
    bad_words_ids: list[list[int]] | None = field(
        default=None, metadata={"help": "token sequences never generated", **_IDS}
    )
    suppress_tokens: list[int] | None = field(default=None, metadata={"help": "tokens never generated", **_IDS})
    begin_suppress_tokens: list[int] | None = field(
        default=None, metadata={"help": "tokens not generated first", **_IDS}
    )
    do_sample: bool | None = field(
        default=None, metadata={"help": "sample instead of searching (not the paper's decoding)"}
    )
    temperature: float | None = field(
        default=None, metadata={"help": "sampling temperature", "min": 0, "max": 100, "min_exclusive": True}
    )
    top_k: int | None = field(
        default=None, metadata={"help": "sample among the k most likely tokens (0: all)", "min": 0, "max": 2**24}
    )
    top_p: float | None = field(
        default=None, metadata={"help": "nucleus sampling mass", "min": 0, "max": 1, "min_exclusive": True}
    )
    repetition_penalty: float | None = field(
        default=None,
        metadata={"help": "CTRL's repetition penalty (1: none)", "min": 0, "max": 100, "min_exclusive": True},
    )
    no_repeat_ngram_size: int | None = field(
        default=None, metadata={"help": "no n-gram of this size twice (0: off)", "min": 0, "max": MAX_POSITIONS}
    )
    use_cache: bool | None = field(default=None, metadata={"help": "transformers' use_cache"})
    output_scores: bool | None = field(default=None, metadata={"help": "transformers' output_scores"})
    output_logits: bool | None = field(default=None, metadata={"help": "transformers' output_logits"})
    return_dict_in_generate: bool | None = field(
        default=None, metadata={"help": "transformers' return_dict_in_generate"}
    )
    output_attentions: bool | None = field(default=None, metadata={"help": "transformers' output_attentions"})
    output_hidden_states: bool | None = field(default=None, metadata={"help": "transformers' output_hidden_states"})


# Each declared setting's field by its name, in field order.
DECODING_FIELDS = {f.name: f for f in declared_fields(DecodingSettings)}


def check_decoding_setting(name: str, value, where: str, vocab_size: int | None = None):
    """Return `value` if the decoding setting `name` (a field of `DecodingSettings`) allows it, else raise a
    SettingError naming the setting."""
    declared = DECODING_FIELDS[name]
    return check_setting(name, declared.type, declared.metadata, value, where, vocab_size)


def check_generation_settings(values, vocab_size: int | None, where: str) -> None:
    """Raise SettingError "{where}: {name} must ..., got ..." for the first declared setting among `values` (a
    mapping) that breaks its declaration; token ids must lie in the vocabulary of `vocab_size`. Keys this file does
    not declare are left for transformers to check. Settings that bound each other are checked last (`check_pairs`).
    """
    for name, value in values.items():
        if name in DECODING_FIELDS:
            check_decoding_setting(
                name, value.tolist() if isinstance(value, torch.Tensor) else value, where, vocab_size
            )
    check_pairs(values, where)


def check_pairs(values, where: str) -> None:
    """Check the settings that bound each other, where both are set: no more returned hypotheses than beams (unless
    sampling, where each returned sequence is drawn on its own), and no minimum length above the maximum."""
    for low, high in (
        ("num_return_sequences", "num_beams"),
        ("min_length", "max_length"),
        ("min_new_tokens", "max_new_tokens"),
    ):
        a, b = values.get(low), values.get(high)
        if a is not None and b is not None and a > b and not (high == "num_beams" and values.get("do_sample")):
            raise SettingError(f"{where}: {low}={a} must be at most {high}={b}")


def generation_settings_of(config: GenerationConfig) -> dict:
    """Return the declared decoding settings that a `GenerationConfig` holds. Keys transformers does not know, such as
    max_length_a, are attributes of the config too, so they are read the same way."""
    return {name: getattr(config, name) for name in DECODING_FIELDS if hasattr(config, name)}


def check_input_ids(input_ids, vocab_size: int) -> None:
    """Check the input_ids of `generate()`: a torch integer tensor of shape (batch, length), not empty, with every id
    in [0, vocab_size). A wrong kind is a TypeError here rather than an error deep inside transformers, and a bad id a
    SettingError naming it. The check runs once per call, not in the forward, which stays free of host syncs."""
    if input_ids is None:
        return
    if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point() or input_ids.is_complex():
        kind = f"a {input_ids.dtype} tensor" if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise TypeError(
            f"generate(): input_ids must be a torch integer tensor (batch, length), got {kind}; convert "
            "with torch.as_tensor(ids, dtype=torch.long) or the tokenizer's return_tensors='pt'"
        )
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        shape = tuple(input_ids.shape)
        raise SettingError(
            f"generate(): input_ids must be (batch, length), got shape {shape}"
            if input_ids.dim() != 2
            else f"generate(): input_ids of shape {shape} hold no token; give at least one sentence "
            "of at least one token (its </s>)"
        )
    bad = input_ids[(input_ids < 0) | (input_ids >= vocab_size)]
    if bad.numel():
        raise SettingError(
            f"generate(): input_ids holds token id {int(bad[0])}, outside the vocabulary of "
            f"{vocab_size} tokens [0, {vocab_size - 1}]; encode with the model's tokenizer"
        )


def check_generate_arguments(config: GenerationConfig, input_ids, kwargs: dict, vocab_size: int) -> None:
    """Check the declared settings `generate()` runs with (its arguments over the generation config) and its input_ids,
    raising a SettingError that names the one that breaks its declaration. An argument of None means "not set" and is
    dropped from `kwargs`, except `max_length_b=None`, which turns the per-sentence limit off."""
    check_generation_settings(kwargs, vocab_size, "generate()")
    for name in [
        n
        for n, v in kwargs.items()
        if v is None
        and n in DECODING_FIELDS
        and n != "max_length_b"
        and not DECODING_FIELDS[n].metadata.get("token_id")
    ]:
        del kwargs[name]  # None means "not set"; transformers would otherwise use the None itself.
    settings = generation_settings_of(config)
    check_generation_settings({k: v for k, v in settings.items() if k not in kwargs}, vocab_size, "generation_config")
    settings.update(kwargs)
    check_pairs({**settings, "num_beams": settings.get("num_beams") or 1}, "generate()")
    check_input_ids(input_ids, vocab_size)


def read_generation_file(path: str | os.PathLike) -> dict:
    """Read and return the settings of a generation_config.json, or raise a SettingError naming the file if it is not
    valid JSON or not a JSON object. transformers turns such a file into an OSError that `from_pretrained` swallows,
    and the model then decodes greedily with max_length 20, without a warning."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SettingError(f"{path}: not a valid JSON file ({error}); fix it, or save the model again") from None
    if not isinstance(data, dict):
        raise SettingError(
            f"{path}: a generation config is a JSON object of settings, got {type(data).__name__}; "
            "fix it, or save the model again"
        )
    return data


def generation_file(source, download_kwargs: dict) -> str | None:
    """Return the local path of the generation_config.json of `source`, a folder or a Hub repository (through
    transformers' cache, as `GenerationConfig.from_pretrained` finds it), or None where there is none."""
    names = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision")
    try:
        return cached_file(
            str(source),
            GENERATION_CONFIG_NAME,
            subfolder=download_kwargs.get("subfolder") or "",
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **{k: download_kwargs[k] for k in names if k in download_kwargs},
        )
    except OSError:  # transformers reports what cannot be fetched when it loads the file.
        return None


def default_generation_config(config: VaswaniConfig) -> GenerationConfig:
    """Return the paper's decoding settings (Section 6.1), the defaults of `DecodingSettings`, with the model's token
    ids; they are saved as generation_config.json. They are beam size 4, the GNMT length penalty with alpha =
    0.6, at most the input length + 50 tokens per sentence, and "terminate early when possible", which is
    `early_stopping="never"` in transformers' terms (tensor2tensor's rule: stop once no running beam can beat the
    worst finished one, even at its maximum length)."""
    paper = {name: f.default for name, f in DECODING_FIELDS.items() if f.default is not None}
    ids = ("decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id")
    return GenerationConfig(**paper, **{name: getattr(config, name) for name in ids})


__all__ = [
    "DecodingSettings",
    "DECODING_FIELDS",
    "LENGTH_PENALTY_TYPES",
    "check_decoding_setting",
    "check_generate_arguments",
    "check_generation_settings",
    "check_input_ids",
    "check_pairs",
    "default_generation_config",
    "generation_file",
    "generation_settings_of",
    "read_generation_file",
]
