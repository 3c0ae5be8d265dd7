"""What transformers' `GenerationTesterMixin` checks of every generative model, checked here for
VaswaniForConditionalGeneration in our own words, because that mixin (transformers' tests/generation/test_utils.py) is
not in transformers' source distribution and so does not run in test_transformers_common.py
(transformers_test_standins.py says so in the test output).

The properties the mixin checks that the rest of our suite covers are left to it: the lean loops return transformers'
tokens (test_beam_search.py), beam search with and without the cache (test_generation_vaswani.py), a sentence decodes
alone as inside a padded batch (test_modeling.py, test_beam_search.py). Here: every decoding mode gives the same tokens
with and without the cache, the dictionary outputs of `return_dict_in_generate` in their shapes, a generation
continued from the cache it returned, assisted and prompt-lookup decoding giving greedy's tokens, eager and SDPA
attention generating alike, the cache's layout (d_k and d_v may differ, Table 3 row B), `generate()` without inputs.
As in the mixin, `eos_token_id` is off (every row runs to its length) and its logits processors are on.

The model is trained for a few seconds to reverse its input: a random model repeats one token whatever its input,
which would hide an ordering or caching bug behind identical rows.
"""

import copy

import pytest
import torch
from transformers.cache_utils import EncoderDecoderCache

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.modeling_vaswani import CACHE_NAME

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 40
NEW_TOKENS = 4
# The logits processors the mixin adds to every generate() call (its `_get_logits_processor_kwargs`).
PROCESSORS = dict(bad_words_ids=[[1, 0]], repetition_penalty=1.2, remove_invalid_values=True)
SAMPLING = dict(top_k=10, top_p=0.7, temperature=0.7)
MODES = {
    "greedy": dict(do_sample=False, num_beams=1),
    "sample": dict(do_sample=True, num_beams=1, num_return_sequences=2, **SAMPLING),
    "beam search": dict(
        do_sample=False, num_beams=2, num_return_sequences=2, early_stopping=False, length_penalty=2.0
    ),
    "beam sample": dict(do_sample=True, num_beams=2, num_return_sequences=1, early_stopping=False, **SAMPLING),
}


def reversal_batch(size: int, generator: torch.Generator):
    """Sources of 2-7 random tokens and </s>, right-padded; labels: the tokens reversed, then </s>."""
    ids = torch.zeros(size, 9, dtype=torch.long)
    labels = torch.full((size, 9), -100)
    for row, length in enumerate(torch.randint(2, 8, (size,), generator=generator).tolist()):
        tokens = torch.randint(3, VOCAB, (length,), generator=generator)
        ids[row, :length], ids[row, length] = tokens, 2
        labels[row, :length], labels[row, length] = tokens.flip(0), 2
    return ids, (ids != 0).long(), labels


@pytest.fixture(scope="module")
def model():
    """3 decoder layers over 2 encoder layers and d_v = 6 != d_k = 8, so that a layer count or a width taken from
    the wrong side shows; trained 120 steps to reverse its input."""
    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=VOCAB,
        d_model=32,
        d_ff=64,
        num_heads=4,
        d_v=6,
        num_encoder_layers=2,
        num_decoder_layers=3,
        dropout=0.0,
        max_position_embeddings=64,
    )
    trained = VaswaniForConditionalGeneration(config)
    optimizer = torch.optim.Adam(trained.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(1)
    trained.train()
    for _ in range(120):
        ids, mask, labels = reversal_batch(32, generator)
        loss = trained(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return trained.eval()


@pytest.fixture(scope="module")
def inputs():
    ids, mask, _ = reversal_batch(3, torch.Generator().manual_seed(2))
    return dict(input_ids=ids, attention_mask=mask)


def generate(model, inputs, seed=0, **kwargs):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(**inputs, max_new_tokens=NEW_TOKENS, eos_token_id=None, **PROCESSORS, **kwargs)


def assert_similar(first, second):
    """The mixin's rule for two generations that should agree (`_check_similar_generate_outputs`): the same
    sequences, or, in every row that differs, the same scores up to and including the first differing step (a near
    tie that another summation order may break either way)."""
    steps = first.sequences.shape[1] - len(first.scores)
    for row in range(first.sequences.shape[0]):
        differ = (first.sequences[row] != second.sequences[row]).nonzero()
        last = len(first.scores) - 1 if len(differ) == 0 else int(differ[0]) - steps
        for step in range(last + 1):
            torch.testing.assert_close(first.scores[step][row], second.scores[step][row], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", list(MODES))
def test_each_decoding_mode_gives_the_same_tokens_with_and_without_the_cache(model, inputs, mode):
    """Without the cache every step recomputes every position, so a wrong position, mask or cache entry of the cached
    path shows as other scores; sampling draws the same numbers from the same seed."""
    with_cache = generate(
        model, inputs, **MODES[mode], use_cache=True, return_dict_in_generate=True, output_scores=True
    )
    without = generate(model, inputs, **MODES[mode], use_cache=False, return_dict_in_generate=True, output_scores=True)
    assert_similar(with_cache, without)
    assert len(set(map(tuple, with_cache.sequences.tolist()))) > 1  # rows differ: the model reads its input


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("mode", list(MODES))
def test_return_dict_in_generate_holds_every_output_in_its_shape(model, inputs, mode, use_cache):
    """As the mixin's `_check_outputs`: sequences of start token + new tokens; per step the processed scores and
    raw logits over the vocabulary, the decoder's self- and cross-attentions of every layer (the new query alone with
    the cache, every query without), its hidden states (embeddings + every layer); the encoder's once; beam search's
    sequence scores and beam indices; the cache, when it is used."""
    config = copy.deepcopy(model.config)
    eager = VaswaniForConditionalGeneration(config).eval()
    eager.load_state_dict(model.state_dict())
    eager.set_attn_implementation("eager")  # SDPA returns no attention weights
    settings = MODES[mode]
    out = generate(
        eager,
        inputs,
        **settings,
        use_cache=use_cache,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        output_attentions=True,
        output_hidden_states=True,
    )
    batch, source_length = inputs["input_ids"].shape
    returned = batch * settings["num_return_sequences"] if "num_return_sequences" in settings else batch
    # rows decoded at each step: every beam in beam search, every returned sequence otherwise
    rows = batch * settings["num_beams"] if settings["num_beams"] > 1 else returned
    assert out.sequences.shape == (returned, 1 + NEW_TOKENS)
    assert len(out.scores) == len(out.logits) == NEW_TOKENS
    assert all(s.shape == (rows, VOCAB) for s in (*out.scores, *out.logits))
    # the encoder runs once per sentence
    encoder_attentions = [tuple(t.shape) for t in out.encoder_attentions]
    assert encoder_attentions == [(batch, config.num_heads, source_length, source_length)] * config.num_encoder_layers
    encoder_hidden = [tuple(t.shape) for t in out.encoder_hidden_states]
    assert encoder_hidden == [(batch, source_length, config.d_model)] * (config.num_encoder_layers + 1)
    for step in range(NEW_TOKENS):
        queries, keys = (1, step + 1) if use_cache or step == 0 else (step + 1, step + 1)
        self_attention = [tuple(t.shape) for t in out.decoder_attentions[step]]
        assert self_attention == [(rows, config.num_heads, queries, keys)] * config.num_decoder_layers
        cross = [tuple(t.shape) for t in out.cross_attentions[step]]
        assert cross == [(rows, config.num_heads, queries, source_length)] * config.num_decoder_layers
        hidden = [tuple(t.shape) for t in out.decoder_hidden_states[step]]
        assert hidden == [(rows, queries, config.d_model)] * (config.num_decoder_layers + 1)
    if settings["num_beams"] > 1:
        assert out.sequences_scores.shape == (returned,)
        assert out.beam_indices.shape == (returned, NEW_TOKENS)
    cache = getattr(out, CACHE_NAME, None)
    assert isinstance(cache, EncoderDecoderCache) if use_cache else cache is None


def test_the_cache_holds_every_decoder_layer_with_its_key_and_value_widths(model, inputs):
    """The mixin's cache-format check: one self-attention and one cross-attention entry per decoder layer, keys
    (B, H, T, d_k) and values (B, H, T, d_v) over the target (self) and the source (cross)."""
    config = model.config
    batch, source_length = inputs["input_ids"].shape
    decoder_input_ids = torch.zeros(batch, 3, dtype=torch.long)
    with torch.no_grad():
        cache = getattr(model(**inputs, decoder_input_ids=decoder_input_ids, use_cache=True), CACHE_NAME)
    assert isinstance(cache, EncoderDecoderCache)
    for part, length in ((cache.self_attention_cache, 3), (cache.cross_attention_cache, source_length)):
        assert len(part.layers) == config.num_decoder_layers
        for layer in part.layers:
            assert tuple(layer.keys.shape) == (batch, config.num_heads, length, config.d_k)
            assert tuple(layer.values.shape) == (batch, config.num_heads, length, config.d_v)


def test_a_generation_continues_from_the_cache_it_returned(model, inputs):
    """The mixin's `test_generate_continue_from_past_key_values`: 2 tokens, then 2 more from the returned sequences and
    cache, are the 4 tokens of one call, and end with the same cache. As in the mixin, the second call gets the whole
    target so far with its mask: transformers 5 reads the mask's length to tell the tokens already in the cache from
    the new ones."""
    kwargs = dict(do_sample=False, num_beams=1, use_cache=True, return_dict_in_generate=True)
    full = generate(model, inputs, **kwargs)
    with torch.no_grad():
        first = model.generate(**inputs, max_new_tokens=2, eos_token_id=None, **PROCESSORS, **kwargs)
        second = model.generate(
            **inputs,
            decoder_input_ids=first.sequences,
            decoder_attention_mask=torch.ones_like(first.sequences),
            max_new_tokens=2,
            eos_token_id=None,
            **PROCESSORS,
            **kwargs,
            **{CACHE_NAME: getattr(first, CACHE_NAME)},
        )
    assert torch.equal(second.sequences, full.sequences)
    continued, whole = getattr(second, CACHE_NAME), getattr(full, CACHE_NAME)
    for got, expected in zip(continued.self_attention_cache.layers, whole.self_attention_cache.layers, strict=True):
        torch.testing.assert_close(got.keys, expected.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.values, expected.values, rtol=1e-5, atol=1e-5)


def test_assisted_and_prompt_lookup_decoding_give_greedys_tokens(model, inputs):
    """Both check the draft tokens with one forward pass over several decoder positions and crop the cache of the
    rejected ones; transformers runs them for one sentence at a time."""
    one = {key: value[:1] for key, value in inputs.items()}
    greedy = generate(model, one, do_sample=False, num_beams=1, return_dict_in_generate=True, output_scores=True)
    assisted = generate(
        model,
        one,
        do_sample=False,
        num_beams=1,
        assistant_model=copy.deepcopy(model),
        return_dict_in_generate=True,
        output_scores=True,
    )
    lookup = generate(
        model,
        one,
        do_sample=False,
        num_beams=1,
        prompt_lookup_num_tokens=2,
        return_dict_in_generate=True,
        output_scores=True,
    )
    assert_similar(assisted, greedy)
    assert_similar(lookup, greedy)


@pytest.mark.parametrize("mode", ["greedy", "beam search"])
def test_eager_and_sdpa_attention_generate_alike(model, inputs, mode):
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    kwargs = dict(MODES[mode], return_dict_in_generate=True, output_scores=True)
    assert_similar(generate(eager, inputs, **kwargs), generate(model, inputs, **kwargs))


def test_generate_without_inputs_starts_from_the_start_token(model):
    """The mixin's `test_generate_without_input_ids`: no source at all decodes from a one-token source of <s>."""
    with torch.no_grad():
        out = model.generate(do_sample=False, num_beams=1, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    assert out.shape == (1, 1 + NEW_TOKENS) and int(out[0, 0]) == model.config.decoder_start_token_id
