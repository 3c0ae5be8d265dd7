"""Draw the attention weights of the Transformer (Vaswani et al., 2017) and compute diagnostics from them.

The model has three kinds of attention (Section 3.2.3), each with h heads in each of N layers:

* "encoder" is encoder self-attention, where source tokens attend to source tokens, giving an (S, S) matrix per head.
* "decoder" is masked decoder self-attention, where each target token attends to itself and the earlier target tokens,
  giving a (T, T) matrix per head that is zero above the diagonal.
* "cross" is encoder-decoder attention, where target tokens attend to source tokens, giving a (T, S) matrix per head.

Each matrix is the softmax(Q K^T / sqrt(d_k)) of Eq. (1): one row per query, summing to 1 over the keys that query may
see. The paper's Figures 3-5 draw rows of encoder self-attention in layer 5 of 6: Figure 3 for the sentence "It is in
this spirit that a majority of American governments have passed new laws since 2009 making the registration or voting
process more difficult.", where heads follow the long-distance dependency "making ... more difficult", and Figures 4
and 5 for "The Law will never be perfect, but its application should be just ...", where heads resolve an anaphora and
follow the sentence's structure, different heads having learned different tasks. This package draws the same
matrices as heatmaps labelled with the subword tokens, for any model loaded through `AutoModelForSeq2SeqLM` (the
package's classes or `trust_remote_code=True`). It uses only the model's forward pass with `output_attentions=True` and
`generate`, never the package's classes, and imports nothing from `vaswani_hf` outside this folder; its modules import
each other relatively, so the folder also works when copied on its own. The modules are `attention` (getting the
weights), `diagnostics` (numbers computed from them) and `plots` (the figures).

The weights come from one teacher-forced forward pass over (source, target), where the target is a reference or the
model's own greedy or beam translation (`attention` explains why a forced pass shows the attention used while
generating). The rows of "decoder" and "cross" are labelled with the tokens *produced* at each step (y_1 ... </s>), and
the columns of "decoder" are the tokens *fed* at each step (<start>, y_1, ...), so row i sees columns 0..i. In this
package's models the decoder's start token is <pad> (id 0, tensor2tensor's zero start vector); its column is labelled
"<start>" because it is not padding. Only eager attention returns weights (sdpa does not), so
`attention.eager_attention(model)` switches to it and restores the previous implementation and the train/eval mode
afterwards.

The diagnostics are computed from the weights (`attention_diagnostics`, `alignment_share`):

* The per-head entropy H = -sum_k p_k log p_k of each attention row, in nats, averaged over the real query rows. It is
  also normalised by log(the number of keys the row may see), so that 1 means uniform attention (a head that learned
  nothing, or a broken scaling) and 0 a one-hot row. Rows that see a single key (the decoder's first step) are left
  out of the normalised mean.
* The padding mass: for each real (non-padding) query row, the sum of its weights on padding keys, where padding is
  what the attention mask says, not the token id. Its maximum over the rows must be exactly 0. The check appends
  `extra_padding` masked <pad> positions to source and target, so that a single sentence is tested too, and compares
  the padded weights with the unpadded ones ("padding invariance", which must be 0 up to float rounding).
* The alignment share of cross-attention, defined for one sentence with the heads averaged, per decoder layer:
  `mass` is the mean over target tokens i of sum_{j in A(i)} a_ij, the share of token i's cross-attention that falls
  on the source tokens aligned to it; `argmax` is the fraction of target tokens whose most-attended source token is in
  A(i); and `uniform` is the `mass` of uniform attention, mean |A(i)| / S, the chance level to compare with. A(i) is a
  given alignment (pairs of token positions, or a Pharaoh word alignment "i-j" converted with
  `token_alignment_from_words`) or, without one, the diagonal heuristic: the source position round(i (S-1)/(T-1))
  +- `window` tokens. Target tokens without an aligned source token are skipped. The diagonal suits only language
  pairs with a similar word order (the verb movement of English-German breaks it), so use a reference alignment for
  real measurements.
"""

from .attention import KINDS, MAX_PLOT_TOKENS, START_LABEL, Attentions, batch_attentions, collect_attentions
from .diagnostics import (
    _masks,
    alignment_share,
    attention_diagnostics,
    diagonal_alignment,
    format_diagnostics,
    head_entropy,
    padding_mass,
    single_sentence_entropy,
    token_alignment_from_words,
)
from .plots import (
    new_figure,
    plot_attention_head,
    plot_cross_alignment,
    plot_diagnostics,
    plot_heatmap,
    plot_layer_heads,
    save_figure,
    visualize,
)

# The names this package offers. `_masks`, which returns the query and key masks of a batch's weights, is offered to
# the tests that check the padding mass.
__all__ = [
    "KINDS",
    "MAX_PLOT_TOKENS",
    "START_LABEL",
    "Attentions",
    "batch_attentions",
    "collect_attentions",
    "_masks",
    "alignment_share",
    "attention_diagnostics",
    "diagonal_alignment",
    "format_diagnostics",
    "head_entropy",
    "padding_mass",
    "single_sentence_entropy",
    "token_alignment_from_words",
    "new_figure",
    "plot_attention_head",
    "plot_cross_alignment",
    "plot_diagnostics",
    "plot_heatmap",
    "plot_layer_heads",
    "save_figure",
    "visualize",
]
