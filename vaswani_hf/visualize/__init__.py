"""Attention visualisation and attention diagnostics for the Transformer (Vaswani et al., 2017).

Three kinds of attention (Section 3.2.3), h heads in each of N layers, each row a softmax(Q K^T / sqrt(d_k)) of
Eq. (1) summing to 1 over the keys it may see: "encoder" (source -> source, (S, S)), "decoder" (masked, target ->
earlier target, (T, T)) and "cross" (target -> source, (T, S)). The paper's Figures 3-5 draw rows of encoder
self-attention (layer 5 of 6) for one sentence; this package draws the same matrices as heatmaps labelled with the
subword tokens, for any `AutoModelForSeq2SeqLM` (`output_attentions=True` and `generate` only), importing nothing
from `vaswani_hf` outside this folder. Modules: `attention` (the weights), `diagnostics`, `plots` (figures).

Labels: rows of "decoder" and "cross" are the tokens *produced* (y_1 ... </s>), the columns of "decoder" the tokens
*fed* (<start>, y_1, ...; the start token <pad> is labelled "<start>"), so row i sees columns 0..i.

Diagnostics: per-head entropy of each real query row (nats, and divided by log(visible keys): 1 uniform, 0 one-hot;
one-key rows left out); padding mass, a real row's weight on padding keys (by the mask), which must be 0; padding
invariance against unpadded weights; the alignment share of cross-attention (per layer, heads averaged): `mass` on the
aligned source tokens A(i), `argmax` in A(i), `uniform` = mean |A(i)| / S (chance). A(i) is given (token pairs, or a
Pharaoh word alignment via `token_alignment_from_words`) or the diagonal round(i (S-1)/(T-1)) +- `window`, which
suits only language pairs with similar word order.
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

# The names this package offers (`_masks`, the query and key masks of a batch's weights, is offered to the tests that
# check the padding mass).
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
