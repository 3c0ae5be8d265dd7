#!/usr/bin/env python
"""Make the README's attention example, docs/attention_example.png, from a trained model folder.

    python scripts/make_readme_attention_plot.py --model_dir outputs/default/model \\
        [--source "Two children are playing in the park."] [--target "..."] [--num_beams 4] \\
        [--out docs/attention_example.png]

Three panels for one sentence and the model's own translation (or --target):
  (a) encoder-decoder attention averaged over all heads and layers, red dots on each target token's most attended
      source token: the learned soft alignment;
  (b) the most focused head (lowest entropy, see vaswani_hf/visualize/) of the last encoder layer, the kind of
      head the paper's Figures 3-5 show (encoder self-attention, layer 5 of 6);
  (c) the most focused encoder-decoder head of the last decoder layer.
The diagnostics (entropy, attention mass on padding, alignment share with the diagonal heuristic) are printed.
"""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository, when the package is not installed

from matplotlib.figure import Figure  # noqa: E402

from vaswani_hf.visualize import (  # noqa: E402
    alignment_share,
    attention_diagnostics,
    collect_attentions,
    diagonal_alignment,
    format_diagnostics,
    new_figure,
    plot_heatmap,
    save_figure,
    single_sentence_entropy,
)

DEFAULT_SOURCE = "Two children are playing in the park."  # in the domain of the `default` recipe's sample corpus


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="trained model folder with its tokenizer")
    parser.add_argument("--source", default=DEFAULT_SOURCE)
    parser.add_argument("--target", default=None, help="reference translation (default: the model's translation)")
    parser.add_argument("--num_beams", type=int, default=None, help="default: the model's generation_config")
    parser.add_argument("--out", default=str(REPO / "docs" / "attention_example.png"))
    return parser.parse_args(argv)


def make_figure(
    model, tokenizer, source: str, target: str | None = None, num_beams: int | None = None
) -> tuple[Figure, str]:
    """The three-panel README figure (3 heatmaps + 1 colorbar axes) and the diagnostics report."""
    attn = collect_attentions(model, tokenizer, source, target, num_beams=num_beams)
    enc_head = int(single_sentence_entropy(attn, "encoder")[-1].argmin())
    cross_head = int(single_sentence_entropy(attn, "cross")[-1].argmin())
    enc_layers, dec_layers = attn.encoder.shape[0], attn.cross.shape[0]
    mean_cross = attn.cross.mean((0, 1))  # (T, S): heads and layers averaged
    share = alignment_share(mean_cross, diagonal_alignment(*mean_cross.shape))

    s, t = len(attn.source_tokens), len(attn.target_tokens)
    fig = new_figure(figsize=(3 * (1.5 + 0.3 * s) + 1.0, 1.8 + 0.3 * max(s, t)), layout="constrained")
    axes = fig.subplots(1, 3)
    plot_heatmap(
        axes[0],
        mean_cross,
        attn.target_tokens,
        attn.source_tokens,
        "(a) encoder-decoder attention,\nall heads and layers averaged",
    )
    axes[0].scatter(mean_cross.argmax(-1).numpy(), range(t), s=10, c="red")
    plot_heatmap(
        axes[1],
        attn.encoder[-1, enc_head],
        attn.source_tokens,
        attn.source_tokens,
        f"(b) encoder self-attention,\nlayer {enc_layers} head {enc_head + 1} (most focused)",
    )
    image = plot_heatmap(
        axes[2],
        attn.cross[-1, cross_head],
        attn.target_tokens,
        attn.source_tokens,
        f"(c) encoder-decoder attention,\nlayer {dec_layers} head {cross_head + 1} (most focused)",
    )
    for ax in axes:
        ax.set_xlabel("keys (attended to)")
    axes[0].set_ylabel("queries (output / current token)")
    fig.colorbar(image, ax=list(axes), fraction=0.02)
    fig.suptitle(f"{source}  ->  {' '.join(attn.target_tokens)}  ({attn.target_origin})", fontsize=10)

    diagnostics = attention_diagnostics(model, tokenizer, [source], [attn.target_ids])
    report = format_diagnostics(diagnostics, {"reference": "diagonal heuristic", "all layers": share})
    return fig, report


def main(argv=None) -> int:
    args = parse_args(argv)
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, trust_remote_code=True)  # config.json has an auto_map
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model_dir, trust_remote_code=True, attn_implementation="eager")
    fig, report = make_figure(model, tokenizer, args.source, args.target, args.num_beams)
    save_figure(fig, args.out, dpi=150)
    print(report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
