"""Marian conversion: an independent implementation of the same architecture to check ours against."""

import pytest
import torch
from conftest import padded_batch, randomize_norms_and_biases, tiny_config
from transformers import MarianMTModel

from vaswani_hf import VaswaniForConditionalGeneration
from vaswani_hf.convert import from_marian, interleaved_to_concatenated, to_marian
from vaswani_hf.modeling_vaswani import shift_tokens_right, sinusoid_table


def test_the_two_layouts_differ_by_the_permutation():
    perm = interleaved_to_concatenated(16)
    interleaved, concatenated = sinusoid_table(30, 16, "interleaved"), sinusoid_table(30, 16, "concatenated")
    assert torch.equal(concatenated[:, perm], interleaved)


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("attention_bias", [False, True])
@pytest.mark.parametrize("tied", [True, False])
def test_marian_with_identical_weights_gives_the_same_logits(layout, attention_bias, tied):
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(
        tiny_config(sinusoid_layout=layout, attention_bias=attention_bias, tie_word_embeddings=tied)
    )
    model = randomize_norms_and_biases(model).eval()
    marian = to_marian(model)
    assert isinstance(marian, MarianMTModel) and not marian.training
    ids, mask = padded_batch([9, 4, 6])
    labels, label_mask = padded_batch([5, 7, 2], seed=3)
    dec = shift_tokens_right(labels.masked_fill(label_mask == 0, -100), 0, 0)
    dec_mask = torch.cat([torch.ones_like(label_mask[:, :1]), label_mask[:, :-1]], dim=1)
    kwargs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask)
    ours, theirs = model(**kwargs).logits, marian(**kwargs).logits
    valid = dec_mask.bool()
    assert (ours[valid] - theirs[valid]).abs().max() <= 1e-4

    back = from_marian(marian, sinusoid_layout=layout)
    assert back.config.attention_bias == attention_bias and back.config.tie_word_embeddings == tied
    original, restored = model.state_dict(), back.state_dict()
    assert original.keys() == restored.keys()
    assert all(torch.equal(original[k], restored[k]) for k in original)  # exact round trip


def test_marian_greedy_generation_agrees(tmp_path):
    torch.manual_seed(1)
    model = randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config())).eval()
    marian = to_marian(model)
    ids, mask = padded_batch([7, 3, 5])
    ours = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_new_tokens=12, max_length_b=None)
    theirs = marian.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_new_tokens=12)
    assert torch.equal(ours[:, : theirs.shape[1]], theirs)


def test_unsupported_settings_are_refused_clearly():
    with pytest.raises(ValueError, match="learned"):
        to_marian(VaswaniForConditionalGeneration(tiny_config(position_encoding="learned")))
    with pytest.raises(ValueError, match="d_k = d_v = d_model / num_heads"):
        to_marian(VaswaniForConditionalGeneration(tiny_config(d_k=4)))
    marian = to_marian(VaswaniForConditionalGeneration(tiny_config()))
    with torch.no_grad():
        marian.final_logits_bias.fill_(0.5)
    with pytest.raises(ValueError, match="final_logits_bias"):
        from_marian(marian)
