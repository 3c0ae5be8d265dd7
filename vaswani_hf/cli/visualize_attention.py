"""Plot every attention head of a saved model for one sentence, and print attention diagnostics.

    vaswani-visualize-attention --model_dir outputs/default/model --source "A man is riding a bike." \\
        [--target "Ein Mann fährt Fahrrad."] [--alignment "0-0 1-1 3-2 4-3"] [--num_beams 4] [--format svg] \\
        [--per_head] --out attention/ [--overwrite]

Without --target the model's own translation is plotted (decoded as its generation_config says, or with
--num_beams). --alignment is a word alignment of source and --target in Pharaoh format ("i-j"), counting
whitespace-separated words from 0. Without it, the share of cross-attention on aligned tokens uses the diagonal
heuristic (see vaswani_hf/visualize/).

Writes to --out: {encoder,decoder,cross}_layer{l}.{fmt} (all heads of a layer), cross_alignment.{fmt} (heads
averaged, per layer), diagnostics.{fmt} (per-head entropy, attention mass on padding) and diagnostics.txt, whose
content is also printed. --out appears whole; an existing non-empty one is replaced only with --overwrite. Exits
with status 1 if any real token attends to padding (a finding about the model, reported after the plots).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from .. import io
from ..settings import GENERATION_SETTINGS, device, flag, settings_of
from ..translation.inference import position_limit
from ..visualize import KINDS, MAX_PLOT_TOKENS, visualize
from ..visualize.diagnostics import word_links
from .command import MODEL_FOLDER, Command, Paths, Use, output_folder
from .contract import ArgumentParser

ATTENTION_FOLDER = "attention plot folder"  # The kind of output this tool writes (see vaswani_hf.io.outputs).


@dataclass
class PlotOptions:
    """Hold the settings that belong to this tool alone (the plots' file format)."""

    format: str = field(default="png", metadata={"help": "file format of the plots", "choices": ("png", "svg", "pdf")})


OPTIONS = settings_of(PlotOptions)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="vaswani-visualize-attention", description=__doc__)
    parser.add_argument("--model_dir", required=True, help="saved model folder with its tokenizer")
    parser.add_argument("--source", required=True, help="source sentence")
    parser.add_argument("--target", default=None, help="reference translation (default: the model's translation)")
    parser.add_argument(
        "--alignment",
        default=None,
        help='word alignment of source and --target, e.g. "0-0 1-2" (default: the diagonal heuristic)',
    )
    parser.add_argument("--out", required=True, help="output folder")
    beams = GENERATION_SETTINGS["num_beams"]
    parser.add_argument(
        "--num_beams", **flag(beams, default=None, help=f"{beams.help} (default: the model's generation_config)")
    )
    plot_tokens = GENERATION_SETTINGS["max_new_tokens"].narrowed(max=MAX_PLOT_TOKENS)
    parser.add_argument(
        "--max_new_tokens",
        **flag(
            plot_tokens,
            default=None,
            help=f"cap on the model's own translation (at most {MAX_PLOT_TOKENS}: a plot's size; default: the model's "
            "generation_config)",
        ),
    )
    parser.add_argument("--format", **flag(OPTIONS["format"]))
    parser.add_argument("--per_head", action="store_true", help="also write one file per head")
    parser.add_argument("--device", type=device, default="cpu", help="torch device to run the model on")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --out folder")
    return parser


def alignment_links(alignment: str, source: str, target: str) -> list[tuple[int, int]]:
    """Return the (source word, target word) pairs of a Pharaoh word alignment, each checked against the sentences.

    The links are written "i-j", "i?j" or "ipj", and count whitespace-separated words from 0, as
    `vaswani_hf.visualize.diagnostics.token_alignment_from_words` reads them. Each link must lie within both
    sentences' words, because a link past either sentence would silently align nothing. Raises a UsageError naming a
    link that cannot be read, or naming the link and both sentences' lengths when it lies outside them.
    """
    words = len(source.split()), len(target.split())
    try:
        pairs = word_links(alignment.strip() or "empty")  # An empty --alignment is reported as "empty".
    except ValueError as error:
        raise io.UsageError(
            f"--alignment: {str(error)!r} is not a link 'i-j' (source word i, target word j, "
            '0-based), e.g. --alignment "0-0 1-2"'
        ) from None
    for link, (i, j) in zip(alignment.split(), pairs):
        if i >= words[0] or j >= words[1]:
            raise io.UsageError(
                f"--alignment: link {link!r} pairs source word {i} with target word {j}, but --source "
                f"has {words[0]} words and --target has {words[1]} (0-based: source 0..{words[0] - 1}, "
                f"target 0..{words[1] - 1}); give links within both sentences"
            )
    return pairs


def _check_arguments(args) -> None:
    for option, text in (("--source", args.source), ("--target", args.target)):
        if text is not None and not text.strip():
            raise io.UsageError(
                f"{option} is empty; give a sentence{' or leave --target out' * (option == '--target')}"
            )
    if args.alignment is not None:
        if not args.target:
            raise io.UsageError("--alignment refers to the words of --target: give --target too")
        alignment_links(args.alignment, args.source, args.target)


def _check_lengths(args, model, tokenizer) -> None:
    """Refuse, before any work, a sentence with more tokens than a plot shows or than the model has positions for.

    The position limit applies only to a model with learned position embeddings. Raises a UsageError naming the flag,
    its token count (with </s>) and the limit it passes.
    """
    limit, why = MAX_PLOT_TOKENS, f"an attention plot shows at most {MAX_PLOT_TOKENS} tokens"
    positions = position_limit(model)
    if positions is not None and positions < limit:
        limit, why = positions, f"the model's learned position embeddings cover {positions} positions"
    lengths = {"--source": len(tokenizer(args.source)["input_ids"])}
    if args.target is not None:
        lengths["--target"] = len(tokenizer(text_target=args.target)["input_ids"])
    for option, n in lengths.items():
        if n > limit:
            raise io.UsageError(f"{option}: {n} tokens (with </s>), but {why}; give a shorter sentence")


def _paths(args) -> Paths:
    return Paths(
        inputs=(Use("--model_dir", args.model_dir, MODEL_FOLDER),),
        outputs=(Use("--out", args.out, output_folder(ATTENTION_FOLDER)),),
        overwrite=args.overwrite,
    )


def _resolve(args, checked):
    """Load the model and tokenizer, check the sentences' lengths, and return the plan (args, out, model, tokenizer).

    `out` is the checked --out folder. Everything here runs before anything is computed, so a sentence that is too
    long is refused before the model translates or plots anything.
    """
    # trust_remote_code lets the folder's own code run when the package's classes are not registered, so that any
    # saved model loads. Eager attention is asked for because the fused kernels (SDPA, flash attention) return no
    # attention weights to plot.
    model, tokenizer = io.load_model_folder(
        checked["--model_dir"],
        device=args.device,
        trust_remote_code=True,
        what="--model_dir",
        attn_implementation="eager",
    )
    _check_lengths(args, model, tokenizer)
    return args, checked["--out"], model, tokenizer


def _run(plan) -> int:
    args, out, model, tokenizer = plan
    with io.atomic_output_dir(out, kind=ATTENTION_FOLDER, overwrite=args.overwrite) as tmp:
        result = visualize(
            model,
            tokenizer,
            args.source,
            args.target,
            tmp,
            fmt=args.format,
            num_beams=args.num_beams,
            max_new_tokens=args.max_new_tokens,
            per_head=args.per_head,
            word_alignment=args.alignment,
        )
    print(result["report"])
    print(f"wrote {len(result['files'])} files to {out}")
    leaks = [kind for kind in KINDS if result["diagnostics"]["padding_mass"][kind].max().item() != 0.0]
    if leaks:
        print(f"ERROR: attention mass on padding in {', '.join(leaks)}", file=sys.stderr)
        return 1
    return 0


COMMAND = Command(
    "visualize_attention",
    "vaswani-visualize-attention",
    build_parser,
    _run,
    paths=_paths,
    validate=_check_arguments,
    resolve=_resolve,
)
main = COMMAND.main

if __name__ == "__main__":  # For python -m vaswani_hf.cli.<tool>; the console script goes through vaswani_commands.
    sys.exit(main())
