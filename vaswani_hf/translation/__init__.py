"""Translate with a trained Transformer: the decoding wing, from lines in to lines out (Section 6.1's decoding).

The wing reads in the order a translation goes:

- `frontend` applies the rules every engine shares (N lines in, N lines out; empty lines stay empty; a source too long
  for the position table is refused, naming its line);
- `inference` loads a model folder and decodes sentences in token-budget batches with `model.generate`, whose defaults
  are the paper's (beam 4, GNMT alpha 0.6, max length input + 50); it also builds the translation pipeline;
- `stream` translates a file of any size in bounded windows, resumably, shared among processes;
- `staging` keeps the finished windows of such a file and the proof that a resumed run may reuse them.

The public names are those of `inference`, re-exported here.
"""

from .inference import (
    load_for_decoding,
    load_for_inference,
    register_pipeline,
    save_pretrained_with_pipeline,
    translate,
    translate_batch_fn,
    translation_pipeline,
)

__all__ = [
    "translate",
    "translate_batch_fn",
    "load_for_inference",
    "load_for_decoding",
    "translation_pipeline",
    "save_pretrained_with_pipeline",
    "register_pipeline",
]
