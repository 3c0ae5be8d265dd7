"""The paper's decoding (Section 6.1) inside `generate()`: GNMT length penalty, input + 50, beam 4.

These tests pin transformers' private beam-search hooks that `VaswaniForConditionalGeneration` overrides
(`_update_finished_beams`, `_check_early_stop_heuristic`): if an upgrade changes them, these fail.
"""

import math

import pytest
import torch
from conftest import padded_batch, tiny_config
from transformers.modeling_outputs import Seq2SeqLMOutput

from vaswani_hf import VaswaniForConditionalGeneration
from vaswani_hf.modeling_vaswani import gnmt_length_penalty

PAD, EOS, A, B, C, D = 0, 2, 3, 4, 5, 6


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
    settings = dict(num_beams=3, use_cache=False, max_length_a=0.0, max_length_b=4, output_scores=True,
                    return_dict_in_generate=True)
    settings.update(kwargs)
    return model.generate(input_ids=ids, **settings)


def test_gnmt_formula():
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2.0 ** 0.6)
    assert gnmt_length_penalty(13, 0.0) == 1.0


@pytest.mark.parametrize("early_stopping", ["never", True, False])
def test_gnmt_picks_the_hand_computed_hypothesis_with_its_score(early_stopping):
    out = markov_search(early_stopping=early_stopping)
    assert out.sequences[0, 1:3].tolist() == [A, EOS]
    assert out.sequences_scores[0].item() == pytest.approx(-1.0 / (7 / 6) ** 0.6, abs=1e-4)


def test_transformers_penalty_picks_the_other_hypothesis():
    out = markov_search(length_penalty_type="hf")
    assert out.sequences[0, 1:4].tolist() == [B, C, EOS]
    assert out.sequences_scores[0].item() == pytest.approx(-1.2 / 3 ** 0.6, abs=1e-4)


@pytest.mark.parametrize("penalty_type", ["gnmt", "hf"])
def test_alpha_zero_is_no_penalty(penalty_type):
    out = markov_search(length_penalty=0.0, length_penalty_type=penalty_type)
    assert out.sequences[0, 1:3].tolist() == [A, EOS]
    assert out.sequences_scores[0].item() == pytest.approx(-1.0, abs=1e-4)


def test_unknown_penalty_type_is_refused():
    with pytest.raises(ValueError, match="length_penalty_type"):
        markov_search(length_penalty_type="wu")


def test_returned_scores_are_log_probability_over_gnmt_penalty_on_a_real_model():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=24)).eval()
    ids, mask = padded_batch([6, 4], vocab_size=24)
    out = model.generate(input_ids=ids, attention_mask=mask, num_beams=4, num_return_sequences=4, max_length_b=6,
                         output_scores=True, return_dict_in_generate=True)
    for row in range(out.sequences.shape[0]):
        seq = out.sequences[row]
        generated = seq[1:]
        ends = (generated == EOS).nonzero()
        length = int(ends[0]) + 1 if len(ends) else generated.numel()
        source = row // 4
        logits = model(input_ids=ids[source:source + 1], attention_mask=mask[source:source + 1],
                       decoder_input_ids=seq[None, :length]).logits
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
        alone = model.generate(input_ids=ids[row:row + 1, :n], **settings)[0]
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
