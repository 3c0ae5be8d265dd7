"""Parallel data for the Transformer (Section 5.1): corpora, then tokenized and filtered examples, then token-budget
batches.

- `corpora`: Moses file pairs, TSV, JSON lines, Hub datasets and the bundled sample corpus, read into one `datasets`
  schema (cached by `cache`);
- `preprocessing`: tokenisation with the shared BPE (`Dataset.map`), and the filtering of empty and over-long pairs;
- `batching`: the one token-budget batcher (for training, evaluation and translation) and the collator.
"""
