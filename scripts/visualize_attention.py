#!/usr/bin/env python
"""Plot every attention head of a saved model for one sentence, and print attention diagnostics.

    python scripts/visualize_attention.py --model_dir outputs/default/model --source "A man is riding a bike." \\
        [--target "Ein Mann fährt Fahrrad."] [--alignment "0-0 1-1 3-2 4-3"] [--num_beams 4] [--format svg] \\
        [--per_head] --out attention/

Without --target the model's own translation is plotted (decoded as its generation_config says, or with
--num_beams). --alignment is a word alignment of source and --target (Pharaoh "i-j", whitespace words, 0-based);
without it the share of cross-attention on aligned tokens uses the diagonal heuristic (see vaswani_hf/visualize.py).

Writes to --out: {encoder,decoder,cross}_layer{l}.{fmt} (all heads of a layer), cross_alignment.{fmt} (heads
averaged, per layer), diagnostics.{fmt} (per-head entropy, attention mass on padding) and diagnostics.txt, whose
content is also printed. Exits with status 1 if any real token attends to padding.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when the package is not installed

from vaswani_hf.visualize import KINDS, visualize  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="saved model folder with its tokenizer")
    parser.add_argument("--source", required=True, help="source sentence")
    parser.add_argument("--target", default=None, help="reference translation (default: the model's translation)")
    parser.add_argument("--alignment", default=None, help='word alignment of source and --target, e.g. "0-0 1-2"')
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num_beams", type=int, default=None,
                        help="beam size for the model's own translation (default: its generation_config)")
    parser.add_argument("--max_new_tokens", type=int, default=None)
    parser.add_argument("--format", default="png", choices=["png", "svg", "pdf"])
    parser.add_argument("--per_head", action="store_true", help="also write one file per head")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if args.alignment and not args.target:
        parser.error("--alignment refers to the words of --target: give --target too")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, trust_remote_code=True)  # config.json has an auto_map
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model_dir, trust_remote_code=True,
                                                  attn_implementation="eager").to(args.device)
    result = visualize(model, tokenizer, args.source, args.target, args.out, fmt=args.format,
                       num_beams=args.num_beams, max_new_tokens=args.max_new_tokens, per_head=args.per_head,
                       word_alignment=args.alignment)
    print(result["report"])
    print(f"wrote {len(result['files'])} files to {args.out}")
    leaks = [kind for kind in KINDS if result["diagnostics"]["padding_mass"][kind].max().item() != 0.0]
    if leaks:
        print(f"ERROR: attention mass on padding in {', '.join(leaks)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
