#!/usr/bin/env python
"""Average the weights of the last N checkpoints of a run (Vaswani et al. 2017, Section 6.1: "we used a single
model obtained by averaging the last 5 checkpoints, which were written at 10-minute intervals"; 20 for big models).

    python scripts/average_checkpoints.py --run_dir outputs/wmt14-en-de-base --last 5 --out outputs/avg5
    python scripts/average_checkpoints.py --checkpoints outputs/run/checkpoint-900 outputs/run/checkpoint-1000 --out avg

The output folder holds the averaged `model.safetensors` and the newest checkpoint's config, generation config,
tokenizer and code files, so it loads with `AutoModelForSeq2SeqLM.from_pretrained(out)` (no optimizer state).
"""

import argparse
import sys
from pathlib import Path

_SCRIPT_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _SCRIPT_DIR]  # scripts/evaluate.py shadows `evaluate`
sys.path.insert(0, str(_SCRIPT_DIR.parent))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--run_dir", help="training output folder holding checkpoint-N folders")
    src.add_argument("--checkpoints", nargs="+", help="explicit checkpoint folders (averaged with equal weight)")
    parser.add_argument("--last", type=int, default=5, help="with --run_dir: number of newest checkpoints (default 5)")
    parser.add_argument("--out", required=True, help="output model folder")
    args = parser.parse_args(argv)

    from vaswani_hf.training import last_checkpoints, save_averaged_checkpoint

    if args.run_dir:
        if not Path(args.run_dir).is_dir():
            parser.error(f"--run_dir not found: {args.run_dir}")
        folders = last_checkpoints(args.run_dir, args.last)
        if len(folders) < args.last:
            print(f"warning: asked for the last {args.last} checkpoints, found {len(folders)}", file=sys.stderr)
    else:
        folders = [Path(p) for p in args.checkpoints]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing or not folders:
        parser.error(f"checkpoint folder(s) not found: {', '.join(missing) or '(none)'}")
    out = save_averaged_checkpoint(folders, args.out)
    print(f"averaged {len(folders)} checkpoints ({', '.join(f.name for f in folders)}) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
