#!/usr/bin/env python
"""Upload a saved vaswani_hf model folder to the Hugging Face Hub in one commit.

    python scripts/push_to_hub.py --model_dir outputs/model --repo_id org/name [--private] [--revision BRANCH]
        [--dry_run] [--commit_message "..."]

Uploads exactly the files listed by `--dry_run` (see `vaswani_hf.hub.UPLOAD_PATTERNS`): safetensors weights,
config.json with auto_map, the configuration/modeling/pipeline code, tokenizer files, generation_config.json,
metrics and the README.md model card (write it with `vaswani_hf.hub.write_model_card`). The token comes from
HF_TOKEN or the cached login (`hf auth login`) and is never printed. `--dry_run` makes no network call.
The Hub address is huggingface_hub's (`HF_ENDPOINT` to point elsewhere).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from vaswani_hf.hub import push_folder  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="saved model folder (model + tokenizer + card)")
    parser.add_argument("--repo_id", required=True, help="target repository, e.g. org/vaswani-base")
    parser.add_argument("--private", action="store_true", help="create the repository as private (new repos only)")
    parser.add_argument("--revision", default=None, help="branch to commit to (created if missing; default main)")
    parser.add_argument("--dry_run", action="store_true", help="list the files that would be uploaded, and stop")
    parser.add_argument("--commit_message", default="Upload Vaswani Transformer (weights, code, tokenizer, card)")
    args = parser.parse_args(argv)
    try:
        push_folder(args.model_dir, args.repo_id, private=args.private, revision=args.revision,
                    dry_run=args.dry_run, commit_message=args.commit_message)
    except (FileNotFoundError, ValueError, RuntimeError) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
