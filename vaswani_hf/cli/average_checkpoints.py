"""Average the weights of the last N checkpoints of a run, as the paper does for its results.

Vaswani et al. 2017, Section 6.1: "we used a single model obtained by averaging the last 5 checkpoints, which were
written at 10-minute intervals"; the big models averaged the last 20.

    vaswani-average-checkpoints --run_dir outputs/wmt14-en-de-base --last 5 --out outputs/avg5
    vaswani-average-checkpoints --checkpoints outputs/run/checkpoint-900 outputs/run/checkpoint-1000 --out avg

The output folder holds the averaged `model.safetensors` and the newest checkpoint's config, generation config,
tokenizer and code files, so it loads with `AutoModelForSeq2SeqLM.from_pretrained(out)`; it holds no optimizer state.
Only the files a model folder declares are copied; any other file is named and left out. An existing --out is
replaced only with --overwrite. Checkpoints of different runs (for example another seed, which shows as differing
trainer_state.json histories) are refused unless --allow_other_runs is given.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import io
from ..io.averaging import check_checkpoints_agree
from ..settings import flag, settings_of
from ..training.checkpoints import AVERAGED, last_checkpoints, save_averaged_checkpoint
from .command import SAFETENSORS_CHECKPOINT, Command, Paths, Use, output_folder
from .contract import ArgumentParser


@dataclass
class AverageOptions:
    """Hold the settings that belong to this tool alone."""

    last: int = field(
        default=5,
        metadata={
            "help": "with --run_dir: number of newest checkpoints (Section 6.1: 5, big: 20)",
            "min": 1,
            "max": 10**6,
        },
    )


OPTIONS = settings_of(AverageOptions)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-average-checkpoints", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", help="training output folder holding checkpoint-N folders")
    source.add_argument("--checkpoints", nargs="+", help="explicit checkpoint folders (averaged with equal weight)")
    parser.add_argument("--last", **flag(OPTIONS["last"]))
    parser.add_argument("--out", required=True, help="output model folder")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    parser.add_argument(
        "--allow_other_runs",
        action="store_true",
        help="average checkpoints of independent runs too (refused by default: Section 6.1 averages "
        "the last checkpoints of one run; told apart by their trainer_state.json histories)",
    )
    return parser


def _checkpoints(args) -> tuple[list[Path], str | None]:
    """Return the checkpoint folders to average and a warning, or None, for the user.

    The folders are those of --checkpoints, or else the newest --last checkpoint-N folders of --run_dir. The warning
    says so when --run_dir holds fewer than --last. Raises a UsageError when --run_dir is missing, is a file, holds
    no checkpoint, or holds a checkpoint-* entry that is not a folder.
    """
    if not args.run_dir:
        return [Path(p) for p in args.checkpoints], None
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise io.UsageError(f"--run_dir {run_dir}: {'is a file' if run_dir.exists() else 'folder not found'}")
    for entry in sorted(run_dir.glob("checkpoint-*")):  # A broken entry is named rather than silently passed over.
        if not entry.is_dir():
            raise io.UsageError(
                f"--run_dir {run_dir}: {entry.name} is {io.path_kind(entry)}, not a checkpoint "
                "folder; remove it or give the checkpoints with --checkpoints"
            )
    folders = last_checkpoints(run_dir, args.last)
    if not folders:
        raise io.UsageError(f"--run_dir {run_dir} holds no checkpoint-N folder")
    if len(folders) < args.last:
        return folders, f"warning: asked for the last {args.last} checkpoints, found {len(folders)}"
    return folders, None


def _paths(args) -> Paths:
    """Declare the checkpoints averaged as inputs and --out as the output; keep the folders and warning in `args`.

    Declaring the checkpoints rather than --run_dir lets --out be a new folder inside --run_dir, while it still may
    never be one of the checkpoints.
    """
    folders, args.warning = _checkpoints(args)
    args.folders = folders
    given = "--run_dir" if args.run_dir else "--checkpoints"
    return Paths(
        inputs=[Use(f"{given}'s {folder.name}", folder, SAFETENSORS_CHECKPOINT) for folder in folders],
        outputs=(Use("--out", args.out, output_folder(AVERAGED)),),
        overwrite=args.overwrite,
    )


def _agree(args, checked) -> None:
    """Check that the checkpoints are distinct and share one architecture and one tokenizer.

    They must also come from one run unless --allow_other_runs is given.
    """
    check_checkpoints_agree(args.folders, one_run=not args.allow_other_runs)


def _run(args) -> None:
    if args.warning:
        print(args.warning, file=sys.stderr)
    out = save_averaged_checkpoint(args.folders, args.out, overwrite=args.overwrite, one_run=not args.allow_other_runs)
    print(f"averaged {len(args.folders)} checkpoints ({', '.join(f.name for f in args.folders)}) -> {out}")


COMMAND = Command(
    "average_checkpoints",
    "vaswani-average-checkpoints",
    build_parser,
    _run,
    paths=_paths,
    agree=_agree,
    invoked_name=True,
)
main = COMMAND.main

if __name__ == "__main__":  # For python -m vaswani_hf.cli.<tool>; the console script goes through vaswani_commands.
    sys.exit(main())
