"""Parallel data for the Transformer (Section 5.1): corpora -> tokenized, filtered examples -> token-budget batches.

- `corpora`: Moses file pairs, TSV, JSON lines, Hub datasets and the bundled sample corpus, in one `datasets` schema;
- `preprocessing`: tokenisation with the shared BPE (`Dataset.map`), filtering of empty and over-long pairs;
- `batching`: the one token-budget batcher (training, evaluation and translation) and the collator.
"""
