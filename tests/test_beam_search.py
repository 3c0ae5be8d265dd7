"""The lean decoding loops (`vaswani_hf/beam_search_vaswani.py`) return exactly what transformers' own
`_beam_search` / `_sample` loops return for our model, run whenever `generate()` asks for plain beam search or greedy
decoding, hand everything else back to transformers, and really leave out the work they claim to (finished
sentences, identical first beams). Their decoder step runs the model's own layers (`VaswaniDecoderLayer.sublayers`)
and gives the logits of `forward`; their candidate step (`top_candidates`) is `torch.topk` over all sums.
"""

import pytest
import torch
from conftest import padded_batch, randomize_norms_and_biases, tiny_config

import vaswani_hf.generation_vaswani as generation
from vaswani_hf import VaswaniForConditionalGeneration
from vaswani_hf.beam_search_vaswani import (
    _buffers,
    decoder_step,
    project_source,
    top_candidates,
)

VOCAB = 40

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(seed: int, eos_boost: float = 0.6, **overrides):
    """A random tiny model whose </s> is likely enough that the sentences of a batch finish at different steps."""
    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=VOCAB, **overrides))
    model = randomize_norms_and_biases(model).eval()
    with torch.no_grad():
        model.lm_head.weight[model.config.eos_token_id] += eos_boost  # tied: also the </s> embedding
    return model


def _both_paths(model, **kwargs):
    with torch.no_grad():
        model.use_lean_decoding = True
        lean = model.generate(**kwargs)
        model.use_lean_decoding = False
        loop = model.generate(**kwargs)
    model.use_lean_decoding = True
    return lean, loop


@pytest.fixture
def lean_calls(monkeypatch):
    """Counts the calls of `lean_beam_search` and `lean_greedy_search` made by generate()."""
    calls = []
    for name in ("lean_beam_search", "lean_greedy_search"):
        original = getattr(generation, name)

        def counting(*args, _original=original, **kwargs):
            calls.append(kwargs)
            return _original(*args, **kwargs)

        monkeypatch.setattr(generation, name, counting)
    return calls


SETTINGS = {
    "paper default (gnmt, never, input+50)": {},
    "hf length penalty": dict(length_penalty_type="hf"),
    "alpha 0 and 1.2": dict(length_penalty=1.2),
    "early_stopping True": dict(early_stopping=True),
    "early_stopping False": dict(early_stopping=False),
    "3 of 4 hypotheses": dict(num_return_sequences=3),
    "beam 2, global max_new_tokens": dict(num_beams=2, max_new_tokens=7),
    "beam 5": dict(num_beams=5),
    "min_new_tokens": dict(min_new_tokens=6),
    "min_length over a short limit": dict(min_length=5, max_length_b=4),
    "short per-sentence limit": dict(max_length_a=0.5, max_length_b=2),
    "one token: </s> at once": dict(max_length_a=0.0, max_length_b=1),
    "no per-sentence limit": dict(max_length_b=None, max_new_tokens=20),
    "long outputs (buffer growth)": dict(min_new_tokens=40, max_new_tokens=45),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lean_equals_transformers_loop(setting, seed, lean_calls):
    model = _model(seed, eos_boost=0.3 * seed, attn_implementation=["sdpa", "eager"][seed % 2])
    ids, mask = padded_batch([7, 4, 9, 3, 12][: 2 + seed], vocab_size=VOCAB, seed=seed)
    lean, loop = _both_paths(model, input_ids=ids, attention_mask=mask, **SETTINGS[setting])
    assert len(lean_calls) == 1  # the lean path ran once (the transformers loop the second time)
    assert lean.shape == loop.shape
    assert torch.equal(lean, loop)


GREEDY_SETTINGS = {
    "paper limit (input+50)": {},
    "global max_new_tokens": dict(max_new_tokens=7),
    "min_new_tokens": dict(min_new_tokens=6),
    "min_length over a short limit": dict(min_length=5, max_length_b=4),
    "no per-sentence limit, long (buffer growth)": dict(max_length_b=None, max_new_tokens=40),
    "short per-sentence limit": dict(max_length_a=0.5, max_length_b=2),
    "one token: </s> at once": dict(max_length_a=0.0, max_length_b=1),
}


@pytest.mark.parametrize("setting", list(GREEDY_SETTINGS))
@pytest.mark.parametrize("seed", [0, 1])
def test_lean_greedy_equals_transformers_loop(setting, seed, lean_calls):
    model = _model(seed, eos_boost=0.4 + 0.4 * seed, attn_implementation=["sdpa", "eager"][seed % 2])
    ids, mask = padded_batch([7, 4, 9, 3, 12][: 3 + seed], vocab_size=VOCAB, seed=seed)
    lean, loop = _both_paths(model, input_ids=ids, attention_mask=mask, num_beams=1, **GREEDY_SETTINGS[setting])
    assert len(lean_calls) == 1
    assert lean.shape == loop.shape
    assert torch.equal(lean, loop)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(sinusoid_layout="concatenated"),
        dict(position_encoding="learned"),
        dict(tie_word_embeddings=False),
        dict(d_k=4, d_v=12),
        dict(attention_bias=True),
    ],
)
def test_lean_equals_transformers_loop_across_architectures(overrides, lean_calls):
    model = _model(3, **overrides)
    ids, mask = padded_batch([6, 9, 4], vocab_size=VOCAB, seed=5)
    lean, loop = _both_paths(model, input_ids=ids, attention_mask=mask)
    assert len(lean_calls) == 1
    assert torch.equal(lean, loop)


def test_unpadded_batch_and_single_sentence(lean_calls):
    model = _model(4)
    for lengths in ([5, 5, 5], [8]):
        ids, mask = padded_batch(lengths, vocab_size=VOCAB, seed=2)
        lean, loop = _both_paths(model, input_ids=ids, attention_mask=mask)
        assert torch.equal(lean, loop)
        lean, loop = _both_paths(model, input_ids=ids)  # no attention mask given
        assert torch.equal(lean, loop)
    assert len(lean_calls) == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(no_repeat_ngram_size=2),  # a logits processor the lean loop does not implement
        dict(return_dict_in_generate=True, output_scores=True),  # per-step outputs
        dict(do_sample=True, top_k=5),  # beam sampling
        dict(do_sample=True, num_beams=1),  # sampling
        dict(num_beams=1, repetition_penalty=1.3),  # greedy with a processor the lean loop does not implement
        dict(use_cache=False),
    ],
)
def test_everything_else_runs_transformers_loop(kwargs, lean_calls):
    model = _model(0)
    ids, mask = padded_batch([6, 4], vocab_size=VOCAB, seed=1)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    assert lean_calls == []
    sequences = out.sequences if hasattr(out, "sequences") else out
    assert sequences.shape[0] == 2


def test_training_mode_runs_transformers_loop(lean_calls):
    model = _model(0).train()
    ids, mask = padded_batch([6, 4], vocab_size=VOCAB, seed=1)
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask)
    assert lean_calls == []


def test_finished_sentences_leave_the_batch_and_first_step_is_one_row_per_sentence():
    """The rows fed to the output projection per step: B at the first step (the k beams of a sentence are identical
    then), k * (sentences still running) afterwards, decreasing as sentences finish; transformers' loop computes
    B * k rows at every step until the last sentence is done."""
    model = _model(1, eos_boost=0.9)
    ids, mask = padded_batch([3, 12, 5, 9], vocab_size=VOCAB, seed=4)
    rows = {}
    for lean in (True, False):
        model.use_lean_decoding = lean
        rows[lean] = []
        handle = model.lm_head.register_forward_hook(
            lambda module, args, out, r=rows[lean]: r.append(args[0].shape[0])
        )
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask)
        handle.remove()
        rows[lean].append(out)
    lean_rows, loop_rows = rows[True][:-1], rows[False][:-1]
    assert torch.equal(rows[True][-1], rows[False][-1])
    assert lean_rows[0] == 4 and lean_rows[1] == 16  # one row per sentence at the first step, then 4 beams each
    assert all(r % 4 == 0 for r in lean_rows[1:])
    assert all(a >= b for a, b in zip(lean_rows[1:], lean_rows[2:]))  # sentences only leave
    assert lean_rows[-1] < 16, "some sentences should have left the batch before the last step"
    assert set(loop_rows) == {16} and sum(lean_rows) < sum(loop_rows)


def test_lean_path_in_bf16_matches_its_own_loop():
    """Device/dtype agnostic: a bf16 model decodes through the lean path (scores in float32, as transformers)."""
    model = _model(2).to(torch.bfloat16)
    ids, mask = padded_batch([6, 9, 4], vocab_size=VOCAB, seed=6)
    lean, loop = _both_paths(model, input_ids=ids, attention_mask=mask)
    assert torch.equal(lean, loop)


def test_search_stops_once_the_returned_hypotheses_are_final():
    """With num_return_sequences=1 a sentence leaves the batch once no running beam can beat its best finished
    hypothesis (even at its longest), without waiting for k of them: fewer decoder rows than asking for all k, and
    the same best hypothesis, which is also transformers' (test_lean_equals_transformers_loop)."""
    model = _model(2, eos_boost=0.9)
    ids, mask = padded_batch([3, 12, 5, 9, 7, 4], vocab_size=VOCAB, seed=4)
    rows, outputs = {}, {}
    for n in (1, 4):
        rows[n] = []
        handle = model.lm_head.register_forward_hook(lambda module, args, out, r=rows[n]: r.append(args[0].shape[0]))
        with torch.no_grad():
            outputs[n] = model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=n)
        handle.remove()
    best_of_four = outputs[4][::4]
    assert torch.equal(outputs[1], best_of_four[:, : outputs[1].shape[1]])
    assert sum(rows[1]) < sum(rows[4])


@pytest.mark.parametrize("vocab", [8000, 37000, 4096, 200, 40])
@pytest.mark.parametrize("first_step", [False, True])
def test_top_candidates_match_topk_over_all_sums(vocab, first_step):
    """The lean beam search's candidate step == torch.topk over every beam score + log-prob sum (values bit-equal,
    indices equal): vocabularies with and without a partial last block, short ones (plain fallback), and the first
    step's k identical beams (an expanded view, one live beam score, the others -1e9)."""
    alive, k, keep = 6, 4, 8
    g = torch.Generator().manual_seed(vocab)
    log_probs = torch.log_softmax(3 * torch.randn(alive, 1 if first_step else k, vocab, generator=g), dim=-1)
    log_probs[0, 0, -2] = -1.0e-3  # a best token in the last, partial block
    log_probs = log_probs.expand(alive, k, vocab)
    running = -10 * torch.rand(alive, k, generator=g)
    if first_step:
        running[:, 1:] = -1.0e9
    values, indices = top_candidates(log_probs, running, keep)
    ref_values, ref_indices = torch.topk((log_probs + running[:, :, None]).reshape(alive, k * vocab), keep)
    assert torch.equal(values, ref_values)
    assert torch.equal(indices, ref_indices)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize(
    "overrides", [{}, dict(d_k=4, d_v=12, attention_bias=True), dict(position_encoding="learned")]
)
def test_decoder_step_gives_the_logits_of_forward(attn, overrides):
    """The lean loops' `decoder_step` -- the model's own embedding and `VaswaniDecoderLayer.sublayers`, attending over
    preallocated buffers, the source K/V projected once per sentence and queried by a sentence's beams together --
    gives the logits of `forward` over the whole prefix (per row, with the source repeated per beam), step by step.
    Beams of a sentence decode different prefixes; the buffers are reordered between steps as beam search does."""
    beams, steps = 3, 6
    torch.manual_seed(0)
    model = randomize_norms_and_biases(
        VaswaniForConditionalGeneration(tiny_config(vocab_size=VOCAB, attn_implementation=attn, **overrides))
    ).eval()
    ids, mask = padded_batch([7, 4, 9], vocab_size=VOCAB, seed=2)
    prefixes = torch.randint(3, VOCAB, (ids.shape[0] * beams, steps), generator=torch.Generator().manual_seed(1))
    prefixes[:, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        states = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        source = project_source(model, states, mask)
        buffers = _buffers(model, prefixes.shape[0], steps, states.dtype, states.device)
        rows = prefixes.shape[0]
        for step in range(steps):
            lean = model.lm_head(decoder_step(model, prefixes[:, step], step, buffers, source, beams))
            full = model(
                input_ids=ids.repeat_interleave(beams, 0),
                attention_mask=mask.repeat_interleave(beams, 0),
                decoder_input_ids=prefixes[:, : step + 1],
            ).logits[:, -1]
            torch.testing.assert_close(lean, full, rtol=1e-5, atol=1e-5)
            for buffer in buffers:  # the identity reorder, as beam search does after every step
                buffer.reorder(rows, step + 1, torch.arange(rows))
