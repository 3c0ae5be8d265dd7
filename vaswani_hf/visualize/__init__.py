"""Attention visualisation and attention diagnostics for the Transformer (Vaswani et al., 2017).

The model has three kinds of attention (Section 3.2.3), each with h heads in each of N layers:

* "encoder": encoder self-attention, source -> source, (S, S) per head;
* "decoder": masked decoder self-attention, target -> earlier target, (T, T) per head, zero above the diagonal;
* "cross":   encoder-decoder attention, target -> source, (T, S) per head.

Each matrix is the softmax(Q K^T / sqrt(d_k)) of Eq. (1): one row per query, summing to 1 over the keys it may see.
The paper's Figures 3-5 draw rows of encoder self-attention in layer 5 of 6 for one sentence ("It is in this spirit
that a majority of American governments have passed new laws since 2009 making the registration or voting process
more difficult."): long-distance dependencies ("making ... more difficult") and heads that learned different tasks.
This package draws the same matrices as heatmaps labelled with the subword tokens, for any model loaded through
`AutoModelForSeq2SeqLM` (the package classes or `trust_remote_code=True`): it uses only the model's forward pass
with `output_attentions=True` and `generate`, never the package's classes, and imports nothing from `vaswani_hf`
outside this folder (its modules import each other relatively, so the folder also works copied on its own).
Modules: `attention` (getting the weights), `diagnostics` (numbers computed from them), `plots` (figures).

Weights come from one teacher-forced forward pass over (source, target) with eager attention (`attention`).
Labels: rows of "decoder" and "cross" are the tokens *produced* at each step (y_1 ... </s>); the columns of "decoder"
are the tokens *fed* at each step (<start>, y_1, ...), so row i sees columns 0..i. The decoder's start token is
<pad> (tensor2tensor's zero start vector), labelled "<start>" because it is not padding.

Diagnostics, computed from the weights (`attention_diagnostics`, `alignment_share`):

* per-head entropy H = -sum_k p_k log p_k of each attention row (nats), averaged over the real query rows; also
  normalised by log(number of keys the row may see), so 1 means uniform attention (a head that learned nothing or
  a broken scaling) and 0 a one-hot row. Rows that see a single key (the decoder's first step) are left out of the
  normalised mean.
* padding mass: for each real (non-padding) query row, the sum of its weights on padding keys (by the attention
  mask, not the token id); the maximum over rows must be exactly 0. The check adds `extra_padding` masked <pad>
  positions to source and target, so a single sentence is tested too, and compares the padded weights with the
  unpadded ones ("padding invariance", must be ~0 up to float rounding).
* alignment share of cross-attention (defined for one sentence, heads averaged, per decoder layer):
  - `mass`: mean over target tokens i of sum_{j in A(i)} a_ij, the share of token i's cross-attention that falls on
    the source tokens aligned to it;
  - `argmax`: fraction of target tokens whose most-attended source token is in A(i);
  - `uniform`: `mass` of uniform attention, mean |A(i)| / S, the chance level to compare with.
  A(i) is a given alignment (pairs of token positions, or a word alignment "i-j" in Pharaoh format converted with
  `token_alignment_from_words`) or, without one, the diagonal heuristic: the source position round(i (S-1)/(T-1))
  +- `window` tokens. Target tokens without an aligned source token are skipped. The diagonal only suits language
  pairs with similar word order (EN-DE verb movement breaks it); use a reference alignment for real measurements.
"""

from .attention import KIND_TITLES, KINDS, MAX_PLOT_TOKENS, START_LABEL, Attentions, batch_attentions, \
    collect_attentions, eager_attention
from .diagnostics import _masks, alignment_share, attention_diagnostics, diagonal_alignment, format_diagnostics, \
    head_entropy, padding_mass, single_sentence_entropy, token_alignment_from_words
from .plots import CMAP, new_figure, plot_attention_head, plot_cross_alignment, plot_diagnostics, plot_heatmap, \
    plot_layer_heads, save_figure, visualize

__all__ = ["MAX_PLOT_TOKENS", "KINDS", "Attentions", "eager_attention", "batch_attentions", "collect_attentions",
           "head_entropy", "single_sentence_entropy", "padding_mass", "attention_diagnostics", "diagonal_alignment",
           "token_alignment_from_words", "alignment_share", "format_diagnostics", "plot_heatmap",
           "plot_attention_head", "plot_layer_heads", "plot_cross_alignment", "plot_diagnostics", "new_figure",
           "save_figure", "visualize"]
