"""`vaswani_hf/generation_vaswani.py`: the paper's decoding (Section 6.1) inside `generate()` -- GNMT length penalty,
input + 50, beam 4 -- and transformers' own loops with our overrides.

- These tests pin transformers' private beam-search hooks that `VaswaniGenerationMixin` overrides
  (`_update_finished_beams`, `_check_early_stop_heuristic`): if an upgrade changes them, these fail. The GNMT choice
  reaches them per call (a context variable), never as state on the model.
- `fast_topk` == `torch.topk`, and our `_get_top_k_continuations` override == transformers' own; transformers' loops
  with our overrides give bit-identical sequences and scores to the loops without them.
- `generate()` hands plain beam search / greedy to the lean loops (tests/test_beam_search.py) only when the rows of
  every sentence really are repeated.
"""

import inspect
import math

import pytest
import torch
from conftest import padded_batch, randomize_norms_and_biases, tiny_config
from transformers import GenerationConfig
from transformers.generation import GenerationMixin
from transformers.generation.stopping_criteria import (
    MaxLengthCriteria,
    StoppingCriteriaList,
)
from transformers.modeling_outputs import Seq2SeqLMOutput

import vaswani_hf.generation_vaswani as generation
from vaswani_hf import VaswaniForConditionalGeneration
from vaswani_hf.configuration_vaswani import SettingError
from vaswani_hf.generation_vaswani import (
    VaswaniGenerationMixin,
    default_generation_config,
    fast_topk,
    gnmt_length_penalty,
)

PAD, EOS, A, B, C, D = 0, 2, 3, 4, 5, 6

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class MarkovModel(VaswaniForConditionalGeneration):
    """Next-token log-probabilities depend only on the last token: a search problem we can solve by hand.

    From the start: A e^-1, B e^-1.2, D the rest (~0.331).  A -> </s>.  B -> C -> </s>.  D -> D or </s>, 1/2 each.
    Complete hypotheses: [A </s>] log P = -1.0 (|Y| = 2); [B C </s>] log P = -1.2 (|Y| = 3); D... much worse.
    GNMT (alpha 0.6): -1.0 / (7/6)^0.6 = -0.9118  beats  -1.2 / (8/6)^0.6 = -1.0098  -> [A </s>]
    |Y|^alpha:        -1.0 / 2^0.6     = -0.6598  loses to -1.2 / 3^0.6     = -0.6208  -> [B C </s>]
    """

    def forward(self, decoder_input_ids=None, **kwargs):
        table = torch.full((8, 8), -1e4)
        table[PAD, A], table[PAD, B] = -1.0, -1.2
        table[PAD, D] = math.log(1 - math.exp(-1.0) - math.exp(-1.2))
        table[A, EOS] = table[C, EOS] = table[EOS, EOS] = 0.0
        table[B, C] = 0.0
        table[D, D] = table[D, EOS] = math.log(0.5)
        logits = table[decoder_input_ids[:, -1]].unsqueeze(1)  # (rows, 1, V)
        return Seq2SeqLMOutput(logits=logits)


def markov_search(**kwargs):
    torch.manual_seed(0)
    model = MarkovModel(tiny_config(vocab_size=8)).eval()
    ids = torch.tensor([[5, 6, EOS]])
    settings = dict(
        num_beams=3,
        use_cache=False,
        max_length_a=0.0,
        max_length_b=4,
        output_scores=True,
        return_dict_in_generate=True,
    )
    settings.update(kwargs)
    return model.generate(input_ids=ids, **settings)


def test_gnmt_formula():
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert gnmt_length_penalty(13, 0.0) == 1.0


@pytest.mark.parametrize("early_stopping", ["never", True, False])
def test_gnmt_picks_the_hand_computed_hypothesis_with_its_score(early_stopping):
    out = markov_search(early_stopping=early_stopping)
    assert out.sequences[0, 1:3].tolist() == [A, EOS]
    assert out.sequences_scores[0].item() == pytest.approx(-1.0 / (7 / 6) ** 0.6, abs=1e-4)


def test_transformers_penalty_picks_the_other_hypothesis():
    out = markov_search(length_penalty_type="hf")
    assert out.sequences[0, 1:4].tolist() == [B, C, EOS]
    assert out.sequences_scores[0].item() == pytest.approx(-1.2 / 3**0.6, abs=1e-4)


@pytest.mark.parametrize("penalty_type", ["gnmt", "hf"])
def test_alpha_zero_is_no_penalty(penalty_type):
    out = markov_search(length_penalty=0.0, length_penalty_type=penalty_type)
    assert out.sequences[0, 1:3].tolist() == [A, EOS]
    assert out.sequences_scores[0].item() == pytest.approx(-1.0, abs=1e-4)


def test_unknown_penalty_type_is_refused():
    with pytest.raises(ValueError, match="generate\\(\\): length_penalty_type must be one of 'gnmt', 'hf'"):
        markov_search(length_penalty_type="wu")
    with pytest.raises(ValueError, match="length_penalty_type must be one of 'gnmt', 'hf'"):  # greedy too
        markov_search(length_penalty_type="wu", num_beams=1)


def test_returned_scores_are_log_probability_over_gnmt_penalty_on_a_real_model():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=24)).eval()
    ids, mask = padded_batch([6, 4], vocab_size=24)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        num_return_sequences=4,
        max_length_b=6,
        output_scores=True,
        return_dict_in_generate=True,
    )
    for row in range(out.sequences.shape[0]):
        seq = out.sequences[row]
        generated = seq[1:]
        ends = (generated == EOS).nonzero()
        length = int(ends[0]) + 1 if len(ends) else generated.numel()
        source = row // 4
        logits = model(
            input_ids=ids[source : source + 1],
            attention_mask=mask[source : source + 1],
            decoder_input_ids=seq[None, :length],
        ).logits
        logp = torch.log_softmax(logits[0], -1).gather(-1, generated[:length, None]).sum()
        assert out.sequences_scores[row].item() == pytest.approx(
            logp.item() / gnmt_length_penalty(length, 0.6), abs=1e-4
        )


def test_paper_settings_are_the_default_generation_config():
    config = VaswaniForConditionalGeneration(tiny_config()).generation_config
    assert (config.num_beams, config.length_penalty, config.length_penalty_type) == (4, 0.6, "gnmt")
    assert (config.max_length_a, config.max_length_b, config.early_stopping) == (1.0, 50, "never")


def test_beam_search_is_the_same_with_and_without_cache_alone_and_batched():
    torch.manual_seed(2)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=24)).eval()
    ids, mask = padded_batch([7, 3, 5, 9], vocab_size=24, seed=4)
    settings = dict(max_length_b=5)  # the paper's beam 4, GNMT 0.6; short outputs keep the test fast
    batched = model.generate(input_ids=ids, attention_mask=mask, **settings)
    uncached = model.generate(input_ids=ids, attention_mask=mask, use_cache=False, **settings)
    assert torch.equal(batched, uncached)
    for row, n in enumerate([7, 3, 5, 9]):
        alone = model.generate(input_ids=ids[row : row + 1, :n], **settings)[0]
        width = alone.shape[0]
        assert torch.equal(alone, batched[row, :width])
        assert (batched[row, width:] == PAD).all() or (batched[row, width:] == EOS).all()


def test_per_sentence_maximum_length_is_input_length_plus_b():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=24)).eval()
    ids, mask = padded_batch([2, 5, 9], vocab_size=24)
    never_stop = dict(suppress_tokens=[EOS])  # </s> forbidden: only the length rule can end a hypothesis
    for num_beams in (1, 4):
        out = model.generate(input_ids=ids, attention_mask=mask, num_beams=num_beams, max_length_b=3, **never_stop)
        for row, source_length in enumerate([2, 5, 9]):
            generated = out[row, 1:].tolist()
            assert EOS in generated
            assert generated.index(EOS) + 1 == source_length + 3  # |Y| including </s> == input length + b
    out = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, **never_stop)
    assert out.shape[1] == 1 + 9 + 50  # the paper's rule by default: input length + 50


@pytest.mark.parametrize("encoder_layers, decoder_layers", [(1, 3), (3, 1)])
def test_beam_search_with_unequal_encoder_and_decoder_depths(encoder_layers, decoder_layers):
    """Table 3 (C) varies N; transformers sizes the decoder cache from the config, which must report the decoder's."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(
        tiny_config(vocab_size=24, num_encoder_layers=encoder_layers, num_decoder_layers=decoder_layers)
    ).eval()
    ids, mask = padded_batch([5, 3], vocab_size=24)
    cached = model.generate(input_ids=ids, attention_mask=mask, max_length_b=4)
    assert torch.equal(cached, model.generate(input_ids=ids, attention_mask=mask, max_length_b=4, use_cache=False))


def test_the_penalty_type_is_per_call_not_state_on_the_model():
    """transformers' loop sees the GNMT choice only while `_beam_search` runs (also when it raises), and nothing is
    stored on the model, its decoder or the cache."""
    seen = []
    original = VaswaniGenerationMixin._update_finished_beams

    def spy(self, **kwargs):
        seen.append(generation._length_penalty_type.get())
        return original(self, **kwargs)

    model = MarkovModel(tiny_config(vocab_size=8)).eval()
    before = set(vars(model)) | set(vars(model.get_decoder()))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(VaswaniGenerationMixin, "_update_finished_beams", spy)
        model.generate(
            input_ids=torch.tensor([[5, 6, EOS]]), num_beams=3, use_cache=False, max_length_a=0.0, max_length_b=4
        )
    assert seen and set(seen) == {"gnmt"}
    assert generation._length_penalty_type.get() == "hf"  # reset after the search
    assert set(vars(model)) | set(vars(model.get_decoder())) == before
    real = VaswaniForConditionalGeneration(tiny_config(vocab_size=24)).eval()
    ids, mask = padded_batch([6, 4], vocab_size=24)
    cache = real.generate(
        input_ids=ids, attention_mask=mask, max_length_b=3, return_dict_in_generate=True, output_scores=True
    ).past_key_values
    assert not [name for name in vars(cache) if name.startswith("_vaswani")]
    with pytest.raises(ValueError, match="length_penalty_type"):
        model.generate(input_ids=torch.tensor([[5, 6, EOS]]), num_beams=3, length_penalty_type="wu")
    assert generation._length_penalty_type.get() == "hf"


@pytest.mark.parametrize("width", [32000, 8000 * 4 + 37, 300, 2048 * 4])
@pytest.mark.parametrize("k", [1, 8])
def test_fast_topk_matches_torch_topk(width, k):
    g = torch.Generator().manual_seed(width + k)
    scores = torch.randn(5, width, generator=g)
    scores[0, -3:] = 50.0 + torch.arange(3.0)  # maxima in the tail that does not fill a block
    scores[1, :] = -float("inf")
    scores[1, 7] = 0.0
    values, indices = fast_topk(scores, k)
    ref_values, ref_indices = torch.topk(scores, k)
    assert torch.equal(values, ref_values)
    assert torch.equal(indices[2:], ref_indices[2:])
    assert torch.equal(scores.gather(1, indices), ref_values)  # row 1 has ties at -inf: any of them is right


def test_top_k_continuations_override_matches_transformers():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=2048)).eval()
    batch, beams, keep, cur_len, max_len = 3, 4, 8, 5, 12
    log_probs = torch.randn(batch, beams * 2048)
    sequences = torch.randint(0, 2048, (batch, beams, max_len))
    beam_indices = torch.randint(0, 12, (batch, beams, max_len - 1), dtype=torch.int32)
    args = dict(
        accumulated_log_probs=log_probs,
        running_beam_indices=beam_indices,
        cur_len=cur_len,
        decoder_prompt_len=1,
        do_sample=False,
        beams_to_keep=keep,
        num_beams=beams,
        batch_size=batch,
    )
    if "vocab_size" in inspect.signature(GenerationMixin._get_top_k_continuations).parameters:
        args["vocab_size"] = 2048  # transformers 5.17 (the GPU image's) still asks for it; later versions do not
    ours = model._get_top_k_continuations(running_sequences=sequences.clone(), **args)
    theirs = GenerationMixin._get_top_k_continuations(model, running_sequences=sequences.clone(), **args)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def _generate_plain(model, monkeypatch, **kwargs):
    """Generate without our speed-ups of transformers' loops: transformers' own top-k and cache reordering."""
    with monkeypatch.context() as m:
        m.setattr(
            VaswaniForConditionalGeneration, "_get_top_k_continuations", GenerationMixin._get_top_k_continuations
        )
        m.delattr(VaswaniGenerationMixin, "_reorder_cache")
        assert not hasattr(model, "_reorder_cache")
        return model.generate(**kwargs)


@pytest.mark.parametrize("num_beams,penalty", [(4, "gnmt"), (4, "hf"), (1, "gnmt")])
def test_generate_identical_to_plain_path(monkeypatch, num_beams, penalty):
    """transformers' loops (per-step outputs requested) with our overrides: bit-identical sequences and scores."""
    torch.manual_seed(0)
    model = randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config(vocab_size=2048))).eval()
    ids, mask = padded_batch([7, 4, 9, 6], vocab_size=2048, seed=3)
    kwargs = dict(
        input_ids=ids,
        attention_mask=mask,
        num_beams=num_beams,
        max_new_tokens=12,
        length_penalty_type=penalty,
        return_dict_in_generate=True,
        output_scores=True,
    )
    if num_beams > 1:
        kwargs["num_return_sequences"] = 2
    with torch.no_grad():
        fast = model.generate(**kwargs)
        plain = _generate_plain(model, monkeypatch, **kwargs)
    assert torch.equal(fast.sequences, plain.sequences)
    if num_beams > 1:
        assert torch.equal(fast.sequences_scores, plain.sequences_scores)
    for a, b in zip(fast.scores, plain.scores):
        assert torch.equal(a, b)


def test_lean_loops_only_when_rows_are_repeated():
    """The lean loops project the source once per sentence: generate() hands them the inputs only when every
    sentence's rows really are num_beams copies of one encoder output."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=40)).eval()
    ids, mask = padded_batch([5, 6, 7, 4, 9, 3, 8, 5], vocab_size=40, seed=1)  # 8 sentences, as if 2 x 4 beams
    config = GenerationConfig(
        num_beams=4, num_return_sequences=1, eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=PAD
    )
    config._eos_token_tensor, config._pad_token_tensor = torch.tensor([EOS]), torch.tensor(PAD)
    criteria = StoppingCriteriaList([MaxLengthCriteria(10)])
    starts = torch.zeros(8, 1, dtype=torch.long)
    with torch.no_grad():
        states = model.get_encoder()(input_ids=ids, attention_mask=mask)
        repeated = model.get_encoder()(
            input_ids=ids[::4].repeat_interleave(4, 0), attention_mask=mask[::4].repeat_interleave(4, 0)
        )
    different = dict(encoder_outputs=states, attention_mask=mask)
    copies = dict(encoder_outputs=repeated, attention_mask=mask[::4].repeat_interleave(4, 0))
    assert model._lean_decoding_inputs(starts, [], criteria, config, different) is None
    lean = model._lean_decoding_inputs(starts, [], criteria, config, copies)
    assert lean is not None and lean["encoder_hidden_states"].shape[0] == 2


@pytest.mark.parametrize("num_beams", [1, 4])
def test_learned_positions_cap_the_output_length(num_beams):
    """Table 3 row (E): a learned position table of P rows cannot embed a P+1-th decoder position, so generate() ends
    every output by P tokens (</s> included) when the per-sentence limit (input + b) asks for more; an explicit
    max_new_tokens / max_length beyond the table is refused, not silently lowered."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(
        tiny_config(position_encoding="learned", max_position_embeddings=12)
    ).eval()
    input_ids, attention_mask = padded_batch([10, 6])
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, max_length_b=50)
    assert out.shape[1] - 1 <= 12  # generated tokens after the start token
    for key, value in (("max_new_tokens", 40), ("max_length", 14)):
        with pytest.raises(SettingError, match=f"{key}={value}, but this model has 12 learned positions"):
            model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, **{key: value})


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_padded_batch_without_its_mask_decodes_as_with_it(num_beams):
    """As transformers infers the mask from pad tokens (pad is not </s>), the lean loops must see it too: the short
    sentence of a padded batch translates the same with or without the tokenizer's attention_mask."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config()).eval()
    input_ids, attention_mask = padded_batch([10, 4])
    without = model.generate(input_ids, num_beams=num_beams, max_new_tokens=8)
    assert torch.equal(
        without, model.generate(input_ids, attention_mask=attention_mask, num_beams=num_beams, max_new_tokens=8)
    )
    attention_mask[1] = 0
    with pytest.raises(SettingError, match="row 1 of attention_mask is all zeros"):
        model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8)


def test_greedy_with_a_length_penalty_gets_no_transformers_warning(monkeypatch):
    """num_beams=1 with the paper's (or any) length_penalty is greedy decoding, where the penalty has no effect: not
    passed on to transformers, which would warn that the flag is not valid."""
    from transformers.generation import configuration_utils

    warned = []
    monkeypatch.setattr(configuration_utils.logger, "warning_once", lambda message, *a, **k: warned.append(message))
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config()).eval()
    input_ids, attention_mask = padded_batch([6, 4])
    out = model.generate(input_ids, attention_mask=attention_mask, num_beams=1, length_penalty=0.0, max_new_tokens=4)
    assert warned == [] and torch.equal(
        out, model.generate(input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=4)
    )


def test_a_folder_without_generation_config_decodes_as_the_paper(tmp_path, recwarn):
    """No generation_config.json: the paper's decoding (beam 4, alpha 0.6, input length + 50), not transformers'
    model-agnostic max_length 20 (translations cut at 21 tokens) with its warning; a file, when present, still wins."""
    torch.manual_seed(0)
    tiny = VaswaniForConditionalGeneration(tiny_config()).eval()
    tiny.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").unlink()
    loaded = VaswaniForConditionalGeneration.from_pretrained(tmp_path)
    paper = default_generation_config(loaded.config)
    assert generation.generation_settings_of(loaded.generation_config) == generation.generation_settings_of(paper)
    ids = torch.tensor([[5, 6, 7, 8, 2]])
    out = loaded.generate(ids, max_length_a=0.0, max_length_b=40, min_new_tokens=40)
    assert out.shape[1] == 1 + 40
    assert loaded.generate(ids).shape[1] <= 1 + 5 + 50
    assert not [w for w in recwarn.list if "max_length" in str(w.message)]
    GenerationConfig(num_beams=2, max_new_tokens=3).save_pretrained(tmp_path)
    assert VaswaniForConditionalGeneration.from_pretrained(tmp_path).generation_config.num_beams == 2


def test_generate_takes_torch_tensors_and_refuses_other_forms_with_a_type_error():
    import numpy as np

    torch.manual_seed(0)
    tiny = VaswaniForConditionalGeneration(tiny_config()).eval()
    ids = [[5, 6, 7, 2]]
    assert tiny.generate(torch.tensor(ids), num_beams=1, max_new_tokens=3).shape[0] == 1
    assert tiny.generate(torch.tensor(ids, dtype=torch.int32), num_beams=1, max_new_tokens=3).shape[0] == 1
    for wrong in (np.array(ids), ids, torch.tensor(ids, dtype=torch.float32)):
        with pytest.raises(TypeError, match="generate\\(\\): input_ids must be a torch integer tensor"):
            tiny.generate(wrong)
        with pytest.raises(TypeError, match="input_ids must be a torch integer tensor"):
            tiny.generate(input_ids=wrong)
