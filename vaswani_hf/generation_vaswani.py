"""Decode as the paper did (Section 6.1), inside transformers' `generate()`: with beam size 4, length penalty
alpha = 0.6, a maximum output length of the input length + 50, and "terminate early when possible".

`VaswaniForConditionalGeneration` inherits `VaswaniGenerationMixin`, as transformers' Marian inherits `GenerationMixin`
instead of writing decoding inside its modeling file, so modeling_vaswani.py holds the paper's model only. What is
hand-written here, and why:

- `generate`: transformers has one global `max_length`, while the paper's limit is per sentence
  (`SourceLengthLimitLogitsProcessor`). `max_length` and `max_new_tokens`, from `generate()` or generation_config.json,
  stay a global cap over it (the shorter wins), and a minimum length above the maximum is refused, since no output
  could satisfy both.
- `adjust_generation_fn`: a folder without generation_config.json decodes as the paper does, not with transformers'
  model-agnostic greedy decoding of at most 20 tokens, and an unreadable file is an error that names it.
- `_update_finished_beams` and `_check_early_stop_heuristic`: transformers divides a finished hypothesis's score by
  |Y| ** alpha; the paper (through tensor2tensor) divides by GNMT's ((5 + |Y|) / 6) ** alpha (`gnmt_length_penalty`).
  Both are private hooks of transformers' beam search, so an upgrade that changes them must fail a test instead of
  silently changing scores: tests/transformers_hooks.py lists them with their pins, as it lists every private name of
  transformers used here and why no public mechanism does the job.
- `paper_decoding` is handed to `generate()` as `custom_generate`, transformers' public hook for the decoding loop:
  generate() prepares the inputs, the logits processors and the stopping criteria, and then calls it. Plain beam search
  and greedy decoding run the lean loops of beam_search_vaswani.py, which give transformers' tokens with less work,
  when `lean_loop_can_run` finds that they carry out the whole request: every setting of the generation config is one
  the lean loops implement (`LEAN_SETTINGS`) or is at the value generate() gives it when unset, and the call hands in
  no cache of its own. Everything else (sampling, per-step outputs, other logits processors, a cache the caller passes,
  `cache_implementation="static"`, `compile_config`, and any setting a later transformers adds) runs transformers'
  own loop, with the paper's scoring hooks below.
- `_get_top_k_continuations`: transformers' candidate step, with `fast_topk` in place of `torch.topk`, which is
  several times faster on CPU.
- `_reorder_cache`: the cross-attention keys and values are the same for every beam of a sentence, so they are not
  copied at every step.

This file is copied next to the weights with modeling_vaswani.py, which imports it, and runs under `trust_remote_code`
where vaswani_hf is not installed: it imports only torch, transformers and its sibling files.
"""

import contextvars
import copy
import functools
from collections.abc import Callable

import torch
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin, LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.generation.utils import GENERATION_MODES_MAPPING, GenerationMode

from .beam_search_vaswani import force_eos, lean_beam_search, lean_greedy_search, top_candidates
from .configuration_vaswani import SettingError
from .generation_config_vaswani import (
    check_decoding_setting,
    check_generate_arguments,
    check_generation_settings,
    check_pairs,
    default_generation_config,
    generation_file,
    generation_settings_of,
    read_generation_file,
)


def gnmt_length_penalty(length, alpha: float):
    """Return GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al., 2016), by which the paper's beam
    search divides log P(Y) (Section 6.1, alpha = 0.6). |Y| counts the generated tokens with </s>, as tensor2tensor v1
    does."""
    return ((5.0 + length) / 6.0) ** alpha


def fast_topk(scores: torch.Tensor, k: int, chunk: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return what `torch.topk(scores, k)` returns over the last dimension of a 2D tensor, computed in blocks by the
    lean beam search's `top_candidates` with one beam of score 0. It gives the same values and indices (up to the order
    of exact ties). It exists for speed: `torch.topk` over rows of beams * V scores is slow on CPU, while ranking the
    blocks' maxima first and then only the best blocks is several times faster when k is far below beams * V."""
    return top_candidates(scores.unsqueeze(1), scores.new_zeros(scores.shape[0], 1), k, chunk)


class SourceLengthLimitLogitsProcessor(LogitsProcessor):
    """Force </s> once a hypothesis reaches its own sentence's limit `floor(a * source_length + b)` (Section 6.1:
    "maximum output length to input length + 50"); transformers only has a global `max_length`.

    `source_lengths` (B,) holds each sentence's number of non-pad source tokens. The rows of `input_ids` are the B
    sentences, each repeated `num_beams * num_return_sequences` times consecutively, as `generate()` expands them.
    `cap` is the number of rows of a learned position table, which no limit may exceed.
    """

    def __init__(self, source_lengths: torch.Tensor, a: float, b: int, eos_token_id: int, cap: int | None = None):
        # The (B,) number of tokens each sentence may generate, </s> included.
        self.limits = torch.floor(source_lengths.float() * a + b).long().clamp(min=1, max=cap)
        self.eos_token_id, self.prompt_length = eos_token_id, None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]  # This is the decoder start token.
        generated = input_ids.shape[1] - self.prompt_length  # Every row has emitted this many tokens.
        limits = self.limits.to(scores.device).repeat_interleave(scores.shape[0] // self.limits.shape[0])
        at_limit = generated + 1 >= limits  # True in the rows whose next token is the last allowed.
        return force_eos(scores, at_limit, self.eos_token_id) if bool(at_limit.any()) else scores


# The length penalty ("gnmt" or "hf") of the running generate(). transformers calls the two scoring hooks without the
# generation config, so `generate` sets this variable around transformers' work; a context variable keeps it per call
# and per thread, where an attribute of the model would leak between concurrent calls.
_length_penalty_type = contextvars.ContextVar("vaswani_length_penalty_type", default="hf")


def _rows_are_repeated(states: torch.Tensor, mask: torch.Tensor | None, group: int) -> bool:
    """Return whether the rows of `states` (and of `mask`) are consecutive groups of `group` identical copies, as
    `generate()` makes them."""
    rows = states.shape[0]
    if group < 1 or rows % group:
        return False
    grouped = (t.view(rows // group, group, *t.shape[1:]) for t in (states, mask) if t is not None)
    return all(bool((g == g[:, :1]).all()) for g in grouped)


def _processors_the_lean_loops_apply(logits_processor, eos: int):
    """Return the per-sentence limit processor (or None) and `min_steps` if the lean loops implement every logits
    processor themselves; otherwise return None, and transformers' loop runs.

    The lean loops implement only the paper's length limit and min_length / min_new_tokens for </s>. `min_steps` is
    the number of steps during which </s> is forbidden."""
    limiter, min_steps = None, 0
    for processor in logits_processor or []:
        if isinstance(processor, SourceLengthLimitLogitsProcessor) and limiter is None:
            limiter = processor
        elif (
            isinstance(processor, (MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor))
            and processor.eos_token_id.numel() == 1
            and int(processor.eos_token_id) == eos
        ):
            if isinstance(processor, MinLengthLogitsProcessor):  # It forbids </s> while 1 + step < min_length.
                min_steps = max(min_steps, processor.min_length - 1)
            else:  # It forbids </s> while 1 + step - prompt_length_to_skip < min_new_tokens.
                min_steps = max(min_steps, processor.min_new_tokens + processor.prompt_length_to_skip - 1)
        else:
            return None  # transformers' loop applies any other processor.
    return limiter, min_steps


def _max_length_of(stopping_criteria, eos: int) -> int | None:
    """Return transformers' global max_length if the only stopping criteria are that length and </s>, else None,
    since the lean loops implement no other criterion."""
    max_length = None
    for criterion in stopping_criteria:
        if isinstance(criterion, MaxLengthCriteria):
            max_length = criterion.max_length
        elif not (
            isinstance(criterion, EosTokenCriteria)
            and criterion.eos_token_id.numel() == 1
            and int(criterion.eos_token_id) == eos
        ):
            return None
    return max_length


def _token_ids(value) -> list[int]:
    """Return a generation config's token id setting (an id, a list or a tensor of ids, or None) as a list."""
    return [] if value is None else [int(t) for t in torch.as_tensor(value).reshape(-1).tolist()]


def _any_value(value, config: GenerationConfig) -> bool:
    return True


def _one_token_id(value, config: GenerationConfig) -> bool:
    return len(_token_ids(value)) == 1


def _off(value, config: GenerationConfig) -> bool:
    return value is None or value is False


def _no_more_than_the_beams(value, config: GenerationConfig) -> bool:
    return value is None or value <= (config.num_beams or 1)


# The settings of a generation config that the lean loops of beam_search_vaswani.py implement, each with a test of the
# values they implement (given the whole config). It is the one source of `lean_loop_can_run`: a setting of
# transformers' GenerationConfig that is not here runs transformers' loop whenever it is set to anything but the value
# generate() gives it when unset, so a setting a later transformers release adds is handed over, never dropped
# (tests/test_generation_options.py runs every field of the installed GenerationConfig both ways).
LEAN_SETTINGS: dict[str, Callable[[object, GenerationConfig], bool]] = {
    # Beam search (Section 6.1) or greedy decoding; sampling is transformers' loop.
    "num_beams": _any_value,
    "do_sample": _off,
    # The n best of the k beams (beam search), or the one output of greedy decoding.
    "num_return_sequences": _no_more_than_the_beams,
    # log P / lp(|Y|), with transformers' |Y| ** alpha or GNMT's lp (`length_penalty_type`).
    "length_penalty": _any_value,
    "length_penalty_type": _any_value,
    # True, False and "never": the three stopping rules of transformers' beam search.
    "early_stopping": _any_value,
    # transformers' global length: its MaxLengthCriteria, which generate() builds from either.
    "max_length": _any_value,
    "max_new_tokens": _any_value,
    # </s> forbidden before these lengths: transformers' MinLength / MinNewTokensLength processors.
    "min_length": _any_value,
    "min_new_tokens": _any_value,
    # The paper's per-sentence limit floor(a * source length + b) (`SourceLengthLimitLogitsProcessor`).
    "max_length_a": _any_value,
    "max_length_b": _any_value,
    # One </s> ends a hypothesis; the pad id fills finished rows; the loops start from the decoder start token that
    # generate() puts in input_ids; the <s> id only makes an input where none is given, before the loop.
    "eos_token_id": _one_token_id,
    "pad_token_id": _any_value,
    "decoder_start_token_id": _any_value,
    "bos_token_id": _any_value,
    # The lean loops keep their own keys and values, which only a call with a cache would (without one, transformers
    # recomputes every position, which gives the same tokens only up to rounding). transformers' default cache, a
    # DynamicCache, is what they replace: the caller never sees it, since per-step outputs hand over.
    "use_cache": lambda value, config: value is not False,
    "cache_implementation": lambda value, config: value in (None, "dynamic"),
    # The lean loops compile nothing; transformers' loop compiles only with a compile_config or a static cache, which
    # hand over, so turning compilation off changes nothing.
    "disable_compile": _any_value,
    # Only the token ids come back: per-step outputs (scores, logits, attentions, hidden states, the cache) are
    # transformers' loop.
    "return_dict_in_generate": _off,
    "output_scores": _off,
    "output_logits": _off,
    "output_attentions": _off,
    "output_hidden_states": _off,
}

# The settings of the installed transformers' GenerationConfig, and the values generate() gives those left unset:
# GenerationConfig() leaves them None and generate() fills in its global defaults (a transformers whose
# GenerationConfig() holds the defaults itself has no such method, and its values are the unset ones).
_UNSET_CONFIG = vars(GenerationConfig())
TRANSFORMERS_SETTINGS = frozenset(
    name for name in _UNSET_CONFIG if not name.startswith("_") and name != "transformers_version"
)
UNSET_VALUES = {
    **{name: _UNSET_CONFIG[name] for name in TRANSFORMERS_SETTINGS},
    **getattr(GenerationConfig, "_get_default_generation_params", dict)(),
}

# The model inputs the lean loops read from generate()'s model_kwargs, or that they replace (the cache, called
# `past_key_values` before transformers 5.24, and the positions in it that older versions track), each of them or
# None; any other input runs transformers' loop. The cache itself is checked in `lean_loop_refusal`.
LEAN_MODEL_INPUTS = frozenset(
    {"encoder_outputs", "attention_mask", "cache", "past_key_values", "use_cache", "cache_position"}
)


def _is_unset(name: str, value) -> bool:
    """Return whether a transformers setting holds the value generate() gives it when unset (None counts, as
    generate() then fills it in)."""
    if value is None:
        return True
    unset = UNSET_VALUES.get(name)
    return unset is not None and type(value) is type(unset) and value == unset


def lean_loop_refusal(generation_config: GenerationConfig, model_kwargs: dict, caller_cache=None) -> str | None:
    """Return why the lean loops cannot carry out this generate() request exactly as transformers' loop would (the
    first setting or input they do not implement, as "name=value"), or None where they can.

    `generation_config` is the one generate() prepared for the loop, `model_kwargs` the inputs it passes the loop, and
    `caller_cache` the cache the caller handed generate(), if any: transformers' loop fills it, and the caller reads it
    afterwards, while the lean loops keep their keys and values to themselves. A setting is implemented when it is in
    `LEAN_SETTINGS` at a value they implement, or is a setting of transformers at the value generate() gives it when
    unset; any other entry of the config is one transformers' loop does not read either."""
    if caller_cache is not None:
        return f"the cache the caller passed ({type(caller_cache).__name__}), which transformers' loop fills"
    for name, value in vars(generation_config).items():
        implemented = LEAN_SETTINGS.get(name)
        if implemented is not None and not implemented(value, generation_config):
            return f"{name}={value!r}"
        if implemented is None and name in TRANSFORMERS_SETTINGS and not _is_unset(name, value):
            return f"{name}={value!r}"
    for name, value in model_kwargs.items():
        if value is not None and name not in LEAN_MODEL_INPUTS:
            return f"{name}= (a model input)"
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    if cache is not None and cache.get_seq_length() > 0:
        return "a cache that already holds positions"
    return None


def lean_loop_can_run(generation_config: GenerationConfig, model_kwargs: dict, caller_cache=None) -> bool:
    """Return whether the lean loops give exactly what transformers' loop would for everything this generate() call
    asks (`lean_loop_refusal` says what they would not)."""
    return lean_loop_refusal(generation_config, model_kwargs, caller_cache) is None


# The generate() arguments that transformers passes only to its own loops, never to a `custom_generate` callable.
_OWN_LOOP_ARGUMENTS = ("custom_generate", "streamer", "assistant_model", "tokenizer", "assistant_tokenizer")
# The names a caller's cache takes in generate() (`cache` from transformers 5.24, the older two still accepted).
_CACHE_ARGUMENTS = ("cache", "past_key_values", "cache_params")


def _runs_paper_decoding(model, generation_config, kwargs: dict) -> bool:
    """Return whether `generate()` hands its loop to `paper_decoding`: it does for plain beam search or greedy
    decoding, when the call asks for nothing that transformers passes only to its own loops. Those are a streamer, an
    assistant model, tokenizers (for stop strings and assisted decoding), and processes kept in step (`synced_gpus`,
    which transformers also turns on when it is unset inside a process group). Such calls run transformers' loops,
    where the scoring hooks still apply the paper's length penalty. The mode is the one generate() will find: the
    call's settings over the given config, over the model's, over the values generate() gives unset settings (with
    contrastive search, for one, where penalty_alpha meets transformers' top_k of 50)."""
    if any(kwargs.get(name) is not None for name in _OWN_LOOP_ARGUMENTS):
        return False
    group = torch.distributed.is_available() and torch.distributed.is_initialized()
    if kwargs.get("synced_gpus") or (kwargs.get("synced_gpus") is None and group):
        return False
    merged = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    merged.update(**kwargs)  # The call's settings override the config's, as in generate().
    # Then the unset ones are filled in, as generate() fills them (set directly: `update` would validate the config
    # again and warn about settings the call did not make).
    fallbacks = [model.generation_config.to_dict()] if generation_config is not None else []
    for values in (*fallbacks, UNSET_VALUES):
        for name, value in values.items():
            if hasattr(merged, name) and getattr(merged, name) is None:
                setattr(merged, name, value)
    return merged.get_generation_mode() in (GenerationMode.BEAM_SEARCH, GenerationMode.GREEDY_SEARCH)


def paper_decoding(
    model, input_ids, logits_processor, stopping_criteria, generation_config, caller_cache=None, **model_kwargs
):
    """Run the decoding loop of `generate()` for plain beam search and greedy decoding, handed to it as
    `custom_generate`, transformers' public hook: generate() prepares the inputs, the logits processors and the
    stopping criteria, then calls this. `caller_cache` is the cache the caller passed generate() (the wrapper binds
    it), which also reaches this function among `model_kwargs`. It runs beam_search_vaswani.py's lean loops where
    `_lean_decoding_inputs` finds that they carry out the whole request, and otherwise transformers' own loop for the
    mode, with every input generate() prepared, in which the scoring hooks apply the length penalty."""
    lean = model._lean_decoding_inputs(
        input_ids, logits_processor, stopping_criteria, generation_config, model_kwargs, caller_cache
    )
    if lean is not None and generation_config.num_beams > 1:
        penalty_type = getattr(generation_config, "length_penalty_type", None) or "hf"
        check_decoding_setting("length_penalty_type", penalty_type, "generation_config")
        alpha = float(generation_config.length_penalty)

        def length_penalty(length):
            return gnmt_length_penalty(length, alpha) if penalty_type == "gnmt" else length**alpha

        return lean_beam_search(
            model,
            **lean,
            num_beams=generation_config.num_beams,
            num_return_sequences=generation_config.num_return_sequences,
            length_penalty=length_penalty,
            alpha=alpha,
            early_stopping=generation_config.early_stopping,
        )
    if lean is not None:  # Greedy: transformers pads finished rows with the pad id, or </s> where there is none.
        pad = _token_ids(generation_config.pad_token_id)
        return lean_greedy_search(model, **{**lean, "fill_value": pad[0] if pad else lean["eos_token_id"]})
    loop = getattr(GenerationMixin, GENERATION_MODES_MAPPING[generation_config.get_generation_mode()])
    return loop(
        model,
        input_ids,
        logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
        generation_config=generation_config,
        synced_gpus=False,
        **model_kwargs,
    )


class VaswaniGenerationMixin(GenerationMixin):
    """Add the paper's decoding (Section 6.1) to `GenerationMixin`; the module docstring says what is overridden."""

    # Set it to False to run transformers' own generate() dispatch always (`_beam_search` or `_sample` with the
    # scoring hooks), never `paper_decoding` and its lean loops (the tests compare the two).
    use_lean_decoding = True

    def generate(self, inputs=None, generation_config=None, logits_processor=None, **kwargs):
        """Generate as `GenerationMixin.generate` does, adding the paper's per-sentence limit (input length + 50).

        It takes three more keyword arguments, whose defaults come from the generation config (`DecodingSettings`):
        `max_length_a` and `max_length_b`, which set the limit `floor(a * source_length + b)` of generated tokens,
        </s> included (`max_length_b=None` turns it off), and `length_penalty_type` ("gnmt" or "hf").
        `max_new_tokens` and `max_length`, as arguments or in the config, stay global caps. A model with learned
        positions (Table 3, row E) cannot embed more decoder positions than its table has rows, so its output is
        capped there: the per-sentence limit and the generation config's caps are lowered silently, and a larger cap
        passed to this call is a SettingError. Sinusoids extrapolate, so they have no such cap.
        """
        config = generation_config if generation_config is not None else self.generation_config
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        check_generate_arguments(config, input_ids, kwargs, self.config.vocab_size)
        asked = {key: kwargs.get(key) for key in ("max_length", "max_new_tokens")}
        if kwargs.get("num_beams", config.num_beams) in (None, 1):
            # Greedy decoding has no length penalty to apply, and transformers would warn that it is ignored.
            kwargs.pop("length_penalty", None)
        attention_mask = self._source_mask(input_ids, kwargs, kwargs.get("eos_token_id", config.eos_token_id))
        a = kwargs.pop("max_length_a", getattr(config, "max_length_a", None))
        b = kwargs.pop("max_length_b", getattr(config, "max_length_b", None))
        if b is not None and (input_ids is not None or attention_mask is not None):
            source_lengths = (
                attention_mask.sum(-1)
                if attention_mask is not None
                else (input_ids != self.config.pad_token_id).sum(-1)
            )
            eos = kwargs.get("eos_token_id", config.eos_token_id)
            eos = eos[0] if isinstance(eos, (list, tuple)) else eos
            limiter = SourceLengthLimitLogitsProcessor(
                source_lengths, 1.0 if a is None else a, b, eos, cap=self.learned_positions()
            )
            logits_processor = LogitsProcessorList([*(logits_processor or []), limiter])
            if all(kwargs.get(k, getattr(config, k, None)) is None for k in ("max_new_tokens", "max_length")):
                # With no global cap given, the cap is the longest sentence's limit (as max_length, which counts the
                # start token).
                prompt = kwargs.get("decoder_input_ids")
                kwargs["max_length"] = (1 if prompt is None else prompt.shape[-1]) + int(limiter.limits.max())
                check_pairs(
                    {
                        "min_length": kwargs.get("min_length", getattr(config, "min_length", None)),
                        "max_length": kwargs["max_length"],
                    },
                    "generate(): with the per-sentence limit a * source length + b",
                )
        table = self.learned_positions()
        if table is not None:  # The decoder reads positions 0 to max_length - 2.
            for key, bound in (("max_length", table + 1), ("max_new_tokens", table)):
                if asked[key] is not None and asked[key] > bound:
                    raise SettingError(
                        f"generate(): {key}={asked[key]}, but this model has {table} learned positions "
                        f"(Table 3, row E), so {key} is at most {bound}; ask for fewer"
                    )
                given = kwargs.get(key, getattr(config, key, None))
                if given is not None and given > bound:
                    kwargs[key] = bound
        if self.use_lean_decoding and _runs_paper_decoding(self, generation_config, kwargs):
            caller_cache = next((kwargs[k] for k in _CACHE_ARGUMENTS if kwargs.get(k) is not None), None)
            kwargs["custom_generate"] = functools.partial(paper_decoding, caller_cache=caller_cache)
        penalty_type = kwargs.get("length_penalty_type", getattr(config, "length_penalty_type", None)) or "hf"
        token = _length_penalty_type.set(penalty_type)
        try:
            return super().generate(
                inputs, generation_config=generation_config, logits_processor=logits_processor, **kwargs
            )
        finally:
            _length_penalty_type.reset(token)

    def _source_mask(self, input_ids, kwargs, eos):
        """Return generate()'s attention mask, which is also written into `kwargs`. Where none is given, it is inferred
        from the pad tokens as transformers' `_prepare_attention_mask_for_generation` does (when the input holds pad
        tokens and pad is not </s>), because the lean loops would bypass that step. A row that masks every token is a
        SettingError (a ValueError): that sentence would be decoded from nothing."""
        pad, attention_mask = self.config.pad_token_id, kwargs.get("attention_mask")
        eos = eos if isinstance(eos, (list, tuple)) else [eos]
        if (
            attention_mask is None
            and isinstance(input_ids, torch.Tensor)
            and pad is not None
            and pad not in eos
            and bool((input_ids == pad).any())
        ):
            attention_mask = kwargs["attention_mask"] = (input_ids != pad).long()
        empty = [] if attention_mask is None else (attention_mask.reshape(attention_mask.shape[0], -1) == 0).all(-1)
        if any(empty):
            raise SettingError(
                f"generate(): row {int(empty.nonzero()[0])} of attention_mask is all zeros: that "
                "sentence has no token to attend to; mask padding only (the tokenizer's mask)"
            )
        return attention_mask

    def adjust_generation_fn(
        self, generation_config, from_auto_class, from_pipeline, pretrained_model_name_or_path, *args, **kwargs
    ):
        """Check generation_config.json, or the `generation_config` given instead, where `from_pretrained` reads it.

        transformers silently falls back to greedy decoding when that file is unreadable, so the file is checked first
        and a bad one raises a SettingError naming it; a `generation_config` given instead is checked as it enters. A
        folder without the file decodes as the paper does (`default_generation_config`), not with transformers'
        model-agnostic max_length 20."""
        path, vocab = None, self.config.vocab_size
        if generation_config is not None:
            check_generation_settings(generation_settings_of(generation_config), vocab, "generation_config")
        elif pretrained_model_name_or_path is not None:
            path = generation_file(pretrained_model_name_or_path, kwargs)
            if path is not None:
                check_generation_settings(read_generation_file(path), vocab, str(path))
        super().adjust_generation_fn(
            generation_config, from_auto_class, from_pipeline, pretrained_model_name_or_path, *args, **kwargs
        )
        if generation_config is None and path is None:
            self.generation_config = default_generation_config(self.config)

    def learned_positions(self) -> int | None:
        """Return the number of rows of the learned position table (Table 3, row E), or None for sinusoids, which
        have no limit."""
        return self.config.max_position_embeddings if self.config.position_encoding == "learned" else None

    def _lean_decoding_inputs(
        self, input_ids, logits_processor, stopping_criteria, generation_config, model_kwargs, caller_cache=None
    ) -> dict | None:
        """Return the arguments of `lean_beam_search` (or `lean_greedy_search`) if it computes exactly what
        transformers' `_beam_search` (or `_sample`) would; else return None, and transformers' loop runs.

        The request must be one the lean loops carry out (`lean_loop_can_run`: their settings, no cache of the
        caller's, no other model input). The model and its inputs must be in eval mode, with sdpa or eager attention,
        one decoder start token, no logits processor but the length limit and min_length / min_new_tokens (a caller's
        `logits_processor` included), no stopping criterion but the maximum length and </s>, and every sentence's rows
        really `num_beams` copies of one encoder output.
        """
        config = generation_config
        if (
            not self.use_lean_decoding  # also read here: a model switched off while generate() runs
            or self.training
            or input_ids.shape[1] != 1
            or self.config._attn_implementation not in ("sdpa", "eager")
            or not lean_loop_can_run(config, model_kwargs, caller_cache)
        ):
            return None
        eos = _token_ids(config.eos_token_id)[0]
        processors = _processors_the_lean_loops_apply(logits_processor, eos)
        max_length = _max_length_of(stopping_criteria, eos)
        encoder_outputs = model_kwargs.get("encoder_outputs")
        if processors is None or max_length is None or encoder_outputs is None:
            return None
        limiter, min_steps = processors
        states, beams, mask = encoder_outputs[0], config.num_beams, model_kwargs.get("attention_mask")  # (B * k, S, D)
        if (
            states.shape[0] != input_ids.shape[0]
            or not _rows_are_repeated(states, mask, beams)
            or not _rows_are_repeated(input_ids, None, beams)
        ):
            return None
        limits = limiter.limits if limiter is not None else None
        if limits is not None and limits.shape[0] != states.shape[0] // beams:
            return None
        # transformers pads beam-search output with `pad_token_id or eos_token_id[0]`, which is </s> when the pad id
        # is 0, so the lean loops fill with the same.
        fill = _token_ids(config.pad_token_id)[0] if config.pad_token_id is not None else eos
        fill = fill or eos
        return dict(
            encoder_hidden_states=states[::beams],
            encoder_attention_mask=mask[::beams] if mask is not None else None,
            decoder_start_ids=input_ids[::beams, 0],
            limits=limits,
            max_length=max_length,
            eos_token_id=eos,
            fill_value=fill,
            min_steps=min_steps,
        )

    def _reorder_cache(self, cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Keep the surviving beams' self-attention keys and values, as beam search does. The cross-attention ones
        are the same for every beam of a sentence (beams never move across sentences), so they are left in place
        instead of being copied at every step, as transformers' default reorder does."""
        (cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache).reorder_cache(beam_idx)
        return cache

    def _get_top_k_continuations(
        self,
        accumulated_log_probs,
        running_sequences,
        running_beam_indices,
        cur_len,
        decoder_prompt_len,
        do_sample,
        beams_to_keep,
        num_beams,
        batch_size,
        **kwargs,
    ):
        """Run transformers' top-K step, with `torch.topk` over the (B, beams * V) scores replaced by `fast_topk`,
        which gives the same values and indices several times faster on CPU when K is much smaller than beams * V. The
        rest is transformers' code unchanged, and sampling runs transformers' own step."""
        if do_sample:
            return super()._get_top_k_continuations(
                accumulated_log_probs,
                running_sequences,
                running_beam_indices,
                cur_len,
                decoder_prompt_len,
                do_sample,
                beams_to_keep,
                num_beams,
                batch_size,
                **kwargs,
            )
        topk_log_probs, topk_indices = fast_topk(accumulated_log_probs, beams_to_keep)
        vocab_size = accumulated_log_probs.shape[-1] // num_beams
        topk_current_beam_indices = topk_indices // vocab_size
        topk_running_beam_indices = self._gather_beams(running_beam_indices, topk_current_beam_indices)
        topk_running_sequences = self._gather_beams(running_sequences, topk_current_beam_indices)
        topk_ids = topk_indices % vocab_size
        topk_running_sequences[:, :, cur_len] = topk_ids
        batch_offset = torch.arange(batch_size, device=topk_ids.device).view(-1, 1) * num_beams
        topk_running_beam_indices[:, :, cur_len - decoder_prompt_len] = topk_current_beam_indices + batch_offset
        return topk_log_probs, topk_running_sequences, topk_running_beam_indices

    def _update_finished_beams(self, **kwargs):
        """Update the finished hypotheses as transformers does, but score those finishing now by log P(Y) / lp(Y)
        with GNMT's lp when it is selected (Section 6.1)."""
        if _length_penalty_type.get() == "gnmt":
            length = kwargs["cur_len"] + 1 - kwargs["decoder_prompt_len"]
            kwargs["topk_log_probs"] = kwargs["topk_log_probs"] / gnmt_length_penalty(length, kwargs["length_penalty"])
            kwargs["length_penalty"] = 0.0  # transformers then divides by length ** 0, which is 1
        return super()._update_finished_beams(**kwargs)

    def _check_early_stop_heuristic(self, **kwargs):
        """Return whether the best running beam can still beat the worst finished one. With GNMT's penalty, its best
        possible score is log P / lp(max_length) for early_stopping="never" and alpha > 0 (tensor2tensor v1's bound: a
        running beam only loses log-probability as it grows, while lp grows up to the maximum length), and log P /
        lp(current length) otherwise."""
        if _length_penalty_type.get() == "gnmt":
            alpha = kwargs["length_penalty"]
            bound = kwargs["max_length" if kwargs["early_stopping"] == "never" and alpha > 0.0 else "cur_len"]
            length = bound - kwargs["decoder_prompt_len"]
            kwargs["running_beam_scores"] = kwargs["running_beam_scores"] / gnmt_length_penalty(length, alpha)
            kwargs["length_penalty"] = 0.0
        return super()._check_early_stop_heuristic(**kwargs)


__all__ = [
    "VaswaniGenerationMixin",
    "paper_decoding",
    "lean_loop_can_run",
    "lean_loop_refusal",
    "LEAN_SETTINGS",
    "gnmt_length_penalty",
    "default_generation_config",
    "fast_topk",
    "SourceLengthLimitLogitsProcessor",
    "check_generation_settings",
    "read_generation_file",
]
