#!/usr/bin/env python
"""Train the shared source+target BPE tokenizer (paper, Section 5.1) and save it for `AutoTokenizer.from_pretrained`.

Examples:
    # the bundled EN-DE sample corpus
    python scripts/train_tokenizer.py --sample --vocab_size 8000 --out_dir outputs/tokenizer
    # Moses-style files, both sides into one vocabulary
    python scripts/train_tokenizer.py --files data/train.en data/train.de --vocab_size 37000 --out_dir outputs/tok
    # any format vaswani_hf.data.load_parallel reads (prefix, .tsv, .jsonl, Hub name or save_to_disk folder)
    python scripts/train_tokenizer.py --corpus data/train --src_lang en --tgt_lang de --out_dir outputs/tok
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from vaswani_hf.tokenization import DEFAULT_MODEL_MAX_LENGTH, DEFAULT_VOCAB_SIZE, train_bpe_tokenizer


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--files", nargs="+", type=Path, help="plain-text files, one sentence per line (all sides)")
    src.add_argument("--corpus", help="anything vaswani_hf.data.load_parallel reads (needs --src_lang/--tgt_lang)")
    src.add_argument("--sample", action="store_true", help="the bundled EN-DE sample corpus (train split)")
    ap.add_argument("--src_lang", default="en")
    ap.add_argument("--tgt_lang", default="de")
    ap.add_argument("--hub_config", default=None, help="config name for a Hub dataset (e.g. de-en for wmt14)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--vocab_size", type=int, default=DEFAULT_VOCAB_SIZE)
    ap.add_argument("--min_frequency", type=int, default=2)
    ap.add_argument("--lowercase", action="store_true")
    ap.add_argument("--normalization", default="NFC", help="NFC (default), NFKC, NFD, NFKD or none")
    ap.add_argument("--model_max_length", type=int, default=DEFAULT_MODEL_MAX_LENGTH)
    ap.add_argument("--out_dir", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    if args.files:
        corpus = args.files
    else:
        from vaswani_hf.data import load_parallel, load_sample_corpus

        corpus = (
            load_sample_corpus("train", args.src_lang, args.tgt_lang)
            if args.sample
            else load_parallel(args.corpus, args.src_lang, args.tgt_lang, config=args.hub_config, split=args.split)
        )
    t0 = time.perf_counter()
    tok = train_bpe_tokenizer(
        corpus,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        lowercase=args.lowercase,
        normalization=None if args.normalization.lower() == "none" else args.normalization,
        languages=None if args.files else [args.src_lang, args.tgt_lang],
        model_max_length=args.model_max_length,
        save_dir=args.out_dir,
    )
    print(json.dumps({"out_dir": str(args.out_dir), "vocab_size": len(tok),
                      "seconds": round(time.perf_counter() - t0, 2)}))


if __name__ == "__main__":
    main()
