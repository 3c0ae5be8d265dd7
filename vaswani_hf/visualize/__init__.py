"""Attention visualisation and attention diagnostics for the Transformer (Vaswani et al., 2017).

Three kinds of attention (Section 3.2.3), h heads in each of N layers, each row a softmax(Q K^T / sqrt(d_k)) of
Eq. (1) summing to 1 over the keys it may see: "encoder" (source -> source, (S, S)), "decoder" (masked, target ->
earlier target, (T, T)) and "cross" (target -> source, (T, S)). The paper's Figures 3-5 draw rows of encoder
self-attention (layer 5 of 6) for one sentence; this package draws the same matrices as heatmaps labelled with the
subword tokens, for any `AutoModelForSeq2SeqLM` (`output_attentions=True` and `generate` only), importing nothing
from `vaswani_hf` outside this folder. Modules: `attention` (the weights), `diagnostics`, `plots` (figures).

Labels: rows of "decoder" and "cross" are the tokens *produced* at each step (y_1 ... </s>), the columns of "decoder"
the tokens *fed* (<start>, y_1, ...), so row i sees columns 0..i; the start token <pad> is labelled "<start>".

Diagnostics (`attention_diagnostics`, `alignment_share`):
* per-head entropy -sum_k p_k log p_k of each real query row (nats), also divided by log(keys the row may see):
  1 is uniform attention (a head that learned nothing, or a broken scaling), 0 one-hot; one-key rows are left out.
* padding mass: a real query row's weight on padding keys (by the mask, not the id), which must be exactly 0, with
  `extra_padding` masked positions added; "padding invariance" compares with the unpadded weights (~0).
* alignment share of cross-attention (one sentence, heads averaged, per layer): `mass`, the mean share of a target
  token's attention on its aligned source tokens A(i); `argmax`, how often its most-attended token is in A(i);
  `uniform`, the chance level mean |A(i)| / S. A(i) is given (token pairs, or a Pharaoh word alignment "i-j" via
  `token_alignment_from_words`) or the diagonal heuristic round(i (S-1)/(T-1)) +- `window`, which only suits
  language pairs with similar word order.
"""

from .attention import KINDS, MAX_PLOT_TOKENS, START_LABEL, Attentions, batch_attentions, \
    collect_attentions  # noqa: F401
from .diagnostics import _masks, alignment_share, attention_diagnostics, diagonal_alignment, format_diagnostics, \
    head_entropy, padding_mass, single_sentence_entropy, token_alignment_from_words  # noqa: F401
from .plots import new_figure, plot_attention_head, plot_cross_alignment, plot_diagnostics, plot_heatmap, \
    plot_layer_heads, save_figure, visualize  # noqa: F401
