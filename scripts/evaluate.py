#!/usr/bin/env python
"""Score translations: sacreBLEU, chrF, the paper's tokenized BLEU (compound split) and tokenized BLEU.

Translate a source file with a saved model and score it::

    python scripts/evaluate.py --model outputs/model --source newstest2014.en --references newstest2014.de \\
        --out scores.json [--num_beams 4] [--batch_size 32] [--device cpu] [--save_hypotheses hyp.de]

or score an existing output file::

    python scripts/evaluate.py --hypotheses hyp.de --references newstest2014.de --out scores.json

Several reference files may follow ``--references`` (multi-reference BLEU). Prints a table and writes the
scores with their signatures as JSON. See ``vaswani_hf.evaluation`` for what each score is.
"""

import argparse
import json
import sys
from pathlib import Path

# This file is named like the `evaluate` library: drop its own folder from the import path so that
# `import evaluate` finds the library, and make the repository importable when the package is not installed.
_SCRIPT_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _SCRIPT_DIR]
sys.path.insert(0, str(_SCRIPT_DIR.parent))

from vaswani_hf.evaluation import check_line_counts, compute_all, format_table, read_lines  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--references", nargs="+", required=True, metavar="FILE",
                        help="reference file(s), one segment per line")
    parser.add_argument("--hypotheses", metavar="FILE", help="score this output file instead of translating")
    parser.add_argument("--model", metavar="DIR", help="saved model folder (with its tokenizer)")
    parser.add_argument("--source", metavar="FILE", help="source file to translate with --model")
    parser.add_argument("--out", metavar="FILE", help="write the scores as JSON here")
    parser.add_argument("--save_hypotheses", metavar="FILE", help="write the model's translations here")
    parser.add_argument("--num_beams", type=int, default=None,
                        help="beam size (default: the model's generation_config)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--target_lang", default="de", help="target language for the Moses tokenizer")
    parser.add_argument("--tokenize", default="13a", help="sacreBLEU tokenizer for the 'sacrebleu' score")
    parser.add_argument("--lowercase", action="store_true",
                        help="case-insensitive sacrebleu, chrf and bleu_tok_none (the paper-style BLEU stays cased)")
    args = parser.parse_args(argv)
    if args.hypotheses and (args.model or args.source):
        parser.error("give either --hypotheses, or --model with --source, not both")
    if not args.hypotheses and not (args.model and args.source):
        parser.error("give --hypotheses FILE, or --model DIR and --source FILE")
    return args


def translate_file(args):
    """Load the model folder and translate ``args.source``; returns the hypotheses."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from vaswani_hf.evaluation import translate_lines

    if not Path(args.model).is_dir():
        raise FileNotFoundError(f"model folder not found: {args.model}")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, trust_remote_code=True)
    num_beams = args.num_beams if args.num_beams is not None else model.generation_config.num_beams
    sources = read_lines(args.source)
    print(f"translating {len(sources)} lines of {args.source} on {device} with num_beams={num_beams}", file=sys.stderr)
    hypotheses = translate_lines(model, tokenizer, sources, args.batch_size, num_beams, device)
    if args.save_hypotheses:
        Path(args.save_hypotheses).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    return hypotheses, num_beams


def main(argv=None):
    args = parse_args(argv)
    try:
        references = [(name, read_lines(name)) for name in args.references]
        meta = {"references": args.references}
        if args.hypotheses:
            hypotheses = read_lines(args.hypotheses)
            check_line_counts((args.hypotheses, hypotheses), references)
            meta["hypotheses"] = args.hypotheses
        else:
            check_line_counts((args.source, read_lines(args.source)), references)
            hypotheses, num_beams = translate_file(args)
            meta.update(model=args.model, source=args.source, num_beams=num_beams)
            if args.save_hypotheses:
                meta["hypotheses"] = args.save_hypotheses
        meta["num_segments"] = len(hypotheses)
        scores = compute_all(
            hypotheses, [lines for _, lines in references], target_lang=args.target_lang, tokenize=args.tokenize,
            lowercase=args.lowercase,
        )
    except (FileNotFoundError, ValueError) as error:
        sys.exit(f"error: {error}")

    print(format_table(scores))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"scores": scores, "meta": meta}, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
