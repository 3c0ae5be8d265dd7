"""Parallel data for the Transformer (Section 5.1): corpora -> tokenized, filtered examples -> token-budget batches.

- `corpora`: Moses file pairs, TSV, JSON lines, Hub datasets and the bundled sample corpus, in one `datasets` schema;
- `preprocessing`: tokenisation with the shared BPE (`Dataset.map`), filtering of empty and over-long pairs;
- `batching`: the one token-budget batcher (training, evaluation and translation) and the collator.
"""

from .batching import (
    EXAMPLE_INDEX,
    LABEL_PAD_ID,
    TRANSLATE_MAX_TOKENS,
    Seq2SeqCollator,
    TokenBatchSampler,
    batch_ends,
    make_batches,
    pack_by_tokens,
)
from .corpora import (
    CorpusError,
    iter_jsonl,
    iter_moses,
    iter_tsv,
    load_hub,
    load_jsonl,
    load_moses,
    load_parallel,
    load_sample_corpus,
    load_tsv,
    make_parallel_dataset,
    read_lines,
    sample_corpus_path,
    scan_corpus,
)
from .preprocessing import FilterReport, filter_pairs, prepare_dataset, sequence_lengths, tokenize_pairs

__all__ = [
    "CorpusError", "read_lines", "make_parallel_dataset", "iter_moses", "iter_tsv", "iter_jsonl", "load_moses",
    "load_tsv", "load_jsonl", "load_hub", "load_parallel", "sample_corpus_path", "load_sample_corpus", "scan_corpus",
    "tokenize_pairs", "FilterReport", "filter_pairs", "prepare_dataset", "sequence_lengths",
    "TRANSLATE_MAX_TOKENS", "LABEL_PAD_ID", "EXAMPLE_INDEX", "batch_ends", "pack_by_tokens",
    "make_batches",
    "TokenBatchSampler", "Seq2SeqCollator",
]
