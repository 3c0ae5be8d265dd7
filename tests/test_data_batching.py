"""Tests of vaswani_hf.data.batching: `pack_by_tokens`, the one token-budget packer (paper, Section 5.1), and its two
users, `TokenBatchSampler` (training and evaluation) and `make_batches` (translation); the collator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from data_helpers import MULTI30K_RAW, padded, random_lengths
from torch.utils.data import DataLoader

from vaswani_hf.data.batching import (
    TRANSLATE_MAX_TOKENS,
    Seq2SeqCollator,
    TokenBatchSampler,
    make_batches,
    pack_by_tokens,
)
from vaswani_hf.data.corpora import load_corpus
from vaswani_hf.data.preprocessing import prepare_dataset, sequence_lengths
from vaswani_hf.tokenization import EOS_ID, PAD_ID, train_bpe_tokenizer

# ------------------------------------------------------------------------------------------------ reference packers
# The batching rules of pack_by_tokens' two users, each written out as one plain loop that shares no code with
# vaswani_hf.data: TokenBatchSampler and make_batches must give exactly these batches.


def reference_sampler_batches(src, tgt, max_tokens, max_sentences, seed):
    """Training batches: the pairs by source length, then target length, then a seeded random order; a batch grows
    while sentences x longest stays within `max_tokens` on each side and, with `max_sentences`, up to that many."""
    n = src.size
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    order = order[np.argsort(tgt[order], kind="stable")]
    order = order[np.argsort(src[order], kind="stable")]
    batches, cur = [], []
    max_s = max_t = 0
    for i in order.tolist():
        s, t = int(src[i]), int(tgt[i])
        ms, mt = max(max_s, s), max(max_t, t)
        k = len(cur) + 1
        if cur and (k * ms > max_tokens or k * mt > max_tokens or (max_sentences is not None and k > max_sentences)):
            batches.append(cur)
            cur, ms, mt = [], s, t
        cur.append(i)
        max_s, max_t = ms, mt
    if cur:
        batches.append(cur)
    return batches


def reference_translation_batches(lengths, max_tokens=4096, batch_size=None):
    """Translation batches: the longest sentences first (ties in input order); a batch grows while sentences x
    longest stays within `max_tokens` and, with `batch_size`, up to that many."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        too_many_tokens = max_tokens is not None and new_longest * (len(current) + 1) > max_tokens
        too_many_sentences = batch_size is not None and len(current) >= batch_size
        if current and (too_many_tokens or too_many_sentences):
            batches.append(current)
            current, new_longest = [], lengths[i]
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


# ------------------------------------------------------------------------------------------------ pack_by_tokens


def test_constants():
    assert TRANSLATE_MAX_TOKENS == 4096


def test_pack_by_tokens_budget_rule_by_hand():
    """A batch grows while sentences x longest stays within the budget, in the given order."""
    lengths = [3, 3, 4, 2, 6, 1]
    # [3,3,4] -> 3 x 4 = 12 <= 12; + 2 -> 4 x 4 = 16 > 12: cut; [2, 6] -> 2 x 6 = 12; + 1 -> 18: cut
    assert pack_by_tokens(range(6), (lengths,), 12) == [[0, 1, 2], [3, 4], [5]]
    assert pack_by_tokens([5, 3, 0, 1, 2, 4], (lengths,), 12) == [[5, 3, 0, 1], [2, 4]]  # 4 x 3 = 12; then 2 x 6
    assert pack_by_tokens(range(6), (lengths,), 11) == [[0, 1], [2, 3], [4], [5]]  # 12 > 11 cuts earlier
    assert pack_by_tokens(range(6), (lengths,), None) == [[0, 1, 2, 3, 4, 5]]  # no budget: one batch
    assert pack_by_tokens([], (lengths,), 12) == []
    assert pack_by_tokens(np.array([2, 0]), (np.array(lengths),), 12) == [[2, 0]]  # numpy order and lengths


def test_pack_by_tokens_two_sides():
    """With source and target lengths, each side must fit the budget on its own."""
    src, tgt = [2, 2, 2, 2], [2, 5, 2, 2]
    assert pack_by_tokens(range(4), (src,), 8) == [[0, 1, 2, 3]]
    assert pack_by_tokens(range(4), (src, tgt), 8) == [[0], [1], [2, 3]]  # 2 x 5 = 10 > 8 cuts twice
    assert pack_by_tokens(range(4), (tgt, src), 8) == pack_by_tokens(range(4), (src, tgt), 8)
    with pytest.raises(ValueError, match="one array of lengths .* or two"):
        pack_by_tokens(range(4), (), 8)
    with pytest.raises(ValueError, match="one array of lengths .* or two"):
        pack_by_tokens(range(4), (src, tgt, src), 8)


def test_pack_by_tokens_over_long_alone():
    """A sentence longer than the budget forms a batch of its own, and closes the batch before it."""
    lengths = [2, 2, 30, 2, 2]
    assert pack_by_tokens(range(5), (lengths,), 8) == [[0, 1], [2], [3, 4]]
    assert pack_by_tokens([2, 0, 1], (lengths,), 8) == [[2], [0, 1]]
    assert pack_by_tokens(range(2), ([9, 9],), 8) == [[0], [1]]


def test_pack_by_tokens_max_sentences():
    lengths = [1] * 7
    assert pack_by_tokens(range(7), (lengths,), None, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert pack_by_tokens(range(7), (lengths,), 4, 3) == [[0, 1, 2], [3, 4, 5], [6]]  # the cap binds first
    assert pack_by_tokens(range(7), (lengths,), 2, 3) == [[0, 1], [2, 3], [4, 5], [6]]  # the budget binds first
    assert pack_by_tokens(range(3), (lengths,), None, 1) == [[0], [1], [2]]


@pytest.mark.parametrize("max_tokens", [120, 150, 1000, 25000])
@pytest.mark.parametrize("max_sentences", [None, 7, 64])
@pytest.mark.parametrize("seed", [0, 5])
def test_sampler_gives_the_reference_batches(max_tokens, max_sentences, seed):
    src, tgt = random_lengths(n=1500, seed=seed)
    sampler = TokenBatchSampler(src, tgt, max_tokens, max_sentences=max_sentences, seed=seed)
    assert sampler.batches == reference_sampler_batches(src, tgt, max_tokens, max_sentences, seed)


@pytest.mark.parametrize(
    "max_tokens, batch_size",
    [(4096, None), (100, None), (50, None), (12, None), (1, None), (None, 1), (None, 7), (100, 5), (300, 16), (7, 2)],
)
def test_make_batches_gives_the_reference_translation_batches(max_tokens, batch_size):
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 60, size=700).tolist()  # many ties: the order among equals must be kept too
    lengths[10] = lengths[400] = 4000  # longer than most budgets
    expected = reference_translation_batches(lengths, max_tokens, batch_size)
    assert make_batches(lengths, max_tokens, batch_size) == expected
    assert make_batches(lengths[:0], max_tokens, batch_size) == []


def test_make_batches_budget_and_cover():
    lengths = [5, 1, 9, 3, 3, 7, 2, 30, 4]
    batches = make_batches(lengths, max_tokens=12)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [7]  # longer than the budget: alone, first
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 12
    assert all(len(b) <= 2 for b in make_batches(lengths, max_tokens=None, batch_size=2))
    assert make_batches(lengths) == [list(np.argsort([-x for x in lengths], kind="stable"))]  # default: 4096


def test_make_batches_bad_arguments():
    with pytest.raises(ValueError, match="give max_tokens, batch_size, or both"):
        make_batches([1, 2], max_tokens=None)
    with pytest.raises(ValueError, match="max_tokens must be positive, got 0"):
        make_batches([1, 2], max_tokens=0)
    with pytest.raises(ValueError, match="batch_size must be positive, got -1"):
        make_batches([1, 2], batch_size=-1)


# ------------------------------------------------------------------------------------------------ sampler


@pytest.mark.parametrize("max_tokens", [150, 1000, 25000])
def test_sampler_exactly_once_and_within_budget(max_tokens):
    src, tgt = random_lengths()
    s = TokenBatchSampler(src, tgt, max_tokens, seed=3)
    for epoch in range(2):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(src)))  # every example exactly once
        assert max(padded(b, src) for b in batches) <= max_tokens
        assert max(padded(b, tgt) for b in batches) <= max_tokens
    # batches are reasonably full (greedy packing of length-sorted pairs)
    if max_tokens == 1000:
        fill = np.mean([max(padded(b, src), padded(b, tgt)) for b in batches]) / max_tokens
        assert fill > 0.8


def test_sampler_deterministic_and_shuffled_per_epoch():
    src, tgt = random_lengths()
    a, b = TokenBatchSampler(src, tgt, 1000, seed=7), TokenBatchSampler(src, tgt, 1000, seed=7)
    assert list(a) == list(b)  # same seed -> same order
    a.set_epoch(1)
    b.set_epoch(1)
    e1 = list(a)
    assert e1 == list(b)
    a.set_epoch(0)
    assert list(a) != e1  # another epoch -> another order
    assert list(TokenBatchSampler(src, tgt, 1000, seed=8)) != list(b)
    fixed = TokenBatchSampler(src, tgt, 1000, shuffle=False)
    fixed.set_epoch(5)
    assert list(fixed) == fixed.batches  # evaluation: length order, independent of epoch


@pytest.mark.parametrize("world", [2, 3])
def test_sampler_ranks_disjoint_covering_equal(world):
    src, tgt = random_lengths(n=1001)
    samplers = [TokenBatchSampler(src, tgt, 900, seed=1, num_replicas=world, rank=r) for r in range(world)]
    single = TokenBatchSampler(src, tgt, 900, seed=1)
    for epoch in (0, 1):
        per_rank = []
        for s in samplers:
            s.set_epoch(epoch)
            per_rank.append(list(s))
        assert len({len(x) for x in per_rank}) == 1 and len(per_rank[0]) == len(samplers[0])  # equal counts
        ids = [frozenset(b) for x in per_rank for b in x]
        flat = [i for x in per_rank for b in x for i in b]
        assert sorted(flat) == list(range(len(src)))  # disjoint and covering: each example once over all ranks
        assert len(set(ids)) == len(ids)
        assert max(padded(b, src) for x in per_rank for b in x) <= 900
    assert len(samplers[0]) * world >= len(single)  # at most world-1 batches were split to balance


def test_sampler_errors_on_oversized_example():
    src, tgt = random_lengths(n=100)
    tgt[42] = 5000
    with pytest.raises(ValueError, match=r"exceed max_tokens=1000 .* example 42 \(\d+ source / 5000 target tokens\)"):
        TokenBatchSampler(src, tgt, 1000)
    with pytest.raises(ValueError, match="rank=2"):
        TokenBatchSampler([3], [3], 100, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="cannot give 4 ranks"):
        TokenBatchSampler([3, 3], [3, 3], 100, num_replicas=4, rank=0)
    with pytest.raises(ValueError, match="max_tokens=0 must be positive"):
        TokenBatchSampler([3], [3], 0)
    with pytest.raises(ValueError, match="1-D of equal size"):
        TokenBatchSampler([3, 4], [3], 100)


def test_sampler_max_sentences_and_pad_multiple():
    src, tgt = random_lengths(n=500)
    s = TokenBatchSampler(src, tgt, 25000, max_sentences=16, pad_to_multiple_of=8)
    batches = list(s)
    assert max(len(b) for b in batches) <= 16
    coll = Seq2SeqCollator(pad_to_multiple_of=8)
    feats = [
        {"input_ids": [5] * (int(src[i]) - 1) + [EOS_ID], "labels": [6] * (int(tgt[i]) - 1) + [EOS_ID]}
        for i in range(len(src))
    ]
    for b in batches:
        out = coll([feats[i] for i in b])
        assert out["input_ids"].shape[1] % 8 == 0 and out["input_ids"].numel() <= 25000


def test_sampler_multi30k_real_lengths():
    if not (MULTI30K_RAW / "train.en").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K_RAW} (set VASWANI_MULTI30K_DIR to run this test)")
    ds = load_corpus("moses", MULTI30K_RAW / "train", "en", "de")
    tok = train_bpe_tokenizer(
        [MULTI30K_RAW / "train.en", MULTI30K_RAW / "train.de"], vocab_size=4000, show_progress=False
    )
    data, report = prepare_dataset(ds, tok, "en", "de")
    assert report.kept == len(data)
    s = TokenBatchSampler.from_dataset(data, 4096, seed=0, num_replicas=2, rank=0)
    s1 = TokenBatchSampler.from_dataset(data, 4096, seed=0, num_replicas=2, rank=1)
    loaders = [DataLoader(data, batch_sampler=x, collate_fn=Seq2SeqCollator()) for x in (s, s1)]
    seen = []
    for dl in loaders:
        for batch in dl:
            assert batch["input_ids"].numel() <= 4096 and batch["labels"].numel() <= 4096
            seen.append(batch["attention_mask"].sum().item())
    assert sum(seen) == int(sequence_lengths(data, "input_ids").sum())  # every source token seen exactly once


# ------------------------------------------------------------------------------------------------ collator


def test_collator_padding_and_shift():
    feats = [
        {"input_ids": [7, 8, 9, EOS_ID], "labels": [4, 5, EOS_ID]},
        {"input_ids": [7, EOS_ID], "labels": [6, 4, 5, 9, EOS_ID]},
    ]
    out = Seq2SeqCollator()(feats)
    assert out["input_ids"].tolist() == [[7, 8, 9, 2], [7, 2, 0, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert out["labels"].tolist() == [[4, 5, 2, -100, -100], [6, 4, 5, 9, 2]]
    assert out["decoder_input_ids"].tolist() == [[PAD_ID, 4, 5, 2, 0], [PAD_ID, 6, 4, 5, 9]]
    assert all(v.dtype == torch.long for v in out.values())
    assert set(Seq2SeqCollator()([{"input_ids": [3, 2]}])) == {"input_ids", "attention_mask"}


def test_collator_carries_the_example_index():
    from vaswani_hf.data.batching import EXAMPLE_INDEX

    out = Seq2SeqCollator()(
        [
            {"input_ids": [3, 2], "labels": [4, 2], EXAMPLE_INDEX: 7},
            {"input_ids": [2], "labels": [2], EXAMPLE_INDEX: 2},
        ]
    )
    assert out[EXAMPLE_INDEX].tolist() == [7, 2]


@pytest.mark.slow
def test_compiled_forward_over_batches_padded_to_64_compiles_a_bounded_number_of_times_and_keeps_the_loss():
    """`pad_to_multiple_of=64` (recipe key `pad_to_multiple_of`) for `torch_compile`: token batches of sentences of
    3-40 tokens, padded to 64 and packed within 256 padded tokens, have at most two shapes (4 x 64, and the last,
    smaller batch), so a model compiled with static shapes compiles at most twice where the unpadded batches have a
    new shape almost every batch (counts of dynamo graphs, deterministic on any CPU; aot_eager backend: the same
    kernels as eager, no code generation). Padding changes nothing: the loss of every batch per target token is the
    unpadded eager loss (masked source keys, ignored target positions, causal decoder)."""
    from torch._dynamo.utils import counters

    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.training.objective import label_smoothed_nll

    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, 41, size=40), rng.integers(3, 41, size=40)
    features = [
        {
            "input_ids": rng.integers(4, 50, size=s - 1).tolist() + [EOS_ID],
            "labels": rng.integers(4, 50, size=t - 1).tolist() + [EOS_ID],
        }
        for s, t in zip(src, tgt)
    ]
    config = VaswaniConfig(
        vocab_size=50, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
    )
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config).eval()
    sampler = TokenBatchSampler(src, tgt, 256, shuffle=False, pad_to_multiple_of=64)
    padded_batches = [Seq2SeqCollator(pad_to_multiple_of=64)([features[i] for i in b]) for b in sampler]
    plain_batches = [Seq2SeqCollator()([features[i] for i in b]) for b in sampler]
    assert len(padded_batches) >= 8 and {b["labels"].shape[1] for b in padded_batches} == {64}
    assert len({tuple(b["input_ids"].shape + b["labels"].shape) for b in plain_batches}) >= 6  # the unpadded case

    def loss(forward, batch):
        labels = batch.pop("labels")
        total, tokens = label_smoothed_nll(forward(**batch).logits, labels, 0.1)
        return total / tokens

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    with torch.no_grad():
        compiled_losses = [loss(compiled, dict(b)) for b in padded_batches]
        eager_losses = [loss(model, dict(b)) for b in plain_batches]
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    assert 1 <= graphs <= 2, graphs
    for got, want in zip(compiled_losses, eager_losses):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
