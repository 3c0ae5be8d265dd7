"""Upload a saved model folder to the Hugging Face Hub in one commit.

    vaswani-push-to-hub --model_dir outputs/model --repo_id org/name [--private] [--revision BRANCH] [--dry_run]
        [--commit_message "..."] [--space_id org/name-demo [--space_only]]

The tool uploads exactly the files that --dry_run lists (`vaswani_hf.hub.upload.list_upload_files`, the files the model
folder declares): the safetensors weights, config.json with auto_map, the model's code files, the tokenizer files,
generation_config.json, the metrics and the README.md model card. The folder and the repository id are checked before
any network call, and a missing, truncated or broken file, a missing code file or an invalid id is one line with exit
status 2. The token comes from HF_TOKEN or the cached login (`hf auth login`) and is never printed; a network or
authentication failure is one line with exit status 1. --dry_run makes no network call. The Hub address is
huggingface_hub's (set HF_ENDPOINT to point elsewhere).

--space_id also creates (or updates) a Gradio Space of that id serving --repo_id: a page that translates with the
paper's decoding and draws every attention head (`vaswani_hf.space`, with its files written by `vaswani_hf.space.push`).
It is uploaded in one commit after the model. --space_only uploads only the Space, for a model repository that exists
already; the repository is checked before the upload, and --model_dir is not given then.
"""

from __future__ import annotations

import sys

from .. import io
from ..hub.upload import DEFAULT_COMMIT_MESSAGE, push_folder
from ..space.push import check_repo_id, push_space
from .command import MODEL_FOLDER, Command, Paths, Use
from .contract import ArgumentParser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-push-to-hub", description=__doc__)
    parser.add_argument(
        "--model_dir",
        default=None,
        help="saved model folder (model + tokenizer + card); required unless --space_only (default: none)",
    )
    parser.add_argument("--repo_id", required=True, help="target repository, e.g. org/vaswani-base")
    parser.add_argument("--private", action="store_true", help="create the repository as private (new repos only)")
    parser.add_argument("--revision", default=None, help="branch to commit to (created if missing; default main)")
    parser.add_argument("--dry_run", action="store_true", help="list the files that would be uploaded, and stop")
    parser.add_argument("--commit_message", default=DEFAULT_COMMIT_MESSAGE, help="the commit's message")
    parser.add_argument(
        "--space_id",
        default=None,
        help="also create/update a Gradio Space of this id that serves --repo_id (e.g. org/name-demo; "
        "default: no Space)",
    )
    parser.add_argument(
        "--space_only",
        action="store_true",
        help="with --space_id: upload only the Space (the model repository exists already)",
    )
    return parser


def _validate(args) -> None:
    """Check that the flags can be combined, and check the Space's id before the model is uploaded."""
    if args.space_only and args.space_id is None:
        raise io.UsageError("--space_only needs --space_id, the Space to create (see --help)")
    if args.space_only and args.model_dir is not None:
        raise io.UsageError(
            "--model_dir and --space_only exclude each other: --space_only uploads no model (drop "
            "--model_dir to update only the Space, or --space_only to push the model too)"
        )
    if args.model_dir is None and not args.space_only:
        raise io.UsageError("the following arguments are required: --model_dir (see --help)")
    if args.space_id is not None:
        check_repo_id(args.space_id, "--space_id")


def _paths(args) -> Paths:
    return Paths(inputs=(Use("--model_dir", args.model_dir, MODEL_FOLDER),))  # --model_dir is None with --space_only.


def _run(args) -> None:
    """Upload the model (unless --space_only), then the Space, or with --dry_run only list what would be uploaded.

    Each upload checks its repository id before any network call.
    """
    if args.model_dir is not None:
        push_folder(
            args.model_dir,
            args.repo_id,
            private=args.private,
            revision=args.revision,
            dry_run=args.dry_run,
            commit_message=args.commit_message,
        )
    if args.space_id is not None:
        push_space(args.repo_id, args.space_id, private=args.private, dry_run=args.dry_run)


COMMAND = Command("push_to_hub", "vaswani-push-to-hub", build_parser, _run, paths=_paths, validate=_validate)
main = COMMAND.main

if __name__ == "__main__":  # For python -m vaswani_hf.cli.<tool>; the console script goes through vaswani_commands.
    sys.exit(main())
