"""`generate()` honours the whole request: the lean loops of beam_search_vaswani.py run only where they give exactly
what transformers' own loop gives for everything the caller asked, and every other request runs transformers' loop
(with the paper's scoring hooks), which then carries it out (a cache the caller passes is filled, a static cache or a
`compile_config` is used) or refuses it as it refuses it for any model.

The tables below are checked against the installed transformers: every setting of its `GenerationConfig`, every
parameter of its `generate()` (and the keywords `generate()` takes out of its `**kwargs`), and every input of our
model's `forward` has a row here, with a value other than the one generate() gives it when unset and whether the lean
loop carries it out. Each row runs `generate()` twice, with the lean loops allowed and with `use_lean_decoding=False`
(transformers' loop), and asserts the same result (tokens, per-step outputs, the state of the objects the call passed
in, or the same error), and that the lean loop ran exactly where the row says. A setting or argument a later
transformers release adds has no row, and the table test fails, asking to classify it: then it is either implemented
by the lean loops (`LEAN_SETTINGS`, `LEAN_MODEL_INPUTS` in generation_vaswani.py) or handed over, never dropped.
"""

import copy
import inspect
import re
from dataclasses import dataclass, field

import pytest
import torch
from conftest import padded_batch, randomize_norms_and_biases, tiny_config
from transformers import (
    CompileConfig,
    GenerationConfig,
    GenerationMixin,
    MarianConfig,
    MarianMTModel,
    WatermarkingConfig,
)
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation import utils as generation_utils
from transformers.generation.streamers import BaseStreamer
from transformers.utils import ModelOutput

import vaswani_hf.generation_vaswani as generation
from vaswani_hf import VaswaniForConditionalGeneration
from vaswani_hf.generation_vaswani import LEAN_SETTINGS, TRANSFORMERS_SETTINGS, UNSET_VALUES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 40
GREEDY = {"num_beams": 1}
# Assisted decoding takes one sentence at a time.
ONE = {"num_beams": 1, "one_sentence": True}


@dataclass
class Case:
    """One request: `value` for the row's setting or argument (a `Fresh` is built anew for each run, for objects the
    call changes), `lean` whether the lean loop carries it out, and `extra` the other settings the request needs."""

    value: object
    lean: bool
    extra: dict = field(default_factory=dict)


@dataclass
class Fresh:
    """A value made anew for every run from the model and the base inputs (a cache, a streamer, an assistant)."""

    make: object


def _empty_cache(model, inputs):
    return EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))


class _Bias(LogitsProcessor):
    """A caller's own processor, which the lean loops do not implement."""

    def __call__(self, input_ids, scores):
        return scores + torch.linspace(0.0, 1.0, scores.shape[-1])


class _Never(StoppingCriteria):
    """A caller's own stopping criterion, which never stops anything."""

    def __call__(self, input_ids, scores, **kwargs):
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


class _Streamer(BaseStreamer):
    def __init__(self):
        self.received = []

    def put(self, value):
        self.received.append(value.clone())

    def end(self):
        self.received.append("end")


def _transformers_loop(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
    """A caller's own `custom_generate`: transformers' loop for the mode, with every input generate() prepared."""
    loop = getattr(GenerationMixin, generation_utils.GENERATION_MODES_MAPPING[generation_config.get_generation_mode()])
    return loop(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs)


# Every setting of transformers' GenerationConfig (and of ours that generate() takes), with requests to make of it.
SETTINGS = {
    # The lengths: the global cap, the minimum (</s> forbidden), and the paper's per-sentence limit.
    "max_length": [Case(9, True), Case(9, True, GREEDY)],
    "max_new_tokens": [Case(3, True), Case(3, True, GREEDY)],
    "min_length": [Case(6, True), Case(6, True, GREEDY)],
    "min_new_tokens": [Case(5, True), Case(5, True, GREEDY)],
    "max_length_a": [Case(0.5, True)],
    "max_length_b": [Case(3, True), Case(None, True, {"max_new_tokens": 8})],
    "max_time": [Case(600.0, False)],
    "stop_strings": [Case(["x"], False)],
    # The search: beams, the length penalty, the stopping rule, the hypotheses returned.
    "num_beams": [Case(1, True), Case(3, True)],
    "length_penalty": [Case(1.2, True), Case(0.0, True)],
    "length_penalty_type": [Case("hf", True)],
    "early_stopping": [Case(True, True), Case(False, True)],
    "num_return_sequences": [Case(3, True), Case(2, False, GREEDY)],
    "do_sample": [Case(True, False), Case(True, False, GREEDY)],
    "use_mtp": [Case(True, False, GREEDY)],
    # The cache and compilation: only transformers' default cache, unseen by the caller, is the lean loops' to replace.
    "use_cache": [Case(False, False), Case(False, False, GREEDY)],
    "cache_implementation": [
        Case("dynamic", True),
        Case("static", False),
        Case("static", False, GREEDY),
        Case("offloaded", False, GREEDY),
        Case("quantized", False),
    ],
    "cache_config": [Case({"nbits": 4}, False)],
    "max_cache_len": [Case(64, False)],
    "prefill_chunk_size": [Case(4, False)],
    "compile_config": [Case(CompileConfig(), False), Case(CompileConfig(), False, GREEDY)],
    "disable_compile": [Case(True, True), Case(True, True, GREEDY)],
    "continuous_batching_config": [Case({}, False)],
    # Sampling and logits processors: transformers' loop.
    "temperature": [Case(0.7, False)],
    "top_k": [Case(5, False)],
    "top_p": [Case(0.9, False)],
    "min_p": [Case(0.1, False)],
    "top_h": [Case(0.5, False)],
    "typical_p": [Case(0.9, False)],
    "epsilon_cutoff": [Case(3e-4, False)],
    "eta_cutoff": [Case(3e-4, False)],
    "repetition_penalty": [Case(1.3, False), Case(1.3, False, GREEDY)],
    "encoder_repetition_penalty": [Case(1.3, False)],
    "no_repeat_ngram_size": [Case(2, False)],
    "encoder_no_repeat_ngram_size": [Case(2, False)],
    "bad_words_ids": [Case([[7]], False)],
    "renormalize_logits": [Case(True, False)],
    "forced_bos_token_id": [Case(7, False)],
    "forced_eos_token_id": [Case(2, False)],
    "remove_invalid_values": [Case(True, False)],
    "exponential_decay_length_penalty": [Case((2, 1.5), False)],
    "suppress_tokens": [Case([7], False), Case([7], False, GREEDY)],
    "begin_suppress_tokens": [Case([7], False)],
    "sequence_bias": [Case({(7,): -1.0}, False)],
    "token_healing": [Case(True, False)],
    "guidance_scale": [Case(1.5, False)],
    "watermarking_config": [Case(WatermarkingConfig(), False, GREEDY)],
    # Per-step outputs: transformers' loop returns them.
    "output_attentions": [Case(True, False)],
    "output_hidden_states": [Case(True, False)],
    "output_scores": [Case(True, False)],
    "output_logits": [Case(True, False)],
    "return_dict_in_generate": [Case(True, False), Case(True, False, GREEDY)],
    # Special tokens.
    "pad_token_id": [Case(7, True), Case(7, True, GREEDY)],
    "bos_token_id": [Case(7, True)],
    "eos_token_id": [Case(5, True), Case([2, 5], False), Case([2, 5], False, GREEDY)],
    "decoder_start_token_id": [Case(1, True)],
    # Assisted decoding, whose settings do nothing without an assistant: still transformers' loop.
    "is_assistant": [Case(True, False, GREEDY)],
    "num_assistant_tokens": [Case(5, False)],
    "num_assistant_tokens_schedule": [Case("heuristic", False)],
    "assistant_confidence_threshold": [Case(0.5, False)],
    "prompt_lookup_num_tokens": [Case(2, False, ONE)],
    "max_matching_ngram_size": [Case(3, False)],
    "assistant_early_exit": [Case(1, False, ONE)],
    "assistant_lookbehind": [Case(5, False)],
    "target_lookbehind": [Case(5, False)],
    "assistant_ensemble_weight": [Case(0.5, False)],
    "speculation_type": [Case("assisted", False, GREEDY)],
    # Decoding methods transformers moved to the Hub (they need trust_remote_code) or set aside.
    "low_memory": [Case(True, False)],
    "penalty_alpha": [Case(0.6, False, GREEDY)],
    "dola_layers": [Case("low", False, GREEDY)],
    "diversity_penalty": [Case(0.5, False)],
    "num_beam_groups": [Case(2, False)],
    "constraints": [Case([[7]], False)],
    "force_words_ids": [Case([[7]], False)],
}

# Every named parameter of transformers' generate(), and the keywords it takes out of its **kwargs.
ARGUMENTS = {
    "inputs": [Case(Fresh(lambda model, inputs: inputs["input_ids"]), True)],
    "generation_config": [
        Case(Fresh(lambda model, inputs: GenerationConfig(**{**_paper(model), "num_beams": 3})), True)
    ],
    "logits_processor": [Case(LogitsProcessorList(), True), Case(LogitsProcessorList([_Bias()]), False)],
    "stopping_criteria": [Case(StoppingCriteriaList(), True), Case(StoppingCriteriaList([_Never()]), False)],
    "prefix_allowed_tokens_fn": [Case(lambda batch, ids: list(range(3, VOCAB)), False)],
    "synced_gpus": [Case(False, True), Case(True, False)],
    "assistant_model": [Case(Fresh(lambda model, inputs: copy.deepcopy(model)), False, ONE)],
    "streamer": [Case(Fresh(lambda model, inputs: _Streamer()), False, GREEDY)],
    # transformers reads them only for classifier-free guidance (guidance_scale), as the lean loops ignore them.
    "negative_prompt_ids": [Case(Fresh(lambda model, inputs: inputs["input_ids"]), True)],
    "negative_prompt_attention_mask": [Case(Fresh(lambda model, inputs: inputs["attention_mask"]), True)],
    "custom_generate": [Case(_transformers_loop, False)],
    "trust_remote_code": [Case(True, True)],
    "tokenizer": [Case(object(), False, GREEDY)],
    "assistant_tokenizer": [Case(object(), False, GREEDY)],
}

# Every input of VaswaniForConditionalGeneration.forward, which generate() passes on to the model.
MODEL_INPUTS = {
    "input_ids": [Case(Fresh(lambda model, inputs: inputs["input_ids"]), True)],
    "attention_mask": [Case(Fresh(lambda model, inputs: torch.ones_like(inputs["attention_mask"])), True)],
    "encoder_outputs": [Case(Fresh(lambda model, inputs: model.get_encoder()(**inputs)), True)],
    "decoder_input_ids": [Case(Fresh(lambda model, inputs: torch.zeros(3, 2, dtype=torch.long)), False, GREEDY)],
    "decoder_attention_mask": [Case(Fresh(lambda model, inputs: torch.ones(3, 1, dtype=torch.long)), False)],
    "cache": [Case(Fresh(_empty_cache), False, GREEDY), Case(Fresh(_empty_cache), False)],
    # transformers keeps the source embeddings among the inputs of every forward of its loop: left to that loop.
    "inputs_embeds": [Case(Fresh(lambda model, inputs: model.get_encoder().embed_tokens(inputs["input_ids"])), False)],
    "decoder_inputs_embeds": [Case(Fresh(lambda model, inputs: torch.zeros(3, 1, 32)), False, GREEDY)],
    "labels": [Case(Fresh(lambda model, inputs: torch.full((3, 4), 5)), False)],
    "use_cache": [Case(False, False)],
    "num_items_in_batch": [Case(4, False)],
}


def _paper(model) -> dict:
    return {k: v for k, v in model.generation_config.to_dict().items() if k != "transformers_version"}


def _model() -> VaswaniForConditionalGeneration:
    """A random tiny model whose </s> is likely enough that the sentences of a batch finish at different steps."""
    torch.manual_seed(0)
    model = randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config(vocab_size=VOCAB))).eval()
    with torch.no_grad():
        model.lm_head.weight[model.config.eos_token_id] += 0.4
    return model


@pytest.fixture(scope="module")
def model():
    return _model()


def _inputs() -> dict:
    ids, mask = padded_batch([6, 4, 7], vocab_size=VOCAB, seed=1)
    return {"input_ids": ids, "attention_mask": mask}


def _request(model, name: str, case: Case) -> tuple[dict, object]:
    """Return generate()'s keyword arguments for the row `name` and `case` (the paper's decoding of a padded batch
    with a short per-sentence limit, then the case's settings), and the value passed for `name`."""
    extra = dict(case.extra)
    inputs = _inputs()
    if extra.pop("one_sentence", False):
        inputs = {key: tensor[:1] for key, tensor in inputs.items()}
    value = case.value.make(model, inputs) if isinstance(case.value, Fresh) else case.value
    request = {**inputs, "max_length_b": 6, **extra}
    if name == "inputs":
        del request["input_ids"]
    if name in ("inputs_embeds", "encoder_outputs"):
        del request["input_ids"]
    request[name] = value
    return request, value


def _run(model, monkeypatch, name: str, case: Case, lean: bool):
    """Run the request with the lean loops allowed or not; return what came back (or the error), the state of the
    value passed for `name` after the call, and whether a lean loop ran."""
    calls = []
    with monkeypatch.context() as m:
        for loop in ("lean_beam_search", "lean_greedy_search"):
            original = getattr(generation, loop)

            def counting(*args, _original=original, **kwargs):
                calls.append(kwargs)
                return _original(*args, **kwargs)

            m.setattr(generation, loop, counting)
        m.setattr(model, "use_lean_decoding", lean)
        request, value = _request(model, name, case)
        torch.manual_seed(0)
        try:
            with torch.no_grad():
                result = model.generate(**request)
        except Exception as error:  # Both loops must refuse alike: the same kind of error, the same message.
            result = ("raised", type(error).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(error)))
    state = value.received if isinstance(value, _Streamer) else value if isinstance(value, Cache) else None
    return result, state, bool(calls)


def _same(first, second) -> bool:
    """Whether two results are identical: tensors bit for bit, caches layer by layer, outputs field by field."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (
            isinstance(first, torch.Tensor)
            and isinstance(second, torch.Tensor)
            and first.shape == second.shape
            and torch.equal(first, second)
        )
    if isinstance(first, EncoderDecoderCache) or isinstance(second, EncoderDecoderCache):
        return type(first) is type(second) and all(
            _same(_layers(a), _layers(b))
            for a, b in (
                (first.self_attention_cache, second.self_attention_cache),
                (first.cross_attention_cache, second.cross_attention_cache),
            )
        )
    if isinstance(first, (dict, ModelOutput)):
        return (
            isinstance(second, (dict, ModelOutput))
            and first.keys() == second.keys()
            and all(_same(first[key], second[key]) for key in first)
        )
    if isinstance(first, (tuple, list)):
        return (
            isinstance(second, (tuple, list))
            and len(first) == len(second)
            and all(_same(a, b) for a, b in zip(first, second))
        )
    return first == second


def _layers(cache) -> list:
    """A cache's keys and values, layer by layer (None where a layer holds nothing)."""
    return [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers]


def _label(value) -> str:
    """A test id's name for a value: its repr where that is stable across processes, else its kind."""
    if type(value) in (int, float, str, bool, list, tuple, dict, type(None)):
        return repr(value)
    return "made per run" if isinstance(value, Fresh) else type(value).__name__


def _rows(table: dict) -> list:
    return [
        pytest.param(name, case, id=f"{name}={_label(case.value)}{case.extra or ''}")
        for name in table
        for case in table[name]
    ]


def _check_both_loops(model, monkeypatch, name: str, case: Case):
    lean_result, lean_state, lean_ran = _run(model, monkeypatch, name, case, lean=True)
    loop_result, loop_state, loop_ran = _run(model, monkeypatch, name, case, lean=False)
    assert not loop_ran
    assert lean_ran == case.lean, (
        f"{name}={case.value!r}: the lean loop {'did not run' if case.lean else 'ran'}"
        f" ({generation.lean_loop_refusal.__name__} decides)"
    )
    assert _same(lean_result, loop_result), f"{name}={case.value!r}: {lean_result!r} != {loop_result!r}"
    assert _same(lean_state, loop_state), f"{name}={case.value!r}: the object passed in ends otherwise"


@pytest.mark.parametrize("name, case", _rows(SETTINGS))
def test_each_generation_setting_is_carried_out_by_the_lean_loop_or_handed_over(model, monkeypatch, name, case):
    _check_both_loops(model, monkeypatch, name, case)


@pytest.mark.parametrize("name, case", _rows(ARGUMENTS))
def test_each_generate_argument_is_carried_out_by_the_lean_loop_or_handed_over(model, monkeypatch, name, case):
    _check_both_loops(model, monkeypatch, name, case)


@pytest.mark.parametrize("name, case", _rows(MODEL_INPUTS))
def test_each_model_input_is_carried_out_by_the_lean_loop_or_handed_over(model, monkeypatch, name, case):
    _check_both_loops(model, monkeypatch, name, case)


def test_the_tables_hold_every_setting_argument_and_input_of_the_installed_transformers():
    """A setting, a generate() argument or a model input without a row is not known to be carried out: classify it
    (a row with a value other than its unset one, and whether the lean loops implement it)."""
    settings = TRANSFORMERS_SETTINGS | {name for name in LEAN_SETTINGS if name not in vars(GenerationConfig())}
    source = inspect.getsource(GenerationMixin.generate) + inspect.getsource(
        GenerationMixin._extract_generation_mode_kwargs
    )
    arguments = set(inspect.signature(GenerationMixin.generate).parameters) - {"self", "kwargs"}
    arguments |= set(re.findall(r'(?<![\w.])kwargs\.pop\("(\w+)"', source))
    inputs = set(inspect.signature(VaswaniForConditionalGeneration.forward).parameters) - {"self", "kwargs"}
    for table, names, what in (
        (SETTINGS, settings, "GenerationConfig setting"),
        (ARGUMENTS, arguments, "generate() argument"),
        (MODEL_INPUTS, inputs, "model input"),
    ):
        missing = sorted(names - set(table))
        assert not missing, (
            f"classify each {what} {missing}: add a row to tests/test_generation_options.py with a value other than "
            "its unset one, and either implement it in the lean loops (LEAN_SETTINGS / LEAN_MODEL_INPUTS of "
            "generation_vaswani.py) or let it hand over to transformers' loop"
        )
        assert not set(table) - names, f"rows for what transformers no longer has: {sorted(set(table) - names)}"
    paper = VaswaniForConditionalGeneration(tiny_config()).generation_config
    for name, cases in SETTINGS.items():  # every row asks for something other than what the paper's request has
        asked = getattr(paper, name, None)
        asked = UNSET_VALUES.get(name) if asked is None and name in TRANSFORMERS_SETTINGS else asked
        assert all(case.value != asked for case in cases), f"{name}: a row must change it from {asked!r}"


def test_generate_still_fills_unset_settings_with_the_values_lean_loop_refusal_compares_with():
    """`lean_loop_refusal` counts a setting at `GenerationConfig._get_default_generation_params()` as unset: it is
    what generate() fills each unset setting with, so that value asks for nothing."""
    assert "_get_default_generation_params()" in inspect.getsource(GenerationMixin._prepare_generation_config)
    defaults = GenerationConfig._get_default_generation_params()
    assert UNSET_VALUES.items() >= defaults.items() and UNSET_VALUES["num_beams"] == 1


def test_the_paper_decoding_and_greedy_decoding_still_run_the_lean_loops(model, monkeypatch):
    """The default request (beam 4, GNMT alpha 0.6, input length + 50) and greedy decoding stay on the lean loops:
    what generate() fills in for them is all the lean loops implement."""
    for extra in ({}, GREEDY):
        assert _run(model, monkeypatch, "max_length_b", Case(50, True, extra), lean=True)[2]


@pytest.mark.parametrize("argument", ["cache", "past_key_values"])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_cache_the_caller_passes_is_filled_as_marians_is(num_beams, argument):
    """The caller's EncoderDecoderCache comes back holding what transformers' loop puts in it, as MarianMTModel's
    does: self-attention keys and values of every decoder position fed (start token and all generated tokens but the
    last), cross-attention ones of the source, for every row decoded (sentences x beams). It is passed as `cache`
    or by its name before transformers 5.24, `past_key_values`."""
    sizes = dict(d_model=32, num_heads=4, layers=2, vocab=VOCAB)
    ids, mask = padded_batch([6, 4, 7], vocab_size=VOCAB, seed=1)
    request = dict(attention_mask=mask, num_beams=num_beams, min_new_tokens=10, max_new_tokens=10, length_penalty=1.0)
    torch.manual_seed(0)
    marian = MarianMTModel(
        MarianConfig(
            vocab_size=sizes["vocab"],
            d_model=sizes["d_model"],
            encoder_layers=sizes["layers"],
            decoder_layers=sizes["layers"],
            encoder_attention_heads=sizes["num_heads"],
            decoder_attention_heads=sizes["num_heads"],
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
            pad_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=0,
            forced_eos_token_id=None,
        )
    ).eval()
    theirs = EncoderDecoderCache(DynamicCache(config=marian.config), DynamicCache(config=marian.config))
    with torch.no_grad():
        marian_out = marian.generate(ids, cache=theirs, early_stopping=False, **request)
    ours = _model()
    cache = _empty_cache(ours, None)
    with torch.no_grad():
        out = ours.generate(ids, max_length_b=None, **request, **{argument: cache})
    assert out.shape == marian_out.shape == (3, 11)
    assert cache.get_seq_length() == theirs.get_seq_length() == 10
    for part in ("self_attention_cache", "cross_attention_cache"):
        shapes = [(tuple(k.shape), tuple(v.shape)) for k, v in _layers(getattr(cache, part))]
        assert shapes == [(tuple(k.shape), tuple(v.shape)) for k, v in _layers(getattr(theirs, part))], part
    assert tuple(cache.self_attention_cache.layers[0].keys.shape) == (3 * num_beams, 4, 10, 8)
