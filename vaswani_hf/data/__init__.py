"""Prepare the parallel data for the Transformer (Section 5.1): read the corpora, tokenize and filter the examples, and
batch them by a token budget.

- `corpora` reads Moses file pairs, TSV, JSON lines, Hub datasets and the bundled sample corpus into one `datasets`
  schema (cached by `cache`);
- `preprocessing` tokenises with the shared BPE (`Dataset.map`) and filters out empty and over-long pairs;
- `batching` holds the one token-budget batcher (for training, evaluation and translation) and the collator.
"""
