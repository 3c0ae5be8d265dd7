"""The lean decoding path (issue 8) gives exactly what the plain path gives.

- `fast_topk` == `torch.topk`, the lean beam search's `top_candidates` == `torch.topk` over all sums, and our
  `_get_top_k_continuations` override == transformers' own;
- beam search's cross-attention K/V projected once per sentence gives the same logits and cross-attention weights as
  the per-row path (bit-identical when repeated per beam; to ~1e-6 when the beams share one copy,
  `share_cross_attention_across_beams`), and is only used when the rows really are repeated;
- beam search and greedy outputs are identical to those with every speed-up switched off (bit-identical sequences
  and scores without the sharing; identical sequences, scores to ~1e-6, with it).
"""

import pytest
import torch
from conftest import padded_batch, randomize_norms_and_biases, tiny_config
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin

from vaswani_hf import VaswaniForConditionalGeneration
from vaswani_hf.beam_search_vaswani import top_candidates
from vaswani_hf.modeling_vaswani import VaswaniDecoder, fast_topk


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


def test_top_k_continuations_override_matches_transformers():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=2048)).eval()
    batch, beams, keep, cur_len, max_len = 3, 4, 8, 5, 12
    log_probs = torch.randn(batch, beams * 2048)
    sequences = torch.randint(0, 2048, (batch, beams, max_len))
    beam_indices = torch.randint(0, 12, (batch, beams, max_len - 1), dtype=torch.int32)
    args = dict(accumulated_log_probs=log_probs, running_beam_indices=beam_indices, cur_len=cur_len,
                decoder_prompt_len=1, do_sample=False, beams_to_keep=keep, num_beams=beams, batch_size=batch)
    ours = model._get_top_k_continuations(running_sequences=sequences.clone(), **args)
    theirs = GenerationMixin._get_top_k_continuations(model, running_sequences=sequences.clone(), **args)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def _source(batch=3, beams=4, seed=0, vocab=64):
    ids, mask = padded_batch([7, 4, 9][:batch], vocab_size=vocab, seed=seed)
    return ids.repeat_interleave(beams, 0), mask.repeat_interleave(beams, 0)


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_grouped_cross_attention_matches_per_row(attn, share):
    torch.manual_seed(0)
    model = randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config(attn_implementation=attn))).eval()
    model.model.decoder.share_cross_attention_across_beams = share
    ids, mask = _source()
    decoder_ids = torch.randint(4, 64, (ids.shape[0], 4))
    results = {}
    for group in (1, 4):
        model.model.decoder._beam_search_group = group
        cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
        with torch.no_grad():
            first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids[:, :3],
                          past_key_values=cache, use_cache=True, output_attentions=attn == "eager")
            step = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids[:, 3:],
                         past_key_values=cache, use_cache=True, output_attentions=attn == "eager")
        assert cache._vaswani_cross_group == group
        stored = ids.shape[0] // group if share else ids.shape[0]
        assert cache.cross_attention_cache.layers[0].keys.shape[0] == stored
        results[group] = (first, step)
    model.model.decoder._beam_search_group = 1
    tolerance = dict(rtol=1e-6, atol=1e-6) if share else dict(rtol=0, atol=0)  # not shared: bit-identical
    for a, b in zip(results[1], results[4]):
        torch.testing.assert_close(a.logits, b.logits, **tolerance)
        if attn == "eager":
            for wa, wb in zip(a.cross_attentions, b.cross_attentions):
                assert wa.shape == wb.shape == (ids.shape[0], 4, a.logits.shape[1], ids.shape[1])
                torch.testing.assert_close(wa, wb, **tolerance)


def test_grouping_only_when_rows_are_repeated():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config()).eval()
    ids, mask = padded_batch([5, 6, 7, 4, 9, 3, 8, 5], seed=1)  # 8 different sentences, as if 2 x 4 beams
    model.model.decoder._beam_search_group = 4
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    with torch.no_grad():
        grouped = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :2], past_key_values=cache,
                        use_cache=True).logits
        model.model.decoder._beam_search_group = 1
        plain = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :2]).logits
    assert cache._vaswani_cross_group == 1
    torch.testing.assert_close(grouped, plain)


def _generate_plain(model, monkeypatch, **kwargs):
    """Generate with the lean path switched off: per-row cross-attention K/V, transformers' own top-k."""
    with monkeypatch.context() as m:
        m.setattr(VaswaniDecoder, "_cross_group", lambda self, *a: 1)
        m.setattr(VaswaniForConditionalGeneration, "_get_top_k_continuations",
                  GenerationMixin._get_top_k_continuations)
        return model.generate(**kwargs)


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("num_beams,penalty", [(4, "gnmt"), (4, "hf"), (1, "gnmt")])
def test_generate_identical_to_plain_path(monkeypatch, num_beams, penalty, share):
    """Bit-identical sequences and scores; with the shared cross-attention, identical tokens and scores to ~1e-6."""
    torch.manual_seed(0)
    model = randomize_norms_and_biases(VaswaniForConditionalGeneration(tiny_config(vocab_size=2048))).eval()
    model.model.decoder.share_cross_attention_across_beams = share
    ids, mask = padded_batch([7, 4, 9, 6], vocab_size=2048, seed=3)
    kwargs = dict(input_ids=ids, attention_mask=mask, num_beams=num_beams, max_new_tokens=12,
                  length_penalty_type=penalty, return_dict_in_generate=True, output_scores=True)
    if num_beams > 1:
        kwargs["num_return_sequences"] = 2
    with torch.no_grad():
        fast = model.generate(**kwargs)
        plain = _generate_plain(model, monkeypatch, **kwargs)
    assert torch.equal(fast.sequences, plain.sequences)
    tolerance = dict(rtol=1e-6, atol=1e-5) if share else dict(rtol=0, atol=0)
    if num_beams > 1:
        torch.testing.assert_close(fast.sequences_scores, plain.sequences_scores, **tolerance)
    for a, b in zip(fast.scores, plain.scores):
        torch.testing.assert_close(a, b, **tolerance)
    assert model.model.decoder._beam_search_group == 1  # reset after the search
