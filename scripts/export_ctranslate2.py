#!/usr/bin/env python
"""Export a saved Vaswani model folder to CTranslate2 (needs `pip install 'vaswani_hf[ct2]'`).

    python scripts/export_ctranslate2.py --model_dir runs/base/final --out_dir runs/base/ct2
    python scripts/export_ctranslate2.py --model_dir runs/base/final --out_dir runs/base/ct2-int8 --quantization int8

The folder loads with `ctranslate2.Translator(out_dir)`; translate with
`scripts/translate.py --engine ctranslate2 --model out_dir` or `vaswani_hf.ctranslate2_backend.translate_ctranslate2`.
Source tokens must be given as our tokenizer (copied into the folder) makes them, `</s>` included.
"""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="folder saved by save_pretrained (model + tokenizer)")
    parser.add_argument("--out_dir", required=True, help="CTranslate2 model folder to write")
    parser.add_argument("--quantization", default=None,
                        choices=["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                                 "bfloat16", "float32"],
                        help="weight type (default: float32)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: --model_dir)")
    parser.add_argument("--max_positions", type=int, default=None,
                        help="rows of the exported sinusoid table = longest source/output CTranslate2 accepts "
                             "(default: max(max_position_embeddings, 1024))")
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out_dir")
    args = parser.parse_args(argv)

    from vaswani_hf.convert import to_ctranslate2

    try:
        out = to_ctranslate2(args.model_dir, args.out_dir, quantization=args.quantization, tokenizer=args.tokenizer,
                             max_positions=args.max_positions, force=args.force)
    except (ImportError, FileExistsError, ValueError, OSError) as error:
        hint = " (use --force)" if isinstance(error, FileExistsError) else ""
        print(f"export_ctranslate2.py: error: {error}{hint}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
