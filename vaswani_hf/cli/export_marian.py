"""Write a native transformers `MarianMTModel` folder from a saved vaswani_hf model folder.

    vaswani-export-marian --model_dir outputs/model --out outputs/model-marian [--repo_id org/name-marian]
        [--source_lang en --target_lang de] [--overwrite]

The conversion is exact (`vaswani_hf.export.marian.to_marian`): the Marian model computes the same function, and
its fp32 logits agree with ours to about 1e-6 (Marian reloads its LayerNorms with eps 1e-5). The folder loads with
plain `MarianMTModel.from_pretrained` and `AutoTokenizer.from_pretrained` (our byte-level BPE tokenizer.json, since
Marian's SentencePiece `MarianTokenizer` does not apply), so the Hub widget and Inference Endpoints, which run only
built-in architectures, can serve it.
The card reuses `metrics.json` of the model folder (written by `vaswani_hf.hub.write_model_card`); without it,
give --source_lang/--target_lang for a card without scores. Push the result with vaswani-push-to-hub.
A model Marian cannot express (learned positions, d_k != d_model / num_heads, or a LayerNorm epsilon farther than
1e-5 from Marian's 1e-5) is refused with a message naming the config.json field. --out appears whole, and an existing
non-empty --out is replaced only with --overwrite.
"""

from __future__ import annotations

import sys

from .. import io
from ..export.marian import MARIAN_FOLDER, export_marian
from ..export.marian_limits import check_marian_exportable
from ..hub.card import read_card_inputs
from .command import MODEL_FOLDER, Command, Paths, Use, output_folder
from .contract import ArgumentParser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-export-marian", description=__doc__)
    parser.add_argument("--model_dir", required=True, help="saved vaswani_hf model folder (with tokenizer)")
    parser.add_argument("--out", required=True, help="output folder for the MarianMTModel repository")
    parser.add_argument(
        "--repo_id", default=None, help="repository id used in the card's usage snippet (default: path/to/model)"
    )
    parser.add_argument(
        "--source_lang", default=None, help="source language code (default: the folder's metrics.json)"
    )
    parser.add_argument(
        "--target_lang", default=None, help="target language code (default: the folder's metrics.json)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --out folder")
    return parser


def _validate(args) -> None:
    if bool(args.source_lang) != bool(args.target_lang):
        raise io.UsageError("give both --source_lang and --target_lang, or neither")


def _paths(args) -> Paths:
    return Paths(
        inputs=(Use("--model_dir", args.model_dir, MODEL_FOLDER),),
        outputs=(Use("--out", args.out, output_folder(MARIAN_FOLDER)),),
        overwrite=args.overwrite,
    )


def _agree(args, checked) -> None:
    check_marian_exportable(checked["--model_dir"])
    args.model_dir = checked["--model_dir"]  # The folder itself, for a Hub id its snapshot in the Hub's cache.


def _run(args) -> None:
    training_info = read_card_inputs(args.model_dir).get("training_info")
    if training_info is None and args.source_lang:
        training_info = {"source_lang": args.source_lang, "target_lang": args.target_lang}
    out = export_marian(
        args.model_dir, args.out, training_info=training_info, repo_id=args.repo_id, overwrite=args.overwrite
    )
    card = "with README.md" if (out / "README.md").exists() else "without card (give --source_lang/--target_lang)"
    print(f"wrote MarianMTModel folder {out} {card}")


COMMAND = Command(
    "export_marian", "vaswani-export-marian", build_parser, _run, paths=_paths, validate=_validate, agree=_agree
)
main = COMMAND.main

if __name__ == "__main__":  # For python -m vaswani_hf.cli.<tool>; the console script goes through vaswani_commands.
    sys.exit(main())
