"""Export a saved Vaswani model folder to CTranslate2 (needs `pip install 'vaswani_hf[ct2]'`).

    vaswani-export-ctranslate2 --model_dir runs/base/final --out_dir runs/base/ct2
    vaswani-export-ctranslate2 --model_dir runs/base/final --out_dir runs/base/ct2-int8 --quantization int8

The folder loads with `ctranslate2.Translator(out_dir)`; translate with
`vaswani-translate --engine ctranslate2 --model out_dir` or `vaswani_hf.export.ctranslate2.translate_ctranslate2`.
Source tokens must be given as our tokenizer (copied into the folder) makes them, `</s>` included.
The model folder (and --tokenizer) and --out_dir are checked before any work; --out_dir appears whole, and an
existing non-empty one is replaced only with --overwrite (or its older name --force).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from .. import io
from ..constraints import MAX_POSITIONS, number
from ..export.ctranslate2_spec import CT2_FOLDER, QUANTIZATIONS
from .contract import ArgumentParser, declare_paths, run_cli


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-export-ctranslate2", description=__doc__)
    parser.add_argument("--model_dir", required=True, help="folder saved by save_pretrained (model + tokenizer)")
    parser.add_argument("--out_dir", required=True, help="CTranslate2 model folder to write")
    parser.add_argument("--quantization", default=None, choices=QUANTIZATIONS, help="weight type (default: float32)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: --model_dir)")
    parser.add_argument("--max_positions", type=number(int, min=1, max=MAX_POSITIONS), default=None,
                        help="rows of the exported sinusoid table = longest source/output CTranslate2 accepts "
                             "(default: max(max_position_embeddings, 1024))")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --out_dir")
    parser.add_argument("--force", action="store_true", help="the same as --overwrite (its older name)")
    return parser


def _check_tokenizer_folder(path: str) -> Path:
    folder = Path(path)
    if not folder.exists():
        raise io.UsageError(f"--tokenizer folder not found: {folder}")
    if not folder.is_dir():
        raise io.UsageError(f"--tokenizer {folder} is a file; give the folder that holds tokenizer.json")
    if not (folder / "tokenizer.json").is_file():
        raise io.UsageError(f"--tokenizer {folder}: no tokenizer.json; give a folder written by "
                            "tokenizer.save_pretrained")
    io.check_tokenizer_file(folder / "tokenizer.json")
    return folder


def _main(argv: Sequence[str]) -> int:
    from ..export.ctranslate2_spec import import_ctranslate2, to_ctranslate2

    args = build_parser().parse_args(argv)
    overwrite = args.overwrite or args.force
    declare_paths(inputs={"--model_dir": args.model_dir, "--tokenizer": args.tokenizer},
                  outputs={"--out_dir": args.out_dir})
    model_dir = io.check_model_folder(Path(args.model_dir), what="--model_dir", tokenizer=args.tokenizer is None)
    tokenizer = _check_tokenizer_folder(args.tokenizer) if args.tokenizer else None
    out_dir = io.check_output_dir(args.out_dir, overwrite=overwrite, what="--out_dir", kind=CT2_FOLDER)
    import_ctranslate2()  # the optional dependency, before any work
    out = to_ctranslate2(model_dir, out_dir, quantization=args.quantization, tokenizer=tokenizer,
                         max_positions=args.max_positions, force=overwrite)
    print(out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv, prog="vaswani-export-ctranslate2")


if __name__ == "__main__":
    sys.exit(main())
