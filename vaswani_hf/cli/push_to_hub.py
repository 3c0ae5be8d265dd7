"""Upload a saved model folder to the Hugging Face Hub in one commit.

    vaswani-push-to-hub --model_dir outputs/model --repo_id org/name [--private] [--revision BRANCH] [--dry_run]
        [--commit_message "..."]

Uploads exactly the files listed by --dry_run (see `vaswani_hf.hub.UPLOAD_PATTERNS`): safetensors weights,
config.json with auto_map, the configuration/modeling/generation/pipeline code, tokenizer files,
generation_config.json, metrics and the README.md model card (written by `vaswani_hf.hub.write_model_card`). The
folder and the repository id are checked before any network call (a missing, truncated or broken file, a missing
code file, an invalid id: one line, exit status 2). The token comes from HF_TOKEN or the cached login (`hf auth
login`) and is never printed; a network or authentication failure is one line, exit status 1. --dry_run makes no
network call. The Hub address is huggingface_hub's (HF_ENDPOINT to point elsewhere).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from .. import io
from .contract import ArgumentParser, run_cli


def build_parser() -> ArgumentParser:
    from ..hub.upload import DEFAULT_COMMIT_MESSAGE

    parser = ArgumentParser(prog="vaswani-push-to-hub", description=__doc__)
    parser.add_argument("--model_dir", required=True, help="saved model folder (model + tokenizer + card)")
    parser.add_argument("--repo_id", required=True, help="target repository, e.g. org/vaswani-base")
    parser.add_argument("--private", action="store_true", help="create the repository as private (new repos only)")
    parser.add_argument("--revision", default=None, help="branch to commit to (created if missing; default main)")
    parser.add_argument("--dry_run", action="store_true", help="list the files that would be uploaded, and stop")
    parser.add_argument("--commit_message", default=DEFAULT_COMMIT_MESSAGE)
    return parser


def _main(argv: Sequence[str]) -> int:
    from ..hub.upload import push_folder

    args = build_parser().parse_args(argv)
    model_dir = io.check_model_folder(Path(args.model_dir), what="--model_dir")
    push_folder(model_dir, args.repo_id, private=args.private, revision=args.revision, dry_run=args.dry_run,
                commit_message=args.commit_message)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv, prog="vaswani-push-to-hub")


if __name__ == "__main__":
    sys.exit(main())
