#!/usr/bin/env python
"""Write a native transformers `MarianMTModel` folder from a saved vaswani_hf model folder.

    python scripts/export_marian.py --model_dir outputs/model --out outputs/model-marian [--repo_id org/name-marian]
        [--source_lang en --target_lang de]

The conversion is exact (`vaswani_hf.convert.to_marian`: same function, fp32 logits agree to ~1e-6; Marian reloads
its LayerNorms with eps 1e-5). The folder loads with plain `MarianMTModel.from_pretrained` and
`AutoTokenizer.from_pretrained` (our byte-level BPE tokenizer.json; Marian's SentencePiece `MarianTokenizer` does
not apply), so the Hub widget and Inference Endpoints, which run only built-in architectures, can serve it.
The card reuses `metrics.json` of the model folder (written by `vaswani_hf.hub.write_model_card`); without it,
give --source_lang/--target_lang for a card without scores. Push the result with scripts/push_to_hub.py.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from vaswani_hf.hub import export_marian, read_card_inputs  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="saved vaswani_hf model folder (with tokenizer)")
    parser.add_argument("--out", required=True, help="output folder for the MarianMTModel repository")
    parser.add_argument("--repo_id", default=None, help="repository id used in the card's usage snippet")
    parser.add_argument("--source_lang", default=None, help="source language code (if the folder has no metrics.json)")
    parser.add_argument("--target_lang", default=None, help="target language code (if the folder has no metrics.json)")
    args = parser.parse_args(argv)
    training_info = read_card_inputs(args.model_dir).get("training_info")
    if training_info is None and args.source_lang and args.target_lang:
        training_info = {"source_lang": args.source_lang, "target_lang": args.target_lang}
    try:
        out = export_marian(args.model_dir, args.out, training_info=training_info, repo_id=args.repo_id)
    except (FileNotFoundError, ValueError) as error:
        sys.exit(f"error: {error}")
    card = "with README.md" if (out / "README.md").exists() else "without card (give --source_lang/--target_lang)"
    print(f"wrote MarianMTModel folder {out} {card}")


if __name__ == "__main__":
    main()
