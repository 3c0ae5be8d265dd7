"""Export a saved Vaswani model folder to CTranslate2 (needs `pip install 'vaswani_hf[ct2]'`).

    vaswani-export-ctranslate2 --model_dir runs/base/final --out_dir runs/base/ct2
    vaswani-export-ctranslate2 --model_dir runs/base/final --out_dir runs/base/ct2-int8 --quantization int8

The folder loads with `ctranslate2.Translator(out_dir)`; translate with
`vaswani-translate --engine ctranslate2 --model out_dir` or `vaswani_hf.export.ctranslate2.translate_ctranslate2`.
Source tokens must be given as our tokenizer (copied into the folder) makes them, `</s>` included. --out_dir
appears whole, and an existing non-empty one is replaced only with --overwrite (or its older name --force).
"""

from __future__ import annotations

import sys

from ..export.ctranslate2_spec import CT2_FOLDER, EXPORT_SETTINGS, import_ctranslate2, to_ctranslate2
from ..settings import flag
from .command import MODEL_FOLDER, MODEL_WITHOUT_TOKENIZER, TOKENIZER_FOLDER, Command, Paths, Use, output_folder
from .contract import ArgumentParser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-export-ctranslate2", description=__doc__)
    parser.add_argument("--model_dir", required=True, help="folder saved by save_pretrained (model + tokenizer)")
    parser.add_argument("--out_dir", required=True, help="CTranslate2 model folder to write")
    parser.add_argument("--quantization", **flag(EXPORT_SETTINGS["quantization"]))
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: --model_dir)")
    parser.add_argument("--max_positions", **flag(EXPORT_SETTINGS["max_positions"]))
    parser.add_argument(
        "--overwrite", "--force", action="store_true", help="replace a non-empty --out_dir (--force: its older name)"
    )
    return parser


def _paths(args) -> Paths:
    model = MODEL_FOLDER if args.tokenizer is None else MODEL_WITHOUT_TOKENIZER
    return Paths(
        inputs=(Use("--model_dir", args.model_dir, model), Use("--tokenizer", args.tokenizer, TOKENIZER_FOLDER)),
        outputs=(Use("--out_dir", args.out_dir, output_folder(CT2_FOLDER)),),
        overwrite=args.overwrite,
    )


def _resolve(args, checked):
    import_ctranslate2()  # The optional dependency is checked before any work.
    args.model_dir = checked["--model_dir"]  # The folder itself, for a Hub id its snapshot in the Hub's cache.
    return args


def _run(args) -> None:
    print(
        to_ctranslate2(
            args.model_dir,
            args.out_dir,
            quantization=args.quantization,
            tokenizer=args.tokenizer,
            max_positions=args.max_positions,
            force=args.overwrite,
        )
    )


COMMAND = Command(
    "export_ctranslate2", "vaswani-export-ctranslate2", build_parser, _run, paths=_paths, resolve=_resolve
)
main = COMMAND.main

if __name__ == "__main__":  # For python -m vaswani_hf.cli.<tool>; the console script goes through vaswani_commands.
    sys.exit(main())
