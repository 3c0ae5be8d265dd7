"""Draw figures of attention weights and diagnostics; `visualize` writes every figure of one sentence.

The figures use matplotlib's object API on the Agg canvas, so that no pyplot state is shared between calls and no
display is needed. Every figure has one axes per panel plus one colorbar axes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .attention import KIND_TITLES, KINDS, Attentions, collect_attentions
from .diagnostics import (
    alignment_share,
    attention_diagnostics,
    diagonal_alignment,
    format_diagnostics,
    token_alignment_from_words,
)

CMAP = "viridis"


def _fontsize(n: int) -> float:
    return max(4.0, min(9.0, 200.0 / max(n, 1)))


def plot_heatmap(
    ax,
    matrix: torch.Tensor,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    show_labels: bool = True,
):
    """Draw one (Tq, Tk) attention matrix on `ax` and return the image, for a colorbar.

    The queries are the rows, the keys the columns, and the colour scale runs from 0 to 1."""
    image = ax.imshow(matrix.numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(len(col_labels)))
    ax.set_yticks(range(len(row_labels)))
    if show_labels:
        ax.set_xticklabels(col_labels, rotation=90, fontsize=_fontsize(len(col_labels)))
        ax.set_yticklabels(row_labels, fontsize=_fontsize(len(row_labels)))
    else:
        ax.set_xticklabels([])
        ax.set_yticklabels([])
    return image


def new_figure(**kwargs) -> Figure:
    """Return a matplotlib Figure on the Agg canvas, made without pyplot.

    Avoiding pyplot means that no global figure state leaks and no display is needed."""
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike | None, dpi: int = 120) -> Figure:
    """Write `fig` to `path` if one is given, in the format its suffix names (.png, .svg, .pdf), and return `fig`."""
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=dpi)
    return fig


def plot_attention_head(attn: Attentions, kind: str, layer: int, head: int, path=None) -> Figure:
    """Plot one head's (Tq, Tk) attention matrix in layer `layer` (0-based), with the queries as rows and the keys
    as columns, and return the figure."""
    rows, cols = attn.axis_labels(kind)
    matrix = attn.weights(kind)[layer, head]
    fig = new_figure(figsize=(2.0 + 0.28 * len(cols), 1.5 + 0.28 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    image = plot_heatmap(ax, matrix, rows, cols, f"{KIND_TITLES[kind]}, layer {layer + 1}, head {head + 1}")
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    fig.colorbar(image, ax=ax, fraction=0.04)
    return save_figure(fig, path)


def _panel_grid(n: int, ncols: int, cell_w: float, cell_h: float) -> tuple[Figure, list]:
    """Return a figure with n panels in rows of `ncols`, each cell cell_w x cell_h inches.

    The unused cells of the grid are removed."""
    nrows = math.ceil(n / ncols)
    fig = new_figure(figsize=(ncols * cell_w + 1.0, nrows * cell_h + 0.8), layout="constrained")
    axes = [ax for row in fig.subplots(nrows, ncols, squeeze=False) for ax in row]
    for ax in axes[n:]:
        fig.delaxes(ax)
    return fig, axes[:n]


def plot_layer_heads(attn: Attentions, kind: str, layer: int, path=None, ncols: int = 4) -> Figure:
    """Plot all h heads of one layer side by side (h panels and one colorbar), and return the figure.

    The token labels are drawn only on the outer panels, where they do not overlap the neighbouring panels."""
    rows, cols = attn.axis_labels(kind)
    weights = attn.weights(kind)[layer]  # (H, Tq, Tk)
    heads = weights.shape[0]
    ncols = min(ncols, heads)
    fig, axes = _panel_grid(heads, ncols, 1.0 + 0.2 * len(cols), 1.0 + 0.2 * len(rows))
    image = None
    for h, ax in enumerate(axes):
        image = plot_heatmap(ax, weights[h], rows, cols, f"head {h + 1}")
        if h % ncols:  # The y labels go only on the first column.
            ax.set_yticklabels([])
        if h + ncols < heads:  # The x labels go only on the lowest panel of each column.
            ax.set_xticklabels([])
    fig.suptitle(f"{KIND_TITLES[kind]}, layer {layer + 1}, {attn.target_origin} target")
    fig.colorbar(image, ax=[ax for ax in fig.axes], fraction=0.02)
    return save_figure(fig, path)


def _alignment(attn: Attentions, alignment, reference: str | None) -> tuple[list, str]:
    """Return the alignment and its name: the given one, or else the diagonal heuristic."""
    if alignment is None:
        return diagonal_alignment(len(attn.target_tokens), len(attn.source_tokens)), reference or "diagonal heuristic"
    return alignment, reference or "given alignment"


def _cross_panels(attn: Attentions) -> list[tuple[str, torch.Tensor]]:
    """Return (name, (T, S) cross-attention averaged over the heads) for each decoder layer, then for all layers."""
    per_layer = attn.cross.mean(1)  # (L, T, S)
    return [
        *((f"layer {layer + 1}", per_layer[layer]) for layer in range(per_layer.shape[0])),
        ("all layers", per_layer.mean(0)),
    ]


def plot_cross_alignment(
    attn: Attentions, path=None, alignment: Sequence[tuple[int, int]] | None = None, reference: str | None = None
) -> Figure:
    """Plot encoder-decoder attention averaged over the heads, and return the figure.

    There is one panel per decoder layer and one averaged over all layers (L_dec + 1 panels and one colorbar). A red
    dot marks each target token's most-attended source token, and white squares mark the alignment A(i), which is the
    given one or else the diagonal heuristic; the panel titles give `alignment_share`."""
    alignment, reference = _alignment(attn, alignment, reference)
    panels = _cross_panels(attn)
    fig, axes = _panel_grid(
        len(panels), min(len(panels), 4), 1.2 + 0.22 * len(attn.source_tokens), 1.2 + 0.22 * len(attn.target_tokens)
    )
    image = None
    for ax, (name, matrix) in zip(axes, panels):
        share = alignment_share(matrix, alignment)
        image = plot_heatmap(
            ax,
            matrix,
            attn.target_tokens,
            attn.source_tokens,
            f"{name}: mass {share['mass']:.2f}, argmax {share['argmax']:.2f}",
        )
        best = matrix.argmax(-1)
        ax.scatter(best.numpy(), range(len(best)), s=8, c="red", marker="o")
        t_idx, s_idx = zip(*alignment) if alignment else ((), ())
        ax.scatter(s_idx, t_idx, s=40, facecolors="none", edgecolors="white", marker="s", linewidths=0.6)
        ax.set_xlim(-0.5, matrix.shape[1] - 0.5)
        ax.set_ylim(matrix.shape[0] - 0.5, -0.5)
    fig.suptitle(
        f"encoder-decoder attention, heads averaged ({attn.target_origin} target); red: argmax, squares: {reference}"
    )
    fig.colorbar(image, ax=[ax for ax in fig.axes], fraction=0.02)
    return save_figure(fig, path)


def plot_diagnostics(diagnostics: dict, path=None) -> Figure:
    """Plot the diagnostics in four panels and one colorbar, and return the figure.

    The panels show the normalised per-head entropy (layers x heads, where 1 means uniform) of the three attention
    kinds, and the largest attention mass on padding of each kind, which must be 0."""
    fig = new_figure(figsize=(13, 3.6), layout="constrained")
    axes = fig.subplots(1, 4)
    image = None
    for ax, kind in zip(axes[:3], KINDS):
        values = diagnostics["entropy_normalized"][kind]  # (L, H)
        image = ax.imshow(values.numpy(), cmap="magma", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"{KIND_TITLES[kind]}\nentropy / log(#keys)", fontsize=9)
        ax.set_xticks(range(values.shape[1]), [str(h + 1) for h in range(values.shape[1])], fontsize=7)
        ax.set_yticks(range(values.shape[0]), [str(layer + 1) for layer in range(values.shape[0])], fontsize=7)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        for (layer, h), v in np.ndenumerate(values.numpy()):
            ax.text(h, layer, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v < 0.6 else "black")
    masses = [diagnostics["padding_mass"][kind].max().item() for kind in KINDS]
    ax = axes[3]
    ax.bar(range(3), masses, color=["tab:green" if m == 0 else "tab:red" for m in masses])
    ax.set_xticks(range(3), ["enc self", "dec self", "cross"], fontsize=8)
    ax.set_ylim(0, max(1e-3, max(masses) * 1.2))
    ax.set_title("max attention mass on padding\n(must be 0)", fontsize=9)
    for x, m in enumerate(masses):
        ax.text(x, 0, f"{m:.2g}", ha="center", va="bottom", fontsize=8)
    ax.yaxis.tick_right()
    fig.colorbar(image, ax=axes[2], fraction=0.05)
    return save_figure(fig, path)


def visualize(
    model,
    tokenizer,
    source: str,
    target: str | None = None,
    out_dir: str | os.PathLike = "attention",
    *,
    fmt: str = "png",
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    per_head: bool = False,
    word_alignment: str | None = None,
) -> dict:
    """Write all the plots of one sentence pair to `out_dir` and return {"attentions", "diagnostics", "alignment",
    "report", "files"}.

    The files are {kind}_layer{l}.{fmt} (all heads of each layer, for the three kinds), cross_alignment.{fmt} (heads
    averaged, per layer), diagnostics.{fmt} and diagnostics.txt, and with `per_head` also
    {kind}_layer{l}_head{h}.{fmt}. `out_dir` is created if needed, and files of the same names in it are replaced;
    the command vaswani-visualize-attention writes into a new folder instead, which appears whole. `word_alignment`
    ("i-j" source-target word pairs in Pharaoh format) refers to the words of the reference `target`, so it needs
    one; without it the alignment share uses the diagonal heuristic."""
    os.makedirs(out_dir, exist_ok=True)
    attn = collect_attentions(model, tokenizer, source, target, num_beams=num_beams, max_new_tokens=max_new_tokens)
    files = []

    def out(name: str) -> str:
        files.append(os.path.join(out_dir, f"{name}.{fmt}"))
        return files[-1]

    for kind in KINDS:
        weights = attn.weights(kind)
        for layer in range(weights.shape[0]):
            plot_layer_heads(attn, kind, layer, out(f"{kind}_layer{layer + 1}"))
            if per_head:
                for head in range(weights.shape[1]):
                    plot_attention_head(attn, kind, layer, head, out(f"{kind}_layer{layer + 1}_head{head + 1}"))

    if word_alignment is not None and target is None:
        raise ValueError("word_alignment refers to the words of a reference target: pass target too.")
    alignment, reference = _alignment(
        attn,
        None if word_alignment is None else token_alignment_from_words(tokenizer, source, target, word_alignment),
        None,
    )
    plot_cross_alignment(attn, out("cross_alignment"), alignment=alignment, reference=reference)
    shares = {
        "reference": reference,
        **{name: alignment_share(matrix, alignment) for name, matrix in _cross_panels(attn)},
    }

    diagnostics = attention_diagnostics(model, tokenizer, [source], [attn.target_ids])
    plot_diagnostics(diagnostics, out("diagnostics"))
    report = "\n".join(
        [
            f"source: {' '.join(attn.source_tokens)}",
            f"target ({attn.target_origin}): {' '.join(attn.target_tokens)}",
            format_diagnostics(diagnostics, shares),
        ]
    )
    with open(os.path.join(out_dir, "diagnostics.txt"), "w", encoding="utf-8") as f:
        f.write(report + "\n")
    files.append(os.path.join(out_dir, "diagnostics.txt"))
    return {"attentions": attn, "diagnostics": diagnostics, "alignment": shares, "report": report, "files": files}
