"""Parallel data for the Transformer (Section 5.1): `corpora` (one `datasets` schema for every source) ->
`preprocessing` (shared BPE, filtering) -> `batching` (the one token-budget batcher, the collator).
"""
