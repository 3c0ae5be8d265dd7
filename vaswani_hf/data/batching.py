"""Batch by a token budget (Section 5.1) and collate the batches: this is the one batcher of the package, for
training, evaluation and translation.

Vaswani et al. (2017), Section 5.1: "Sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens."
transformers has no token-budget batching: its `train_sampling_strategy="group_by_length"` groups by length but keeps a
fixed number of *sentences* per batch, and `"batch_rebalance"` keeps a fixed number of sentences per update. So the
packing is written here, once: `batch_ends` cuts an order of sentences greedily into batches whose padded size
(sentences x longest) stays within a budget, and `pack_by_tokens` gives those batches as lists. Both batchers
use it. `TokenBatchSampler`, for training and evaluation, sorts by length, shuffles the batch order per epoch and
shards the batches across ranks. `make_batches`, for translation, puts the longest sentences first and an over-long
sentence in a batch alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Sampler

from ..errors import UsageError
from ..modeling_vaswani import IGNORE_INDEX, shift_tokens_right
from ..tokenization import PAD_ID

if TYPE_CHECKING:
    import datasets

# A translation batch holds at most this many padded source tokens by default (as fairseq's --max-tokens); such a batch
# of a base model with beam 4 fits on any GPU.
TRANSLATE_MAX_TOKENS = 4096
LABEL_PAD_ID = IGNORE_INDEX  # -100, which torch.nn.CrossEntropyLoss (its default ignore_index) and transformers ignore
EXAMPLE_INDEX = "example_index"  # the column that carries an evaluation example's row through the collator


class BatchingError(UsageError):
    """Raised when training examples cannot be batched with these settings; the message says which and what to do."""


def batch_ends(
    order: Sequence[int] | np.ndarray,
    lengths: Sequence[Sequence[int] | np.ndarray],
    max_tokens: int | None,
    max_sentences: int | None = None,
) -> list[int]:
    """Cut `order` (indices) greedily, in that order, into batches, and return where each batch ends (positions in
    `order`, exclusive). A batch grows while, for every array of `lengths`, (sentences in the batch) x (longest of
    them) stays within `max_tokens`, and while it holds at most `max_sentences` sentences. A sentence that alone
    exceeds the budget forms a batch of its own; callers that must refuse it check first. This is O(N) Python, about 1
    s per million sentences (fairseq's `batch_by_size` does the same), and the batches themselves are never built as
    lists."""
    if not 1 <= len(lengths) <= 2:
        raise ValueError("batch_ends: give one array of lengths (source) or two (source, target)")
    order = np.asarray(order, dtype=np.int64)
    first = np.asarray(lengths[0], dtype=np.int64)[order].tolist()  # Python ints, in order, are fast to index
    second = np.asarray(lengths[-1], dtype=np.int64)[order].tolist() if len(lengths) == 2 else first
    budget = max_tokens if max_tokens is not None else float("inf")
    cap = max_sentences if max_sentences is not None else float("inf")
    ends: list[int] = []
    start = longest_first = longest_second = 0
    for position, (x, y) in enumerate(zip(first, second)):
        a, b = max(longest_first, x), max(longest_second, y)
        count = position - start + 1
        if count > 1 and (count * a > budget or count * b > budget or count > cap):
            ends.append(position)
            start, a, b = position, x, y
        longest_first, longest_second = a, b
    if len(first) > start:
        ends.append(len(first))
    return ends


def pack_by_tokens(
    order: Sequence[int] | np.ndarray,
    lengths: Sequence[Sequence[int] | np.ndarray],
    max_tokens: int | None,
    max_sentences: int | None = None,
) -> list[list[int]]:
    """Return the batches of `batch_ends` as lists of indices, for a few thousand sentences such as a file to
    translate."""
    order = np.asarray(order, dtype=np.int64)
    starts = [0, *batch_ends(order, lengths, max_tokens, max_sentences)]
    return [order[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]


def make_batches(
    lengths: Sequence[int], max_tokens: int | None = TRANSLATE_MAX_TOKENS, batch_size: int | None = None
) -> list[list[int]]:
    """Return the translation batches as lists of indices of `lengths`, longest sentences first (ties keep the input
    order), packed by `pack_by_tokens` within `max_tokens` padded source tokens and at most `batch_size` sentences. A
    sentence longer than `max_tokens` forms a batch of its own: it is never dropped or truncated. The longest batch
    comes first, so that running out of memory happens at once rather than at the end. Giving neither limit, or one
    that is not positive, raises a ValueError."""
    if max_tokens is None and batch_size is None:
        raise ValueError("make_batches: give max_tokens, batch_size, or both")
    if max_tokens is not None and max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if batch_size is not None and batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return pack_by_tokens(order, (lengths,), max_tokens, batch_size)


class TokenBatchSampler(Sampler[list[int]]):
    """Pack sentence pairs of similar length into batches of at most `max_tokens` padded source tokens and at most
    `max_tokens` padded target tokens (Section 5.1: about 25000 + 25000 per batch), as a batch sampler.

    The padded tokens of a batch are (number of pairs) x (longest sequence in the batch), `</s>` included: exactly the
    size of the [batch, seq] tensors the collator builds, so that the budget bounds memory.

    The algorithm is fairseq's `batch_by_size`, written here because neither transformers nor Accelerate has one: order
    the pairs by source length, then target length, with ties broken randomly by `seed`, and cut that order greedily
    into batches as large as the budget allows (`batch_ends`). The batches are built once, so that `__len__` is stable
    (the Trainer sizes its schedule from it); each epoch shuffles only the *order* of the batches, with `(seed,
    epoch)`. `set_epoch(epoch)` must be called before each epoch (`VaswaniTrainer` does, through its
    `SamplerEpochCallback`).

    In a distributed run every rank builds the same global batch list and takes every `num_replicas`-th batch of the
    epoch's order, starting at `rank`, so that the ranks get disjoint batches that together cover every example
    exactly once. In training every update synchronises the ranks, so each rank must get the same number of batches:
    the list is made a multiple of `num_replicas` at construction by splitting the batches that hold the most pairs in
    two (a half still fits the budget). This neither repeats batches (which would count examples twice, wrong for
    evaluation metrics) nor drops them (which would lose data), and it needs at least as many batches' worth of pairs
    as there are ranks.

    Args:
        src_lengths, tgt_lengths: the tokens of each example, as arrays of shape [N] (see `sequence_lengths`).
        max_tokens: the budget for padded source tokens and, separately, for padded target tokens per batch.
        max_sentences: an optional cap on pairs per batch.
        shuffle: whether to shuffle the batch order per epoch (training); False keeps the length order (evaluation).
        seed: the base seed; the same seed gives the same batches and the same order on every run.
        num_replicas, rank: the data-parallel world size and this process's index.
        pad_to_multiple_of: if the collator rounds lengths up, pass the same value, so that the budget counts the
            rounding.
        evaluation: whether the batches are for evaluation. Then an example longer than the budget forms a batch of
            its own, as in translation (a held-out sentence is never dropped), and ranks may get different numbers of
            batches (the evaluation loop synchronises only at its end).

    Raises:
        BatchingError: for training, an example alone exceeds `max_tokens` (filter with `filter_pairs` or raise the
            budget), or there are fewer batches' worth of examples than ranks.
    """

    def __init__(
        self,
        src_lengths: Sequence[int] | np.ndarray,
        tgt_lengths: Sequence[int] | np.ndarray,
        max_tokens: int,
        *,
        max_sentences: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        pad_to_multiple_of: int | None = None,
        evaluation: bool = False,
    ):
        src = np.asarray(src_lengths, dtype=np.int64)
        tgt = np.asarray(tgt_lengths, dtype=np.int64)
        if src.shape != tgt.shape or src.ndim != 1:
            raise ValueError(f"src_lengths and tgt_lengths must be 1-D of equal size, got {src.shape} and {tgt.shape}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens={max_tokens} must be positive")
        if pad_to_multiple_of:
            src = -(-src // pad_to_multiple_of) * pad_to_multiple_of
            tgt = -(-tgt // pad_to_multiple_of) * pad_to_multiple_of
        too_big = np.flatnonzero((src > max_tokens) | (tgt > max_tokens))
        if too_big.size and not evaluation:
            i = int(too_big[0])
            raise BatchingError(
                f"{too_big.size} example(s) exceed max_tokens={max_tokens} on their own, e.g. example "
                f"{i} ({src[i]} source / {tgt[i]} target tokens); remove them with "
                "filter_pairs(max_length=...) or raise max_tokens"
            )
        self.max_tokens, self.max_sentences = int(max_tokens), max_sentences
        self.shuffle, self.seed, self.epoch = shuffle, int(seed), 0
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.evaluation = evaluation
        self._order, self._bounds = self._make_batches(src, tgt)  # the global batches, same on every rank
        self.num_examples = int(src.size)

    @classmethod
    def from_dataset(cls, dataset: datasets.Dataset, max_tokens: int, **kwargs: Any) -> TokenBatchSampler:
        """Build a sampler from the lengths of the `input_ids` and `labels` columns of a tokenized dataset."""
        # Imported here, not at the top: the translation tools import this module for `make_batches`, and
        # preprocessing imports `datasets` (about 2 CPU-seconds a process) that only training and evaluation need.
        from .preprocessing import sequence_lengths

        return cls(sequence_lengths(dataset, "input_ids"), sequence_lengths(dataset, "labels"), max_tokens, **kwargs)

    def _make_batches(self, src: np.ndarray, tgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (order, bounds): the examples in batch order, and where each batch starts and ends in it (batch j is
        `order[bounds[j]:bounds[j + 1]]`). Two arrays rather than a list per batch, because 4.5M pairs then take 36 MB
        instead of about 200 MB of Python lists."""
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(src.size)  # random tie-breaking among equal lengths
        order = order[np.argsort(tgt[order], kind="stable")]
        order = order[np.argsort(src[order], kind="stable")]  # by source length, then target length
        ends = batch_ends(order, (src, tgt), self.max_tokens, self.max_sentences)
        return order, np.asarray(self._balance([0, *ends], src.size), dtype=np.int64)

    def _balance(self, bounds: list[int], n: int) -> list[int]:
        """Split the most populous batches until their count is a multiple of num_replicas (see the class docstring),
        and return the new bounds."""
        r = self.num_replicas
        if n == 0:
            return [0]
        if self.evaluation:  # each rank evaluates its share with no collective per batch, so counts may differ
            return bounds
        count = len(bounds) - 1
        target = max(r, -(-count // r) * r)
        if target > n:
            raise BatchingError(
                f"cannot give {r} ranks the same number of distinct non-empty batches from {n} "
                f"examples ({count} batches); use fewer processes or more data"
            )
        while len(bounds) - 1 < target:  # at most r - 1 splits
            sizes = np.diff(bounds)
            j = int(np.argmax(sizes))  # the first of the most populous
            bounds.insert(j + 1, bounds[j] + int(sizes[j]) // 2)  # the halves stay adjacent, in length order
        return bounds

    @property
    def batches(self) -> list[list[int]]:
        """Return every batch as a list of example indices, in length order; it builds O(N) Python objects, so it is
        meant for inspection."""
        return [self._order[a:b].tolist() for a, b in zip(self._bounds[:-1], self._bounds[1:])]

    def set_epoch(self, epoch: int) -> None:
        """Select the batch order of `epoch` (same as torch's DistributedSampler.set_epoch)."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        count = len(self._bounds) - 1
        order = np.random.default_rng([self.seed, self.epoch]).permutation(count) if self.shuffle else np.arange(count)
        for j in order[self.rank :: self.num_replicas].tolist():
            yield self._order[self._bounds[j] : self._bounds[j + 1]].tolist()

    def __len__(self) -> int:
        """Return the number of batches per rank per epoch."""
        return (len(self._bounds) - 1) // self.num_replicas


@dataclass
class Seq2SeqCollator:
    """Pad a list of tokenized pairs into tensors for the encoder-decoder.

    It returns, for B pairs whose longest source has S tokens and whose longest target has T tokens, all int64:
    `input_ids` [B, S] padded with `pad_token_id`, and `attention_mask` [B, S] (1 for a real token); `labels` [B, T]
    padded with -100, which the loss ignores; and `decoder_input_ids` [B, T], the labels shifted right by one behind
    `decoder_start_token_id` (`<pad>` = 0, the model's tensor2tensor-style zero start vector), with -100 replaced by
    pad (`modeling_vaswani.shift_tokens_right`, the model's own rule). Rows without `labels` (inference) give only
    `input_ids` and `attention_mask`.

    It is hand-written rather than `transformers.DataCollatorForSeq2Seq`, because that one builds `decoder_input_ids`
    only through a model's `prepare_decoder_input_ids_from_labels` and pads through `tokenizer.pad`, which is slower
    per batch; here it is three tensor fills.
    """

    pad_token_id: int = PAD_ID
    decoder_start_token_id: int = PAD_ID
    label_pad_token_id: int = LABEL_PAD_ID
    pad_to_multiple_of: int | None = None

    def _round(self, n: int) -> int:
        m = self.pad_to_multiple_of
        return n if not m else -(-n // m) * m

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        bsz = len(features)
        src = [list(f["input_ids"]) for f in features]
        s_len = self._round(max(len(x) for x in src))
        input_ids = torch.full((bsz, s_len), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((bsz, s_len), dtype=torch.long)
        for i, x in enumerate(src):
            input_ids[i, : len(x)] = torch.as_tensor(x, dtype=torch.long)
            attention_mask[i, : len(x)] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "labels" in features[0] and features[0]["labels"] is not None:
            tgt = [list(f["labels"]) for f in features]
            t_len = self._round(max(len(y) for y in tgt))
            labels = torch.full((bsz, t_len), self.label_pad_token_id, dtype=torch.long)
            for i, y in enumerate(tgt):
                labels[i, : len(y)] = torch.as_tensor(y, dtype=torch.long)
            batch["labels"] = labels
            batch["decoder_input_ids"] = shift_tokens_right(labels, self.pad_token_id, self.decoder_start_token_id)
        if EXAMPLE_INDEX in features[0]:  # in evaluation, record which dataset row each batch row is
            batch[EXAMPLE_INDEX] = torch.tensor([int(f[EXAMPLE_INDEX]) for f in features], dtype=torch.long)
        return batch
